"""``yimi`` ends without the interpreter's teardown (:func:`cli.common.exit_now`), and still
delivers everything a normal exit would: its status, the whole of a piped stdout, its
logging, what atexit handlers do, and a non-daemon thread's work (joined first)."""

from __future__ import annotations

import subprocess
import sys

from tests.mesh_harness import REPO, env


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=env(),
        cwd=REPO,
    )


def test_status_piped_output_logging_and_atexit_survive() -> None:
    r = run(
        "import atexit, logging, sys\n"
        "from cli.common import exit_now\n"
        "logging.basicConfig(stream=sys.stderr)\n"
        "atexit.register(lambda: print('atexit ran', file=sys.stderr))\n"
        "logging.getLogger('t').warning('logged')\n"
        "print('x' * 200_000, end='')\n"
        "exit_now(3)\n"
    )
    assert r.returncode == 3
    assert r.stdout == "x" * 200_000
    assert "logged" in r.stderr and "atexit ran" in r.stderr


def test_a_live_non_daemon_thread_is_joined() -> None:
    r = run(
        "import threading\n"
        "from cli.common import exit_now\n"
        "go = threading.Event()\n"
        "def work():\n"
        "    go.wait(30)\n"
        "    print('thread done', flush=True)\n"
        "threading.Thread(target=work).start()\n"
        "go.set()\n"
        "exit_now(0)\n"
    )
    assert r.returncode == 0 and r.stdout == "thread done\n", r


def test_yimi_ends_with_its_handlers_status_and_message() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "cli", "timeline", "--bundle", "/nonexistent/bundle"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env(),
        cwd=REPO,
    )
    assert r.returncode == 1 and "no device bundle in /nonexistent/bundle" in r.stderr, r
