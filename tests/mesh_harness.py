"""Test harness: real ``yimi`` processes (hub, edge daemons, CLI) on loopback ports.

Every process is started in its own session and is killed (with its children) when the
harness closes; waiting is always polling with a deadline, never a blind sleep.

``yimi`` commands that run to completion (``home init``, ``device add``, ``say``…) are
processes of their own too, forked from a server that imported the CLI once per test worker
(:func:`run_cli`, ``multiprocessing``'s fork server): the same ``cli.main`` entry point,
argument list, environment, folder and exit status as ``python -m cli``, without paying the
interpreter's start and the CLI's imports each time — a few tenths of a second of CPU per
command, hundreds of commands per run. Daemons (``hub run``, ``edge run``) are started with
``python -m cli`` as before (:meth:`Mesh.spawn`).

Every home the harness makes hears with Whisper **tiny.en** (``HARNESS_ASR`` in its
home.yaml), not the hub's multilingual default (Whisper base costs ~1-2 s per utterance on
2 cores, tiny.en ~0.45 s): the multi-process tests speak English. A test that speaks
Chinese sets ``mesh.configure(asr={"model": "whisper-base", "language": "auto"})``.

Every home also reads its slot lists at the first request that needs them
(``HARNESS_SLOT_LISTS``), not as the hub starts: the home and errands packages (each an MCP
server whose SDK import costs ~0.6 s of CPU) start only in the tests that use them, not with
every hub. ``tests/test_slots_at_start.py`` covers the default (read at start).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import itertools
import multiprocessing
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import grpc

from cli.hub import hub_is_up, loopback_hub_args
from hub.mesh.broker import mosquitto_pids as mosquitto_pids  # re-exported for the tests
from provisioning.home import Home
from storage.sqlite import read_rows
from sync.backoff import SCALE_ENV
from sync.tls import ChannelOptions, ClientTls
from tests.waiting import poll_sync
from worlds import ports

if TYPE_CHECKING:
    from hub.mesh.daemon import HubDaemon
    from worlds.fakes import SmtpWorld

REPO = Path(__file__).resolve().parent.parent
MEETING_NOTE = "Meeting notes: ship on Friday."
"""the note :meth:`Mesh.prepare_mail` adds (what the e-mail tests send)"""


def messaging_config(smtp: SmtpWorld) -> dict[str, str]:
    """The messaging package's configuration for the local SMTP server ``smtp``."""
    return {"SMTP_HOST": smtp.host, "SMTP_PORT": str(smtp.port), "SMTP_FROM": "assistant@home.test"}


HARNESS_ASR = {"model": "whisper-tiny.en", "language": "en"}
"""``asr:`` of every harness home (see the module doc)"""
HARNESS_SLOT_LISTS = {"at_start": False}
"""``slot_lists:`` of every harness home (see the module doc)"""
BACKOFF_SCALE = "0.25"
"""Every daemon's reconnect/restart backoff, quartered (:mod:`sync.backoff`): the same doubling,
cap and jitter, so a fault test waits seconds, not tens of seconds, for a reconnect."""


CLI_PRELOAD = ["cli.main", "provisioning.bundle", "provisioning.home", "provisioning.profiles"]
"""what the CLI's fork server imports once (nothing that starts a thread or loads gRPC's core:
a forked child must start clean)"""
_FORKS = multiprocessing.get_context("forkserver")
_FORKS.set_forkserver_preload(CLI_PRELOAD)


def _cli_child(
    args: list[str], env: dict[str, str], cwd: str, out: str, err: str, status_file: str
) -> None:
    """In the forked child: stdin from /dev/null, stdout and stderr to ``out``/``err``,
    exactly ``env`` and ``cwd``, then ``yimi ARGS`` as ``python -m cli`` runs it (its exit
    status is the process's, and is written to ``status_file`` as it ends: see :func:`run_cli`).
    ``cli.main`` is run again on that environment first: what it sets at import
    (``GRPC_VERBOSITY``) is set as in a fresh process."""
    import cli.common
    import cli.main

    finish = cli.common.exit_now

    def exit_now(status: int) -> NoReturn:
        Path(status_file).write_text(str(status))
        finish(status)

    cli.common.exit_now = exit_now  # what the reloaded cli.main imports

    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for path, fd in ((out, 1), (err, 2)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = ["yimi", *args]
    try:
        importlib.reload(cli.main).main()
    except SystemExit as exc:  # argparse (usage, --help), or exit_now with a thread left
        code = exc.code
        Path(status_file).write_text(str(code if isinstance(code, int) else int(code is not None)))
        raise


_RUNS = itertools.count()
"""numbers the output files of this process's commands"""


def run_cli(
    args: list[str], *, env: dict[str, str], cwd: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    """``yimi ARGS`` to completion in a process forked from the CLI's fork server (see the
    module doc): its status and its output as text, as ``subprocess.run`` would give them
    (``TimeoutExpired`` after ``timeout`` s, the process killed).

    The status is the one the command wrote as it ended. The fork server's report of it is
    used only for a process that wrote none (killed, crashed): with threads starting commands
    while another thread starts subprocesses, that report is now and then lost, and
    ``multiprocessing`` then says 255 (measured: three threads running commands for a
    minute while the main thread started ``sleep`` processes, 5 of 1,185 commands came back
    255 although each had ended normally; with the written status, 0 of 1,325)."""
    run = f".yimi-{os.getpid()}-{next(_RUNS)}"
    out, err, status = (cwd / f"{run}.{part}" for part in ("out", "err", "status"))
    files = (str(cwd), str(out), str(err), str(status))
    proc = _FORKS.Process(target=_cli_child, args=(args, env, *files))
    deadline = time.monotonic() + timeout
    try:
        proc.start()
        proc.join(timeout)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
            raise subprocess.TimeoutExpired(["yimi", *args], timeout, _read(out), _read(err))
        if proc.exitcode == LOST_STATUS and proc.pid is not None:
            _wait_gone(proc.pid, deadline)  # the report may have come before the end
        code = int(_read(status) or proc.exitcode)
        return subprocess.CompletedProcess(["yimi", *args], code, _read(out), _read(err))
    finally:
        if proc.exitcode is not None:
            proc.close()  # its sentinel
        for path in (out, err, status):
            path.unlink(missing_ok=True)


LOST_STATUS = 255
"""what ``multiprocessing`` says when the fork server's report of a status could not be read"""


def _wait_gone(pid: int, deadline: float) -> None:
    """Until process ``pid`` has ended (gone, or a zombie), at most until ``deadline``."""
    stat = Path(f"/proc/{pid}/stat")
    while time.monotonic() < deadline:
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return
        except (OSError, IndexError):
            return
        time.sleep(0.01)


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.exists() else ""


def client_tls(home: Path) -> ClientTls:
    """TLS pinned to the CA of the home in ``home`` (raw test clients)."""
    return ClientTls.for_home(Home.load(home))


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["YIMI_MDNS_INTERFACES"] = "127.0.0.1"
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    e["PYTHONUNBUFFERED"] = "1"
    e.setdefault(SCALE_ENV, BACKOFF_SCALE)
    return e


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        return self.popen.poll() is None


@dataclass
class Mesh:
    """One home in ``root`` with a hub on loopback ports of this worker's range (the ports are
    written into the home and the bundles, so they are chosen before anything starts)."""

    root: Path
    mqtt_port: int = field(default_factory=ports.port)
    grpc_port: int = field(default_factory=ports.port)
    procs: list[Proc] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    """extra environment for every process this mesh starts (on top of :func:`env`)"""

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def hub_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def yimi(
        self, *args: str, timeout: float = 60, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """Run ``yimi ARGS`` to completion (:func:`run_cli`)."""
        proc = run_cli(list(args), env={**env(), **self.env}, cwd=self.root, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"yimi {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def spawn(self, name: str, *args: str, stdin: int | None = None) -> Proc:
        """``yimi ARGS`` in its own session, its output in a log (``stdin``: e.g.
        ``subprocess.PIPE``, for a device that hears raw PCM the test writes)."""
        log = self.root / f"{name}.{len(self.procs)}.log"
        fh = log.open("wb")
        popen = subprocess.Popen(
            [sys.executable, "-m", "cli", *args],
            stdin=stdin,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**env(), **self.env},
            cwd=self.root,
            start_new_session=True,
        )
        fh.close()
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    # ------------------------------------------------------------------ home and hub
    def init(self) -> str:
        out = self.yimi(
            "home",
            "init",
            "--home",
            str(self.home),
            "--mqtt-port",
            str(self.mqtt_port),
            "--grpc-port",
            str(self.grpc_port),
            "--hub-host",
            "127.0.0.1",
            check=True,
        ).stdout
        self.configure(asr=dict(HARNESS_ASR), slot_lists=dict(HARNESS_SLOT_LISTS))
        return out

    def configure(self, **sections: object) -> None:
        """Merge top-level sections into the home's ``home.yaml`` (before the hub starts)."""
        import yaml

        path = self.home / "home.yaml"
        config = yaml.safe_load(path.read_text()) or {}
        config.update(sections)
        path.write_text(yaml.safe_dump(config, sort_keys=False))

    def add_device(self, name: str, profile: str = "glasses") -> Path:
        out = self.root / f"bundle-{name}"
        self.yimi(
            "device",
            "add",
            "--home",
            str(self.home),
            "--profile",
            profile,
            "--name",
            name,
            "--out",
            str(out),
            check=True,
        )
        return out

    def start_hub(self, *extra: str, timeout: float = 30) -> Proc:
        hub = self.spawn(
            "hub", *loopback_hub_args(self.home, self.mqtt_port, self.grpc_port), *extra
        )
        start = len(hub.text())
        poll_sync(
            lambda: hub_is_up(hub.text()[start:]) or not hub.alive(), timeout, "the hub to come up"
        )
        assert hub.alive(), f"hub exited: {hub.text()}"
        return hub

    def start_edge(self, bundle: Path, *extra: str, hub: str | None = None) -> Proc:
        """``yimi edge run`` of ``bundle`` (``extra``: more of its arguments, e.g.
        ``--audio FILE --out null`` for a device that speaks its replies), once connected."""
        args = ["edge", "run", "--bundle", str(bundle), *extra]
        if hub:
            args += ["--hub", hub]
        edge = self.spawn(f"edge-{bundle.name}", *args)
        poll_sync(
            lambda: "connected to hub" in edge.text() or not edge.alive(), 30, "edge to connect"
        )
        assert edge.alive(), edge.text()
        return edge

    def say(
        self, bundle: Path, text: str, *args: str, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return self.yimi("say", "--bundle", str(bundle), *args, text, timeout=timeout)

    def use_packages(self, packages: dict[str, Any]) -> None:
        """The hub runs exactly ``packages`` (``packages.yaml``; the other built-ins off)."""
        import yaml

        from hub.capabilities.settings import only

        (self.home / "packages.yaml").write_text(yaml.safe_dump(only(packages)))

    def prepare_mail(self, smtp: SmtpWorld, contacts: list[dict[str, Any]]) -> None:
        """Address book, a meeting note, and the packages memory and messaging (on ``smtp``)."""
        import yaml

        (self.home / "contacts.yaml").write_text(yaml.safe_dump(contacts, allow_unicode=True))
        self.use_packages({"memory": {}, "messaging": {"config": messaging_config(smtp)}})
        self.yimi("note", "add", "--home", str(self.home), MEETING_NOTE, check=True)

    async def say_answered(self, bundle: Path, words: str) -> str:
        """``yimi say`` from ``bundle`` to this home's hub (off the event loop): its output,
        the command having succeeded."""
        r = await asyncio.to_thread(
            self.say, bundle, words, "--hub", self.hub_target, "--timeout", "60"
        )
        assert r.returncode == 0, (r.stdout, r.stderr)
        return r.stdout

    @asynccontextmanager
    async def hub_in_process(self, **options: Any) -> AsyncIterator[HubDaemon]:
        """This home's hub in the test's own process, on its loopback ports (``options``:
        more :class:`~hub.mesh.daemon.HubOptions` fields), once its turns have started."""
        from hub.mesh.daemon import HubDaemon, HubOptions

        opts = HubOptions(
            mqtt_port=self.mqtt_port,
            grpc_port=self.grpc_port,
            bind="127.0.0.1",
            advertise=False,
            **options,
        )
        async with HubDaemon(Home.load(self.home), opts) as hub:
            await asyncio.wait_for(hub.turns.started.wait(), 60)
            yield hub

    def stop(self, proc: Proc, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        if proc.alive():
            os.killpg(proc.popen.pid, sig)
        return proc.popen.wait(timeout=timeout)

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.alive():
                try:
                    os.killpg(proc.popen.pid, signal.SIGTERM)
                    proc.popen.wait(timeout=10)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    try:
                        os.killpg(proc.popen.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.popen.wait(timeout=10)
            if proc.popen.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.popen.stdin.close()
        self.procs.clear()

    # ------------------------------------------------------------------ raw clients (TLS)
    def client_tls(self) -> ClientTls:
        """TLS pinned to this home's CA, as a device of it connects (for raw clients)."""
        return client_tls(self.home)

    def mqtt_tls(self) -> ssl.SSLContext | None:
        """``tls_context`` for a raw ``aiomqtt.Client`` to this hub's broker."""
        return self.client_tls().ssl_context()

    def channel(self, options: ChannelOptions = ()) -> grpc.aio.Channel:
        """A raw gRPC channel to this hub (TLS, pinned to its CA)."""
        return self.client_tls().channel("127.0.0.1", self.grpc_port, options)

    # ------------------------------------------------------------------ reading state
    def hub_timeline(self) -> list[tuple[int, str, str, str]]:
        """(seq, device, kind, text) of every hub timeline entry, read from hub.db."""
        return self.hub_query("SELECT seq, device, kind, text FROM timeline ORDER BY seq")  # type: ignore[return-value]

    def hub_query(self, sql: str, *params: object) -> list[tuple[object, ...]]:
        return read_rows(self.home / "hub.db", sql, *params)
