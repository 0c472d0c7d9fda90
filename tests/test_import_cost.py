"""Processes import only what their path needs (issue 13): the multi-process tests and every
``yimi`` command pay each process's import time. The hub with the rule-based brain does not
import pydantic_ai (only an LLM endpoint for the brain role builds the LLM brain) nor the
audio decoders (only arriving audio does); ``yimi`` builds its parser (every command does,
``yimi say`` included) without numpy, and ``yimi say`` (a device's node, its voiceprint
handler included) runs without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

NOT_IMPORTED = {
    "hub.mesh.daemon": ("pydantic_ai", "soundfile", "soxr"),
    "cli.main": ("numpy", "pydantic_ai", "soundfile"),
    "edge_agent.say": ("numpy", "pydantic_ai", "soundfile"),
}


@pytest.mark.parametrize("module", sorted(NOT_IMPORTED))
def test_an_entry_point_does_not_import_what_its_path_does_not_need(module: str) -> None:
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert [m for m in NOT_IMPORTED[module] if m in out] == []


def test_yimi_builds_its_parser_without_numpy() -> None:
    """``yimi models``' choices come from :mod:`models.roles`, not the catalog (whose
    built-in models import numpy): ~0.5 s of every ``yimi`` process."""
    code = "import sys, cli.main; cli.main.build_parser(); print(' '.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert [m for m in NOT_IMPORTED["cli.main"] if m in out] == []


ROOT = Path(__file__).resolve().parent.parent
SERVERS = sorted(ROOT.glob("packages/*/*/server.py"))
"""every first-party package server, real and fake"""
HUB_SIDE = (
    "hub.gateway.gateway",
    "hub.capabilities.host",
    "hub.payments.authority",
    "hub.brain.rules",
    "hub.brain.intents.engine",
    "jsonschema",
    "hassil",
    "mcp",
)
"""what only the hub needs: a package server that imports one of these through a package's
``__init__`` pays for it at every cold start (the errands server paid ~0.17 s for the
gateway and the MCP host behind ``hub.payments.money``)"""


@pytest.mark.parametrize("server", SERVERS, ids=lambda p: "/".join(p.parts[-3:-1]))
def test_a_package_server_does_not_import_the_hubs_side(server: Path, tmp_path: Path) -> None:
    code = (
        "import runpy, sys; "
        f"runpy.run_path({str(server)!r}, run_name='import_check'); "
        "print(' '.join(sorted(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=tmp_path,  # a server may open its state where it is started
        env={**os.environ, "YIMI_STATE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)},
    ).stdout.split()
    assert "hub.capabilities.package_server" in out, "not a server?"
    assert [m for m in HUB_SIDE if m in out] == []


@pytest.mark.parametrize(
    ("package", "submodule"),
    [
        ("hub.brain", "errors"),
        ("hub.brain.intents", "text"),
        ("hub.gateway", "errors"),
        ("hub.payments", "errors"),
    ],
)
def test_a_lazy_package_gives_every_public_name_and_refuses_others(
    package: str, submodule: str
) -> None:
    """The packages whose ``__init__`` imports its names on first use
    (:mod:`hub.lazy_exports`): every name of ``__all__`` is there, the same object as in
    its module; an unknown name is an AttributeError; a submodule still imports."""
    code = f"""
import importlib, sys
pkg = importlib.import_module({package!r})
for name in pkg.__all__:
    value = getattr(pkg, name)
    assert getattr(pkg, name) is value, name
    home = getattr(value, "__module__", None)
    if home and home.startswith({package!r} + "."):
        assert getattr(sys.modules[home], name) is value, name
try:
    pkg.no_such_name
except AttributeError as exc:
    assert "no_such_name" in str(exc)
else:
    raise SystemExit("an unknown name did not raise")
from {package} import {submodule}
assert {submodule}.__name__ == {package!r} + '.{submodule}'
print("ok", len(pkg.__all__))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("ok ")
