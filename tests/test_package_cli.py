"""``yimi package test``: each built-in package's contract passes on its fake and on its
real server, both sandboxed (local SMTP server; mosquitto with Home Assistant-style devices;
the Mac's executor behind a local socket; a temporary workspace); a contract that does not
hold fails the command."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gateway_kit import PACKAGES, REPO
from tests.mesh_harness import env

pytestmark = pytest.mark.slow


def package_test(d: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", "package", "test", str(d)],
        capture_output=True,
        text=True,
        env=env(),
        timeout=240,
    )


@pytest.mark.parametrize("name", ["messaging", "home", "mac", "worldlines"])
def test_builtin_contracts_pass_on_fake_and_real(name: str) -> None:
    out = package_test(REPO / "packages" / name)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[fake]" in out.stdout and "[real]" in out.stdout
    assert out.stdout.strip().endswith(" 0 failed"), out.stdout


def test_a_broken_contract_fails(tmp_path: Path) -> None:
    pkg = tmp_path / "probe"
    shutil.copytree(PACKAGES["probe"], pkg)
    (pkg / "tests" / "contract.yaml").write_text(
        "package: probe\ncases:\n  - name: wrong\n    calls:\n"
        "      - tool: unitless\n        expect: {values: [{name: temperature, unit: K}]}\n"
    )
    out = package_test(pkg)
    assert out.returncode == 1
    assert "FAIL [real] wrong" in out.stdout and "FAIL [fake] wrong" in out.stdout
