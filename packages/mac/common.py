"""Shared by the mac server and its fake: turning executor answers into receipts."""

from __future__ import annotations

from typing import Any

from hub.capabilities.package_sdk import receipt

MAX_SHOWN = 4000


def from_answer(op: str, target: str, args: list[str], a: dict[str, Any]) -> dict[str, Any]:
    """A receipt from the executor's answer (see hub/gateway/executor_bridge.py)."""
    if a.get("status") != "done":
        code = str(a.get("error_code") or "FAILED")
        return receipt("failed", error=(code, str(a.get("error", ""))))
    if op == "read":
        size = int(a.get("size", 0))
        return receipt(
            "succeeded",
            effects=[
                {
                    "kind": "file.read",
                    "state": "verified",
                    "target": target,
                    "fields": {
                        "path": target,
                        "content": str(a.get("content", ""))[:MAX_SHOWN],
                        "truncated": bool(a.get("truncated")),
                    },
                }
            ],
            values=[{"name": "file size", "value": size, "unit": "B", "source": target}],
        )
    code = int(a.get("exit_code", 0))
    fields = {
        "command": " ".join([target, *args]),
        "exit_code": code,
        "stdout": str(a.get("stdout", ""))[:MAX_SHOWN],
        "stderr": str(a.get("stderr", ""))[:MAX_SHOWN],
    }
    if code != 0:
        return receipt(
            "failed",
            effects=[
                {"kind": "command.ran", "state": "verified", "target": target, "fields": fields}
            ],
            error=(f"EXIT_{code}", fields["stderr"][:300]),
        )
    return receipt(
        "succeeded",
        effects=[{"kind": "command.ran", "state": "verified", "target": target, "fields": fields}],
    )
