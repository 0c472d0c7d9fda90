"""Every package server in a sandbox (``hub.capabilities.sandbox``), with real processes.

``tests/packages/hostile`` tries what its sandbox must refuse: the hub's keys, its memory
database, another package's state, writes outside its state folder, undeclared 127.0.0.1
ports, a fork bomb, memory past its limit, CPU past its limit. Each is refused or killed,
the host keeps serving (a killed server is started again), and the audit log (the real
hash-chained one) records what the hub saw. Its declared egress, one local port, works.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from hub.capabilities.host import PackageHost
from hub.capabilities.manifest import load
from hub.capabilities.sandbox import bwrap, profile_for
from hub.gateway import CallContext, Gateway, ToolCall, open_gateway
from hub.gateway.audit import records
from hub.worldlines.store import Worldlines
from tests.gateway_kit import REPO
from tests.mesh_harness import env

if bwrap() is None:
    pytest.skip("bubblewrap (bwrap) is not installed", allow_module_level=True)

pytestmark = pytest.mark.slow
in_module_loop = pytest.mark.asyncio(loop_scope="module")
HOSTILE = REPO / "tests" / "packages" / "hostile"
OWNER = CallContext(owner="owner", scope="owner", session_id="s", run_id="r")


@dataclass
class Rig:
    gw: Gateway
    host: PackageHost
    home: Path
    state: Path
    audit_dir: Path
    allowed: int
    other: int
    workspace: Path
    fork: Path

    calls: int = 0

    async def call(self, tool: str, **args: object) -> str:
        """The tool called through the gateway (its receipt audited); its text result."""
        self.calls += 1
        c = ToolCall("hostile", tool, dict(args), f"c{self.calls}", f"task-{self.calls}")
        r = await self.gw.call(c, OWNER)
        assert r.status == "succeeded", r
        result: str = json.loads(r.output)["result"]
        return result

    def audited(self, kind: str) -> list[dict[str, Any]]:
        return [r["data"] for r in records(self.audit_dir) if r.get("kind") == kind]


async def _pong(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readline()
    writer.write(b"pong\n")
    await writer.drain()
    writer.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rig(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Rig]:
    home = tmp_path_factory.mktemp("hub-home")
    (home / "keys").mkdir()
    (home / "keys" / "home.key").write_bytes(b"secret key")
    db = sqlite3.connect(home / "memory.db")
    db.execute("CREATE TABLE assertions (x)")
    db.commit()
    db.close()
    (home / "package-state" / "memory").mkdir(parents=True)
    (home / "package-state" / "memory" / "notes").write_text("someone else's")
    state = home / "package-state" / "hostile"
    state.mkdir()
    allowed = await asyncio.start_server(_pong, "127.0.0.1", 0)
    other = await asyncio.start_server(_pong, "127.0.0.1", 0)
    a_port = allowed.sockets[0].getsockname()[1]
    o_port = other.sockets[0].getsockname()[1]
    m = load(HOSTILE)
    workspace = tmp_path_factory.mktemp("owner") / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("buy milk\n")
    lines = Worldlines(workspace)
    fork = lines.path(lines.fork("try").id)
    extra = {
        "YIMI_STATE_DIR": str(state),
        "YIMI_ALLOWED_HOST": "127.0.0.1",
        "YIMI_ALLOWED_PORT": str(a_port),
        "YIMI_WORKSPACE": str(fork),
    }
    gw_dir = home / "gateway"
    try:
        async with open_gateway(
            gw_dir, manifests={m.name: m}, env_for=lambda *_: dict(extra), durable=False
        ) as gw:
            assert gw.host is not None
            yield Rig(gw, gw.host, home, state, gw_dir / "audit", a_port, o_port, workspace, fork)
    finally:
        allowed.close()
        other.close()


@in_module_loop
async def test_it_runs_as_a_temporary_uid_with_only_loopback(rig: Rig) -> None:
    out = await rig.call("whoami")
    assert out.startswith("OK uid=6") and "ifaces=lo " in out, out
    assert f"home={rig.state}" in out


@in_module_loop
async def test_the_hubs_keys_databases_and_other_state_are_not_there(rig: Rig) -> None:
    for path in (rig.home / "keys" / "home.key", rig.home / "package-state/memory/notes"):
        assert path.exists()
        out = await rig.call("read_file", path=str(path))
        assert out.startswith("REFUSED FileNotFoundError"), out
    out = await rig.call("open_db", path=str(rig.home / "memory.db"))
    assert out.startswith("REFUSED"), out
    assert (await rig.call("read_file", path="/etc/shadow")).startswith("REFUSED")
    assert (await rig.call("read_file", path=str(REPO / "pyproject.toml"))).startswith("REFUSED")
    keys = str(rig.home / "keys" / "home.key")
    hits = [r["receipt"] for r in rig.audited("receipt") if r["receipt"]["target"] == keys]
    assert hits, "each attempt, and what it got, is in the audit log (its receipt)"
    assert "REFUSED FileNotFoundError" in hits[0]["output"]


@in_module_loop
async def test_it_writes_only_its_state_folder(rig: Rig) -> None:
    assert await rig.call("write_file", path=str(rig.state / "mine")) == "OK written"
    assert (rig.state / "mine").read_text() == "x"
    for path in (HOSTILE / "evil", REPO / "hub" / "evil", Path("/usr/evil")):
        out = await rig.call("write_file", path=str(path))
        assert out.startswith("REFUSED OSError: [Errno 30] Read-only file system"), (path, out)
        assert not path.exists()
    # the home's folder is not there: under /tmp a write lands in the sandbox's own scratch
    # tmpfs (gone with it), never in the hub's home
    await rig.call("write_file", path=str(rig.home / "evil"))
    await rig.call("write_file", path=str(rig.home / "keys" / "home.key"))
    assert not (rig.home / "evil").exists()
    assert (rig.home / "keys" / "home.key").read_bytes() == b"secret key"


@in_module_loop
async def test_it_runs_on_its_worldline_fork_with_only_the_fork_writable(rig: Rig) -> None:
    assert (await rig.call("read_file", path=str(rig.fork / "notes.txt"))) == "OK 9 bytes"
    assert await rig.call("write_file", path=str(rig.fork / "notes.txt"), text="changed") == (
        "OK written"
    )
    assert (rig.fork / "notes.txt").read_text() == "changed"
    out = await rig.call("read_file", path=str(rig.workspace / "notes.txt"))
    assert out.startswith("REFUSED FileNotFoundError"), "the current workspace is not there"
    await rig.call("write_file", path=str(rig.workspace / "notes.txt"))
    assert (rig.workspace / "notes.txt").read_text() == "buy milk\n"
    assert Worldlines(rig.workspace).diff(rig.fork.name).changed == ("notes.txt",)


@in_module_loop
async def test_declared_egress_reaches_its_port_and_nothing_else(rig: Rig) -> None:
    assert await rig.call("connect", host="127.0.0.1", port=rig.allowed) == "OK pong"
    out = await rig.call("connect", host="127.0.0.1", port=rig.other)
    assert out.startswith("REFUSED ConnectionRefusedError"), "a listening but undeclared port"
    out = await rig.call("via_proxy", target=f"127.0.0.1:{rig.other}")
    assert out == "REFUSED REFUSED not declared", out
    assert await rig.call("via_proxy", target=f"127.0.0.1:{rig.allowed}") == "OK pong"
    refused = rig.audited("sandbox.egress_refused")
    assert {"package": "hostile", "target": f"127.0.0.1:{rig.other}", "reason": "not declared"} in (
        refused
    )
    assert any(r["target"] == f"127.0.0.1:{rig.allowed}" for r in rig.audited("sandbox.egress"))


@in_module_loop
async def test_a_fork_bomb_and_too_much_memory_are_refused(rig: Rig) -> None:
    out = await rig.call("fork_many", n=10_000)
    assert out.startswith("REFUSED BlockingIOError"), out
    assert int(out.rsplit(" after ", 1)[1].split()[0]) < 64
    if rig.host.sandbox and any(s.sandbox and s.sandbox.cgroup for s in rig.host._servers.values()):
        assert rig.audited("sandbox.pids_limit"), "the refused forks are audited"
    out = await rig.call("allocate", mb=2000)
    assert out.startswith("REFUSED MemoryError"), out
    assert (await rig.call("allocate", mb=16)) == "OK 16 MiB", "it still serves"


@in_module_loop
async def test_burning_cpu_gets_it_killed_and_the_host_starts_it_again(rig: Rig) -> None:
    await rig.call("whoami")  # running already, as after the tests before it (run alone too)
    starts = rig.host.starts
    out = await rig.host.call("hostile", "burn_cpu", {}, timeout=40)
    assert out.error_code == "DISCONNECTED", out
    await asyncio.wait_for(rig.host.ended("hostile"), 20)
    killed = rig.audited("sandbox.killed")
    assert killed and killed[-1]["package"] == "hostile", killed
    assert killed[-1]["signal"] == "SIGXCPU" and killed[-1]["exit_code"] == 128 + 24
    assert (await rig.call("whoami")).startswith("OK uid="), "the next call starts it again"
    assert rig.host.starts == starts + 1


def test_the_profile_shows_what_a_package_may_use(tmp_path: Path) -> None:
    home = tmp_path / "home"
    state = home / "package-state" / "memory"
    state.mkdir(parents=True)
    (home / "keys").mkdir()
    (home / "memory.db").write_bytes(b"")
    p = profile_for(load(REPO / "packages" / "memory"), {"YIMI_STATE_DIR": str(state)})
    assert p.home == str(home) and str(home / "keys") in p.masked
    assert str(home / "package-state") in p.masked and str(state) in p.read_write
    assert str(home / "memory.db") not in p.masked
    assert not p.egress and p.network == "none (loopback only)"
    out = subprocess.run(
        [sys.executable, "-m", "cli", "package", "show", str(HOSTILE)],
        capture_output=True,
        text=True,
        env={**env(), "YIMI_ALLOWED_HOST": "127.0.0.1", "YIMI_ALLOWED_PORT": "8025"},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "egress allowed: 127.0.0.1:8025" in out.stdout
    assert "limits: cpu 5 s, memory 768 MiB, processes 40, open files 64" in out.stdout


def test_without_bubblewrap_the_host_refuses_and_says_so(tmp_path: Path) -> None:
    code = (
        "import asyncio, shutil, sys; from pathlib import Path\n"
        "import hub.capabilities.sandbox as sb, hub.capabilities.host as h\n"
        "from hub.capabilities.manifest import load\n"
        "h.bwrap = lambda: None\n"
        f"m = load(Path({str(HOSTILE)!r}))\n"
        "async def main():\n"
        "    async with h.PackageHost({'hostile': m}) as host:\n"
        "        r = await host.call('hostile', 'whoami', {})\n"
        "        print(r.error_code, r.text)\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env(), timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("START_FAILED package hostile not started: bubblewrap"), out
    assert "YIMI_SANDBOX=off" in out.stdout
    assert "YIMI_SANDBOX=off" in out.stderr, "the log says how to opt out"


@pytest.mark.asyncio
async def test_the_memory_package_uses_the_homes_database_and_nothing_else(
    tmp_path: Path,
) -> None:
    """A core package that declares entries of the home (``sandbox.home``) gets those, read-
    write, beside its own state: the memory database lands in the home; the keys do not
    show."""
    home = tmp_path / "home"
    state = home / "package-state" / "memory"
    state.mkdir(parents=True)
    (home / "keys").mkdir()
    (home / "keys" / "home.key").write_bytes(b"secret")
    m = load(REPO / "packages" / "memory")
    env_for = {"YIMI_STATE_DIR": str(state), "YIMI_MODEL_LOCATION": "local"}
    async with PackageHost({m.name: m}, env_for=lambda *_: dict(env_for)) as host:
        args = {"id": "tea", "subject": "owner", "predicate": "drinks", "value": "tea"}
        out = await host.call("memory", "commit", {**args, "idempotency_key": "k1"})
        assert not out.is_error and out.structured and out.structured["status"] == "succeeded"
        shown = await host.call("memory", "show", {"id": "tea"})
        assert shown.structured and shown.structured["status"] == "succeeded", shown
    assert (home / "memory.db").is_file(), "the home's database, not a copy in the sandbox"
    assert (home / "keys" / "home.key").read_bytes() == b"secret"


def test_a_declared_lan_address_is_reached_through_the_relay() -> None:
    m = load(REPO / "packages" / "home")
    p = profile_for(m, {"YIMI_MQTT_HOST": "192.168.1.5", "YIMI_MQTT_PORT": "1883"})
    (e,) = p.egress
    assert (e.host, e.port) == ("192.168.1.5", 1883) and e.inside.startswith("127.0.0.")
    assert p.env_rewrites == (("YIMI_MQTT_HOST", e.inside),), "the server dials the relay"
    named = profile_for(m, {"YIMI_MQTT_HOST": "broker.lan", "YIMI_MQTT_PORT": "1883"})
    assert not named.env_rewrites and named.egress[0].host == "broker.lan"
    assert profile_for(m, {}).unresolved == ("${MQTT_HOST}:${MQTT_PORT}",)


def _lan_address() -> str | None:
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # no packet is sent: it only picks the route's address
        address: str = s.getsockname()[0]
        return None if address.startswith("127.") else address
    return None


@pytest.mark.asyncio
async def test_a_declared_lan_address_is_reached_and_its_other_ports_are_not(
    tmp_path: Path,
) -> None:
    lan = _lan_address()
    if lan is None:
        pytest.skip("this machine has no address outside loopback")
    server = await asyncio.start_server(_pong, lan, 0)
    port = server.sockets[0].getsockname()[1]
    extra = {"YIMI_STATE_DIR": str(tmp_path), "YIMI_ALLOWED_HOST": lan}
    extra["YIMI_ALLOWED_PORT"] = str(port)
    m = load(HOSTILE)
    try:
        async with PackageHost({m.name: m}, env_for=lambda *_: dict(extra)) as host:
            out = await host.call("hostile", "connect_configured", {})
            assert out.structured == {"result": "OK pong"}, out
            out = await host.call("hostile", "connect", {"host": lan, "port": port})
            assert "REFUSED" in out.text, "the address itself is not routed: only the relay"
    finally:
        server.close()
