"""Checkpoints of SQLite write-ahead logs, off the writer's path.

SQLite checkpoints a WAL database by itself: the commit that leaves the WAL over a thousand
pages copies them into the database file, syncing the WAL before and the database after
(with ``synchronous`` NORMAL or FULL). That commit is the writer's: on the hub's event loop,
copying 4 MB and two syncs (4–6 ms on a fast disk, far more on an SD card) stop every turn
in the middle of a commit.

A :class:`Checkpointer` watches a connection with a WAL hook. Setting the hook turns SQLite's
own checkpoints off; the hook asks for a passive checkpoint at :data:`CHECKPOINT_PAGES`, as
SQLite's default does. While the checkpointer is started it runs on its own thread, on a
connection of its own, one at a time per database: the writer goes on appending to the WAL
meanwhile and starts it again from its beginning once the checkpoint is complete. Not
started (or closed), it runs on the writer's connection, in the commit, as SQLite would.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import apsw

log = logging.getLogger(__name__)

CHECKPOINT_PAGES = 1000
"""WAL pages after a commit at which the hook checkpoints (SQLite's default auto-checkpoint)"""


class Checkpointer:
    """Checkpoints the databases of the connections it :meth:`watch`-es (see the module doc).

    Owns one thread between :meth:`start` and :meth:`close`; safe from any thread."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._running: set[str] = set()
        """databases whose checkpoint is asked for or running (one at a time each)"""
        self.checkpoints = 0
        """checkpoints run on the checkpoint thread (for tests)"""

    @classmethod
    def watching(cls, conn: apsw.Connection) -> Checkpointer:
        """A started checkpointer watching ``conn`` (a store's own: the ledger, the outbox)."""
        checkpointer = cls()
        checkpointer.watch(conn)
        checkpointer.start()
        return checkpointer

    def start(self) -> None:
        """Checkpoint on the checkpoint thread from now on."""
        with self._guard:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="checkpoint")

    def close(self) -> None:
        """Stop the thread: a checkpoint under way ends, those asked for are dropped (the
        next commit over the threshold asks again, on the writer's connection)."""
        with self._guard:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
            with self._guard:  # none runs now, and those dropped never will
                self._running.clear()

    @property
    def idle(self) -> bool:
        """No checkpoint is asked for or running."""
        with self._guard:
            return not self._running

    def watch(self, conn: apsw.Connection, wrote: Callable[[str], None] | None = None) -> None:
        """Checkpoint ``conn``'s database as SQLite would, off its commits while started;
        ``wrote``: also told the WAL's path after each commit (what a group commit syncs)."""
        wal, db = conn.filename_wal, conn.filename

        def on_wal(c: apsw.Connection, name: str, pages: int) -> int:
            if wrote is not None:
                wrote(wal)
            if pages >= CHECKPOINT_PAGES:
                self._checkpoint(c, name, db)
            return apsw.SQLITE_OK

        conn.set_wal_hook(on_wal)

    def _checkpoint(self, conn: apsw.Connection, name: str, db: str) -> None:
        """Checkpoint ``db``: on the checkpoint thread while started (unless one is asked
        for already), else here on ``conn``."""
        with self._guard:
            pool = self._pool
            if pool is not None:
                if db in self._running:
                    return
                self._running.add(db)
        if pool is None:
            try:
                conn.wal_checkpoint(name)
            except apsw.BusyError:  # a reader holds it: the next commit tries again
                log.debug("checkpoint of %s deferred: busy", db)
            return
        try:
            pool.submit(self._checkpoint_apart, db)
        except RuntimeError:  # closing: the next commit over the threshold asks again
            with self._guard:
                self._running.discard(db)

    def _checkpoint_apart(self, db: str) -> None:
        """A passive checkpoint of ``db`` on a connection of its own (never creating it: a
        database removed meanwhile has nothing to checkpoint); a failure is left to the next
        commit over the threshold, which asks again."""
        conn: apsw.Connection | None = None
        try:
            conn = apsw.Connection(db, flags=apsw.SQLITE_OPEN_READWRITE)
            # a read first: a connection opens the WAL only once it has read the database
            # (before that, a checkpoint on it finds no WAL and copies nothing)
            conn.execute("PRAGMA schema_version").fetchall()
            conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
            self.checkpoints += 1
        except apsw.Error as exc:  # gone, busy, or the disk failed: asked again later
            log.debug("checkpoint of %s deferred: %s", db, exc)
        finally:
            if conn is not None:
                conn.close()
            with self._guard:
                self._running.discard(db)
