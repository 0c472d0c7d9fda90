"""Per-device publish rate on the hub's MQTT uplinks (issue 15).

Mosquitto has no per-client publish rate, so the hub keeps one itself: every message a device
publishes under its own topics (the broker ACL binds the topic to the login, and the login to
the client id) is charged to that device's two token buckets — messages and bytes — *before*
any signature check or decryption. A message over either bucket is dropped and counted
(``rejected.rate_limited``), so a flooding device costs the hub a dictionary lookup per
message, and only that device's own messages are lost (its outbox resends what matters).

The defaults leave room for the heaviest legitimate burst — a heard utterance of
:data:`sync.outbox.MAX_CHUNKS` audio chunks of 192 KiB (6 MiB) plus its envelope — and for a
device's steady chatter (acks, wake claims, presence, sync updates) well below the rate.
``publish_rate:`` in ``home.yaml`` changes them (``messages_per_s``, ``burst_messages``,
``bytes_per_s``, ``burst_bytes``); the round-trip bench raises them for its flood.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

MESSAGES_PER_S = 50.0
BURST_MESSAGES = 200.0
BYTES_PER_S = 2.0 * 1024 * 1024
BURST_BYTES = 16.0 * 1024 * 1024
MAX_TRACKED = 4096
"""devices with a bucket (a bound, whatever topics reach the hub)"""
REPORT_EVERY = 10.0
"""seconds between two log lines about one device's dropped messages"""


@dataclass(frozen=True)
class RateLimits:
    messages_per_s: float = MESSAGES_PER_S
    burst_messages: float = BURST_MESSAGES
    bytes_per_s: float = BYTES_PER_S
    """bytes per second"""
    burst_bytes: float = BURST_BYTES
    """bytes"""

    @staticmethod
    def of(config: object) -> RateLimits:
        """``publish_rate:`` in ``home.yaml`` (any of the four fields; the rest default).
        Raises ``ValueError`` naming a field that is not a positive number."""
        if config is None:
            return RateLimits()
        if not isinstance(config, Mapping):
            raise ValueError("publish_rate: expected a mapping")
        names = {f.name for f in dataclasses.fields(RateLimits)}
        if unknown := sorted(set(config) - names):
            raise ValueError(f"publish_rate: unknown field(s) {', '.join(map(str, unknown))}")
        values: dict[str, float] = {}
        for name, value in config.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"publish_rate.{name}: expected a positive number, not {value!r}")
            values[str(name)] = float(value)
        return RateLimits(**values)


@dataclass
class _Bucket:
    messages: float
    size: float
    at: float
    dropped: int = 0
    """dropped since the last log line"""
    reported: float = -REPORT_EVERY


@dataclass
class PublishRate:
    """Token buckets by device; :meth:`admit` charges one message."""

    limits: RateLimits = field(default_factory=RateLimits)
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def admit(self, device: str, size: int) -> bool:
        """Whether ``device`` may have a message of ``size`` bytes handled now (charged)."""
        lim, now = self.limits, self.clock()
        b = self._buckets.get(device)
        if b is None:
            if len(self._buckets) >= MAX_TRACKED:
                self._buckets.pop(next(iter(self._buckets)))  # the oldest
            b = self._buckets[device] = _Bucket(lim.burst_messages, lim.burst_bytes, now)
        elapsed = max(0.0, now - b.at)
        b.at = now
        b.messages = min(lim.burst_messages, b.messages + elapsed * lim.messages_per_s)
        b.size = min(lim.burst_bytes, b.size + elapsed * lim.bytes_per_s)
        if b.messages >= 1.0 and b.size >= size:
            b.messages -= 1.0
            b.size -= size
            return True
        b.dropped += 1
        if now - b.reported >= REPORT_EVERY:
            log.warning(
                "device %s over its publish rate (%g msg/s, %g KiB/s): %d message(s) dropped",
                device[:64],
                lim.messages_per_s,
                lim.bytes_per_s / 1024,
                b.dropped,
            )
            b.dropped = 0
            b.reported = now
        return False

    def forget(self, device: str) -> None:
        self._buckets.pop(device, None)
