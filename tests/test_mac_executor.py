"""The mac package end to end: the hub (in this process) asks the Mac's edge daemon over
the real mesh to run allow-listed commands and read files, under the gateway (observe /
owner_data), the Mac's allow-list and folders, its pause switch and its command log."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from hub.gateway import CallContext, ToolCall
from tests.mesh_harness import Mesh

pytestmark = pytest.mark.slow

OWNER = CallContext(owner="owner", scope="owner", trace_id="trace-mac")


async def test_mac_commands_and_reads_over_the_mesh(mesh: Mesh, tmp_path: Path) -> None:
    mac = mesh.add_device("mac1", "mac")
    docs = tmp_path / "Documents"
    docs.mkdir()
    (docs / "todo.txt").write_text("buy milk\n")
    (tmp_path / "secret.txt").write_text("not for you\n")
    (mac / "executor.yaml").write_text(yaml.safe_dump({"roots": [str(docs)]}))
    mesh.use_packages({"mac": {"config": {"DEVICE": "mac1"}}})
    async with mesh.hub_in_process() as hub:
        gw = hub.consent.gateway
        assert gw is not None
        await asyncio.to_thread(mesh.start_edge, mac, hub=mesh.hub_target)

        def run(cid: str, command: str, *args: str, asked: bool = False) -> ToolCall:
            a: dict[str, object] = {"command": command, "args": list(args)}
            if asked:
                a["owner_requested"] = True
            return ToolCall("mac", "run", a, cid, f"task-{cid}")

        ls = await gw.call(run("c1", "ls", str(docs)), OWNER)
        assert ls.status == "succeeded", ls
        assert "todo.txt" in ls.effects[0].fields["stdout"]

        read = await gw.call(
            ToolCall("mac", "read_file", {"path": str(docs / "todo.txt")}, "c2", "t"), OWNER
        )
        assert read.status == "succeeded" and read.effects[0].fields["content"] == "buy milk\n"
        assert (read.values[0].value, read.values[0].unit) == (9, "B")
        outside = await gw.call(
            ToolCall("mac", "read_file", {"path": str(tmp_path / "secret.txt")}, "c3", "t"), OWNER
        )
        assert outside.status == "failed" and outside.error_code == "OUTSIDE_ROOTS"

        # an unmapped command never leaves the hub
        rm = await gw.call(run("c4", "rm", "-rf", str(docs)), OWNER)
        assert rm.status == "rejected" and "no effect is declared" in rm.error
        # a write runs on a fork of the folder (a workspace effect): the folder is untouched
        made = await gw.call(run("c6", "mkdir", str(docs / "made")), OWNER)
        assert made.status == "succeeded" and not (docs / "made").exists(), made
        assert made.effects[1].kind == "worldline.forked"
        assert made.effects[1].fields["added"] == "made/"
        escape = await gw.call(run("c7", "touch", str(tmp_path / "x"), asked=True), OWNER)
        assert escape.status == "failed" and escape.error_code == "OUTSIDE_ROOTS"
        assert not (tmp_path / "x").exists()

        # the local pause switch on the Mac
        paused = await asyncio.to_thread(mesh.yimi, "executor", "pause", "--bundle", str(mac))
        assert paused.returncode == 0, paused.stderr
        p = await gw.call(run("c8", "date"), OWNER)
        assert p.status == "failed" and p.error_code == "PAUSED"
        await asyncio.to_thread(mesh.yimi, "executor", "resume", "--bundle", str(mac))
        assert (await gw.call(run("c9", "date"), OWNER)).status == "succeeded"

    # a log line for every request that reached the Mac, refused ones included
    log = [json.loads(x) for x in (mac / "state" / "executor.log").read_text().splitlines()]
    assert [(e["op"], e["status"], e["error_code"]) for e in log] == [
        ("run", "done", ""),
        ("read", "done", ""),
        ("read", "refused", "OUTSIDE_ROOTS"),
        ("run", "done", ""),
        ("run", "refused", "OUTSIDE_ROOTS"),
        ("run", "refused", "PAUSED"),
        ("run", "done", ""),
    ]
    shown = mesh.yimi("executor", "log", "--bundle", str(mac)).stdout
    assert "running" in shown and "PAUSED" in shown and "mkdir" in shown


def tree_hash(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        for p in sorted(root.rglob("*"))
    }


async def test_writes_on_the_mac_run_on_worldlines_committed_through_the_gateway(
    mesh: Mesh, tmp_path: Path
) -> None:
    """A write command runs on a fork of the Mac's allowed folder (its receipt: the fork and
    its diff; the folder untouched); the commit is an owner_data call (waits for the owner
    unless asked); two forks from one base: committing one makes the other stale; rollback
    restores the folder byte for byte; discard leaves it untouched."""
    mac = mesh.add_device("mac1", "mac")
    docs = tmp_path / "Documents"
    docs.mkdir()
    (docs / "notes.txt").write_text("buy milk\n")
    (mac / "executor.yaml").write_text(yaml.safe_dump({"roots": [str(docs)]}))
    mesh.use_packages({"mac": {"config": {"DEVICE": "mac1"}}})
    before = tree_hash(docs)
    async with mesh.hub_in_process() as hub:
        gw = hub.consent.gateway
        assert gw is not None
        await asyncio.to_thread(mesh.start_edge, mac, hub=mesh.hub_target)
        n = 0

        async def call(tool: str, **args: object) -> Any:
            nonlocal n
            n += 1
            return await gw.call(ToolCall("mac", tool, dict(args), f"w{n}", f"task-w{n}"), OWNER)

        a = await call("run", command="touch", args=[str(docs / "a.txt")])
        b = await call("run", command="mkdir", args=[str(docs / "drafts")])
        assert a.status == b.status == "succeeded", (a, b)
        fa, fb = a.effects[1].fields, b.effects[1].fields
        assert (fa["added"], fb["added"]) == ("a.txt", "drafts/")
        assert fa["folder"] == str(docs.resolve()) and fa["generation"] == 0
        assert tree_hash(docs) == before, "a write never touches the current folder"

        shown = await call("worldline_show", folder=str(docs), id=fa["id"])
        assert shown.status == "succeeded" and shown.effects[0].fields["added"] == "a.txt"

        unasked = await call("worldline_commit", folder=str(docs), id=fa["id"])
        assert unasked.status == "waiting" and tree_hash(docs) == before, unasked
        done = await call("worldline_commit", folder=str(docs), id=fa["id"], owner_requested=True)
        assert done.status == "succeeded", done
        assert (docs / "a.txt").exists() and (docs / "notes.txt").read_text() == "buy milk\n"
        assert done.effects[0].fields["generation"] == 1

        stale = await call("worldline_commit", folder=str(docs), id=fb["id"], owner_requested=True)
        assert stale.status == "failed" and stale.error_code == "STALE_BASE", stale
        assert not (docs / "drafts").exists(), "the refusal changed nothing"
        gone = await call("worldline_discard", folder=str(docs), id=fb["id"])
        assert gone.status == "succeeded" and not (docs / "drafts").exists()
        again = await call("worldline_show", folder=str(docs), id=fb["id"])
        assert again.status == "failed" and again.error_code == "CLOSED", again

        back = await call("worldline_rollback", folder=str(docs), id=fa["id"], owner_requested=True)
        assert back.status == "succeeded", back
        assert tree_hash(docs) == before, "rollback restores the folder byte for byte"
        outside = await call("worldline_show", folder=str(tmp_path), id=fa["id"])
        assert outside.status == "failed" and outside.error_code == "OUTSIDE_ROOTS"

    log = [json.loads(x) for x in (mac / "state" / "executor.log").read_text().splitlines()]
    assert [e["op"] for e in log][:3] == ["run", "run", "worldline.show"]
    assert log[0]["worldline_id"] == fa["id"]


async def test_the_bridge_socket_works_for_a_home_deep_in_the_tree(tmp_path: Path) -> None:
    """A socket address holds ~107 bytes: a home whose run/executor.sock is longer gets its
    socket in a private temp folder instead, reachable, and removed on exit."""
    from hub.gateway.executor_bridge import MAX_SOCKET_PATH, ExecutorBridge

    async def send(device: str, kind: int, payload: object) -> bool:
        return False

    deep = tmp_path.joinpath(*["a-rather-long-folder-name"] * 6) / "run" / "executor.sock"
    assert len(str(deep)) > MAX_SOCKET_PATH
    async with ExecutorBridge(deep, lambda: [], send) as bridge:
        assert len(str(bridge.path)) <= MAX_SOCKET_PATH and bridge.path.exists()
        assert (bridge.path.parent.stat().st_mode & 0o777) == 0o700
        reader, writer = await asyncio.open_unix_connection(str(bridge.path))
        writer.write(json.dumps({"device": "mac", "op": "run", "command": "ls"}).encode() + b"\n")
        await writer.drain()
        answer = json.loads(await asyncio.wait_for(reader.readline(), 10))
        writer.close()
        await writer.wait_closed()
        assert answer["error_code"] == "UNREACHABLE", answer
        short = bridge.path.parent
    assert not short.exists()
