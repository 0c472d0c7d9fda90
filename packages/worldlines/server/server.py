"""worldlines: the owner's workspace (``YIMI_WORKSPACE``) forked, diffed, committed.

The tools are :class:`storage.worldlines.Worldlines`' operations (``fork`` with
``count: 2`` takes two forks from one base: "show me two versions"); ``commit`` and
``rollback`` change the owner's files (``owner_data``: the gateway asks the owner unless
they asked for it). ``--fake`` serves the same tools on a workspace of its own under
``YIMI_STATE_DIR`` (seeded with one file), never the owner's.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hub.capabilities.package_sdk import receipt
from hub.capabilities.package_server import MCPServer
from storage.worldlines import WorldlineError, Worldlines

FAKE = "--fake" in sys.argv
mcp = MCPServer("worldlines-fake" if FAKE else "worldlines")
MAX_DIFF = 16_000


def _lines() -> Worldlines | None:
    if FAKE:
        ws = Path(os.environ.get("YIMI_STATE_DIR", ".")) / "fake-workspace" / "ws"
        if not ws.exists():
            ws.mkdir(parents=True)
            (ws / "notes.txt").write_text("buy milk\n")
        return Worldlines(ws)
    where = os.environ.get("YIMI_WORKSPACE")
    return Worldlines(Path(where)) if where else None


def _failed(exc: WorldlineError) -> dict[str, Any]:
    return receipt("failed", error=(exc.code, exc.text()))


NO_WORKSPACE = receipt("failed", error=("NO_WORKSPACE", "no workspace is configured (WORKSPACE)"))


@mcp.tool()
def fork(label: str = "", count: int = 1) -> dict[str, Any]:
    """Fork the owner's workspace: the change is tried on the fork, the workspace untouched.
    ``count`` > 1 ("show me two versions"): that many forks from the same base."""
    w = _lines()
    if w is None:
        return NO_WORKSPACE
    try:
        made = w.fork_many(count, label)
    except WorldlineError as exc:
        return _failed(exc)
    effects = [
        {
            "kind": "worldline.forked",
            "state": "verified",
            "target": f.id,
            "fields": {
                "id": f.id,
                "base": f.base,
                "method": f.method,
                "path": str(w.path(f.id)),
                "label": f.label,
            },
        }
        for f in made
    ]
    return receipt("succeeded", effects=effects)


@mcp.tool()
def list() -> dict[str, Any]:
    """The open and kept forks, and the commits that can be rolled back."""
    w = _lines()
    if w is None:
        return NO_WORKSPACE
    effects = [
        {
            "kind": "worldline.fork",
            "state": "verified",
            "target": f.id,
            "fields": {
                "status": f.status,
                "base": f.base,
                "label": f.label,
                "stale": f.base != w.generation,
            },
        }
        for f in w.forks()
    ] + [
        {
            "kind": "worldline.commit",
            "state": "verified",
            "target": c.id,
            "fields": {"generation": c.generation, "rollback_of": c.rollback_of},
        }
        for c in w.history()
    ]
    return receipt("succeeded", effects=effects)


@mcp.tool()
def show(id: str) -> dict[str, Any]:
    """A fork's diff against the current workspace: files added, changed, removed."""
    w = _lines()
    if w is None:
        return NO_WORKSPACE
    try:
        d = w.diff(id)
    except WorldlineError as exc:
        return _failed(exc)
    fields = {
        "added": ", ".join(d.added),
        "changed": ", ".join(d.changed),
        "removed": ", ".join(d.removed),
        "diff": d.text[:MAX_DIFF],
    }
    return receipt(
        "succeeded",
        effects=[{"kind": "worldline.diff", "state": "verified", "target": id, "fields": fields}],
    )


def _change(kind: str, id: str, op: Any) -> dict[str, Any]:
    w = _lines()
    if w is None:
        return NO_WORKSPACE
    try:
        done = op(w)
    except WorldlineError as exc:
        return _failed(exc)
    fields = {"generation": w.generation}
    if done is not None and getattr(done, "id", id) != id:
        fields["commit"] = done.id
    return receipt(
        "succeeded",
        effects=[{"kind": kind, "state": "verified", "target": id, "fields": fields}],
    )


@mcp.tool()
def commit(id: str) -> dict[str, Any]:
    """Make the fork the owner's workspace (refused if the workspace changed since the fork)."""
    return _change("worldline.committed", id, lambda w: w.commit(id))


@mcp.tool()
def rollback(id: str) -> dict[str, Any]:
    """Restore the workspace as it was before commit ``id``."""
    return _change("worldline.rolled_back", id, lambda w: w.rollback(id))


@mcp.tool()
def discard(id: str) -> dict[str, Any]:
    """Throw the fork away; the workspace is untouched."""
    return _change("worldline.discarded", id, lambda w: w.discard(id))


@mcp.tool()
def keep(id: str) -> dict[str, Any]:
    """Leave the fork open for later."""
    return _change("worldline.kept", id, lambda w: w.keep(id))


if __name__ == "__main__":
    mcp.run("stdio")
