"""SQLite databases (through apsw): one way to open them, WAL, busy timeout, migrations."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import apsw

from storage.private import private_dir, private_file

if TYPE_CHECKING:
    from storage.group_commit import GroupCommit

BUSY_TIMEOUT_MS = 10_000
"""milliseconds a writer waits for another process's lock"""


def open_db(
    path: Path, schema: str, *, synchronous: str = "FULL", group: GroupCommit | None = None
) -> apsw.Connection:
    """Open (creating if needed) a WAL database at ``path`` and apply ``schema`` (idempotent DDL).

    Files are created with mode 0600: they may hold counters and credentials' hashes. With
    ``group`` a commit does not wait for the disk (``synchronous=NORMAL``): the group syncs
    the WAL once before anything that depends on it leaves (:mod:`storage.group_commit`).
    """
    if group is not None and synchronous == "FULL":
        synchronous = "NORMAL"
    private_dir(path.parent)
    private_file(path)  # SQLite gives -wal and -shm the database file's mode
    conn = apsw.Connection(str(path))
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA foreign_keys=ON")
    if group is not None:
        group.watch(conn)
    with transaction(conn):
        conn.execute(schema)
    return conn


def change_mark(conn: apsw.Connection) -> tuple[int, int]:
    """Differs from an earlier mark once a row may have changed: rows this connection
    changed (``total_changes``) and other connections' commits (``PRAGMA data_version``).
    Cheap: what a cache of a table's rows compares before it reads them again."""
    row = conn.execute("PRAGMA data_version").fetchone()
    return conn.total_changes(), int(row[0]) if row else 0


@contextmanager
def transaction(conn: apsw.Connection) -> Iterator[apsw.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on error): one writer at a time."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@contextmanager
def joined(conn: apsw.Connection) -> Iterator[apsw.Connection]:
    """The transaction the caller has open on ``conn``, or a :func:`transaction` of its own:
    for a write that is a step of bigger ones as well as a whole one."""
    if conn.in_transaction:
        yield conn
    else:
        with transaction(conn):
            yield conn


def read_rows(path: Path, sql: str, *params: object, busy_ms: int = 5000) -> list[tuple[Any, ...]]:
    """The rows of one query on a database another process writes, opened read-only."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(busy_ms)
    try:
        return [tuple(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()
