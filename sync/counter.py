"""The per-sender envelope counter: persisted, strictly increasing, shared by processes.

Two processes using one bundle (``yimi edge run`` and ``yimi say``) draw from the same
SQLite row inside ``BEGIN IMMEDIATE``, so no value is ever handed out twice and a restart
continues above every value already used.
"""

from __future__ import annotations

from pathlib import Path

import apsw

from sync.store import open_db, transaction

SCHEMA = """
CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER NOT NULL);
INSERT OR IGNORE INTO counter (id, value) VALUES (1, 0);
"""


class PersistentCounter:
    """Hands out strictly increasing integers from a SQLite file."""

    def __init__(self, path: Path) -> None:
        self._conn: apsw.Connection = open_db(path, SCHEMA)

    def next(self) -> int:
        with transaction(self._conn):
            row = self._conn.execute(
                "UPDATE counter SET value = value + 1 WHERE id = 1 RETURNING value"
            ).fetchone()
        assert row is not None
        return int(row[0])

    def close(self) -> None:
        self._conn.close()
