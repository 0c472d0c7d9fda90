"""The hub as a Wyoming server: Home Assistant can use Yimi as its voice pipeline.

``yimi wyoming serve`` (or ``wyoming: {port: …}`` in home.yaml, read by ``yimi hub run``)
starts :class:`WyomingServer` inside the hub process, on its own port, advertised on mDNS
as ``_wyoming._tcp`` (Home Assistant's Wyoming integration discovers it). One connection
offers, as Home Assistant's Wyoming client expects (``describe`` → ``info``):

- **speech-to-text** (``transcribe``, ``audio-start``/``-chunk``/``-stop`` → ``transcript``):
  the hub's own recogniser (``hub/voice/hearing.py``: the ``asr`` role, else local Whisper);
- **wake word** (``detect`` and audio → ``detection`` or ``not-detected``): the hub's
  "Yimi" templates (``models.wake``);
- **text-to-speech** (``synthesize`` → ``audio-start``/``-chunk``/``-stop``): the reply voices
  of ``hardware.tts`` (Chinese and English);
- **intent handling** (``transcript`` → ``handled``/``not-handled``): the text is a turn of
  Yimi's brain, admitted to the timeline like every utterance (:class:`WyomingTurns`).

Who is speaking: audio and text arriving this way carry no device signature and no
voiceprint, so a turn is a ``guest``'s — unless the operator mapped the peer (a Home
Assistant instance, by its address) to an enrolled device in home.yaml::

    wyoming:
      port: 10700
      clients:
        192.168.1.20: <device id>     # this Home Assistant speaks for that device

and then it is ``owner_uncertain`` at most (no voiceprint verdict ever makes it ``owner``).
A mapping to an unknown or revoked device counts as no mapping.

Every connection is a task the server owns; leaving the context closes the listener and
the advert and cancels the connections. Peer bytes are read by :mod:`sync.wyoming` (bounded,
never raising); a malformed event ends that connection only.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

import numpy as np
from wyoming.event import Event, async_write_event

from hardware.pcm import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE, Frame, Samples
from hub.brain.replies import say
from hub.errors import HubError
from hub.turns.admission import Inbound, TurnMeta
from models.asr import Transcript
from protos import mesh_pb2
from protos.clock import now_ms
from protos.version import VERSION
from sync import discovery
from sync import wyoming as wy
from sync.envelope import HUB, Opened, new_trace_id, random_id
from sync.tasks import TaskOwner

log = logging.getLogger(__name__)

SERVICE_TYPE = "_wyoming._tcp.local."
DEFAULT_PORT = 10700
SOURCE = "wyoming"
"""``source`` of a turn that came through the Wyoming handle service"""
DEVICE_PREFIX = "wyoming:"
"""timeline device of such a turn: ``wyoming:<mapped device id>`` or ``wyoming:<address>``"""
MAX_AUDIO_S = 60
"""seconds of audio one transcription keeps (a wake word stream is heard however long it
runs: Home Assistant streams until the word comes)"""
REPLY_TIMEOUT_S = 30.0
"""seconds the handle service waits for the brain's final reply"""
TTS_CHUNK_SAMPLES = 1024
ATTRIBUTION = {"name": "Yimi Mesh", "url": "https://github.com/yimi-mesh"}
WAKE_NAME = "yimi"
LANGUAGES = ["en", "zh"]
MAX_CONNECTIONS = 16

GUEST, OWNER_UNCERTAIN = "guest", "owner_uncertain"


# ------------------------------------------------------------------ settings
@dataclass(frozen=True)
class WyomingSettings:
    """``wyoming:`` of home.yaml."""

    port: int = DEFAULT_PORT
    clients: Mapping[str, str] = field(default_factory=dict)
    """peer address → the enrolled device it speaks for"""
    name: str = "yimi"
    """the service's name in the advert and in ``info``"""

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> WyomingSettings | None:
        """The settings, ``None`` when home.yaml has no ``wyoming:`` (HubError if it is
        malformed)."""
        raw = (config or {}).get("wyoming")
        if raw is None:
            return None
        if not isinstance(raw, Mapping):
            raise HubError("wyoming.config", reason="'wyoming' is not a mapping")
        unknown = sorted(set(map(str, raw)) - {"port", "clients", "name"})
        if unknown:
            raise HubError("wyoming.config", reason=f"unknown keys {', '.join(unknown)}")
        port = raw.get("port", DEFAULT_PORT)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise HubError("wyoming.config", reason=f"port {port!r} is not a port")
        clients = raw.get("clients") or {}
        if not isinstance(clients, Mapping):
            raise HubError("wyoming.config", reason="'clients' maps addresses to device ids")
        checked: dict[str, str] = {}
        for address, device in clients.items():
            try:
                ip = str(ipaddress.ip_address(str(address)))
            except ValueError:
                raise HubError(
                    "wyoming.config", reason=f"client {address!r} is not an IP address"
                ) from None
            if not isinstance(device, str) or not device.strip():
                raise HubError("wyoming.config", reason=f"client {address}: no device id")
            checked[ip] = device.strip()
        name = raw.get("name", "yimi")
        if not isinstance(name, str) or not name.strip() or "." in name:
            raise HubError("wyoming.config", reason="name must be a DNS label without dots")
        return cls(port=port, clients=checked, name=name.strip())


# ------------------------------------------------------------------ who is speaking
@dataclass(frozen=True)
class PeerScope:
    device: str
    """the timeline device of the peer's turns"""
    scope: str
    reason: str


def peer_scope(
    address: str, clients: Mapping[str, str], enrolled: Callable[[str], bool]
) -> PeerScope:
    """The scope of turns from the Wyoming peer at ``address``: ``owner_uncertain`` when the
    operator mapped it to a device that is enrolled and not revoked, else ``guest``. Never
    ``owner``: nothing here carries a signature or a voiceprint verdict."""
    try:
        ip = str(ipaddress.ip_address(address))
    except ValueError:
        ip = address[:64] or "unknown"
    device = clients.get(ip)
    if device is not None and enrolled(device):
        return PeerScope(DEVICE_PREFIX + device, OWNER_UNCERTAIN, "wyoming_mapped_device")
    reason = "wyoming_mapping_not_enrolled" if device is not None else "wyoming_unmapped_peer"
    return PeerScope(DEVICE_PREFIX + ip, GUEST, reason)


def is_wyoming_device(device: str) -> bool:
    return device.startswith(DEVICE_PREFIX)


AdmitFn = Callable[[Inbound, str, TurnMeta], Awaitable[None]]


class WyomingTurns:
    """Text from the handle service as turns of the brain: admitted (the timeline, the
    brain's queue) with the peer's scope; the reply comes back through :meth:`on_reply`
    (the daemon routes replies to ``wyoming:`` devices here instead of the mesh)."""

    def __init__(
        self,
        *,
        admit: AdmitFn,
        clients: Mapping[str, str],
        enrolled: Callable[[str], bool],
        ack: Callable[[mesh_pb2.Reply, str], None],
    ) -> None:
        self._admit = admit
        self._clients = clients
        self._enrolled = enrolled
        self._ack = ack
        self._waiting: dict[str, tuple[list[str], asyncio.Future[str]]] = {}

    async def turn(self, address: str, text: str, language: str) -> str:
        """Admit ``text`` from ``address`` and wait for the brain's whole reply."""
        who = peer_scope(address, self._clients, self._enrolled)
        utt = mesh_pb2.Utterance(
            id=random_id("u-"),
            text=text,
            channel=SOURCE,
            started_ms=now_ms(),
            source=SOURCE,
        )
        opened = Opened(
            sender=who.device,
            counter=0,
            time_ms=utt.started_ms,
            kind=mesh_pb2.UTTERANCE,
            recipient=HUB,
            trace_id=new_trace_id(),
            payload=utt,
        )
        meta = TurnMeta(
            channel=SOURCE,
            source=SOURCE,
            scope=who.scope,
            scope_reason=who.reason,
            language=language if language in LANGUAGES else "",
        )
        done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._waiting[utt.id] = ([], done)
        try:
            await self._admit(Inbound(opened, None), text, meta)
            log.info("wyoming turn %s from %s (%s, %s)", utt.id, address, who.scope, who.reason)
            try:
                return await asyncio.wait_for(done, REPLY_TIMEOUT_S)
            except TimeoutError:  # the reply goes on the timeline when it comes
                log.info("wyoming turn %s: no reply within %.0f s", utt.id, REPLY_TIMEOUT_S)
                return say("wyoming.reply_late", language, seconds=round(REPLY_TIMEOUT_S))
        finally:
            self._waiting.pop(utt.id, None)

    async def on_reply(self, device: str, reply: mesh_pb2.Reply) -> None:
        """A reply chunk for a ``wyoming:`` device (instead of sending it on the mesh)."""
        self._ack(reply, device)
        waiting = self._waiting.get(reply.utterance_id)
        if waiting is None:  # a late report, or its connection is gone: on the timeline only
            log.info("reply %s for %s: no Wyoming request waits for it", reply.id, device)
            return
        parts, done = waiting
        if reply.text:
            parts.append(reply.text)
        if reply.final and not done.done():
            done.set_result(" ".join(parts))


# ------------------------------------------------------------------ services
class WakeSpotter(Protocol):
    def feed(self, frame: Frame) -> Any: ...

    def reset(self) -> None: ...


@dataclass
class Services:
    """What the server offers, as narrow callables (the daemon builds them)."""

    transcribe: Callable[[Samples], Awaitable[Transcript]]
    speak: Callable[[str], Samples]
    """text → 16 kHz samples (blocking: run in a thread)"""
    wake: Callable[[], WakeSpotter]
    """the wake detector (blocking on first use: built in a thread)"""
    handle: Callable[[str, str, str], Awaitable[str]]
    """(peer address, text, language) → the reply"""
    asr_model: str = "whisper"


def _artifact(name: str, description: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "attribution": ATTRIBUTION,
        "installed": True,
        "description": description,
        "version": VERSION,
        **extra,
    }


def info_event(name: str, asr_model: str) -> Event:
    """The ``info`` answer: one program per service."""
    return Event(
        "info",
        {
            "asr": [
                _artifact(
                    f"{name}-asr",
                    "Yimi hub speech recognition",
                    models=[_artifact(asr_model, "the hub's recogniser", languages=LANGUAGES)],
                )
            ],
            "tts": [
                _artifact(
                    f"{name}-tts",
                    "Yimi reply voices",
                    voices=[
                        _artifact("yimi-en", "English", languages=["en"]),
                        _artifact("yimi-zh", "Chinese", languages=["zh"]),
                    ],
                )
            ],
            "wake": [
                _artifact(
                    f"{name}-wake",
                    "Yimi wake word",
                    models=[_artifact(WAKE_NAME, "Yimi / 依米", languages=LANGUAGES)],
                )
            ],
            "handle": [
                _artifact(
                    f"{name}-brain",
                    "Yimi's brain (guest scope unless the peer is mapped to a device)",
                    models=[_artifact("yimi", "Yimi", languages=LANGUAGES)],
                )
            ],
            "intent": [],
        },
    )


class _Connection:
    """One peer's requests (a table of handlers by request type)."""

    def __init__(
        self,
        server: WyomingServer,
        writer: asyncio.StreamWriter,
        address: str,
    ) -> None:
        self.server = server
        self.writer = writer
        self.address = address
        self.mode = ""
        """``transcribe`` or ``detect``: what the next audio is for"""
        self.language = ""
        self.audio: list[Samples] = []
        self.audio_samples = 0
        self.fmt: wy.AudioFormat | None = None
        self.spotter: WakeSpotter | None = None
        self.pending = np.zeros(0, dtype=np.int16)
        self.clock_ms = 0
        self.detected = False
        self.handlers: dict[type, Callable[[Any], Awaitable[None]]] = {
            wy.Describe: self._describe,
            wy.Ping: self._ping,
            wy.Transcribe: self._transcribe,
            wy.Detect: self._detect,
            wy.AudioStart: self._audio_start,
            wy.AudioChunk: self._audio_chunk,
            wy.AudioStop: self._audio_stop,
            wy.Synthesize: self._synthesize,
            wy.HandleText: self._handle,
        }

    async def send(self, event: Event) -> None:
        await async_write_event(event, self.writer)

    async def run(self, reader: asyncio.StreamReader) -> None:
        while True:
            raw = await wy.read_event(reader)
            if raw is None:
                return
            request = wy.decode_raw(raw)
            if request is None:
                log.info("wyoming %s: event %r not understood: ignored", self.address, raw.type)
                continue
            handler = self.handlers.get(type(request))
            if handler is not None:
                await handler(request)

    # -------------------------------------------------------------- handlers
    async def _describe(self, _: wy.Describe) -> None:
        await self.send(info_event(self.server.name, self.server.services.asr_model))

    async def _ping(self, req: wy.Ping) -> None:
        await self.send(Event("pong", {"text": req.text}))

    async def _transcribe(self, req: wy.Transcribe) -> None:
        self.mode, self.language = "transcribe", req.language
        self._clear()

    async def _detect(self, _: wy.Detect) -> None:
        self.mode = "detect"
        self._clear()
        if self.spotter is None:  # this connection's own detector (it keeps state)
            self.spotter = await self.server.acquire_spotter()
        self.spotter.reset()

    def close(self) -> None:
        spotter, self.spotter = self.spotter, None
        if spotter is not None:
            self.server.release_spotter(spotter)

    def _clear(self) -> None:
        self.audio, self.audio_samples, self.detected = [], 0, False
        self.pending = np.zeros(0, dtype=np.int16)
        self.clock_ms = now_ms()

    async def _audio_start(self, req: wy.AudioStart) -> None:
        self.fmt = req.fmt
        if not self.mode:  # audio without a request: Home Assistant's STT sends transcribe
            self.mode = "transcribe"
        self._clear()

    async def _audio_chunk(self, req: wy.AudioChunk) -> None:
        samples = wy.to_pcm16k(req.fmt, req.audio)
        if samples is None or not self.mode:
            return
        if self.mode == "transcribe":
            if self.audio_samples + len(samples) > MAX_AUDIO_S * SAMPLE_RATE:
                return  # beyond the cap: the first MAX_AUDIO_S seconds are heard
            self.audio_samples += len(samples)
            self.audio.append(samples)
            return
        # wake word: a stream of any length, heard frame by frame (nothing kept)
        if self.detected or self.spotter is None:
            return
        self.pending = np.concatenate([self.pending, samples])
        spotter = self.spotter
        frames = []
        while len(self.pending) >= FRAME_SAMPLES:
            frames.append(Frame(self.pending[:FRAME_SAMPLES].copy(), self.clock_ms))
            self.pending = self.pending[FRAME_SAMPLES:]
            self.clock_ms += FRAME_MS
        hit = await self.server.in_worker(_first_hit, spotter, frames)
        if hit is not None:
            self.detected = True
            await self.send(Event("detection", {"name": WAKE_NAME, "timestamp": hit}))

    async def _audio_stop(self, _: wy.AudioStop) -> None:
        mode, self.mode = self.mode, ""
        if mode == "detect":
            if not self.detected:
                await self.send(Event("not-detected", {}))
            return
        if mode != "transcribe":
            return
        samples = np.concatenate(self.audio) if self.audio else np.zeros(0, dtype=np.int16)
        self.audio = []
        text, language = "", self.language
        try:
            transcript = await self.server.services.transcribe(samples)
            text, language = transcript.text, transcript.language or language
        except Exception as exc:  # the peer hears nothing rather than a dropped connection
            log.warning("wyoming %s: transcription failed: %s", self.address, exc)
        log.info("wyoming %s: transcript %r", self.address, text)
        data: dict[str, Any] = {"text": text}
        if language:
            data["language"] = language
        await self.send(Event("transcript", data))

    async def _synthesize(self, req: wy.Synthesize) -> None:
        samples = await asyncio.to_thread(self.server.services.speak, req.text)
        fmt = {"rate": SAMPLE_RATE, "width": 2, "channels": 1}
        await self.send(Event("audio-start", {**fmt, "timestamp": 0}))
        for i in range(0, len(samples), TTS_CHUNK_SAMPLES):
            piece = samples[i : i + TTS_CHUNK_SAMPLES]
            ts = i * 1000 // SAMPLE_RATE
            await self.send(Event("audio-chunk", {**fmt, "timestamp": ts}, piece.tobytes()))
        await self.send(Event("audio-stop", {"timestamp": len(samples) * 1000 // SAMPLE_RATE}))

    async def _handle(self, req: wy.HandleText) -> None:
        if not req.text:
            await self.send(Event("not-handled", {"text": ""}))
            return
        try:
            reply = await self.server.services.handle(self.address, req.text, req.language)
        except Exception:  # the person hears the hub's words, the connection stays
            from hardware.tts import language_of  # (numpy/soxr: only when needed)

            log.exception("wyoming %s: turn failed", self.address)
            text = say("wyoming.turn_failed", req.language or language_of(req.text))
            await self.send(Event("not-handled", {"text": text}))
            return
        await self.send(Event("handled", {"text": reply}))


def _first_hit(spotter: WakeSpotter, frames: list[Frame]) -> int | None:
    for f in frames:
        hit = spotter.feed(f)
        if hit is not None:
            return int(getattr(hit, "end_ms", f.start_ms + FRAME_MS))
    return None


# ------------------------------------------------------------------ the server
class WyomingServer:
    """The listener, its mDNS advert and its connections (an async context manager that
    owns them all)."""

    def __init__(
        self,
        services: Services,
        *,
        host: str = "0.0.0.0",
        port: int = DEFAULT_PORT,
        name: str = "yimi",
        advertise: bool = True,
        addresses: list[str] | None = None,
    ) -> None:
        self.services = services
        self.host = host
        self.port = port
        self.name = name
        self.advertise = advertise
        self.addresses = addresses
        self._server: asyncio.Server | None = None
        self._tasks = TaskOwner("wyoming")
        self._connections: set[asyncio.Task[Any]] = set()
        self._idle_spotters: list[WakeSpotter] = []
        self._wake_lock = asyncio.Lock()
        self._pool: Any = None

    async def __aenter__(self) -> WyomingServer:
        import concurrent.futures

        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="wyoming")
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        sock = self._server.sockets[0]
        self.port = int(sock.getsockname()[1])
        if self.advertise:  # registered while serving: zeroconf probes the name first
            self._tasks.spawn(self._advert(), "mdns-advert")
        log.info("wyoming %s up: %s:%d", self.name, self.host, self.port)
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        server, self._server = self._server, None
        try:
            if server is not None:
                server.close()
            conns = list(self._connections)
            for task in conns:
                task.cancel()
            await asyncio.gather(*conns, return_exceptions=True)
            await self._tasks.close()
            if server is not None:
                await server.wait_closed()
        finally:
            pool, self._pool = self._pool, None
            if pool is not None:
                await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)

    async def in_worker(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._pool is None:
            raise HubError("wyoming.stopping")
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def acquire_spotter(self) -> WakeSpotter:
        """A wake detector for one connection (an idle one, else a new one)."""
        async with self._wake_lock:
            if self._idle_spotters:
                return self._idle_spotters.pop()
            spotter: WakeSpotter = await self.in_worker(self.services.wake)
            return spotter

    def release_spotter(self, spotter: WakeSpotter) -> None:
        self._idle_spotters.append(spotter)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        if task is None or len(self._connections) >= MAX_CONNECTIONS or self._server is None:
            writer.close()
            return
        self._connections.add(task)
        log.info("wyoming connection from %s", address)
        conn = _Connection(self, writer, address)
        try:
            await conn.run(reader)
        except (ConnectionError, OSError) as exc:
            log.info("wyoming %s: connection lost: %s", address, exc)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("wyoming %s: connection failed", address)
        finally:
            conn.close()
            self._connections.discard(task)
            writer.close()

    # -------------------------------------------------------------- mDNS
    async def _advert(self) -> None:
        """Advertise ``_wyoming._tcp`` until cancelled, then withdraw the advert."""
        from zeroconf import InterfaceChoice, IPVersion
        from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

        chosen = discovery.mdns_interfaces()
        if isinstance(chosen, InterfaceChoice):
            zc = AsyncZeroconf(interfaces=chosen, ip_version=IPVersion.V4Only)
        else:
            zc = AsyncZeroconf(interfaces=chosen)
        addresses = self.addresses or ["127.0.0.1"]
        info = AsyncServiceInfo(
            SERVICE_TYPE,
            f"{self.name}.{SERVICE_TYPE}",
            port=self.port,
            addresses=[socket.inet_aton(a) for a in addresses],
            properties={"version": VERSION},
            server=f"{self.name}-wyoming.local.",
        )
        registered = False
        try:
            try:
                await (await zc.async_register_service(info, allow_name_change=True))
            except Exception as exc:  # serving goes on; Home Assistant can be given the port
                log.warning("wyoming service not advertised on mDNS: %s", exc)
                return
            registered = True
            log.info("advertising wyoming %s on mDNS at %s:%d", info.name, addresses, self.port)
            await asyncio.Event().wait()
        finally:
            try:
                if registered:
                    await (await zc.async_unregister_service(info))
            finally:
                await zc.async_close()
