"""Shared by the messaging server and its fake: receipts and the sent log."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from hub.capabilities.package_sdk import receipt


def sent_log(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS sent (key TEXT PRIMARY KEY, recipient TEXT, subject TEXT, "
        "message_id TEXT, state TEXT, at_ms INTEGER)"
    )
    return db


def find(db: sqlite3.Connection, key: str, to: str, subject: str) -> dict[str, Any]:
    if key:
        rows = db.execute(
            "SELECT recipient, subject, message_id, state FROM sent WHERE key=?", (key,)
        ).fetchall()
    else:
        rows = db.execute(
            "SELECT recipient, subject, message_id, state FROM sent WHERE recipient=? "
            "AND (?='' OR subject=?)",
            (to, subject, subject),
        ).fetchall()
    sent = [r for r in rows if r[3] == "sent"]
    attempted = [r for r in rows if r[3] == "attempted"]
    effects = [
        {
            "kind": "email.sent",
            "state": "verified",
            "target": r[0],
            "fields": {"to": r[0], "subject": r[1], "message_id": r[2]},
        }
        for r in sent
    ]
    unknowns = [f"an e-mail to {r[0]} was handed to the server without a reply" for r in attempted]
    return receipt(
        "succeeded",
        effects=effects,
        unknowns=unknowns,
        values=[
            {
                "name": "matching sent e-mails",
                "value": len(sent),
                "unit": "items",
                "source": "sent log",
            }
        ],
    )
