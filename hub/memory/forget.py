"""Forgetting for real: erase along derivation, keep tombstones, log it, re-apply it.

What a deletion reaches, from its roots (an assertion, an outside source, a derived item,
or the earlier versions of an assertion erased by a correcting commit):

- every assertion with a version that depends on a reached assertion (any version), or
  that names a reached source among its sources — forgotten whole: every version's
  payload erased, a tombstone left, later commits refused;
- every derived item (summary, snippet, embedding, context) with a reached source: if
  all its sources are gone it is deleted, otherwise its payload is erased and it waits to
  be derived again from what is left;
- the recall-index entries of all of these (``assertion:<id>``, ``derived:<id>``), removed
  through the index hook after the database commit.

Every deletion is written, ids only, to the ``deletion`` table and appended (fsync'd,
before the database commit) to a log file beside the database (``memory.db.deletions``).
A backup restored over the database brings back old payloads and an old ``deletion``
table, but not that file: :func:`reapply_deletions` replays it and erases them again.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from hub.memory.errors import MemoryStoreError
from hub.memory.index_api import IndexHook
from hub.memory.models import ForgetReport, assertion_item, derived_item
from hub.memory.schema import open_memory_db
from hub.memory.sensitivity import Source, parse_source
from storage.sqlite import transaction

log = logging.getLogger(__name__)

LOG_SUFFIX = ".deletions"


def deletion_log_path(db_path: Path) -> Path:
    """The deletion log that belongs to the database at ``db_path``."""
    return db_path.with_name(db_path.name + LOG_SUFFIX)


@dataclass
class Roots:
    """Where a deletion starts."""

    assertions: list[str] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    derived: list[str] = field(default_factory=list)
    rederive: list[str] = field(default_factory=list)
    versions: dict[str, list[int]] = field(default_factory=dict)
    """assertion id → earlier versions to erase (the assertion itself stays)"""

    def all(self) -> list[Source]:
        return [
            *(("assertion", a) for a in self.assertions),
            *self.sources,
            *(("derived", d) for d in self.derived),
            *(("assertion", a) for a in self.versions),
        ]


@dataclass
class Plan:
    """Everything one deletion will erase, computed inside its transaction."""

    assertions: list[str] = field(default_factory=list)
    versions: dict[str, list[int]] = field(default_factory=dict)
    derived_delete: list[str] = field(default_factory=list)
    derived_rederive: list[str] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    predicates: set[str] = field(default_factory=set)
    gone: set[Source] = field(default_factory=set)
    root_sources: list[Source] = field(default_factory=list)
    """outside sources deleted at the root (logged even if nothing here cited them)"""

    def index_candidates(self) -> list[str]:
        return [
            *(assertion_item(a) for a in self.assertions),
            *(derived_item(d) for d in (*self.derived_delete, *self.derived_rederive)),
        ]

    def log_entry(self) -> dict[str, Any]:
        return {
            "op": "forget",
            "assertions": self.assertions,
            "versions": self.versions,
            "derived_delete": self.derived_delete,
            "derived_rederive": self.derived_rederive,
            "sources": [list(s) for s in dict.fromkeys([*self.root_sources, *self.sources])],
            "index": self.index_candidates(),
        }

    @property
    def empty(self) -> bool:
        return not (
            self.assertions
            or self.versions
            or self.derived_delete
            or self.derived_rederive
            or self.sources
            or self.root_sources
        )


def _citing(conn: apsw.Connection, source: Source) -> tuple[list[str], list[str]]:
    """Assertions and derived items that name ``source`` among their sources."""
    assertions = [
        str(r[0])
        for r in conn.execute(
            "SELECT id FROM assertion_source WHERE kind=? AND source_id=? ORDER BY id",
            source,
        )
    ]
    derived = [
        str(r[0])
        for r in conn.execute(
            "SELECT derived_id FROM derived_source WHERE kind=? AND source_id=? "
            "ORDER BY derived_id",
            source,
        )
    ]
    return assertions, derived


def plan(conn: apsw.Connection, roots: Roots) -> Plan:
    """Walk from ``roots`` along dependencies and sources; nothing is written."""
    p = Plan(root_sources=list(roots.sources))
    affected: list[str] = []
    forced_delete = set(roots.derived)
    queue: list[Source] = []

    for aid, versions in roots.versions.items():
        head = conn.execute("SELECT head FROM assertion WHERE id=?", (aid,)).fetchone()
        if head is not None and int(head[0]) in versions:
            # a restored copy whose head is an erased version: nothing of it may stay
            queue.append(("assertion", aid))
            continue
        erasable = [
            int(r[0])
            for r in conn.execute(
                "SELECT version FROM version WHERE id=? AND erased_ms IS NULL ORDER BY version",
                (aid,),
            )
            if int(r[0]) in versions
        ]
        if erasable:
            p.versions[aid] = erasable
        # what depended on exactly those versions goes too; derived items that cite the
        # assertion (no version recorded) lose their payload and are derived again
        for (dependent,) in conn.execute(
            "SELECT DISTINCT id FROM dependency WHERE on_id=? AND on_version IN "
            f"({','.join('?' * len(versions))}) ORDER BY id",
            (aid, *versions),
        ):
            queue.append(("assertion", str(dependent)))
        _, citing_derived = _citing(conn, ("assertion", aid))
        affected.extend(d for d in citing_derived if d not in affected)

    queue.extend(("assertion", a) for a in roots.assertions)
    queue.extend(roots.sources)
    queue.extend(("derived", d) for d in roots.derived)
    affected.extend(d for d in roots.rederive if d not in affected)
    seen: set[Source] = set()
    while queue:
        source = queue.pop(0)
        if source in seen:
            continue
        seen.add(source)
        kind, ident = source
        if kind == "assertion":
            row = conn.execute("SELECT status FROM assertion WHERE id=?", (ident,)).fetchone()
            if row is None or row[0] == "forgotten":
                continue
            p.assertions.append(ident)
            p.gone.add(source)
            p.predicates.update(
                str(r[0])
                for r in conn.execute(
                    "SELECT DISTINCT predicate FROM version WHERE id=? AND predicate IS NOT NULL",
                    (ident,),
                )
            )
            for (dependent,) in conn.execute(
                "SELECT DISTINCT id FROM dependency WHERE on_id=? ORDER BY id", (ident,)
            ):
                queue.append(("assertion", str(dependent)))
        elif kind == "derived":
            row = conn.execute("SELECT status FROM derived WHERE id=?", (ident,)).fetchone()
            if row is None or row[0] == "deleted":
                continue
            if ident not in affected:
                affected.append(ident)
        else:
            p.gone.add(source)
            if conn.execute("SELECT 1 FROM source WHERE kind=? AND id=?", (kind, ident)).fetchone():
                p.sources.append(source)
        citing_assertions, citing_derived = _citing(conn, source)
        queue.extend(("assertion", a) for a in citing_assertions)
        queue.extend(("derived", d) for d in citing_derived)

    # a derived item is deleted once every one of its sources is gone; else re-derived
    pending = [
        d
        for d in affected
        if (row := conn.execute("SELECT status FROM derived WHERE id=?", (d,)).fetchone())
        and row[0] != "deleted"
    ]
    changed = True
    while changed:
        changed = False
        for d in list(pending):
            sources = {
                (str(k), str(i))
                for k, i in conn.execute(
                    "SELECT kind, source_id FROM derived_source WHERE derived_id=?", (d,)
                )
            }
            if d in forced_delete or sources <= p.gone:
                pending.remove(d)
                p.derived_delete.append(d)
                p.gone.add(("derived", d))
                changed = True
    p.derived_rederive = pending
    return p


def erase_versions(
    conn: apsw.Connection, aid: str, versions: Iterable[int], at_ms: int
) -> list[int]:
    """Null the payload of these versions of ``aid``; the versions that had one."""
    erased = []
    for v in sorted(set(versions)):
        conn.execute(
            "UPDATE version SET subject=NULL, predicate=NULL, value=NULL, confidence=NULL, "
            "sources=NULL, importance=NULL, request_id=NULL, erased_ms=? "
            "WHERE id=? AND version=? AND erased_ms IS NULL",
            (at_ms, aid, v),
        )
        if conn.changes():
            erased.append(v)
    return erased


def execute(conn: apsw.Connection, p: Plan, at_ms: int) -> ForgetReport:
    """Carry out ``p`` inside the caller's transaction; report what was erased."""
    report = ForgetReport()
    for aid, versions in p.versions.items():
        erased = erase_versions(conn, aid, versions, at_ms)
        if erased:
            report.versions[aid] = erased
    for aid in p.assertions:
        had_payload = [
            int(r[0])
            for r in conn.execute(
                "SELECT version FROM version WHERE id=? AND erased_ms IS NULL ORDER BY version",
                (aid,),
            )
        ]
        erase_versions(conn, aid, had_payload, at_ms)
        conn.execute("UPDATE version SET status='forgotten' WHERE id=?", (aid,))
        conn.execute(
            "UPDATE assertion SET status='forgotten', updated_ms=? WHERE id=?", (at_ms, aid)
        )
        conn.execute("DELETE FROM dependency WHERE id=?", (aid,))
        conn.execute("DELETE FROM assertion_source WHERE id=?", (aid,))
        conn.execute("DELETE FROM request WHERE id=?", (aid,))
        report.assertions[aid] = had_payload
    for d in p.derived_delete:
        conn.execute(
            "UPDATE derived SET text=NULL, status='deleted', indexed=0, erased_ms=? WHERE id=?",
            (at_ms, d),
        )
        conn.execute("DELETE FROM derived_source WHERE derived_id=?", (d,))
        report.derived.append(d)
    for d in p.derived_rederive:
        conn.execute(
            "UPDATE derived SET text=NULL, status='needs_rederivation', indexed=0, erased_ms=? "
            "WHERE id=?",
            (at_ms, d),
        )
        for kind, ident in p.gone:
            conn.execute(
                "DELETE FROM derived_source WHERE derived_id=? AND kind=? AND source_id=?",
                (d, kind, ident),
            )
        report.rederive.append(d)
    for kind, ident in p.sources:
        conn.execute("DELETE FROM source WHERE kind=? AND id=?", (kind, ident))
        report.sources.append((kind, ident))
    return report


def log_deletion(
    conn: apsw.Connection, log_path: Path | None, entry: dict[str, Any], at_ms: int
) -> None:
    """Record ``entry`` (ids only) in the database and, fsync'd, in the log file."""
    entry = {"at_ms": at_ms, **entry}
    line = json.dumps(entry, ensure_ascii=False, sort_keys=True)
    conn.execute(
        "INSERT INTO deletion(at_ms, what, item) VALUES (?,?,?)",
        (at_ms, str(entry.get("op", "forget")), line),
    )
    if log_path is None:
        return
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_log(log_path: Path) -> list[dict[str, Any]]:
    """The entries of a deletion log (none if it does not exist)."""
    if not log_path.exists():
        return []
    entries = []
    lines = log_path.read_text().splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as exc:
            if n == len(lines):
                log.warning("deletion log %s: torn last line ignored", log_path)
                break
            raise MemoryStoreError(
                "memory.deletion_log", path=log_path, line=n, reason=exc
            ) from None
        if not isinstance(entry, dict):
            raise MemoryStoreError(
                "memory.deletion_log", path=log_path, line=n, reason="not an object"
            )
        entries.append(entry)
    return entries


def remove_from_index(index: IndexHook | None, candidates: list[str], report: ForgetReport) -> None:
    """Ask the index to drop ``candidates``; record only what it says it removed."""
    if index is None or not candidates:
        return
    try:
        removed = index.remove(list(candidates))
    except Exception as exc:
        log.exception("index removal of %d entries failed", len(candidates))
        report.index_error = f"{type(exc).__name__}: {exc}"
        return
    report.index_entries.extend(r for r in removed if r not in report.index_entries)


def checkpoint(conn: apsw.Connection) -> None:
    """Move the WAL into the database and truncate it, so old pages do not linger there."""
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except apsw.Error as exc:
        log.warning("WAL checkpoint after forgetting failed: %s", exc)


def _roots_of(entry: dict[str, Any]) -> tuple[Roots, list[str]]:
    sources = [s for s in (parse_source(x) for x in entry.get("sources", [])) if s is not None]
    versions = {str(k): [int(v) for v in vs] for k, vs in (entry.get("versions") or {}).items()}
    roots = Roots(
        assertions=[str(a) for a in entry.get("assertions", [])],
        sources=sources,
        derived=[str(d) for d in entry.get("derived_delete", [])],
        rederive=[str(d) for d in entry.get("derived_rederive", [])],
        versions=versions,
    )
    return roots, [str(i) for i in entry.get("index", [])]


def reapply_deletions(
    db: Path | apsw.Connection,
    *,
    log_path: Path | None = None,
    index: IndexHook | None = None,
    at_ms: int = 0,
) -> ForgetReport:
    """After a restore from backup: erase again everything the deletion log names.

    ``db`` is the restored database (a path or an open connection); ``log_path``
    defaults to the log beside a path. Ids that the restored database does not know get a
    tombstone so they cannot be committed again. Returns what was erased this time.
    """
    if isinstance(db, Path):
        conn = open_memory_db(db)
        log_path = log_path or deletion_log_path(db)
    else:
        conn = db
    if log_path is None:
        raise MemoryStoreError(
            "memory.invalid", field="log_path", reason="needed when an open connection is given"
        )
    report = ForgetReport()
    candidates: list[str] = []
    try:
        entries = read_log(log_path)
        with transaction(conn):
            for entry in entries:
                roots, logged_index = _roots_of(entry)
                at = at_ms or int(entry.get("at_ms", 0))
                for aid in roots.assertions:
                    conn.execute(
                        "INSERT OR IGNORE INTO assertion(id, head, status, created_ms, "
                        "updated_ms) VALUES (?, 0, 'forgotten', ?, ?)",
                        (aid, at, at),
                    )
                p = plan(conn, roots)
                report.merge(execute(conn, p, at))
                candidates.extend(
                    c for c in (*logged_index, *p.index_candidates()) if c not in candidates
                )
        remove_from_index(index, candidates, report)
        checkpoint(conn)
    finally:
        if isinstance(db, Path):
            conn.close()
    log.info("re-applied %d deletions from %s", len(entries), log_path)
    return report
