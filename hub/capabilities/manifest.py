"""Capability package manifests: ``plugin.json`` loaded, validated and typed.

A package folder holds ``plugin.json`` (generic plugin fields plus ours under
``extensions["ai.yimi.capability"]``), one or more MCP stdio servers (``mcpServers``),
``skills/*/SKILL.md``, ``fake/`` and ``tests/contract.yaml``. Any existing MCP server is
wrapped by writing only a manifest: ``mcpServers`` names its command, our extension
declares each tool's effect.

Validation is two-staged: the JSON Schema in ``manifest.schema.json`` (shapes, enums),
then the rules that link fields (below). Every refusal names the field, as a dotted path
from the top of ``plugin.json`` (``extensions.ai.yimi.capability.tools.send.effect``).

Rules beyond the schema:
- each tool declares exactly one of ``effect`` / ``effect_by_arg``;
- a ``self``-maintained (or ``third_party``) package may not declare ``spend`` or
  ``self_change``, not even in one branch of ``effect_by_arg``;
- ``check_with`` names an ``observe`` tool of the same package; ``retry: after_check``
  needs ``check_with``;
- ``target`` and ``effect_by_arg.arg`` are argument names (identifiers);
- ``runtime.server`` / ``runtime.fake`` name entries of ``mcpServers``;
- only a ``core`` package may declare ``sandbox.home`` (entries of the hub's home) or
  ``sandbox.workspace_parent``.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

from hub.capabilities.errors import CapabilityError

EXTENSION = "ai.yimi.capability"
SCHEMA_FILE = Path(__file__).with_name("manifest.schema.json")
MAX_MANIFEST_BYTES = 256 * 1024
DEFAULT_IDLE_RECLAIM_S = 900
EFFECTS = (
    "observe",
    "workspace",
    "owner_data",
    "send",
    "account",
    "delete",
    "physical",
    "spend",
    "self_change",
)
SCOPES = ("owner", "owner_uncertain", "guest", "build", "care")
SELF_FORBIDDEN = frozenset({"spend", "self_change"})
RESTRICTED_MAINTAINERS = {"self": "a self-built", "third_party": "a third-party"}
"""maintainers that may not declare :data:`SELF_FORBIDDEN` effects (how the refusal says it)"""
RECEIPTS = ("yimi", "mcp")
"""``yimi``: the tools return receipts; ``mcp``: a plain MCP server, the gateway writes them"""
_ARG_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_EXT_PATH = f"extensions.{EXTENSION}"


@dataclass(frozen=True)
class ServerSpec:
    """How to start one MCP stdio server."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None

    def resolved(self, root: Path) -> tuple[str, list[str], dict[str, str], str]:
        """(command, args, env, cwd) with ``${PYTHON}`` and ``${PACKAGE_ROOT}`` filled in."""

        def sub(text: str) -> str:
            return text.replace("${PYTHON}", sys.executable).replace("${PACKAGE_ROOT}", str(root))

        cwd = sub(self.cwd) if self.cwd else str(root)
        return sub(self.command), [sub(a) for a in self.args], {k: sub(v) for k, v in self.env}, cwd


@dataclass(frozen=True)
class ToolSpec:
    """One tool's declaration: its effect (or effect by argument) and its call rules."""

    name: str
    effect: str | None = None
    effect_arg: str | None = None
    effect_values: tuple[tuple[str, str], ...] = ()
    target: str | None = None
    task_type: str | None = None
    retry: str = "safe"
    check_with: str | None = None
    long_running: bool = False
    scopes: tuple[str, ...] | None = None
    trusted_args: tuple[str, ...] = ()
    preview: tuple[str, ...] = ()

    def effect_for(self, args: dict[str, Any]) -> str | None:
        """The effect of a call with ``args``; ``None`` when ``effect_by_arg`` has no mapping
        for the value given (such a call is blocked: there is no default guess)."""
        if self.effect is not None:
            return self.effect
        value = args.get(self.effect_arg or "")
        if not isinstance(value, str):
            return None
        return dict(self.effect_values).get(value)

    @property
    def effects(self) -> frozenset[str]:
        """Every effect this tool may have."""
        if self.effect is not None:
            return frozenset({self.effect})
        return frozenset(v for _, v in self.effect_values)


@dataclass(frozen=True)
class Runtime:
    start: str = "lazy"
    idle_reclaim_s: int = DEFAULT_IDLE_RECLAIM_S
    host: str = "shared"
    server: str = ""
    fake: str | None = None
    call_timeout_s: float = 30.0


@dataclass(frozen=True)
class Manifest:
    """A validated package manifest."""

    root: Path
    name: str
    version: str
    description: str
    maintainer: str
    schema_version: int
    receipt_version: int
    runtime: Runtime
    servers: dict[str, ServerSpec]
    scopes: tuple[str, ...]
    tools: dict[str, ToolSpec]
    secrets: tuple[str, ...] = ()
    egress: tuple[str, ...] = ()
    config: tuple[str, ...] = ()
    receipts: str = "yimi"
    """``mcp``: the gateway builds each receipt from the plain MCP result"""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def server(self) -> ServerSpec:
        return self.servers[self.runtime.server]

    @property
    def fake(self) -> ServerSpec | None:
        return self.servers[self.runtime.fake] if self.runtime.fake else None

    def tool(self, name: str) -> ToolSpec | None:
        return self.tools.get(name)


@cache
def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return data


def _refuse(file: Path | str, field_: str, reason: str) -> CapabilityError:
    return CapabilityError("manifest.invalid", file=file, field=field_, reason=reason)


def _dotted(path: Any) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _schema_error(file: Path, err: ValidationError) -> CapabilityError:
    where = _dotted(err.absolute_path)
    reason = err.message
    if err.validator == "required":
        missing = re.findall(r"'([^']+)' is a required property", err.message)
        if missing:
            where = f"{where}.{missing[0]}" if where else missing[0]
            reason = "missing (required)"
    elif err.validator == "additionalProperties":
        extra = re.findall(r"'([^']+)' was unexpected", err.message)
        if extra:
            where = f"{where}.{extra[0]}" if where else extra[0]
            reason = "unknown field"
    elif err.validator == "enum":
        reason = f"{err.instance!r} is not one of {', '.join(map(str, err.validator_value))}"
    return _refuse(file, where or "(top)", reason)


def _check_effect_choice(file: Path, data: dict[str, Any]) -> None:
    """Exactly one of effect / effect_by_arg per tool: checked first, for a precise message."""
    ext = data.get("extensions", {})
    cap = ext.get(EXTENSION) if isinstance(ext, dict) else None
    tools = cap.get("tools") if isinstance(cap, dict) else None
    if not isinstance(tools, dict):
        return
    for name, spec in tools.items():
        if not isinstance(spec, dict):
            continue
        where = f"{_EXT_PATH}.tools.{name}"
        has_effect, has_by_arg = "effect" in spec, "effect_by_arg" in spec
        if has_effect and has_by_arg:
            raise _refuse(
                file, f"{where}.effect", "a tool declares exactly one of effect or effect_by_arg"
            )
        if not has_effect and not has_by_arg:
            raise _refuse(
                file, f"{where}.effect", "missing: a tool declares effect or effect_by_arg"
            )


def validate(data: Any, file: Path) -> None:
    """Raise :class:`CapabilityError` (``manifest.invalid``) naming the first bad field."""
    if not isinstance(data, dict):
        raise _refuse(file, "(top)", "plugin.json is not a JSON object")
    _check_effect_choice(file, data)
    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), e.message))
    if errors:
        # the deepest error names the most precise field
        raise _schema_error(file, max(errors, key=lambda e: len(e.absolute_path)))
    cap = data["extensions"][EXTENSION]
    servers = data["mcpServers"]
    runtime = cap.get("runtime", {})
    for key in ("server", "fake"):
        if key in runtime and runtime[key] not in servers:
            raise _refuse(
                file, f"{_EXT_PATH}.runtime.{key}", f"{runtime[key]!r} is not in mcpServers"
            )
    if "server" not in runtime:
        real = [n for n in servers if n != runtime.get("fake")]
        if len(real) != 1:
            raise _refuse(
                file, f"{_EXT_PATH}.runtime.server", "several mcpServers: name the real one"
            )
    for key in ("home", "workspace_parent"):
        if cap.get("sandbox", {}).get(key) and cap["maintainer"] != "core":
            raise _refuse(file, f"{_EXT_PATH}.sandbox.{key}", "only a core package may declare it")
    tools = cap["tools"]
    for name, spec in tools.items():
        where = f"{_EXT_PATH}.tools.{name}"
        effects = (
            [spec["effect"]] if "effect" in spec else list(spec["effect_by_arg"]["values"].values())
        )
        who = RESTRICTED_MAINTAINERS.get(cap["maintainer"])
        if who is not None:
            bad = sorted(set(effects) & SELF_FORBIDDEN)
            if bad:
                field_ = f"{where}.effect" if "effect" in spec else f"{where}.effect_by_arg.values"
                raise _refuse(file, field_, f"{who} package may not declare {bad[0]}")
        if "effect_by_arg" in spec and not _ARG_RE.match(spec["effect_by_arg"]["arg"]):
            raise _refuse(file, f"{where}.effect_by_arg.arg", "not an argument name")
        if "target" in spec and not _ARG_RE.match(spec["target"]):
            raise _refuse(file, f"{where}.target", "not an argument name")
        check = spec.get("check_with")
        if check is not None:
            other = tools.get(check)
            if other is None:
                raise _refuse(
                    file, f"{where}.check_with", f"{check!r} is not a tool of this package"
                )
            if other.get("effect") != "observe":
                raise _refuse(file, f"{where}.check_with", f"{check!r} is not an observe tool")
        if spec.get("retry") == "after_check" and check is None:
            raise _refuse(file, f"{where}.check_with", "retry after_check needs check_with")


def parse(data: dict[str, Any], root: Path, file: Path | None = None) -> Manifest:
    """Validate and type a manifest already read from JSON."""
    file = file or root / "plugin.json"
    validate(data, file)
    cap = data["extensions"][EXTENSION]
    rt = cap.get("runtime", {})
    servers = {
        name: ServerSpec(
            name=name,
            command=s["command"],
            args=tuple(s.get("args", ())),
            env=tuple(sorted(s.get("env", {}).items())),
            cwd=s.get("cwd"),
        )
        for name, s in data["mcpServers"].items()
    }
    real = rt.get("server") or next(n for n in servers if n != rt.get("fake"))
    runtime = Runtime(
        start=rt.get("start", "lazy"),
        idle_reclaim_s=int(rt.get("idle_reclaim_s", DEFAULT_IDLE_RECLAIM_S)),
        host=rt.get("host", "shared"),
        server=real,
        fake=rt.get("fake"),
        call_timeout_s=float(rt.get("call_timeout_s", 30.0)),
    )
    tools: dict[str, ToolSpec] = {}
    for name, spec in cap["tools"].items():
        by_arg = spec.get("effect_by_arg")
        tools[name] = ToolSpec(
            name=name,
            effect=spec.get("effect"),
            effect_arg=by_arg["arg"] if by_arg else None,
            effect_values=tuple(sorted(by_arg["values"].items())) if by_arg else (),
            target=spec.get("target"),
            task_type=spec.get("task_type"),
            retry=spec.get("retry", "safe"),
            check_with=spec.get("check_with"),
            long_running=bool(spec.get("long_running", False)),
            scopes=tuple(spec["scopes"]) if "scopes" in spec else None,
            trusted_args=tuple(spec.get("trusted_args", ())),
            preview=tuple(spec.get("preview", ())),
        )
    return Manifest(
        root=root,
        name=data["name"],
        version=data["version"],
        description=data.get("description", ""),
        maintainer=cap["maintainer"],
        schema_version=cap["schema_version"],
        receipt_version=cap.get("receipt_version", 1),
        runtime=runtime,
        servers=servers,
        scopes=tuple(cap["scopes"]),
        tools=tools,
        secrets=tuple(cap.get("secrets", ())),
        egress=tuple(cap.get("egress", ())),
        config=tuple(cap.get("config", ())),
        receipts=cap.get("receipts", "yimi"),
        raw=data,
    )


def load(root: Path) -> Manifest:
    """Load ``root/plugin.json``; :class:`CapabilityError` names the first bad field."""
    root = Path(root).resolve()
    file = root / "plugin.json"
    if not file.is_file():
        raise CapabilityError("manifest.missing", path=root)
    raw = file.read_bytes()
    if len(raw) > MAX_MANIFEST_BYTES:
        raise _refuse(file, "(top)", f"larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _refuse(file, "(top)", f"not JSON: {exc}") from None
    return parse(data, root, file)


def check_layout(m: Manifest) -> list[str]:
    """What a complete package folder also needs (skills, fake, contract); problems found."""
    problems = []
    if not any(m.root.glob("skills/*/SKILL.md")):
        problems.append("skills/*/SKILL.md: no skill documented")
    if m.runtime.fake is None:
        problems.append(f"{_EXT_PATH}.runtime.fake: no fake server (contract runs on real only)")
    if not (m.root / "tests" / "contract.yaml").is_file():
        problems.append("tests/contract.yaml: missing")
    return problems
