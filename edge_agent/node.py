"""A device's presence on the mesh: hub location, MQTT session, outbox, replies and ACKs.

Used by both ``yimi edge run`` (long-lived: presence with a last will, a persistent MQTT
session, a flusher that empties the outbox whenever the hub is reachable) and ``yimi say``
(one utterance, then exit). Both may run at once on one bundle: they share the counter
and the outbox (SQLite) and serialise flushing with a file lock; the hub deduplicates by
utterance id, so whichever process delivers an item, it lands once.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aiomqtt
from google.protobuf.message import Message

from edge_agent.acks import DelayedAcks
from edge_agent.port import Handlers
from edge_agent.replies import SeenReplies
from edge_agent.roles import role_handlers
from protos import mesh_pb2, sync_pb2, voice_pb2
from protos.clock import now_ms
from provisioning.bundle import Bundle
from provisioning.epochs import bundle_keys
from storage.errors import StorageError
from storage.group_commit import GroupCommit
from sync import topics
from sync.backoff import Backoff
from sync.counter import PersistentCounter
from sync.envelope import (
    HUB,
    Dropped,
    Opened,
    Opener,
    Peer,
    ReplayGuard,
    Sealer,
    new_trace_id,
    random_id,
)
from sync.errors import SyncError
from sync.hub_rpc import MAX_RPC_BYTES, sync_exchange
from sync.locate import HubAddress, HubLocator
from sync.mqtt import HANDSHAKE_TIMEOUT_S, MqttSession
from sync.outbox import Outbox
from sync.replicas import ReplicaSet
from sync.replication import DeviceReplication
from sync.tasks import TaskOwner, woken
from sync.tls import ClientTls

log = logging.getLogger(__name__)

REPLY_TIMEOUT_S = 10.0
"""seconds to wait for the hub's reply to one outbox item before backing off"""
FLUSH_POLL_S = 2.0
"""seconds between outbox checks of a long-lived node (items queued by other processes)"""
COUNTER_BLOCK = 32
"""envelope counter values reserved per synced write (a turn seals two or three messages)"""
COUNTER_BLOCK_S = 2.0
"""seconds a reserved block is used at most (the bundle's counter file is shared by its
processes: see :mod:`sync.counter`)"""
RECEIVED_SYNC_S = 0.5
"""seconds the replica logs' appends of received updates wait for their ``fdatasync``: every
update received meanwhile shares it (a turn brings one, a busy mesh dozens a second). They
are the hub's, durable there: a device that loses the last of them in a power cut gets them
again when it catches up. Anything this node sends about its replicas flushes first."""

ReplyHandler = Callable[[mesh_pb2.Reply, Opened, bool], Awaitable[None]]
"""called with (reply chunk, its envelope, fresh): ``fresh`` the first time a process of
this bundle gets this chunk (``False`` for a copy the hub re-sent or another process of the
bundle already took: ACK it again, do not show it twice)"""


@dataclass(frozen=True)
class NodeOptions:
    mode: str = "edge"
    """``edge`` (long-lived, presence) or ``say`` (transient)"""
    hub: str | None = None
    """explicit ``HOST:PORT`` of the hub's gRPC; otherwise last good address, then zeroconf"""
    connect_timeout: float = HANDSHAKE_TIMEOUT_S
    """seconds the broker may take to take a connection (:data:`sync.mqtt.HANDSHAKE_TIMEOUT_S`)"""


class DeviceNode:
    def __init__(self, bundle: Bundle, options: NodeOptions, on_reply: ReplyHandler) -> None:
        self.tls = ClientTls.for_bundle(bundle)  # before anything is opened: may refuse
        """TLS to the hub, pinned to the bundle's home CA (:mod:`sync.tls`)"""
        self.bundle = bundle
        self.options = options
        self._on_reply = on_reply
        state = bundle.state_dir
        self.counter = PersistentCounter(
            state / "counter.db", block=COUNTER_BLOCK, max_age_s=COUNTER_BLOCK_S
        )
        self.outbox = Outbox(state / "outbox.db")
        self.seen = SeenReplies(state / "replies.db")
        self.group_keys = bundle_keys(bundle.path, bundle.group_key, bundle.group_epoch)
        """the mesh group key epochs this bundle holds (new ones come boxed from the hub)"""
        self.sealer = Sealer.for_device(bundle, self.counter.next, self.group_keys)
        hub_peer = Peer(HUB, bundle.hub_sign_pk, bundle.hub_box_pk)
        self.opener = Opener(
            home_id=bundle.home_id,
            node_id=bundle.device_id,
            box_key=bundle.keys.box,
            lookup=lambda sender: hub_peer if sender == HUB else None,
            replay=ReplayGuard(),
            group_key=bundle.group_key,
            group_keys=self.group_keys,
        )
        hub = bundle.hub
        self.locator = HubLocator(
            pinned=bundle.pinned_fingerprint,
            home_id=bundle.home_id,
            tls=self.tls,
            explicit=options.hub,
            hint=(str(hub.get("host") or ""), int(hub.get("grpc_port") or 0)),
            cache=state / "hub.json",
        )
        self.session_id = secrets.token_hex(8)
        self._waiters: dict[str, asyncio.Future[mesh_pb2.Reply]] = {}
        self._wake = asyncio.Event()
        self._relinked = asyncio.Event()
        """set on every (re)connection of the MQTT session"""
        self._stack = AsyncExitStack()
        self.mqtt: MqttSession | None = None
        self.hub_address: HubAddress | None = None
        self.replica_sync = GroupCommit()
        """syncs the replica logs' appends of received updates: one ``fdatasync`` per
        written document for all the updates that came in :data:`RECEIVED_SYNC_S`, in its
        own thread (was: one per document per update, on the loop); flushed before anything
        this node sends about its replicas (live changes, catch-up pushes) and at exit"""
        self._replica_flusher: asyncio.Task[None] | None = None
        self.replicas = ReplicaSet(
            state / "replicas", window_days=bundle.profile.window_days, group=self.replica_sync
        )
        self.replication = DeviceReplication(
            self.replicas,
            broadcast=self._broadcast_sync,
            request=self._sync_request,
            is_connected=self._is_connected,
            scopes=bundle.certificate.scopes,
            flush=self.replica_sync.flush,
        )
        self.sync_opener = Opener(
            home_id=bundle.home_id,
            node_id=bundle.device_id,
            box_key=bundle.keys.box,
            lookup=lambda sender: hub_peer if sender == HUB else None,
            replay=self.opener.replay,
            group_key=bundle.group_key,
            group_keys=self.group_keys,
            max_bytes=MAX_RPC_BYTES,
        )
        self.handlers: Handlers = role_handlers(
            bundle, self.send, show_cards=options.mode == "edge"
        )
        """more handlers by kind (confirmation cards on a phone or a HUD)"""
        self.acks = DelayedAcks(self._send_ack, name=f"acks-{bundle.name}")
        """the ACKs of reply chunks, gathered per reply (:mod:`edge_agent.acks`)"""
        self.revoked = asyncio.Event()
        self.delivered = 0
        """outbox items this process saw answered"""

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> DeviceNode:
        try:
            await self._start()
        except BaseException:
            await self._stack.aclose()
            self._close_files()
            raise
        return self

    async def _start(self) -> None:
        edge = self.options.mode == "edge"
        b = self.bundle
        await self._stack.enter_async_context(self.replica_sync)  # exits last: syncs the rest
        self._stack.push_async_callback(self._stop_replica_flusher)
        self.mqtt = await self._stack.enter_async_context(
            MqttSession(
                target=self._target,
                username=b.mqtt_username,
                password=b.mqtt_password,
                identifier=f"{b.device_id}-{'edge' if edge else 'say-' + secrets.token_hex(3)}",
                transient=not edge,  # `yimi say` must not take over the edge daemon's session
                slot_locks=b.state_dir,  # nor another `yimi say`'s
                subscriptions=[topics.inbox(b.home_id, b.device_id), topics.mesh(b.home_id)],
                on_message=self._on_message,
                tls=self.tls,
                on_connect=self._on_connect,
                will=self._will if edge else None,
                clean_session=not edge,
                backoff=Backoff(initial=0.2, cap=10.0),
                connect_timeout=self.options.connect_timeout,
            )
        )
        await self._stack.enter_async_context(self.acks)  # exits first: sends what it holds
        if edge:
            await self._stack.enter_async_context(self.replication)
            tasks = await self._stack.enter_async_context(TaskOwner(f"edge-{b.name}"))
            tasks.spawn(self._flusher(), "outbox-flush")

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if (
                self.options.mode == "edge"
                and self.mqtt is not None
                and self.mqtt.connected.is_set()
            ):
                await self._publish_presence(mesh_pb2.OFFLINE)
        except SyncError:
            pass
        finally:
            await self._stack.aclose()
            self._close_files()

    def _close_files(self) -> None:
        self.counter.close()
        self.outbox.close()
        self.seen.close()

    async def _target(self) -> tuple[str, int]:
        self.hub_address = await self.locator.locate()
        return self.hub_address.host, self.hub_address.mqtt_port

    # ------------------------------------------------------------------ presence
    def _presence_envelope(self, state: int) -> bytes:
        return self.sealer.seal(
            mesh_pb2.PRESENCE,
            mesh_pb2.Presence(
                state=state,  # type: ignore[arg-type]
                session=self.session_id,
                since_ms=now_ms(),
            ),
            recipient=HUB,
            recipient_box_pk=self.bundle.hub_box_pk,
        )

    def _will(self) -> aiomqtt.Will:
        self.session_id = secrets.token_hex(8)
        topic = topics.presence(self.bundle.home_id, self.bundle.device_id)
        # Not retained: the hub's broker refuses retained messages (``retain_available
        # false``); the hub's persistent session queues presence while it is down.
        return aiomqtt.Will(topic, self._presence_envelope(mesh_pb2.OFFLINE), qos=1)

    async def _publish_presence(self, state: int) -> None:
        assert self.mqtt is not None
        topic = topics.presence(self.bundle.home_id, self.bundle.device_id)
        await self.mqtt.publish(topic, self._presence_envelope(state), qos=1)

    async def _on_connect(self, client: aiomqtt.Client) -> None:
        self._relinked.set()
        if self.options.mode == "edge":
            await self._publish_presence(mesh_pb2.ONLINE)
            self.replication.wake()
            log.info("connected to hub %s", self.hub_address)
        self._wake.set()

    # ------------------------------------------------------------------ sending
    def queue_utterance(self, text: str, *, channel: str | None = None) -> tuple[str, int]:
        """Commit an utterance to the outbox; returns (id, items waiting)."""
        now = now_ms()
        utt = mesh_pb2.Utterance(
            id=random_id("u-"),
            text=text,
            channel=channel or self.bundle.profile.channel or self.bundle.name,
            started_ms=now,
            ended_ms=now,
            source="typed",
        )
        waiting = self.outbox.put(
            utt.id, mesh_pb2.UTTERANCE, utt.SerializeToString(), new_trace_id(), now
        )
        self._wake.set()
        return utt.id, waiting

    def queue_voice(self, utt: mesh_pb2.Utterance, audio: list[bytes], trace_id: str) -> int:
        """Commit a heard utterance and its encoded audio (sent as ``AUDIO_CHUNK`` envelopes
        before it) to the outbox; returns how many items are waiting."""
        waiting = self.outbox.put(
            utt.id,
            mesh_pb2.UTTERANCE,
            utt.SerializeToString(),
            trace_id,
            now_ms(),
            chunks=audio,
        )
        self._wake.set()
        return waiting

    def withdraw(self, item_id: str) -> bool:
        """Take a queued item (and its audio) out of the outbox before it is answered."""
        waiter = self._waiters.pop(item_id, None)
        if waiter is not None:
            waiter.cancel()  # a flush waiting for its reply moves on
        return self.outbox.done(item_id)

    async def send(self, kind: int, payload: Message, *, trace_id: str | None = None) -> None:
        """Seal ``payload`` to the hub and publish it now (not queued); SyncError if the
        session is down (a :class:`~edge_agent.port.SendToHub`)."""
        if self.mqtt is None:
            raise SyncError("hub.unreachable", target="hub", reason="not connected")
        data = self.sealer.seal(
            kind,
            payload,
            recipient=HUB,
            recipient_box_pk=self.bundle.hub_box_pk,
            trace_id=trace_id,
        )
        await self.mqtt.publish(
            topics.uplink(self.bundle.home_id, self.bundle.device_id), data, qos=1
        )

    async def flush(self, *, stop_after: str | None = None) -> bool:
        """Send every queued item in order, each after the previous one's reply.

        Returns ``True`` when the outbox was emptied (or ``stop_after`` was answered).
        Raises :class:`SyncError` if the hub does not answer in time.
        """
        while True:
            with self.outbox.flushing(block=False) as mine:
                if mine:
                    return await self._flush_locked(stop_after)
            # another process is flushing: wait until it is done (or our item is answered)
            if stop_after is not None and not self.outbox.contains(stop_after):
                return True
            await asyncio.sleep(0.05)

    async def _flush_locked(self, stop_after: str | None) -> bool:
        assert self.mqtt is not None
        hub_box = self.bundle.hub_box_pk
        uplink = topics.uplink(self.bundle.home_id, self.bundle.device_id)
        while True:
            items = self.outbox.pending(limit=1)
            if not items:
                return True
            item = items[0]
            waiter = self._waiters.setdefault(item.id, asyncio.get_running_loop().create_future())
            payload = mesh_pb2.Utterance.FromString(item.payload)
            chunks = self.outbox.chunks(item.id)
            self.outbox.attempted(item.id)
            link = self.mqtt.connections
            for index, piece in enumerate(chunks):  # a voice utterance's audio, before it
                chunk = voice_pb2.AudioChunk(
                    utterance_id=item.id, index=index, total=len(chunks), data=piece
                )
                sealed = self.sealer.seal(
                    mesh_pb2.AUDIO_CHUNK,
                    chunk,
                    recipient=HUB,
                    recipient_box_pk=hub_box,
                    trace_id=item.trace_id,
                )
                await self.mqtt.publish(uplink, sealed, qos=1)
            data = self.sealer.seal(
                item.kind, payload, recipient=HUB, recipient_box_pk=hub_box, trace_id=item.trace_id
            )
            await self.mqtt.publish(uplink, data, qos=1)
            if not await self._reply_or_relink(waiter, link):
                continue  # reconnected meanwhile: what was in flight may be lost, send it again
            self.outbox.done(item.id, answered=True)  # mostly done already: by the reply
            if item.id == stop_after:
                return True

    async def _reply_or_relink(self, waiter: asyncio.Future[mesh_pb2.Reply], link: int) -> bool:
        """Wait for ``waiter``; ``False`` as soon as the MQTT session has reconnected since
        connection number ``link``. Raises :class:`SyncError` after ``REPLY_TIMEOUT_S``."""
        assert self.mqtt is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + REPLY_TIMEOUT_S
        while not waiter.done():
            if self.mqtt.connections != link:
                return False
            self._relinked.clear()
            relinked = asyncio.ensure_future(self._relinked.wait())
            try:
                either: set[asyncio.Future[Any]] = {waiter, relinked}
                done, _ = await asyncio.wait(
                    either,
                    timeout=max(0.0, deadline - loop.time()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                relinked.cancel()
            if not done:
                raise SyncError("say.timeout", seconds=REPLY_TIMEOUT_S)
        return True

    async def wait_reply(self, item_id: str) -> mesh_pb2.Reply:
        fut = self._waiters.setdefault(item_id, asyncio.get_running_loop().create_future())
        return await fut

    async def _flusher(self) -> None:
        backoff = Backoff(initial=0.5, cap=15.0)
        while True:
            await woken(self._wake, FLUSH_POLL_S)
            self._wake.clear()
            if self.mqtt is None or not self.mqtt.connected.is_set() or not self.outbox.has_items():
                continue
            try:
                await self.flush()
                backoff.reset()
            except SyncError as exc:
                delay = backoff.next_delay()
                log.info("outbox: %s; retrying in %.1f s", exc, delay)
                await asyncio.sleep(delay)

    # ------------------------------------------------------------------ receiving
    async def _on_message(self, message: aiomqtt.Message) -> None:
        payload = message.payload if isinstance(message.payload, bytes) else b""
        result = self.opener.open(payload)
        if isinstance(result, Dropped):
            log.warning(
                "dropped message on %s: %s %s", message.topic, result.reason.value, result.detail
            )
            return
        extra = self.handlers.get(result.kind)
        if extra is not None:
            await extra(result)
            return
        if result.kind == mesh_pb2.REPLY:
            await self._handle_reply(result)
        elif result.kind == mesh_pb2.SYNC_UPDATE:
            assert isinstance(result.payload, sync_pb2.SyncUpdate)
            self.replication.on_hub_update(result.payload)
            self._sync_replicas_soon()
        elif result.kind == mesh_pb2.GROUP_KEY:
            self._on_group_key(result)
        elif result.kind == mesh_pb2.REVOCATION:
            rev = result.payload
            assert isinstance(rev, mesh_pb2.Revocation)
            if rev.device_id == self.bundle.device_id:
                log.error("this device was revoked by the hub")
                self.revoked.set()

    def _on_group_key(self, opened: Opened) -> None:
        """A new mesh group key epoch, boxed to this device by the hub: seal broadcasts with
        it from now on, and catch up on what was broadcast with it before it arrived."""
        msg = opened.payload
        assert isinstance(msg, mesh_pb2.GroupKey)
        if opened.recipient != self.bundle.device_id:  # only ever boxed to one device
            log.warning("group key not boxed to this device: ignored")
            return
        self.group_keys.reload()  # another process of this bundle may have taken one
        if self.group_keys.add(msg.epoch, bytes(msg.key), msg.made_ms):
            log.info("mesh group key epoch %d received", msg.epoch)
            if self.options.mode == "edge":
                self.replication.wake()

    async def _handle_reply(self, opened: Opened) -> None:
        """A reply chunk: the first one answers the outbox item (the next may be sent);
        each chunk is handed on once as fresh (see :data:`ReplyHandler`)."""
        reply = opened.payload
        assert isinstance(reply, mesh_pb2.Reply)
        if reply.utterance_id and self.outbox.done(reply.utterance_id, answered=True):
            self.delivered += 1
        fresh = self.seen.claim(reply.id, reply.chunk)
        fut = self._waiters.pop(reply.utterance_id, None) if reply.utterance_id else None
        if fut is not None and not fut.done():
            fut.set_result(reply)
        await self._on_reply(reply, opened, fresh)

    # ------------------------------------------------------------------ replication
    def _sync_replicas_soon(self) -> None:
        """Have the replica appends of received updates synced, off the loop, within
        :data:`RECEIVED_SYNC_S`; updates that arrive meanwhile share the sync."""
        if self.replica_sync.pending and (
            self._replica_flusher is None or self._replica_flusher.done()
        ):
            self._replica_flusher = asyncio.create_task(
                self._flush_replicas(), name=f"replica-sync:{self.bundle.name}"
            )

    async def _flush_replicas(self) -> None:
        await asyncio.sleep(RECEIVED_SYNC_S)  # gathers the updates of a burst (see there)
        while self.replica_sync.pending:
            try:
                await self.replica_sync.flush()
            except StorageError as exc:  # the files stay marked: the next update retries
                log.error("replica logs not synced: %s", exc)
                return

    async def _stop_replica_flusher(self) -> None:
        task, self._replica_flusher = self._replica_flusher, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _is_connected(self) -> bool:
        return self.mqtt is not None and self.mqtt.connected.is_set()

    async def _broadcast_sync(self, update: sync_pb2.SyncUpdate) -> None:
        assert self.mqtt is not None
        data = self.sealer.seal(mesh_pb2.SYNC_UPDATE, update, recipient="*")
        await self.mqtt.publish(topics.sync(self.bundle.home_id, self.bundle.device_id), data)

    async def _sync_request(self, request: sync_pb2.SyncRequest) -> sync_pb2.SyncResponse:
        address = self.hub_address or await self.locator.locate()
        data = self.sealer.seal(
            mesh_pb2.SYNC_REQUEST, request, recipient=HUB, recipient_box_pk=self.bundle.hub_box_pk
        )
        raw = await sync_exchange(address.host, address.grpc_port, data, self.sealer, self.tls)
        answer = self.sync_opener.open(raw)
        if isinstance(answer, Dropped) or not isinstance(answer.payload, sync_pb2.SyncResponse):
            reason = answer.reason.value if isinstance(answer, Dropped) else "wrong kind"
            raise SyncError("hub.unreachable", target=address.host, reason=f"sync answer {reason}")
        return answer.payload

    async def ack(self, reply: mesh_pb2.Reply, state: int = mesh_pb2.RENDERED) -> None:
        """Tell the hub the reply chunk was shown (``RENDERED``) or spoken (``PLAYED``): the
        ACK of the reply's final chunk at once, with the chunks before it that were held; a
        chunk before it, held for the next ones up to :data:`edge_agent.acks.ACK_DELAY_S`."""
        await self.acks.ack(reply, state)

    async def _send_ack(self, ack: mesh_pb2.DeliveryAck) -> None:
        if self.mqtt is None:
            raise SyncError("hub.unreachable", target="broker", reason="not connected")
        data = self.sealer.seal(
            mesh_pb2.DELIVERY_ACK, ack, recipient=HUB, recipient_box_pk=self.bundle.hub_box_pk
        )
        await self.mqtt.publish(
            topics.uplink(self.bundle.home_id, self.bundle.device_id), data, qos=1
        )
