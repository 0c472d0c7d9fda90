"""Speaker embeddings: the GE2E encoder (``models.ge2e``) on onnxruntime.

``SpeakerEncoder.embed`` turns 16 kHz int16 speech into a unit 256-d vector (Resemblyzer's
semantics: cosine between two embeddings is the speaker similarity), the voiced duration and
a quality in 0..1. The ONNX file comes from the model catalog (role ``speaker``), which
converted and checksummed it; this module only runs it: one session, one intra-op thread by
default (devices are small and share their cores with the VAD and the wake detector).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from models import ge2e
from models.errors import ModelError

log = logging.getLogger(__name__)

EMBED_DIM = ge2e.EMBED_DIM
SAMPLE_RATE = ge2e.SAMPLE_RATE
WHAT = ge2e.WHAT
MAX_SECONDS = 60.0
"""longer input is refused (a speech segment, not a recording)"""
MIN_SAMPLES = ge2e.VAD_WINDOW
"""30 ms: shorter input has no window to judge"""

# quality: product of three scores in 0..1
QUALITY_VOICED_FRACTION = 0.5
"""a segment at least this voiced scores 1 on voicing (less: proportionally lower)"""
QUALITY_LEVEL_DBFS = (-60.0, -40.0)
"""voiced RMS at the first value or below scores 0, at the second or above 1"""
QUALITY_CLIPPED_MAX = 0.01
"""this fraction of clipped samples (or more) scores 0"""

Vector = npt.NDArray[np.float32]


@dataclass(frozen=True)
class SpeakerEmbedding:
    vector: Vector
    """float32 [256], unit length"""
    voiced_ms: int
    """how much of the input was judged voiced (mask or energy)"""
    quality: float
    """0..1: voiced fraction x level x (1 - clipping)"""


def cosine(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> float:
    """Cosine similarity of two vectors (unit embeddings: their dot product)."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0 or nb == 0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def quality_of(samples: npt.NDArray[np.int16], voiced: npt.NDArray[np.bool_]) -> float:
    """Quality of a segment given its per-sample voiced flags (see the QUALITY_ constants)."""
    n = len(samples)
    if n == 0 or not voiced.any():
        return 0.0
    fraction = float(voiced.mean())
    voicing = min(1.0, fraction / QUALITY_VOICED_FRACTION)
    x = samples[voiced].astype(np.float64)
    db = 10 * np.log10(float(np.mean(x * x)) / 32768.0**2 + 1e-12)
    lo, hi = QUALITY_LEVEL_DBFS
    level = min(1.0, max(0.0, (db - lo) / (hi - lo)))
    clipped = float(np.count_nonzero((samples >= 32767) | (samples <= -32768))) / n
    clipping = 1.0 - min(1.0, clipped / QUALITY_CLIPPED_MAX)
    return round(voicing * level * clipping, 4)


class SpeakerEncoder:
    """Runs the GE2E ONNX model; thread-safe (onnxruntime sessions are)."""

    dim = EMBED_DIM

    def __init__(self, onnx_path: Path, *, threads: int = 1) -> None:
        if threads < 1:
            raise ValueError("threads must be at least 1")
        self.path = onnx_path
        try:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.log_severity_level = 3
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            self._session: Any = ort.InferenceSession(
                str(onnx_path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own types
            raise ModelError(
                "model.failed", what=WHAT, reason=str(exc) or type(exc).__name__
            ) from exc
        inputs = self._session.get_inputs()
        outputs = self._session.get_outputs()
        if [i.name for i in inputs] != [ge2e.INPUT_NAME] or outputs[0].shape[-1] != EMBED_DIM:
            raise ModelError(
                "model.failed", what=WHAT, reason=f"{onnx_path} is not a GE2E speaker encoder"
            )

    def embed_mels(self, mels: npt.NDArray[np.float32]) -> Vector:
        """Unit embeddings ``[n, 256]`` of a batch of mel spectrograms ``[n, frames, 40]``."""
        try:
            out = self._session.run([ge2e.OUTPUT_NAME], {ge2e.INPUT_NAME: mels})[0]
        except Exception as exc:  # onnxruntime's own exception types
            raise ModelError(
                "model.failed", what=WHAT, reason=str(exc) or type(exc).__name__
            ) from exc
        return np.asarray(out, dtype=np.float32)

    def embed(
        self, samples: npt.NDArray[np.int16], voiced_mask: npt.NDArray[Any] | None = None
    ) -> SpeakerEmbedding:
        """The embedding of one utterance (16 kHz mono int16).

        ``voiced_mask`` (optional; one entry per sample, or per frame of equal length, e.g.
        the VAD's 512-sample frames) says which audio is speech; without it 30 ms windows are
        judged by energy. Unvoiced stretches longer than ~0.2 s are cut out before embedding
        (Resemblyzer's silence trimming). ModelError ``speaker.input`` for audio that is not
        1-D int16 of 30 ms .. 60 s, ``speaker.no_speech`` when nothing is voiced.
        """
        samples = self._check(samples)
        n = len(samples)
        if voiced_mask is not None:
            voiced = ge2e.expand_mask(voiced_mask, n)
            flags = ge2e.mask_flags(voiced_mask, n)
        else:
            flags = ge2e.energy_flags(samples)
            voiced = np.zeros(n, dtype=bool)
            voiced[: len(flags) * ge2e.VAD_WINDOW] = np.repeat(flags, ge2e.VAD_WINDOW)
        voiced_ms = int(np.count_nonzero(voiced) * 1000 // SAMPLE_RATE)
        keep = np.repeat(ge2e.trim_mask(flags), ge2e.VAD_WINDOW)
        wav = ge2e.normalize_volume(samples.astype(np.float64) / 32768.0)
        wav = wav[: len(keep)][keep]
        if voiced_ms == 0 or len(wav) == 0:
            raise ModelError("speaker.no_speech", ms=n * 1000 // SAMPLE_RATE)
        partials = self.embed_mels(ge2e.partial_mels(wav))
        mean = partials.mean(axis=0)
        norm = float(np.linalg.norm(mean))
        if not np.isfinite(norm) or norm == 0:
            raise ModelError("model.failed", what=WHAT, reason="the embedding is zero")
        return SpeakerEmbedding(
            vector=(mean / norm).astype(np.float32),
            voiced_ms=voiced_ms,
            quality=quality_of(samples, voiced),
        )

    @staticmethod
    def _check(samples: Any) -> npt.NDArray[np.int16]:
        if not isinstance(samples, np.ndarray) or samples.dtype != np.int16 or samples.ndim != 1:
            kind = (
                f"{samples.dtype} array of shape {samples.shape}"
                if isinstance(samples, np.ndarray)
                else type(samples).__name__
            )
            raise ModelError("speaker.input", reason=f"want 1-D int16 samples, got {kind}")
        most = int(MAX_SECONDS * SAMPLE_RATE)
        if not MIN_SAMPLES <= len(samples) <= most:
            raise ModelError(
                "speaker.input", reason=f"{len(samples)} samples; want {MIN_SAMPLES}..{most}"
            )
        return samples
