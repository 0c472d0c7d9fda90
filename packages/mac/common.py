"""Shared by the mac server and its fake: turning executor answers into receipts."""

from __future__ import annotations

from typing import Any

from hub.capabilities.package_sdk import receipt

MAX_SHOWN = 4000
WORLDLINE_KINDS = {
    "worldline.show": "worldline.diff",
    "worldline.commit": "worldline.committed",
    "worldline.rollback": "worldline.rolled_back",
    "worldline.discard": "worldline.discarded",
    "worldline.keep": "worldline.kept",
}
"""executor operation → the effect its receipt reports"""


def worldline_fields(a: dict[str, Any]) -> dict[str, Any]:
    """The fork an answer names: its id, the allowed folder it forks, and its diff."""
    return {
        "id": str(a.get("worldline_id", "")),
        "folder": str(a.get("worldline_root", "")),
        "generation": int(a.get("generation", 0)),
        "added": ", ".join(a.get("added") or []),
        "changed": ", ".join(a.get("changed") or []),
        "removed": ", ".join(a.get("removed") or []),
        "diff": str(a.get("diff", ""))[:MAX_SHOWN],
    }


def from_worldline(op: str, target: str, a: dict[str, Any]) -> dict[str, Any]:
    """A receipt from the executor's answer to a ``worldline.*`` operation."""
    if a.get("status") != "done":
        code = str(a.get("error_code") or "FAILED")
        return receipt("failed", error=(code, str(a.get("error", ""))))
    fields = worldline_fields(a)
    if op != "worldline.show":
        fields = {"generation": fields["generation"], "folder": fields["folder"]}
        if a.get("commit_id"):
            fields["commit"] = str(a["commit_id"])
    effect = {"kind": WORLDLINE_KINDS[op], "state": "verified", "target": target}
    return receipt("succeeded", effects=[{**effect, "fields": fields}])


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
    exit_code = int(a.get("exit_code", 0))
    fields: dict[str, Any] = {
        "command": " ".join([target, *args]),
        "exit_code": exit_code,
        "stdout": str(a.get("stdout", ""))[:MAX_SHOWN],
        "stderr": str(a.get("stderr", ""))[:MAX_SHOWN],
    }
    effects = [{"kind": "command.ran", "state": "verified", "target": target, "fields": fields}]
    if a.get("worldline_id"):  # a write: it ran on a fork; the folder changes on commit
        wl = worldline_fields(a)
        fields["worldline"] = wl["id"]
        effects.append(
            {"kind": "worldline.forked", "state": "verified", "target": wl["id"], "fields": wl}
        )
    if exit_code != 0:
        return receipt(
            "failed", effects=effects, error=(f"EXIT_{exit_code}", fields["stderr"][:300])
        )
    return receipt("succeeded", effects=effects)
