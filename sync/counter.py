"""The per-sender envelope counter: persisted, strictly increasing, shared by processes.

Two processes using one bundle (``yimi edge run`` and ``yimi say``) draw from the same
SQLite row inside ``BEGIN IMMEDIATE``, so no value is ever handed out twice and a restart
continues above every value already used.
"""

from __future__ import annotations

from pathlib import Path

import apsw

from storage.sqlite import open_db, transaction

SCHEMA = """
CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER NOT NULL);
INSERT OR IGNORE INTO counter (id, value) VALUES (1, 0);
"""


class PersistentCounter:
    """Hands out strictly increasing integers from a SQLite file.

    ``block > 1`` reserves that many values per write (one fsync per block, not per value);
    use it only where one process owns the file (the hub): values a process reserved and
    did not use are skipped after a restart, which keeps the sequence strictly increasing.
    Files shared by processes (a device bundle) must use ``block=1``.
    """

    def __init__(self, path: Path, *, block: int = 1) -> None:
        self._conn: apsw.Connection = open_db(path, SCHEMA)
        self._block = block
        self._next = 0
        self._limit = 0  # values up to and including this one are reserved by us

    def next(self) -> int:
        if self._next == 0 or self._next > self._limit:
            with transaction(self._conn):
                row = self._conn.execute(
                    "UPDATE counter SET value = value + ? WHERE id = 1 RETURNING value",
                    (self._block,),
                ).fetchone()
            assert row is not None
            self._limit = int(row[0])
            self._next = self._limit - self._block + 1
        value = self._next
        self._next += 1
        return value

    def close(self) -> None:
        self._conn.close()
