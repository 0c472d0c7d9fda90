"""The hub's voiceprint authority (hub/voice/voiceprints.py): storage, lines, scope rules."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import pytest

from hub.errors import HubError
from hub.voice.voiceprints import GUEST, OWNER, OWNER_UNCERTAIN, VoiceprintAuthority
from models import voiceprint as vp
from models.errors import ModelError
from tests.test_voiceprint import OTHER, segs, take
from tests.test_voiceprint import OWNER as OWNER_VOICE

MODEL = "ge2e@1"
T0 = 1_700_000_000_000


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "voiceprints.db"


def enrolled(db: Path, n: int = 6, **kw: object) -> VoiceprintAuthority:
    auth = VoiceprintAuthority(db, **kw)  # type: ignore[arg-type]
    auth.enrol("glasses", segs(OWNER_VOICE, n), speaker_model=MODEL, device="dev-g")
    return auth


def test_enrol_stores_centroid_and_survives_restart(db: Path) -> None:
    changed: list[str] = []
    auth = VoiceprintAuthority(db)
    auth.on_change = changed.append
    out = auth.enrol("glasses", segs(OWNER_VOICE, 6), speaker_model=MODEL, device="dev-g")
    assert (out.samples, out.line, len(out.loo_scores)) == (6, 0.65, 6)
    assert changed == ["glasses"]
    print_ = auth.voiceprint("glasses")
    assert print_ is not None and print_.samples == 6 and print_.speaker_model == MODEL
    centroid = vp.as_vector(print_.centroid)
    assert np.allclose(centroid, vp.centroid(segs(OWNER_VOICE, 6)), atol=1e-6)
    auth.close()
    again = VoiceprintAuthority(db)
    p2 = again.voiceprint("glasses")
    assert p2 is not None and p2.centroid == print_.centroid and p2.version == print_.version
    # more samples later: the version goes up, the centroid covers all of them
    out = again.enrol("glasses", segs(OWNER_VOICE, 2, start=6), speaker_model=MODEL, device="dev-g")
    assert out.samples == 8 and again.voiceprint("glasses").version > print_.version  # type: ignore[union-attr]
    again.close()


def test_enrol_refusals_change_nothing(db: Path) -> None:
    auth = enrolled(db)
    before = auth.voiceprint("glasses")
    outlier = vp.Segment(take(OTHER, 0.9, 1), 2500, 0.9, "other.wav")
    with pytest.raises(ModelError) as err:
        auth.enrol("glasses", [outlier], speaker_model=MODEL, device="dev-g")
    assert err.value.key == "voice.outlier"
    with pytest.raises(ModelError) as err:
        auth.enrol("glasses", segs(OWNER_VOICE, 15), speaker_model=MODEL, device="dev-g")
    assert err.value.key == "voice.too_many"
    with pytest.raises(HubError) as herr:
        auth.enrol("glasses", segs(OWNER_VOICE, 2), speaker_model="other@2", device="dev-g")
    assert herr.value.key == "voice.model_changed"
    with pytest.raises(ModelError):
        auth.enrol("phone_app", segs(OWNER_VOICE, 3), speaker_model=MODEL, device="dev-p")
    with pytest.raises(ModelError):
        auth.enrol(
            "phone_app", [*segs(OWNER_VOICE, 5), outlier], speaker_model=MODEL, device="dev-p"
        )
    assert auth.voiceprint("glasses") == before
    assert auth.voiceprint("phone_app") is None
    # replace starts over with another model
    out = auth.enrol(
        "glasses", segs(OWNER_VOICE, 5), speaker_model="other@2", device="dev-g", replace=True
    )
    assert out.samples == 5
    auth.close()


def test_line_never_decreases_across_restarts_and_config(db: Path) -> None:
    auth = enrolled(db, config={"lines": {"glasses": 0.72}})
    assert auth.line("glasses") == pytest.approx(0.72)
    v0 = auth.voiceprint("glasses").version  # type: ignore[union-attr]
    auth.close()
    # a lower configured line after a restart: ignored
    auth = VoiceprintAuthority(db, config={"lines": {"glasses": 0.5, "phone_app": 0.3}})
    assert auth.line("glasses") == pytest.approx(0.72)
    assert auth.line("phone_app") == pytest.approx(0.65)
    # raising works and bumps the version (devices learn the new line)
    changed: list[str] = []
    auth.on_change = changed.append
    assert auth.raise_line("glasses", 0.8) == pytest.approx(0.8)
    assert changed == ["glasses"]
    assert auth.voiceprint("glasses").version > v0  # type: ignore[union-attr]
    assert auth.raise_line("glasses", 0.7) == pytest.approx(0.8)
    assert changed == ["glasses"]
    # re-enrolling from scratch keeps the line
    auth.enrol("glasses", segs(OWNER_VOICE, 5), speaker_model=MODEL, device="d", replace=True)
    assert auth.voiceprint("glasses").line == pytest.approx(0.8)  # type: ignore[union-attr]
    auth.close()
    # garbage configuration: ignored, no crash
    auth = VoiceprintAuthority(db, config={"lines": {"glasses": "low", "Bad Name": 0.9}})
    assert auth.line("glasses") == pytest.approx(0.8)
    auth.close()
    auth = VoiceprintAuthority(db, config={"lines": [0.1]})
    assert auth.line("glasses") == pytest.approx(0.8)
    auth.close()


def test_the_database_itself_refuses_a_lower_line(db: Path) -> None:
    enrolled(db, config={"lines": {"glasses": 0.7}}).close()
    conn = apsw.Connection(str(db))
    for sql in (
        "UPDATE lines SET line = 0.66 WHERE channel = 'glasses'",
        "DELETE FROM lines WHERE channel = 'glasses'",
        "INSERT OR REPLACE INTO lines (channel, line, updated_ms) VALUES ('glasses', 0.65, 0)",
        "INSERT INTO lines (channel, line, updated_ms) VALUES ('watch', 0.5, 0)",
    ):
        with pytest.raises(apsw.ConstraintError):
            conn.execute(sql)
    conn.close()
    auth = VoiceprintAuthority(db)
    assert auth.line("glasses") == pytest.approx(0.7)
    auth.close()


def test_scope_by_voiceprint(db: Path) -> None:
    auth = enrolled(db)
    c = vp.as_vector(auth.voiceprint("glasses").centroid)  # type: ignore[union-attr]
    d = auth.scope_for("glasses", vp.to_bytes(take(c, 0.8, 1)), 2000, "", "dev-g", at_ms=T0)
    assert (d.scope, d.reason) == (OWNER, "verified") and d.score == pytest.approx(0.8, abs=1e-5)
    scope, _score, reason = auth.scope_for("glasses", take(c, 0.5, 2), 2000, "", "dev-g")
    assert (scope, reason) == (OWNER_UNCERTAIN, "uncertain")
    assert auth.scope_for("glasses", OTHER, 2000, "", "dev-g")[::2] == (GUEST, "unmatched")
    d = auth.scope_for("glasses", None, 0, "", "dev-g")
    assert (d.scope, d.reason) == (GUEST, "no_voice") and math.isnan(d.score)
    assert auth.scope_for("glasses", b"\x00" * 12, 900, "", "dev-g").reason == "no_voice"
    assert auth.scope_for("glasses", c, 2000, "", "dev-g", echo=True)[::2] == (GUEST, "echo")
    # another speaker model's centroids are not compared
    assert auth.scope_for("glasses", c, 2000, "", "dev-g", speaker_model="x@9").reason == (
        "unenrolled"
    )
    # a raised line moves the verified boundary
    auth.raise_line("glasses", 0.85)
    assert auth.scope_for("glasses", take(c, 0.8, 1), 2000, "", "dev-g").scope == OWNER_UNCERTAIN
    auth.close()


def test_unenrolled_hub_is_guest(db: Path) -> None:
    auth = VoiceprintAuthority(db)
    assert auth.scope_for("glasses", OWNER_VOICE, 3000, "c", "dev-g")[::2] == (GUEST, "unenrolled")
    auth.close()


def test_call_anchor_is_for_that_call_only(db: Path) -> None:
    auth = enrolled(db)
    c = vp.as_vector(auth.voiceprint("glasses").centroid)  # type: ignore[union-attr]
    first = take(c, 0.8, 3)
    # a short follow-up near the first utterance but not verified on its own
    short = take(first, 0.75, 4)
    assert vp.cosine(short, c) < 0.65
    assert auth.scope_for("glasses", short, 300, "call-1", "dev-g").scope != OWNER  # no anchor yet
    assert auth.scope_for("glasses", first, 2000, "call-1", "dev-g").reason == "verified"
    d = auth.scope_for("glasses", short, 300, "call-1", "dev-g")
    assert (d.scope, d.reason) == (OWNER, "call_anchor")
    assert auth.scope_for("glasses", short, 150, "call-1", "dev-g").scope != OWNER  # < 200 ms
    assert auth.scope_for("glasses", short, 300, "call-2", "dev-g").scope != OWNER  # other call
    assert auth.scope_for("glasses", short, 300, "call-1", "dev-x").scope != OWNER  # other device
    assert auth.scope_for("glasses", short, 300, "call-1", "dev-g", payment=True).scope != OWNER
    assert auth.scope_for("glasses", OTHER, 3000, "call-1", "dev-g").scope == GUEST
    auth.close()


FAKE_OK: dict[str, Any] = {"config": {"allow_fake_biometric": True}}


def test_the_fake_biometric_is_refused_unless_configured(db: Path) -> None:
    auth = enrolled(db)
    with pytest.raises(HubError) as err:
        auth.open_trust_window("dev-g", T0, method="fake", received_ms=T0)
    assert err.value.key == "voice.fake_biometric"
    assert auth.trust_windows("dev-g") == []
    auth.close()
    for config in ({"allow_fake_biometric": "yes"}, {"allow_fake_biometric": 1}):
        auth = VoiceprintAuthority(db, config=config)
        with pytest.raises(HubError):
            auth.open_trust_window("dev-g", T0, method="fake", received_ms=T0)
        auth.close()
    auth = VoiceprintAuthority(db, **FAKE_OK)  # type: ignore[arg-type]
    assert auth.open_trust_window("dev-g", T0, method="fake", received_ms=T0).method == "fake"
    auth.close()


def test_trust_window_calls_and_learning(db: Path) -> None:
    auth = enrolled(db, n=6, **FAKE_OK)
    changed: list[str] = []
    auth.on_change = changed.append
    c = vp.as_vector(auth.voiceprint("glasses").centroid)  # type: ignore[union-attr]
    weak = take(c, 0.62, 9)  # the owner on a bad day: only uncertain by voice
    auth.open_trust_window("dev-g", T0, method="fake", received_ms=T0)
    # a call that starts inside the window is the owner's until hang-up, even after 60 s
    d = auth.scope_for("glasses", weak, 800, "call-t", "dev-g", at_ms=T0 + 30_000)
    assert (d.scope, d.reason) == (OWNER, "trust_window")
    d = auth.scope_for("glasses", weak, 800, "call-t", "dev-g", at_ms=T0 + 200_000)
    assert (d.scope, d.reason) == (OWNER, "trust_window")
    # a call that starts after it is not
    d = auth.scope_for("glasses", weak, 800, "call-late", "dev-g", at_ms=T0 + 60_000)
    assert d.scope == OWNER_UNCERTAIN
    # nor a call on another device, nor a payment
    assert auth.scope_for("glasses", weak, 800, "x", "dev-p", at_ms=T0 + 1000).scope != OWNER
    d = auth.scope_for("glasses", weak, 800, "call-t", "dev-g", at_ms=T0 + 1000, payment=True)
    assert d.scope == OWNER_UNCERTAIN
    assert not changed  # 800 ms segments are too short to learn from
    # learning: ≥ 1 s at quality ≥ 0.5, up to 20 samples in all, never replacing
    for i in range(20):
        x = take(c, 0.8, 200 + i)
        auth.scope_for("glasses", x, 1500, "call-t", "dev-g", at_ms=T0 + 2000, quality=0.8)
    st = {s.channel: s for s in auth.status()}["glasses"]
    assert (st.samples, st.learned) == (20, 14)
    assert len(changed) == 14
    auth.scope_for("glasses", take(c, 0.8, 999), 1500, "call-t", "dev-g", quality=0.4)
    assert auth.voiceprint("glasses").samples == 20  # type: ignore[union-attr]
    auth.close()
    again = VoiceprintAuthority(db)
    assert again.voiceprint("glasses").samples == 20  # type: ignore[union-attr]
    # trust windows persist; a window cannot be opened in the future or last longer
    w = again.open_trust_window(
        "dev-g", T0 + 10**7, method="face", length_ms=10**6, received_ms=T0 + 1000
    )
    assert w.opened_ms == T0 + 1000 + 5000 and w.closes_ms - w.opened_ms == 60_000
    with pytest.raises(HubError):
        again.open_trust_window("dev-g", T0, method="password")
    assert len(again.trust_windows("dev-g")) == 2
    again.close()


def test_trust_window_learning_rejects_a_different_voice(db: Path) -> None:
    auth = enrolled(db, **FAKE_OK)
    auth.open_trust_window("dev-g", T0, method="fake", received_ms=T0)
    d = auth.scope_for("glasses", OTHER, 3000, "c", "dev-g", at_ms=T0 + 10, quality=0.9)
    assert d.scope == OWNER  # the biometric said so: the call is the owner's
    assert auth.voiceprint("glasses").samples == 6  # type: ignore[union-attr]  # but not learned
    auth.close()


# ---------------------------------------------------------------------- device side
def test_device_keeps_newer_voiceprints_and_never_lowers_the_line(tmp_path: Path) -> None:
    from edge_agent.voiceprint import (
        VOICEPRINT_FILE,
        VoiceprintCache,
        load_voiceprint,
        local_verdict,
        store_voiceprint,
    )
    from protos import voice_pb2

    def msg(version: int, line: float, base: np.ndarray = OWNER_VOICE, **kw: object) -> object:
        fields: dict[str, object] = {
            "channel": "glasses",
            "centroid": vp.to_bytes(base),
            "line": line,
            "samples": 5,
            "version": version,
            "speaker_model": MODEL,
        }
        fields.update(kw)
        return voice_pb2.Voiceprint(**fields)  # type: ignore[arg-type]

    cache = VoiceprintCache(tmp_path)
    assert load_voiceprint(tmp_path) is None and cache.get() is None
    got = store_voiceprint(tmp_path, msg(3, 0.7), "glasses")  # type: ignore[arg-type]
    assert got is not None and got.version == 3 and got.line == pytest.approx(0.7)
    assert cache.get() == load_voiceprint(tmp_path) == got
    # an older version is ignored; a newer one with a lower line keeps the higher line
    assert store_voiceprint(tmp_path, msg(2, 0.9, OTHER), "glasses") == got  # type: ignore[arg-type]
    newer = store_voiceprint(tmp_path, msg(4, 0.66, OTHER), "glasses")  # type: ignore[arg-type]
    assert newer is not None and newer.version == 4 and newer.line == pytest.approx(0.7)
    assert np.allclose(newer.centroid, OTHER)
    # another channel, a broken centroid, too few samples: refused, the stored one stays
    assert store_voiceprint(tmp_path, msg(9, 0.7, channel="phone_app"), "glasses") == newer  # type: ignore[arg-type]
    assert store_voiceprint(tmp_path, msg(9, 0.7, centroid=b"\x00" * 8), "glasses") == newer  # type: ignore[arg-type]
    assert store_voiceprint(tmp_path, msg(9, 0.7, samples=2), "glasses") == newer  # type: ignore[arg-type]
    # verdicts on the device use the stored line and model
    assert local_verdict(newer, OTHER)[0] is vp.Verdict.VERIFIED
    assert local_verdict(newer, OWNER_VOICE)[0] is vp.Verdict.UNMATCHED
    assert local_verdict(newer, OTHER, "x@2")[0] is vp.Verdict.UNENROLLED
    assert local_verdict(None, OTHER)[0] is vp.Verdict.UNENROLLED
    # a damaged file is "no voiceprint", never an exception
    (tmp_path / VOICEPRINT_FILE).write_text("{not json")
    assert load_voiceprint(tmp_path) is None


def test_enrol_requests_are_answered_not_raised(tmp_path: Path) -> None:
    """``Hub.Enrol``'s handling of a VoiceEnrol: every refusal is an answer with a key."""
    from typing import cast

    from hub.voice.voiceprints import VoiceprintMesh
    from protos import voice_pb2

    authority = VoiceprintAuthority(tmp_path / "voiceprints.db")
    mesh = VoiceprintMesh(authority, port=cast(Any, None), devices=list)

    def request(segments: list[vp.Segment], channel: str = "glasses") -> voice_pb2.VoiceEnrol:
        return voice_pb2.VoiceEnrol(
            channel=channel,
            speaker_model=MODEL,
            segments=[
                voice_pb2.EnrolSegment(
                    embedding=vp.to_bytes(s.vector),
                    voiced_ms=s.voiced_ms,
                    quality=s.quality,
                    label=s.label,
                )
                for s in segments
            ],
        )

    good = segs(OWNER_VOICE, 5)
    r = mesh._enrol("dev-p", "phone_app", request(good))
    assert (r.ok, r.error_key) == (False, "voice.channel")
    r = mesh._enrol("dev-w", None, request(good))
    assert (r.ok, r.error_key) == (False, "voice.channel")
    broken = request(good)
    broken.segments[2].embedding = b"\x01" * 1024
    r = mesh._enrol("dev-g", "glasses", broken)
    assert (r.ok, r.error_key) == (False, "voice.embedding")
    r = mesh._enrol("dev-g", "glasses", request(segs(OWNER_VOICE, 21)))
    assert (r.ok, r.error_key) == (False, "voice.too_many")
    outlier = vp.Segment(take(OTHER, 0.9, 1), 2500, 0.9, "other.wav")
    r = mesh._enrol("dev-g", "glasses", request([*good[:4], outlier]))
    assert (r.ok, r.error_key) == (False, "voice.outlier")
    assert len(r.loo_scores) == 5 and r.loo_scores[-1] < 0.6 and "other.wav" in r.error_text
    r = mesh._enrol("dev-g", "glasses", request(good))
    assert r.ok and r.samples == 5 and r.line == pytest.approx(0.65) and len(r.loo_scores) == 5
    mesh.close()
