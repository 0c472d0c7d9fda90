"""Private files stay private whatever the umask (issue 15, failure 9): a demo-like session
run with umask 0o022 — home and bundles made, the hub up, typed turns, a memory written and
recalled through the memory package, an e-mail card on the phone — then every file in HOME
and in the bundles is 0600 and every folder 0700 (SQLite's ``-wal``/``-shm`` included)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hub.capabilities.settings import only
from storage.private import loose_modes, private_dir, private_file, write_private
from tests.mesh_harness import Mesh
from tests.waiting import poll_sync

pytestmark = pytest.mark.slow


@pytest.fixture
def loose_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_helpers_are_private_whatever_the_umask(tmp_path: Path, loose_umask: None) -> None:
    private_dir(tmp_path / "a" / "b")
    private_file(tmp_path / "a" / "b" / "f")
    write_private(tmp_path / "a" / "g.json", "{}")
    (tmp_path / "a" / "loose").write_text("x")
    assert loose_modes(tmp_path / "a") == [(tmp_path / "a" / "loose", 0o644)]


def test_a_demo_like_session_leaves_nothing_readable(tmp_path: Path, loose_umask: None) -> None:
    mesh = Mesh(tmp_path)
    try:
        mesh.init()
        glasses = mesh.add_device("glasses", "glasses")
        phone = mesh.add_device("phone", "phone")
        (mesh.home / "packages.yaml").write_text(
            yaml.safe_dump(only({"memory": {}, "messaging": {}}))
        )
        (mesh.home / "contacts.yaml").write_text(
            '[{"name": "Ann Lee", "email": "ann@example.org", "aliases": ["ann"]}]\n'
        )
        hub = mesh.start_hub()
        edge = mesh.start_edge(phone, hub=mesh.hub_target)
        replies: list[str] = []
        for text in (
            "Yimi, remember I don't eat cilantro.",
            "What do you remember about cilantro?",
            "Send an e-mail to ann saying dinner at seven.",
        ):
            r = mesh.say(glasses, text, "--hub", mesh.hub_target)
            assert r.returncode == 0, r.stderr
            replies.append(r.stdout)
        assert "cilantro" in replies[1], replies
        poll_sync(lambda: "card " in edge.text(), 30, f"the e-mail's card on the phone: {replies}")
        assert mesh.stop(edge) == 0
        assert mesh.stop(hub) == 0
    finally:
        mesh.close()
    assert (mesh.home / "gateway" / "audit" / "audit.jsonl").exists()
    assert list((mesh.home).rglob("*.db")), "the session wrote databases"
    loose = [
        (str(p.relative_to(tmp_path)), oct(m))
        for root in (mesh.home, glasses, phone)
        for p, m in loose_modes(root)
    ]
    assert loose == [], "\n".join(f"{p} {m}" for p, m in loose)
