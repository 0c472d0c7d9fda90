"""A package's manifest against its running server: ``yimi package check`` starts it.

:func:`compare` sets the tools a manifest declares against the tools its server lists:

- **missing**: declared, not offered (the server does not have it);
- **renamed**: declared, not offered, and a similar name is offered and undeclared
  (``get_curent_time`` vs ``get_current_time``: misspelt, or renamed by an upgrade);
- **extra**: offered, not declared (a tool without an effect class never reaches a model,
  and an upgrade that adds tools is noticed here);
- **refused**: a tool declared ``observe`` that its server annotates destructive
  (``destructiveHint``).

MCP's tool annotations (``readOnlyHint``, ``destructiveHint``, ``openWorldHint``) are the
server's claims about itself: :func:`suggest` turns them into a *suggested* effect class,
shown next to the declared one — never used in place of it.

Every problem is a :class:`Problem` (a stable key of :mod:`protos.errors` and its fields),
so its text exists in English and Chinese.
"""

from __future__ import annotations

import difflib
import tempfile
from dataclasses import dataclass, field
from typing import Any

from hub.capabilities.errors import CapabilityError
from hub.capabilities.host import PackageHost, ServedTool
from hub.capabilities.manifest import Manifest
from protos.errors import render

RENAME_CUTOFF = 0.75
"""how alike (difflib ratio) a declared and an offered name must be to call it a rename"""


@dataclass(frozen=True)
class Problem:
    key: str
    fields: dict[str, Any] = field(default_factory=dict)

    def text(self, lang: str = "en") -> str:
        return render(self.key, self.fields, lang=lang)


@dataclass(frozen=True)
class Suggestion:
    tool: str
    effect: str
    why: str


@dataclass(frozen=True)
class ServerCheck:
    """What :func:`compare` found; ``ok`` when there is no problem."""

    served: dict[str, ServedTool]
    missing: tuple[str, ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()
    """(declared, offered)"""
    extra: tuple[str, ...] = ()
    problems: tuple[Problem, ...] = ()
    suggestions: tuple[Suggestion, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


def suggest(t: ServedTool) -> Suggestion | None:
    """The effect class a tool's annotations point at, or ``None`` when it has none."""
    if t.read_only:
        return Suggestion(t.name, "observe", "readOnlyHint")
    if t.destructive:
        return Suggestion(t.name, "delete", "destructiveHint")
    if t.open_world:
        return Suggestion(t.name, "send", "openWorldHint: it reaches outside the home")
    if t.read_only is False:
        return Suggestion(t.name, "owner_data", "not read-only, not destructive")
    return None


def hints(t: ServedTool) -> str:
    """The annotations a server gave a tool, as MCP names them (``-`` for none)."""
    named = (
        ("readOnlyHint", t.read_only),
        ("destructiveHint", t.destructive),
        ("idempotentHint", t.idempotent),
        ("openWorldHint", t.open_world),
    )
    return ", ".join(f"{n}={str(v).lower()}" for n, v in named if v is not None) or "-"


def compare(m: Manifest, served: dict[str, ServedTool]) -> ServerCheck:
    """The manifest's tools against ``served`` (what the server lists)."""
    file = str(m.root / "plugin.json")
    declared = set(m.tools)
    offered = set(served)
    gone = sorted(declared - offered)
    new = sorted(offered - declared)
    problems: list[Problem] = []
    renamed: list[tuple[str, str]] = []
    missing: list[str] = []
    for name in gone:
        close = difflib.get_close_matches(name, new, n=1, cutoff=RENAME_CUTOFF)
        if close:
            renamed.append((name, close[0]))
            new.remove(close[0])
            problems.append(
                Problem("package.tool_renamed", {"file": file, "tool": name, "served": close[0]})
            )
        else:
            missing.append(name)
            problems.append(
                Problem(
                    "package.tool_missing",
                    {"file": file, "tool": name, "offered": ", ".join(sorted(offered)) or "none"},
                )
            )
    problems += [Problem("package.tool_extra", {"file": file, "tool": name}) for name in new]
    suggestions = []
    for name in sorted(offered):
        t = served[name]
        s = suggest(t)
        if s is not None:
            suggestions.append(s)
        spec = m.tools.get(name)
        if spec is not None and spec.effect == "observe" and t.destructive and not t.read_only:
            problems.append(Problem("package.observe_destructive", {"file": file, "tool": name}))
    return ServerCheck(
        served=served,
        missing=tuple(missing),
        renamed=tuple(renamed),
        extra=tuple(new),
        problems=tuple(problems),
        suggestions=tuple(suggestions),
    )


async def served_tools(m: Manifest, *, env: dict[str, str] | None = None) -> dict[str, ServedTool]:
    """Start ``m``'s real server (its state in a temporary folder), list its tools, stop it."""
    with tempfile.TemporaryDirectory(prefix=f"yimi-check-{m.name}-") as state:
        extra = {**(env or {}), "YIMI_STATE_DIR": state}
        async with PackageHost({m.name: m}, env_for=lambda *_: extra) as host:
            try:
                return await host.served_tools(m.name)
            except CapabilityError:
                raise
            except Exception as exc:  # the server started but its listing broke
                raise CapabilityError(
                    "package.start_failed", package=m.name, reason=f"{type(exc).__name__}: {exc}"
                ) from None


async def check_server(m: Manifest, *, env: dict[str, str] | None = None) -> ServerCheck:
    """:func:`compare` on what ``m``'s server lists now."""
    return compare(m, await served_tools(m, env=env))
