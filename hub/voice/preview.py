"""Speculative recognition: previews of utterances' audio, held until their utterance comes.

A device sends an ``AUDIO_PREVIEW`` (``voice_pb2.AudioPreview``: the utterance id its
``UTTERANCE`` will carry, how many 16 kHz samples, their FLAC) when its VAD hears a request's
speech stop, before its end-of-speech hang-over is over. The hub transcribes it in its voice
worker meanwhile (:class:`hub.voice.hearing.Hearing`); when the utterance arrives, its
``VoiceInfo.preview_samples`` vouches for the preview and :func:`covers` checks the final
audio is the preview's samples exactly (the device's VAD sends it once the segment's tail is
complete, so a segment whose speech did not resume is just that). Then the preview's
transcript is the utterance's — the same recogniser on the same audio — else the audio is
transcribed as always. A preview is never on the timeline and never answered: losing one
changes nothing but latency.

:class:`Previews` holds them per (device, utterance id) under caps (:data:`MAX_PREVIEWS`,
:data:`MAX_PREVIEWS_PER_DEVICE`, a :data:`TTL_S` life); the latest preview of an utterance
replaces the one before. Pure (no I/O); ``clock`` is monotonic seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hardware.pcm import SAMPLE_RATE
from models.asr import Samples, Transcriber, Transcript
from protos import voice_pb2
from sync.envelope import MAX_ID_CHARS, DropReason

MAX_PREVIEW_BYTES = 192 * 1024
"""encoded bytes of one preview (it travels in one envelope)"""
MAX_PREVIEW_SAMPLES = 30 * SAMPLE_RATE
"""samples one preview may cover (the device cuts a request at 30 s)"""
TTL_S = 30.0
"""seconds a preview waits for its utterance (which may queue behind the device's previous
request's reply)"""
MAX_PREVIEWS = 16
"""previews held over all devices"""
MAX_PREVIEWS_PER_DEVICE = 2

Key = tuple[str, str]
"""(device, utterance id)"""


def check_preview(preview: voice_pb2.AudioPreview) -> tuple[DropReason, str] | None:
    """Why an ``AudioPreview`` is refused unread (``None``: it is well formed)."""
    uid = preview.utterance_id
    if not uid or len(uid) > MAX_ID_CHARS:
        return DropReason.MALFORMED, "utterance id empty or too long"
    if not preview.data:
        return DropReason.MALFORMED, "no audio"
    if len(preview.data) > MAX_PREVIEW_BYTES:
        return DropReason.OVERSIZE, f"{len(preview.data)} bytes (at most {MAX_PREVIEW_BYTES})"
    if not 0 < preview.samples <= MAX_PREVIEW_SAMPLES:
        return DropReason.MALFORMED, f"{preview.samples} samples (1..{MAX_PREVIEW_SAMPLES})"
    return None


def covers(final: Samples, preview: Samples) -> str:
    """Why the final audio is not the preview's samples ("" when it is, sample for sample:
    even trailing silence changes what Whisper writes, so nothing less is the same)."""
    if len(final) != len(preview):
        return f"the audio is {len(final)} samples, the preview {len(preview)}"
    if not np.array_equal(final, preview):
        return "the audio is not the preview's samples"
    return ""


@dataclass(frozen=True)
class Heard:
    """A preview's recognition (made in the voice worker)."""

    recogniser: Transcriber
    samples: Samples
    transcript: Transcript
    done_s: float
    """``time.perf_counter()`` when the transcript was ready"""


@dataclass(frozen=True)
class Held:
    samples: int
    """what the preview says it covers (the utterance vouches for this many)"""
    made_s: float
    task: asyncio.Task[Heard | None]
    """its recognition (owned by the hearing's tasks; ``None`` when it was not heard)"""


class Previews:
    """Previews waiting for their utterance, under caps; the latest of an utterance wins."""

    def __init__(
        self,
        *,
        ttl_s: float = TTL_S,
        max_total: int = MAX_PREVIEWS,
        max_per_device: int = MAX_PREVIEWS_PER_DEVICE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_total = max_total
        self.max_per_device = max_per_device
        self._clock = clock
        self._held: OrderedDict[Key, Held] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, key: object) -> bool:
        return key in self._held

    def refusal(self, key: Key) -> str:
        """Why there is no room for a preview of ``key`` ("" if there is: a newer preview
        of one held always has room)."""
        if key in self._held:
            return ""
        if len(self._held) >= self.max_total:
            return f"{len(self._held)} previews already held"
        if sum(1 for d, _ in self._held if d == key[0]) >= self.max_per_device:
            return f"{self.max_per_device} previews of this device already held"
        return ""

    def put(self, key: Key, samples: int, task: asyncio.Task[Heard | None]) -> Held | None:
        """Hold a preview (check :meth:`refusal` first); returns the one it replaced."""
        old = self._held.pop(key, None)
        self._held[key] = Held(samples, self._clock(), task)
        return old

    def take(self, key: Key) -> Held | None:
        """The preview of ``key``, which is forgotten."""
        return self._held.pop(key, None)

    def expire(self, now: float | None = None) -> list[tuple[Key, Held]]:
        """Forget previews older than the TTL; returns them."""
        now = self._clock() if now is None else now
        gone = [(k, h) for k, h in self._held.items() if now - h.made_s >= self.ttl_s]
        for key, _ in gone:
            del self._held[key]
        return gone
