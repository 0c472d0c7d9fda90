"""Voiceprint policy: pure rules shared by the hub (the authority) and devices.

The rules are ``ARCHITECTURE.md § Voiceprint``:

- enrolment per capture channel: segments of at least 1,500 ms voiced speech, 5–20 per
  channel; centroid ``c = Σ dᵢqᵢx̂ᵢ / ‖Σ dᵢqᵢx̂ᵢ‖`` (unit embeddings x̂, voiced ms d,
  quality q);
- leave-one-out: a segment whose cosine to the centroid of the others is below 0.6 rejects
  the whole set;
- score ``s = max over channels cos(x, c_k)``: at or above the channel's line (never below
  0.65) ``verified``, 0.45 up to the line ``uncertain``, below 0.45 ``unmatched``;
- the line is stored per channel and only ever rises (:func:`raise_line`);
- trust window: a device biometric opens 60 s; a call that *starts* inside it is the
  owner's until hang-up; its segments of ≥ 1,000 ms at quality ≥ 0.5 may become learning
  samples, until the channel holds 20 (no rolling replacement);
- call anchor: once one utterance of a call is verified by voiceprint, later utterances of
  that call with ≥ 200 ms voiced speech at cosine ≥ 0.65 to it count as the owner — for
  that call only.

Every "cosine" above is a *calibrated* similarity (:func:`similarity`): the raw cosine of
two embeddings rescaled by the speaker model's score floor, ``(cos - floor) / (1 - floor)``.
The lines were set for a model whose different speakers score near 0; GE2E's embeddings are
non-negative (ReLU before the norm), so any two voices score at least ~0.45 raw and the
0.45 "unmatched" line would never be reached. Each model's floor lives in
:data:`SCORE_FLOORS` (and "switching the speaker model means re-enrolling and calibrating").

Nothing here does I/O: embeddings are numpy float32 vectors of :data:`EMBED_DIM`.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from models.errors import ModelError

EMBED_DIM = 256
"""length of a speaker embedding (GE2E)"""
VERIFIED_MIN = 0.65
"""cosine: the lowest a channel's verification line can ever be"""
UNCERTAIN_MIN = 0.45
"""cosine: below this a voice is unmatched"""
LOO_MIN = 0.6
"""cosine: each enrolment segment to the centroid of the others, or the set is rejected"""
SEGMENT_MIN_MS = 1500
"""milliseconds of voiced speech an enrolment segment needs"""
MIN_SAMPLES = 5
"""samples a channel needs before it has a centroid"""
MAX_SAMPLES = 20
"""samples a channel holds at most (enrolment and learning together)"""
TRUST_WINDOW_MS = 60_000
"""milliseconds a device-biometric confirmation stays open"""
LEARN_MIN_MS = 1000
"""milliseconds of voiced speech a learning sample needs"""
LEARN_MIN_QUALITY = 0.5
"""quality a learning sample needs"""
ANCHOR_MIN_MS = 200
"""milliseconds of voiced speech an utterance needs to be matched against a call anchor"""
ANCHOR_MIN_COS = 0.65
"""cosine to a call's anchor that counts as the owner for that call"""
MAX_ANCHORS = 8
"""verified utterances kept as anchors per call"""
DUPLICATE_COS = 0.9999
"""cosine at which two enrolment segments are the same recording (refused)"""
UNIT_TOLERANCE = 1e-3
"""how far from unit length a received embedding may be before it is refused"""

SCORE_FLOORS: Mapping[str, float] = MappingProxyType({"ge2e-resemblyzer": 0.45})
"""raw cosine that maps to a calibrated similarity of 0, by speaker model name (the part of
``name@version`` before ``@``); models not listed are used as they are (floor 0).

GE2E (Resemblyzer): distinct speakers measured 0.45–0.72 raw (festival's slt, kal and ked
voices and espeak-ng against each other, median ≈ 0.55), the same speaker's clean sentences
0.85–0.96 and with noise at 20 dB SNR 0.80–0.90. The floor is the lowest distinct-speaker
cosine, 0.45: the 0.65 line sits at raw 0.8075, "unmatched" below raw 0.6975
(``bench/edge_pipeline.py`` prints the effect on its corpus).
"""


class Verdict(enum.StrEnum):
    """How a segment's voice compares with the enrolled centroids (``voice.proto Verdict``)."""

    VERIFIED = "verified"
    UNCERTAIN = "uncertain"
    UNMATCHED = "unmatched"
    UNENROLLED = "unenrolled"


VERDICT_PROTO = {
    Verdict.VERIFIED: 1,
    Verdict.UNCERTAIN: 2,
    Verdict.UNMATCHED: 3,
    Verdict.UNENROLLED: 4,
}
"""verdict → ``voice_pb2.Verdict`` number"""


@dataclass(frozen=True)
class Segment:
    """One measured speech segment: a unit embedding, its voiced duration and quality."""

    vector: np.ndarray
    voiced_ms: int
    quality: float
    label: str = ""


@dataclass(frozen=True)
class Match:
    """The best channel for an embedding and what it means."""

    score: float
    """max over channels of the (calibrated) similarity to the channel's centroid"""
    channel: str
    """the channel with the highest cosine ("" when nothing is enrolled)"""
    verdict: Verdict


# --------------------------------------------------------------------------- vectors


def as_vector(data: bytes | np.ndarray | Sequence[float], *, what: str = "embedding") -> np.ndarray:
    """A finite, unit-length float32 vector of :data:`EMBED_DIM` from bytes (float32 LE) or
    an array; anything else raises ``ModelError("voice.embedding")``.

    Vectors that are nearly unit (within :data:`UNIT_TOLERANCE`) are renormalised; others
    are refused, so a device cannot weight the centroid by sending a long vector.
    """
    if isinstance(data, bytes | bytearray | memoryview):
        raw = bytes(data)
        if len(raw) != EMBED_DIM * 4:
            raise ModelError("voice.embedding", what=what, reason=f"{len(raw)} bytes")
        vec = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    else:
        vec = np.asarray(data, dtype=np.float32).reshape(-1)
        if vec.shape != (EMBED_DIM,):
            raise ModelError("voice.embedding", what=what, reason=f"{vec.size} values")
    if not np.all(np.isfinite(vec)):
        raise ModelError("voice.embedding", what=what, reason="not finite")
    norm = float(np.linalg.norm(vec.astype(np.float64)))
    if abs(norm - 1.0) > UNIT_TOLERANCE:
        raise ModelError("voice.embedding", what=what, reason=f"length {norm:.4f}, not unit")
    return (vec / norm).astype(np.float32)


def to_bytes(vec: np.ndarray) -> bytes:
    """256 × float32 little-endian (the wire and storage form)."""
    return np.asarray(vec, dtype="<f4").reshape(-1).tobytes()


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Raw cosine of two vectors (0.0 if either is zero)."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    na, nb = float(np.linalg.norm(a64)), float(np.linalg.norm(b64))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a64, b64) / (na * nb))


def floor_for(speaker_model: str) -> float:
    """The score floor of ``speaker_model`` (``name`` or ``name@version``; 0.0 if unknown)."""
    return SCORE_FLOORS.get(speaker_model.split("@", 1)[0], 0.0)


def calibrate(raw: float, floor: float = 0.0) -> float:
    """A raw cosine on the scale of the lines: ``(raw - floor) / (1 - floor)``."""
    if not 0.0 <= floor < 1.0:
        raise ValueError(f"score floor {floor} is outside [0, 1)")
    return raw if floor == 0.0 else (raw - floor) / (1.0 - floor)


def similarity(a: np.ndarray, b: np.ndarray, floor: float = 0.0) -> float:
    """The calibrated similarity of two embeddings: what every rule compares with a line."""
    return calibrate(cosine(a, b), floor)


# --------------------------------------------------------------------------- enrolment


def centroid(segments: Sequence[Segment]) -> np.ndarray:
    """``Σ dᵢqᵢx̂ᵢ / ‖Σ dᵢqᵢx̂ᵢ‖``; raises ``ModelError("voice.no_weight")`` if every weight
    is zero or the weighted sum vanishes."""
    total = np.zeros(EMBED_DIM, dtype=np.float64)
    for seg in segments:
        weight = max(0, int(seg.voiced_ms)) * max(0.0, float(seg.quality))
        x = np.asarray(seg.vector, np.float64)
        total += weight * (x / (np.linalg.norm(x) or 1.0))
    norm = float(np.linalg.norm(total))
    if not math.isfinite(norm) or norm < 1e-9:
        raise ModelError("voice.no_weight", count=len(segments))
    return (total / norm).astype(np.float32)


def leave_one_out(segments: Sequence[Segment], floor: float = 0.0) -> list[float]:
    """Each segment's similarity to the centroid of all the others (``nan`` if the others
    have no weight; fewer than two segments: ``[]``)."""
    if len(segments) < 2:
        return []
    scores: list[float] = []
    for i, seg in enumerate(segments):
        rest = [s for j, s in enumerate(segments) if j != i]
        try:
            scores.append(similarity(seg.vector, centroid(rest), floor))
        except ModelError:
            scores.append(float("nan"))
    return scores


def check_segments(segments: Iterable[Segment]) -> None:
    """Each submitted enrolment segment is long enough and has a sane quality."""
    for seg in segments:
        if seg.voiced_ms < SEGMENT_MIN_MS:
            raise ModelError(
                "voice.too_short", label=seg.label or "?", ms=seg.voiced_ms, min_ms=SEGMENT_MIN_MS
            )
        if not (math.isfinite(seg.quality) and 0.0 < seg.quality <= 1.0):
            raise ModelError("voice.quality", label=seg.label or "?", quality=seg.quality)


def check_enrolment(
    existing: Sequence[Segment], submitted: Sequence[Segment], floor: float = 0.0
) -> list[float]:
    """Validate an enrolment of ``submitted`` on a channel already holding ``existing``.

    Returns the leave-one-out score of each submitted segment (computed over the whole
    channel: existing + submitted). Raises ``ModelError`` with key ``voice.too_short``,
    ``voice.quality``, ``voice.too_few``, ``voice.too_many``, ``voice.duplicate`` (the
    same recording twice) or ``voice.outlier`` (any
    segment of the combined set below :data:`LOO_MIN` rejects all of ``submitted``).
    """
    if not submitted:
        raise ModelError("voice.too_few", count=0, have=len(existing), min=MIN_SAMPLES)
    check_segments(submitted)
    combined = [*existing, *submitted]
    if len(combined) > MAX_SAMPLES:
        raise ModelError(
            "voice.too_many", count=len(submitted), have=len(existing), max=MAX_SAMPLES
        )
    if len(combined) < MIN_SAMPLES:
        raise ModelError("voice.too_few", count=len(submitted), have=len(existing), min=MIN_SAMPLES)
    for i, seg in enumerate(submitted):
        for j, prev in enumerate(combined[: len(existing) + i]):
            if cosine(seg.vector, prev.vector) >= DUPLICATE_COS:
                other = prev.label or f"#{j + 1}"
                raise ModelError("voice.duplicate", label=seg.label or "?", other=other)
    scores = leave_one_out(combined, floor)
    bad = [
        (seg.label or f"#{i + 1}", s)
        for i, (seg, s) in enumerate(zip(combined, scores, strict=True))
        if not s >= LOO_MIN  # nan fails too
    ]
    if bad:
        listed = ", ".join(f"{label} ({s:.2f})" for label, s in bad)
        raise ModelError(
            "voice.outlier", segments=listed, min=LOO_MIN, scores=scores[len(existing) :]
        )
    return scores[len(existing) :]


# --------------------------------------------------------------------------- verdicts


def effective_line(line: float | None) -> float:
    """A usable line: at least :data:`VERIFIED_MIN` (``None``/NaN count as the minimum)."""
    if line is None or not math.isfinite(line):
        return VERIFIED_MIN
    return max(VERIFIED_MIN, float(line))


def raise_line(stored: float | None, proposed: float | None) -> float:
    """The new line: the higher of the two, never below :data:`VERIFIED_MIN`; a NaN or
    missing proposal changes nothing. Lines above 1.0 are clamped (cosine cannot reach them)."""
    current = effective_line(stored)
    if proposed is None or not math.isfinite(proposed):
        return current
    return min(1.0, max(current, float(proposed)))


def verdict(score: float, line: float | None = VERIFIED_MIN) -> Verdict:
    """``verified`` at or above the line, ``uncertain`` from 0.45, ``unmatched`` below."""
    if not math.isfinite(score):
        return Verdict.UNMATCHED
    if score >= effective_line(line):
        return Verdict.VERIFIED
    if score >= UNCERTAIN_MIN:
        return Verdict.UNCERTAIN
    return Verdict.UNMATCHED


def score(
    x: np.ndarray, centroids_by_channel: Mapping[str, np.ndarray], floor: float = 0.0
) -> tuple[float, str]:
    """``(max over channels of similarity(x, c_k), that channel)``; ``(nan, "")`` with no
    centroids."""
    best, best_channel = float("nan"), ""
    for channel, c in sorted(centroids_by_channel.items()):
        s = similarity(x, c, floor)
        if not best >= s:  # first one, or higher
            best, best_channel = s, channel
    return best, best_channel


def match(
    x: np.ndarray,
    centroids_by_channel: Mapping[str, np.ndarray],
    lines: Mapping[str, float] | None = None,
    floor: float = 0.0,
) -> Match:
    """Score ``x`` against every channel. ``verified`` when some channel's score reaches
    that channel's line (so a high line on one channel never hides a match on another);
    otherwise the verdict of the best score. No centroids: ``unenrolled``."""
    if not centroids_by_channel:
        return Match(float("nan"), "", Verdict.UNENROLLED)
    lines = lines or {}
    best, channel = score(x, centroids_by_channel, floor)
    for ch, c in sorted(centroids_by_channel.items()):
        s = similarity(x, c, floor)
        if verdict(s, lines.get(ch)) is Verdict.VERIFIED:
            return Match(best, channel, Verdict.VERIFIED)
    return Match(best, channel, verdict(best, lines.get(channel)))


# --------------------------------------------------------------------------- trust and calls


@dataclass(frozen=True)
class TrustWindow:
    """A device biometric said "it's me for the next minute" on ``device``."""

    device: str
    opened_ms: int
    method: str = "fake"
    length_ms: int = TRUST_WINDOW_MS

    @property
    def closes_ms(self) -> int:
        return self.opened_ms + min(self.length_ms, TRUST_WINDOW_MS)

    def covers(self, t_ms: int) -> bool:
        """Whether ``t_ms`` (a call's start) lies inside the window."""
        return self.opened_ms <= t_ms < self.closes_ms


def can_learn(voiced_ms: int, quality: float, samples: int) -> bool:
    """Whether a trust-window segment may become a learning sample of a channel holding
    ``samples`` (learning stops at :data:`MAX_SAMPLES`; there is no rolling replacement)."""
    return (
        voiced_ms >= LEARN_MIN_MS
        and math.isfinite(quality)
        and quality >= LEARN_MIN_QUALITY
        and samples < MAX_SAMPLES
    )


@dataclass
class CallAnchor:
    """The verified utterances of one call; later short utterances are matched to them."""

    call_id: str
    anchors: list[np.ndarray] = field(default_factory=list)
    floor: float = 0.0
    """the speaker model's score floor (:func:`floor_for`)"""

    def add(self, verified: np.ndarray) -> None:
        """Keep an utterance verified by voiceprint (the first :data:`MAX_ANCHORS`)."""
        if len(self.anchors) < MAX_ANCHORS:
            self.anchors.append(np.asarray(verified, np.float32))

    @property
    def anchored(self) -> bool:
        return bool(self.anchors)

    def similarity(self, x: np.ndarray) -> float:
        """Highest similarity of ``x`` to an anchor (``nan`` without anchors)."""
        return max((similarity(x, a, self.floor) for a in self.anchors), default=float("nan"))

    def matches(self, x: np.ndarray, voiced_ms: int) -> bool:
        """``x`` counts as the owner for this call: ≥ 200 ms voiced at cosine ≥ 0.65."""
        return voiced_ms >= ANCHOR_MIN_MS and self.similarity(x) >= ANCHOR_MIN_COS
