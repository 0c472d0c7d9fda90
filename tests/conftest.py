from __future__ import annotations

import compileall
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mesh_harness import Mesh, mosquitto_pids

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    """Compile the project's modules to ``__pycache__`` once, before any test runs (pip
    does the same for installed packages). The multi-process tests start hundreds of
    ``python -m …`` processes; where ``PYTHONDONTWRITEBYTECODE`` is set, each would
    otherwise compile every project module it imports again. Up-to-date files are
    skipped, so this costs a few seconds once and nothing after."""
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller has compiled them
    for folder in sorted(ROOT.iterdir()):
        if folder.is_dir() and not folder.name.startswith("."):  # not .venv, .git, caches
            compileall.compile_dir(folder, quiet=1)


@pytest.fixture
def mesh(tmp_path: Path) -> Iterator[Mesh]:
    """A fresh home on free loopback ports; every process it started is gone afterwards."""
    m = Mesh(tmp_path)
    m.init()
    try:
        yield m
    finally:
        m.close()
        assert mosquitto_pids(str(tmp_path)) == [], "a mosquitto was left behind"


def _dump_tasks(signum: int, _frame: object) -> None:
    """SIGUSR1: print every asyncio task's stack to stderr (to see where a test hangs)."""
    import asyncio
    import sys

    loop = asyncio._get_running_loop()
    if loop is None:
        print("no running event loop", file=sys.stderr)
        return
    for task in asyncio.all_tasks(loop):
        print(f"--- {task!r}", file=sys.stderr)
        awaited: object = task.get_coro()
        for _ in range(64):  # the chain of awaits, outermost first
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is None:
                if awaited is not None:
                    print(f"    awaiting {awaited!r:.300}", file=sys.stderr)
                break
            code = frame.f_code
            print(f"    {code.co_filename}:{frame.f_lineno} {code.co_name}", file=sys.stderr)
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    sys.stderr.flush()


try:
    import signal as _signal

    _signal.signal(_signal.SIGUSR1, _dump_tasks)
except (ValueError, OSError):  # not the main thread
    pass


DUMP_BEFORE_TIMEOUT = 20.0
"""seconds before pytest-timeout's limit at which a running test's asyncio tasks are printed"""


@pytest.fixture(autouse=True)
def _tasks_printed_before_timeout(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test about to hit pytest-timeout prints every asyncio task's stack first (to
    stderr, shown with the failure): pytest-timeout prints threads only, and a hung
    async test's threads show an idle event loop."""
    import os
    import signal
    import threading

    marker = request.node.get_closest_marker("timeout")
    if marker and marker.args:
        limit = float(marker.args[0])
    else:
        config = request.config
        limit = float(config.getoption("timeout", None) or config.getini("timeout") or 0)
    if limit <= DUMP_BEFORE_TIMEOUT or threading.current_thread() is not threading.main_thread():
        yield
        return
    timer = threading.Timer(limit - DUMP_BEFORE_TIMEOUT, os.kill, (os.getpid(), signal.SIGUSR1))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()
