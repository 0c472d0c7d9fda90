"""mac: allow-listed commands and file reads on the owner's Mac, over the mesh.

This server holds no key: it asks the hub's executor bridge (``YIMI_EXECUTOR_SOCKET``, a
Unix socket) to send the request to the executor device (``YIMI_DEVICE``, its name). The
Mac checks its own allow-list, folders and pause switch, logs the request and answers.

A command that writes runs on a fork of the allowed folder (a worldline); its receipt names
the fork and its diff. ``worldline_commit`` (``owner_data``) makes the fork the folder;
``worldline_show`` / ``_discard`` / ``_keep`` / ``_rollback`` as in the worldlines package.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from hub.capabilities.package_server import MCPServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import from_answer, from_worldline, receipt

mcp = MCPServer("mac")


async def ask(body: dict[str, Any]) -> dict[str, Any] | None:
    path = os.environ.get("YIMI_EXECUTOR_SOCKET", "")
    try:
        reader, writer = await asyncio.open_unix_connection(path, limit=1 << 22)
    except OSError:
        return None
    try:
        writer.write(
            json.dumps({"device": os.environ.get("YIMI_DEVICE", "mac"), **body}).encode() + b"\n"
        )
        await writer.drain()
        line = await reader.readline()
    finally:
        writer.close()
    answer = json.loads(line) if line else None
    return answer if isinstance(answer, dict) else None


def unreachable() -> dict[str, Any]:
    return receipt(
        "failed",
        error=("UNREACHABLE", "the hub's executor bridge is not reachable"),
    )


@mcp.tool()
async def run(command: str, args: list[str] | None = None, call_id: str = "") -> dict[str, Any]:
    """Run an allow-listed command on the Mac (no shell): ls, df, date, uname, uptime,
    whoami read; mkdir and touch change the owner's files (inside the allowed folders)."""
    argv = list(args or [])
    a = await ask({"op": "run", "command": command, "args": argv, "call_id": call_id})
    return unreachable() if a is None else from_answer("run", command, argv, a)


@mcp.tool()
async def read_file(path: str, call_id: str = "") -> dict[str, Any]:
    """Read a text file on the Mac (inside the folders the Mac allows)."""
    a = await ask({"op": "read", "path": path, "call_id": call_id})
    return unreachable() if a is None else from_answer("read", path, [], a)


async def _worldline(op: str, folder: str, id: str, call_id: str) -> dict[str, Any]:
    a = await ask({"op": op, "path": folder, "worldline_id": id, "call_id": call_id})
    return unreachable() if a is None else from_worldline(op, id, a)


@mcp.tool()
async def worldline_show(folder: str, id: str, call_id: str = "") -> dict[str, Any]:
    """A fork's diff against the Mac's folder: what a write command would change."""
    return await _worldline("worldline.show", folder, id, call_id)


@mcp.tool()
async def worldline_commit(folder: str, id: str, call_id: str = "") -> dict[str, Any]:
    """Make the fork the Mac's folder (refused if the folder changed since the fork)."""
    return await _worldline("worldline.commit", folder, id, call_id)


@mcp.tool()
async def worldline_rollback(folder: str, id: str, call_id: str = "") -> dict[str, Any]:
    """Restore the Mac's folder as it was before commit ``id``."""
    return await _worldline("worldline.rollback", folder, id, call_id)


@mcp.tool()
async def worldline_discard(folder: str, id: str, call_id: str = "") -> dict[str, Any]:
    """Throw the fork away; the Mac's folder is untouched."""
    return await _worldline("worldline.discard", folder, id, call_id)


@mcp.tool()
async def worldline_keep(folder: str, id: str, call_id: str = "") -> dict[str, Any]:
    """Leave the fork open for later."""
    return await _worldline("worldline.keep", folder, id, call_id)


if __name__ == "__main__":
    mcp.run("stdio")
