"""The hub daemon: broker, gRPC, zeroconf advert, and the authority over what arrives.

:class:`HubDaemon` is an async context manager that owns everything it starts: the
mosquitto process, the gRPC server, the advertisement, the MQTT session and its named
tasks; leaving it stops them all. Incoming envelopes go through one table of handlers by
kind; every drop is counted by reason and logged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import aiomqtt
import grpc
from google.protobuf.message import Message
from zeroconf import get_all_addresses

from hub.brain.providers import ProviderStore
from hub.errors import HubError
from hub.gateway.courier import MeshConsent
from hub.mesh.broker import Broker, BrokerAccount
from hub.mesh.grpc_server import HubService, start_server
from hub.timeline import HubStore, ReplyMaker, StoredReply
from hub.turns.answering import Turns, typed_scope
from hub.voice.hearing import HubVoice, authority_scope
from hub.voice.voiceprints import VoiceprintMesh
from hub.voice.wake_arbiter import Decision, WakeArbiter
from protos import mesh_pb2, sync_pb2
from protos.version import VERSION
from provisioning.credentials import mosquitto_hash
from provisioning.home import Home
from provisioning.registry import DeviceRecord, Registry
from sync import discovery, topics
from sync import documents as docs
from sync.counter import PersistentCounter
from sync.envelope import (
    HUB,
    Dropped,
    DropReason,
    Opened,
    Opener,
    Peer,
    ReplayGuard,
    Sealer,
)
from sync.errors import SyncError
from sync.mqtt import MqttSession
from sync.replicas import ReplicaSet
from sync.replication import HubReplication
from sync.tasks import TaskOwner

log = logging.getLogger(__name__)

REGISTRY_POLL_S = 0.2
"""seconds between checks of the registry for new devices and revocations"""
STATS_FLUSH_S = 0.5
"""seconds between writes of drop counters to hub.db"""
COMPACT_AT_BYTES = 4 * 1024 * 1024
"""bytes of a document's update log after which the hub compacts it (shallow snapshot)"""
MAX_SYNC_BYTES = 64 * 1024 * 1024
"""bytes: the largest catch-up envelope accepted over gRPC"""

Handler = Callable[[Opened], Awaitable[None]]


@dataclass(frozen=True)
class HubOptions:
    mqtt_port: int
    grpc_port: int
    bind: str = "0.0.0.0"
    """address the broker and gRPC listen on"""
    advertise: bool = True


class HubDaemon:
    def __init__(self, home: Home, options: HubOptions) -> None:
        self.home = home
        self.options = options
        self.store = HubStore(home.path / "hub.db")
        self.registry = Registry(home.path / "registry.db")
        self.peers: dict[str, Peer] = {}
        self.scopes: dict[str, tuple[str, ...]] = {}
        """device → the scopes its certificate grants"""
        self.revoked: set[str] = set()
        self.drops: Counter[str] = Counter()
        self.last_seen: dict[str, int] = {}
        """device → ms of its last accepted message, not yet written to hub.db"""
        self.replay = ReplayGuard()
        for sender, highest, seen in self.store.replay_windows():
            self.replay.restore(sender, highest, seen)
        self.opener = Opener(
            home_id=home.home_id,
            node_id=HUB,
            box_key=home.hub_keys.box,
            lookup=self.peers.get,
            replay=self.replay,
            group_key=home.group_key,
        )
        # Presence has its own replay lane: a last will is signed when a device connects,
        # so its counter is older than what the device sends afterwards.
        self.presence_opener = Opener(
            home_id=home.home_id,
            node_id=HUB,
            box_key=home.hub_keys.box,
            lookup=self.peers.get,
            replay=ReplayGuard(),
            group_key=home.group_key,
        )
        self._counter = PersistentCounter(home.path / "hub-counter.db", block=256)
        self.sealer = Sealer(
            home_id=home.home_id,
            node_id=HUB,
            sign_key=home.hub_keys.sign,
            box_key=home.hub_keys.box,
            next_counter=self._counter.next,
            group_key=home.group_key,
        )
        self.consent = MeshConsent(self)
        """the capability gateway and its cards (``self.consent.gateway``)"""
        self.turns = Turns(self)
        """admission, the brain (``self.turns.brain``), delivery with ACKs, activity entries"""
        self.consent.on_receipt = self.turns.on_receipt
        self.consent.package_env = self.turns.package_env
        self.voice = VoiceprintMesh(self)
        """voiceprint authority (``self.voice.authority``): enrolment, distribution, scope"""
        self.wake = WakeArbiter(self._send_decision, drop=self._drop)
        """wake arbitration: of the devices that heard one wake, one answers"""
        self.hearing = HubVoice(
            home=home.path,
            config=home.config,
            ingest=self._ingest_turn,
            send=self._send_to,
            drop=self._drop,
            commit=self._commit_counter,
            answered=lambda uid: self.store.admitted(uid) is not None,
            count=self._count,
            arbiter=self.wake,
            scope=authority_scope(self.voice.authority, self.voice.channel_of),
            providers=lambda: ProviderStore.for_home(home),
        )
        """voice utterances: audio pieces, transcription, scope, then the timeline path"""
        self.handlers: dict[int, Handler] = {
            mesh_pb2.UTTERANCE: self._on_utterance,
            mesh_pb2.DELIVERY_ACK: self.turns.on_ack,
            mesh_pb2.APPROVAL: self.consent.on_approval,
            mesh_pb2.EXEC_RESULT: self.consent.on_exec_result,
            mesh_pb2.SYNC_UPDATE: self._on_sync_update,
            mesh_pb2.AUDIO_CHUNK: self.hearing.on_chunk,
            mesh_pb2.WAKE_CLAIM: self._on_wake_claim,
            mesh_pb2.TRUST_WINDOW: self.voice.on_trust_window,
        }
        self.replicas = ReplicaSet(home.path / "replicas", compact_at=COMPACT_AT_BYTES)
        self.sync = HubReplication(
            self.replicas, broadcast=self._broadcast_sync, sequence=self.store.sequence_entries
        )
        # Catch-up requests arrive over gRPC and may be large; same keys and replay window.
        self.sync_opener = Opener(
            home_id=home.home_id,
            node_id=HUB,
            box_key=home.hub_keys.box,
            lookup=self.peers.get,
            replay=self.replay,
            group_key=home.group_key,
            max_bytes=MAX_SYNC_BYTES,
        )
        self._stack = AsyncExitStack()
        self.broker: Broker | None = None
        self.mqtt: MqttSession | None = None
        self.grpc: grpc.aio.Server | None = None
        self._registry_version = -1
        self._hub_hash = mosquitto_hash(home.broker_password)
        self.ready = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> HubDaemon:
        try:
            await self._start()
        except BaseException:
            await self._stack.aclose()
            self._close_files()
            raise
        return self

    async def _start(self) -> None:
        opts, home = self.options, self.home
        self.store.mark_all_offline()
        self._load_registry()
        self.broker = await self._stack.enter_async_context(
            Broker(
                home.path / "broker",
                home_id=home.home_id,
                host=opts.bind,
                port=opts.mqtt_port,
                accounts=self._accounts(),
            )
        )
        service = HubService(
            home,
            mqtt_port=opts.mqtt_port,
            grpc_port=opts.grpc_port,
            version=VERSION,
            on_enrolled=self._refresh_registry,
            on_sync=self._serve_sync,
            on_enrol=self.voice.serve_enrol,
        )
        self.grpc = await start_server(service, opts.bind, opts.grpc_port)
        self._stack.push_async_callback(self.grpc.stop, 1.0)
        if opts.advertise:
            await self._stack.enter_async_context(
                discovery.HubAdvertiser(
                    home_id=home.home_id,
                    fingerprint=home.fingerprint,
                    grpc_port=opts.grpc_port,
                    mqtt_port=opts.mqtt_port,
                    version=VERSION,
                    addresses=advertise_addresses(opts.bind),
                )
            )
        host = "127.0.0.1" if opts.bind in ("0.0.0.0", "") else opts.bind

        async def target() -> tuple[str, int]:
            return host, opts.mqtt_port

        self.mqtt = await self._stack.enter_async_context(
            MqttSession(
                target=target,
                username=HUB,
                password=home.broker_password,
                identifier=f"hub-{home.home_id}",
                subscriptions=[
                    topics.all_uplinks(home.home_id),
                    topics.all_presence(home.home_id),
                    topics.all_sync(home.home_id),
                ],
                on_message=self._on_message,
                clean_session=False,
            )
        )
        await self._stack.enter_async_context(self.sync)
        await self._stack.enter_async_context(self.consent)
        await self._stack.enter_async_context(self.turns)
        await self._stack.enter_async_context(self.voice)
        await self._stack.enter_async_context(self.wake)
        await self._stack.enter_async_context(self.hearing)
        tasks = await self._stack.enter_async_context(TaskOwner("hub"))
        tasks.spawn(self._watch_registry(), "registry-watch")
        tasks.spawn(self._flush_stats(), "stats")
        self._write_pidfile()
        self._stack.callback(self._remove_pidfile)
        await asyncio.wait_for(self.mqtt.connected.wait(), timeout=15)
        await self.sync.publish(self._reconcile())
        # Hello: devices that talked while we were not subscribed catch up now.
        try:
            await self._broadcast_sync(sync_pb2.SyncUpdate())
        except SyncError as exc:
            log.info("hello not broadcast: %s", exc)
        self.ready.set()
        log.info(
            "hub %s up: mqtt %s:%d, grpc %s:%d, fingerprint %s",
            home.home_id,
            opts.bind,
            opts.mqtt_port,
            opts.bind,
            opts.grpc_port,
            home.fingerprint,
        )

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self._stack.aclose()
        finally:
            self._flush_drops()
            self._close_files()

    def _close_files(self) -> None:
        self._counter.close()
        self.store.close()
        self.registry.close()
        self.voice.close()

    def _write_pidfile(self) -> None:
        (self.home.path / "hub.pid").write_text(str(os.getpid()))

    def _remove_pidfile(self) -> None:
        (self.home.path / "hub.pid").unlink(missing_ok=True)

    # ------------------------------------------------------------------ registry
    def _load_registry(self) -> list[DeviceRecord]:
        records = self.registry.devices()
        self._registry_version = self.registry.data_version()
        self.peers.clear()
        for rec in records:
            self.peers[rec.device_id] = Peer(rec.device_id, rec.sign_pk, rec.box_pk, rec.revoked)
            self.scopes[rec.device_id] = tuple(rec.scopes)
        return records

    def _accounts(self) -> list[BrokerAccount]:
        hashes = {r.device_id: r.mqtt_hash for r in self.registry.devices()}
        accounts = [BrokerAccount(HUB, self._hub_hash, "hub")]
        accounts += [
            BrokerAccount(p.node_id, hashes[p.node_id], "device")
            for p in self.peers.values()
            if not p.revoked and p.node_id in hashes
        ]
        return accounts

    async def _refresh_registry(self) -> None:
        before = {d for d, p in self.peers.items() if p.revoked}
        self._load_registry()
        newly_revoked = {d for d, p in self.peers.items() if p.revoked} - before
        if self.broker is not None:
            await self.broker.update_accounts(self._accounts())
        for device_id in sorted(newly_revoked):
            log.warning("device %s revoked: its messages are now refused", device_id)
            await self._broadcast(
                mesh_pb2.REVOCATION,
                mesh_pb2.Revocation(device_id=device_id, revoked_ms=int(time.time() * 1000)),
            )

    async def _watch_registry(self) -> None:
        while True:
            await asyncio.sleep(REGISTRY_POLL_S)
            try:
                if self.registry.data_version() != self._registry_version:
                    await self._refresh_registry()
            except Exception:
                log.exception("registry refresh failed")

    # ------------------------------------------------------------------ incoming
    async def _on_message(self, message: aiomqtt.Message) -> None:
        topic = message.topic.value
        device = topics.device_of(topic)
        payload = message.payload if isinstance(message.payload, bytes) else b""
        is_presence = topic.endswith("/presence")
        if is_presence:
            if not payload:  # a cleared retained message
                return
            result = self.presence_opener.open(payload)
        else:
            result = self.opener.open(payload, commit=False)
        if isinstance(result, Dropped):
            if is_presence and result.reason in (DropReason.REPLAYED, DropReason.STALE):
                # A retained presence or last will the broker hands out again: expected.
                self.drops["ignored.presence_repeat"] += 1
                log.debug("repeated presence from %s ignored", result.sender)
                return
            self._drop(result.reason, result.sender or device or "?", result.detail)
            return
        if result.sender != device:
            self._drop(DropReason.SPOOFED_TOPIC, result.sender, f"sent on {topic}")
            return
        self.last_seen[result.sender] = int(time.time() * 1000)
        if result.kind == mesh_pb2.PRESENCE:
            if is_presence:
                await self._on_presence(result)
            else:
                self._drop(DropReason.MALFORMED, result.sender, "presence outside presence topic")
            return
        handler = self.handlers.get(result.kind)
        if handler is None:
            self._drop(DropReason.MALFORMED, result.sender, f"kind {result.kind} not accepted")
            return
        await handler(result)

    def _drop(self, reason: DropReason, sender: str, detail: str) -> None:
        self.drops[f"rejected.{reason.value}"] += 1
        log.warning("dropped envelope from %s: %s %s", sender[:64], reason.value, detail[:120])

    def _commit_counter(self, opened: Opened) -> tuple[str, int, bytes] | None:
        self.replay.commit(opened.sender, opened.counter)
        return (opened.sender, *state) if (state := self.replay.state(opened.sender)) else None

    def _count(self, name: str) -> None:
        self.drops[name] += 1

    async def _on_utterance(self, opened: Opened) -> None:
        utt = opened.payload
        assert isinstance(utt, mesh_pb2.Utterance)
        if not utt.id or len(utt.id) > 128 or len(utt.text) > 16_000:
            self._drop(DropReason.MALFORMED, opened.sender, "utterance id or text")
            return
        if utt.HasField("voice"):  # heard: transcribed off the loop, then _ingest_turn
            await self.hearing.on_utterance(opened)
            return
        # typed text signed by the device's own key: the owner's (see hub/turns/answering.py)
        scope = typed_scope(self.scopes.get(opened.sender, ()))
        if scope is None:
            self.replay.commit(opened.sender, opened.counter)
            self.drops["rejected.no_utter_scope"] += 1
            log.warning("utterance from %s refused: its certificate has no 'utter'", opened.sender)
            return
        meta: dict[str, object] = {
            "channel": utt.channel,
            "source": utt.source or "typed",
            "counter": opened.counter,
            "scope": scope,
            "scope_reason": "typed_on_owner_device",
        }
        await self._ingest_turn(opened, utt.text, meta, None)

    async def _ingest_turn(
        self, opened: Opened, text: str, meta: dict[str, object], make_reply: ReplyMaker | None
    ) -> None:
        """Put an utterance (typed, or a voice transcript) on the timeline and answer it:
        through the brain (``make_reply`` None: admitted, answered by ``self.turns`` off
        the message loop), or at once with ``make_reply``'s words (a voice utterance whose
        audio could not be used)."""
        utt = opened.payload
        assert isinstance(utt, mesh_pb2.Utterance)
        if make_reply is None:
            await self.turns.admit(opened, text, meta)
            return
        known = self.store.admitted(utt.id)
        if known is not None:  # on the timeline already: its reply again, never a new one
            self._commit_counter(opened)
            await self.turns.repeat(known, opened.sender)
            return
        now = int(time.time() * 1000)
        reply, duplicate = self.store.ingest_utterance(
            utterance_id=utt.id,
            device=opened.sender,
            text=text,
            ts_ms=utt.started_ms or opened.time_ms,
            received_ms=now,
            trace_id=opened.trace_id,
            meta=meta,
            make_reply=make_reply,
            replay_state=self._commit_counter(opened),
        )
        if duplicate:
            log.info(
                "utterance %s from %s already on the timeline: reply re-sent", utt.id, opened.sender
            )
        await self._send_reply(reply)
        if not duplicate:
            turn = [
                docs.Entry(
                    utt.id,
                    opened.sender,
                    utt.started_ms or opened.time_ms,
                    "utterance",
                    text,
                    reply.utterance_seq,
                ),
                docs.Entry(reply.id, HUB, now, "reply", reply.text, reply.reply_seq),
            ]
            await self.sync.publish(self.sync.add_sequenced(turn))

    async def _send_reply(self, reply: StoredReply) -> None:
        device = reply.device
        peer = self.peers.get(device)
        if peer is None or peer.revoked or self.mqtt is None:
            return
        data = self.sealer.seal(
            mesh_pb2.REPLY,
            mesh_pb2.Reply(
                id=reply.id,
                utterance_id=reply.utterance_id,
                text=reply.text,
                placeholder=reply.placeholder,
                seq=reply.utterance_seq,
                reply_seq=reply.reply_seq,
                chunk=0,
                final=True,
                brain="hub",
            ),
            recipient=device,
            recipient_box_pk=peer.box_pk,
            trace_id=reply.trace_id,
        )
        try:
            await self.mqtt.publish(topics.inbox(self.home.home_id, device), data, qos=1)
        except Exception as exc:  # the device will get it on its next ONLINE
            log.info("reply to %s not sent now: %s", device, exc)

    async def _send_to(
        self, device: str, kind: int, payload: Message, trace_id: str | None = None
    ) -> None:
        """Seal ``payload`` to ``device`` and publish it to its inbox (raises if the publish
        fails; a device unknown or revoked gets nothing)."""
        peer = self.peers.get(device)
        if peer is None or peer.revoked or self.mqtt is None:
            log.info("kind %d not sent to %s: unknown, revoked or no session", kind, device)
            return
        data = self.sealer.seal(
            kind, payload, recipient=device, recipient_box_pk=peer.box_pk, trace_id=trace_id
        )
        await self.mqtt.publish(topics.inbox(self.home.home_id, device), data, qos=1)

    async def _on_wake_claim(self, opened: Opened) -> None:
        self.replay.commit(opened.sender, opened.counter)
        await self.wake.on_claim(opened)

    async def _send_decision(self, decision: Decision) -> None:
        await self._send_to(decision.device, mesh_pb2.WAKE_DECISION, decision.message())

    async def _on_presence(self, opened: Opened) -> None:
        pres = opened.payload
        assert isinstance(pres, mesh_pb2.Presence)
        now = int(time.time() * 1000)
        current = self.store.presence().get(opened.sender)
        if pres.state == mesh_pb2.ONLINE:
            self.store.set_presence(opened.sender, "online", pres.session, pres.since_ms, now)
            await self.turns.resend(opened.sender)
            await self.consent.on_online(opened.sender)
            await self.voice.on_online(opened.sender)
        elif pres.state == mesh_pb2.OFFLINE:
            if current is None or current.session == pres.session:
                self.store.set_presence(opened.sender, "offline", pres.session, pres.since_ms, now)

    async def _broadcast(self, kind: int, payload: mesh_pb2.Revocation) -> None:
        if self.mqtt is None or not self.mqtt.connected.is_set():
            return
        data = self.sealer.seal(kind, payload, recipient="*")
        try:
            await self.mqtt.publish(topics.mesh(self.home.home_id), data, qos=1)
        except Exception as exc:
            log.info("broadcast not sent: %s", exc)

    # ------------------------------------------------------------------ replication
    def _reconcile(self) -> list[sync_pb2.DocUpdate]:
        """Make the CRDT documents agree with the SQLite timeline (the source of ``seq``).

        Entries only the CRDT has get their ``seq``; entries only SQLite has (or whose ``seq``
        in the CRDT differs) are written into the documents. Runs at every start, so a crash
        between the two writes cannot leave them apart.
        """
        timeline_docs = {d for d in self.replicas.doc_ids() if d.startswith(docs.TIMELINE)}
        updates = self.sync.sequence_new(timeline_docs, HUB)
        rows = [
            docs.Entry(e.id, e.device, e.ts_ms, e.kind, e.text, e.seq)
            for e in self.store.entries(limit=10**9)
        ]
        updates += self.sync.add_sequenced(rows)
        if updates:
            log.info("reconciled timeline documents with hub.db: %d updates", len(updates))
        return updates

    async def _broadcast_sync(self, update: sync_pb2.SyncUpdate) -> None:
        if self.mqtt is None:
            return
        data = self.sealer.seal(mesh_pb2.SYNC_UPDATE, update, recipient="*")
        await self.mqtt.publish(topics.mesh(self.home.home_id), data, qos=1)

    async def _on_sync_update(self, opened: Opened) -> None:
        update = opened.payload
        assert isinstance(update, sync_pb2.SyncUpdate)
        self.replay.commit(opened.sender, opened.counter)
        changed, refused = self.sync.apply_from_device(list(update.updates), opened.sender)
        for _ in refused:
            self.drops["rejected.sync_update"] += 1
        await self.sync.publish(changed)

    async def _serve_sync(self, data: bytes) -> bytes:
        """``Hub.Sync``: a SYNC_REQUEST envelope in, a SYNC_RESPONSE envelope out."""
        opened = self.sync_opener.open(data)
        if isinstance(opened, Dropped):
            self._drop(opened.reason, opened.sender or "?", "sync request: " + opened.detail)
            raise HubError("sync.refused", reason=opened.reason.value)
        request = opened.payload
        peer = self.peers.get(opened.sender)
        if not isinstance(request, sync_pb2.SyncRequest) or peer is None:
            self._drop(DropReason.MALFORMED, opened.sender, "sync request of another kind")
            raise HubError("sync.refused", reason="malformed")
        self.last_seen[opened.sender] = int(time.time() * 1000)
        response, changed = self.sync.serve(request, opened.sender)
        await self.sync.publish(changed)
        return self.sealer.seal(
            mesh_pb2.SYNC_RESPONSE,
            response,
            recipient=opened.sender,
            recipient_box_pk=peer.box_pk,
            trace_id=opened.trace_id,
        )

    # ------------------------------------------------------------------ stats
    def _flush_drops(self) -> None:
        if self.drops or self.last_seen:
            try:
                self.store.add_counts(self.drops.items(), self.last_seen.items())
                self.drops.clear()
                self.last_seen.clear()
            except Exception:
                log.exception("could not store drop counters")

    async def _flush_stats(self) -> None:
        while True:
            await asyncio.sleep(STATS_FLUSH_S)
            self._flush_drops()


def advertise_addresses(bind: str) -> list[str]:
    """The addresses the zeroconf advert names: the bind address, else every IPv4 one."""
    if bind not in ("0.0.0.0", ""):
        return [bind]
    chosen = discovery.mdns_interfaces()
    if isinstance(chosen, list):
        return chosen
    found = [a for a in get_all_addresses() if not a.startswith("127.")]
    return found or ["127.0.0.1"]


def hub_pid(home: Path) -> int | None:
    """The pid of the hub running on ``home``, if one is."""
    try:
        pid = int((home / "hub.pid").read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid
