"""The memory capability package: manifest, layout and its contract on fake and real."""

from __future__ import annotations

from pathlib import Path

import pytest

from hub.capabilities.contract import run_contract
from hub.capabilities.manifest import check_layout, load
from worlds.fakes import WORLDS

PACKAGE = Path(__file__).resolve().parent.parent / "packages" / "memory"


def test_manifest_declares_the_effects() -> None:
    m = load(PACKAGE)
    assert check_layout(m) == []
    effects = {name: t.effect for name, t in m.tools.items()}
    assert effects == {
        "recall": "observe",
        "show": "observe",
        "commit": "owner_data",
        "forget": "delete",
        "plan_forget": "observe",
        "forget_plan": "delete",
    }
    assert m.tools["commit"].trusted_args == ("idempotency_key",)
    assert m.tools["forget"].scopes == ("owner",)
    assert m.tools["forget_plan"].scopes == ("owner",)


@pytest.mark.slow
async def test_contract_passes_on_fake_and_real() -> None:
    report = await run_contract(PACKAGE, worlds=WORLDS)
    failed = [r for r in report.results if not r[2]]
    assert report.ok, failed
    assert {r[0] for r in report.results} == {"fake", "real"}
