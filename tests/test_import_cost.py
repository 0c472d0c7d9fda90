"""Processes import only what their path needs (issue 13): the multi-process tests and every
``yimi`` command pay each process's import time. The hub with the rule-based brain does not
import pydantic_ai (only an LLM endpoint for the brain role builds the LLM brain) nor the
audio decoders (only arriving audio does); ``yimi`` builds its parser (every command does,
``yimi say`` included) without numpy, and ``yimi say`` (a device's node, its voiceprint
handler included) runs without it."""

from __future__ import annotations

import subprocess
import sys

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
