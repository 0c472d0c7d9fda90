"""mac fake: the same tools and receipts; nothing runs, no Mac is asked.

``run`` answers as if the command printed ``fake <command> <args>``; ``read_file`` returns
``fake content of <path>``; commands outside the real default allow-list are refused.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import from_answer

ALLOWED = {"ls", "df", "date", "uname", "uptime", "whoami", "mkdir", "touch"}
mcp = MCPServer("mac-fake")


@mcp.tool()
def run(command: str, args: list[str] | None = None, call_id: str = "") -> dict[str, Any]:
    """Run an allow-listed command on the Mac (fake: nothing runs)."""
    argv = list(args or [])
    if command not in ALLOWED:
        a = {"status": "refused", "error_code": "NOT_ALLOWED", "error": "not allowed"}
    else:
        a = {"status": "done", "exit_code": 0, "stdout": " ".join(["fake", command, *argv])}
    return from_answer("run", command, argv, a)


@mcp.tool()
def read_file(path: str, call_id: str = "") -> dict[str, Any]:
    """Read a text file on the Mac (fake)."""
    content = f"fake content of {path}"
    return from_answer(
        "read", path, [], {"status": "done", "content": content, "size": len(content)}
    )


if __name__ == "__main__":
    mcp.run("stdio")
