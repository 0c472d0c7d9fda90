"""Which reply chunks this device has already taken (``state/replies.db``).

The hub sends a reply in chunks and sends every chunk again until it is ACKed (on each
ONLINE, and when an utterance is repeated); the broker may deliver a message twice. A chunk
is shown or spoken once: the first process of the bundle to *claim* it does so, every later
copy is only ACKed again. Shared by the processes of one bundle (``yimi edge run`` and
``yimi say``) through SQLite; rows older than :data:`KEEP_DAYS` are dropped at open.

A claim is committed without waiting for the disk (``synchronous=NORMAL``: it survives a
crash of the process, not a power cut): a power cut can at worst forget the last claims, and
a chunk the hub sends again after it is shown once more. Waiting for the disk cost every
reply chunk a sync on the device's loop.
"""

from __future__ import annotations

from pathlib import Path

import apsw

from protos.clock import now_ms
from storage.sqlite import open_db, transaction

KEEP_DAYS = 14
SCHEMA = """
CREATE TABLE IF NOT EXISTS seen (
    reply_id TEXT NOT NULL,
    chunk    INTEGER NOT NULL,
    at_ms    INTEGER NOT NULL,
    PRIMARY KEY (reply_id, chunk)
);
"""


class SeenReplies:
    def __init__(self, path: Path) -> None:
        self.conn: apsw.Connection = open_db(path, SCHEMA, synchronous="NORMAL")
        cutoff = now_ms() - KEEP_DAYS * 86_400_000
        with transaction(self.conn):
            self.conn.execute("DELETE FROM seen WHERE at_ms < ?", (cutoff,))

    def close(self) -> None:
        self.conn.close()

    def claim(self, reply_id: str, chunk: int) -> bool:
        """``True`` the first time (this process shows it), ``False`` for every copy."""
        with transaction(self.conn):
            row = self.conn.execute(
                "INSERT OR IGNORE INTO seen VALUES (?,?,?) RETURNING reply_id",
                (reply_id[:128], int(chunk), now_ms()),
            ).fetchone()
        return row is not None
