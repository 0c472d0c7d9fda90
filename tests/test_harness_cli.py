"""The harness's ``yimi`` commands (tests/mesh_harness.py ``run_cli``: forked from a server
that imported the CLI once) behave as ``python -m cli``: the same status, output, error text
in the asked language, folder and environment; a command over its time is killed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.mesh_harness import REPO, env, run_cli


def exec_cli(
    args: list[str], environ: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        capture_output=True,
        text=True,
        env=environ,
        cwd=cwd,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "lang"),
    [
        (["--help"], "en"),
        (["device", "add", "--home", "nohome", "--profile", "nosuch", "--name", "x"], "zh"),
        (["device", "add", "--home", "nohome", "--profile", "nosuch", "--name", "x"], "en"),
        (["no-such-command"], "en"),
    ],
)
def test_a_forked_command_is_the_command(tmp_path: Path, args: list[str], lang: str) -> None:
    environ = {**env(), "YIMI_LANG": lang}
    forked = run_cli(args, env=environ, cwd=tmp_path, timeout=60)
    fresh = exec_cli(args, environ, tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )
    assert forked.stdout or forked.stderr
    assert list(tmp_path.iterdir()) == []  # its output files are gone


def test_a_forked_command_runs_in_its_folder(tmp_path: Path) -> None:
    r = run_cli(
        ["home", "init", "--home", "rel-home", "--mqtt-port", "1", "--grpc-port", "2"],
        env=env(),
        cwd=tmp_path,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "rel-home" / "home.yaml").is_file()
    assert not (REPO / "rel-home").exists()


def test_a_forked_command_over_its_time_is_killed(tmp_path: Path) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli(
            ["say", "--bundle", str(tmp_path / "none"), "hi"], env=env(), cwd=tmp_path, timeout=0.01
        )
    assert list(tmp_path.iterdir()) == []
