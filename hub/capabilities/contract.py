"""``yimi package test DIR``: run ``tests/contract.yaml`` against the fake and the real server.

A contract lists cases; each case is a sequence of tool calls with expectations on the
receipt the package returns (checked raw — it must be a valid receipt — and after the
gateway's invariants; for a plain MCP server, ``receipts: mcp``, on the receipt the gateway
writes for it)::

    package: messaging
    needs: [smtp]                # outside-world fakes started for the real run
    cases:
      - name: send then find it
        calls:
          - tool: send_email
            args: {to: a@b.org, subject: Hi, body: x}
            expect:
              status: succeeded
              error_code: ...
              effects: [{kind: email.sent, state_in: [service_ack], target: a@b.org,
                         fields: {subject: Hi}}]
              values: [{name: ..., value: 1, unit: items}]

Every tool the manifest declares must also be served by both servers. Each variant starts
with a fresh state directory. The outside-world fakes a contract may need are handed in by
the caller (``worlds.fakes.WORLDS``: the ``yimi`` command, the tests), never imported here.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hub.capabilities.errors import CapabilityError
from hub.capabilities.host import PackageHost, ToolOutcome
from hub.capabilities.manifest import Manifest, ToolSpec, load
from hub.gateway.receipts import Receipt, enforce, mcp_receipt, parse_receipt

Worlds = Mapping[str, Callable[[], Any]]
"""name → a factory of an async context manager whose value has ``env() -> dict[str, str]``"""


@dataclass
class Report:
    package: str
    results: list[tuple[str, str, bool, str]] = field(default_factory=list)
    """(variant, case, passed, detail)"""

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r[2] for r in self.results)


def _match_effect(want: dict[str, Any], r: Receipt) -> bool:
    for e in r.effects:
        if "kind" in want and e.kind != want["kind"]:
            continue
        if "state_in" in want and e.state not in want["state_in"]:
            continue
        if "state" in want and e.state != want["state"]:
            continue
        if "target" in want and e.target != want["target"]:
            continue
        if any(str(e.fields.get(k)) != str(v) for k, v in want.get("fields", {}).items()):
            continue
        return True
    return False


def _match_value(want: dict[str, Any], r: Receipt) -> bool:
    for v in r.values:
        if "name" in want and v.name != want["name"]:
            continue
        if "unit" in want and v.unit != want["unit"]:
            continue
        if "value" in want:
            if isinstance(want["value"], int | float) and isinstance(v.value, int | float):
                if abs(float(v.value) - float(want["value"])) > 1e-9:
                    continue
            elif str(v.value) != str(want["value"]):
                continue
        return True
    return False


def check_expect(expect: dict[str, Any], r: Receipt) -> str:
    """'' if ``r`` meets ``expect``, else what differs."""
    if "status" in expect and r.status != expect["status"]:
        return f"status {r.status}, expected {expect['status']} ({r.error or r.unknowns})"
    if "error_code" in expect and r.error_code != expect["error_code"]:
        return f"error code {r.error_code!r}, expected {expect['error_code']!r}"
    for want in expect.get("effects", []):
        if not _match_effect(want, r):
            return f"no effect like {want} in {[(e.kind, e.state, e.target) for e in r.effects]}"
    for want in expect.get("values", []):
        if not _match_value(want, r):
            return f"no value like {want} in {[(v.name, v.value, v.unit) for v in r.values]}"
    return ""


def _substitute(value: Any, env: dict[str, str]) -> Any:
    """``${NAME}`` in contract arguments → the value a started world put in ``env``."""
    if isinstance(value, str):
        for k, v in env.items():
            value = value.replace("${" + k + "}", v)
        return value
    if isinstance(value, list):
        return [_substitute(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, env) for k, v in value.items()}
    return value


def load_contract(m: Manifest, worlds: Worlds) -> dict[str, Any]:
    path = m.root / "tests" / "contract.yaml"
    if not path.is_file():
        raise CapabilityError("contract.missing", path=path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise CapabilityError("contract.invalid", path=path, reason=exc) from None
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise CapabilityError("contract.invalid", path=path, reason="no list of cases")
    for need in data.get("needs", []) or []:
        if need not in worlds:
            raise CapabilityError(
                "contract.invalid",
                path=path,
                reason=f"needs {need!r}: known are {', '.join(worlds)}",
            )
    return data


async def run_variant(
    m: Manifest, contract: dict[str, Any], variant: str, report: Report, worlds: Worlds
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        state = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="yimi-contract-")))
        env: dict[str, str] = {"YIMI_STATE_DIR": str(state)}
        if variant == "real":
            for need in contract.get("needs", []) or []:
                world = await stack.enter_async_context(worlds[need]())
                env.update(world.env())
        host = await stack.enter_async_context(
            PackageHost(
                {m.name: m}, variant=variant, env_for=lambda _m, _v: env, log_dir=state / "logs"
            )
        )
        try:
            served = await host.list_tools(m.name)
        except CapabilityError as exc:
            report.results.append((variant, "(server starts)", False, str(exc)))
            return
        missing = sorted(set(m.tools) - set(served))
        report.results.append(
            (
                variant,
                "(declared tools served)",
                not missing,
                f"missing: {', '.join(missing)}" if missing else "",
            )
        )
        for case in contract["cases"]:
            detail = ""
            for i, step in enumerate(case.get("calls", [])):
                spec = m.tool(step.get("tool", ""))
                if spec is None:
                    detail = f"call {i + 1}: {step.get('tool')!r} is not declared"
                    break
                args = _substitute(dict(step.get("args") or {}), env)
                outcome = await host.call(m.name, spec.name, args)
                raw = (
                    _mcp_receipt(spec, args, outcome)
                    if m.receipts == "mcp"
                    else parse_receipt(outcome.structured)
                )
                if raw is None:
                    detail = (
                        f"call {i + 1} ({spec.name}): not a valid receipt: {outcome.text[:200]}"
                    )
                    break
                r = enforce(raw, retry=spec.retry, check_with=spec.check_with)
                problem = check_expect(step.get("expect") or {}, r)
                if problem:
                    detail = f"call {i + 1} ({spec.name}): {problem}"
                    break
            report.results.append((variant, str(case.get("name", "?")), not detail, detail))


def _mcp_receipt(spec: ToolSpec, args: dict[str, Any], outcome: ToolOutcome) -> Receipt | None:
    """The receipt the gateway writes for a plain MCP server's result (``receipts: mcp``);
    ``None`` when the call did not complete (no answer, a dead server)."""
    if outcome.error_code:
        return None
    effect = spec.effect_for(args)
    target = args.get(spec.target or "")
    return mcp_receipt(
        outcome.structured,
        outcome.text,
        is_error=outcome.is_error,
        effect=effect or "",
        tool=spec.name,
        target=target if isinstance(target, str) else "",
    )


async def run_contract(
    root: Path, *, worlds: Worlds, variants: tuple[str, ...] = ("fake", "real")
) -> Report:
    m = load(root)
    contract = load_contract(m, worlds)
    report = Report(m.name)
    for variant in variants:
        if variant == "fake" and m.fake is None:
            report.results.append(("fake", "(fake server)", True, "no fake declared: skipped"))
            continue
        await run_variant(m, contract, variant, report, worlds)
    return report
