"""mac fake: the same tools and receipts; nothing runs, no Mac is asked.

``run`` answers as if the command printed ``fake <command> <args>``; ``read_file`` returns
``fake content of <path>``; commands outside the real default allow-list are refused.
``mkdir`` / ``touch`` answer a fake fork (``fake-N``, its paths added) that the
``worldline_*`` tools know; any other worldline id is not found.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hub.capabilities.package_server import MCPServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import from_answer, from_worldline

ALLOWED = {"ls", "df", "date", "uname", "uptime", "whoami", "mkdir", "touch"}
WRITES = {"mkdir", "touch"}
mcp = MCPServer("mac-fake")
forks: dict[str, str] = {}
"""fake fork id → its status"""


@mcp.tool()
def run(command: str, args: list[str] | None = None, call_id: str = "") -> dict[str, Any]:
    """Run an allow-listed command on the Mac (fake: nothing runs)."""
    argv = list(args or [])
    a: dict[str, Any]
    if command not in ALLOWED:
        a = {"status": "refused", "error_code": "NOT_ALLOWED", "error": "not allowed"}
    else:
        a = {"status": "done", "exit_code": 0, "stdout": " ".join(["fake", command, *argv])}
        if command in WRITES:
            fid = f"fake-{len(forks) + 1}"
            forks[fid] = "open"
            a.update(worldline_id=fid, worldline_root="fake-folder", added=argv)
    return from_answer("run", command, argv, a)


def _worldline(op: str, id: str, then: str | None) -> dict[str, Any]:
    if forks.get(id) not in ("open", "kept"):
        a = {"status": "failed", "error_code": "NOT_FOUND", "error": f"no worldline {id!r}"}
        return from_worldline(op, id, a)
    if then is not None:
        forks[id] = then
    return from_worldline(op, id, {"status": "done", "worldline_id": id})


@mcp.tool()
def worldline_show(folder: str, id: str, call_id: str = "") -> dict[str, Any]:
    """A fork's diff against the Mac's folder (fake)."""
    return _worldline("worldline.show", id, None)


@mcp.tool()
def worldline_commit(folder: str, id: str, call_id: str = "") -> dict[str, Any]:
    """Make the fork the Mac's folder (fake)."""
    return _worldline("worldline.commit", id, "committed")


@mcp.tool()
def worldline_rollback(folder: str, id: str, call_id: str = "") -> dict[str, Any]:
    """Restore the Mac's folder as before commit ``id`` (fake: every id is unknown)."""
    a = {"status": "failed", "error_code": "NOT_FOUND", "error": f"no commit {id!r}"}
    return from_worldline("worldline.rollback", id, a)


@mcp.tool()
def worldline_discard(folder: str, id: str, call_id: str = "") -> dict[str, Any]:
    """Throw the fork away (fake)."""
    return _worldline("worldline.discard", id, "discarded")


@mcp.tool()
def worldline_keep(folder: str, id: str, call_id: str = "") -> dict[str, Any]:
    """Leave the fork open (fake)."""
    return _worldline("worldline.keep", id, "kept")


@mcp.tool()
def read_file(path: str, call_id: str = "") -> dict[str, Any]:
    """Read a text file on the Mac (fake)."""
    content = f"fake content of {path}"
    return from_answer(
        "read", path, [], {"status": "done", "content": content, "size": len(content)}
    )


if __name__ == "__main__":
    mcp.run("stdio")
