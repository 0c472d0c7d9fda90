"""Speech synthesis with espeak-ng: replies spoken on devices, default wake-word templates
and the synthesized test corpus.

``synthesize`` runs ``espeak-ng --stdout`` (a WAV at the voice's own rate, 22.05 kHz) and
returns 16 kHz mono int16 samples. Voices are espeak-ng names, optionally with a variant
(``en-us``, ``en-gb-scotland``, ``en+f3``, ``en-us+Andy``); pitch and speed vary a voice.
"""

from __future__ import annotations

import io
import shutil
import subprocess
from dataclasses import dataclass

import numpy as np
import soundfile as sf
import soxr

from hardware.errors import AudioError
from hardware.pcm import SAMPLE_RATE, Samples

TIMEOUT_S = 30.0
"""seconds one synthesis may take"""
MAX_TEXT_CHARS = 2_000


@dataclass(frozen=True)
class Voice:
    """One synthetic speaker: an espeak-ng voice plus pitch and speed."""

    name: str = "en-us"
    """espeak-ng voice, optionally ``+variant``"""
    pitch: int = 50
    """0..99 (espeak-ng ``-p``)"""
    speed: int = 160
    """words per minute (espeak-ng ``-s``)"""

    @property
    def label(self) -> str:
        return f"{self.name}/p{self.pitch}/s{self.speed}"


def espeak_binary() -> str:
    path = shutil.which("espeak-ng")
    if path is None:
        raise AudioError("espeak.missing")
    return path


def synthesize(text: str, voice: Voice | None = None) -> Samples:
    """``text`` spoken by ``voice`` as 16 kHz mono int16; AudioError if espeak-ng fails."""
    voice = voice or Voice()
    if not text.strip() or len(text) > MAX_TEXT_CHARS:
        raise AudioError("espeak.failed", voice=voice.label, reason="text empty or too long")
    cmd = [
        espeak_binary(),
        "-v",
        voice.name,
        "-p",
        str(voice.pitch),
        "-s",
        str(voice.speed),
        "--stdout",
        "--",
        text,
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise AudioError("espeak.failed", voice=voice.label, reason="timed out") from None
    if done.returncode != 0 or not done.stdout:
        reason = done.stderr.decode(errors="replace").strip()[:200] or f"exit {done.returncode}"
        raise AudioError("espeak.failed", voice=voice.label, reason=reason)
    try:
        data, rate = sf.read(io.BytesIO(done.stdout), dtype="float32", always_2d=True)
    except (RuntimeError, sf.LibsndfileError) as exc:
        raise AudioError("espeak.failed", voice=voice.label, reason=str(exc)) from None
    mono = data.mean(axis=1)
    if rate != SAMPLE_RATE:
        mono = soxr.resample(mono, rate, SAMPLE_RATE)
    return np.clip(np.round(mono * 32767.0), -32768, 32767).astype(np.int16)
