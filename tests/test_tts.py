"""Reply voices (hardware/tts.py): the language is picked by script, Chinese is spoken by
espeak-ng ``cmn``, English by the Piper voice (real model, real espeak-ng), and a failing or
missing backend falls back to espeak-ng."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np
import pytest

from hardware import tts
from hardware.errors import AudioError
from hardware.pcm import SAMPLE_RATE, Samples
from hardware.tts import (
    EspeakVoice,
    FallbackVoice,
    PiperVoice,
    Speaker,
    default_english,
    has_han,
    language_of,
)


@dataclass
class Recording:
    """A stand-in backend that notes what it was asked to say."""

    label: str
    said: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.label

    def synthesize(self, text: str) -> Samples:
        self.said.append(text)
        return np.zeros(SAMPLE_RATE // 10, dtype=np.int16)


class Broken:
    name = "broken"

    def synthesize(self, text: str) -> Samples:
        raise AudioError("tts.failed", voice=self.name, reason="model crashed")


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("The kitchen light is on.", "en"),
        ("客厅的灯开了。", "zh"),
        ("好的, the lamp is at 40%", "zh"),  # mixed: any Han character → Chinese
        ("Turn on 客厅 lamp", "zh"),
        ("30 yuan, ok?", "en"),
        ("こんにちは", "en"),  # kana only: not Han
        ("𠀀", "zh"),  # Extension B
    ],
)
def test_language_is_picked_by_script(text: str, lang: str) -> None:
    assert language_of(text) == lang
    assert has_han(text) is (lang == "zh")


def test_speaker_routes_each_reply_to_its_language_voice() -> None:
    zh, en = Recording("zh"), Recording("en")
    speaker = Speaker({"zh": zh, "en": en})
    speaker("客厅的灯开了。")
    speaker("The kitchen light is on.")
    speaker("好的, done.")
    assert zh.said == ["客厅的灯开了。", "好的, done."]
    assert en.said == ["The kitchen light is on."]


def test_default_voices_are_cmn_for_chinese_and_piper_for_english() -> None:
    speaker = Speaker.default()
    assert speaker.voice_for("客厅的灯开了。").name == "espeak-ng:cmn"
    english = speaker.voice_for("The kitchen light is on.")
    assert english.name == "piper:en_US-joe-medium|espeak-ng:en-us"
    # both really speak: 16 kHz int16 of a plausible length, not silence
    for text in ("客厅的灯开了。", "The kitchen light is on."):
        audio = speaker(text)
        assert audio.dtype == np.int16 and 0.5 < len(audio) / SAMPLE_RATE < 5
        assert np.abs(audio).max() > 1000
    assert isinstance(english, FallbackVoice) and english.failures == 0


def test_a_failing_backend_falls_back_to_espeak() -> None:
    voice = FallbackVoice(Broken(), EspeakVoice())
    audio = voice.synthesize("The kitchen light is on.")
    assert voice.failures == 1 and len(audio) > SAMPLE_RATE // 2


def test_piper_missing_means_espeak_speaks_english(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tts, "piper_available", lambda: False)
    assert default_english().name == "espeak-ng:en-us"
    # installed, but its import fails at load time: an AudioError, and the fallback speaks
    monkeypatch.setitem(sys.modules, "piper", None)
    broken = PiperVoice()
    with pytest.raises(AudioError, match="not installed"):
        broken.synthesize("hello")
    voice = FallbackVoice(broken, EspeakVoice())
    assert len(voice.synthesize("Hello there.")) > 0 and voice.failures == 1


def test_piper_refuses_empty_text_with_an_audio_error() -> None:
    with pytest.raises(AudioError):
        PiperVoice().synthesize("   ")


def test_devices_speak_through_the_language_speaker_by_default() -> None:
    from edge_agent.pipeline import _default_speaker

    speaker = _default_speaker()
    assert isinstance(speaker, Speaker)
    assert speaker.voice_for("现在是下午五点。").name == "espeak-ng:cmn"
    assert speaker.voice_for("It is five o'clock.").name.startswith("piper:")
