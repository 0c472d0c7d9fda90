"""The device outbox: store and forward, in order, exactly once on the hub.

An item is committed (fsynced) before the sender is told it is queued, and leaves the
outbox only when the hub's reply for it arrives. Retries re-seal the payload with a new
counter; the hub deduplicates by the item id, so a retry never doubles an entry.
Flushing is serialised across processes by an ``flock`` on ``outbox.lock``.

A put and a withdrawal wait for the disk. The bookkeeping of sending — an attempt counted,
an answered item removed — commits without a sync of its own (WAL, ``synchronous=NORMAL``:
atomic and safe from a crash of the process; the next synced commit covers it): a power cut
that loses such a commit only makes an item be sent once more, which the hub deduplicates.

An item may carry attachments (a voice utterance's encoded audio, as ``AUDIO_CHUNK``
pieces): they are committed in the same transaction as the item, sent before it, in index
order, on every attempt, and leave the outbox with it.

The audio fills the write-ahead log quickly; it is checkpointed on a thread of its own
(:mod:`storage.checkpoint`), not in the commit of the put that fills it: that commit is on
the device's event loop, and copying a thousand pages with two syncs takes far longer on a
device's flash than a put.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import apsw

from storage.checkpoint import Checkpointer
from storage.sqlite import open_db, transaction
from sync.errors import SyncError

SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    pos        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT NOT NULL UNIQUE,
    kind       INTEGER NOT NULL,
    payload    BLOB NOT NULL,
    trace_id   TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    attempts   INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS outbox_chunks (
    item_id    TEXT NOT NULL,
    idx        INTEGER NOT NULL,
    data       BLOB NOT NULL,
    PRIMARY KEY (item_id, idx)
) WITHOUT ROWID;
"""
MAX_ITEMS = 100_000
"""items: beyond this the outbox refuses new ones rather than fill the disk"""
MAX_CHUNKS = 32
"""attachments of one item (the hub reassembles at most this many)"""
MAX_CHUNK_BYTES = 192 * 1024
"""bytes of one attachment (an AUDIO_CHUNK's data)"""


@dataclass(frozen=True)
class OutboxItem:
    pos: int
    id: str
    kind: int
    payload: bytes
    trace_id: str
    created_ms: int
    attempts: int


class Outbox:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: apsw.Connection = open_db(path, SCHEMA)
        self._lock_path = path.with_suffix(".lock")
        self.checkpointer = Checkpointer.watching(self._conn)
        """checkpoints the outbox off its commits (see the module doc)"""

    def close(self) -> None:
        self.checkpointer.close()
        self._conn.close()

    def put(
        self,
        item_id: str,
        kind: int,
        payload: bytes,
        trace_id: str,
        created_ms: int,
        chunks: Sequence[bytes] = (),
    ) -> int:
        """Queue an item and its ``chunks`` in one transaction (idempotent on ``item_id``:
        a second put of a queued id changes nothing); returns how many are waiting."""
        if len(chunks) > MAX_CHUNKS or any(len(c) > MAX_CHUNK_BYTES for c in chunks):
            raise ValueError(f"at most {MAX_CHUNKS} chunks of {MAX_CHUNK_BYTES} bytes")
        with transaction(self._conn):
            count = self.count()
            if count >= MAX_ITEMS:
                raise SyncError("outbox.full", path=self.path, count=count)
            added = self._conn.execute(
                "INSERT OR IGNORE INTO outbox (id, kind, payload, trace_id, created_ms) "
                "VALUES (?,?,?,?,?) RETURNING pos",
                (item_id, kind, payload, trace_id, created_ms),
            ).fetchall()
            if added:
                self._conn.execute("DELETE FROM outbox_chunks WHERE item_id=?", (item_id,))
                self._conn.executemany(
                    "INSERT INTO outbox_chunks (item_id, idx, data) VALUES (?,?,?)",
                    [(item_id, i, data) for i, data in enumerate(chunks)],
                )
            return count + len(added)  # (the transaction holds the write lock: no other put)

    def chunks(self, item_id: str) -> list[bytes]:
        """The attachments of a queued item, in index order (empty if none or gone)."""
        rows = self._conn.execute(
            "SELECT data FROM outbox_chunks WHERE item_id=? ORDER BY idx", (item_id,)
        )
        return [bytes(r[0]) for r in rows]

    def count(self) -> int:
        row = self._conn.execute("SELECT count(*) FROM outbox").fetchone()
        return int(row[0]) if row else 0

    def has_items(self) -> bool:
        """Whether any item waits (one probe: :meth:`count` reads them all)."""
        return self._conn.execute("SELECT 1 FROM outbox LIMIT 1").fetchone() is not None

    def pending(self, limit: int = 1000) -> list[OutboxItem]:
        rows = self._conn.execute(
            "SELECT pos, id, kind, payload, trace_id, created_ms, attempts FROM outbox "
            "ORDER BY pos LIMIT ?",
            (limit,),
        )
        return [OutboxItem(r[0], r[1], r[2], bytes(r[3]), r[4], r[5], r[6]) for r in rows]

    def contains(self, item_id: str) -> bool:
        return (
            self._conn.execute("SELECT 1 FROM outbox WHERE id=?", (item_id,)).fetchone() is not None
        )

    @contextmanager
    def _unsynced(self) -> Iterator[apsw.Connection]:
        """A transaction whose commit does not wait for the disk (see the module doc)."""
        self._conn.execute("PRAGMA synchronous=NORMAL")
        try:
            with transaction(self._conn) as conn:
                yield conn
        finally:
            self._conn.execute("PRAGMA synchronous=FULL")

    def attempted(self, item_id: str) -> None:
        with self._unsynced():
            self._conn.execute("UPDATE outbox SET attempts = attempts + 1 WHERE id=?", (item_id,))

    def done(self, item_id: str, *, answered: bool = False) -> bool:
        """Remove a delivered (or withdrawn) item and its chunks; ``False`` if it was
        already gone. ``answered``: the hub's reply came, so the removal need not wait for
        the disk (see the module doc); a withdrawal does. An answered item already gone
        (each chunk of a reply answers it: the first one removed it) costs one read, not a
        write transaction."""
        if answered and not self.contains(item_id):
            return False
        with self._unsynced() if answered else transaction(self._conn):
            self._conn.execute("DELETE FROM outbox_chunks WHERE item_id=?", (item_id,))
            return (
                self._conn.execute(
                    "DELETE FROM outbox WHERE id=? RETURNING id", (item_id,)
                ).fetchone()
                is not None
            )

    @contextmanager
    def flushing(self, *, block: bool = True) -> Iterator[bool]:
        """Hold the cross-process flush lock; yields ``False`` if not blocking and busy."""
        fd = os.open(self._lock_path, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
