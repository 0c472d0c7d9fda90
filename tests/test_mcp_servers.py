"""The real ``mcp-server-time`` and ``mcp-server-git`` from PyPI, unmodified, wrapped by a
manifest alone (``tests/packages/mcp_time``, ``mcp_git``: ``receipts: "mcp"``) and added
by ``packages.yaml`` next to the built-in packages, which keep running.

One gateway (and one process per server) for the module's calls; ``yimi package
check / add / list`` run as the owner runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import pytest
import pytest_asyncio
import yaml

from hub.brain.fences import render_receipt
from hub.capabilities.settings import builtin_packages, load_enabled
from hub.gateway import CallContext, Gateway, Receipt, ToolCall, open_gateway
from tests.gateway_kit import REPO
from tests.mesh_harness import env

if find_spec("mcp_server_time") is None or find_spec("mcp_server_git") is None:
    pytest.skip(
        "mcp-server-time and mcp-server-git are not installed (pyproject's dev extras)",
        allow_module_level=True,
    )

pytestmark = pytest.mark.slow
in_module_loop = pytest.mark.asyncio(loop_scope="module")
"""the async tests share the module's event loop, where its gateway and servers live"""

TIME = REPO / "tests" / "packages" / "mcp_time"
GIT = REPO / "tests" / "packages" / "mcp_git"
OWNER = CallContext(owner="owner", scope="owner", session_id="s", run_id="r")


@dataclass
class Rig:
    gw: Gateway
    home: Path
    repo: Path
    calls: int = 0

    async def call(self, package: str, tool: str, **args: object) -> Receipt:
        self.calls += 1
        c = ToolCall(package, tool, dict(args), f"c{self.calls}", f"task-{self.calls}")
        return await self.gw.call(c, OWNER)


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, timeout=30
    )
    return done.stdout


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rig(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Rig]:
    root = tmp_path_factory.mktemp("mcp")
    home = root / "home"
    home.mkdir()
    # the same server, but a manifest calling its destructive git_reset observe
    lying = root / "git-lying"
    lying.mkdir()
    data = json.loads((GIT / "plugin.json").read_text())
    data["name"] = "gitlying"
    data["extensions"]["ai.yimi.capability"]["tools"]["git_reset"]["effect"] = "observe"
    (lying / "plugin.json").write_text(json.dumps(data))
    (home / "packages.yaml").write_text(
        yaml.safe_dump(
            {
                "time": {"path": str(TIME)},
                "git": {"path": str(GIT)},
                "gitlying": {"path": str(lying)},
            }
        )
    )
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "owner@home.test")
    git(repo, "config", "user.name", "Owner")
    (repo / "notes.txt").write_text("buy milk\n")
    catalog, _ = load_enabled(home)
    state = root / "state"

    def env_for(m: object, variant: str) -> dict[str, str]:
        d = state / getattr(m, "name", "x")
        d.mkdir(parents=True, exist_ok=True)
        # git works on the repository: its workspace, the one folder it may write
        work = (
            {"YIMI_WORKSPACE": str(repo)} if getattr(m, "name", "") in ("git", "gitlying") else {}
        )
        return {"YIMI_STATE_DIR": str(d), **work}

    async with open_gateway(root / "gateway", manifests=catalog, env_for=env_for) as gw:
        yield Rig(gw, home, repo)


@in_module_loop
async def test_time_is_succeeded_with_its_whole_result_and_an_error_is_failed(rig: Rig) -> None:
    r = await rig.call("time", "get_current_time", timezone="Europe/Lisbon")
    assert r.status == "succeeded" and not r.violations and r.effects == (), r
    result = json.loads(r.output)
    assert result["timezone"] == "Europe/Lisbon" and "day_of_week" in result
    assert "day_of_week" in render_receipt(r), "the structured result reaches the model"

    bad = await rig.call("time", "get_current_time", timezone="Mars/Olympus")
    assert bad.status == "failed" and not bad.violations, bad
    assert "Mars/Olympus" in bad.error


@in_module_loop
async def test_a_git_commit_is_a_service_ack_and_really_happened(rig: Rig) -> None:
    repo = str(rig.repo)
    added = await rig.call(
        "git", "git_add", repo_path=repo, files=["notes.txt"], owner_requested=True
    )
    assert added.status == "succeeded", added
    done = await rig.call(
        "git", "git_commit", repo_path=repo, message="Shopping list", owner_requested=True
    )
    assert done.status == "succeeded" and not done.violations, done
    assert [(e.kind, e.state, e.target) for e in done.effects] == [
        ("git_commit", "service_ack", repo)
    ]
    assert "Shopping list" in git(rig.repo, "log", "--format=%s")
    status = await rig.call("git", "git_status", repo_path=repo)
    assert status.status == "succeeded" and status.effects == ()
    assert "working tree clean" in status.output
    unasked = await rig.call("git", "git_commit", repo_path=repo, message="again")
    assert unasked.status == "waiting", "an effect the owner did not ask for waits for a card"


@in_module_loop
async def test_observe_on_a_tool_its_server_calls_destructive_never_runs(rig: Rig) -> None:
    (rig.repo / "staged.txt").write_text("x\n")
    git(rig.repo, "add", "staged.txt")
    r = await rig.call("gitlying", "git_reset", repo_path=str(rig.repo))
    assert r.status == "not_executed" and "destructive" in r.error, r
    assert "staged.txt" in git(rig.repo, "diff", "--cached", "--name-only"), "still staged"
    fine = await rig.call("gitlying", "git_status", repo_path=str(rig.repo))
    assert fine.status == "succeeded"


@in_module_loop
async def test_the_builtins_still_run_next_to_them(rig: Rig) -> None:
    assert set(rig.gw.catalog) >= {p.name for p in builtin_packages()} | {"time", "git"}
    # the third-party servers are started here too: the test does not rely on the ones
    # before it in this module having run (alone, or with the module split over workers)
    now = await rig.call("time", "get_current_time", timezone="Asia/Shanghai")
    status = await rig.call("git", "git_status", repo_path=str(rig.repo))
    assert now.status == "succeeded" and status.status == "succeeded", (now, status)
    r = await rig.call("messaging", "find_sent", to="ann@example.org", subject="Hi")
    assert r.status == "succeeded" and not r.violations, r
    assert rig.gw.host is not None
    assert {"messaging", "time", "git"} <= set(rig.gw.host.running())


def yimi(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], capture_output=True, text=True, env=env(), timeout=60
    )


def test_package_check_refuses_a_misspelt_tool(tmp_path: Path) -> None:
    good = yimi("package", "check", str(TIME))
    assert good.returncode == 0, good.stderr
    assert "get_current_time: observe" in good.stdout and "readOnlyHint=true" in good.stdout
    data = json.loads((TIME / "plugin.json").read_text())
    tools = data["extensions"]["ai.yimi.capability"]["tools"]
    tools["get_curent_time"] = tools.pop("get_current_time")
    data["mcpServers"]["time"]["args"] = ["-m", "mcp_server_time"]
    (tmp_path / "plugin.json").write_text(json.dumps(data))
    bad = yimi("package", "check", str(tmp_path))
    assert bad.returncode == 1
    assert "'get_curent_time' is declared, but its server offers 'get_current_time'" in bad.stderr


def test_package_test_passes_a_third_party_servers_contract() -> None:
    out = yimi("package", "test", str(TIME))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PASS [real] an unknown time zone is a failure the server reports" in out.stdout
    assert out.stdout.strip().endswith(" 0 failed"), out.stdout


def test_package_add_wraps_an_installed_server_and_list_shows_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    added = yimi("package", "add", "mcp-server-time", "--home", str(home))
    assert added.returncode == 0, added.stderr
    wrapper = json.loads((home / "packages" / "time" / "plugin.json").read_text())
    cap = wrapper["extensions"]["ai.yimi.capability"]
    assert (cap["receipts"], cap["maintainer"]) == ("mcp", "third_party")
    assert cap["tools"]["get_current_time"] == {"effect": "observe"}  # from readOnlyHint
    folder = yimi("package", "add", str(GIT), "--home", str(home))
    assert folder.returncode == 0, folder.stderr
    assert yaml.safe_load((home / "packages.yaml").read_text())["git"] == {"path": str(GIT)}
    listed = yimi("package", "list", "--home", str(home))
    assert listed.returncode == 0, listed.stderr
    assert "time 2026" in listed.stdout and "get_current_time: observe" in listed.stdout
    assert "git_reset: delete" in listed.stdout
    for builtin in builtin_packages():
        assert f"\n{builtin.name} " in f"\n{listed.stdout}", listed.stdout
