"""numpy's BLAS runs one thread in the hub's process (models.blas): its OpenBLAS workers
busy-wait after each call, which the hub's small matrix products paid for in CPU."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

import cli.hub
import models.blas
from cli.hub import serve_hub
from provisioning.errors import ProvisioningError

REPO = Path(__file__).resolve().parent.parent

PROBE = """
import json, numpy
from threadpoolctl import threadpool_limits
import models.blas as blas
threadpool_limits(limits=2, user_api="blas")  # as on a 2-core machine, whatever this one is
before = blas.blas_threads()
blas.single_thread()
print(json.dumps({"before": before, "after": blas.blas_threads()}))
"""


def test_single_thread_limits_every_blas_library_of_the_process() -> None:
    # a process of its own: the limit is process-wide and would outlive this test
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    seen = json.loads(out.stdout)
    assert seen["before"], "numpy has a BLAS library threadpoolctl can see"
    assert models.blas.THREADS == 1
    assert seen["after"] == [1] * len(seen["before"])


def test_the_hub_process_limits_blas_before_it_loads_its_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(models.blas, "single_thread", lambda: calls.append("single_thread"))
    monkeypatch.setattr(cli.hub, "setup_logging", lambda verbose: None)
    args = argparse.Namespace(verbose=0, home=tmp_path / "no-home")
    with pytest.raises(ProvisioningError):
        serve_hub(args)
    assert calls == ["single_thread"]
