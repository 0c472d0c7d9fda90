"""The mac package end to end: the hub (in this process) asks the Mac's edge daemon over
the real mesh to run allow-listed commands and read files, under the gateway (observe /
owner_data), the Mac's allow-list and folders, its pause switch and its command log."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from hub.capabilities.settings import only
from hub.gateway import CallContext, ToolCall
from hub.mesh.daemon import HubDaemon, HubOptions
from provisioning.home import Home
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
    (mesh.home / "packages.yaml").write_text(
        yaml.safe_dump(only({"mac": {"config": {"DEVICE": "mac1"}}}))
    )
    options = HubOptions(
        mqtt_port=mesh.mqtt_port, grpc_port=mesh.grpc_port, bind="127.0.0.1", advertise=False
    )
    async with HubDaemon(Home.load(mesh.home), options) as hub:
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

        # an unmapped command never leaves the hub; owner_data asks unless requested
        rm = await gw.call(run("c4", "rm", "-rf", str(docs)), OWNER)
        assert rm.status == "rejected" and "no effect is declared" in rm.error
        ask = await gw.call(run("c5", "mkdir", str(docs / "new")), OWNER)
        assert ask.status == "waiting" and not (docs / "new").exists()
        made = await gw.call(run("c6", "mkdir", str(docs / "made"), asked=True), OWNER)
        assert made.status == "succeeded" and (docs / "made").is_dir()
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
