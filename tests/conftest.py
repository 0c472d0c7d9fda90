from __future__ import annotations

import compileall
from collections.abc import Iterator
from pathlib import Path

# imported here, at the top of the stack: hypothesis's pytest plugin imports it lazily in its
# terminal summary otherwise, where pytest's assertion rewriter parses it deep in the stack and
# CPython 3.11.7's parser fails ("AST constructor recursion depth mismatch"), ending a run
# without xdist with a SystemError after every test passed
import hypothesis  # noqa: F401
import pytest

from tests.mesh_harness import Mesh, mosquitto_pids

ROOT = Path(__file__).resolve().parent.parent


FILE_SECONDS: dict[str, float] = {
    "test_sandbox.py": 90,
    "test_worldlines.py": 60,
    "test_mac_executor.py": 55,
    "test_web_worldlines.py": 25,
    "test_faults.py": 138,
    "test_forget_whole.py": 75,
    "test_forget_mesh.py": 70,
    "test_archive_upkeep.py": 45,
    "test_archive_week_mesh.py": 45,
    "test_timeline_recall.py": 25,
    "test_pay_modes.py": 133,
    "test_sync_e2e.py": 114,
    "test_turns_mesh.py": 113,
    "test_vision_mesh.py": 120,
    "test_brain_mesh.py": 96,
    "test_brain_llm.py": 84,
    "test_voice_e2e.py": 77,
    "test_security_broker.py": 75,
    "test_wake.py": 70,
    "test_demo.py": 68,
    "test_security.py": 64,
    "test_understanding_mesh.py": 62,
    "test_pay_mesh.py": 54,
    "test_pay_brain.py": 50,
    "test_consent_mesh.py": 50,
    "test_security_wire.py": 48,
    "test_pairing.py": 47,
    "test_nod_mesh.py": 45,
    "test_gateway_rules.py": 42,
    "test_mcp_servers.py": 42,
    "test_schedule_mesh.py": 75,
    "test_schedule_restart.py": 32,
    "test_schedule_watches.py": 33,
    "test_web_companion.py": 125,
    "test_pay_authority.py": 38,
    "test_mesh_e2e.py": 38,
    "test_audit_witness.py": 35,
    "test_wyoming_mesh.py": 35,
    "test_package_cli.py": 28,
    "test_pay_errands.py": 25,
    "test_asr.py": 24,
    "test_package_server.py": 20,
    "test_intents.py": 23,
    "test_intent_prefilter.py": 15,
    "test_speaker.py": 23,
    "test_security_grpc.py": 22,
    "test_pay_intents.py": 22,
    "test_hub_voice.py": 22,
    "test_tls_mesh.py": 22,
    "test_provisioning.py": 21,
    "test_brain_rules.py": 20,
    "test_brain_fences.py": 19,
    "test_discovery.py": 17,
    "test_roundtrip_smoke.py": 17,
    "test_sync_replica.py": 17,
    "test_pay_phone.py": 16,
    "test_hub_service.py": 16,
    "test_home_modes.py": 13,
    "test_intent_script.py": 12,
}
"""Seconds the longest test files take on one worker (``--durations``, one file at a time, a
loaded 2-core machine, December 2026): only the order in which the workers are handed the
files — longest first — never what runs. A file not listed weighs :data:`SLOW_FILE_SECONDS`
if it has ``slow`` tests, else nothing (it keeps its place)."""
SLOW_FILE_SECONDS = 20.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist (``--dist loadfile``): the files longest first. xdist hands a worker the
    next file in this order whenever it is nearly done, so the long multi-process files
    start first and the suite ends on short ones instead of waiting for one long file that
    started late. xdist's own reordering (by number of tests per file, which put the
    long files with few tests last) is turned off in :func:`pytest_configure`. The sort is
    stable: a file's tests stay together and in order, and every worker collects the same
    order (xdist checks)."""
    if not hasattr(config, "workerinput"):
        return
    weight: dict[Path, float] = {}
    for item in items:
        w = FILE_SECONDS.get(item.path.name)
        if w is None:
            w = SLOW_FILE_SECONDS if item.get_closest_marker("slow") else 0.0
        weight[item.path] = max(weight.get(item.path, 0.0), w)
    items.sort(key=lambda item: -weight[item.path])


def pytest_configure(config: pytest.Config) -> None:
    """Compile the project's modules to ``__pycache__`` once, before any test runs (pip
    does the same for installed packages). The multi-process tests start hundreds of
    ``python -m …`` processes; where ``PYTHONDONTWRITEBYTECODE`` is set, each would
    otherwise compile every project module it imports again. Up-to-date files are
    skipped, so this costs a few seconds once and nothing after."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # the order is ours: longest files first
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
