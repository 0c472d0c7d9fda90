"""Voice utterances on the hub: audio reassembly, transcription, scope, timeline, archive.

A device sends a voice utterance as ``AUDIO_CHUNK`` envelopes (the FLAC segment in pieces)
followed by the ``UTTERANCE`` whose ``voice`` field (``VoiceInfo``) says how many pieces,
how many bytes and their SHA-256. :class:`ChunkAssembler` keeps the pieces per (device,
utterance id) under caps (:data:`MAX_CHUNKS` pieces, :data:`MAX_AUDIO_BYTES`, a
:data:`TTL_S` life, a bound on pending utterances); :class:`Hearing` then

1. checks the wake: an utterance whose wake lost arbitration (:mod:`hub.voice.wake_arbiter`) is
   not answered — its audio is archived as stood down, it is logged and counted, and the
   device is told again to stand down (it then withdraws the request);
2. checks the assembled audio against the utterance (pieces, bytes, SHA-256) and decodes
   the FLAC (``hardware.audio.decode_flac``);
3. transcribes it in a worker thread (the hub's loop never waits on the model) while the
   audio goes to the L5 archive (``hub/archive``) as 16 kHz PCM with the utterance's trace
   id. The recogniser is the ``asr`` role of the model providers (:mod:`hub.brain.providers`:
   the first endpoint that may hear voice audio — local, or remote with ``audio:voice``
   allow-listed — with its key decrypted from the provider store), else local
   faster-whisper; a confirmed model change is applied before the next utterance is
   transcribed, and an utterance in flight keeps its recogniser;
4. asks the voiceprint authority for the turn's scope (owner / owner_uncertain / guest);
5. admits the turn (:mod:`hub.turns.admission`, the one path of every utterance) with the
   transcript, the leading wake word removed, as its text, and the voice facts in its meta.

Speculative recognition (:mod:`hub.voice.preview`): an ``AUDIO_PREVIEW`` the device sent
while its end-of-speech hang-over ran is transcribed in the same worker, by the recogniser
the utterance would get (local only: a remote endpoint hears nothing more than what is
answered); when the utterance vouches for it (``VoiceInfo.preview_samples``) and its audio
is the preview's samples exactly, the preview's transcript is the utterance's (meta
``asr_preview``, ``asr_ms`` the wait that was left), else step 3 runs as always.

Problems with the audio or the recogniser are admitted too, with the error in the meta: the
hub answers with a reply that says what went wrong (the device would otherwise retry
forever); an utterance still missing pieces after :data:`TTL_S` gets such a reply too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Container, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, Protocol

from google.protobuf.message import Message

from hub.archive.archive import WriteResult
from hub.archive.writer import ArchiveSource, LazyArchiveWriter
from hub.brain.providers import AsrRoute, Endpoint, ProviderStore, asr_route
from hub.errors import HubError
from hub.timeline import ReplayState
from hub.turns.admission import AudioFacts, Inbound, TurnMeta, VoiceFacts
from hub.voice.preview import Heard, Held, Previews, check_preview, covers
from hub.voice.wake_arbiter import Decision, Outcome, WakeArbiter
from models.asr import (
    AUTO,
    LANGUAGES,
    WAKE_WORD,
    WINDOWS,
    OpenAITranscriber,
    Samples,
    SecretHandle,
    Transcriber,
    Transcript,
    WhisperTranscriber,
    strip_wake,
)
from models.errors import ModelError
from protos import mesh_pb2, voice_pb2
from protos.errors import YimiError
from sync.envelope import MAX_ID_CHARS, DropReason, Opened
from sync.tasks import TaskOwner, woken

log = logging.getLogger(__name__)

MAX_CHUNKS = 32
"""pieces one utterance's audio may come in"""
MAX_CHUNK_BYTES = 192 * 1024
"""bytes of one piece"""
MAX_AUDIO_BYTES = 2 * 1024 * 1024
"""bytes of one utterance's encoded audio"""
TTL_S = 60.0
"""seconds an utterance's pieces are kept waiting for the rest (from the first piece, or
from the utterance when it came first)"""

MAX_PENDING = 64
"""utterances whose audio is being assembled, over all devices"""
MAX_PENDING_PER_DEVICE = 8
MAX_PENDING_BYTES = 32 * 1024 * 1024
"""bytes held for all pending assemblies together"""
MAX_IN_FLIGHT = 8
"""voice utterances being processed at once; more are left for the device to retry"""
MAX_AUDIO_SECONDS = 120.0
"""longest decoded utterance"""
DONE_KEEP_S = 300.0
"""seconds a finished utterance is remembered (its re-sent pieces are ignored)"""
MAX_DONE = 4096
EXPIRE_EVERY_S = 1.0
EMBEDDING_BYTES = 256 * 4
AUDIO_SOURCE = "voice"
ARCHIVE_FRAME_MS = 100
"""the utterance's audio goes to the archive's batching writer in frames this long"""
ARCHIVE_FRAME_BYTES = ARCHIVE_FRAME_MS * 32

Key = tuple[str, str]
"""(device, utterance id)"""


# ------------------------------------------------------------------ reassembly
class Added(StrEnum):
    ACCEPTED = "accepted"
    COMPLETE = "complete"
    DUPLICATE = "duplicate"
    MALFORMED = "malformed"
    """the piece itself is not well formed (the envelope is dropped)"""
    FAILED = "failed"
    """the piece broke a cap: the utterance's audio is refused"""
    REFUSED = "refused"
    """no room to hold another utterance's audio now"""


@dataclass
class _Assembly:
    total: int
    first_s: float
    deadline_s: float
    parts: dict[int, bytes] = field(default_factory=dict)
    size: int = 0
    failed: str = ""


@dataclass(frozen=True)
class AssemblyState:
    have: int
    total: int
    size: int
    failed: str
    deadline_s: float

    @property
    def complete(self) -> bool:
        return not self.failed and self.total > 0 and self.have == self.total


class ChunkAssembler:
    """Pieces of encoded audio per (device, utterance id), under caps. Pure (no I/O);
    ``clock`` is monotonic seconds."""

    def __init__(
        self,
        *,
        max_chunks: int = MAX_CHUNKS,
        max_chunk_bytes: int = MAX_CHUNK_BYTES,
        max_bytes: int = MAX_AUDIO_BYTES,
        ttl_s: float = TTL_S,
        max_pending: int = MAX_PENDING,
        max_per_device: int = MAX_PENDING_PER_DEVICE,
        max_pending_bytes: int = MAX_PENDING_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_chunks = max_chunks
        self.max_chunk_bytes = max_chunk_bytes
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self.max_pending = max_pending
        self.max_per_device = max_per_device
        self.max_pending_bytes = max_pending_bytes
        self._clock = clock
        self._pending: OrderedDict[Key, _Assembly] = OrderedDict()
        self._bytes = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def add(self, device: str, chunk: voice_pb2.AudioChunk) -> tuple[Added, str]:
        """Take one piece; returns what happened and why (for the log)."""
        uid, index, total, data = chunk.utterance_id, chunk.index, chunk.total, chunk.data
        if not uid or len(uid) > MAX_ID_CHARS:
            return Added.MALFORMED, "utterance id empty or too long"
        if not 1 <= total <= self.max_chunks:
            return Added.MALFORMED, f"total {total} is not 1..{self.max_chunks}"
        if index >= total:
            return Added.MALFORMED, f"index {index} is not below total {total}"
        if not data:
            return Added.MALFORMED, "empty piece"
        key = (device, uid)
        a = self._pending.get(key)
        if a is None:
            if len(self._pending) >= self.max_pending or (
                sum(1 for d, _ in self._pending if d == device) >= self.max_per_device
            ):
                return Added.REFUSED, f"{len(self._pending)} utterances' audio already pending"
            if self._bytes + len(data) > self.max_pending_bytes:
                return Added.REFUSED, f"{self._bytes} bytes of audio already pending"
            now = self._clock()
            a = self._pending[key] = _Assembly(total, now, now + self.ttl_s)
        if a.failed:
            return Added.FAILED, a.failed
        if total != a.total:
            return self._fail(key, a, f"piece {index} says {total} pieces, earlier ones {a.total}")
        if index in a.parts:
            return Added.DUPLICATE, f"piece {index} again"
        if len(data) > self.max_chunk_bytes:
            return self._fail(
                key, a, f"piece {index} is {len(data)} bytes (at most {self.max_chunk_bytes})"
            )
        if a.size + len(data) > self.max_bytes:
            return self._fail(key, a, f"over {self.max_bytes} bytes of audio")
        if self._bytes + len(data) > self.max_pending_bytes:
            return Added.REFUSED, f"{self._bytes} bytes of audio already pending"
        a.parts[index] = bytes(data)
        a.size += len(data)
        self._bytes += len(data)
        return (Added.COMPLETE if len(a.parts) == a.total else Added.ACCEPTED), ""

    def _fail(self, key: Key, a: _Assembly, reason: str) -> tuple[Added, str]:
        self._bytes -= a.size
        a.parts.clear()
        a.size = 0
        a.failed = reason
        return Added.FAILED, reason

    def state(self, key: Key) -> AssemblyState | None:
        a = self._pending.get(key)
        if a is None:
            return None
        return AssemblyState(len(a.parts), a.total, a.size, a.failed, a.deadline_s)

    def take(self, key: Key) -> bytes:
        """The whole audio (pieces in order) of a complete assembly, which is forgotten."""
        a = self._pending.get(key)
        if a is None or a.failed or len(a.parts) != a.total:
            raise KeyError(key)
        del self._pending[key]
        self._bytes -= a.size
        return b"".join(a.parts[i] for i in range(a.total))

    def discard(self, key: Key) -> None:
        a = self._pending.pop(key, None)
        if a is not None:
            self._bytes -= a.size

    def expire(
        self, now: float | None = None, keep: Container[Key] = ()
    ) -> list[tuple[Key, AssemblyState]]:
        """Forget assemblies past their deadline (except those in ``keep``: their utterance
        is waiting on them and reports the failure); returns them as they were."""
        now = self._clock() if now is None else now
        gone: list[tuple[Key, AssemblyState]] = []
        for key, a in list(self._pending.items()):
            if a.deadline_s <= now and key not in keep:
                state = self.state(key)
                assert state is not None
                gone.append((key, state))
                self.discard(key)
        return gone


# ------------------------------------------------------------------ checks
def check_voice(voice: voice_pb2.VoiceInfo) -> str:
    """Why a voice utterance's ``VoiceInfo`` is malformed ("" if it is fine)."""
    if voice.audio_chunks > MAX_CHUNKS:
        return f"{voice.audio_chunks} audio pieces (at most {MAX_CHUNKS})"
    if voice.audio_bytes > MAX_AUDIO_BYTES:
        return f"{voice.audio_bytes} audio bytes (at most {MAX_AUDIO_BYTES})"
    if voice.audio_chunks and len(voice.audio_sha256) != 32:
        return "audio without a 32-byte SHA-256"
    if voice.audio_format not in ("", "flac"):
        return f"audio format {voice.audio_format[:20]!r} (only flac)"
    if voice.sample_rate not in (0, 16_000):
        return f"sample rate {voice.sample_rate} (only 16000)"
    if voice.embedding and len(voice.embedding) != EMBEDDING_BYTES:
        return f"embedding of {len(voice.embedding)} bytes (not {EMBEDDING_BYTES})"
    if max(len(voice.wake_id), len(voice.call_id)) > MAX_ID_CHARS:
        return "wake or call id too long"
    return ""


def verify_audio(uid: str, data: bytes, voice: voice_pb2.VoiceInfo) -> None:
    """HubError ``voice_audio.refused`` unless ``data`` is what the utterance announced."""
    if voice.audio_bytes and len(data) != voice.audio_bytes:
        raise HubError(
            "voice_audio.refused",
            id=uid,
            reason=f"{len(data)} bytes arrived, the utterance says {voice.audio_bytes}",
        )
    if hashlib.sha256(data).digest() != voice.audio_sha256:
        raise HubError("voice_audio.refused", id=uid, reason="the audio does not match its SHA-256")


def decode_audio(uid: str, data: bytes, max_seconds: float = MAX_AUDIO_SECONDS) -> Samples:
    """Untrusted FLAC → 16 kHz mono int16; HubError ``voice_audio.undecodable`` if not."""
    from hardware.audio import decode_flac  # soundfile and soxr: only once audio arrives

    try:
        return decode_flac(data, max_seconds, what=f"the audio of {uid}")
    except YimiError as exc:  # AudioError
        raise HubError("voice_audio.undecodable", id=uid, reason=str(exc)) from None


# ------------------------------------------------------------------ settings
MOVED_ASR_KEYS = ("engine", "base_url", "model", "api_key_file", "timeout_s")
"""``asr:`` keys that configured a remote recogniser: now the ``asr`` role of the model
providers (owner-signed, key encrypted on the hub); a home.yaml with them is refused"""


@dataclass(frozen=True)
class AsrSettings:
    """``asr:`` in ``home.yaml`` (all optional): the local faster-whisper recogniser::

    asr:
      language: auto             # auto (zh or en, per utterance) | zh | en
      model: whisper-tiny.en     # a catalog asr model; default: the catalog's selection
                                 # (whisper-base, multilingual)
      cpu_threads: 2
      beam_size: 1
      model_dir: /path/to/ct2    # a CTranslate2 folder instead of a catalog model
      wake_word: Yimi
      window: auto               # fit: the encoder runs on the utterance (+4 s), 0.2 of
                                 # the cost; full: Whisper's 30 s window every time;
                                 # auto: fit for multilingual models, full for tiny.en

    A transcription endpoint is the ``asr`` role of the model providers (``yimi brain
    use``), never a home.yaml key."""

    cpu_threads: int = 2
    beam_size: int = 1
    model_dir: str | None = None
    model: str | None = None
    language: str = AUTO
    wake_word: str = WAKE_WORD
    window: str = AUTO

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> AsrSettings:
        raw = (config or {}).get("asr")
        raw = {} if raw is None else raw
        if not isinstance(raw, Mapping):
            raise ModelError("asr.config", reason="'asr' is not a mapping")
        moved = [k for k in MOVED_ASR_KEYS if k in raw]
        if moved and moved != ["model"]:  # "model" alone names a catalog model
            raise ModelError("asr.moved", keys=", ".join(moved))
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(map(str, raw)) - known)
        if unknown:
            raise ModelError("asr.config", reason=f"unknown keys {', '.join(unknown)}")
        values: dict[str, Any] = {}
        for name in ("cpu_threads", "beam_size"):
            if name in raw:
                v = raw[name]
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise ModelError("asr.config", reason=f"{name} must be a whole number ≥ 1")
                values[name] = v
        for name in ("model_dir", "model", "wake_word"):
            if raw.get(name) is not None:
                if not isinstance(raw[name], str) or not raw[name].strip():
                    raise ModelError("asr.config", reason=f"{name} must be a non-empty text")
                values[name] = raw[name].strip()
        if "model" in values and "model_dir" in values:
            raise ModelError("asr.config", reason="give model or model_dir, not both")
        for name, choices in (("language", (AUTO, *LANGUAGES)), ("window", WINDOWS)):
            if raw.get(name) is not None:
                value = raw[name]
                if not isinstance(value, str) or value.strip().lower() not in choices:
                    raise ModelError(
                        "asr.config", reason=f"{name} {value!r}: one of {', '.join(choices)}"
                    )
                values[name] = value.strip().lower()
        return cls(**values)


def endpoint_transcriber(
    endpoint: Endpoint,
    api_key: SecretHandle | None,
    wake_word: str = WAKE_WORD,
    language: str = AUTO,
) -> OpenAITranscriber:
    """The recogniser of an ``asr`` endpoint; ``api_key`` decrypts its stored key when a
    request is made (the transcriber keeps no key). ``language`` ``auto`` sends none (the
    service detects it and says which in its answer)."""
    return OpenAITranscriber(
        endpoint.base_url,
        api_key,
        endpoint.model,
        language=None if language == AUTO else language,
        prompt=wake_word + ",",
    )


def make_transcriber(home: Path, settings: AsrSettings) -> Transcriber:
    """The local recogniser (the model is not loaded yet): ``model_dir`` when set, else the
    catalog model ``model`` (or the catalog's ``asr`` selection: Whisper base, joined from
    its packages into ``<home>/models/`` on first use), verified there."""
    model_dir, label = None, None
    if settings.model_dir:
        model_dir = Path(settings.model_dir)
    else:
        from models.catalog import Catalog

        catalog = Catalog.open(home)
        if settings.model:
            entry = catalog.resolve_name("asr", settings.model)
        else:
            entry = catalog.resolve("asr")
        if entry.runtime != "ctranslate2":
            raise ModelError(
                "asr.config",
                reason=f"the catalog's asr model {entry.name} runs on {entry.runtime}; "
                "hub speech recognition runs CTranslate2 (faster-whisper) models",
            )
        if settings.language == "zh" and entry.name.endswith(".en"):
            raise ModelError(
                "asr.config",
                reason=f"language zh: the model {entry.name} hears English only; "
                "use model whisper-base or language auto or en",
            )
        model_dir, label = entry.file, f"faster-whisper:{entry.name}@{entry.version}/int8"
    return WhisperTranscriber(
        model_dir,
        cpu_threads=settings.cpu_threads,
        beam_size=settings.beam_size,
        language=settings.language,
        wake_word=settings.wake_word,
        label=label,
        window=settings.window,
    )


# ------------------------------------------------------------------ scope
class Scope(NamedTuple):
    scope: str
    score: float
    reason: str


ScopeFn = Callable[[str, mesh_pb2.Utterance], Scope | tuple[str, float, str]]
"""(device, utterance) → (scope, score, reason); may block (runs in a thread)."""


def no_voiceprint_scope(device: str, utt: mesh_pb2.Utterance) -> Scope:
    """Without a voiceprint authority nobody is the owner by voice."""
    return Scope("guest", math.nan, "no_voiceprint_authority")


class ScopeAuthority(Protocol):
    def scope_for(
        self,
        channel: str,
        embedding: bytes | None,
        voiced_ms: int,
        call_id: str,
        device: str,
        *,
        at_ms: int | None = ...,
        quality: float = ...,
        speaker_model: str = ...,
    ) -> tuple[str, float, str]: ...


def authority_scope(
    authority: ScopeAuthority, channel_of: Callable[[str], str | None] | None = None
) -> ScopeFn:
    """A :data:`ScopeFn` over ``hub/voice/voiceprints.py``'s ``scope_for``; the channel is the
    device's profile channel (``channel_of``) when it has one, else the utterance's."""

    def scope(device: str, utt: mesh_pb2.Utterance) -> Scope:
        v = utt.voice
        channel = (channel_of(device) if channel_of else None) or utt.channel
        s, score, reason = authority.scope_for(
            channel,
            v.embedding or None,
            int(v.voiced_ms),
            v.call_id,
            device,
            at_ms=utt.started_ms or None,
            quality=float(v.quality),
            speaker_model=v.speaker_model,
        )
        return Scope(s, float(score), reason)

    return scope


# ------------------------------------------------------------------ the hub's side
AdmitFn = Callable[[Inbound, str, TurnMeta], Awaitable[None]]
"""(accepted utterance, text, meta): admission (``hub.turns.admission.Admission.admit``):
the timeline, then the answer (the hub's words when ``meta.error`` is set)."""
SendFn = Callable[[str, int, Message, str | None], Awaitable[object]]
"""(device, kind, payload, trace id): seal and publish to one device."""
DropFn = Callable[[DropReason, str, str], None]
NotStoredFn = Callable[[Opened, str, str], Awaitable[None]]
"""(the utterance's envelope, why its audio was not stored, language): tell its device"""


def _finite(x: float) -> float | None:
    return round(float(x), 4) if math.isfinite(x) else None


class Recognised(NamedTuple):
    transcript: Transcript
    asr_ms: float
    """the time the utterance waited on recognition"""
    preview: bool
    """the transcript is its preview's"""


class Hearing:
    """The hub's hearing of voice utterances (an async context manager owning its worker
    and tasks): audio pieces in, a transcript and a scope out, handed to ``admit``. It takes
    narrow callables from the mesh port (``send``, ``drop``, ``commit``, ``count``), never
    the daemon.

    ``providers`` is the model-provider store (or a factory opening one: the hub's voice
    worker then owns that connection and closes it); its ``asr`` role picks the recogniser
    before each utterance. ``transcriber`` is the *local* recogniser used when no ``asr``
    endpoint is usable (default: faster-whisper per ``asr:`` in ``config``, loaded once)."""

    def __init__(
        self,
        *,
        home: Path,
        config: Mapping[str, Any] | None = None,
        admit: AdmitFn,
        send: SendFn,
        drop: DropFn,
        commit: Callable[[Opened], ReplayState | None],
        answered: Callable[[str], bool],
        count: Callable[[str], None],
        arbiter: WakeArbiter | None = None,
        scope: ScopeFn = no_voiceprint_scope,
        transcriber: Transcriber | Callable[[], Transcriber] | None = None,
        providers: ProviderStore | Callable[[], ProviderStore] | None = None,
        archive: ArchiveSource = None,
        not_stored: NotStoredFn | None = None,
        wake_word: str = WAKE_WORD,
        assembler: ChunkAssembler | None = None,
        previews: Previews | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.home = home
        self._admit = admit
        self._send = send
        self._drop = drop
        self._commit = commit
        self._answered = answered
        self._count = count
        self.arbiter = arbiter
        self.scope = scope
        self.config = config
        self.settings = AsrSettings()
        """``asr:`` of home.yaml, checked on entry (a moved or unknown key stops the hub)"""
        self._local: Transcriber | None = None
        self._make_local: Callable[[], Transcriber] | None = None
        if transcriber is not None and hasattr(transcriber, "transcribe"):
            self._local = transcriber  # type: ignore[assignment]
        elif transcriber is not None:
            self._make_local = transcriber  # type: ignore[assignment]
        self._providers: ProviderStore | None = None
        self._open_providers: Callable[[], ProviderStore] | None = None
        if isinstance(providers, ProviderStore):
            self._providers = providers
        elif providers is not None:
            self._open_providers = providers
        self._asr: tuple[int, Transcriber] | None = None
        """(configuration version, recogniser) of the last utterance (worker thread only)"""
        self.asr_route = AsrRoute(-1, None)
        """the recogniser the provider configuration gave the last utterance, and why"""
        self._archive_source = archive
        self._writer = LazyArchiveWriter(home, "voice audio", archive)
        """the archive's batching writer (500 ms / 20 frames / 64 KiB), opened at first use"""
        self._not_stored = not_stored
        self.wake_word = wake_word
        self.assembler = assembler or ChunkAssembler(clock=clock)
        self.previews = previews if previews is not None else Previews(clock=clock)
        """speculative previews of utterances' audio, with their recognition under way"""
        self._clock = clock
        self._in_flight: set[Key] = set()
        self._taken: set[Key] = set()
        self._done: OrderedDict[Key, float] = OrderedDict()
        self._events: dict[Key, asyncio.Event] = {}
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._tasks: TaskOwner | None = None
        self.transcripts: list[Transcript] = []
        """the last transcripts (at most 100), for status and benches"""

    # -------------------------------------------------------------- lifecycle
    async def __aenter__(self) -> Hearing:
        self.settings = AsrSettings.from_config(self.config)
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="asr")
        self._tasks = TaskOwner("voice")
        self._tasks.spawn(self._expire_loop(), "expire")
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._tasks is not None:
            await self._tasks.close()
            self._tasks = None
        pool, self._pool = self._pool, None
        if pool is not None:  # a transcription already running is let finish
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)
        await self._writer.__aexit__(None, None, None)  # pending audio first, then the archive
        if self._open_providers is not None and self._providers is not None:
            self._providers.close()  # the store this worker opened
            self._providers = None

    # -------------------------------------------------------------- incoming
    async def on_chunk(self, opened: Opened) -> None:
        """Handle an ``AUDIO_CHUNK`` envelope (the caller committed its counter)."""
        chunk = opened.payload
        assert isinstance(chunk, voice_pb2.AudioChunk)
        key = (opened.sender, chunk.utterance_id)
        if key in self._done or key in self._taken:
            self._count("voice.chunk_after_use")
            return
        added, reason = self.assembler.add(opened.sender, chunk)
        if added is Added.MALFORMED:
            self._drop(DropReason.MALFORMED, opened.sender, "audio chunk: " + reason)
            return
        if added in (Added.FAILED, Added.REFUSED):
            self._count(f"voice.chunk_{added.value}")
            log.warning(
                "audio piece %d/%d of %s from %s %s: %s",
                chunk.index,
                chunk.total,
                chunk.utterance_id[:MAX_ID_CHARS],
                opened.sender,
                added.value,
                reason,
            )
        elif added is Added.DUPLICATE:
            self._count("voice.chunk_duplicate")
        event = self._events.get(key)
        if event is not None:
            event.set()

    async def on_preview(self, opened: Opened) -> None:
        """Handle an ``AUDIO_PREVIEW`` envelope (the caller committed its counter): hold it
        and transcribe it in the worker. Best effort: a refused one is dropped or counted."""
        preview = opened.payload
        assert isinstance(preview, voice_pb2.AudioPreview)
        bad = check_preview(preview)
        if bad is not None:
            self._count("voice.preview_dropped")
            self._drop(bad[0], opened.sender, "audio preview: " + bad[1])
            return
        key = (opened.sender, preview.utterance_id)
        if key in self._done or key in self._in_flight or self._tasks is None:
            self._count("voice.preview_late")
            log.info("audio preview of %s from %s ignored: too late", key[1], opened.sender)
            return
        refusal = self.previews.refusal(key)
        if refusal:
            self._count("voice.preview_refused")
            log.warning("audio preview of %s from %s refused: %s", key[1], opened.sender, refusal)
            return
        task = self._tasks.spawn(self._hear_preview(key, preview), f"preview-{key[1][:24]}")
        old = self.previews.put(key, preview.samples, task)
        if old is not None:  # the latest wins
            old.task.cancel()
            self._count("voice.preview_replaced")
        self._count("voice.preview_received")

    async def _hear_preview(self, key: Key, preview: voice_pb2.AudioPreview) -> Heard | None:
        """The preview's recognition, or ``None`` (logged and counted; never raises)."""
        device, uid = key
        try:
            samples = await self._in_worker(decode_audio, uid, preview.data)
            if len(samples) != preview.samples:
                self._count("voice.preview_forged")
                log.warning(
                    "audio preview of %s from %s refused: %d samples, it says %d",
                    uid,
                    device,
                    len(samples),
                    preview.samples,
                )
                return None
            heard: Heard | None = await self._in_worker(self._transcribe_preview, samples)
        except YimiError as exc:
            self._count("voice.preview_failed")
            log.warning("audio preview of %s from %s not heard: %s", uid, device, exc)
            return None
        except Exception:  # a recogniser's own failure: the utterance is transcribed as always
            self._count("voice.preview_failed")
            log.exception("audio preview of %s from %s failed", uid, device)
            return None
        if heard is None:
            self._count("voice.preview_remote")
        return heard

    def _transcribe_preview(self, samples: Samples) -> Heard | None:
        """Worker thread: the preview's transcript by the next utterance's recogniser, if
        that is the local one (``None`` otherwise)."""
        recogniser = self._recogniser()
        if recogniser is not self._local:
            return None
        transcript = recogniser.transcribe(samples)
        return Heard(recogniser, samples, transcript, time.perf_counter())

    async def on_utterance(self, opened: Opened) -> None:
        """Handle a voice ``UTTERANCE`` (id and text already checked: ``utterance_problem``)."""
        utt = opened.payload
        assert isinstance(utt, mesh_pb2.Utterance)
        problem = check_voice(utt.voice)
        if problem:
            self._drop(DropReason.MALFORMED, opened.sender, "voice utterance: " + problem)
            return
        self._commit(opened)
        key = (opened.sender, utt.id)
        if key in self._in_flight:
            self._count("voice.retry_in_flight")
            log.debug("utterance %s from %s is still being processed", utt.id, opened.sender)
            return
        if self._answered(utt.id):  # a retry of a finished turn: the same reply again
            self.assembler.discard(key)
            self._forget_preview(key)
            self._remember_done(key)
            await self._admit(self._inbound(opened), "", self._voice_meta(opened, utt))
            return
        if len(self._in_flight) >= MAX_IN_FLIGHT or self._tasks is None:
            self._count("voice.busy")
            log.warning(
                "voice utterance %s from %s left for a retry: %d already in progress",
                utt.id,
                opened.sender,
                len(self._in_flight),
            )
            return
        self._in_flight.add(key)
        self._tasks.spawn(self._process(opened, key), f"utterance-{utt.id[:24]}")

    # -------------------------------------------------------------- processing
    async def _process(self, opened: Opened, key: Key) -> None:
        utt = opened.payload
        assert isinstance(utt, mesh_pb2.Utterance)
        voice = utt.voice
        try:
            if voice.wake_id and self.arbiter is not None:
                wait_s = 4 * self.arbiter.window_ms / 1000
                state, decision = await self.arbiter.wait_outcome(
                    opened.sender, voice.wake_id, wait_s
                )
                if state is Outcome.STAND_DOWN and decision is not None:
                    await self._stood_down(opened, key, decision)
                    return
            try:
                await self._answer(opened, key)
            except YimiError as exc:
                await self._fail(opened, exc)
        except Exception:
            log.exception("voice utterance %s from %s failed", utt.id, opened.sender)
            self._count("voice.failed")
        finally:
            self._in_flight.discard(key)
            self._taken.discard(key)
            self._events.pop(key, None)
            self.assembler.discard(key)
            self._forget_preview(key)
            self._remember_done(key)

    def _forget_preview(self, key: Key) -> None:
        held = self.previews.take(key)
        if held is not None:
            held.task.cancel()

    async def _answer(self, opened: Opened, key: Key) -> None:
        utt = opened.payload
        assert isinstance(utt, mesh_pb2.Utterance)
        voice = utt.voice
        meta = self._voice_meta(opened, utt)
        if voice.audio_chunks:
            held = self.previews.take(key)
            if held is not None and held.samples != voice.preview_samples:
                held.task.cancel()  # speech resumed after it (or the device vouches for none)
                self._count("voice.preview_unvouched")
                held = None
            data = await self._audio(key, voice)
            complete_s = time.perf_counter()
            sha = voice.audio_sha256.hex()
            if held is None:
                samples = await self._in_worker(decode_audio, utt.id, data)
            else:  # not behind the preview's transcription in the worker
                samples = await asyncio.to_thread(decode_audio, utt.id, data)
            # Both finish before a failure goes on: the audio is archived even when it is not
            # understood (gather would otherwise raise while the archiving still runs).
            transcribed: Recognised | BaseException
            archived: dict[str, object] | BaseException
            transcribed, archived = await asyncio.gather(
                self._recognise(utt.id, samples, held, complete_s),
                self._archive_audio(opened, samples, {"audio_sha256": sha}),
                return_exceptions=True,
            )
            if isinstance(transcribed, BaseException):
                raise transcribed
            if isinstance(archived, BaseException):
                raise archived
            transcript = transcribed.transcript
            if archived.get("stored") is not True:
                await self._tell_not_stored(opened, str(archived.get("reason")), transcript)
            raw = transcript.text
            audio = AudioFacts(
                sha,
                len(data),
                len(samples) * 1000 // 16_000,
                archived,
                round(transcribed.asr_ms, 1),
                raw,
                transcribed.preview,
            )
            meta = replace(
                meta, audio=audio, asr_model=transcript.model, language=transcript.language
            )
        else:  # a device that recognised the speech itself
            raw = utt.text
            meta = replace(meta, asr_model="device")
        loose = voice.window == voice_pb2.WAKE or bool(voice.wake_id)
        text = strip_wake(raw, self.wake_word, loose=loose)
        scope = Scope(*await asyncio.to_thread(self.scope, opened.sender, utt))
        meta = replace(
            meta,
            scope=scope.scope,
            scope_score=_finite(scope.score),
            scope_reason=scope.reason,
        )
        log.info(
            "voice %s from %s: %r (scope %s, %s)",
            utt.id,
            opened.sender,
            text,
            scope.scope,
            scope.reason,
        )
        self._count("voice.transcribed")
        await self._admit(self._inbound(opened), text, meta)

    async def _recognise(
        self, uid: str, samples: Samples, held: Held | None, complete_s: float
    ) -> Recognised:
        """The utterance's transcript: its preview's when that covers ``samples`` exactly
        (the wait left since its audio was complete at ``complete_s``), else the worker's."""
        waited_ms = 0.0
        if held is not None:
            await asyncio.wait([held.task])  # its own cancellation is not ours
            heard = None if held.task.cancelled() else held.task.result()
            why = "its recognition did not finish"
            if heard is not None:
                waited_ms = max(0.0, heard.done_s - complete_s) * 1000
                why = await self._in_worker(self._preview_fits, heard, samples)
            if not why:
                self._count("voice.preview_used")
                assert heard is not None
                return Recognised(heard.transcript, waited_ms, True)
            self._count("voice.preview_unused")
            log.info("audio preview of %s not used: %s", uid, why)
        transcript: Transcript = await self._in_worker(self._transcribe, samples)
        return Recognised(transcript, waited_ms + transcript.elapsed_ms, False)

    def _preview_fits(self, heard: Heard, samples: Samples) -> str:
        """Worker thread: why the preview's transcript is not the utterance's ("" if it is:
        the same audio, and the recogniser the utterance gets now)."""
        why = covers(samples, heard.samples)
        if not why and self._recogniser() is not heard.recogniser:
            why = "the recogniser changed"
        if not why:
            self.transcripts = [*self.transcripts[-99:], heard.transcript]
        return why

    async def _fail(self, opened: Opened, exc: YimiError) -> None:
        """End the turn with a reply that says what went wrong (admitted with its error:
        the hub's words answer it)."""
        utt = opened.payload
        assert isinstance(utt, mesh_pb2.Utterance)
        log.warning("voice utterance %s from %s not understood: %s", utt.id, opened.sender, exc)
        self._count(f"voice.error.{exc.key}")
        meta = replace(self._voice_meta(opened, utt), error=exc.key, error_text=str(exc)[:500])
        await self._admit(self._inbound(opened), "", meta)

    def _inbound(self, opened: Opened) -> Inbound:
        return Inbound(opened, self._commit(opened))

    async def _stood_down(self, opened: Opened, key: Key, decision: Decision) -> None:
        """The wake of this utterance lost: no reply; archive, log, count, re-tell the device."""
        utt = opened.payload
        assert isinstance(utt, mesh_pb2.Utterance)
        self._count("voice.stood_down")
        log.info(
            "voice utterance %s from %s stood down (wake %s answered by %s): not answered",
            utt.id,
            opened.sender,
            decision.wake_id,
            decision.winner,
        )
        archived: object = None
        state = self.assembler.state(key)
        if state is not None and state.complete:
            try:
                data = self.assembler.take(key)
                verify_audio(utt.id, data, utt.voice)
                samples = await self._in_worker(decode_audio, utt.id, data)
                outcome = await self._archive_audio(
                    opened,
                    samples,
                    {"stood_down": True, "wake_id": decision.wake_id, "winner": decision.winner},
                )
                archived = outcome
                if outcome.get("stored") is not True:
                    await self._tell_not_stored(opened, str(outcome.get("reason")), None)
            except YimiError as exc:
                archived = f"not stored: {exc}"
        log.info("stood-down utterance %s audio: %s", utt.id, archived)
        try:
            await self._send(
                opened.sender, mesh_pb2.WAKE_DECISION, decision.message(), opened.trace_id
            )
        except Exception as exc:
            log.info("stand-down for %s not re-sent: %s", opened.sender, exc)

    async def _audio(self, key: Key, voice: voice_pb2.VoiceInfo) -> bytes:
        """The utterance's whole, checked audio, once its pieces are in (or an error)."""
        uid = key[1]
        event = self._events.setdefault(key, asyncio.Event())
        started = self._clock()
        while True:
            event.clear()
            state = self.assembler.state(key)
            if state is not None and state.failed:
                raise HubError("voice_audio.refused", id=uid, reason=state.failed)
            if state is not None and state.total != voice.audio_chunks:
                raise HubError(
                    "voice_audio.refused",
                    id=uid,
                    reason=f"{state.total} pieces sent, the utterance says {voice.audio_chunks}",
                )
            if state is not None and state.complete:
                data = self.assembler.take(key)
                self._taken.add(key)
                verify_audio(uid, data, voice)
                return data
            deadline = state.deadline_s if state is not None else started + self.assembler.ttl_s
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise HubError(
                    "voice_audio.incomplete",
                    id=uid,
                    have=state.have if state is not None else 0,
                    total=voice.audio_chunks,
                    seconds=round(self.assembler.ttl_s),
                )
            await woken(event, min(remaining, EXPIRE_EVERY_S))

    def _voice_meta(self, opened: Opened, utt: mesh_pb2.Utterance) -> TurnMeta:
        v = utt.voice
        facts = VoiceFacts(
            verdict=voice_pb2.Verdict.Name(v.verdict).lower(),
            score=_finite(v.score),
            voiced_ms=v.voiced_ms,
            quality=_finite(v.quality),
            level_dbfs=_finite(v.level_dbfs),
            window=voice_pb2.Window.Name(v.window).lower(),
            wake_id=v.wake_id,
            wake_score=_finite(v.wake_score),
            call_id=v.call_id,
            speaker_model=v.speaker_model,
        )
        return TurnMeta(
            channel=utt.channel, source=AUDIO_SOURCE, counter=opened.counter, voice=facts
        )

    async def transcribe(self, samples: Samples) -> Transcript:
        """What ``samples`` (16 kHz mono) say, by the recogniser of the next utterance, in
        the voice worker (the Wyoming speech-to-text service: no turn, no archive)."""
        result: Transcript = await self._in_worker(self._transcribe, samples)
        return result

    # -------------------------------------------------------------- workers
    async def _in_worker(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._pool is None:
            raise HubError("voice_audio.refused", id="?", reason="the hub is stopping")
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _transcribe(self, samples: Samples) -> Transcript:
        transcript = self._recogniser().transcribe(samples)
        self.transcripts = [*self.transcripts[-99:], transcript]
        return transcript

    def _recogniser(self) -> Transcriber:
        """The recogniser for the next utterance (worker thread): a confirmed model change
        is applied first (between utterances, as the brain does between turns); a new
        configuration version re-reads the ``asr`` role."""
        store = self._provider_store()
        version = -1
        route = AsrRoute(version, None)
        if store is not None:
            try:
                store.apply_pending()
            except Exception as exc:  # the configuration in use stays; the brain retries
                log.warning("a confirmed model change was not applied before ASR: %s", exc)
            config = store.current()
            version = config.version
            if self._asr is not None and self._asr[0] == version:
                return self._asr[1]
            route = asr_route(config)
        elif self._asr is not None:
            return self._asr[1]
        if route.endpoint is not None and store is not None:
            key_id = route.endpoint.key_id
            handle: SecretHandle | None = (lambda: store.api_key(key_id)) if key_id else None
            recogniser: Transcriber = endpoint_transcriber(
                route.endpoint, handle, self.settings.wake_word, self.settings.language
            )
        else:
            recogniser = self._local_recogniser()
        for why in route.skipped:
            log.warning("speech recognition: %s", why)
        if store is not None:
            log.info("speech recognition (model configuration %d): %s", version, route.describe())
        self._asr = (version, recogniser)
        self.asr_route = route
        return recogniser

    def _local_recogniser(self) -> Transcriber:
        if self._local is None:
            if self._make_local is not None:
                self._local = self._make_local()
            else:
                self._local = make_transcriber(self.home, self.settings)
        return self._local

    def _provider_store(self) -> ProviderStore | None:
        if self._providers is None and self._open_providers is not None:
            self._providers = self._open_providers()
        return self._providers

    def busy(self) -> bool:
        """A request window is open: audio arriving or an utterance being heard (archive
        upkeep yields meanwhile)."""
        return bool(self._in_flight) or self.assembler.pending > 0 or len(self.previews) > 0

    async def _archive_audio(
        self, opened: Opened, samples: Samples, extra: dict[str, Any]
    ) -> dict[str, object]:
        """Keep the utterance's audio in the L5 archive through the batching writer (frames
        of ``ARCHIVE_FRAME_MS``), flushed at once; says where, or why not. Stored only once
        every frame's batch is written and fsynced."""
        utt = opened.payload
        assert isinstance(utt, mesh_pb2.Utterance)
        pcm = samples.astype("<i2").tobytes()
        if not pcm:
            return {"stored": False, "reason": "no audio"}
        start_ms = utt.started_ms or opened.time_ms
        total_ms = len(pcm) // 32
        try:
            writer = await self._writer.get()
            if writer is None:
                return {"stored": False, "reason": "no archive"}
            futures = []
            for off in range(0, len(pcm), ARCHIVE_FRAME_BYTES):
                ms = off // 32
                meta = {"utterance_id": utt.id, "offset_ms": ms, "utterance_ms": total_ms, **extra}
                futures.append(
                    writer.add_audio(
                        pcm[off : off + ARCHIVE_FRAME_BYTES],
                        trace_id=opened.trace_id,
                        source=opened.sender,
                        ts_ms=start_ms + ms,
                        meta=meta,
                    )
                )
            # the utterance is whole: its last frames are written now, not when the batch
            # ages out (up to the writer's 500 ms, which the turn would wait for)
            await writer.flush()
            results: list[WriteResult] = await asyncio.gather(*futures)
        except Exception as exc:
            log.exception("archiving the audio of %s failed", utt.id)
            return {"stored": False, "reason": str(exc)[:200]}
        ids = list(dict.fromkeys(r.object_id for r in results if r.stored and r.object_id))
        refused = [r for r in results if not r.stored]
        if refused:
            out: dict[str, object] = {"stored": False, "reason": refused[0].reason[:200]}
            if ids:
                out["stored_ids"] = ids  # the part written before the disk refused the rest
            return out
        return {"stored": True, "id": ids[0], "ids": ids}

    async def _tell_not_stored(
        self, opened: Opened, reason: str, transcript: Transcript | None
    ) -> None:
        """Say it to the device (the timeline) when its audio was not stored."""
        self._count("voice.not_stored")
        if self._not_stored is None:
            return
        lang = transcript.language if transcript is not None else self.settings.language
        try:
            await self._not_stored(opened, reason, lang if lang in LANGUAGES else "en")
        except Exception:
            log.exception("telling %s its audio was not stored failed", opened.sender)

    # -------------------------------------------------------------- upkeep
    def _remember_done(self, key: Key) -> None:
        self._done[key] = self._clock()
        self._done.move_to_end(key)
        while len(self._done) > MAX_DONE:
            self._done.popitem(last=False)

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(EXPIRE_EVERY_S)
            now = self._clock()
            for key, state in self.assembler.expire(now, keep=self._in_flight):
                self._count("voice.audio_expired")
                log.warning(
                    "audio of %s from %s expired with %d of %d pieces and no utterance",
                    key[1],
                    key[0],
                    state.have,
                    state.total,
                )
            for key, held in self.previews.expire(now):
                held.task.cancel()
                self._count("voice.preview_expired")
                log.info("audio preview of %s from %s expired without its utterance", *key[::-1])
            while self._done and now - next(iter(self._done.values())) > DONE_KEEP_S:
                self._done.popitem(last=False)
