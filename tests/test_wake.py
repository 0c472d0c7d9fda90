"""Wake word ("Yimi"): speech-embedding + DTW templates, on real espeak-ng speech with noise.

Two template sets are tested, each only on voices it was not built from:

* the owner's enrolled templates (three takes of ``tests/speech.OWNER_TAKES``), tested on
  the owner's *other* takes — fires on "Yimi, …", not on similar-sounding words ("Jimmy",
  "Timmy", "yummy", "Emmy", "You mean me", "Yesterday") nor on other phrases;
* the synthesized default templates (24 espeak-ng voices, none of them in
  ``tests/speech.py``), tested on the owner and every voice of ``OTHERS``: they ignore 20
  of the 21 phrases for every voice (incl. Timmy, yummy, Emmy) but reach only two of the
  seven voices on every "Yimi, …" — ``OTHERS`` are the voices farthest from the owner,
  chosen for the speaker tests. Those cases are ``xfail``s that document the measured
  limit (``bench/edge_pipeline.py`` gives rates on random voices: 6.7 % false rejects,
  3.9 false accepts per hour).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hardware.espeak import Voice
from hardware.pcm import FRAME_MS, FRAME_SAMPLES
from models import wake
from models.errors import ModelError
from models.vad import Segmenter, SileroVad, SpeechStart
from provisioning.bundle import Bundle, flash
from provisioning.home import Home
from tests.speech import (
    CHINESE_CLIPS,
    OTHERS,
    OWNER,
    OWNER_TAKES,
    chinese_clip,
    concat,
    noise,
    say,
    silence,
    with_noise,
)

ENROL_TAKES = OWNER_TAKES[:3]
HELD_OUT_TAKES = OWNER_TAKES[3:]
WAKE_PHRASES = ("Yimi, what time is it?", "Yimi, turn on the lights.", "Yimi, play some music")
SIMILAR = (
    "Jimmy, what time is it?",
    "Jimmy",
    "Timmy is at school",
    "That was yummy",
    "Yummy, what time is it?",
    "Emmy won an award",
    "Emmy, what time is it?",
    "You mean me?",
    "Yesterday it was sunny",
    "Mimi is here",
)
OTHER_PHRASES = (
    "Good morning everyone",
    "Turn on the lights",
    "Please call my sister",
    "I would like a cup of tea",
    "Let me see the menu",
    "What time is it?",
    "Send a message to Amy",
    "Is it raining in the city?",
    "Give me a minute",
    "Hey Jimmy",
    "Kimmy and Jimmy",
)


def utterance(text: str, voice: Voice, seed: int = 0, snr_db: float = 20.0) -> np.ndarray:
    """``text`` by ``voice`` with room noise before and after, white noise at ``snr_db``."""
    audio = concat(noise(0.4, -50, seed=seed), say(text, voice), noise(0.6, -50, seed=seed + 1))
    return with_noise(audio, snr_db, seed=seed + 2)


def hits(detector: wake.WakeDetector, audio: np.ndarray) -> list[wake.WakeHit]:
    detector.reset()
    return detector.scan(audio)


@pytest.fixture(scope="module")
def default_templates(tmp_path_factory: pytest.TempPathFactory) -> wake.WakeTemplates:
    return wake.WakeTemplates.load(wake.build_default_templates(tmp_path_factory.mktemp("wake")))


@pytest.fixture(scope="module")
def default_detector(default_templates: wake.WakeTemplates) -> wake.WakeDetector:
    return wake.WakeDetector(None, default_templates)


@pytest.fixture(scope="module")
def owner_detector() -> wake.WakeDetector:
    takes = [(v.label, say("Yimi", v)) for v in ENROL_TAKES]
    threshold = wake.calibrate(wake.leave_one_out(takes))
    templates = wake.build_templates(takes, threshold=threshold, phases=wake.ENROL_PHASES)
    return wake.WakeDetector(None, templates)


# ---------------------------------------------------------------- templates
def test_default_voices_are_not_test_voices() -> None:
    test_voices = {v.name for v in (OWNER, *OWNER_TAKES, *OTHERS)}
    assert not test_voices & {v.name for v in wake.DEFAULT_VOICES}
    assert len({v.label for v in wake.DEFAULT_VOICES}) == len(wake.DEFAULT_VOICES) >= 8
    zh = {v.label for v in wake.DEFAULT_VOICES_ZH}
    assert not zh & {v.label for v in CHINESE_VOICES} and len(zh) == len(wake.DEFAULT_VOICES_ZH)


def test_default_templates_file(default_templates: wake.WakeTemplates) -> None:
    t = default_templates
    assert t.word == "Yimi" and t.source == "default"
    voices = len(wake.DEFAULT_VOICES) + len(wake.DEFAULT_VOICES_ZH)
    assert len(t.frames) == voices * wake.PHASES <= wake.MAX_TEMPLATES
    assert sum(label.startswith("cmn") for label in t.labels) == len(wake.DEFAULT_VOICES_ZH) * 2
    for f in t.frames:
        assert f.shape[1] == wake.DIM and 2 <= len(f) <= wake.MAX_TEMPLATE_FRAMES
        assert np.allclose(np.linalg.norm(f, axis=1), 1.0, atol=1e-4)
    assert t.threshold == wake.DEFAULT_THRESHOLD


def test_templates_roundtrip_and_bad_files(tmp_path: Path) -> None:
    takes = [(v.label, say("Yimi", v)) for v in ENROL_TAKES]
    t = wake.build_templates(takes, threshold=0.93)
    path = tmp_path / "t.npz"
    digest = t.save(path)
    assert len(digest) == 64
    back = wake.WakeTemplates.load(path)
    assert back.labels == t.labels and back.threshold == 0.93 and back.source == "owner"
    assert all(np.allclose(a, b) for a, b in zip(back.frames, t.frames, strict=True))

    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"PK\x03\x04 not really a zip")
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(path.read_bytes()[:200])
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, meta=np.array([{"a": 1}], dtype=object))
    wrong = tmp_path / "wrong.npz"
    meta = {"format": 1, "word": "x", "labels": ["a"], "hop": 1280, "window": 12400}
    np.savez(
        wrong,
        meta=np.frombuffer(json.dumps(meta).encode(), np.uint8),
        t0=np.zeros((3, 7), np.float32),
    )
    for bad in (junk, truncated, pickled, wrong, tmp_path / "missing.npz"):
        with pytest.raises(ModelError) as err:
            wake.WakeTemplates.load(bad)
        assert err.value.key == "wake.templates", bad


def test_a_recording_must_hold_one_word() -> None:
    model = wake.SpeechEmbedding()
    with pytest.raises(ModelError) as err:
        wake.template_frames(model, silence(1.0))
    assert err.value.key == "wake.recording"
    long_talk = say("This is a very long sentence and not a wake word at all, sorry")
    with pytest.raises(ModelError):
        wake.template_frames(model, long_talk)


# ---------------------------------------------------------------- owner-enrolled templates
def test_enrolment_calibrates_a_threshold(owner_detector: wake.WakeDetector) -> None:
    assert wake.DEFAULT_THRESHOLD < owner_detector.threshold <= wake.OWNER_THRESHOLD
    assert owner_detector.templates.source == "owner"
    assert len(owner_detector.templates.frames) == len(ENROL_TAKES) * wake.ENROL_PHASES


@pytest.mark.parametrize("voice", HELD_OUT_TAKES, ids=lambda v: v.label)
@pytest.mark.parametrize("text", WAKE_PHRASES)
def test_owner_templates_fire_on_held_out_takes(
    owner_detector: wake.WakeDetector, voice: Voice, text: str
) -> None:
    found = hits(owner_detector, utterance(text, voice, seed=3))
    assert len(found) == 1, owner_detector.peak_score
    hit = found[0]
    assert hit.score >= owner_detector.threshold
    assert 400 <= hit.end_ms <= 400 + 1200  # after the 400 ms lead-in, near the word's end
    assert hit.start_ms < hit.end_ms


@pytest.mark.parametrize("voice", HELD_OUT_TAKES, ids=lambda v: v.label)
def test_owner_templates_ignore_similar_words_and_other_phrases(
    owner_detector: wake.WakeDetector, voice: Voice
) -> None:
    fired = {}
    for i, text in enumerate(SIMILAR + OTHER_PHRASES):
        score = owner_detector.best_score(utterance(text, voice, seed=10 + i))
        if score >= owner_detector.threshold:
            fired[text] = round(score, 3)
    assert fired == {}
    assert len(SIMILAR + OTHER_PHRASES) >= 10


def test_owner_templates_in_a_vad_gated_stream(owner_detector: wake.WakeDetector) -> None:
    """As the edge pipeline runs it: reset at each speech start, pre-roll, speech frames."""
    voice = HELD_OUT_TAKES[0]
    parts = [noise(0.8, -50, seed=1)]
    spans = []
    for text in ("Good morning everyone", "Jimmy, turn on the lights.", "Yimi, play some music"):
        start = sum(len(p) for p in parts)
        parts += [say(text, voice), noise(1.5, -50, seed=len(parts))]
        spans.append((start, start + len(parts[-2])))
    audio = with_noise(concat(*parts), 20, seed=9)
    clock0 = 1_700_000_000_000
    vad = SileroVad()
    seg = Segmenter(vad)
    found = []
    in_speech = False
    for i in range(len(audio) // FRAME_SAMPLES):
        frame = audio[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES]
        started = False
        for ev in seg.feed(frame, clock0 + i * FRAME_MS):
            if isinstance(ev, SpeechStart):
                owner_detector.reset()
                hit = owner_detector.feed(ev.samples, ev.ms)
                found += [hit] if hit else []
                started = in_speech = True
            else:
                in_speech = False
        if in_speech and not started:
            hit = owner_detector.feed(frame, clock0 + i * FRAME_MS)
            found += [hit] if hit else []
    assert len(found) == 1
    yimi_start, yimi_end = spans[2]
    assert clock0 + yimi_start * 1000 // 16000 < found[0].end_ms
    assert found[0].end_ms < clock0 + yimi_end * 1000 // 16000


def test_chunking_does_not_change_the_result(owner_detector: wake.WakeDetector) -> None:
    audio = utterance("Yimi, what time is it?", HELD_OUT_TAKES[1], seed=4)
    by_frame = owner_detector.best_score(audio)
    owner_detector.reset()
    for i in range(0, len(audio), 160):
        owner_detector.feed(audio[i : i + 160])
    by_chunk = owner_detector.peak_score
    owner_detector.reset()
    assert abs(by_frame - by_chunk) < 0.01


def test_enrolment_refuses_takes_that_disagree(tmp_path: Path) -> None:
    home = Home.init(tmp_path / "home")
    glasses = flash(home, profile_name="glasses", name="g", out=tmp_path / "g")
    odd = [(v.label, say("Yimi", v)) for v in ENROL_TAKES[:2]]
    odd.append(("odd", say("Good morning", ENROL_TAKES[2])))
    with pytest.raises(ModelError) as err:
        wake.enrol(glasses, odd)
    assert err.value.key == "wake.inconsistent"
    with pytest.raises(ModelError) as err:
        wake.enrol(glasses, odd[:2])
    assert err.value.key == "wake.takes"
    silent = [*odd[:2], ("silent", noise(1.0, -60))]
    with pytest.raises(ModelError) as err:
        wake.enrol(glasses, silent)
    assert err.value.key == "wake.take"


# ---------------------------------------------------------------- synthesized default templates
DEFAULT_MISSES = {v.label for v in (OTHERS[0], OTHERS[1], OTHERS[2], OTHERS[3], OTHERS[5])}
"""held-out voices the default templates do not reach on every phrase at the default
threshold (measured "Yimi, …" scores: en-029+steph 0.90-0.92, en-gb-x-rp+Alicia 0.92-0.93,
en-gb-scotland+belinda 0.91-0.92, en-us+david 0.86-0.89, en-us+anika 0.925-0.934; the
owner 0.97-0.98 and en-gb-scotland+zac 0.93-0.94 fire). These voices need enrolment."""


@pytest.mark.parametrize(
    "voice",
    [
        pytest.param(
            v,
            marks=pytest.mark.xfail(strict=True, reason="voice not reached by the defaults")
            if v.label in DEFAULT_MISSES
            else (),
        )
        for v in (OWNER, *OTHERS)
    ],
    ids=lambda v: v.label,
)
def test_default_templates_fire_on_held_out_voices(
    default_detector: wake.WakeDetector, voice: Voice
) -> None:
    missed = [
        text
        for i, text in enumerate(WAKE_PHRASES)
        if not hits(default_detector, utterance(text, voice, seed=20 + i))
    ]
    assert missed == []


DEFAULT_CONFUSED = {"You mean me?": True, "Jimmy, what time is it?": False, "Jimmy": False}
"""phrases some held-out voice fires the default templates on (measured: "You mean me?" by
en-gb-scotland+zac 0.936; "Jimmy" by en-gb-x-rp+Alicia 0.930, right at the threshold, so
that xfail is not strict)"""


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(
            t,
            marks=pytest.mark.xfail(
                strict=DEFAULT_CONFUSED[t], reason="default templates confuse it"
            )
            if t in DEFAULT_CONFUSED
            else (),
        )
        for t in SIMILAR + OTHER_PHRASES
    ],
)
def test_default_templates_ignore_other_phrases(
    default_detector: wake.WakeDetector, text: str
) -> None:
    fired = {
        v.label: round(default_detector.best_score(utterance(text, v, seed=40 + i)), 3)
        for i, v in enumerate((OWNER, *OTHERS))
    }
    assert {k: s for k, s in fired.items() if s >= default_detector.threshold} == {}


# ---------------------------------------------------------------- Chinese: 依米
CHINESE_VOICES = (
    Voice("cmn", pitch=40, speed=160),
    Voice("cmn+f2", pitch=70, speed=160),
    Voice("cmn+m3", pitch=30, speed=160),
)
"""held-out Mandarin voices (not among the default templates' ``DEFAULT_VOICES_ZH``)"""
CHINESE_WAKE = ("依米", "依米，现在几点", "依米，把牛奶加到购物清单")
CHINESE_OTHER = ("现在几点", "你好，请打开灯", "明天见", "我不吃香菜")


@pytest.mark.parametrize("voice", CHINESE_VOICES, ids=lambda v: v.label)
def test_default_templates_fire_on_a_chinese_yimi(
    default_detector: wake.WakeDetector, voice: Voice
) -> None:
    scores = {
        text: round(default_detector.best_score(utterance(text, voice, seed=60 + i)), 3)
        for i, text in enumerate(CHINESE_WAKE)
    }
    assert all(s >= default_detector.threshold for s in scores.values()), scores


def test_default_templates_ignore_other_chinese(default_detector: wake.WakeDetector) -> None:
    audio = {
        f"{v.label}: {text}": utterance(text, v, seed=80 + i)
        for i, (v, text) in enumerate((v, text) for v in CHINESE_VOICES for text in CHINESE_OTHER)
    }
    audio |= {f"clip {n}": utterance_of(chinese_clip(n), seed=90) for n in CHINESE_CLIPS}
    scores = {k: round(default_detector.best_score(a), 3) for k, a in audio.items()}
    assert {k: s for k, s in scores.items() if s >= default_detector.threshold} == {}


def utterance_of(samples: np.ndarray, seed: int = 0, snr_db: float = 20.0) -> np.ndarray:
    audio = concat(noise(0.4, -50, seed=seed), samples, noise(0.6, -50, seed=seed + 1))
    return with_noise(audio, snr_db, seed=seed + 2)


# ---------------------------------------------------------------- nodes, catalog, CLI
@pytest.fixture
def glasses(tmp_path: Path) -> Bundle:
    home = Home.init(tmp_path / "home")
    return flash(home, profile_name="glasses", name="glasses", out=tmp_path / "glasses")


def test_detector_for_a_device_builds_the_defaults_once(glasses: Bundle) -> None:
    from models.catalog import Catalog

    det = wake.detector_for(glasses)
    assert det.templates.source == "default" and det.threshold == wake.DEFAULT_THRESHOLD
    entry = Catalog.open(glasses.path).resolve("wake")
    path = entry.extra("templates")
    assert path.parent == glasses.path / "models"
    mtime = path.stat().st_mtime_ns
    wake.write_threshold(glasses.path, 0.9)
    again = wake.detector_for(glasses)
    assert path.stat().st_mtime_ns == mtime
    assert again.threshold == 0.9
    assert wake.setup_for(glasses).threshold_from == "config"
    # a templates file changed behind the catalog's back is refused
    path.write_bytes(path.read_bytes() + b"x")
    with pytest.raises(ModelError):
        wake.detector_for(glasses)


def test_default_templates_without_mandarin_are_built_again(glasses: Bundle) -> None:
    """A device flashed before the Mandarin voices joined the defaults gets them on start."""
    from models.catalog import Catalog

    old = wake.build_templates(
        [(v.label, say("Yimi", v)) for v in wake.DEFAULT_VOICES[:4]], source="default"
    )
    path = glasses.path / "models" / wake.DEFAULT_TEMPLATES_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    old.save(path)
    Catalog.open(glasses.path).set_extra("wake", wake.CATALOG_NAME, "templates", path)
    det = wake.detector_for(glasses)
    assert any(label.startswith("cmn") for label in det.templates.labels)
    assert len(det.templates.frames) == wake.MAX_TEMPLATES
    wake.detector_for(glasses)  # recorded again: the new file's digest checks out


def test_cli_enroll_status_score(
    glasses: Bundle, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli.main import main
    from tests.speech import write_wav

    files = [
        str(write_wav(tmp_path / f"take{i}.wav", say("Yimi", v))) for i, v in enumerate(ENROL_TAKES)
    ]
    wake_wav = write_wav(
        tmp_path / "wake.wav", utterance("Yimi, play some music", HELD_OUT_TAKES[0])
    )
    jimmy_wav = write_wav(
        tmp_path / "jimmy.wav", utterance("Jimmy, play some music", HELD_OUT_TAKES[0])
    )
    b = str(glasses.path)
    assert main(["wake", "enroll", "--bundle", b, *files]) == 0
    out = capsys.readouterr().out
    assert "calibrated" in out and "3 of" not in out
    assert main(["wake", "status", "--bundle", b]) == 0
    assert "templates: owner, 12" in capsys.readouterr().out
    assert main(["wake", "score", "--bundle", b, str(wake_wav), str(jimmy_wav)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "fires" in lines[0] and "fires" not in lines[1]
    assert main(["wake", "enroll", "--bundle", b, "--threshold", "0.97"]) == 0
    assert main(["wake", "status", "--bundle", b]) == 0
    assert "threshold: 0.970 (config)" in capsys.readouterr().out
    # errors are one line, exit 1
    for argv in (
        ["wake", "enroll", "--bundle", b, "--threshold", "0.2"],
        ["wake", "enroll", "--bundle", b],
        ["wake", "enroll", "--bundle", b, files[0]],
        ["wake", "enroll", "--bundle", b, str(tmp_path / "nope.wav"), *files[:2]],
        ["wake", "status", "--bundle", str(tmp_path / "not-a-bundle")],
    ):
        assert main(argv) == 1, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("yimi: ") and "\n" not in err, err
