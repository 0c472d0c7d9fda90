"""Every benchmark under ``bench/`` runs as the README says — ``.venv/bin/python
bench/NAME.py`` from any folder — and offers ``--quick``, its smoke run.

A bench that only worked as ``python -m bench.NAME`` from the checkout (``bench/grpc_flood.py``
did) fails its first reader; a bench without ``--quick`` cannot be smoke-run alongside the
others. ``--help`` imports the whole script without running it, so this stays fast.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
HELPERS = {"profile_hub.py"}
"""scripts under bench/ that are tools for the benches, not benches"""
SCRIPTS = sorted(
    p.name
    for p in BENCH.glob("*.py")
    if p.name not in HELPERS and 'if __name__ == "__main__":' in p.read_text(encoding="utf-8")
)


def test_the_benches_are_found() -> None:
    assert {"mesh_roundtrip.py", "gateway.py", "grpc_flood.py", "memory_recall.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_bench_runs_as_a_script_and_has_a_quick_run(name: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / name), "--help"],
        cwd=tmp_path,  # not the checkout: the script finds its own packages
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--quick" in done.stdout


COUNTING = r"""
import os, signal, sys, apsw
conn = apsw.Connection(sys.argv[1])
conn.execute("CREATE TABLE t (x)")
for i in range(3):
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO t VALUES (?)", (i,))
    conn.execute("COMMIT")
fd = os.open(sys.argv[1], os.O_RDONLY)
os.fdatasync(fd)
os.close(fd)
if signal.getsignal(signal.SIGUSR1) is not signal.SIG_DFL:  # the counters' snapshot
    signal.raise_signal(signal.SIGUSR1)
conn.execute("SELECT count(*) FROM t").fetchall()
"""


@pytest.mark.parametrize("argv", [["hub", "run"], ["edge", "run"]])
def test_the_hub_work_counters_count_only_in_a_hub(argv: list[str], tmp_path: Path) -> None:
    """``bench/counting`` on ``PYTHONPATH`` (what ``mesh_roundtrip.py --counts`` gives the
    hub): in a ``hub run`` process every SQL statement by database, its ``BEGIN``s and the
    syncs are counted and written as a JSON line on SIGUSR1 and at exit; any other process
    is left alone."""
    import json
    import os

    out = tmp_path / "counts.jsonl"
    env = dict(os.environ, YIMI_BENCH_COUNTS=str(out))
    env["PYTHONPATH"] = str(BENCH / "counting") + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", COUNTING, str(tmp_path / "w.db"), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    if argv[0] != "hub":
        assert not out.exists()
        return
    at_signal, at_exit = (json.loads(line) for line in out.read_text().splitlines())
    assert at_signal["statements"] == {"w.db": 10} and at_signal["begins"] == {"w.db": 3}
    assert at_signal["syncs"] == {"fdatasync": 1}
    assert at_exit["statements"] == {"w.db": 11}
