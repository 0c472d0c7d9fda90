"""The hub as a systemd service: ``READY=1`` at the "up" line, the unit, ``hub status``.

No systemd here: the service manager's side of ``sd_notify`` is a real AF_UNIX datagram
socket bound in a temporary directory (or the abstract namespace), named by
``$NOTIFY_SOCKET`` in the hub's environment, exactly as systemd hands it over.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cli import main as cli
from cli.hub import hub_is_up
from cli.service import UNIT_NAME, yimi_command
from hub.capabilities.settings import only
from hub.mesh.notify import ServiceNotifier, notify, socket_address, watchdog_interval
from hub.mesh.status import HubStatus, parse_status, read_status, status_path, write_status
from provisioning.home import Home
from tests.mesh_harness import Mesh
from tests.waiting import poll, poll_sync
from worlds import ports

DEADLINE_S = 20.0


class Manager:
    """systemd's end of the notification socket: every datagram the service sent."""

    def __init__(self, address: str | bytes, env_name: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(DEADLINE_S)
        self.env_name = env_name
        self.received: list[str] = []

    def receive(self, timeout: float = DEADLINE_S) -> str:
        self.sock.settimeout(timeout)
        data = self.sock.recv(4096).decode()
        self.received.append(data)
        return data

    def until(self, line: str, timeout: float = DEADLINE_S) -> str:
        """The first datagram holding ``line`` (others are kept in ``received``)."""
        while True:
            data = self.receive(timeout)
            if line in data.split("\n"):
                return data

    def pending(self) -> list[str]:
        """Datagrams already queued, without waiting."""
        out = []
        self.sock.setblocking(False)
        try:
            while True:
                out.append(self.sock.recv(4096).decode())
        except BlockingIOError:
            pass
        finally:
            self.sock.setblocking(True)
        self.received += out
        return out


@pytest.fixture
def manager() -> Iterator[Manager]:
    # AF_UNIX paths are at most 107 bytes: a short directory, not pytest's tmp_path
    with tempfile.TemporaryDirectory(prefix="yimi-notify-", dir="/tmp") as d:
        path = str(Path(d) / "notify")
        m = Manager(path, path)
        try:
            yield m
        finally:
            m.sock.close()


# ---------------------------------------------------------------- sd_notify (fast)
def test_notify_sends_one_datagram_to_the_socket_named(manager: Manager) -> None:
    assert notify("READY=1\nSTATUS=up", {"NOTIFY_SOCKET": manager.env_name})
    assert manager.receive() == "READY=1\nSTATUS=up"


def test_notify_reaches_an_abstract_socket() -> None:
    name = f"yimi-test-{os.getpid()}-{os.urandom(4).hex()}"
    m = Manager(b"\0" + name.encode(), "@" + name)
    try:
        assert socket_address("@" + name) == b"\0" + name.encode()
        assert notify("READY=1", {"NOTIFY_SOCKET": "@" + name})
        assert m.receive() == "READY=1"
    finally:
        m.sock.close()


def test_without_a_manager_nothing_is_sent_and_nothing_raises(tmp_path: Path) -> None:
    assert not notify("READY=1", {})
    assert not notify("READY=1", {"NOTIFY_SOCKET": "relative/path"})
    assert not notify("READY=1", {"NOTIFY_SOCKET": str(tmp_path / "nobody-listens")})


def test_watchdog_interval_is_half_the_period_of_this_process_only() -> None:
    assert watchdog_interval({"WATCHDOG_USEC": "4000000"}) == 2.0
    assert watchdog_interval({"WATCHDOG_USEC": "4000000", "WATCHDOG_PID": str(os.getpid())}) == 2.0
    assert watchdog_interval({"WATCHDOG_USEC": "4000000", "WATCHDOG_PID": "1"}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "x"}) is None
    assert watchdog_interval({}) is None


async def test_the_notifier_pings_the_watchdog_then_says_stopping(manager: Manager) -> None:
    env = {"NOTIFY_SOCKET": manager.env_name, "WATCHDOG_USEC": "20000"}  # a ping every 10 ms
    async with ServiceNotifier(env) as notifier:
        notifier.ready("hub up")
        await poll(lambda: notifier.sent.count("WATCHDOG=1") >= 3, what="three watchdog pings")
    assert notifier.sent[-1] == "STOPPING=1\nSTATUS=stopping"
    sent = len(notifier.sent)
    got = [manager.receive() for _ in range(sent)]
    assert "READY=1\nSTATUS=hub up" in got and got[-1] == "STOPPING=1\nSTATUS=stopping"
    assert manager.pending() == []  # the watchdog task ended with the block


# ---------------------------------------------------------------- the status file (fast)
def test_the_status_file_round_trips(tmp_path: Path) -> None:
    status = HubStatus(
        pid=42,
        ready=True,
        bind="127.0.0.1",
        mqtt_port=1883,
        grpc_port=50051,
        web_port=8443,
        web_https=True,
        packages_loaded=("memory", "messaging"),
        packages_running=("memory",),
        packages_failed={"broken": "not loaded: no plugin.json"},
        since_ms=1,
    )
    write_status(tmp_path, status)
    assert read_status(tmp_path) == status
    assert status_path(tmp_path).stat().st_mode & 0o077 == 0


@settings(max_examples=100, deadline=None)
@given(
    st.binary(max_size=300)
    | st.recursive(
        st.none() | st.integers() | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c)
    ).map(lambda v: json.dumps(v).encode())
)
def test_the_status_parser_never_raises(data: bytes) -> None:
    assert parse_status(data) is None or isinstance(parse_status(data), HubStatus)


async def test_a_package_server_that_cannot_start_is_reported_failed(tmp_path: Path) -> None:
    """What the hub's status file lists as failed at run time (``PackageHost.failures``)."""
    from dataclasses import replace

    from hub.capabilities.host import PackageHost
    from hub.capabilities.manifest import load
    from tests.gateway_kit import PACKAGES

    m = load(PACKAGES["probe"])
    broken = replace(m.server, command=str(tmp_path / "no-such-server"))
    m = replace(m, servers={**m.servers, m.runtime.server: broken})
    async with PackageHost({"probe": m}, env_for=lambda *_: {"YIMI_STATE_DIR": str(tmp_path)}) as h:
        assert h.failures() == {}
        out = await h.call("probe", "echo", {})
        assert out.is_error and h.running() == []
        assert set(h.failures()) == {"probe"} and h.failures()["probe"]


# ---------------------------------------------------------------- the unit (fast)
def test_install_service_writes_a_notify_unit_restarted_on_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = Home.init(tmp_path / "my home").path
    units = tmp_path / "units"
    args = ["hub", "install-service", "--home", str(home), "--user", "--unit-dir", str(units)]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "systemctl --user daemon-reload && systemctl --user enable --now yimi-hub" in out
    text = (units / UNIT_NAME).read_text()
    service = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#"
    )
    exe = yimi_command()[0]
    assert Path(exe).is_absolute() and os.access(exe, os.X_OK)
    assert service["ExecStart"] == " ".join(
        [*yimi_command(), "hub", "run", "--home", f'"{home.absolute()}"']
    )
    assert service["Type"] == "notify" and service["NotifyAccess"] == "main"
    assert service["Restart"] == "on-failure" and int(service["RestartSec"]) > 0
    assert service["UMask"] == "0077" and service["NoNewPrivileges"] == "yes"
    assert service["ProtectSystem"] == "strict"
    assert service["ReadWritePaths"] == f'"{home.absolute()}"'
    assert service["WantedBy"] == "default.target"
    if shutil.which("systemd-analyze"):  # not installed here usually: then not checked
        done = subprocess.run(
            ["systemd-analyze", "verify", str(units / UNIT_NAME)], capture_output=True, timeout=30
        )
        assert done.returncode == 0, done.stderr


def test_a_system_unit_runs_as_this_user_and_dry_run_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = Home.init(tmp_path / "home").path
    units = tmp_path / "units"
    args = ["hub", "install-service", "--home", str(home), "--unit-dir", str(units), "--dry-run"]
    assert cli.main(args) == 0
    text = capsys.readouterr().out
    assert not units.exists()
    assert re.search(r"^User=\S+$", text, re.M) and "WantedBy=multi-user.target" in text
    assert "PrivateUsers" not in text


# ---------------------------------------------------------------- a running hub (slow)
def broken_package(root: Path) -> Path:
    pkg = root / "broken"
    pkg.mkdir()
    (pkg / "plugin.json").write_text("{not json")
    return pkg


@pytest.mark.slow
def test_ready_only_once_up_then_status_then_stopping(mesh: Mesh, manager: Manager) -> None:
    (mesh.home / "packages.yaml").write_text(
        yaml.safe_dump(only({"memory": {}, "broken": {"path": str(broken_package(mesh.root))}}))
    )
    mesh.env["NOTIFY_SOCKET"] = manager.env_name
    hub = mesh.spawn("hub", "hub", "run", "--home", str(mesh.home), "--bind", "127.0.0.1",
                     "--mqtt-port", str(mesh.mqtt_port), "--grpc-port", str(mesh.grpc_port),
                     "--no-advertise", "--web-port", str(web := ports.port()))  # fmt: skip
    ready = manager.until("READY=1")
    written = read_status(mesh.home)  # written before READY=1 is sent
    assert written is not None and written.ready and written.pid == hub.popen.pid
    # the first thing the hub says, at the moment of its "up" line (already in its log)
    assert manager.received == [ready], manager.received
    assert hub_is_up(hub.text()), hub.text()
    up = re.search(r"hub [0-9a-f]+ up: .*", hub.text())
    assert up is not None and f"STATUS={up.group(0)}" in ready.split("\n")

    status = mesh.yimi("hub", "status", "--home", str(mesh.home), check=True).stdout
    fingerprint = Home.load(mesh.home).fingerprint
    assert f"hub: running (pid {hub.popen.pid}), ready since " in status, status
    ports_line = f"ports: mqtt 127.0.0.1:{mesh.mqtt_port}, grpc 127.0.0.1:{mesh.grpc_port}, "
    assert f"{ports_line}web http :{web}" in status, status  # plain HTTP: on 127.0.0.1 only
    assert f"home fingerprint: {fingerprint}" in status
    assert re.search(r"^  TLS: home CA [0-9a-f]{16}…", status, re.M), status
    assert "packages: 1 loaded (memory), 0 running, 1 failed" in status, status
    assert re.search(r"^    failed broken: not loaded: ", status, re.M), status
    assert "brain: the built-in rule-based model" in status

    assert mesh.stop(hub) == 0
    assert manager.until("STOPPING=1").startswith("STOPPING=1")
    assert not status_path(mesh.home).exists()
    status = mesh.yimi("hub", "status", "--home", str(mesh.home), check=True).stdout
    assert "hub: not running" in status and "ports (home.yaml): mqtt" in status
    poll_sync(lambda: not hub.alive(), 5, "the hub to be gone")
    assert hub.popen.returncode == 0 and hub.popen.returncode != -signal.SIGKILL
