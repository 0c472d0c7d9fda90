"""The device's own view of its conversation (``state/timeline.db``).

Until timeline replication lands, a device lists what it said and what the hub answered,
with the ``seq`` the hub assigned (``None`` while an utterance is still pending).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import apsw

from sync.store import open_db, transaction

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    id     TEXT PRIMARY KEY,
    seq    INTEGER,
    device TEXT NOT NULL,
    kind   TEXT NOT NULL,
    text   TEXT NOT NULL,
    ts_ms  INTEGER NOT NULL
);
"""


@dataclass(frozen=True)
class LocalEntry:
    seq: int | None
    id: str
    device: str
    kind: str
    text: str
    ts_ms: int


class LocalTimeline:
    def __init__(self, path: Path) -> None:
        self._conn: apsw.Connection = open_db(path, SCHEMA, synchronous="NORMAL")

    def close(self) -> None:
        self._conn.close()

    def add(self, entry: LocalEntry) -> None:
        with transaction(self._conn):
            self._conn.execute(
                "INSERT INTO entries VALUES (?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET "
                "seq=coalesce(excluded.seq, entries.seq)",
                (entry.id, entry.seq, entry.device, entry.kind, entry.text, entry.ts_ms),
            )

    def has(self, entry_id: str) -> bool:
        return (
            self._conn.execute("SELECT 1 FROM entries WHERE id=?", (entry_id,)).fetchone()
            is not None
        )

    def sequenced(self, entry_id: str, seq: int) -> None:
        with transaction(self._conn):
            self._conn.execute("UPDATE entries SET seq=? WHERE id=?", (seq, entry_id))

    def entries(self, limit: int = 1000) -> list[LocalEntry]:
        rows = self._conn.execute(
            "SELECT seq, id, device, kind, text, ts_ms FROM entries "
            "ORDER BY seq IS NULL, seq, ts_ms LIMIT ?",
            (limit,),
        )
        return [LocalEntry(*r) for r in rows]
