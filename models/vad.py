"""Voice activity: Silero VAD (v5/v6 ONNX) on onnxruntime, and a hysteresis segmenter.

``SileroVad.prob`` scores one 32 ms frame (512 samples at 16 kHz). The model is recurrent:
its state (``state`` [2, 1, 128]) and the last 64 samples of the previous frame (the
"context" the v5 model expects in front of each chunk) are carried between calls, so frames
must be fed in order; ``reset`` starts a new stream. The model file comes from the
``silero-vad`` package (``silero_vad/data/silero_vad.onnx``), located with ``find_spec`` and
checked against a trusted SHA-256 (the package itself imports torch and is never imported).

``Segmenter`` turns probabilities into speech segments with hysteresis: a segment starts when
``prob >= 0.5`` and is confirmed after 250 ms of voiced frames (``SpeechStart``, which carries
the audio so far including 300 ms of pre-roll, so a consumer such as the wake detector can
catch up); it ends after 500 ms below 0.35 (``SpeechEnd`` with the segment's samples,
trimmed to the last voiced frame plus a short tail).

Between the two, when the speech has stopped (frames below 0.35) and the tail after the last
voiced frame is complete — 224 ms after it, while the hang-over still runs — a
``SpeechPause`` carries the segment's audio as its ``SpeechEnd`` will have it if the speech
does not resume (``SpeechEnd.paused_samples`` then says so): a consumer can start on the
final audio early (speculative speech recognition on the hub). One pause per stop: speech
must resume before there is another.
"""

from __future__ import annotations

import collections
import hashlib
import importlib.util
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hardware.pcm import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE, Samples
from models.errors import ModelError

log = logging.getLogger(__name__)

CONTEXT_SAMPLES = 64
"""samples of the previous chunk the v5+ model sees in front of each chunk"""

MODEL_PACKAGE = "silero_vad"
MODEL_DIST = "silero-vad"
MODEL_VERSION = "6.2.3"
MODEL_FILE = "data/silero_vad.onnx"
MODEL_SHA256 = "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"
WHAT = "voice activity (Silero VAD)"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def package_file(package: str, relpath: str, *, what: str, dist: str, version: str) -> Path:
    """A data file inside an installed package, found without importing the package."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    path = Path(locations[0]) / relpath if locations else None
    if path is None or not path.is_file():
        raise ModelError("model.missing", what=what, package=dist, version=version)
    return path


def verified(path: Path, want: str, *, what: str, dist: str, version: str) -> Path:
    """``path`` if its SHA-256 is ``want``; ModelError "model.mismatch" otherwise."""
    try:
        got = sha256_file(path)
    except OSError as exc:
        raise ModelError("model.failed", what=what, reason=f"{path}: {exc.strerror}") from None
    if got != want:
        raise ModelError(
            "model.mismatch",
            what=what,
            path=path,
            got=got,
            want=want,
            package=dist,
            version=version,
        )
    return path


def default_model_path() -> Path:
    """The packaged Silero model, digest-checked.

    Note: ``models.catalog`` (role ``vad``) is the node-level source of truth for which file
    to use; this is the built-in default it resolves to and what tests and benches use.
    """
    path = package_file(
        MODEL_PACKAGE, MODEL_FILE, what=WHAT, dist=MODEL_DIST, version=MODEL_VERSION
    )
    return verified(path, MODEL_SHA256, what=WHAT, dist=MODEL_DIST, version=MODEL_VERSION)


def onnx_session(path: Path, threads: int, what: str) -> Any:
    """An onnxruntime CPU session with ``threads`` intra-op threads (ModelError on failure)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, threads)
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own untyped errors for bad files
        raise ModelError("model.failed", what=what, reason=f"{path}: {exc}") from None


class SileroVad:
    """Speech probability per 512-sample frame; state carried between frames.

    ``path`` must already be verified by the caller (``default_model_path()`` or the catalog);
    ``sha256``, when given, is checked here too. Not thread-safe: one instance per stream.
    """

    def __init__(self, path: Path | None = None, *, sha256: str | None = None, threads: int = 1):
        if path is None:
            path = default_model_path()
        elif sha256 is not None:
            verified(path, sha256, what=WHAT, dist=MODEL_DIST, version=MODEL_VERSION)
        self.path = path
        self._session = onnx_session(path, threads, WHAT)
        names = {i.name for i in self._session.get_inputs()}
        if names != {"input", "state", "sr"}:
            raise ModelError(
                "model.failed", what=WHAT, reason=f"{path}: unexpected inputs {sorted(names)}"
            )
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Forget the stream: zero state and context."""
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._input = np.zeros((1, CONTEXT_SAMPLES + FRAME_SAMPLES), dtype=np.float32)

    def prob(self, frame: Samples) -> float:
        """Speech probability 0..1 of one int16 frame of exactly 512 samples."""
        if frame.shape != (FRAME_SAMPLES,):
            raise ValueError(f"a VAD frame is {FRAME_SAMPLES} samples, got shape {frame.shape}")
        x = self._input
        x[0, :CONTEXT_SAMPLES] = x[0, -CONTEXT_SAMPLES:]
        x[0, CONTEXT_SAMPLES:] = frame.astype(np.float32) * (1.0 / 32768.0)
        with self._lock:
            out, state = self._session.run(None, {"input": x, "state": self._state, "sr": self._sr})
        self._state = state
        return float(out[0, 0])

    def probs(self, samples: Samples) -> npt.NDArray[np.float32]:
        """Probabilities of every whole frame of ``samples`` (a trailing partial is dropped)."""
        n = len(samples) // FRAME_SAMPLES
        out = np.empty(n, dtype=np.float32)
        for i in range(n):
            out[i] = self.prob(samples[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES])
        return out


# ---------------------------------------------------------------- segmenter
@dataclass(frozen=True)
class SpeechStart:
    """Speech confirmed. ``ms`` is where the segment (with its pre-roll) begins."""

    ms: int
    samples: Samples = field(repr=False, default_factory=lambda: np.zeros(0, np.int16))
    """the segment's audio so far, pre-roll included, up to the frame that confirmed it"""


def _frames_mask(
    probs: npt.NDArray[np.float32], samples: int, threshold: float
) -> npt.NDArray[np.bool_]:
    """Per-sample mask (``samples`` long) of the frames whose probability is at or above
    ``threshold``."""
    mask = np.repeat(probs >= threshold, FRAME_SAMPLES)
    if len(mask) < samples:
        mask = np.concatenate([mask, np.zeros(samples - len(mask), bool)])
    return mask[:samples]


@dataclass(frozen=True)
class SpeechPause:
    """The speech stopped (the hang-over is running): the segment as it will end."""

    start_ms: int
    samples: Samples = field(repr=False)
    """the segment's audio: its ``SpeechEnd``'s samples exactly if the speech does not
    resume"""
    probs: npt.NDArray[np.float32] = field(
        repr=False, default_factory=lambda: np.zeros(0, np.float32)
    )
    """the VAD probability of each frame of ``samples`` (its ``SpeechEnd``'s, likewise)"""

    def voiced_mask(self, threshold: float = 0.5) -> npt.NDArray[np.bool_]:
        """Per-sample mask of the frames at or above ``threshold`` (its ``SpeechEnd``'s
        mask exactly if the speech does not resume)."""
        return _frames_mask(self.probs, len(self.samples), threshold)


@dataclass(frozen=True)
class SpeechEnd:
    """A finished segment: pre-roll + speech + a short tail."""

    samples: Samples = field(repr=False)
    start_ms: int
    end_ms: int
    voiced_ms: int
    """32 ms for every frame at or above the start threshold"""
    probs: npt.NDArray[np.float32] = field(
        repr=False, default_factory=lambda: np.zeros(0, np.float32)
    )
    """the VAD probability of each 512-sample frame of ``samples``"""
    paused_samples: int = 0
    """samples of this segment's latest :class:`SpeechPause` when nothing voiced came after
    it (then ``samples`` are that pause's samples); 0 otherwise"""

    def voiced_mask(self, threshold: float = 0.5) -> npt.NDArray[np.bool_]:
        """Per-sample mask of the frames at or above ``threshold``."""
        return _frames_mask(self.probs, len(self.samples), threshold)


SpeechEvent = SpeechStart | SpeechPause | SpeechEnd


HANGOVER_MS = 400
"""quiet ms that end speech. Measured (``bench/edge_pipeline.py --sections hangover``: 60
espeak-ng "Yimi, <request>" utterances by random voices with noise, and the natural clips
twice, counting with pauses between the numbers included): no utterance cut off at 300 ms
or more, 5/60 at 250 ms; 400 keeps a 100 ms margin over the shortest safe value and ends
speech ~100 ms sooner than 500 did (Home Assistant's default silence is 0.7 s)"""


class Segmenter:
    """Frames in, speech events out (hysteresis, minimum length, hang-over, pre-roll).

    ``feed(frame, start_ms)`` returns the events this frame caused (usually none). A segment
    longer than ``max_ms`` is cut and a new one starts with the next voiced frame; ``flush``
    ends an open segment at the end of the stream.
    """

    def __init__(
        self,
        vad: SileroVad,
        *,
        start: float = 0.5,
        end: float = 0.35,
        min_speech_ms: int = 250,
        hangover_ms: int = HANGOVER_MS,
        preroll_ms: int = 300,
        tail_ms: int = 200,
        max_ms: int = 30_000,
        pauses: bool = True,
    ) -> None:
        """``pauses``: emit :class:`SpeechPause` events (of use when the tail is shorter
        than the hang-over)."""
        if not 0.0 < end <= start < 1.0:
            raise ValueError("thresholds must satisfy 0 < end <= start < 1")
        self.vad = vad
        self.start, self.end = start, end
        self._min_frames = -(-min_speech_ms // FRAME_MS)
        self._hang_frames = -(-hangover_ms // FRAME_MS)
        self._tail_frames = -(-tail_ms // FRAME_MS)
        self._max_frames = max(self._min_frames + 1, max_ms // FRAME_MS)
        self._pauses = pauses
        self._pre: collections.deque[tuple[Samples, int, float]] = collections.deque(
            maxlen=-(-preroll_ms // FRAME_MS)
        )
        self._seg: list[tuple[Samples, int, float]] = []
        self._voiced = 0
        self._quiet = 0
        self._last_voiced = -1
        self._confirmed = False
        self._paused: tuple[int, int] | None = None
        """(last voiced frame index, samples) of the segment's latest pause"""
        self.last_prob = 0.0

    @property
    def in_speech(self) -> bool:
        """True between a SpeechStart and its SpeechEnd."""
        return self._confirmed

    def reset(self) -> None:
        """Drop any open segment and the VAD state."""
        self.vad.reset()
        self._pre.clear()
        self._clear()

    def _clear(self) -> None:
        self._seg = []
        self._voiced = self._quiet = 0
        self._last_voiced = -1
        self._confirmed = False
        self._paused = None

    def feed(self, frame: Samples, start_ms: int) -> list[SpeechEvent]:
        p = self.vad.prob(frame)
        self.last_prob = p
        events: list[SpeechEvent] = []
        item = (frame.copy(), start_ms, p)
        if not self._seg:
            if p >= self.start:
                self._seg = [*self._pre, item]
                self._pre.clear()
                self._voiced, self._quiet = 1, 0
                self._last_voiced = len(self._seg) - 1
                if self._voiced >= self._min_frames:
                    events.append(self._confirm())
            else:
                self._pre.append(item)
            return events
        self._seg.append(item)
        if p >= self.start:
            self._voiced += 1
            self._last_voiced = len(self._seg) - 1
        self._quiet = self._quiet + 1 if p < self.end else 0
        if not self._confirmed and self._voiced >= self._min_frames:
            events.append(self._confirm())
        if (
            self._pauses
            and self._confirmed
            and 0 < self._quiet < self._hang_frames
            and len(self._seg) >= self._last_voiced + 1 + self._tail_frames
            and (self._paused is None or self._paused[0] != self._last_voiced)
        ):
            events.append(self._pause())
        if self._quiet >= self._hang_frames:
            if self._confirmed:
                events.append(self._finish())
            else:  # a blip shorter than the minimum: keep its tail as pre-roll, no event
                for it in self._seg[-(self._pre.maxlen or 1) :]:
                    self._pre.append(it)
                self._clear()
        elif len(self._seg) >= self._max_frames and self._confirmed:
            events.append(self._finish(cut=True))
        return events

    def flush(self) -> list[SpeechEvent]:
        """End an open, confirmed segment (end of stream); unconfirmed ones are dropped."""
        if self._confirmed:
            return [self._finish()]
        self._clear()
        return []

    def _confirm(self) -> SpeechStart:
        self._confirmed = True
        samples = np.concatenate([s for s, _, _ in self._seg])
        log.debug("speech start at %d ms", self._seg[0][1])
        return SpeechStart(ms=self._seg[0][1], samples=samples)

    def _keep(self) -> int:
        """Frames of the open segment its end keeps (the last voiced one and the tail)."""
        return min(len(self._seg), self._last_voiced + 1 + self._tail_frames)

    def _pause(self) -> SpeechPause:
        seg = self._seg[: self._keep()]
        samples = np.concatenate([s for s, _, _ in seg])
        self._paused = (self._last_voiced, len(samples))
        probs = np.array([p for _, _, p in seg], dtype=np.float32)
        return SpeechPause(start_ms=seg[0][1], samples=samples, probs=probs)

    def _finish(self, cut: bool = False) -> SpeechEnd:
        keep = len(self._seg)
        if not cut:
            keep = self._keep()
        paused = self._paused
        vouched = 0
        if not cut and paused is not None and paused[0] == self._last_voiced:
            vouched = paused[1]
        seg = self._seg[:keep]
        rest = self._seg[keep:]
        samples = np.concatenate([s for s, _, _ in seg])
        probs = np.array([p for _, _, p in seg], dtype=np.float32)
        end = SpeechEnd(
            samples=samples,
            start_ms=seg[0][1],
            end_ms=seg[-1][1] + FRAME_MS,
            voiced_ms=self._voiced_in(probs) * FRAME_MS,
            probs=probs,
            paused_samples=vouched,
        )
        self._clear()
        for it in rest[-(self._pre.maxlen or 1) :]:
            self._pre.append(it)
        log.debug("speech end %d..%d ms (%d ms voiced)", end.start_ms, end.end_ms, end.voiced_ms)
        return end

    def _voiced_in(self, probs: npt.NDArray[np.float32]) -> int:
        return int(np.count_nonzero(probs >= self.start))

    def segments(self, samples: Samples, start_ms: int = 0) -> list[SpeechEnd]:
        """Every segment of a whole recording (convenience for files and tests)."""
        out: list[SpeechEnd] = []
        n = len(samples) // FRAME_SAMPLES
        for i in range(n):
            frame = samples[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES]
            for ev in self.feed(frame, start_ms + i * FRAME_MS):
                if isinstance(ev, SpeechEnd):
                    out.append(ev)
        out.extend(e for e in self.flush() if isinstance(e, SpeechEnd))
        return out
