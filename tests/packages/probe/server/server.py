"""probe: a test package. Each tool shows one behaviour the gateway must handle.

``--fake`` serves the same tools with the same receipts (there are no side effects anyway);
the saved notes go to ``YIMI_STATE_DIR/notes.jsonl`` so a test can see what ran.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from hub.capabilities.package_server import MCPServer

mcp = MCPServer("probe-fake" if "--fake" in sys.argv else "probe")
STATE = Path(os.environ.get("YIMI_STATE_DIR", "."))


def receipt(status: str, **kw: Any) -> dict[str, Any]:
    return {"receipt_version": 1, "status": status, **kw}


@mcp.tool()
def save_note(title: str, text: str, session_id: str = "", call_id: str = "") -> dict[str, Any]:
    """Save a note in the owner's notes."""
    with (STATE / "notes.jsonl").open("a") as fh:
        fh.write(
            json.dumps({"title": title, "text": text, "session_id": session_id, "call_id": call_id})
            + "\n"
        )
    return receipt(
        "succeeded",
        effects=[
            {"kind": "note.saved", "state": "verified", "target": title, "fields": {"title": title}}
        ],
    )


@mcp.tool()
def echo(
    text: str = "", owner_requested: bool | None = None, idempotency_key: str = ""
) -> dict[str, Any]:
    """Return the arguments it received as effect fields."""
    got = {
        "text": text,
        "owner_requested": owner_requested,
        "idempotency_key": idempotency_key,
        "model_location": os.environ.get("YIMI_MODEL_LOCATION", ""),
    }
    return receipt(
        "succeeded", effects=[{"kind": "echo", "state": "verified", "fields": {"received": got}}]
    )


@mcp.tool()
def claim_rejected() -> dict[str, Any]:
    """Wrongly claims a refusal only the gateway may give."""
    return receipt("rejected", error={"code": "NOPE", "message": "I refuse"})


@mcp.tool()
def unitless() -> dict[str, Any]:
    """A value without its unit."""
    return receipt("succeeded", values=[{"name": "temperature", "value": 21.5}])


@mcp.tool()
def garbage() -> dict[str, Any]:
    """Not a receipt at all."""
    return {"hello": "world"}


@mcp.tool()
def overclaim() -> dict[str, Any]:
    """Claims success with one unverified effect."""
    return receipt(
        "succeeded",
        effects=[
            {"kind": "file.written", "state": "verified", "target": "a"},
            {"kind": "file.written", "state": "not_verified", "target": "b"},
        ],
    )


@mcp.tool()
async def slow(seconds: float) -> dict[str, Any]:
    """Sleeps (past the host's call timeout when asked to)."""
    await asyncio.sleep(seconds)
    return receipt("succeeded")


@mcp.tool()
def mode(action: str) -> dict[str, Any]:
    """Effect by argument: read observes, write changes owner data."""
    return receipt("succeeded")


@mcp.tool()
def progress(step: int) -> dict[str, Any]:
    """A long task reporting revision ``step``."""
    status = "running" if step < 3 else "succeeded"
    return receipt(
        status, revision=step, values=[{"name": "done", "value": step * 33, "unit": "%"}]
    )


if __name__ == "__main__":
    mcp.run("stdio")
