"""The per-sender envelope counter: persisted, strictly increasing, shared by processes.

Two processes using one bundle (``yimi edge run`` and ``yimi say``) draw from the same
SQLite row inside ``BEGIN IMMEDIATE``, so no value is ever handed out twice and a restart
continues above every value already used.

A process may reserve a block of values per write (one synced commit per block, not per
message): it hands them out in order and skips what it did not use (at a restart, or when
the block is old). Values of two processes then interleave — A sends 5, 6 after B sent 20 —
which the receiver's replay window (:data:`sync.envelope.REPLAY_WINDOW`, 1,024 values)
accepts as long as no value falls that far behind the highest it has seen from the sender.
``max_age_s`` keeps it so for a file shared by processes: a block is not used past that age,
and the other processes cannot send a thousand messages in between (the hub's publish
limit is 50 a second, bursts of 200).
"""

from __future__ import annotations

import time
from collections.abc import Callable
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
    values a process reserved and did not use are skipped after a restart, which keeps the
    sequence strictly increasing. Where processes share the file (a device bundle), give
    ``max_age_s`` too: a block older than that is left for a new one (see the module).
    """

    def __init__(
        self,
        path: Path,
        *,
        block: int = 1,
        max_age_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if block < 1:
            raise ValueError("block must be at least 1")
        self._conn: apsw.Connection = open_db(path, SCHEMA)
        self._block = block
        self._max_age_s = max_age_s
        self._clock = clock
        self._next = 0
        self._limit = 0  # values up to and including this one are reserved by us
        self._reserved_at = 0.0

    def next(self) -> int:
        if self._next == 0 or self._next > self._limit or self._too_old():
            with transaction(self._conn):
                row = self._conn.execute(
                    "UPDATE counter SET value = value + ? WHERE id = 1 RETURNING value",
                    (self._block,),
                ).fetchone()
            assert row is not None
            self._limit = int(row[0])
            self._next = self._limit - self._block + 1
            self._reserved_at = self._clock()
        value = self._next
        self._next += 1
        return value

    def _too_old(self) -> bool:
        return self._max_age_s is not None and self._clock() - self._reserved_at > self._max_age_s

    def close(self) -> None:
        self._conn.close()
