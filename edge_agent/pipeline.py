"""The device's ears and voice: what it hears becomes requests, what the hub says is spoken.

Frames (16 kHz mono int16, 32 ms) go through voice activity detection; only while there is
speech are they fed to the wake-word spotter (with the pre-roll before the speech start).
Finished speech segments are sorted by the window they fall in:

* **wake** — the wake word fired in this segment (and the owner went on speaking), or
  in an earlier segment that ended at most ``REQUEST_WINDOW_MS`` before this one started;
* **follow-up** — the segment started within ``FOLLOW_UP_MS`` after a reply finished
  playing (same call id as the request answered);
* otherwise **ambient**: one line in ``<bundle state>/ambient.jsonl`` (source, times,
  level; no audio, no embedding), never sent as an instruction.

A request is embedded by the speaker model, judged locally against this device's
voiceprint (the hub has the final word), encoded as FLAC and committed to the outbox with
its audio as ``AUDIO_CHUNK`` pieces (sent before the Utterance; store and forward).
When the wake word fires the device sends a ``WAKE_CLAIM`` at once; a ``WAKE_DECISION``
to stand down drops the request (logged as ambient, reason ``stood_down``).

Speculative recognition: when the VAD hears a request's speech stop (``SpeechPaused``: its
tail complete, before its end-of-speech hang-over is over) the device sends the hub an
``AUDIO_PREVIEW`` — the segment as it will end if the speech does not resume, as FLAC, keyed
by the utterance id the request will carry — so the hub can transcribe while the hang-over
runs. Only a segment that would be sent anyway is previewed (in a request window, not own
playback, its wake answered — never undecided or stood down —, at most
:data:`PREVIEW_MAX_BYTES`); it is sent at once, best effort (never queued: losing it changes
nothing but latency), and the latest of a segment wins. The request's
``VoiceInfo.preview_samples`` vouches for the latest preview when nothing voiced followed it
(the hub checks the samples too).

While the sink plays a reply, and for ``PLAYBACK_TAIL_MS`` after it, nothing heard is
taken as the owner: the wake spotter is not fed and segments overlapping that time are
ambient (``own_playback``) — the device does not wake itself.

Replies are spoken in their own language (``hardware.tts.Speaker``: Chinese by espeak-ng
``cmn``, English by the neural Piper voice, espeak-ng when Piper is missing or fails) into
the sink and ACKed ``PLAYED``; a device without the ``speaker`` role (or run without an
audio sink) shows them and ACKs ``RENDERED``. A device with both a display (the ``hud``
role: the glasses) and a speaker ACKs ``RENDERED`` as it shows a reply, before its speech
is synthesised, and ``PLAYED`` once it is spoken: the hub knows the reply reached the owner
when it did (the moment that end of speech → reply is timed to), and that it was heard.

Detectors are injected through small protocols (:class:`SpeechDetector`,
:class:`WakeSpotter`, :class:`SpeakerEmbedder`), so the state machine can be tested on
synthetic events; :func:`load_ears` builds the real ones from the device's model catalog.
Model work runs in one worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Protocol

import numpy as np
import numpy.typing as npt
from google.protobuf.message import Message

from hardware.pcm import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE, Frame, Samples
from models.errors import ModelError
from protos import mesh_pb2, voice_pb2
from protos.clock import now_ms
from sync.envelope import Opened, new_trace_id, random_id
from sync.errors import SyncError
from sync.tasks import TaskOwner

log = logging.getLogger(__name__)

REQUEST_WINDOW_MS = 5_000
"""after the wake word ends, a request must start within this (when the wake word was
said on its own)"""
WAKE_ONLY_MS = 600
"""a segment that goes on less than this after the wake word ended is the wake word alone"""
FOLLOW_UP_MS = 8_000
"""after a reply finished playing, speech starting within this is a follow-up request"""
PLAYBACK_TAIL_MS = 300
"""after playback ends, input is still not taken as the owner for this long (room echo)"""
DECISION_WAIT_S = 3.0
"""seconds a finished request waits for the hub's wake decision before it is sent anyway"""
KEEP_WAKES = 256
"""recent wakes remembered (a stand-down that comes late still withdraws their request)"""
PREROLL_MS = 300
"""speech before the detected start fed to the wake spotter"""
RING_FRAMES = 40
"""recent frames kept for the pre-roll (1.28 s: covers a late speech-start decision)"""
TAIL_SILENCE_MS = 1_500
"""silence fed after a finite source ends, so the last segment closes"""
MAX_REQUEST_MS = 30_000
"""longer requests are cut to their first 30 s (the hub accepts at most 60 s)"""
CHUNK_BYTES = 192 * 1024
"""bytes of encoded audio per AUDIO_CHUNK"""
AMBIENT_MAX_BYTES = 4 * 1024 * 1024
"""ambient.jsonl is rotated to ambient.jsonl.1 beyond this"""
MAX_SPOKEN_CHARS = 1_000
PREVIEW_MAX_BYTES = 192 * 1024
"""encoded bytes of an AUDIO_PREVIEW (a longer segment is not previewed)"""


# ---------------------------------------------------------------------- protocols
@dataclass(frozen=True)
class SpeechStarted:
    ms: int


@dataclass(frozen=True)
class SpeechPaused:
    """The speech stopped, the segment is not over yet (its hang-over runs)."""

    samples: Samples
    """the segment as it will end (its tail included) if the speech does not resume"""
    start_ms: int
    voiced: npt.NDArray[np.bool_] | None = None
    """per-sample mask of the voiced frames, if known (its :class:`SpeechEnded`'s mask
    exactly if the speech does not resume)"""


@dataclass(frozen=True)
class SpeechEnded:
    samples: Samples
    start_ms: int
    end_ms: int
    voiced_ms: int
    voiced: npt.NDArray[np.bool_] | None = None
    """per-sample mask of the voiced frames (the speaker model's hint), if known"""
    paused_samples: int = 0
    """samples of the segment's latest :class:`SpeechPaused` if nothing voiced followed it"""


SpeechEvent = SpeechStarted | SpeechPaused | SpeechEnded


class SpeechDetector(Protocol):
    """Voice activity: frames in, speech start / pause / finished segment events out."""

    def feed(self, frame: Frame) -> Sequence[SpeechEvent]: ...


@dataclass(frozen=True)
class WakeFired:
    score: float
    """0..1, higher is a better match"""
    end_ms: int
    """wall clock when the wake word ended"""


class WakeSpotter(Protocol):
    def feed(self, frame: Frame) -> WakeFired | None: ...

    def reset(self) -> None: ...


@dataclass(frozen=True)
class Embedding:
    vector: npt.NDArray[np.float32]
    voiced_ms: int
    quality: float


class SpeakerEmbedder(Protocol):
    model: str
    """catalog ``name@version`` of the embedding model"""

    def embed(
        self, samples: Samples, voiced_mask: npt.NDArray[np.bool_] | None = None
    ) -> Embedding:
        """ModelError when nothing in ``samples`` can be embedded."""
        ...


@dataclass(frozen=True)
class LocalVoiceprint:
    """This device's view of its channel's centroid (sent by the hub)."""

    centroid: npt.NDArray[np.float32]
    line: float
    speaker_model: str = ""


class VoiceprintView(Protocol):
    def current(self) -> LocalVoiceprint | None: ...


class Sink(Protocol):
    @property
    def playing(self) -> bool: ...

    async def play(self, samples: Samples) -> None: ...


class Uplink(Protocol):
    """What the pipeline needs from the device node (``DeviceNode`` has all of it)."""

    def is_connected(self) -> bool: ...

    async def send(self, kind: int, payload: Message) -> None: ...

    def queue_voice(self, utt: mesh_pb2.Utterance, audio: list[bytes], trace_id: str) -> int: ...

    def withdraw(self, item_id: str) -> bool: ...

    async def ack(self, reply: mesh_pb2.Reply, state: int = mesh_pb2.RENDERED) -> None: ...


@dataclass
class Ears:
    speech: SpeechDetector
    wake: WakeSpotter
    speaker: SpeakerEmbedder
    voiceprint: VoiceprintView
    encode: Callable[[Samples], bytes]
    """segment → FLAC bytes"""
    preroll_ms: int = PREROLL_MS
    """speech before a detected start fed to the wake spotter"""


@dataclass(frozen=True)
class DeviceVoice:
    """Who is listening: identity, channel, and how replies are delivered."""

    device_id: str
    name: str
    channel: str
    speaks: bool
    """has a speaker (replies are spoken, ACK PLAYED); every reply is also printed (stdout
    stands in for a HUD)"""
    shows: bool = False
    """has a display (the ``hud`` role): a reply is ACKed RENDERED when shown, before it is
    spoken"""
    source: str = ""
    """where the audio comes from (``mic``, ``-``, a file path), for the ambient log"""


# ---------------------------------------------------------------------- helpers
def level_dbfs(samples: Samples) -> float:
    """RMS level in dBFS (-120 for silence)."""
    if samples.size == 0:
        return -120.0
    rms = float(np.sqrt(np.mean(np.square(samples.astype(np.float64)))))
    return max(-120.0, 20.0 * float(np.log10(max(rms, 1e-9) / 32768.0)))


def verdict_for(
    embedding: npt.NDArray[np.float32], held: LocalVoiceprint, speaker_model: str
) -> tuple[int, float]:
    """The device-side verdict (a ``voice_pb2.Verdict``; the hub decides the scope) and the
    calibrated score of ``embedding`` made by ``speaker_model`` against ``held``."""
    from models import voiceprint as vp

    score = vp.similarity(embedding, held.centroid, vp.floor_for(speaker_model))
    return vp.VERDICT_PROTO[vp.verdict(score, held.line)], score


def split_chunks(data: bytes, size: int | None = None) -> list[bytes]:
    size = size or CHUNK_BYTES
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


# ---------------------------------------------------------------------- hearing (sync)
@dataclass(frozen=True)
class Wake:
    """The wake word fired (events out of :class:`Hearing`)."""

    fired: WakeFired
    level_dbfs: float


@dataclass(frozen=True)
class Segment:
    """A finished speech segment, with the wake word if it fired inside it."""

    speech: SpeechEnded
    wake: Wake | None
    echo: bool
    """some of it was heard while the device played (or just after)"""


@dataclass(frozen=True)
class Pause:
    """A speech segment stopped (not over yet), with the wake word if it fired inside it."""

    speech: SpeechPaused
    wake: Wake | None
    echo: bool

    @property
    def end_ms(self) -> int:
        return self.speech.start_ms + len(self.speech.samples) * 1000 // SAMPLE_RATE


class Hearing:
    """The synchronous core: frames in, :class:`Wake`, :class:`Pause` and :class:`Segment`
    events out.

    Runs in the pipeline's model thread. The wake spotter sees only speech frames (from the
    pre-roll before the detected start) and nothing while ``suppressed``.
    """

    def __init__(
        self, speech: SpeechDetector, wake: WakeSpotter, preroll_ms: int = PREROLL_MS
    ) -> None:
        self.speech = speech
        self.wake = wake
        self.preroll_ms = preroll_ms
        """fed to the wake spotter before a detected start (0 when the detector's start
        already includes its own pre-roll)"""
        self._ring: deque[Frame] = deque(maxlen=RING_FRAMES)
        self._in_speech = False
        self._fed_until = 0
        self._speech_ms = 0
        """end (ms) of the last frame fed to the wake spotter"""
        self._wake_frames: deque[Samples] = deque(maxlen=32)
        self._seg_wake: Wake | None = None
        self._seg_echo = False
        self.frames = 0
        self.stage_s = {"vad": 0.0, "wake": 0.0}

    def feed(self, frame: Frame, suppressed: bool) -> list[Wake | Pause | Segment]:
        out: list[Wake | Pause | Segment] = []
        self.frames += 1
        self._ring.append(frame)
        t0 = time.perf_counter()
        events = self.speech.feed(frame)
        t1 = time.perf_counter()
        self.stage_s["vad"] += t1 - t0
        if suppressed and self._in_speech:
            self._seg_echo = True
        for event in events:
            if isinstance(event, SpeechStarted):
                self._in_speech = True
                self._seg_wake, self._seg_echo = None, suppressed
                self.wake.reset()
                self._wake_frames.clear()
                self._fed_until = event.ms - self.preroll_ms
                self._speech_ms = event.ms
            elif isinstance(event, SpeechPaused):
                out.append(Pause(event, self._seg_wake, self._seg_echo))
            else:
                out.append(Segment(event, self._seg_wake, self._seg_echo))
                self._in_speech = False
                self._seg_wake, self._seg_echo = None, False
        if self._in_speech and not suppressed and self._seg_wake is None:
            # the ring holds the pre-roll and any frames since a late start decision
            # (once the wake word fired, the rest of the segment is the request)
            for f in list(self._ring):
                if f.start_ms + FRAME_MS <= self._fed_until:
                    continue
                self._fed_until = f.start_ms + FRAME_MS
                if f.start_ms >= self._speech_ms:  # the claim's level: speech, no pre-roll
                    self._wake_frames.append(f.samples)
                hit = self.wake.feed(f)
                if hit is not None:
                    heard = list(self._wake_frames) or [f.samples]
                    level = level_dbfs(np.concatenate(heard))
                    self._seg_wake = Wake(hit, level)
                    out.append(self._seg_wake)
                    break
        else:
            self._fed_until = frame.start_ms + FRAME_MS
        self.stage_s["wake"] += time.perf_counter() - t1
        return out


# ---------------------------------------------------------------------- windows
@dataclass
class WakeWindow:
    wake_id: str
    call_id: str
    wake: Wake
    claimed: bool
    decision: asyncio.Future[voice_pb2.WakeDecision]
    used: bool = False
    utterance_id: str = ""
    """the request queued for this wake (a late stand-down withdraws it)"""


@dataclass
class Request:
    segment: Segment
    window: int
    """voice_pb2.WAKE or FOLLOW_UP"""
    call_id: str
    wake: WakeWindow | None
    utterance_id: str = ""
    """the id it is sent with (made when queued, or the one its preview used)"""
    preview_samples: int = 0
    """the samples of the preview sent for it that it vouches for (0: none)"""


@dataclass(frozen=True)
class PreviewMark:
    """The latest preview sent for the open segment."""

    start_ms: int
    utterance_id: str
    samples: int


Measured = tuple[Embedding | None, float]
"""a segment's speaker embedding (``None``: nothing voiced enough to embed) and the ms it
took"""


@dataclass(frozen=True)
class Previewed:
    """The last preview encoded: its request, when no speech followed, sends the same
    bytes and the same speaker embedding without making them again."""

    utterance_id: str
    samples: int
    data: bytes
    """the FLAC sent as the preview"""
    embedding: asyncio.Future[Measured]
    """its speaker embedding, made in the model thread right after the encoding (while the
    hang-over runs)"""


Found = tuple[int, str, WakeWindow | None]
"""(window, call id, wake window) a segment falls in"""


@dataclass
class Stats:
    requests: int = 0
    ambient: int = 0
    stood_down: int = 0
    wakes: int = 0
    previews: int = 0
    previews_reused: int = 0
    """requests that sent their preview's encoding and speaker embedding (nothing was said
    after it)"""
    played: int = 0
    rendered: int = 0
    embed_ms: list[float] = field(default_factory=list)
    encode_ms: list[float] = field(default_factory=list)
    audio_ms: int = 0


# ---------------------------------------------------------------------- pipeline
class VoicePipeline:
    """An async context manager owning the request worker and the reply player."""

    def __init__(
        self,
        device: DeviceVoice,
        ears: Ears,
        uplink: Uplink,
        state_dir: Path,
        *,
        sink: Sink | None = None,
        speak: Callable[[str], Samples] | None = None,
    ) -> None:
        self.device = device
        self.ears = ears
        self.uplink = uplink
        self.sink = sink
        self._speak: Callable[[str], Samples] = speak or _default_speaker()
        self.ambient_path = state_dir / "ambient.jsonl"
        self.hearing = Hearing(ears.speech, ears.wake, ears.preroll_ms)
        self.stats = Stats()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"ears-{device.name}")
        self._tasks = TaskOwner(f"voice-{device.name}")
        self._requests: asyncio.Queue[Request] = asyncio.Queue()
        self._replies: asyncio.Queue[tuple[mesh_pb2.Reply, bool]] = asyncio.Queue()
        self._windows: dict[str, WakeWindow] = {}
        self._open_wake: WakeWindow | None = None
        self._follow_up: tuple[int, str] | None = None
        """(until_ms, call_id) of the open follow-up window"""
        self._quiet_until = 0
        """frame clock (ms) until which input is the device's own playback"""
        self._clock_ms = 0
        """end of the latest frame heard (the frame clock)"""
        self._preview: PreviewMark | None = None
        """the open segment's latest preview (its utterance id goes on to the request)"""
        self._preview_job: tuple[str, SpeechPaused] | None = None
        """(utterance id, speech) of the next preview to send (the latest wins)"""
        self._preview_ready = asyncio.Event()
        self._previewed: Previewed | None = None
        self.pending: dict[str, str] = {}
        """utterance id → call id of requests waiting for their reply (played or shown)"""
        self._busy = 0
        self._changed = asyncio.Event()
        self.listening = False

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> VoicePipeline:
        await self._tasks.__aenter__()
        self._tasks.spawn(self._request_worker(), "requests")
        self._tasks.spawn(self._player(), "player")
        self._tasks.spawn(self._preview_worker(), "previews")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self._tasks.close()
        finally:
            self._executor.shutdown(wait=True, cancel_futures=True)

    @property
    def failed(self) -> asyncio.Event:
        return self._tasks.failed

    # ------------------------------------------------------------------ input
    def _suppressed(self) -> bool:
        playing = self.sink is not None and self.sink.playing
        return playing or self._clock_ms < self._quiet_until

    async def listen(self, frames: AsyncIterator[Frame], *, finite: bool = True) -> None:
        """Hear ``frames`` until they end (then close the last segment with silence)."""
        loop = asyncio.get_running_loop()
        self.listening = True
        last: Frame | None = None
        try:
            async for frame in frames:
                last = frame
                await self._hear(loop, frame)
            if finite and last is not None:
                silence = np.zeros(FRAME_SAMPLES, dtype=np.int16)
                start = last.start_ms + FRAME_MS
                for i in range(TAIL_SILENCE_MS // FRAME_MS):
                    await self._hear(loop, Frame(silence, start + i * FRAME_MS))
        finally:
            self.listening = False
            self._changed.set()

    async def _hear(self, loop: asyncio.AbstractEventLoop, frame: Frame) -> None:
        self._clock_ms = frame.start_ms + FRAME_MS
        self.stats.audio_ms += FRAME_MS
        suppressed = self._suppressed()
        events = await loop.run_in_executor(self._executor, self.hearing.feed, frame, suppressed)
        for event in events:
            if isinstance(event, Wake):
                await self._on_wake(event)
            elif isinstance(event, Pause):
                self._on_pause(event)
            else:
                self._on_segment(event)

    # ------------------------------------------------------------------ windows
    async def _on_wake(self, wake: Wake) -> None:
        self.stats.wakes += 1
        loop = asyncio.get_running_loop()
        window = WakeWindow(
            wake_id=random_id("w-"),
            call_id=random_id("c-"),
            wake=wake,
            claimed=False,
            decision=loop.create_future(),
        )
        self._windows[window.wake_id] = window
        while len(self._windows) > KEEP_WAKES:
            self._windows.pop(next(iter(self._windows)))
        self._open_wake = window
        self._follow_up = None  # a new wake starts a new call
        claim = voice_pb2.WakeClaim(
            wake_id=window.wake_id,
            heard_ms=wake.fired.end_ms,
            wake_score=wake.fired.score,
            level_dbfs=wake.level_dbfs,
        )
        if self.uplink.is_connected():
            try:
                await self.uplink.send(mesh_pb2.WAKE_CLAIM, claim)
                window.claimed = True
            except SyncError as exc:
                log.info("wake claim %s not sent: %s", window.wake_id, exc)
        log.info(
            "wake word (score %.2f, %.1f dBFS) at %d: %s%s",
            wake.fired.score,
            wake.level_dbfs,
            wake.fired.end_ms,
            window.wake_id,
            "" if window.claimed else " (no claim: hub not connected)",
        )

    def _window(self, start_ms: int, end_ms: int, wake: Wake | None) -> Found | str:
        """The window a segment from ``start_ms`` to ``end_ms`` falls in, or why none
        (``wake_alone``: the wake word on its own, the window stays open;
        ``outside_window``). Changes nothing."""
        window = self._open_wake
        if wake is not None and window is not None and window.wake is wake:
            if end_ms - wake.fired.end_ms < WAKE_ONLY_MS:
                return "wake_alone"
            return voice_pb2.WAKE, window.call_id, window
        if (
            window is not None
            and not window.used
            and start_ms <= window.wake.fired.end_ms + REQUEST_WINDOW_MS
        ):
            return voice_pb2.WAKE, window.call_id, window
        if self._follow_up is not None and start_ms <= self._follow_up[0]:
            return voice_pb2.FOLLOW_UP, self._follow_up[1], None
        return "outside_window"

    def _on_segment(self, seg: Segment) -> None:
        speech = seg.speech
        mark, self._preview = self._preview, None
        if seg.echo:
            self._ambient(seg, "own_playback")
            return
        found = self._window(speech.start_ms, speech.end_ms, seg.wake)
        if found == "wake_alone":
            log.info("wake word alone: the request window stays open")
            return  # the request is the next segment
        if isinstance(found, str):
            self._ambient(seg, found)
            return
        window, call_id, wake = found
        if window == voice_pb2.FOLLOW_UP:
            self._follow_up = None
        uid, vouched = random_id("u-"), 0
        if mark is not None and mark.start_ms == speech.start_ms:
            uid = mark.utterance_id  # the id the hub holds the preview under
            vouched = mark.samples if speech.paused_samples == mark.samples else 0
        self._take(Request(seg, window, call_id, wake, uid, vouched))

    def _on_pause(self, pause: Pause) -> None:
        """The speech of a segment stopped: preview it to the hub if it would be a request."""
        speech = pause.speech
        if pause.echo or not self.uplink.is_connected():
            return
        found = self._window(speech.start_ms, pause.end_ms, pause.wake)
        if isinstance(found, str):
            return  # ambient (or the wake word alone): no audio leaves the device
        wake = found[2]
        if wake is not None and not (wake.decision.done() and wake.decision.result().answer):
            return  # its wake may yet stand down: nothing goes out before the decision
        if len(speech.samples) > MAX_REQUEST_MS * SAMPLE_RATE // 1000:
            return  # the request is cut: no preview is its beginning
        mark = self._preview
        uid = mark.utterance_id if mark is not None and mark.start_ms == speech.start_ms else ""
        uid = uid or random_id("u-")
        self._preview = PreviewMark(speech.start_ms, uid, len(speech.samples))
        self._preview_job = (uid, speech)
        self._preview_ready.set()

    async def _preview_worker(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._preview_ready.wait()
            self._preview_ready.clear()
            job, self._preview_job = self._preview_job, None
            if job is not None:
                await self._send_preview(loop, *job)

    async def _send_preview(
        self, loop: asyncio.AbstractEventLoop, uid: str, speech: SpeechPaused
    ) -> None:
        """Encode and send one preview now (best effort: any failure only costs latency),
        and start its speaker embedding (the request's, if nothing more is said)."""
        samples = speech.samples
        try:
            data = await loop.run_in_executor(self._executor, self.ears.encode, samples)
        except Exception as exc:  # the encoder's own errors: the request is encoded again
            log.info("preview of %s not encoded: %s", uid, exc)
            return
        embedding = loop.run_in_executor(self._executor, self._embed, samples, speech.voiced)
        embedding.add_done_callback(_retrieved)  # a request that does not use it: no warning
        self._previewed = Previewed(uid, len(samples), data, embedding)
        if len(data) > PREVIEW_MAX_BYTES:
            log.debug("preview of %s not sent: %d bytes", uid, len(data))
            return
        preview = voice_pb2.AudioPreview(utterance_id=uid, samples=len(samples), data=data)
        try:
            await self.uplink.send(mesh_pb2.AUDIO_PREVIEW, preview)
        except SyncError as exc:
            log.info("preview of %s not sent: %s", uid, exc)
            return
        self.stats.previews += 1
        log.debug("preview of %s sent (%d samples, %d bytes)", uid, len(samples), len(data))

    def _take(self, request: Request) -> None:
        if request.wake is not None:
            request.wake.used = True
            if self._open_wake is request.wake:
                self._open_wake = None
        self._busy += 1
        self._requests.put_nowait(request)

    def _ambient(self, seg: Segment, reason: str, **extra: object) -> None:
        self.stats.ambient += 1
        s = seg.speech
        record = {
            "at_ms": now_ms(),
            "device": self.device.device_id,
            "name": self.device.name,
            "channel": self.device.channel,
            "source": self.device.source,
            "start_ms": s.start_ms,
            "end_ms": s.end_ms,
            "voiced_ms": s.voiced_ms,
            "level_dbfs": round(level_dbfs(s.samples), 1),
            "reason": reason,
            **extra,
        }
        log.info("ambient speech %d..%d ms (%s)", s.start_ms, s.end_ms, reason)
        try:
            if self.ambient_path.exists() and self.ambient_path.stat().st_size > AMBIENT_MAX_BYTES:
                os.replace(self.ambient_path, self.ambient_path.with_suffix(".jsonl.1"))
            fd = os.open(self.ambient_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record, sort_keys=True) + "\n")
        except OSError as exc:
            log.warning("ambient log %s not written: %s", self.ambient_path, exc)

    # ------------------------------------------------------------------ requests
    async def _request_worker(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            request = await self._requests.get()
            try:
                await self._send_request(loop, request)
            except SyncError as exc:  # outbox full: nothing else to do with it
                log.error("request not queued: %s", exc)
            finally:
                self._busy -= 1
                self._changed.set()

    def _embed(self, samples: Samples, voiced: npt.NDArray[np.bool_] | None) -> Measured:
        t0 = time.perf_counter()
        emb: Embedding | None
        try:
            emb = self.ears.speaker.embed(samples, voiced)
        except ModelError as exc:  # e.g. nothing voiced enough to embed: no verdict
            log.warning("speaker embedding failed: %s", exc)
            emb = None
        return emb, (time.perf_counter() - t0) * 1000

    def _measure(
        self, samples: Samples, voiced: npt.NDArray[np.bool_] | None
    ) -> tuple[Embedding | None, bytes, float, float]:
        emb, embed_ms = self._embed(samples, voiced)
        t1 = time.perf_counter()
        audio = self.ears.encode(samples)
        return emb, audio, embed_ms, (time.perf_counter() - t1) * 1000

    async def _reused(self, previewed: Previewed) -> tuple[Embedding | None, bytes, float, float]:
        """The preview's encoding and embedding, for the request that is its very samples
        (its embedding awaited if it is still being made)."""
        emb, embed_ms = await previewed.embedding
        self.stats.previews_reused += 1
        return emb, previewed.data, embed_ms, 0.0

    async def _send_request(self, loop: asyncio.AbstractEventLoop, request: Request) -> None:
        speech = request.segment.speech
        cut = MAX_REQUEST_MS * SAMPLE_RATE // 1000
        samples = speech.samples[:cut]
        voiced = speech.voiced[:cut] if speech.voiced is not None else None
        previewed = self._previewed
        if (
            previewed is not None
            and (previewed.utterance_id, previewed.samples) == (request.utterance_id, len(samples))
            and not previewed.embedding.cancelled()
        ):
            # its preview was these very samples (a segment only grows), so the same frames
            # and voiced mask: the same FLAC and speaker embedding, made while the hang-over ran
            emb, audio, embed_ms, encode_ms = await self._reused(previewed)
        else:
            emb, audio, embed_ms, encode_ms = await loop.run_in_executor(
                self._executor, self._measure, samples, voiced
            )
        self.stats.embed_ms.append(embed_ms)
        self.stats.encode_ms.append(encode_ms)
        wake = request.wake
        if wake is not None and wake.claimed:
            decision = await self._decision(wake)
            if decision is not None and not decision.answer:
                self.stats.stood_down += 1
                log.info(
                    "wake %s: standing down for %s; request dropped", wake.wake_id, decision.winner
                )
                self._ambient(request.segment, "stood_down", winner=decision.winner)
                return
        vp = self.ears.voiceprint.current()
        verdict: int = voice_pb2.UNENROLLED
        score = 0.0
        if emb is None:
            verdict = voice_pb2.UNMATCHED
        elif (
            vp is not None
            and vp.centroid.shape == emb.vector.shape
            and (not vp.speaker_model or vp.speaker_model == self.ears.speaker.model)
        ):
            verdict, score = verdict_for(emb.vector, vp, self.ears.speaker.model)
        pieces = split_chunks(audio)
        info = voice_pb2.VoiceInfo(
            verdict=verdict,  # type: ignore[arg-type]
            score=score,
            embedding=emb.vector.astype("<f4").tobytes() if emb is not None else b"",
            voiced_ms=speech.voiced_ms,
            quality=emb.quality if emb is not None else 0.0,
            level_dbfs=level_dbfs(samples),
            window=request.window,  # type: ignore[arg-type]
            wake_id=wake.wake_id if wake is not None else "",
            wake_score=wake.wake.fired.score if wake is not None else 0.0,
            call_id=request.call_id,
            audio_chunks=len(pieces),
            audio_bytes=len(audio),
            audio_sha256=hashlib.sha256(audio).digest(),
            audio_format="flac",
            sample_rate=SAMPLE_RATE,
            speaker_model=self.ears.speaker.model,
            preview_samples=request.preview_samples if len(samples) == len(speech.samples) else 0,
        )
        utt = mesh_pb2.Utterance(
            id=request.utterance_id or random_id("u-"),
            text="",
            channel=self.device.channel,
            started_ms=speech.start_ms,
            ended_ms=speech.end_ms,
            source="voice",
            voice=info,
        )
        self.pending[utt.id] = request.call_id
        waiting = self.uplink.queue_voice(utt, pieces, new_trace_id())
        self.stats.requests += 1
        log.info(
            "request %s queued (%s, %d ms, verdict %s %.2f, %d audio bytes; %d waiting)",
            utt.id,
            voice_pb2.Window.Name(request.window).lower(),
            speech.end_ms - speech.start_ms,
            voice_pb2.Verdict.Name(verdict).lower(),
            score,
            len(audio),
            waiting,
        )
        if wake is not None:
            wake.utterance_id = utt.id

    async def _decision(self, wake: WakeWindow) -> voice_pb2.WakeDecision | None:
        try:
            return await asyncio.wait_for(asyncio.shield(wake.decision), DECISION_WAIT_S)
        except TimeoutError:
            log.info("wake %s: no decision within %.1f s; sending", wake.wake_id, DECISION_WAIT_S)
            return None

    def _withdraw(self, wake: WakeWindow) -> None:
        """A stand-down after the request was queued (the decision came late, or the hub
        re-sent it when the request arrived) takes the request out of the outbox."""
        uid = wake.utterance_id
        if uid and uid in self.pending and self.uplink.withdraw(uid):
            self.pending.pop(uid, None)
            self.stats.stood_down += 1
            log.info("wake %s: late stand-down; request %s withdrawn", wake.wake_id, uid)
            self._changed.set()

    async def on_wake_decision(self, opened: Opened) -> None:
        decision = opened.payload
        assert isinstance(decision, voice_pb2.WakeDecision)
        window = self._windows.get(decision.wake_id)
        if window is None:
            log.info("decision for unknown wake %s ignored", decision.wake_id[:64])
            return
        if not window.decision.done():
            window.decision.set_result(decision)
        if not decision.answer:
            self._withdraw(window)
        log.info(
            "wake %s: %s",
            decision.wake_id,
            "answer" if decision.answer else f"stand down ({decision.winner})",
        )

    # ------------------------------------------------------------------ replies
    async def on_reply(self, reply: mesh_pb2.Reply, opened: Opened, fresh: bool) -> None:
        """The node's reply handler: fresh replies are played (or shown) in order; a reply
        the hub re-sent is ACKed again, not played twice."""
        if not fresh:
            await self._ack(reply, self._ack_state())
            return
        self._busy += 1
        self._replies.put_nowait((reply, fresh))

    def _ack_state(self) -> int:
        return (
            mesh_pb2.PLAYED if self.device.speaks and self.sink is not None else mesh_pb2.RENDERED
        )

    async def _ack(self, reply: mesh_pb2.Reply, state: int) -> None:
        try:
            await self.uplink.ack(reply, state)
        except SyncError as exc:  # the hub re-sends unACKed replies when we are back
            log.info("ack of %s not sent: %s", reply.id, exc)

    async def _player(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            reply, _ = await self._replies.get()
            try:
                await self._deliver(loop, reply)
            finally:
                self._busy -= 1
                self._changed.set()

    async def _deliver(self, loop: asyncio.AbstractEventLoop, reply: mesh_pb2.Reply) -> None:
        print(f"[{self.device.name}] hub: {reply.text}", flush=True)
        state = mesh_pb2.RENDERED
        speaking = self.device.speaks and self.sink is not None and bool(reply.text.strip())
        shown_acked = speaking and self.device.shows
        if shown_acked:  # on the display now; spoken after its synthesis (PLAYED below)
            await self._ack(reply, mesh_pb2.RENDERED)
        if speaking:
            assert self.sink is not None
            try:
                audio = await loop.run_in_executor(None, self._speak, reply.text[:MAX_SPOKEN_CHARS])
                self._quiet_until = 1 << 62  # until the tail below is set
                try:
                    await self.sink.play(audio)
                finally:
                    self._quiet_until = self._clock_ms + PLAYBACK_TAIL_MS
                state = mesh_pb2.PLAYED
            except Exception as exc:  # any sink or synthesis failure: the reply is shown
                log.warning("reply %s not spoken: %s", reply.id, exc)
        if state == mesh_pb2.PLAYED or not shown_acked:
            await self._ack(reply, state)
        if state == mesh_pb2.PLAYED:
            self.stats.played += 1
        else:
            self.stats.rendered += 1
        # a reply comes in chunks: the request is answered with its final one
        call_id = self.pending.pop(reply.utterance_id, None) if reply.final else None
        if call_id is not None:
            self._follow_up = (self._clock_ms + PLAYBACK_TAIL_MS + FOLLOW_UP_MS, call_id)

    # ------------------------------------------------------------------ completion
    def settled_now(self) -> bool:
        """Audio ended, every request was sent and got its reply delivered."""
        return not self.listening and self._busy == 0 and not self.pending

    async def settled(self) -> None:
        while not self.settled_now():
            self._changed.clear()
            await self._changed.wait()


def _retrieved(done: asyncio.Future[Measured]) -> None:
    """Mark a preview's embedding's outcome as seen (its request may never ask for it: a
    failure is the request's to report, when it makes its own)."""
    if not done.cancelled():
        done.exception()


def _default_speaker() -> Callable[[str], Samples]:
    from hardware.tts import Speaker

    return Speaker.default()
