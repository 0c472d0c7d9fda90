"""A wrapper manifest for an MCP server that is already installed (``yimi package add``).

:func:`server_for` finds how to start an installed distribution's server (its console
script, run as ``${PYTHON} -m MODULE`` when the module has a ``__main__``, else through
the script's entry point) — the way the installed product starts it, in the hub's own
Python. :func:`wrapper` writes the manifest: ``receipts: "mcp"`` (the gateway writes the
receipts), ``maintainer: third_party``, and each tool the server lists with the effect
class its annotations suggest — ``owner_data`` (a card unless the owner asked) when they
say nothing. The owner reviews those effects: ``yimi package check`` shows them again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from hub.capabilities.check import suggest
from hub.capabilities.errors import CapabilityError
from hub.capabilities.host import ServedTool
from hub.capabilities.manifest import EXTENSION

DEFAULT_EFFECT = "owner_data"
"""the effect of a tool whose server says nothing about it"""
_PREFIXES = ("mcp-server-", "mcp_server_", "mcp-", "server-")
_TOOL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class InstalledServer:
    distribution: str
    version: str
    summary: str
    command: str
    args: tuple[str, ...]


def package_name(distribution: str) -> str:
    """A package name for a distribution: ``mcp-server-time`` → ``time``."""
    name = distribution.lower()
    for prefix in _PREFIXES:
        if name.startswith(prefix) and len(name) > len(prefix):
            name = name[len(prefix) :]
            break
    name = re.sub(r"[^a-z0-9_-]", "-", name).strip("-_")
    if not name or not name[0].isalpha():
        name = f"mcp-{name}".strip("-")
    return name[:32]


def server_for(distribution: str) -> InstalledServer:
    """How to start ``distribution``'s MCP server (it must be installed)."""
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        raise CapabilityError("package.not_installed", name=distribution) from None
    scripts = [ep for ep in dist.entry_points if ep.group == "console_scripts"]
    if not scripts:
        raise CapabilityError("package.no_server", name=distribution)
    wanted = distribution.lower().replace("_", "-")
    ep = next((e for e in scripts if e.name.lower() == wanted), scripts[0])
    module, _, attr = ep.value.partition(":")
    module, attr = module.strip(), attr.strip().split()[0] if attr.strip() else ""
    main_file = module.replace(".", "/") + "/__main__.py"
    has_main = any(str(f) == main_file for f in dist.files or ())
    if has_main or not attr:
        args: tuple[str, ...] = ("-m", module)
    else:
        args = ("-c", f"import sys; from {module} import {attr}; sys.exit({attr}())")
    return InstalledServer(
        distribution=dist.metadata["Name"] or distribution,
        version=dist.version,
        summary=dist.metadata["Summary"] or "",
        command="${PYTHON}",
        args=args,
    )


def effect_for(t: ServedTool) -> str:
    s = suggest(t)
    return s.effect if s is not None else DEFAULT_EFFECT


def wrapper(
    name: str,
    server: InstalledServer,
    served: dict[str, ServedTool],
    *,
    extra_args: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The ``plugin.json`` of a wrapper for ``server`` serving ``served``."""
    tools = {t: {"effect": effect_for(served[t])} for t in sorted(served) if _TOOL_NAME.match(t)}
    return {
        "name": name,
        "version": server.version[:32] or "0",
        "description": (
            server.summary or f"{server.distribution}, an MCP server wrapped by a manifest"
        )[:2000],
        "mcpServers": {
            name: {"command": server.command, "args": [*server.args, *extra_args]},
        },
        "extensions": {
            EXTENSION: {
                "schema_version": 1,
                "receipts": "mcp",
                "maintainer": "third_party",
                "runtime": {"start": "lazy", "host": "shared"},
                "scopes": ["owner"],
                "tools": tools,
            }
        },
    }
