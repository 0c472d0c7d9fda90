"""Running a real hub for benchmarks: ports, a child environment, and a hub process that
is stopped with everything it started (shared by the benches under ``bench/``)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.counting.sitecustomize import OUT_ENV as COUNTS_ENV
from cli.hub import hub_is_up, loopback_hub_args
from hub.mesh.broker import mosquitto_pids

REPO = Path(__file__).resolve().parent.parent
HUB_START_TIMEOUT_S = 120.0
"""seconds: a hub loading a large home may take a while"""
HUB_STOP_TIMEOUT_S = 15.0
MOSQUITTO_GONE_TIMEOUT_S = 8.0
COUNTS_TIMEOUT_S = 5.0
PR_SET_PDEATHSIG = 1
CLK_TCK = os.sysconf("SC_CLK_TCK")


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env["YIMI_MDNS_INTERFACES"] = "127.0.0.1"
    return env


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel for SIGTERM when the parent dies; exit now if it already has."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    if prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent_pid:
        os._exit(1)


def _complete_lines(path: Path) -> list[str]:
    """the lines of ``path`` written whole (none if it is not there yet)"""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return text.splitlines()[: text.count("\n")]


def cpu_seconds(pid: int | None, thread: int | None = None) -> float:
    """User + system CPU time of a live process (0 if it is gone); with ``thread``, of that
    one thread of it (its main thread's id is ``pid``: an asyncio service's loop)."""
    if pid is None:
        return 0.0
    stat = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    try:
        fields = Path(stat).read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class HubProcess:
    """``python -m cli hub run`` in its own session; :meth:`stop` leaves nothing behind."""

    def __init__(
        self, root: Path, home: Path, mqtt_port: int, grpc_port: int, *, counts: bool = False
    ) -> None:
        self.root = root
        self.home = home
        self.mqtt_port = mqtt_port
        self.grpc_port = grpc_port
        self.log = root / "hub.log"
        self.popen: subprocess.Popen[bytes] | None = None
        self.counts = root / "hub-counts.jsonl" if counts else None
        """where the hub's work counters go (``bench/counting``), when asked for"""

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    def mosquitto_pid(self) -> int | None:
        try:
            return int((self.home / "broker" / "mosquitto.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def start(self) -> float:
        """Start the hub; returns the seconds until it said it was up."""
        parent = os.getpid()
        started = time.monotonic()
        with self.log.open("wb") as fh:
            self.popen = subprocess.Popen(
                [
                    sys.executable,
                    *(
                        [str(REPO / "bench" / "profile_hub.py")]
                        if os.environ.get("YIMI_BENCH_PROFILE")
                        else ["-m", "cli"]
                    ),
                    *loopback_hub_args(self.home, self.mqtt_port, self.grpc_port),
                    "--no-advertise",
                ],
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=self._env(),
                cwd=self.root,
                start_new_session=True,
                preexec_fn=lambda: die_with_parent(parent),
            )
        deadline = started + HUB_START_TIMEOUT_S
        while not hub_is_up(self.log.read_text(errors="replace")):
            if self.popen.poll() is not None:
                raise RuntimeError(f"the hub exited ({self.popen.returncode}):\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the hub did not come up in {HUB_START_TIMEOUT_S:g} s")
            time.sleep(0.05)
        return time.monotonic() - started

    def _env(self) -> dict[str, str]:
        env = child_env()
        if self.counts is not None:
            env["PYTHONPATH"] = str(REPO / "bench" / "counting") + os.pathsep + env["PYTHONPATH"]
            env[COUNTS_ENV] = str(self.counts)
        return env

    def count_snapshot(self) -> dict[str, dict[str, int]]:
        """The hub's work counters now (``counts`` only): asked for with ``SIGUSR1``, read
        once the hub has written them."""
        if self.counts is None or self.pid is None:
            raise RuntimeError("the hub was started without counts")
        seen = len(_complete_lines(self.counts))
        os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + COUNTS_TIMEOUT_S
        while len(lines := _complete_lines(self.counts)) <= seen:
            if time.monotonic() > deadline:
                raise RuntimeError("the hub wrote no counts")
            time.sleep(0.01)
        got: dict[str, dict[str, int]] = json.loads(lines[-1])
        return got

    def stop(self) -> list[str]:
        """SIGTERM (then SIGKILL) the hub's process group; make sure its mosquitto is gone."""
        warnings: list[str] = []
        popen = self.popen
        if popen is not None and popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGTERM)
            try:
                popen.wait(timeout=HUB_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                warnings.append(f"hub ignored SIGTERM for {HUB_STOP_TIMEOUT_S:g} s: killed")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(popen.pid, signal.SIGKILL)
                popen.wait(timeout=HUB_STOP_TIMEOUT_S)
        fragment = str(self.home / "broker")
        deadline = time.monotonic() + MOSQUITTO_GONE_TIMEOUT_S
        while (left := mosquitto_pids(fragment)) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in left:
            warnings.append(f"mosquitto {pid} outlived the hub: killed")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return warnings


def finish(root: Path, *, keep: bool, started: float, status: int) -> int:
    """End a bench run: no mosquitto of ``root`` may outlive it (killed and counted as a
    failure if one does), ``root`` is removed unless kept, and the run time is printed."""
    deadline = time.monotonic() + MOSQUITTO_GONE_TIMEOUT_S
    while (left := mosquitto_pids(str(root))) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:
        print(f"warning: mosquitto {pid} still running: killed", file=sys.stderr)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        status = status or 1
    if keep:
        print(f"kept {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"total run time {time.monotonic() - started:.1f} s; no mosquitto left: "
        f"{not mosquitto_pids(str(root))}"
    )
    return status
