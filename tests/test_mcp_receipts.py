"""Plain MCP servers as packages, without processes: the receipts the gateway writes for
them (``receipts: "mcp"``), what the model reads of them, the manifest fields, the
comparison of a manifest with a server's tool list, and ``packages.yaml``."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hub.brain.fences import render_receipt
from hub.capabilities.check import compare, suggest
from hub.capabilities.errors import CapabilityError
from hub.capabilities.host import ServedTool
from hub.capabilities.manifest import load, parse
from hub.capabilities.settings import (
    BUILTIN_PACKAGES,
    add_package,
    builtin_packages,
    ensure_new,
    load_enabled,
    only,
    package_settings,
    read_settings,
)
from hub.capabilities.wrap import package_name, server_for
from hub.gateway.receipts import MAX_OUTPUT, MCP_TOOL_ERROR, enforce, mcp_receipt
from protos.errors import render
from tests.gateway_kit import REPO

TIME = REPO / "tests" / "packages" / "mcp_time"
GIT = REPO / "tests" / "packages" / "mcp_git"
BUILTINS = sorted(p.name for p in builtin_packages())


# ---------------------------------------------------------------- receipts
def test_is_error_is_failed_with_the_servers_text() -> None:
    r = mcp_receipt(
        None, "Invalid timezone: 'Mars/Olympus'", is_error=True, effect="observe", tool="t"
    )
    assert r.status == "failed" and r.error_code == MCP_TOOL_ERROR
    assert r.error == "Invalid timezone: 'Mars/Olympus'"
    assert enforce(r, retry="safe", check_with=None).status == "failed"


def test_observe_success_is_succeeded_with_nothing_to_verify() -> None:
    out = {"timezone": "Europe/Lisbon", "datetime": "2026-12-01T15:46:04+00:00"}
    r = mcp_receipt(out, json.dumps(out), is_error=False, effect="observe", tool="get_time")
    assert r.status == "succeeded" and r.effects == () and not r.violations
    assert json.loads(r.output) == out


def test_effectful_success_is_a_service_ack_never_verified() -> None:
    r = mcp_receipt(
        None,
        "Changes committed",
        is_error=False,
        effect="owner_data",
        tool="git_commit",
        target="/r",
    )
    assert r.status == "succeeded"
    assert [(e.kind, e.state, e.target) for e in r.effects] == [("git_commit", "service_ack", "/r")]
    # service_ack counts as confirmed: the gateway's invariants keep it succeeded
    assert enforce(r, retry="forbidden", check_with=None).status == "succeeded"


def test_structured_content_reaches_the_model_whole_up_to_a_size() -> None:
    big = {"rows": [{"n": i, "text": "x" * 40} for i in range(100)]}  # ~6 kB of JSON
    r = mcp_receipt(big, "", is_error=False, effect="observe", tool="rows")
    assert json.loads(r.output) == big
    from dataclasses import replace

    shown = render_receipt(replace(r, package="p", tool="rows"))
    assert '"n": 99' in shown, "nothing cut at 300 (or 4000) characters"
    huge = {"blob": "y" * (MAX_OUTPUT * 2)}
    cut = mcp_receipt(huge, "", is_error=False, effect="observe", tool="blob").output
    assert len(cut) == MAX_OUTPUT and cut.endswith(f"[cut at {MAX_OUTPUT} characters]")


def test_a_receipts_own_json_echo_is_still_not_repeated_to_the_model() -> None:
    from hub.gateway.receipts import Receipt

    echo = json.dumps({"receipt_version": 1, "status": "succeeded"})
    shown = render_receipt(Receipt(status="succeeded", package="p", tool="t", output=echo))
    assert "output:" not in shown


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(
    structured=json_values | st.binary(max_size=20),
    text=st.text(max_size=200) | st.none(),
    is_error=st.booleans(),
    effect=st.sampled_from(["observe", "workspace", "owner_data", "send", "delete"]),
)
def test_fuzz_a_plain_result_never_raises_nor_claims_verified(
    structured: Any, text: Any, is_error: bool, effect: str
) -> None:
    r = mcp_receipt(structured, text, is_error=is_error, effect=effect, tool="t")
    assert r.status == ("failed" if is_error else "succeeded")
    assert all(e.state == "service_ack" for e in r.effects)
    assert len(r.output) <= MAX_OUTPUT


# ---------------------------------------------------------------- manifests
def test_third_party_wrappers_load_without_a_receipt_version() -> None:
    for root in (TIME, GIT):
        m = load(root)
        assert (m.maintainer, m.receipts) == ("third_party", "mcp")
    assert load(BUILTIN_PACKAGES / "messaging").receipts == "yimi"


def test_a_third_party_package_may_not_declare_spend() -> None:
    data = json.loads((TIME / "plugin.json").read_text())
    data["extensions"]["ai.yimi.capability"]["tools"]["convert_time"]["effect"] = "spend"
    with pytest.raises(CapabilityError) as err:
        parse(data, TIME)
    assert "third-party package may not declare spend" in str(err.value)


def test_yimi_receipts_still_need_their_version() -> None:
    data = json.loads((TIME / "plugin.json").read_text())
    del data["extensions"]["ai.yimi.capability"]["receipts"]
    with pytest.raises(CapabilityError) as err:
        parse(data, TIME)
    assert err.value.fields["field"] == "extensions.ai.yimi.capability.receipt_version"


# ---------------------------------------------------------------- manifest vs server
def served(**tools: dict[str, Any]) -> dict[str, ServedTool]:
    return {n: ServedTool(n, **kw) for n, kw in tools.items()}


def test_missing_extra_and_renamed_tools_are_named() -> None:
    m = load(TIME)
    ok = compare(m, served(get_current_time={"read_only": True}, convert_time={}))
    assert ok.ok
    bad = compare(m, served(get_current_tim={}, timezones={}))
    assert bad.renamed == (("get_current_time", "get_current_tim"),)
    assert bad.missing == ("convert_time",) and bad.extra == ("timezones",)
    keys = sorted(p.key for p in bad.problems)
    assert keys == ["package.tool_extra", "package.tool_missing", "package.tool_renamed"]
    text = next(p for p in bad.problems if p.key == "package.tool_renamed").text()
    assert "'get_current_time'" in text and "'get_current_tim'" in text
    assert "拼错" in next(p for p in bad.problems if p.key == "package.tool_renamed").text("zh")


def test_observe_on_a_tool_annotated_destructive_is_refused() -> None:
    m = load(TIME)
    r = compare(m, served(get_current_time={"destructive": True}, convert_time={}))
    assert [p.key for p in r.problems] == ["package.observe_destructive"]
    # no annotation at all is no claim: an observe declaration stands
    assert compare(m, served(get_current_time={}, convert_time={})).ok


def test_annotations_suggest_an_effect_class() -> None:
    def s(**kw: Any) -> str | None:
        got = suggest(ServedTool("t", **kw))
        return got.effect if got else None

    assert s(read_only=True) == "observe"
    assert s(read_only=False, destructive=True) == "delete"
    assert s(read_only=False, destructive=False, open_world=True) == "send"
    assert s(read_only=False, destructive=False) == "owner_data"
    assert s() is None


# ---------------------------------------------------------------- packages.yaml
def test_no_file_runs_every_builtin(tmp_path: Path) -> None:
    assert sorted(package_settings(tmp_path)) == BUILTINS


def test_the_file_adds_and_configures_and_disables_only_explicitly(tmp_path: Path) -> None:
    (tmp_path / "packages.yaml").write_text(
        yaml.safe_dump(
            {
                "messaging": {"config": {"SMTP_HOST": "mail.test"}},
                "mac": {"enabled": False},
                "time": {"path": str(TIME)},
            }
        )
    )
    got = package_settings(tmp_path)
    assert sorted(got) == sorted({*BUILTINS, "time"} - {"mac"})
    assert got["messaging"]["config"] == {"SMTP_HOST": "mail.test"}
    assert read_settings(tmp_path)["mac"].enabled is False
    catalog, _ = load_enabled(tmp_path)
    assert sorted(catalog) == sorted(got)


def test_only_is_exactly_the_packages_named(tmp_path: Path) -> None:
    (tmp_path / "packages.yaml").write_text(yaml.safe_dump(only({"memory": {}})))
    assert sorted(package_settings(tmp_path)) == ["memory"]


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"mac": {"enable": False}}, "mac.enable: unknown field"),
        ({"mac": {"enabled": "no"}}, "mac.enabled: 'no' is not true or false"),
        ({"weather": {}}, "weather: not a built-in package: give its path"),
        ({"mac": ["x"]}, "mac: not a mapping"),
    ],
)
def test_a_wrong_entry_is_refused_naming_it(
    tmp_path: Path, entry: dict[str, Any], says: str
) -> None:
    (tmp_path / "packages.yaml").write_text(yaml.safe_dump(copy.deepcopy(entry)))
    with pytest.raises(CapabilityError) as err:
        read_settings(tmp_path)
    assert err.value.key == "packages.invalid" and says in str(err.value)
    assert "packages.yaml" in err.value.text("zh")


def test_every_new_error_key_has_chinese() -> None:
    from protos.errors import MESSAGES, MESSAGES_ZH

    for key in MESSAGES_ZH:
        assert key in MESSAGES, key
    fields = {"file": "f", "tool": "t", "served": "s", "offered": "o", "package": "p"}
    assert render("package.tool_extra", fields, lang="zh") != render("package.tool_extra", fields)


def test_adding_keeps_the_owners_file_and_a_name_is_added_once(tmp_path: Path) -> None:
    (tmp_path / "packages.yaml").write_text("# my packages\nmac:\n  enabled: false\n")
    add_package(tmp_path, "time", {"path": str(TIME)})
    text = (tmp_path / "packages.yaml").read_text()
    assert text.startswith("# my packages\nmac:\n  enabled: false\n"), text
    assert yaml.safe_load(text) == {"mac": {"enabled": False}, "time": {"path": str(TIME)}}
    (tmp_path / "packages.yaml").write_text('{"memory": {}}')  # JSON, as the demo writes it
    add_package(tmp_path, "time", {"path": str(TIME)})
    assert yaml.safe_load((tmp_path / "packages.yaml").read_text()) == {
        "memory": {},
        "time": {"path": str(TIME)},
    }
    for name in ("time", "messaging"):
        with pytest.raises(CapabilityError) as err:
            ensure_new(tmp_path, name)
        assert err.value.key == "package.exists"


def test_a_server_that_is_not_installed_is_named() -> None:
    with pytest.raises(CapabilityError) as err:
        server_for("no-such-mcp-server")
    assert "install the MCP server first (pip install no-such-mcp-server)" in str(err.value)
    assert package_name("mcp-server-time") == "time" and package_name("mcp-git") == "git"
