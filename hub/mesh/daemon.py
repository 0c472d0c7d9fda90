"""The hub daemon: the composition root of the hub, its broker, gRPC and zeroconf advert.

:class:`HubDaemon` builds the mesh port (:mod:`hub.mesh.port`: peers, sealer, openers,
replay window, drop counters), the stores and the components, and hands each only the
callables and stores it needs: admission, answering, delivery and activity
(:mod:`hub.turns`), hearing, voiceprints and wake arbitration (:mod:`hub.voice`), the
gateway on the mesh (:mod:`hub.gateway.courier`). It is an async context manager that owns
everything it starts: the mosquitto process, the gRPC server, the advertisement, the MQTT
session and its named tasks; leaving it stops them all. Incoming envelopes go through one
table of handlers by kind; every drop is counted by reason and logged.

Both listeners speak TLS with the home CA's leaves, made or renewed at every start
(:func:`provisioning.tls.ensure_hub_tls`; ``self.tls`` also holds the web listener's);
:attr:`HubOptions.plaintext` turns TLS off on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import aiomqtt
import grpc
from google.protobuf.message import Message
from zeroconf import get_all_addresses

from hub.archive.archive import Archive
from hub.archive.maintainer import DEFAULT_INTERVAL_S as ARCHIVE_UPKEEP_S
from hub.archive.maintainer import ArchiveMaintainer
from hub.archive.settings import open_archive
from hub.brain.providers import ProviderStore
from hub.brain.replies import say
from hub.errors import HubError
from hub.gateway import Gateway
from hub.gateway.consent import gesture_effects
from hub.gateway.courier import MeshConsent
from hub.memory.home import open_memory
from hub.mesh.broker import Broker, BrokerAccount, BrokerTls
from hub.mesh.entry_batch import EntryBatch
from hub.mesh.grpc_server import HubService, start_server, tls_credentials
from hub.mesh.lanes import LANE_DEPTH, Lanes
from hub.mesh.notify import ServiceNotifier, take_env
from hub.mesh.port import MAX_SYNC_BYTES, MeshPort, now_ms
from hub.mesh.status import HubStatus, remove_status, write_status
from hub.schedule import Clock, JobStore, Scheduler
from hub.schedule.reminders import ReminderDesk
from hub.schedule.timers import TimerDesk
from hub.schedule.watches import WatchDesk
from hub.timeline import HubStore
from hub.turns.activity import ACTIVITY_KIND, Activity, hub_entry
from hub.turns.admission import Admission, utterance_problem
from hub.turns.answering import WARM_UP_S, Turns
from hub.turns.briefing import Briefing, BriefingSettings
from hub.turns.context import ContextSources
from hub.turns.delivery import Delivery
from hub.turns.later import Later
from hub.turns.notify import Notifier, NotifySettings
from hub.turns.redelivery import Redelivery
from hub.turns.watching import Watching, gateway_reader
from hub.vision.describe import provider_describer
from hub.vision.service import Vision
from hub.voice.hearing import Hearing, authority_scope
from hub.voice.voiceprints import VoiceprintAuthority, VoiceprintMesh
from hub.voice.wake_arbiter import Decision, WakeArbiter
from hub.voice.wyoming import (
    Services,
    WyomingServer,
    WyomingSettings,
    WyomingTurns,
    is_wyoming_device,
)
from hub.web.options import WebTls
from protos import mesh_pb2, sync_pb2
from protos.version import VERSION
from provisioning.credentials import mosquitto_hash
from provisioning.epochs import rotation_days
from provisioning.home import Home
from provisioning.registry import Registry
from provisioning.tls import HubTls, is_loopback
from storage.group_commit import GroupCommit
from storage.private import tighten_top, write_private
from sync import discovery, topics
from sync import documents as docs
from sync.envelope import HUB, DropReason, Opened
from sync.errors import SyncError
from sync.mqtt import LOCAL_PORT, MqttSession
from sync.replicas import ReplicaSet
from sync.replication import HubReplication
from sync.tasks import STOP_TIMEOUT_S, Bounded, TaskOwner, within
from sync.tls import ClientTls

if TYPE_CHECKING:
    from hub.web.app import WebApp

log = logging.getLogger(__name__)

REGISTRY_POLL_S = 0.2
"""seconds between checks of the registry for new devices and revocations"""
STATS_FLUSH_S = 0.5
"""seconds between writes of drop counters to hub.db"""
COMPACT_AT_BYTES = 4 * 1024 * 1024
"""bytes of a document's update log after which the hub compacts it (shallow snapshot)"""
__all__ = ["COMPACT_AT_BYTES", "MAX_SYNC_BYTES", "HubDaemon", "HubOptions", "hub_pid"]

Handler = Callable[[Opened], Awaitable[None]]
COMMITTED_BY_HANDLER = frozenset({mesh_pb2.UTTERANCE, mesh_pb2.DELIVERY_ACK})
"""kinds whose handler commits the envelope's counter itself, inside the ``hub.db``
transaction that keeps what the message changed (every other kind's counter is committed as
it arrives, before its handler runs)"""


@dataclass(frozen=True)
class HubOptions:
    mqtt_port: int
    grpc_port: int
    bind: str = "0.0.0.0"
    """address the broker and gRPC listen on"""
    advertise: bool = True
    wyoming_port: int | None = None
    """serve Home Assistant's Wyoming protocol on this port (``yimi wyoming serve``; 0: any
    free port); ``None``: only if home.yaml has ``wyoming:``"""
    plaintext: bool = False
    """no TLS on the broker and gRPC (debugging): only with ``bind`` 127.0.0.1, refused
    (``tls.plaintext_not_loopback``) on any other"""
    web_port: int | None = None
    """port of the phone companion and dashboard pages (``None``: no web pages)"""
    web_tls: WebTls | None = None
    """the pages' HTTPS certificate; without one they are served on 127.0.0.1 only"""
    web_origins: tuple[str, ...] = ()
    """origins the pages are opened at (WebAuthn checks them); default: the loopback ones
    without TLS; with it ``https://HOST:PORT`` of the home's hub host, ``HOSTNAME.local``,
    ``localhost`` and each advertised address"""
    clock: Clock | None = None
    """the scheduler's clock (tests move a :class:`hub.schedule.TestClock`); ``None``: the
    system's"""


class HubDaemon:
    """The composition root: builds the mesh port, the stores and the components, and wires
    each to the narrow callables it needs (no component gets the daemon)."""

    def __init__(self, home: Home, options: HubOptions) -> None:
        if options.plaintext and not is_loopback(options.bind):  # before anything is opened
            raise HubError("tls.plaintext_not_loopback", host=options.bind)
        self.home = home
        self.options = options
        self.group = GroupCommit()
        """the timeline, the brain's tasks and the CRDT logs commit without waiting for the
        disk; the port (every envelope out), the web responses and the Wyoming replies await
        one flush first (:mod:`storage.group_commit`)"""
        self.store = HubStore(home.path / "hub.db", group=self.group)
        self.registry = Registry(home.path / "registry.db")
        self.port = MeshPort(
            home,
            replay_windows=self.store.replay_windows(),
            counter_path=home.path / "hub-counter.db",
            durable=self.group.flush,
        )
        """peers, sealer, openers, replay window, drop counters: every envelope in and out"""
        port = self.port
        self.ready = asyncio.Event()
        """set once the hub is connected and serving"""
        self.memory = open_memory(home.path)
        """the home's L3 assertions and recall index (read for call-time context; the
        timeline is indexed into it); the memory package writes them"""
        archive_now = archive_clock(options.clock)
        self._archive_now = archive_now
        self.archive: Archive | None = None
        """the L5 archive, one instance for hearing and upkeep, on the hub's clock (a test's
        :class:`hub.schedule.FileClock` moves both); ``None``: it could not be opened"""
        try:
            self.archive = open_archive(home.path, now=archive_now)
        except Exception as exc:  # the hub runs without it; every write says "not stored"
            log.error("the archive could not be opened: %s", exc)
        self.archive_upkeep: ArchiveMaintainer | None = None
        """the archive's own upkeep (``yimi archive status`` reads what it did)"""
        self._timeline_grew = asyncio.Event()
        """set when entries join the timeline: the recall indexer takes them"""
        self.replicas = ReplicaSet(
            home.path / "replicas", compact_at=COMPACT_AT_BYTES, group=self.group
        )
        self.sync = HubReplication(
            self.replicas,
            broadcast=self._broadcast_sync,
            sequence=self.store.sequence_entries,
            scopes_of=port.scopes_of,
            count=port.count,
        )
        self.entry_batch = EntryBatch(self.sync.add_sequenced, self.sync.publish, self._published)
        """hub-written entries published together share one change and one broadcast"""
        try:  # glasses: {nod_effects: [send]} — what a nod on the HUD may answer
            nod_effects = gesture_effects(home.config)
        except ValueError as exc:
            raise HubError("glasses.config", reason=str(exc)) from None
        self.consent = MeshConsent(
            home.path,
            audit_signer=home.hub_keys.sign,
            port=port,
            devices=self.registry.devices,
            gesture_effects=nod_effects,
            group=self.group,
        )
        """the capability gateway and its cards (``self.consent.gateway``)"""
        self.delivery = Delivery(
            self.store,
            send=self._send_reply,
            hold=functools.partial(self.entry_batch.hold, soon=True),
            commit=port.commit,
            gateway=self._gateway,
        )
        """every reply the hub sends, and the devices' ACKs"""
        self.redelivery = Redelivery(
            online=self._online_devices,
            unacked=self.store.unacked_chunks,
            send=self.delivery.send_chunk,
        )
        """reply chunks an online device has not ACKed, sent again with backoff"""
        self.scheduler = Scheduler(
            JobStore(home.path / "schedule.db"),
            clock=options.clock,
            tz=str(home.config.get("timezone") or ""),
        )
        """timers, reminders, scheduled runs (``HOME/schedule.db``)"""
        cfg_notify = home.config.get("notifications")
        self.notifier = Notifier(
            self.store,
            self.delivery,
            self.scheduler,
            devices=self._live_devices,
            settings=NotifySettings.of(cfg_notify if isinstance(cfg_notify, Mapping) else None),
            last_used=self.store.last_used_device,
        )
        """notifications: ordered devices, ACK deadline, quiet hours (``notifications:``)"""
        self.later = Later(
            self.store, self.delivery, publish=self._publish_entries, notifier=self.notifier
        )
        """what a due timer or reminder says, and to which device"""
        self.scheduler.handlers.update(self.later.handlers())
        self.scheduler.handlers.update(self.notifier.handlers())
        self.scheduler.on_missed.update(self.later.on_missed())
        self.timers = TimerDesk(self.scheduler)
        self.reminders = ReminderDesk(self.scheduler)
        cfg_brief = home.config.get("briefing")
        self.briefing = Briefing(
            self.store,
            self.reminders,
            self.notifier,
            cards=self._waiting_cards,
            settings=BriefingSettings.of(cfg_brief if isinstance(cfg_brief, Mapping) else None),
        )
        """the morning briefing (``briefing:``), a daily job"""
        self.scheduler.handlers.update(self.briefing.handlers())
        self.briefing.ensure()
        self.watches = WatchDesk(self.scheduler)
        self.watching = Watching(
            self.watches, self.notifier, read_state=gateway_reader(self._gateway)
        )
        """watches: home devices polled, timeline entries pushed (``on_entries``)"""
        self.scheduler.handlers.update(self.watching.handlers())
        cfg_vision = home.config.get("vision")
        self.vision = Vision(
            home.path,
            send=port.send,
            entry=self._photo_entry,
            archive=lambda: open_archive(home.path, now=archive_now),
            drop=port.drop,
            count=port.count,
            config=cfg_vision if isinstance(cfg_vision, Mapping) else None,
            name_of=self._device_name,
            describer=provider_describer(lambda: ProviderStore.for_home(home)),
        )
        """snapshots the owner asks for: archive, faces, text, ``photo`` entries"""
        self.turns = Turns(
            home,
            self.store,
            delivery=self.delivery,
            activity=Activity(self.store, publish=self._publish_entries),
            context=ContextSources(home.path, self.store, self.replicas.notes, self.memory),
            gateway=self._gateway,
            ready=self.ready,
            count=port.count,
            timers=self.timers,
            reminders=self.reminders,
            watches=self.watches,
            vision=self.vision,
            group=self.group,
        )
        """answering: the brain (``self.turns.brain``), one ordered queue per device"""
        self.scheduler.handlers["run"] = self.turns.run_scheduled
        self.admission = Admission(
            self.store,
            turns=self.turns,
            hold=self.entry_batch.hold,
            commit=port.commit,
            count=port.count,
        )
        """the one way onto the timeline for typed and heard utterances"""
        self.consent.on_receipt = self.turns.on_receipt
        self.consent.package_env = self.turns.package_env
        cfg = home.config.get("voiceprint")
        self.voiceprints = VoiceprintMesh(
            VoiceprintAuthority(
                home.path / "voiceprints.db", config=cfg if isinstance(cfg, Mapping) else None
            ),
            port=port,
            devices=self.registry.devices,
        )
        """voiceprint authority (``self.voiceprints.authority``): enrolment, distribution,
        scope"""
        self.wake = WakeArbiter(self._send_decision, drop=port.drop)
        """wake arbitration: of the devices that heard one wake, one answers"""
        self.hearing = Hearing(
            home=home.path,
            config=home.config,
            admit=self.admission.admit,
            send=port.send,
            drop=port.drop,
            commit=port.commit,
            answered=lambda uid: self.store.admitted(uid) is not None,
            count=port.count,
            arbiter=self.wake,
            scope=authority_scope(self.voiceprints.authority, self.voiceprints.channel_of),
            providers=lambda: ProviderStore.for_home(home),
            archive=self.archive or (lambda: open_archive(home.path, now=archive_now)),
            not_stored=self._audio_not_stored,
        )
        """voice utterances: audio pieces, transcription, scope, then admission"""
        self.wyoming_settings = WyomingSettings.from_config(home.config)
        if options.wyoming_port is not None:
            self.wyoming_settings = replace(
                self.wyoming_settings or WyomingSettings(), port=options.wyoming_port
            )
        self.wyoming_turns = WyomingTurns(
            admit=self.admission.admit,
            clients=self.wyoming_settings.clients if self.wyoming_settings else {},
            enrolled=self._enrolled,
            ack=self._ack_wyoming,
        )
        """turns from Home Assistant's Wyoming handle service (guest unless mapped)"""
        self.wyoming: WyomingServer | None = None
        self.web_https = False
        self.service_notify: ServiceNotifier | None = None
        """systemd's readiness protocol (``READY=1`` at the "up" line; see :mod:`.notify`)"""
        self._notify_env = take_env()
        """``$NOTIFY_SOCKET`` and the watchdog's variables: no child process inherits them"""
        self._status: HubStatus | None = None
        """what ``HOME/hub-status.json`` says now (``None``: not written, or removed)"""
        self._since_ms = 0
        self._stopping = False
        self.lanes: Lanes[Opened] = Lanes(self._handle, "hub-lanes")
        """one ordered lane per sender: a device's messages in order, devices concurrently"""
        self.handlers: dict[int, Handler] = {
            mesh_pb2.UTTERANCE: self._on_utterance,
            mesh_pb2.DELIVERY_ACK: self.delivery.on_ack,
            mesh_pb2.APPROVAL: self.consent.on_approval,
            mesh_pb2.EXEC_RESULT: self.consent.on_exec_result,
            mesh_pb2.AUDIT_HEAD: self.consent.on_audit_head,
            mesh_pb2.SYNC_UPDATE: self._on_sync_update,
            mesh_pb2.AUDIO_CHUNK: self.hearing.on_chunk,
            mesh_pb2.AUDIO_PREVIEW: self.hearing.on_preview,
            mesh_pb2.WAKE_CLAIM: self.wake.on_claim,
            mesh_pb2.TRUST_WINDOW: self.voiceprints.on_trust_window,
            mesh_pb2.PHOTO_CHUNK: self.vision.on_chunk,
            mesh_pb2.PHOTO: self.vision.on_photo,
        }
        """kind → its handler (see :data:`COMMITTED_BY_HANDLER` for the replay window)"""
        self._stack = AsyncExitStack()
        self._withdraw_advert: Callable[[], asyncio.Task[None]] | None = None
        """starts withdrawing the mDNS advert (once): the first step of a stop"""
        self.broker: Broker | None = None
        self.mqtt: MqttSession | None = None
        self.grpc: grpc.aio.Server | None = None
        self.tls: HubTls
        """the home CA and the listeners' leaves (set at start)"""
        self._registry_version = -1
        self._last_revoked_ms = 0
        """ms of the latest revocation in the registry (a newer one than the current group
        key epoch makes a new epoch)"""
        self._hub_hash = mosquitto_hash(home.broker_password)
        self.web: WebApp | None = None
        """the companion and dashboard pages, when ``options.web_port`` is set"""

    def _gateway(self) -> Gateway | None:
        return self.consent.gateway

    def _device_name(self, device_id: str) -> str:
        names = {d.device_id: d.name for d in self.registry.devices()}
        return names.get(device_id, device_id)

    async def _photo_entry(
        self, entry_id: str, kind: str, text: str, trace_id: str, meta: dict[str, object]
    ) -> bool:
        return await hub_entry(
            self.store, self._publish_entries, entry_id, kind, text, trace_id=trace_id, meta=meta
        )

    async def _send_reply(
        self, device: str, kind: int, message: Message, trace_id: str | None
    ) -> object:
        """Delivery's send: replies to a Wyoming peer go back on its connection, the rest
        on the mesh."""
        if is_wyoming_device(device) and isinstance(message, mesh_pb2.Reply):
            await self.group.flush()
            await self.wyoming_turns.on_reply(device, message)
            return None
        return await self.port.send(device, kind, message, trace_id)

    def _enrolled(self, device: str) -> bool:
        peer = self.port.peers.get(device)
        return peer is not None and not peer.revoked

    def _ack_wyoming(self, reply: mesh_pb2.Reply, device: str) -> None:
        """A reply handed to the Wyoming peer counts as rendered there."""
        self.store.record_chunk_delivery(reply.id, device, "rendered", now_ms(), None, reply.chunk)

    def _wyoming_server(self, settings: WyomingSettings) -> WyomingServer:
        home = self.home
        speaker: list[Any] = []

        def speak(text: str) -> Any:
            if not speaker:
                from hardware.tts import Speaker

                speaker.append(Speaker.default())
            return speaker[0](text)

        def wake() -> Any:
            from models.wake import detector_for

            return detector_for(home.path)

        services = Services(
            transcribe=self.hearing.transcribe,
            speak=speak,
            wake=wake,
            handle=self.wyoming_turns.turn,
            asr_model=self.hearing.settings.model or "whisper",
        )
        return WyomingServer(
            services,
            host=self.options.bind,
            port=settings.port,
            name=settings.name,
            advertise=self.options.advertise,
            addresses=advertise_addresses(self.options.bind),
        )

    def _waiting_cards(self) -> list[str]:
        gw = self._gateway()
        return [] if gw is None else [c.title for c in gw.consent.pending()]

    def _live_devices(self) -> list[tuple[str, str]]:
        return [(r.device_id, r.profile) for r in self.registry.devices() if not r.revoked]

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> HubDaemon:
        try:
            await self._start()
        except BaseException:
            await self._stack.aclose()
            self._close_files()
            raise
        return self

    def _check_options(self) -> None:
        opts = self.options
        if opts.plaintext and not is_loopback(opts.bind):
            raise HubError("tls.plaintext_not_loopback", host=opts.bind)
        if opts.plaintext:
            log.warning(
                "TLS off (--plaintext): the broker and gRPC serve plaintext on %s", opts.bind
            )

    async def _start(self) -> None:
        opts, home = self.options, self.home
        if opts.plaintext:
            log.warning("TLS off (--plaintext): broker and gRPC are plaintext on %s", opts.bind)
        self.tls = home.tls(extra_names=advertise_addresses(opts.bind))
        client_tls = (
            ClientTls.plaintext(home.home_id)
            if opts.plaintext
            else ClientTls.pinned(self.tls.ca_pem, home.home_id)
        )
        await self._stack.enter_async_context(self.group)  # left last: synced at the end
        self.store.mark_all_offline()
        for path in tighten_top(home.path):  # files the owner wrote with a loose umask
            log.warning("%s was readable by others: now owner-only", path)
        self._load_registry()
        self.broker = await self._stack.enter_async_context(
            Bounded(
                Broker(
                    home.path / "broker",
                    home_id=home.home_id,
                    host=opts.bind,
                    port=opts.mqtt_port,
                    accounts=self._accounts(),
                    tls=None
                    if opts.plaintext
                    else BrokerTls(self.tls.ca_path, self.tls.mqtt.cert, self.tls.mqtt.key),
                ),
                "the broker",
                limit=2 * STOP_TIMEOUT_S,  # it kills mosquitto itself after its own wait
            )
        )
        service = HubService(
            home,
            mqtt_port=opts.mqtt_port,
            grpc_port=opts.grpc_port,
            version=VERSION,
            on_enrolled=self._refresh_registry,
            on_sync=self._serve_sync,
            lookup=self.port.peers.get,
            count=self.port.count,
            on_enrol=self.voiceprints.serve_enrol,
        )
        credentials = None
        if not opts.plaintext:
            leaf = self.tls.grpc
            credentials = tls_credentials(
                leaf.cert.read_bytes(), leaf.key.read_bytes(), self.tls.ca_pem
            )
        self.grpc = await start_server(service, opts.bind, opts.grpc_port, credentials)
        self._stack.push_async_callback(within, "the gRPC server", self.grpc.stop, 1.0)
        if opts.advertise:
            self._advertise(
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
        local = self.broker.local_socket

        async def target() -> tuple[str, int]:
            if local is not None:  # the broker's own unix socket: no TCP, no TLS
                return str(local), LOCAL_PORT
            return host, opts.mqtt_port

        # opened in arrival order, handled per sender (left after the session stops)
        await self._stack.enter_async_context(self.lanes)
        self.mqtt = await self._stack.enter_async_context(
            Bounded(
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
                    tls=client_tls,
                    clean_session=False,
                ),
                "the hub's MQTT session",
            )
        )
        self.port.mqtt = self.mqtt
        self._stack.callback(self._detach)
        parts: tuple[tuple[AbstractAsyncContextManager[object], str], ...] = (
            (self.sync, "replication"),
            (self.consent, "consent and the gateway"),
            (self.turns, "turns"),
            (self.voiceprints, "voiceprints"),
            (self.wake, "the wake arbiter"),
            (self.hearing, "hearing"),
            (self.vision, "vision"),
        )
        for part, what in parts:
            await self._stack.enter_async_context(Bounded(part, what))
        if self.wyoming_settings is not None:
            self.wyoming = await self._stack.enter_async_context(
                Bounded(self._wyoming_server(self.wyoming_settings), "the Wyoming server")
            )
        if opts.web_port is not None:
            await self._start_web(opts.web_port)
        tasks = await self._stack.enter_async_context(TaskOwner("hub"))
        tasks.spawn(self.entry_batch.run(), "timeline-held")
        # at stop, before the tasks and the MQTT session go: the replies held to fly soon
        self._stack.push_async_callback(within, "the held timeline entries", self.entry_batch.drain)
        tasks.spawn(self.redelivery.run(), "reply-redelivery")
        tasks.spawn(self._watch_registry(), "registry-watch")
        tasks.spawn(self._flush_stats(), "stats")
        tasks.spawn(self._migrate_recall(), "recall-migrate")
        if self._timeline_recall():
            tasks.spawn(self._index_timeline(), "timeline-recall")
        tasks.spawn(self._reapply_forgetting(), "forget-reapply")
        await self._start_archive_upkeep()
        self._write_pidfile()
        self._stack.callback(self._remove_pidfile)
        await asyncio.wait_for(self.mqtt.connected.wait(), timeout=15)
        await self._check_group_key()
        await self.sync.publish(self._reconcile())
        # Hello: devices that talked while we were not subscribed catch up now.
        try:
            await self._broadcast_sync(sync_pb2.SyncUpdate())
        except SyncError as exc:
            log.info("hello not broadcast: %s", exc)
        await self.consent.ask_witnesses()  # a log rolled back while we were down is caught
        self._stack.callback(self._end_status)
        self.service_notify = await self._stack.enter_async_context(
            ServiceNotifier(self._notify_env)
        )
        self.ready.set()
        # connected: what came due while the hub was down goes out now (within its grace)
        await self._stack.enter_async_context(Bounded(self.scheduler, "the scheduler"))
        self._since_ms = now_ms()
        await self.turns.warm(WARM_UP_S)  # "up" once the first turn need not start packages
        self._refresh_status()
        tls = "PLAINTEXT" if opts.plaintext else f"TLS CA {self.tls.fingerprint[:16]}"
        up = (
            f"mqtt {opts.bind}:{opts.mqtt_port}, grpc {opts.bind}:{opts.grpc_port}, "
            f"fingerprint {home.fingerprint}, {tls}"
        )
        log.info("hub %s up: %s", home.home_id, up)
        self.service_notify.ready(f"hub {home.home_id} up: {up}")

    async def _start_web(self, port: int) -> None:
        """The companion and dashboard pages, owned like the other servers."""
        from hub.web.app import HubLink, WebApp
        from hub.web.memory import memory_link
        from hub.web.notes import notes_link
        from hub.web.operator import operator_link
        from hub.web.server import LOOPBACK, WebServer, durable_responses
        from hub.web.sessions import Passkeys
        from hub.web.switches import switch_link
        from provisioning.pairing import PairingAuthority

        opts, home = self.options, self.home
        web_tls = opts.web_tls
        if web_tls is None and not opts.plaintext and not is_loopback(opts.bind):
            # pages a LAN reaches are served over HTTPS under the home CA's web leaf
            web_tls = WebTls(self.tls.web.cert, self.tls.web.key)
        passkeys = Passkeys(home.path / "web.db")
        self._stack.callback(passkeys.close)
        if opts.web_origins:
            origins = opts.web_origins
        elif web_tls is None:
            origins = (f"http://localhost:{port}", f"http://{LOOPBACK}:{port}")
        else:
            # WebAuthn needs a host name (never an address): the home's hub host, the mDNS
            # name, then the addresses for everything else
            names = [home.hub_host, f"{socket.gethostname()}.local", "localhost"]
            hosts = dict.fromkeys(h for h in [*names, *advertise_addresses(opts.bind)] if h)
            origins = tuple(f"https://{h}:{port}" for h in hosts)
        link = HubLink(
            store=self.store,
            devices=self.registry.devices,
            pairing=PairingAuthority(home, mqtt_port=opts.mqtt_port, grpc_port=opts.grpc_port),
            typed=self.admission.typed_on_page,
            gateway=self._gateway,
            answer=self.consent.answer,
            rendered=self.delivery.rendered_on_page,
            count=self.port.count,
            passkeys=passkeys,
            origins=origins,
            trust=self.voiceprints.trust_from_page,
            operator=operator_link(home, self.consent),
            notes=notes_link(self.replicas, self.sync.publish),
            memory=memory_link(home),
            switches=switch_link(home),
            reminders=self.reminders,
        )
        self.web = WebApp(link)
        app = durable_responses(self.web.app, self.group.flush)
        await self._stack.enter_async_context(
            Bounded(WebServer(app, host=opts.bind, port=port, tls=web_tls), "the web pages")
        )
        self.web_https = web_tls is not None

    def _advertise(self, advertiser: discovery.HubAdvertiser) -> None:
        """Register the mDNS advert while the hub goes on starting: zeroconf probes the name
        for most of a second first, and no device needs to wait for that (every bundle holds
        the hub's address; a device that browses looks for seconds). Withdrawn on the way
        out, or given up if still probing then: the withdrawal (zeroconf's goodbyes take a
        quarter of a second) starts as the stop begins and runs alongside the other steps
        (:meth:`__aexit__`); it is awaited in its place in the stop."""
        registering = asyncio.create_task(advertiser.start(), name="mdns-advert")

        def failed(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None:
                log.warning("hub not advertised on mDNS: %s", task.exception())

        registering.add_done_callback(failed)

        async def withdraw() -> None:
            registering.cancel()
            await asyncio.gather(registering, return_exceptions=True)
            await advertiser.close()  # nothing to do unless it was registered

        withdrawing: list[asyncio.Task[None]] = []

        def withdraw_soon() -> asyncio.Task[None]:
            if not withdrawing:
                withdrawing.append(asyncio.create_task(withdraw(), name="mdns-withdraw"))
            return withdrawing[0]

        self._withdraw_advert = withdraw_soon
        self._stack.push_async_callback(within, "the mDNS advert", withdraw_soon)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._withdraw_advert is not None:
                self._withdraw_advert()  # the LAN hears of it at once; awaited in its turn
            await self._stack.aclose()
        finally:
            self._flush_drops()
            self._close_files()

    def _close_files(self) -> None:
        self.port.close()
        self.store.close()
        self.registry.close()
        self.voiceprints.close()
        self.scheduler.store.close()
        self.memory.close()
        if self.archive is not None:
            self.archive.close()

    def _write_pidfile(self) -> None:
        write_private(self.home.path / "hub.pid", str(os.getpid()))

    def _remove_pidfile(self) -> None:
        (self.home.path / "hub.pid").unlink(missing_ok=True)

    def _detach(self) -> None:
        self.port.mqtt = None

    async def _migrate_recall(self) -> None:
        """A recall index built with another embedding model than the selected one (a home
        from before the multilingual default) is rebuilt in the background, the way a model
        switch does; recall uses the old index and model until it is done."""
        import threading

        from hub.memory.reindex import migrate_home

        stop = threading.Event()
        try:
            await asyncio.to_thread(migrate_home, self.home.path, stop=stop)
        except asyncio.CancelledError:
            stop.set()
            raise
        except Exception:  # the old index stays in use; status shows the failure
            log.exception("recall index migration failed")

    async def _start_archive_upkeep(self) -> None:
        """The archive keeps itself (``archive: {upkeep_interval_s: N}`` in home.yaml,
        default 60; 0 turns it off): packing, verified cold packs, repacking deletions,
        hot-copy expiry — yielding while a request window is open."""
        cfg = self.home.config.get("archive")
        interval = ARCHIVE_UPKEEP_S
        if isinstance(cfg, Mapping) and cfg.get("upkeep_interval_s") is not None:
            interval = float(cfg["upkeep_interval_s"])
        if interval <= 0:
            return
        archive = self.archive
        if archive is None:
            log.error("archive upkeep not started: the archive could not be opened")
            return
        self.archive_upkeep = await self._stack.enter_async_context(
            Bounded(
                ArchiveMaintainer(archive, interval_s=interval, busy=self.hearing.busy),
                "archive upkeep",
            )
        )

    async def _reapply_forgetting(self) -> None:
        """Re-apply every logged forget plan (a store restored from a backup gets its
        deletions back) in a worker thread, over stores of its own; the replicas' purges
        reach the devices as the replication sees them on disk."""
        from hub.memory.erasure import log_path

        if not log_path(self.home.path).exists():
            return

        def run() -> int:
            from hub.archive.settings import open_archive
            from hub.memory.erasure import Erasure
            from hub.memory.index import MemoryIndex

            memory = open_memory(self.home.path)
            timeline = HubStore(self.home.path / "hub.db")
            archive = open_archive(self.home.path)
            try:
                assert isinstance(memory.index, MemoryIndex)
                report = Erasure(
                    self.home.path,
                    memory=memory,
                    index=memory.index,
                    timeline=timeline,
                    replicas=ReplicaSet(self.home.path / "replicas"),
                    archive=archive,
                ).reapply()
                for item, why in report.not_deleted:
                    log.warning("forgetting %s %s: %s", item.layer, item.id, why)
                return len(report.deleted)
            finally:
                archive.close()
                timeline.close()
                memory.close()

        try:
            n = await asyncio.to_thread(run)
        except Exception:
            log.exception("re-applying the forget log failed")
            return
        if n:
            log.warning("forget log re-applied: %d restored items deleted again", n)

    def _timeline_recall(self) -> bool:
        """``memory: {timeline_recall: false}`` in home.yaml keeps the timeline out of
        recall (and the embedding model out of the hub process)."""
        from hub.memory.timeline_recall import timeline_recall_on

        return timeline_recall_on(self.home.config)

    async def _index_timeline(self) -> None:
        """The timeline in the recall index, as it grows (:mod:`hub.memory.timeline_recall`)."""
        from hub.memory.index import MemoryIndex
        from hub.memory.timeline_recall import TimelineIndexer, cursor_path, read_timeline

        index = self.memory.index
        if not isinstance(index, MemoryIndex):
            return
        indexer = TimelineIndexer(
            read_timeline(self.store),
            index,
            cursor_path(self.home.path),
            sensitivity=self.memory.registered_sensitivity,
        )
        await indexer.run(self._timeline_grew)

    # ------------------------------------------------------------------ registry
    def _load_registry(self) -> set[str]:
        """The registry's devices as the port's peers; returns the newly revoked ones."""
        records = self.registry.devices()
        self._registry_version = self.registry.data_version()
        self._last_revoked_ms = max((r.revoked_ms or 0 for r in records), default=0)
        return self.port.load(records)

    def _accounts(self) -> list[BrokerAccount]:
        hashes = {r.device_id: r.mqtt_hash for r in self.registry.devices()}
        accounts = [BrokerAccount(HUB, self._hub_hash, "hub")]
        accounts += [
            BrokerAccount(p.node_id, hashes[p.node_id], "device")
            for p in self.port.peers.values()
            if not p.revoked and p.node_id in hashes
        ]
        return accounts

    async def _refresh_registry(self) -> None:
        newly_revoked = self._load_registry()
        if self.web is not None and newly_revoked:
            self.web.state.revoked(sorted(newly_revoked))
        for device_id in sorted(newly_revoked):
            log.warning("device %s revoked: its messages are now refused", device_id)
            # told first, while it is still on the broker: the account update below cuts it off
            await self._broadcast_revocation(device_id)
        if self.broker is not None:
            await self.broker.update_accounts(self._accounts())
        if newly_revoked:
            await self._check_group_key()

    async def _broadcast_revocation(self, device_id: str) -> None:
        if not self.port.connected:
            return
        try:
            await self.port.broadcast(
                mesh_pb2.REVOCATION,
                mesh_pb2.Revocation(device_id=device_id, revoked_ms=now_ms()),
            )
        except Exception as exc:
            log.info("broadcast not sent: %s", exc)

    async def _check_group_key(self) -> None:
        """A new group key epoch after a revocation newer than the current epoch, or when
        the current one is older than ``mesh.group_key_days``; one made by ``yimi home
        rotate-key`` (the epochs file changed) is sent to every device."""
        ring = self.port.group_keys
        if ring.reload():
            sent = await self.port.distribute_group_key()
            log.warning(
                "mesh group key epoch %d (rotate-key) sent to %d devices", ring.current.number, sent
            )
        if self._last_revoked_ms and self._last_revoked_ms >= ring.current.made_ms:
            await self.port.rotate_group_key("revocation")
        elif ring.due(now_ms(), rotation_days(self.home.config)):
            await self.port.rotate_group_key("periodic")

    async def _watch_registry(self) -> None:
        while True:
            await asyncio.sleep(REGISTRY_POLL_S)
            try:
                if self.registry.data_version() != self._registry_version:
                    await self._refresh_registry()
                await self._check_group_key()
            except Exception:
                log.exception("registry refresh failed")

    # ------------------------------------------------------------------ incoming
    async def _on_message(self, message: aiomqtt.Message) -> None:
        """Open a message as it arrives; its sender's lane handles it (:mod:`.lanes`)."""
        payload = message.payload if isinstance(message.payload, bytes) else b""
        opened = self.port.receive(message.topic.value, payload)
        if opened is None:
            return
        if not self.lanes.put(opened.sender, opened):  # its outbox sends it again
            self.port.count("rejected.lane_full")
            log.warning("message from %s dropped: %d already waiting", opened.sender, LANE_DEPTH)

    async def _handle(self, opened: Opened) -> None:
        """One opened message, in its sender's lane."""
        if self.port.repeated(opened):
            return
        if opened.kind == mesh_pb2.PRESENCE:
            await self._on_presence(opened)
            return
        handler = self.handlers.get(opened.kind)
        if handler is None:
            self.port.drop(DropReason.MALFORMED, opened.sender, f"kind {opened.kind} not accepted")
            return
        if opened.kind not in COMMITTED_BY_HANDLER:
            self.port.commit(opened)
        await handler(opened)

    async def _on_utterance(self, opened: Opened) -> None:
        utt = opened.payload
        assert isinstance(utt, mesh_pb2.Utterance)
        if problem := utterance_problem(utt):
            self.port.drop(DropReason.MALFORMED, opened.sender, problem)
            return
        if utt.HasField("voice"):  # heard: transcribed off the loop, then admitted
            await self.hearing.on_utterance(opened)
            return
        # typed text signed by the device's own key: the owner's (see hub/turns/admission.py)
        await self.admission.typed(opened, self.port.scopes_of(opened.sender))

    async def _send_decision(self, decision: Decision) -> None:
        await self.port.send(decision.device, mesh_pb2.WAKE_DECISION, decision.message())

    def _online_devices(self) -> list[str]:
        return [d for d, row in self.store.presence().items() if row.state == "online"]

    async def _on_presence(self, opened: Opened) -> None:
        pres = opened.payload
        assert isinstance(pres, mesh_pb2.Presence)
        now = now_ms()
        current = self.store.presence().get(opened.sender)
        if pres.state == mesh_pb2.ONLINE:
            self.store.set_presence(opened.sender, "online", pres.session, pres.since_ms, now)
            await self.port.send_group_key(opened.sender)  # an epoch made while it was away
            await self.delivery.resend(opened.sender)
            await self.consent.on_online(opened.sender)
            await self.voiceprints.on_online(opened.sender)
        elif pres.state == mesh_pb2.OFFLINE:
            if current is None or current.session == pres.session:
                self.store.set_presence(opened.sender, "offline", pres.session, pres.since_ms, now)

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
        await self.port.broadcast(mesh_pb2.SYNC_UPDATE, update)

    async def _audio_not_stored(self, opened: Opened, reason: str, lang: str) -> None:
        """A device's audio was not stored (the disk really full): an ``activity`` entry on
        the timeline says so, replicated to every device."""
        utt = opened.payload
        uid = getattr(utt, "id", "") or opened.trace_id
        await hub_entry(
            self.store,
            self._publish_entries,
            f"not-stored-{uid}",
            ACTIVITY_KIND,
            say("archive.not_stored", lang, device=opened.sender, reason=reason),
            trace_id=opened.trace_id,
            meta={"utterance_id": uid, "archive": {"stored": False, "reason": reason}},
        )

    async def _publish_entries(self, entries: list[docs.Entry]) -> None:
        """Sequence hub-written timeline entries in the documents and broadcast them (with
        those of other turns published at the same time: :mod:`hub.mesh.entry_batch`)."""
        await self.entry_batch.publish(entries)

    def _published(self, entries: list[docs.Entry]) -> None:
        self.watching.on_entries(entries)
        self._timeline_grew.set()
        if self.web is not None:
            self.web.state.pulse()

    async def _on_sync_update(self, opened: Opened) -> None:
        update = opened.payload
        assert isinstance(update, sync_pb2.SyncUpdate)
        changed, _ = self.sync.apply_from_device(list(update.updates), opened.sender)
        self._timeline_grew.set()
        await self.sync.publish(changed)  # refusals are counted by self.sync

    async def _serve_sync(self, data: bytes) -> bytes:
        """``Hub.Sync``: a SYNC_REQUEST envelope in, a SYNC_RESPONSE envelope out."""
        return await self.port.serve(
            data,
            request=sync_pb2.SyncRequest,
            kind=mesh_pb2.SYNC_RESPONSE,
            what="sync request",
            error="sync.refused",
            handle=self._sync_answer,
            large=True,
        )

    async def _sync_answer(self, opened: Opened, request: sync_pb2.SyncRequest) -> Message:
        response, changed = self.sync.serve(request, opened.sender)
        await self.sync.publish(changed)
        return response

    # ------------------------------------------------------------------ stats
    def _flush_drops(self) -> None:
        if self.broker is not None:  # what only the broker saw (issue 15)
            self.port.drops.update(self.broker.refusals())
        self.port.flush(self.store.add_counts)

    async def _flush_stats(self) -> None:
        while True:
            await asyncio.sleep(STATS_FLUSH_S)
            self._flush_drops()
            self._refresh_status()

    # ------------------------------------------------------------------ status
    def status(self) -> HubStatus:
        """What ``yimi hub status`` shows of this running hub (``HOME/hub-status.json``)."""
        opts = self.options
        loaded, running, failed = self.consent.packages()
        return HubStatus(
            pid=os.getpid(),
            ready=self.ready.is_set(),
            bind=opts.bind,
            mqtt_port=opts.mqtt_port,
            grpc_port=opts.grpc_port,
            web_port=opts.web_port,
            web_https=self.web_https,
            plaintext=opts.plaintext,
            wyoming_port=self.wyoming.port if self.wyoming is not None else None,
            packages_loaded=loaded,
            packages_running=running,
            packages_failed=failed,
            since_ms=self._since_ms,
        )

    def _refresh_status(self) -> None:
        """Write the status file when the hub is up and what it says changed."""
        if not self.ready.is_set() or self._stopping:
            return
        status = self.status()
        if status == self._status:
            return
        if self._status is not None and status.packages_failed != self._status.packages_failed:
            failed = ", ".join(status.packages_failed) or "none"
            if self.service_notify is not None:
                self.service_notify.status(f"packages failed: {failed}")
        write_status(self.home.path, status)
        self._status = status

    def _end_status(self) -> None:
        batch = self.entry_batch
        if batch.flights:
            log.info("timeline: %d entries went out in %d broadcasts", batch.entries, batch.flights)
        self._stopping = True
        self._status = None
        remove_status(self.home.path)


def archive_clock(clock: Clock | None) -> Callable[[], float]:
    """The archive's clock (seconds) from the hub's: the system's, or a test's."""
    if clock is None:
        return time.time
    return lambda: clock.now_ms() / 1000


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
