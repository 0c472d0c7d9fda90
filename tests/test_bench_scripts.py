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
