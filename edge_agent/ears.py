"""The real detectors of the edge pipeline, from the device's model catalog.

:func:`load_ears` resolves the ``vad``, ``wake`` and ``speaker`` roles of the bundle's
catalog (``<bundle>/models/catalog.json``: digests checked, the speaker model converted once
on first use) and wraps the model runners in the small protocols
:mod:`edge_agent.pipeline` is written against. Loading happens in the caller's thread (it
may take seconds the first time); every runner is then used from the pipeline's one model
thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from edge_agent.pipeline import (
    Ears,
    Embedding,
    LocalVoiceprint,
    SpeechEnded,
    SpeechEvent,
    SpeechPaused,
    SpeechStarted,
    WakeFired,
)
from hardware.pcm import Frame, Samples
from models.catalog import Catalog, ModelEntry
from provisioning.bundle import Bundle

log = logging.getLogger(__name__)


class SileroSpeech:
    """Silero VAD + the hysteresis segmenter (``models.vad``) as a :class:`SpeechDetector`."""

    def __init__(self, model_path: Path) -> None:
        from models.vad import Segmenter, SileroVad

        self.segmenter = Segmenter(SileroVad(model_path))

    def feed(self, frame: Frame) -> Sequence[SpeechEvent]:
        from models.vad import SpeechPause, SpeechStart

        out: list[SpeechEvent] = []
        for event in self.segmenter.feed(frame.samples, frame.start_ms):
            if isinstance(event, SpeechStart):
                out.append(SpeechStarted(event.ms))
            elif isinstance(event, SpeechPause):
                out.append(SpeechPaused(event.samples, event.start_ms, event.voiced_mask()))
            else:
                out.append(
                    SpeechEnded(
                        samples=event.samples,
                        start_ms=event.start_ms,
                        end_ms=event.end_ms,
                        voiced_ms=event.voiced_ms,
                        voiced=event.voiced_mask(),
                        paused_samples=event.paused_samples,
                    )
                )
        return out


class Ge2eSpeaker:
    """The GE2E ONNX speaker encoder (``models.speaker``) as a :class:`SpeakerEmbedder`."""

    def __init__(self, model_path: Path, model: str) -> None:
        from models.speaker import SpeakerEncoder

        self.encoder = SpeakerEncoder(model_path)
        self.model = model

    def embed(
        self, samples: Samples, voiced_mask: npt.NDArray[np.bool_] | None = None
    ) -> Embedding:
        e = self.encoder.embed(samples, voiced_mask)
        return Embedding(e.vector, e.voiced_ms, e.quality)


class StoredVoiceprint:
    """The hub's voiceprint for this device's channel, as kept in the bundle state."""

    def __init__(self, state_dir: Path) -> None:
        from edge_agent.voiceprint import VoiceprintCache

        self.cache = VoiceprintCache(state_dir)

    def current(self) -> LocalVoiceprint | None:
        held = self.cache.get()
        if held is None:
            return None
        return LocalVoiceprint(held.centroid, held.line, held.speaker_model)


class TemplateWake:
    """The speech-embedding + DTW wake-word detector (``models.wake``) as a
    :class:`WakeSpotter`."""

    def __init__(self, detector: Any) -> None:
        self.detector = detector

    def feed(self, frame: Frame) -> WakeFired | None:
        hit = self.detector.feed(frame)
        if hit is None:
            return None
        return WakeFired(float(hit.score), int(hit.end_ms))

    def reset(self) -> None:
        self.detector.reset()


def load_wake(bundle: Bundle, entry: ModelEntry) -> TemplateWake:
    """The wake detector (``models.wake.detector_for``): the owner's templates for this
    device (``yimi wake enroll``) if there are any, else the default "Yimi" templates; the
    device's threshold if one is configured."""
    from models import wake

    return TemplateWake(wake.detector_for(bundle, entry))


def load_ears(bundle: Bundle, progress: Callable[[float], None] | None = None) -> Ears:
    """The detectors for ``bundle`` from its catalog (ModelError if a model is refused)."""
    from hardware.audio import encode_flac

    catalog = Catalog.open(bundle.path)
    vad = catalog.resolve("vad")
    speaker = catalog.resolve("speaker", progress)
    wake = catalog.resolve("wake")  # the extras (templates) are checked with it
    log.info(
        "models: vad %s@%s, wake %s@%s, speaker %s@%s",
        vad.name,
        vad.version,
        wake.name,
        wake.version,
        speaker.name,
        speaker.version,
    )
    return Ears(
        speech=SileroSpeech(vad.file),
        wake=load_wake(bundle, wake),
        speaker=Ge2eSpeaker(speaker.file, f"{speaker.name}@{speaker.version}"),
        voiceprint=StoredVoiceprint(bundle.state_dir),
        encode=encode_flac,
        preroll_ms=0,  # the segmenter's start already includes its 300 ms pre-roll
    )
