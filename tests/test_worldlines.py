"""Worldlines on a plain filesystem and, where the test can make one, on loop-mounted Btrfs:
fork → change → diff → commit → rollback restores byte-identical files; discard leaves the
workspace untouched; two forks from one base (``fork_many``, ``--count 2``, the package's
``fork(count=2)``); a stale-base commit refused; history bounded."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storage.worldlines import MAX_FORKS, WorldlineError, Worldlines
from tests.mesh_harness import env


def _btrfs(tmp: Path) -> Iterator[Path]:
    if shutil.which("mkfs.btrfs") is None:
        pytest.skip("mkfs.btrfs is not installed (Debian btrfs-progs)")
    image, mnt = tmp / "btrfs.img", tmp / "mnt"
    mnt.mkdir()
    with image.open("wb") as fh:
        fh.truncate(160 * 1024 * 1024)
    made = subprocess.run(["mkfs.btrfs", "-q", str(image)], capture_output=True, timeout=60)
    if made.returncode != 0:
        pytest.skip(f"mkfs.btrfs failed: {made.stderr.decode().strip()}")
    mounted = subprocess.run(
        ["mount", "-o", "loop", str(image), str(mnt)], capture_output=True, timeout=60
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot loop-mount a Btrfs image here: {mounted.stderr.decode().strip()}")
    try:
        subprocess.run(
            ["btrfs", "subvolume", "create", str(mnt / "ws")], check=True, capture_output=True
        )
        yield mnt / "ws"
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=60)


@pytest.fixture(params=["plain", "btrfs"])
def workspace(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    if request.param == "plain":
        yield tmp_path / "ws"
    else:
        yield from _btrfs(tmp_path)


def tree_hash(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def seed(ws: Path) -> None:
    ws.mkdir(exist_ok=True)
    (ws / "notes.txt").write_text("buy milk\nbuy eggs\n")
    (ws / "sub").mkdir()
    (ws / "sub" / "old.txt").write_text("to remove\n")
    (ws / "blob.bin").write_bytes(os.urandom(4096))


def test_fork_diff_commit_rollback_is_byte_identical(workspace: Path) -> None:
    seed(workspace)
    w = Worldlines(workspace)
    before = tree_hash(workspace)
    f = w.fork("tidy notes")
    if workspace.name == "ws" and workspace.parent.name == "mnt":
        assert f.method == "btrfs"
    fork = w.path(f.id)
    (fork / "notes.txt").write_text("buy milk\nbuy bread\n")
    (fork / "sub" / "old.txt").unlink()
    (fork / "new.txt").write_text("hello\n")
    d = w.diff(f.id)
    assert (d.added, d.changed, d.removed) == (("new.txt",), ("notes.txt",), ("sub/old.txt",))
    assert "-buy eggs\n+buy bread\n" in d.text and "+hello" in d.text
    assert tree_hash(workspace) == before, "a fork never touches the workspace"
    c = w.commit(f.id)
    assert c.generation == 1 and (workspace / "new.txt").read_text() == "hello\n"
    assert not (workspace / "sub" / "old.txt").exists()
    w.rollback(c.id)
    assert tree_hash(workspace) == before, "rollback restores the bytes"
    assert w.generation == 2


def test_discard_two_forks_and_a_stale_base(workspace: Path) -> None:
    seed(workspace)
    w = Worldlines(workspace)
    before = tree_hash(workspace)
    a, b, c = w.fork("a"), w.fork("b"), w.fork("c")
    assert a.base == b.base == c.base == 0
    (w.path(a.id) / "notes.txt").write_text("version A\n")
    (w.path(b.id) / "notes.txt").write_text("version B\n")
    (w.path(c.id) / "junk").write_text("x")
    w.discard(c.id)
    assert tree_hash(workspace) == before
    assert "version A" in w.diff(a.id).text and "version B" in w.diff(b.id).text
    w.commit(b.id)
    assert (workspace / "notes.txt").read_text() == "version B\n"
    with pytest.raises(WorldlineError) as err:
        w.commit(a.id)
    assert err.value.key == "worldline.stale_base"
    assert (workspace / "notes.txt").read_text() == "version B\n", "the refusal changed nothing"
    w.keep(a.id)
    assert w.gc() == 1  # the discarded fork
    assert w.path(a.id).exists(), "a kept fork is never reclaimed"


def test_two_versions_from_one_base_and_empty_folders(tmp_path: Path) -> None:
    """``fork_many(2)``: two forks of one base for one request; committing one makes the
    other stale. An empty folder made on a fork shows in its diff as ``name/``."""
    ws = tmp_path / "ws"
    seed(ws)
    w = Worldlines(ws)
    a, b = w.fork_many(2, "tidy")
    assert a.base == b.base == 0 and a.id != b.id
    assert (a.label, b.label) == ("tidy 1/2", "tidy 2/2")
    (w.path(a.id) / "drafts").mkdir()
    (w.path(b.id) / "notes.txt").write_text("version B\n")
    assert w.diff(a.id).added == ("drafts/",) and w.diff(b.id).changed == ("notes.txt",)
    w.commit(a.id)
    assert (ws / "drafts").is_dir()
    with pytest.raises(WorldlineError) as err:
        w.commit(b.id)
    assert err.value.code == "STALE_BASE" and "forked from generation 0" in err.value.text()
    assert "世界线" in err.value.text("zh")
    with pytest.raises(WorldlineError) as many:
        w.fork_many(MAX_FORKS + 1)
    assert many.value.key == "worldline.bad_count"


def test_history_is_bounded(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    seed(ws)
    w = Worldlines(ws, keep=2)
    ids = []
    for i in range(4):
        f = w.fork()
        (w.path(f.id) / "n").write_text(str(i))
        ids.append(w.commit(f.id).id)
    assert [c.id for c in w.history()] == ids[-2:]
    with pytest.raises(WorldlineError) as err:
        w.rollback(ids[0])
    assert err.value.key == "worldline.no_history"
    assert w.gc() == 2
    assert len(list((w.root / "history").iterdir())) == 2


def test_the_cli_lists_shows_commits_and_rolls_back(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    seed(ws)

    def yimi(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cli", "worldline", *args, "--workspace", str(ws)],
            capture_output=True,
            text=True,
            env=env(),
            timeout=60,
        )

    forked = yimi("fork", "--label", "try")
    assert forked.returncode == 0, forked.stderr
    fid, _, _, _, folder = forked.stdout.split()[:5]
    (Path(folder) / "notes.txt").write_text("changed\n")
    shown = yimi("show", fid)
    assert "changed: notes.txt" in shown.stdout and "+changed" in shown.stdout
    assert f"{fid}  open  base 0" in yimi("list").stdout
    assert yimi("commit", fid).returncode == 0
    assert yimi("commit", fid).returncode == 1
    assert "rolled back" in yimi("rollback", fid).stdout
    assert (ws / "notes.txt").read_text() == "buy milk\nbuy eggs\n"
    bad = yimi("show", "nope")
    assert bad.returncode == 1 and "no worldline 'nope'" in bad.stderr
    two = yimi("fork", "--count", "2", "--label", "two")
    assert two.returncode == 0, two.stderr
    lines = two.stdout.splitlines()
    assert len(lines) == 2 and all(" base 2 " in x for x in lines), lines
    assert "two 1/2" in yimi("list").stdout


# ---------------------------------------------------------------- through the gateway
@pytest.mark.slow
async def test_a_commit_is_an_owner_data_effect_through_the_gateway(tmp_path: Path) -> None:
    """The worldlines package (sandboxed: only the workspace and its forks writable): a fork
    is a workspace effect; a commit the owner did not ask for waits for their card; one they
    asked for makes the fork current; a stale base is refused; a rollback restores it."""
    from hub.gateway import CallContext, ToolCall, open_gateway
    from tests.gateway_kit import REPO

    ws = tmp_path / "owner" / "ws"
    ws.parent.mkdir()
    seed(ws)
    before = tree_hash(ws)
    owner = CallContext(owner="owner", scope="owner", session_id="s", run_id="r")
    state = tmp_path / "state"
    state.mkdir()
    env_for = {"YIMI_STATE_DIR": str(state), "YIMI_WORKSPACE": str(ws)}
    n = 0
    async with open_gateway(
        tmp_path / "gw",
        packages=[REPO / "packages" / "worldlines"],
        env_for=lambda *_: dict(env_for),
    ) as gw:

        async def call(tool: str, **args: object) -> Any:
            nonlocal n
            n += 1
            return await gw.call(ToolCall("worldlines", tool, dict(args), f"c{n}", f"t{n}"), owner)

        two = await call("fork", label="two versions", count=2)  # one request, one base
        assert two.status == "succeeded" and len(two.effects) == 2, two
        a_id, b_id = two.effects[0].target, two.effects[1].target
        assert two.effects[0].fields["base"] == two.effects[1].fields["base"] == 0
        w = Worldlines(ws)
        (w.path(a_id) / "notes.txt").write_text("version A\n")
        (w.path(b_id) / "notes.txt").write_text("version B\n")
        shown = await call("show", id=a_id)
        assert shown.status == "succeeded" and "version A" in str(shown.effects[0].fields)
        unasked = await call("commit", id=a_id)
        assert unasked.status == "waiting", unasked
        assert tree_hash(ws) == before
        done = await call("commit", id=a_id, owner_requested=True)
        assert done.status == "succeeded", done
        assert (ws / "notes.txt").read_text() == "version A\n"
        stale = await call("commit", id=b_id, owner_requested=True)
        assert stale.status == "failed" and stale.error_code == "STALE_BASE", stale
        back = await call("rollback", id=a_id, owner_requested=True)
        assert back.status == "succeeded", back
        assert tree_hash(ws) == before
