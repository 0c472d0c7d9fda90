"""Package manifests: the built-in packages are valid; malformed ones are refused with the
field named (in-process and through ``yimi package check``)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hub.capabilities.errors import CapabilityError
from hub.capabilities.manifest import check_layout, load, parse
from tests.gateway_kit import PACKAGES
from tests.mesh_harness import env

BASE = json.loads((PACKAGES["messaging"] / "plugin.json").read_text())
TOOLS = "extensions.ai.yimi.capability.tools"


def mutate(change: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    change(data["extensions"]["ai.yimi.capability"])
    return data


def refused(data: dict[str, Any]) -> CapabilityError:
    with pytest.raises(CapabilityError) as err:
        parse(data, Path("/pkg"))
    assert err.value.key == "manifest.invalid"
    return err.value


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_builtin_and_test_packages_are_valid(name: str) -> None:
    m = load(PACKAGES[name])
    assert m.tools and m.runtime.idle_reclaim_s in (900,)
    if name != "probe":
        assert check_layout(m) == []


def test_missing_effect_is_refused_naming_the_field() -> None:
    err = refused(mutate(lambda c: c["tools"]["send_email"].pop("effect")))
    assert err.fields["field"] == f"{TOOLS}.send_email.effect"
    assert "missing" in err.fields["reason"]


def test_both_effect_and_effect_by_arg_are_refused() -> None:
    def both(c: dict[str, Any]) -> None:
        c["tools"]["send_email"]["effect_by_arg"] = {"arg": "to", "values": {"a": "send"}}

    err = refused(mutate(both))
    assert err.fields["field"] == f"{TOOLS}.send_email.effect"
    assert "exactly one" in err.fields["reason"]


def test_self_package_may_not_declare_spend_even_in_one_branch() -> None:
    def self_spend(c: dict[str, Any]) -> None:
        c["maintainer"] = "self"
        c["tools"]["send_email"]["effect"] = "spend"

    err = refused(mutate(self_spend))
    assert err.fields["field"] == f"{TOOLS}.send_email.effect" and "spend" in err.fields["reason"]

    def branch(c: dict[str, Any]) -> None:
        c["maintainer"] = "self"
        del c["tools"]["send_email"]["effect"]
        c["tools"]["send_email"]["effect_by_arg"] = {
            "arg": "mode",
            "values": {"draft": "workspace", "pay": "spend"},
        }

    err = refused(mutate(branch))
    assert err.fields["field"] == f"{TOOLS}.send_email.effect_by_arg.values"
    # a core package may declare spend
    core = mutate(lambda c: c["tools"]["send_email"].update(effect="spend"))
    assert parse(core, Path("/pkg")).tools["send_email"].effect == "spend"


def test_unknown_scope_is_refused() -> None:
    err = refused(mutate(lambda c: c["scopes"].append("root")))
    assert err.fields["field"] == "extensions.ai.yimi.capability.scopes[3]"
    assert "'root'" in err.fields["reason"]
    err = refused(mutate(lambda c: c["tools"]["find_sent"]["scopes"].append("admin")))
    assert err.fields["field"] == f"{TOOLS}.find_sent.scopes[4]"


def test_other_rules_name_their_field() -> None:
    err = refused(mutate(lambda c: c["tools"]["send_email"].update(check_with="nope")))
    assert err.fields["field"] == f"{TOOLS}.send_email.check_with"
    err = refused(mutate(lambda c: c["tools"]["send_email"].update(effect="teleport")))
    assert err.fields["field"] == f"{TOOLS}.send_email.effect"
    err = refused(mutate(lambda c: c["tools"]["send_email"].update(colour="red")))
    assert err.fields["field"] == f"{TOOLS}.send_email.colour"
    err = refused(mutate(lambda c: c.pop("receipt_version")))
    assert err.fields["field"] == "extensions.ai.yimi.capability.receipt_version"


def test_yimi_package_check(tmp_path: Path) -> None:
    def run(d: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cli", "package", "check", str(d)],
            capture_output=True,
            text=True,
            env=env(),
            timeout=60,
        )

    good = run(PACKAGES["messaging"])
    assert good.returncode == 0 and "send_email: send" in good.stdout, good.stderr
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "plugin.json").write_text(
        json.dumps(mutate(lambda c: c["tools"]["send_email"].pop("effect")))
    )
    out = run(bad)
    assert out.returncode == 1
    assert f"field {TOOLS}.send_email.effect" in out.stderr, out.stderr
    assert "no plugin.json" in run(tmp_path).stderr
