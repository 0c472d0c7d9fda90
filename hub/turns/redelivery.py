"""Reply chunks an online device has not ACKed go again, with backoff.

A reply chunk is sent once when it is made, and again when its device comes online
(``Delivery.resend``). An ACK lost in between — the hub's publish-rate limit dropped it in a
device's burst after a hub restart, the broker lost it, the device was cut off while the
hub still counted it online — left the reply unACKed until that device reconnected: its
facts never said, ``yimi timeline`` showing it undelivered. So while a device is online,
each of its unACKed chunks is sent again :data:`FIRST_S` after a sweep first saw it, then
after twice as long each time up to :data:`MAX_S` (a device that never ACKs costs one
message per chunk every two minutes). Devices ACK a repeat again without showing it twice
(``edge_agent``: a chunk is fresh once).

:class:`Redelivery` keeps the backoff in memory (a restart starts it afresh: the device's
online announcement resends everything anyway). :meth:`Redelivery.due` is the pure core,
with the time passed in; :meth:`Redelivery.run` is the hub's task around it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from hub.timeline import Chunk

log = logging.getLogger(__name__)

FIRST_S = 3.0
"""seconds an unACKed chunk waits (from the sweep that first saw it) before it goes again"""
MAX_S = 120.0
"""the longest wait between two sends of one chunk"""
SWEEP_S = 1.0
"""seconds between two looks at the unACKed chunks of online devices"""

_Key = tuple[str, int, str]
"""(reply id, chunk index, device)"""


@dataclass
class _Due:
    at: float
    """monotonic seconds"""
    wait: float
    """seconds: the wait that led to ``at``"""


class Redelivery:
    """Sends again, through ``send``, the chunks ``unacked(device)`` lists for each device
    ``online()`` names, once each is due."""

    def __init__(
        self,
        *,
        online: Callable[[], Iterable[str]],
        unacked: Callable[[str], list[Chunk]],
        send: Callable[[Chunk], Awaitable[None]],
        clock: Callable[[], float] = time.monotonic,
        first_s: float = FIRST_S,
        max_s: float = MAX_S,
        sweep_s: float = SWEEP_S,
    ) -> None:
        self._online = online
        self._unacked = unacked
        self._send = send
        self._clock = clock
        self.first_s = first_s
        self.max_s = max_s
        self.sweep_s = sweep_s
        self._due: dict[_Key, _Due] = {}
        self.sent = 0
        """chunks sent again so far"""

    def due(self, now: float, unacked: Iterable[Chunk]) -> list[Chunk]:
        """Of the chunks unACKed now, those to send again at ``now`` (their next send is
        put off twice as long); chunks no longer listed are forgotten."""
        out: list[Chunk] = []
        listed: set[_Key] = set()
        for c in unacked:
            key = (c.reply_id, c.index, c.device)
            listed.add(key)
            due = self._due.get(key)
            if due is None:
                self._due[key] = _Due(now + self.first_s, self.first_s)
            elif now >= due.at:
                due.wait = min(due.wait * 2, self.max_s)
                due.at = now + due.wait
                out.append(c)
        for key in self._due.keys() - listed:  # ACKed, or its device went offline
            del self._due[key]
        return out

    async def sweep(self) -> int:
        """Send what is due now; returns how many chunks went."""
        unacked = [c for device in self._online() for c in self._unacked(device)]
        chunks = self.due(self._clock(), unacked)
        for c in chunks:
            await self._send(c)
        if chunks:
            self.sent += len(chunks)
            log.info("%d unACKed reply chunk(s) sent again", len(chunks))
        return len(chunks)

    async def run(self) -> None:
        """Sweep every :attr:`sweep_s` until cancelled (the hub's task)."""
        while True:
            await asyncio.sleep(self.sweep_s)
            try:
                await self.sweep()
            except Exception:  # the next sweep tries again
                log.exception("unACKed reply chunks not swept")
