"""Voiceprint policy (models/voiceprint.py) on synthetic unit vectors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models import voiceprint as vp
from models.errors import ModelError


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


def voice(seed: int) -> np.ndarray:
    """A random direction: one 'speaker'."""
    return unit(np.random.default_rng(seed).normal(size=vp.EMBED_DIM))


def take(base: np.ndarray, cos: float, seed: int) -> np.ndarray:
    """A unit vector at exactly cosine ``cos`` to ``base`` (a take of that speaker)."""
    r = np.random.default_rng(1_000_000 + seed).normal(size=vp.EMBED_DIM)
    r -= r.dot(base) * base
    r = r / np.linalg.norm(r)
    return unit(cos * base + math.sqrt(1 - cos * cos) * r)


def segs(
    base: np.ndarray, n: int, cos: float = 0.85, ms: int = 2000, q: float = 0.9, start: int = 0
) -> list[vp.Segment]:
    """``n`` takes of ``base``; ``start`` numbers them (distinct numbers, distinct takes)."""
    return [
        vp.Segment(take(base, cos, 100 + i), ms, q, f"take-{i + 1}")
        for i in range(start, start + n)
    ]


OWNER = voice(1)
OTHER = voice(2)


def test_constants_match_architecture() -> None:
    assert (vp.VERIFIED_MIN, vp.UNCERTAIN_MIN, vp.LOO_MIN) == (0.65, 0.45, 0.6)
    assert (vp.SEGMENT_MIN_MS, vp.MIN_SAMPLES, vp.MAX_SAMPLES) == (1500, 5, 20)
    assert vp.TRUST_WINDOW_MS == 60_000
    assert (vp.LEARN_MIN_MS, vp.LEARN_MIN_QUALITY) == (1000, 0.5)
    assert (vp.ANCHOR_MIN_MS, vp.ANCHOR_MIN_COS) == (200, 0.65)


def test_centroid_is_weighted_by_duration_and_quality() -> None:
    a, b = voice(10), voice(11)
    # weights d*q: 3000*1.0 vs 1000*0.5 -> 6:1
    c = vp.centroid([vp.Segment(a, 3000, 1.0), vp.Segment(b, 1000, 0.5)])
    expected = unit(6 * a.astype(np.float64) + b)
    assert np.allclose(c, expected, atol=1e-6)
    assert abs(float(np.linalg.norm(c)) - 1) < 1e-6
    # equal weights -> the normalised mean
    c2 = vp.centroid([vp.Segment(a, 2000, 0.8), vp.Segment(b, 1600, 1.0)])
    assert np.allclose(c2, unit(a.astype(np.float64) + b), atol=1e-6)
    # a zero-quality segment does not count at all
    c3 = vp.centroid([vp.Segment(a, 2000, 0.9), vp.Segment(b, 2000, 0.0)])
    assert np.allclose(c3, a, atol=1e-6)
    with pytest.raises(ModelError) as err:
        vp.centroid([vp.Segment(a, 0, 1.0)])
    assert err.value.key == "voice.no_weight"


def test_leave_one_out_rejects_a_set_with_an_outlier() -> None:
    good = segs(OWNER, 6)
    scores = vp.check_enrolment([], good)
    assert len(scores) == 6 and min(scores) >= 0.6
    outlier = vp.Segment(take(OTHER, 0.9, 7), 2500, 0.9, "other.wav")
    with pytest.raises(ModelError) as err:
        vp.check_enrolment([], [*good[:5], outlier])
    assert err.value.key == "voice.outlier"
    assert "other.wav" in str(err.value)
    loo = err.value.fields["scores"]
    assert len(loo) == 6 and loo[-1] < 0.6 and min(loo[:5]) >= 0.6
    # the same outlier added to an already enrolled channel is rejected too
    with pytest.raises(ModelError):
        vp.check_enrolment(good, [outlier])


def test_leave_one_out_scores_are_against_the_rest() -> None:
    s = segs(OWNER, 5)
    scores = vp.leave_one_out(s)
    for i, seg in enumerate(s):
        rest = vp.centroid(s[:i] + s[i + 1 :])
        assert scores[i] == pytest.approx(vp.cosine(seg.vector, rest), abs=1e-6)
    assert vp.leave_one_out(s[:1]) == []


def test_enrolment_counts_and_lengths() -> None:
    with pytest.raises(ModelError) as err:
        vp.check_enrolment([], segs(OWNER, 4))
    assert err.value.key == "voice.too_few"
    assert vp.check_enrolment(segs(OWNER, 4), segs(OWNER, 1, start=4))  # 4 stored + 1 = 5
    with pytest.raises(ModelError) as err:
        vp.check_enrolment([], segs(OWNER, 21))
    assert err.value.key == "voice.too_many"
    with pytest.raises(ModelError) as err:
        vp.check_enrolment(segs(OWNER, 18), segs(OWNER, 3, start=18))
    assert err.value.key == "voice.too_many"
    assert len(vp.check_enrolment([], segs(OWNER, 20))) == 20
    short = [*segs(OWNER, 4), vp.Segment(take(OWNER, 0.9, 3), 1499, 0.9, "short.wav")]
    with pytest.raises(ModelError) as err:
        vp.check_enrolment([], short)
    assert err.value.key == "voice.too_short" and "short.wav" in str(err.value)
    bad_q = [*segs(OWNER, 4), vp.Segment(take(OWNER, 0.9, 3), 2000, float("nan"), "q")]
    with pytest.raises(ModelError):
        vp.check_enrolment([], bad_q)


def test_verdict_lines() -> None:
    assert vp.verdict(0.65) is vp.Verdict.VERIFIED
    assert vp.verdict(0.6499) is vp.Verdict.UNCERTAIN
    assert vp.verdict(0.45) is vp.Verdict.UNCERTAIN
    assert vp.verdict(0.4499) is vp.Verdict.UNMATCHED
    assert vp.verdict(float("nan")) is vp.Verdict.UNMATCHED
    # a raised line moves only the verified boundary
    assert vp.verdict(0.7, 0.75) is vp.Verdict.UNCERTAIN
    assert vp.verdict(0.75, 0.75) is vp.Verdict.VERIFIED
    # a line below 0.65 is never used
    assert vp.verdict(0.6, 0.5) is vp.Verdict.UNCERTAIN
    assert vp.verdict(0.6, None) is vp.Verdict.UNCERTAIN


def test_line_never_below_minimum_and_only_rises() -> None:
    assert vp.raise_line(None, None) == 0.65
    assert vp.raise_line(None, 0.3) == 0.65
    assert vp.raise_line(0.5, None) == 0.65
    assert vp.raise_line(0.7, 0.68) == 0.7
    assert vp.raise_line(0.7, 0.72) == 0.72
    assert vp.raise_line(0.7, float("nan")) == 0.7
    assert vp.raise_line(0.7, 1.5) == 1.0
    line = None
    for proposed in (0.66, 0.5, 0.8, 0.7, 0.0, 0.79):
        new = vp.raise_line(line, proposed)
        assert new >= vp.effective_line(line) >= 0.65
        line = new
    assert line == 0.8


def test_score_is_max_over_channels_and_match_uses_each_line() -> None:
    c_glasses, c_phone = take(OWNER, 0.9, 1), take(OWNER, 0.9, 2)
    x = take(c_phone, 0.7, 3)
    s, ch = vp.score(x, {"glasses": c_glasses, "phone_app": c_phone})
    assert ch == "phone_app"
    assert s == pytest.approx(max(vp.cosine(x, c_glasses), vp.cosine(x, c_phone)))
    assert math.isnan(vp.score(x, {})[0])
    assert vp.match(x, {}).verdict is vp.Verdict.UNENROLLED
    m = vp.match(x, {"glasses": c_glasses, "phone_app": c_phone})
    assert m.verdict is vp.Verdict.VERIFIED and m.channel == "phone_app"
    # a high line on the best channel: uncertain (unless another channel verifies)
    m = vp.match(x, {"phone_app": c_phone}, {"phone_app": 0.8})
    assert m.verdict is vp.Verdict.UNCERTAIN
    assert vp.match(OTHER, {"phone_app": c_phone}).verdict is vp.Verdict.UNMATCHED


def test_as_vector_refuses_bad_embeddings() -> None:
    good = vp.to_bytes(OWNER)
    assert np.allclose(vp.as_vector(good), OWNER)
    for bad, why in (
        (good[:-4], "bytes"),
        (vp.to_bytes(OWNER * 2), "not unit"),
        (np.full(vp.EMBED_DIM, np.nan, np.float32).tobytes(), "not finite"),
        (np.zeros(vp.EMBED_DIM, np.float32).tobytes(), "not unit"),
        (np.ones(3), "values"),
    ):
        with pytest.raises(ModelError) as err:
            vp.as_vector(bad)
        assert err.value.key == "voice.embedding" and why in str(err.value)


def test_trust_window_is_sixty_seconds() -> None:
    w = vp.TrustWindow("phone", opened_ms=1_000_000)
    assert w.covers(1_000_000) and w.covers(1_059_999)
    assert not w.covers(1_060_000) and not w.covers(999_999)
    # a device cannot ask for longer
    assert vp.TrustWindow("phone", 0, "fake", 600_000).closes_ms == 60_000


def test_call_anchor_rules() -> None:
    a = vp.CallAnchor("call-1")
    assert not a.anchored and not a.matches(OWNER, 5000)
    a.add(OWNER)
    assert a.anchored
    close = take(OWNER, 0.7, 5)
    far = take(OWNER, 0.6, 6)
    assert a.matches(close, 200)
    assert not a.matches(close, 199)  # too short even when close
    assert not a.matches(far, 3000)  # too far even when long
    for i in range(20):
        a.add(take(OWNER, 0.9, 50 + i))
    assert len(a.anchors) == vp.MAX_ANCHORS


def test_learning_rules_and_cap() -> None:
    assert vp.can_learn(1000, 0.5, 19)
    assert not vp.can_learn(999, 0.9, 5)
    assert not vp.can_learn(3000, 0.49, 5)
    assert not vp.can_learn(3000, float("nan"), 5)
    assert not vp.can_learn(3000, 0.9, 20)  # learning stops at 20 samples


def test_the_same_recording_twice_is_refused() -> None:
    s = segs(OWNER, 5)
    with pytest.raises(ModelError) as err:
        vp.check_enrolment(s, [vp.Segment(s[2].vector, 2000, 0.9, "again.wav")])
    assert err.value.key == "voice.duplicate" and "take-3" in str(err.value)
    with pytest.raises(ModelError):
        vp.check_enrolment([], [*s, vp.Segment(s[0].vector.copy(), 1800, 0.8, "copy")])


# ---------------------------------------------------------------- score calibration
def test_scores_are_calibrated_by_the_speaker_models_floor() -> None:
    assert vp.floor_for("ge2e-resemblyzer@0.1.4") == vp.floor_for("ge2e-resemblyzer") == 0.45
    assert vp.floor_for("sherpa-campplus@1") == 0.0  # unknown models are used as they are
    assert vp.calibrate(0.7, 0.0) == 0.7
    assert vp.calibrate(1.0, 0.45) == pytest.approx(1.0)
    assert vp.calibrate(0.45, 0.45) == pytest.approx(0.0)
    assert vp.calibrate(0.8075, 0.45) == pytest.approx(vp.VERIFIED_MIN)
    assert vp.calibrate(0.6975, 0.45) == pytest.approx(vp.UNCERTAIN_MIN)
    for bad in (-0.1, 1.0, float("nan")):
        with pytest.raises(ValueError):
            vp.calibrate(0.5, bad)
    owner = voice(1)
    heard = take(owner, 0.75, 7)  # raw: verified; calibrated (floor 0.45): uncertain
    assert vp.match(heard, {"glasses": owner}).verdict is vp.Verdict.VERIFIED
    m = vp.match(heard, {"glasses": owner}, floor=0.45)
    assert m.verdict is vp.Verdict.UNCERTAIN
    assert m.score == pytest.approx(vp.similarity(heard, owner, 0.45))
    other = take(owner, 0.6, 8)  # raw: uncertain; calibrated: unmatched
    assert vp.match(other, {"glasses": owner}, floor=0.45).verdict is vp.Verdict.UNMATCHED


def test_leave_one_out_and_anchors_use_the_calibrated_scale() -> None:
    owner = voice(2)
    loose = segs(owner, 5, cos=0.8)  # each take to the rest: 0.72-0.76 raw, 0.49-0.58 calibrated
    assert len(vp.check_enrolment([], loose)) == 5
    with pytest.raises(ModelError) as caught:
        vp.check_enrolment([], loose, 0.45)
    assert caught.value.key == "voice.outlier"
    raw = vp.CallAnchor("c1")
    calibrated = vp.CallAnchor("c2", floor=0.45)
    for anchor in (raw, calibrated):
        anchor.add(owner)
    short = take(owner, 0.7, 9)
    assert raw.matches(short, 300) and not calibrated.matches(short, 300)
