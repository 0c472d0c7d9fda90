"""Silero VAD on onnxruntime and the hysteresis segmenter, on real espeak-ng speech."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from hardware.espeak import Voice
from hardware.pcm import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE
from models.errors import ModelError
from models.vad import (
    MODEL_SHA256,
    Segmenter,
    SileroVad,
    SpeechEnd,
    SpeechPause,
    SpeechStart,
    default_model_path,
    package_file,
)
from tests.speech import OTHERS, OWNER, concat, noise, say, silence, with_noise


@pytest.fixture(scope="module")
def vad() -> SileroVad:
    return SileroVad()


def hum(seconds: float, hz: float = 50.0, dbfs: float = -30.0) -> np.ndarray:
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    amp = 32768 * 10 ** (dbfs / 20) * np.sqrt(2)
    return (amp * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def trimmed(samples: np.ndarray) -> np.ndarray:
    """Without espeak-ng's own leading and trailing silence."""
    loud = np.nonzero(np.abs(samples) > 200)[0]
    return samples[loud[0] : loud[-1] + 1]


def segments(vad: SileroVad, samples: np.ndarray) -> list[SpeechEnd]:
    vad.reset()
    return Segmenter(vad).segments(samples)


def test_speech_is_found_in_silence(vad: SileroVad) -> None:
    speech = say("Yimi, what time is it?")
    audio = concat(silence(1.0), speech, silence(1.5))
    segs = segments(vad, audio)
    assert len(segs) == 1
    seg = segs[0]
    # pre-roll before the onset (1000 ms), ends within the hang-over after the speech
    assert 500 <= seg.start_ms <= 1000
    speech_end_ms = 1000 + len(speech) * 1000 // SAMPLE_RATE
    assert speech_end_ms - 300 <= seg.end_ms <= speech_end_ms + 600
    assert seg.voiced_ms >= 0.5 * len(speech) * 1000 // SAMPLE_RATE
    assert len(seg.samples) == (seg.end_ms - seg.start_ms) * SAMPLE_RATE // 1000
    assert seg.voiced_mask().shape == seg.samples.shape


@pytest.mark.parametrize("voice", [OWNER, *OTHERS[:3]], ids=lambda v: v.label)
def test_noisy_speech_of_several_voices(vad: SileroVad, voice: Voice) -> None:
    audio = concat(noise(1.0, -45, seed=1), say("Turn on the kitchen lights please", voice))
    audio = with_noise(concat(audio, silence(1.0)), snr_db=10, seed=2)
    assert len(segments(vad, audio)) == 1


@pytest.mark.parametrize(
    "background",
    [
        silence(5.0),
        noise(5.0, -30, seed=3),
        noise(5.0, -50, seed=4),
        hum(5.0),
    ],
    ids=["silence", "white-noise-30dBFS", "white-noise-50dBFS", "hum-50Hz"],
)
def test_silence_and_noise_are_not_speech(vad: SileroVad, background: np.ndarray) -> None:
    vad.reset()
    probs = vad.probs(background)
    assert float(np.max(probs)) < 0.5
    assert segments(vad, background) == []


def test_short_pause_keeps_one_segment_long_pause_splits(vad: SileroVad) -> None:
    a, b = trimmed(say("Good morning")), trimmed(say("how are you"))
    assert len(segments(vad, concat(silence(0.5), a, silence(0.25), b, silence(1.0)))) == 1
    assert len(segments(vad, concat(silence(0.5), a, silence(1.5), b, silence(1.0)))) == 2


def test_blip_shorter_than_minimum_is_dropped(vad: SileroVad) -> None:
    word = say("a")[: int(0.12 * SAMPLE_RATE)]  # 120 ms of voice
    assert segments(vad, concat(silence(1.0), word, silence(1.5))) == []


def test_start_event_carries_the_audio_so_far(vad: SileroVad) -> None:
    vad.reset()
    seg = Segmenter(vad)
    audio = concat(silence(1.0), say("Yimi, play some music"), silence(1.0))
    events = []
    for i in range(len(audio) // FRAME_SAMPLES):
        frame = audio[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES]
        events += seg.feed(frame, 10_000 + i * FRAME_MS)
    starts = [e for e in events if isinstance(e, SpeechStart)]
    ends = [e for e in events if isinstance(e, SpeechEnd)]
    assert len(starts) == len(ends) == 1
    assert starts[0].ms == ends[0].start_ms
    # pre-roll + at least the minimum speech, in whole frames, starting where the segment does
    assert len(starts[0].samples) >= (300 + 250) * SAMPLE_RATE // 1000
    assert np.array_equal(starts[0].samples, ends[0].samples[: len(starts[0].samples)])
    assert not seg.in_speech


def events_of(seg: Segmenter, audio: np.ndarray) -> list[object]:
    out: list[object] = []
    for i in range(len(audio) // FRAME_SAMPLES):
        out += seg.feed(audio[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES], i * FRAME_MS)
    return out


def test_pause_carries_the_segment_as_it_ends(vad: SileroVad) -> None:
    vad.reset()
    seg = Segmenter(vad)
    speech = say("Yimi, turn on the kitchen lights.")
    events = events_of(seg, concat(silence(1.0), speech, silence(1.0)))
    kinds = [type(e) for e in events]
    assert kinds[0] is SpeechStart and kinds[-1] is SpeechEnd
    pauses = [e for e in events if isinstance(e, SpeechPause)]
    end = events[-1]
    assert isinstance(end, SpeechEnd) and pauses
    last = pauses[-1]
    assert last.start_ms == end.start_ms
    # the segment exactly as it ended (its tail included), before the hang-over was over
    assert end.paused_samples == len(last.samples)
    assert np.array_equal(end.samples, last.samples)
    # and its voiced frames: the speaker embedding made at the pause is the end's
    assert np.array_equal(end.probs, last.probs) and last.voiced_mask().any()
    assert np.array_equal(end.voiced_mask(), last.voiced_mask())


def test_speech_resuming_after_a_pause_is_a_new_pause(vad: SileroVad) -> None:
    a, b = trimmed(say("Good morning")), trimmed(say("how are you"))
    vad.reset()
    seg = Segmenter(vad)
    events = events_of(seg, concat(silence(0.5), a, silence(0.3), b, silence(1.0)))
    pauses = [e for e in events if isinstance(e, SpeechPause)]
    (end,) = [e for e in events if isinstance(e, SpeechEnd)]
    assert len(pauses) >= 2  # one after "Good morning", one at the end
    assert len(pauses[0].samples) < len(a) + SAMPLE_RATE < len(pauses[-1].samples)
    assert end.paused_samples == len(pauses[-1].samples)  # the latest; the first is not
    assert np.array_equal(end.samples[: len(pauses[0].samples)], pauses[0].samples)
    # without pauses, the same segments
    vad.reset()
    plain = Segmenter(vad, pauses=False)
    again = events_of(plain, concat(silence(0.5), a, silence(0.3), b, silence(1.0)))
    assert not any(isinstance(e, SpeechPause) for e in again)
    (same,) = [e for e in again if isinstance(e, SpeechEnd)]
    assert np.array_equal(same.samples, end.samples) and same.paused_samples == 0


def test_a_cut_segment_vouches_for_no_pause(vad: SileroVad) -> None:
    vad.reset()
    talk = concat(*(say(t) for t in ("one two three four five", "six seven eight nine ten")))
    segs = Segmenter(vad, max_ms=1500).segments(concat(silence(0.5), talk, silence(1.0)))
    assert segs[0].paused_samples == 0


def test_max_length_cuts_a_segment(vad: SileroVad) -> None:
    vad.reset()
    talk = concat(*(say(t) for t in ("one two three four five", "six seven eight nine ten")))
    segs = Segmenter(vad, max_ms=1500).segments(concat(silence(0.5), talk, silence(1.0)))
    assert len(segs) >= 2
    assert all(s.end_ms - s.start_ms <= 1500 + FRAME_MS for s in segs)


def test_state_is_carried_and_reset(vad: SileroVad) -> None:
    audio = with_noise(concat(silence(0.5), say("Hello there")), 20, seed=5)
    vad.reset()
    first = vad.probs(audio)
    vad.reset()
    again = vad.probs(audio)
    assert np.allclose(first, again)
    assert first.max() > 0.9


def test_frame_size_is_checked(vad: SileroVad) -> None:
    with pytest.raises(ValueError):
        vad.prob(np.zeros(480, np.int16))


def test_wrong_digest_refused(tmp_path: Path) -> None:
    bad = tmp_path / "silero_vad.onnx"
    shutil.copy(default_model_path(), bad)
    with bad.open("r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ModelError) as err:
        SileroVad(bad, sha256=MODEL_SHA256)
    assert err.value.key == "model.mismatch"


def test_not_a_model_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not an onnx model")
    with pytest.raises(ModelError) as err:
        SileroVad(junk)
    assert err.value.key == "model.failed"


def test_missing_package_named() -> None:
    with pytest.raises(ModelError) as err:
        package_file("no_such_vad_pkg", "x.onnx", what="vad", dist="no-such-vad", version="1")
    assert err.value.key == "model.missing"
    assert "pip install no-such-vad==1" in str(err.value)
