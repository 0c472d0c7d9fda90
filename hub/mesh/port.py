"""The hub's mesh port: who the peers are, and every envelope in and out.

:class:`MeshPort` owns the peers and the scopes their certificates grant (from the device
registry), the revoked set, the hub's :class:`~sync.envelope.Sealer` (counter in
``HOME/hub-counter.db``), the openers (MQTT uplinks, presence with its own replay lane,
large gRPC catch-up requests), the replay guard (restored from ``hub.db``), the drop counters
and last-seen times, and a reference to the hub's MQTT session (attached once it runs).

The hub's components take the port, or only the callables they need from it, as
:class:`hub.voice.wake_arbiter.WakeArbiter` takes ``send`` and ``drop``:

- :meth:`send` seals a message to one device and publishes it to its inbox;
  :meth:`broadcast` seals one to every node;
- :meth:`drop` counts and logs a refused envelope, :meth:`count` any other event;
- :meth:`commit` records an accepted envelope's counter in the replay window and returns
  the window to persist (inside the store transaction that keeps the message's effect);
- :meth:`receive` opens an MQTT message (``None``: dropped, counted);
- :meth:`serve` is "envelope in, envelope out" for gRPC handlers;
- :meth:`rotate_group_key` makes a new mesh group key epoch (``HOME/keys/epochs.json``) and
  :meth:`send_group_key` boxes the current one to a device (:mod:`provisioning.epochs`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TypeVar

from google.protobuf.message import Message

from hub.errors import HubError
from hub.mesh.ratelimit import PublishRate, RateLimits
from hub.timeline import ReplayState
from protos import mesh_pb2
from protos.clock import now_ms
from provisioning.epochs import home_keys
from provisioning.home import Home
from provisioning.registry import DeviceRecord
from sync import topics
from sync.counter import PersistentCounter
from sync.envelope import (
    HUB,
    MAX_ENVELOPE_BYTES,
    Dropped,
    DropReason,
    Opened,
    Opener,
    Peer,
    ReplayGuard,
    Sealer,
)
from sync.mqtt import MqttSession
from sync.scopes import kind_refusal

log = logging.getLogger(__name__)

MAX_SYNC_BYTES = 64 * 1024 * 1024
"""bytes: the largest catch-up envelope accepted over gRPC"""

M = TypeVar("M", bound=Message)
Counts = Iterable[tuple[str, int]]


class MeshPort:
    def __init__(
        self,
        home: Home,
        *,
        replay_windows: Iterable[ReplayState],
        counter_path: Path,
        durable: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.home_id = home.home_id
        self._durable = durable
        """awaited before every envelope leaves: what it tells a peer is on disk by then
        (:meth:`storage.group_commit.GroupCommit.flush`)"""
        self.peers: dict[str, Peer] = {}
        self.scopes: dict[str, tuple[str, ...]] = {}
        """device → the scopes its certificate grants"""
        self.revoked: set[str] = set()
        self.drops: Counter[str] = Counter()
        self.last_seen: dict[str, int] = {}
        """device → ms of its last accepted message, not yet written to hub.db"""
        self.replay = ReplayGuard()
        try:
            limits = RateLimits.of(home.config.get("publish_rate"))
        except ValueError as exc:
            raise HubError("home.config", reason=str(exc)) from None
        self.rate = PublishRate(limits)
        """per-device publish rate on MQTT (:mod:`hub.mesh.ratelimit`)"""
        for sender, highest, seen in replay_windows:
            self.replay.restore(sender, highest, seen)
        self.group_keys = home_keys(home.path, home.group_key)
        """the mesh group key epochs: the current one seals broadcasts, it and the previous
        one open what devices broadcast"""

        def opener(replay: ReplayGuard, max_bytes: int = MAX_ENVELOPE_BYTES) -> Opener:
            return Opener(
                home_id=home.home_id,
                node_id=HUB,
                box_key=home.hub_keys.box,
                lookup=self.peers.get,
                replay=replay,
                group_key=home.group_key,
                group_keys=self.group_keys,
                max_bytes=max_bytes,
            )

        self.opener = opener(self.replay)
        # Presence has its own replay lane: a last will is signed when a device connects,
        # so its counter is older than what the device sends afterwards.
        self.presence_opener = opener(ReplayGuard())
        # Catch-up requests arrive over gRPC and may be large; same keys and replay window.
        self.sync_opener = opener(self.replay, MAX_SYNC_BYTES)
        self._counter = PersistentCounter(counter_path, block=256)
        self.sealer = Sealer(
            home_id=home.home_id,
            node_id=HUB,
            sign_key=home.hub_keys.sign,
            box_key=home.hub_keys.box,
            next_counter=self._counter.next,
            group_key=home.group_key,
            group_keys=self.group_keys,
        )
        self.mqtt: MqttSession | None = None
        """the hub's MQTT session (attached by the daemon once it runs)"""

    def close(self) -> None:
        self._counter.close()

    # ------------------------------------------------------------------ peers
    def load(self, records: Iterable[DeviceRecord]) -> set[str]:
        """Take the registry's devices as the peers; returns the newly revoked ones."""
        before = set(self.revoked)
        self.peers.clear()
        for rec in records:
            self.peers[rec.device_id] = Peer(rec.device_id, rec.sign_pk, rec.box_pk, rec.revoked)
            self.scopes[rec.device_id] = tuple(rec.scopes)
        self.revoked = {d for d, p in self.peers.items() if p.revoked}
        return self.revoked - before

    def scopes_of(self, device: str) -> tuple[str, ...]:
        return self.scopes.get(device, ())

    @property
    def connected(self) -> bool:
        """the MQTT session is attached and connected"""
        return self.mqtt is not None and self.mqtt.connected.is_set()

    # ------------------------------------------------------------------ out
    async def send(self, device: str, kind: int, msg: Message, trace_id: str | None = None) -> bool:
        """Seal ``msg`` to ``device`` and publish it to its inbox; ``False`` (nothing sent)
        for a device unknown or revoked, or without a session. Raises if the publish fails."""
        peer = self.peers.get(device)
        if peer is None or peer.revoked or self.mqtt is None:
            log.info("kind %d not sent to %s: unknown, revoked or no session", kind, device)
            return False
        await self.durable()
        data = self.sealer.seal(
            kind, msg, recipient=device, recipient_box_pk=peer.box_pk, trace_id=trace_id
        )
        await self.mqtt.publish(topics.inbox(self.home_id, device), data, qos=1)
        return True

    async def broadcast(self, kind: int, msg: Message) -> None:
        """Seal ``msg`` to every node and publish it on the mesh topic (nothing without a
        session; raises if the publish fails)."""
        if self.mqtt is None:
            return
        await self.durable()
        data = self.sealer.seal(kind, msg, recipient="*")
        await self.mqtt.publish(topics.mesh(self.home_id), data, qos=1)

    async def durable(self) -> None:
        """Wait until what the hub wrote so far is on disk (nothing to wait for without a
        group commit: every store then syncs its own commits)."""
        if self._durable is not None:
            await self._durable()

    # ------------------------------------------------------------------ group key epochs
    async def send_group_key(self, device: str) -> bool:
        """Box the current group key epoch to ``device`` (nothing while it is epoch 0, the
        key already in every bundle); ``False`` when not sent."""
        current = self.group_keys.current
        if current.number == 0:
            return False
        msg = mesh_pb2.GroupKey(epoch=current.number, key=current.key, made_ms=current.made_ms)
        return await self.send(device, mesh_pb2.GROUP_KEY, msg)

    async def distribute_group_key(self) -> int:
        """Box the current epoch to every device that is not revoked; returns how many were
        sent (a device offline now gets it queued by the broker and again when it is back
        online)."""
        sent = 0
        for device, peer in sorted(self.peers.items()):
            if peer.revoked:
                continue
            try:
                sent += await self.send_group_key(device)
            except Exception as exc:
                log.info("group key not sent to %s now (sent when it is online): %s", device, exc)
        return sent

    async def rotate_group_key(self, why: str) -> int:
        """Make a new epoch (``why``: revocation, periodic) and send it; returns its number."""
        self.group_keys.reload()
        epoch = self.group_keys.rotate()
        self.count(f"group_key.rotated.{why}")
        sent = await self.distribute_group_key()
        log.warning(
            "mesh group key rotated (%s): epoch %d, sent to %d devices", why, epoch.number, sent
        )
        return epoch.number

    # ------------------------------------------------------------------ accounting
    def drop(self, reason: DropReason, sender: str, detail: str) -> None:
        self.drops[f"rejected.{reason.value}"] += 1
        log.warning("dropped envelope from %s: %s %s", sender[:64], reason.value, detail[:120])

    def count(self, name: str) -> None:
        self.drops[name] += 1

    def commit(self, opened: Opened) -> ReplayState | None:
        """Record ``opened``'s counter as used; returns the sender's window to persist."""
        self.replay.commit(opened.sender, opened.counter)
        return (opened.sender, *state) if (state := self.replay.state(opened.sender)) else None

    def flush(self, add_counts: Callable[[Counts, Counts], None]) -> None:
        """Hand the drop counters and last-seen times to ``add_counts`` (``hub.db``), then
        forget them (kept when it fails)."""
        if self.drops or self.last_seen:
            try:
                add_counts(self.drops.items(), self.last_seen.items())
                self.drops.clear()
                self.last_seen.clear()
            except Exception:
                log.exception("could not store drop counters")

    # ------------------------------------------------------------------ in
    def receive(self, topic: str, payload: bytes) -> Opened | None:
        """Open one MQTT message (its counter not yet committed: the handler does, with
        what the message changes; a presence's is, in its own lane); ``None`` when it is
        dropped or an expected repeat — a refused message never moves a replay window."""
        device = topics.device_of(topic)
        if not self.rate.admit(device or "?", len(payload)):  # before any cryptography
            self.count("rejected.rate_limited")
            return None
        is_presence = topic.endswith("/presence")
        if is_presence:
            if not payload:  # a cleared retained message
                return None
            result = self.presence_opener.open(payload, commit=False)
        else:
            result = self.opener.open(payload, commit=False)
        if isinstance(result, Dropped):
            if is_presence and result.reason in (DropReason.REPLAYED, DropReason.STALE):
                # A retained presence or last will the broker hands out again: expected.
                self.count("ignored.presence_repeat")
                log.debug("repeated presence from %s ignored", result.sender)
                return None
            self.drop(result.reason, result.sender or device or "?", result.detail)
            return None
        if result.sender != device:
            self.drop(DropReason.SPOOFED_TOPIC, result.sender, f"sent on {topic}")
            return None
        self.last_seen[result.sender] = now_ms()
        if result.kind == mesh_pb2.PRESENCE and not is_presence:
            self.drop(DropReason.MALFORMED, result.sender, "presence outside presence topic")
            return None
        if self.refuse(result) is not None:
            return None
        if is_presence:  # its own lane, committed here (every other kind: by the daemon)
            self.presence_opener.replay.commit(result.sender, result.counter)
        return result

    def repeated(self, opened: Opened) -> bool:
        """Whether ``opened`` was committed since it was opened (a second copy opened
        before the first was handled, :mod:`hub.mesh.lanes`); counted as replayed. A
        presence has its own lane, committed when it is received."""
        if opened.kind == mesh_pb2.PRESENCE:
            return False
        if self.replay.check(opened.sender, opened.counter) is None:
            return False
        self.drop(DropReason.REPLAYED, opened.sender, f"kind {opened.kind} again")
        return True

    def refuse(self, opened: Opened) -> DropReason | None:
        """Why ``opened`` is refused (``None``: its sender's certificate lets it send that
        kind, boxed or sealed as it is — :mod:`sync.scopes`, the one table). A refusal is
        counted; the replay window does not move (the counter is committed after this)."""
        refusal = kind_refusal(opened, self.scopes_of(opened.sender))
        if refusal is None:
            return None
        self.drop(refusal[0], opened.sender, refusal[1])
        return refusal[0]

    async def serve(
        self,
        data: bytes,
        *,
        request: type[M],
        kind: int,
        what: str,
        error: str,
        handle: Callable[[Opened, M], Awaitable[Message]],
        large: bool = False,
    ) -> bytes:
        """A gRPC call's envelope in, its answer's envelope out: open ``data`` (a
        ``request`` from an enrolled device, counter committed) or raise
        :class:`HubError` ``error`` with the drop counted; ``handle`` makes the answer, which
        goes back sealed to the sender as ``kind``. ``large`` takes catch-up sized requests."""
        opened = (self.sync_opener if large else self.opener).open(data, commit=False)
        if isinstance(opened, Dropped):
            self.drop(opened.reason, opened.sender or "?", f"{what}: {opened.detail}")
            raise HubError(error, reason=opened.reason.value)
        payload = opened.payload
        peer = self.peers.get(opened.sender)
        if not isinstance(payload, request) or peer is None:
            self.drop(DropReason.MALFORMED, opened.sender, f"{what} of another kind")
            raise HubError(error, reason="malformed")
        if (refused := self.refuse(opened)) is not None:
            raise HubError(error, reason=refused.value)
        self.replay.commit(opened.sender, opened.counter)
        self.last_seen[opened.sender] = now_ms()
        answer = await handle(opened, payload)
        await self.durable()
        return self.sealer.seal(
            kind,
            answer,
            recipient=opened.sender,
            recipient_box_pk=peer.box_pk,
            trace_id=opened.trace_id,
        )
