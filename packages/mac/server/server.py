"""mac: allow-listed commands and file reads on the owner's Mac, over the mesh.

This server holds no key: it asks the hub's executor bridge (``YIMI_EXECUTOR_SOCKET``, a
Unix socket) to send the request to the executor device (``YIMI_DEVICE``, its name). The
Mac checks its own allow-list, folders and pause switch, logs the request and answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import from_answer, receipt

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


if __name__ == "__main__":
    mcp.run("stdio")
