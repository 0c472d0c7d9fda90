"""The memory database (``HOME/memory.db``): its tables and how it is opened.

- ``assertion``: one row per L3 assertion id (head version, status); the tombstone once
  forgotten.
- ``version``: every version's payload (subject, predicate, value, sources, …); the
  payload columns are NULL once erased.
- ``dependency``: a version depends on a specific version of another assertion.
- ``assertion_source``: which assertions (any version) name which source, for the walk.
- ``request``: commit receipts by request id (idempotent retries).
- ``derived`` / ``derived_source``: derived items (summaries, snippets, embeddings,
  contexts) and the sources they came from.
- ``source``: the sensitivity of registered outside sources ``(kind, id)``.
- ``deletion``: what was deleted, by id only (no payload). The file log beside the db is
  the copy a restore from backup re-applies.

The connection runs with ``secure_delete`` on, so deleted payloads are overwritten in the
file, not just unlinked from the b-tree.
"""

from __future__ import annotations

from pathlib import Path

import apsw

from storage.sqlite import open_db

SCHEMA = """
CREATE TABLE IF NOT EXISTS assertion (
    id TEXT PRIMARY KEY,
    head INTEGER NOT NULL,
    status TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS version (
    id TEXT NOT NULL REFERENCES assertion(id),
    version INTEGER NOT NULL,
    status TEXT NOT NULL,
    subject TEXT,
    predicate TEXT,
    value TEXT,
    confidence REAL,
    sources TEXT,
    sensitivity TEXT,
    importance REAL,
    request_id TEXT,
    created_ms INTEGER NOT NULL,
    erased_ms INTEGER,
    PRIMARY KEY (id, version)
);
CREATE INDEX IF NOT EXISTS version_predicate ON version(predicate, status);
CREATE TABLE IF NOT EXISTS dependency (
    id TEXT NOT NULL,
    version INTEGER NOT NULL,
    on_id TEXT NOT NULL,
    on_version INTEGER NOT NULL,
    PRIMARY KEY (id, version, on_id)
);
CREATE INDEX IF NOT EXISTS dependency_on ON dependency(on_id);
CREATE TABLE IF NOT EXISTS assertion_source (
    kind TEXT NOT NULL,
    source_id TEXT NOT NULL,
    id TEXT NOT NULL,
    PRIMARY KEY (kind, source_id, id)
);
CREATE INDEX IF NOT EXISTS assertion_source_id ON assertion_source(id);
CREATE TABLE IF NOT EXISTS request (
    request_id TEXT PRIMARY KEY,
    id TEXT NOT NULL,
    digest TEXT NOT NULL,
    receipt TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS request_id_of ON request(id);
CREATE TABLE IF NOT EXISTS derived (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    text TEXT,
    sensitivity TEXT NOT NULL,
    indexed INTEGER NOT NULL DEFAULT 0,
    created_ms INTEGER NOT NULL,
    erased_ms INTEGER
);
CREATE TABLE IF NOT EXISTS derived_source (
    derived_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    source_id TEXT NOT NULL,
    PRIMARY KEY (derived_id, kind, source_id)
);
CREATE INDEX IF NOT EXISTS derived_source_of ON derived_source(kind, source_id);
CREATE TABLE IF NOT EXISTS source (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    sensitivity TEXT NOT NULL,
    PRIMARY KEY (kind, id)
);
CREATE TABLE IF NOT EXISTS deletion (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms INTEGER NOT NULL,
    what TEXT NOT NULL,
    item TEXT NOT NULL
);
"""


def open_memory_db(path: Path) -> apsw.Connection:
    """Open (creating) the memory database at ``path`` with ``secure_delete`` on."""
    conn = open_db(path, SCHEMA)
    conn.execute("PRAGMA secure_delete=ON")
    return conn
