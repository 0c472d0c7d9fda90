"""The GE2E speaker encoder: torch-free conversion, ONNX LSTM semantics, the mel frontend,
and voice separation on synthesized speech (espeak-ng owner takes and other voices)."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from hardware.espeak import Voice
from models import ge2e
from models import voiceprint as vp
from models.errors import ModelError
from models.speaker import EMBED_DIM, SpeakerEmbedding, SpeakerEncoder, cosine
from tests.speech import (
    FESTIVAL_OTHERS,
    OTHERS,
    OWNER,
    OWNER_TAKES,
    concat,
    noise,
    say,
    say_festival,
    silence,
    with_noise,
)

FLOOR = vp.floor_for("ge2e-resemblyzer")
"""the built-in model's score floor: verdicts compare calibrated scores with the lines"""

ENROL_PHRASES = (
    "Please remind me to water the plants tomorrow morning.",
    "What is on my calendar for the rest of the week?",
    "Turn off the lights in the kitchen and lock the front door.",
    "Send a message to Anna saying I will be ten minutes late.",
    "How long will it take to drive to the airport right now?",
)
TEST_PHRASES = (
    "Add milk, eggs and bread to my shopping list please.",
    "Play some quiet music in the living room for an hour.",
    "Call my brother when I get home this evening.",
    "What was the name of the restaurant we went to last Friday?",
)


@pytest.fixture(scope="module")
def pt_path() -> Path:
    path = ge2e.resemblyzer_weights_path()
    assert path is not None, "Resemblyzer's pretrained.pt is not installed"
    return path


@pytest.fixture(scope="module")
def onnx_path(pt_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("speaker") / "ge2e.onnx"
    ge2e.convert(pt_path, out)
    return out


@pytest.fixture(scope="module")
def encoder(onnx_path: Path) -> SpeakerEncoder:
    return SpeakerEncoder(onnx_path)


@pytest.fixture(scope="module")
def centroid(encoder: SpeakerEncoder) -> npt.NDArray[np.float32]:
    """The owner's enrolment: 5 takes, centroid weighted by voiced duration and quality."""
    takes = [encoder.embed(say(t, v)) for t, v in zip(ENROL_PHRASES, OWNER_TAKES, strict=True)]
    for take in takes:
        assert take.voiced_ms >= 1500
    total = np.sum([e.voiced_ms * e.quality * e.vector for e in takes], axis=0)
    return (total / np.linalg.norm(total)).astype(np.float32)


# --- conversion ---------------------------------------------------------------------------


def _sigmoid(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return 1 / (1 + np.exp(-x))


def reference_encoder(weights: ge2e.Weights, mels: npt.NDArray[np.float32]) -> Any:
    """GE2E in plain numpy, in PyTorch's conventions (gates i, f, g, o; b_ih + b_hh)."""
    x = mels.astype(np.float64)
    batch, frames, _ = x.shape
    h = np.zeros((batch, ge2e.HIDDEN))
    for layer in range(ge2e.LAYERS):
        w_ih = weights[f"lstm.weight_ih_l{layer}"].astype(np.float64)
        w_hh = weights[f"lstm.weight_hh_l{layer}"].astype(np.float64)
        bias = weights[f"lstm.bias_ih_l{layer}"] + weights[f"lstm.bias_hh_l{layer}"].astype(
            np.float64
        )
        h = np.zeros((batch, ge2e.HIDDEN))
        c = np.zeros((batch, ge2e.HIDDEN))
        outputs = []
        for t in range(frames):
            gates = x[:, t] @ w_ih.T + h @ w_hh.T + bias
            i, f, g, o = np.split(gates, 4, axis=1)
            c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
            h = _sigmoid(o) * np.tanh(c)
            outputs.append(h)
        x = np.stack(outputs, axis=1)
    raw = np.maximum(0, h @ weights["linear.weight"].T + weights["linear.bias"])
    return raw / np.linalg.norm(raw, axis=1, keepdims=True)


def test_onnx_lstm_matches_numpy_reference(pt_path: Path, encoder: SpeakerEncoder) -> None:
    weights = ge2e.load_state_dict(pt_path)
    assert weights["lstm.weight_ih_l0"].shape == (1024, 40)
    rng = np.random.default_rng(7)
    # mel power values like real speech: non-negative, heavy-tailed
    mels = rng.gamma(0.5, 2.0, (3, 60, ge2e.N_MELS)).astype(np.float32)
    got = encoder.embed_mels(mels)
    want = reference_encoder(weights, mels)
    assert got.shape == (3, EMBED_DIM)
    assert np.abs(got - want).max() < 1e-5
    # the gate reordering matters: PyTorch's order fed straight to ONNX gives other vectors
    w_ih = weights["lstm.weight_ih_l0"]
    w, _, _ = ge2e.onnx_lstm_weights(w_ih, weights["lstm.weight_hh_l0"], w_ih[:, 0], w_ih[:, 1])
    assert np.array_equal(w[0, 256:512], w_ih[768:1024])  # ONNX o = PyTorch o
    assert np.array_equal(w[0, 512:768], w_ih[256:512])  # ONNX f = PyTorch f
    assert np.array_equal(w[0, 768:1024], w_ih[512:768])  # ONNX c = PyTorch g


def test_convert_is_deterministic_atomic_and_reports_progress(
    pt_path: Path, onnx_path: Path, tmp_path: Path
) -> None:
    seen: list[float] = []
    out = tmp_path / "models" / "speaker.onnx"
    digest = ge2e.convert(pt_path, out, seen.append)
    assert digest == hashlib.sha256(out.read_bytes()).hexdigest()
    assert digest == hashlib.sha256(onnx_path.read_bytes()).hexdigest()
    assert seen[0] == 0.0 and seen[-1] == 1.0 and seen == sorted(seen)
    assert [p.name for p in out.parent.iterdir()] == ["speaker.onnx"]  # no temporary left
    # a failing conversion leaves the previous file as it was
    bad = tmp_path / "bad.pt"
    bad.write_bytes(pt_path.read_bytes()[:100_000])
    with pytest.raises(ModelError) as err:
        ge2e.convert(bad, out)
    assert err.value.key == "model.unreadable"
    assert hashlib.sha256(out.read_bytes()).hexdigest() == digest
    assert [p.name for p in out.parent.iterdir()] == ["speaker.onnx"]


class _Evil:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, ("/tmp/yimi-test-speaker-pwned",))


@pytest.mark.parametrize("case", ["empty", "garbage", "truncated", "evil_global", "no_state"])
def test_unreadable_weights_are_refused(case: str, pt_path: Path, tmp_path: Path) -> None:
    path = tmp_path / "w.pt"
    buf = io.BytesIO()
    for head in (ge2e.LEGACY_MAGIC, ge2e.LEGACY_PROTOCOL, {"little_endian": True}):
        pickle.dump(head, buf, protocol=2)
    data = {
        "empty": b"",
        "garbage": np.random.default_rng(1).bytes(5000),
        "truncated": pt_path.read_bytes()[:4_000_000],
        "evil_global": buf.getvalue() + pickle.dumps({"model_state": _Evil()}, protocol=2),
        "no_state": buf.getvalue() + pickle.dumps([1, 2], protocol=2) + pickle.dumps([]),
    }[case]
    path.write_bytes(data)
    with pytest.raises(ModelError) as err:
        ge2e.load_state_dict(path)
    assert err.value.key == "model.unreadable"
    assert not Path("/tmp/yimi-test-speaker-pwned").exists()


def test_build_refuses_wrong_shapes(pt_path: Path) -> None:
    weights = ge2e.load_state_dict(pt_path)
    weights["lstm.weight_hh_l1"] = weights["lstm.weight_hh_l1"][:, :128]
    with pytest.raises(ModelError, match="weight_hh_l1"):
        ge2e.build_model(weights)
    del weights["linear.bias"]
    with pytest.raises(ModelError):
        ge2e.build_model(weights)


def test_not_a_speaker_model(tmp_path: Path) -> None:
    path = tmp_path / "x.onnx"
    path.write_bytes(b"not onnx")
    with pytest.raises(ModelError) as err:
        SpeakerEncoder(path)
    assert err.value.key == "model.failed"


# --- frontend -----------------------------------------------------------------------------


def test_mel_frontend_shapes_and_bands() -> None:
    filters = ge2e.mel_filters()
    assert filters.shape == (40, 201) and filters.min() >= 0
    peaks = filters.argmax(axis=1)
    assert np.all(np.diff(peaks) >= 0)
    f = np.array([100.0, 999.0, 1000.0, 4000.0, 8000.0])
    assert np.allclose(ge2e._mel_to_hz(ge2e._hz_to_mel(f)), f)
    t = np.arange(16000) / 16000
    tone = 0.1 * np.sin(2 * np.pi * 1000 * t)
    mel = ge2e.mel_spectrogram(tone)
    assert mel.shape == (1 + 16000 // 160, 40)  # librosa center=True frame count
    centre = filters[:, 25]  # FFT bin 25 = 1000 Hz
    assert int(mel[50].argmax()) == int(centre.argmax())


@pytest.mark.parametrize(
    ("seconds", "starts"),
    [(0.5, [0]), (1.6, [0]), (2.0, [0, 77]), (3.0, [0, 77, 154]), (4.0, [0, 77, 154, 231])],
)
def test_partial_slices_follow_resemblyzer(seconds: float, starts: list[int]) -> None:
    slices = ge2e.partial_slices(int(seconds * 16000))
    assert [s.start for s in slices] == starts
    assert all(s.stop - s.start == 160 for s in slices)


def test_energy_trim_and_mask(encoder: SpeakerEncoder) -> None:
    speech = say(TEST_PHRASES[0])
    plain = encoder.embed(speech)
    padded = concat(silence(1.5), speech, noise(1.0, dbfs=-60), silence(0.5))
    trimmed = encoder.embed(padded)
    assert cosine(plain.vector, trimmed.vector) > 0.95
    assert abs(trimmed.voiced_ms - plain.voiced_ms) <= 90
    # an explicit voiced mask per 512-sample VAD frame
    frames = -(-len(padded) // 512)
    mask = np.zeros(frames, dtype=bool)
    mask[int(1.5 * 16000) // 512 : (int(1.5 * 16000) + len(speech)) // 512 + 1] = True
    masked = encoder.embed(padded, voiced_mask=mask)
    assert cosine(plain.vector, masked.vector) > 0.95
    assert abs(masked.voiced_ms - len(speech) * 1000 // 16000) <= 64
    # a per-sample mask
    per_sample = np.zeros(len(padded), dtype=np.uint8)
    per_sample[int(1.5 * 16000) : int(1.5 * 16000) + len(speech)] = 1
    assert cosine(encoder.embed(padded, per_sample).vector, masked.vector) > 0.99
    with pytest.raises(ModelError) as err:
        encoder.embed(padded, voiced_mask=np.ones(len(padded) + 1, dtype=bool))
    assert err.value.key == "speaker.mask"
    with pytest.raises(ModelError) as err:
        encoder.embed(padded, voiced_mask=np.zeros(frames, dtype=bool))
    assert err.value.key == "speaker.no_speech"


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros(0, dtype=np.int16),
        np.zeros(100, dtype=np.int16),
        np.zeros(16000, dtype=np.float32),
        np.zeros((16000, 2), dtype=np.int16),
        np.zeros(61 * 16000, dtype=np.int16),
        [0] * 16000,
    ],
    ids=["empty", "too_short", "float", "stereo", "too_long", "list"],
)
def test_bad_input_is_a_clear_error(encoder: SpeakerEncoder, bad: Any) -> None:
    with pytest.raises(ModelError) as err:
        encoder.embed(bad)
    assert err.value.key == "speaker.input"
    assert "int16" in str(err.value) or "samples" in str(err.value)


def test_silence_and_noise_have_no_speech(encoder: SpeakerEncoder) -> None:
    for audio in (silence(2.0), noise(2.0, dbfs=-70)):
        with pytest.raises(ModelError) as err:
            encoder.embed(audio)
        assert err.value.key == "speaker.no_speech"


def test_quality(encoder: SpeakerEncoder) -> None:
    speech = say(TEST_PHRASES[1])
    clean = encoder.embed(speech)
    assert clean.quality > 0.9
    quiet = encoder.embed((speech.astype(np.float64) * 0.015).astype(np.int16))
    assert quiet.quality < 0.5
    clipped = encoder.embed(np.clip(speech.astype(np.int32) * 8, -32768, 32767).astype(np.int16))
    assert clipped.quality < 0.5
    sparse = encoder.embed(concat(silence(4.0), speech, silence(4.0)))
    assert sparse.quality < clean.quality
    assert isinstance(clean, SpeakerEmbedding) and clean.vector.dtype == np.float32
    assert abs(float(np.linalg.norm(clean.vector)) - 1) < 1e-5


# --- voices -------------------------------------------------------------------------------


def test_same_voice_is_closer_than_other_voices(encoder: SpeakerEncoder) -> None:
    owner = [encoder.embed(say(t, OWNER)).vector for t in TEST_PHRASES[:3]]
    same = [cosine(owner[i], owner[j]) for i in range(3) for j in range(i + 1, 3)]
    assert min(same) > 0.85
    for voice in OTHERS:
        other = [encoder.embed(say(t, voice)).vector for t in TEST_PHRASES[:3]]
        cross = [cosine(a, b) for a in owner for b in other]
        assert max(cross) < min(same), voice.label


@pytest.mark.parametrize("noisy", [False, True], ids=["clean", "noise20dB"])
def test_enrolled_owner_verifies(
    encoder: SpeakerEncoder, centroid: npt.NDArray[np.float32], noisy: bool
) -> None:
    for i, (text, voice) in enumerate(zip(TEST_PHRASES, OWNER_TAKES, strict=False)):
        audio = say(text, voice)
        if noisy:
            audio = with_noise(audio, 20.0, seed=i)
        score = vp.similarity(encoder.embed(audio).vector, centroid, FLOOR)
        assert vp.verdict(score) is vp.Verdict.VERIFIED, (voice.label, text, score)


@pytest.mark.parametrize("voice", OTHERS, ids=lambda v: v.label)
def test_other_voices_are_unmatched(
    encoder: SpeakerEncoder, centroid: npt.NDArray[np.float32], voice: Voice
) -> None:
    for i, text in enumerate(TEST_PHRASES):
        audio = say(text, voice)
        for sample in (audio, with_noise(audio, 20.0, seed=i)):
            raw = cosine(encoder.embed(sample).vector, centroid)
            assert 0.45 <= raw < 0.65, (voice.label, text, raw)  # uncalibrated: "uncertain"
            score = vp.calibrate(raw, FLOOR)
            assert vp.verdict(score) is vp.Verdict.UNMATCHED, (voice.label, text, score)


@pytest.mark.parametrize(
    ("voice", "allowed"),
    [
        (FESTIVAL_OTHERS[0], {vp.Verdict.UNMATCHED}),  # a woman: another person entirely
        (FESTIVAL_OTHERS[1], {vp.Verdict.UNMATCHED, vp.Verdict.UNCERTAIN}),  # a man, like him
    ],
    ids=["slt", "kal"],
)
def test_voices_from_real_recordings_are_not_the_owner(
    encoder: SpeakerEncoder,
    centroid: npt.NDArray[np.float32],
    voice: str,
    allowed: set[vp.Verdict],
) -> None:
    """Festival voices made from real people's recordings are never verified as the
    (espeak-ng) owner; the woman's voice is unmatched on the calibrated scale."""
    for text in TEST_PHRASES:
        score = vp.similarity(encoder.embed(say_festival(text, voice)).vector, centroid, FLOOR)
        assert vp.verdict(score) in allowed, (voice, text, score)


def test_embedding_time_of_a_3s_utterance(encoder: SpeakerEncoder) -> None:
    speech = concat(say(TEST_PHRASES[3]), say(TEST_PHRASES[2]))[: 3 * 16000]
    assert len(speech) == 3 * 16000
    encoder.embed(speech)
    times = []
    for _ in range(7):
        start = time.perf_counter()
        encoder.embed(speech)
        times.append((time.perf_counter() - start) * 1000)
    median = statistics.median(times)
    print(f"speaker embedding of 3 s: median {median:.1f} ms (1 thread)")
    assert median < 1000
