"""Voice enrolment over the mesh, with real processes, real espeak-ng speech and the real
GE2E speaker model: ``yimi voice enroll`` on a glasses bundle → the hub keeps the centroid →
glasses (running, and one coming online later) receive their VOICEPRINT; a phone does not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edge_agent.voiceprint import load_voiceprint
from models import voiceprint as vp
from tests.mesh_harness import Mesh
from tests.speech import OTHERS, OWNER_TAKES, say, write_wav
from tests.waiting import poll_sync

pytestmark = pytest.mark.slow

SENTENCES = (
    "Please remind me to water the plants on the balcony tomorrow morning.",
    "My favourite breakfast is toast with butter and a cup of strong tea.",
    "We walked along the beach until the sun went down behind the hills.",
    "Could you read me the latest news about the weather this weekend?",
    "I usually take the train to work, but today I rode my bicycle.",
)


@pytest.fixture
def mesh(tmp_path: Path) -> Iterator[Mesh]:
    m = Mesh(tmp_path)
    yield m
    m.close()


def takes(folder: Path, voices: list[object]) -> list[str]:
    folder.mkdir(exist_ok=True)
    out = []
    for i, (text, voice) in enumerate(zip(SENTENCES, voices, strict=True)):
        out.append(str(write_wav(folder / f"take-{i + 1}.wav", say(text, voice))))  # type: ignore[arg-type]
    return out


def hub_channel(mesh: Mesh) -> tuple[bytes, int, int] | None:
    import apsw

    db = mesh.home / "voiceprints.db"
    if not db.exists():
        return None
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(5000)
    try:
        row = conn.execute(
            "SELECT centroid, samples, version FROM channels WHERE channel = 'glasses'"
        ).fetchone()
        return (bytes(row[0]), int(row[1]), int(row[2])) if row else None
    finally:
        conn.close()


def test_enrol_on_glasses_reaches_glasses(mesh: Mesh, tmp_path: Path) -> None:
    mesh.init()
    g1, g2 = mesh.add_device("g1"), mesh.add_device("g2")
    phone = mesh.add_device("p1", profile="phone")
    owner_files = takes(tmp_path / "owner", list(OWNER_TAKES))
    mesh.configure(voiceprint={"allow_fake_biometric": True})  # no sensor on this machine
    mesh.start_hub()
    edge_g1 = mesh.start_edge(g1, hub=mesh.hub_target)
    mesh.start_edge(phone, hub=mesh.hub_target)

    out = mesh.yimi(
        "voice", "enroll", "--bundle", str(g1), "--hub", mesh.hub_target, *owner_files, timeout=600
    )
    assert out.returncode == 0, out.stderr
    assert "5 samples enrolled" in out.stdout
    stored = hub_channel(mesh)
    assert stored is not None and stored[1] == 5
    centroid = vp.as_vector(stored[0])

    # the running glasses get it now …
    poll_sync(lambda: load_voiceprint(g1 / "state"), 30, "g1 to store its voiceprint")
    held = load_voiceprint(g1 / "state")
    assert held is not None and held.channel == "glasses" and held.samples == 5
    assert held.line == pytest.approx(0.65) and held.version == stored[2]
    assert np.allclose(held.centroid, centroid)
    assert "voiceprint glasses" in edge_g1.text()
    # … glasses that come online later get it on ONLINE; the phone (channel phone_app) never
    mesh.start_edge(g2, hub=mesh.hub_target)
    poll_sync(lambda: load_voiceprint(g2 / "state"), 30, "g2 to store its voiceprint")
    assert load_voiceprint(phone / "state") is None

    status = mesh.yimi("voice", "status", "--bundle", str(g1), check=True).stdout
    assert "5 samples" in status and "line 0.65" in status

    # on the device: the owner saying something new is verified, other people are not
    from edge_agent.voiceprint import local_verdict
    from models.catalog import Catalog
    from models.speaker import SpeakerEncoder

    entry = Catalog.open(g1).resolve("speaker")
    encoder = SpeakerEncoder(entry.file)
    model = f"{entry.name}@{entry.version}"
    new = "Turn off the lights in the kitchen and lock the front door please."
    verdict, score = local_verdict(held, encoder.embed(say(new)).vector, model)
    assert verdict is vp.Verdict.VERIFIED, score
    for other in OTHERS:
        verdict, score = local_verdict(held, encoder.embed(say(new, other)).vector, model)
        assert verdict is not vp.Verdict.VERIFIED, (other, score)

    # a set with another person's take is rejected as a whole; nothing changes
    bad_files = takes(tmp_path / "mixed", [*OWNER_TAKES[:4], OTHERS[0]])
    out = mesh.yimi(
        "voice",
        "enroll",
        "--bundle",
        str(g1),
        "--hub",
        mesh.hub_target,
        "--replace",
        *bad_files,
        timeout=300,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "rejected" in out.stderr and "take-5.wav" in out.stderr
    assert hub_channel(mesh) == stored

    # a device of another channel cannot enrol glasses audio into its own channel by accident:
    # its own channel is what it enrols (phone_app), the glasses stay as they are
    home_status = mesh.yimi("voice", "status", "--home", str(mesh.home), check=True).stdout
    assert "glasses" in home_status

    # the fake biometric opens a trust window on the hub
    out = mesh.yimi("voice", "trust", "--bundle", str(g1), "--hub", mesh.hub_target)
    assert out.returncode == 0, out.stderr
    assert "FAKE biometric" in out.stderr
    poll_sync(
        lambda: "trust windows" in mesh.yimi("voice", "status", "--home", str(mesh.home)).stdout,
        15,
        "the hub to record the trust window",
    )
