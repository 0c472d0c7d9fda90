"""L3 assertions: versioned facts with compare-and-swap commits and dependencies.

``commit(id, expected_version, …)`` writes version ``h + 1`` only if the head ``h`` equals
``expected_version`` (0 creates the id); otherwise it raises :class:`Conflict` carrying the
head. A commit with a ``request_id`` that was already committed returns the stored receipt
and writes nothing (the same request id with different content is refused).

A version may depend on specific versions of other assertions. When an assertion gets a
new version, every current assertion whose head depends on an older version of it becomes
``needs_reevaluation`` — never negated or changed — and so on transitively. A version whose
dependencies are already stale is committed as ``needs_reevaluation``.

Sensitivity: a version carries at least the highest sensitivity of its dependencies and
its sources (assertions, derived items, registered outside sources); an unknown source
counts as ``high``.

``forget(id)`` (see :mod:`hub.memory.forget`) erases every version's payload of the id and
of everything derived from it, keeps tombstones, refuses later commits of those ids and
reports exactly what it deleted.

The recall index is told through an optional :class:`IndexHook`: ``upsert`` after each
commit (item id ``assertion:<id>``, the head's sentence), ``remove`` on forget. Hooks run
after the database transaction, never inside it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import apsw

from hub.memory import forget as forgetting
from hub.memory.errors import Conflict, MemoryStoreError
from hub.memory.index_api import IndexHook
from hub.memory.models import (
    Assertion,
    Change,
    CommitReceipt,
    Dependency,
    ForgetReport,
    Version,
    assertion_item,
    derived_item,
)
from hub.memory.propagation import raise_from
from hub.memory.schema import open_memory_db
from hub.memory.sensitivity import (
    LEVELS,
    Source,
    check_level,
    format_source,
    highest,
    parse_source,
    parse_sources,
)
from protos.clock import now_ms
from storage.sqlite import transaction

log = logging.getLogger(__name__)

ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$")
PREDICATE_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
MAX_SUBJECT = 200
MAX_VALUE_BYTES = 16 * 1024
MAX_DEPENDENCIES = 64
MAX_REQUEST_ID = 128

Listener = Callable[[Change], None]


def new_id() -> str:
    return "m-" + secrets.token_hex(8)


def check_id(value: object, field: str = "id") -> str:
    if not isinstance(value, str) or not ID_RE.match(value):
        raise MemoryStoreError(
            "memory.invalid",
            field=field,
            reason=f"{value!r} is not an id (letters, digits, _ . : @ -; at most 128)",
        )
    return value


def _invalid(field: str, reason: str) -> MemoryStoreError:
    return MemoryStoreError("memory.invalid", field=field, reason=reason)


def _stored_sources(text: str | None) -> tuple[Source, ...]:
    if not text:
        return ()
    out = []
    for item in json.loads(text):
        source = parse_source(item)
        if source is not None:
            out.append(source)
    return tuple(out)


class AssertionStore:
    """The L3 assertions of one memory database (one connection; one per thread)."""

    def __init__(
        self,
        conn: apsw.Connection,
        *,
        index: IndexHook | None = None,
        deletion_log: Path | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.conn = conn
        self.index = index
        self.deletion_log = deletion_log
        self.clock = clock
        self._listeners: list[Listener] = []
        self._closers: list[Callable[[], None]] = []

    @classmethod
    def open(
        cls,
        path: Path,
        *,
        index: IndexHook | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> AssertionStore:
        """Open the database at ``path``; its deletion log is ``<path>.deletions``."""
        return cls(
            open_memory_db(path),
            index=index,
            deletion_log=forgetting.deletion_log_path(path),
            clock=clock,
        )

    def close(self) -> None:
        for closer in reversed(self._closers):
            try:
                closer()
            except Exception:
                log.exception("closing %r failed", closer)
        self._closers.clear()
        self.conn.close()

    def close_with(self, closer: Callable[[], None]) -> None:
        """Also call ``closer`` (the index this store owns) when the store closes."""
        self._closers.append(closer)

    def live(self, item_ids: list[str]) -> list[str]:
        """The index item ids whose original still exists (the recall index's ``is_live``).

        ``assertion:<id>`` is live unless forgotten, ``derived:<id>`` while current; ids
        of other kinds are not this store's to judge and pass through.
        """
        out = []
        for item in item_ids:
            kind, sep, ident = item.partition(":")
            if sep and kind == "assertion":
                row = self.conn.execute(
                    "SELECT status FROM assertion WHERE id=?", (ident,)
                ).fetchone()
                if row is None or row[0] == "forgotten":
                    continue
            elif sep and kind == "derived":
                row = self.conn.execute(
                    "SELECT status FROM derived WHERE id=?", (ident,)
                ).fetchone()
                if row is None or row[0] != "current":
                    continue
            out.append(item)
        return out

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener`` after every committed change (commit, forget)."""
        self._listeners.append(listener)

    def _changed(self, change: Change) -> None:
        for listener in self._listeners:
            try:
                listener(change)
            except Exception:
                log.exception("memory listener %r failed on %s", listener, sorted(change.ids))

    # ------------------------------------------------------------------ reading
    def _version(self, row: tuple[Any, ...]) -> Version:
        (aid, ver, status, subject, predicate, value, conf, sources, sens, imp, created, erased) = (
            row
        )
        deps = tuple(
            (str(r[0]), int(r[1]))
            for r in self.conn.execute(
                "SELECT on_id, on_version FROM dependency WHERE id=? AND version=? ORDER BY on_id",
                (aid, ver),
            )
        )
        return Version(
            id=aid,
            version=ver,
            status=status,
            subject=subject,
            predicate=predicate,
            value=json.loads(value) if value is not None else None,
            confidence=conf,
            sources=_stored_sources(sources),
            sensitivity=sens or "high",
            importance=imp,
            depends_on=deps,
            created_ms=created,
            erased=erased is not None,
        )

    _COLUMNS = (
        "id, version, status, subject, predicate, value, confidence, sources, sensitivity, "
        "importance, created_ms, erased_ms"
    )

    def find(self, assertion_id: str) -> Assertion | None:
        """The assertion (its head version and status), or None if the id never existed."""
        row = self.conn.execute(
            "SELECT head, status FROM assertion WHERE id=?", (assertion_id,)
        ).fetchone()
        if row is None:
            return None
        head, status = row
        vrow = self.conn.execute(
            f"SELECT {self._COLUMNS} FROM version WHERE id=? AND version=?", (assertion_id, head)
        ).fetchone()
        if vrow is None:  # a tombstone written by a re-applied deletion
            version = Version(
                assertion_id, head, status, None, None, None, None, (), "high", None, (), 0, True
            )
        else:
            version = self._version(vrow)
        return Assertion(assertion_id, status, version)

    def get(self, assertion_id: str) -> Assertion:
        found = self.find(assertion_id)
        if found is None:
            raise MemoryStoreError("memory.unknown", id=assertion_id)
        return found

    def history(self, assertion_id: str) -> list[Version]:
        """Every version of the id, oldest first (erased ones without payload)."""
        rows = self.conn.execute(
            f"SELECT {self._COLUMNS} FROM version WHERE id=? ORDER BY version", (assertion_id,)
        ).fetchall()
        return [self._version(r) for r in rows]

    def dependents(self, assertion_id: str) -> list[tuple[str, int, int]]:
        """``(id, version, on_version)`` of every version that depends on this assertion."""
        return [
            (str(r[0]), int(r[1]), int(r[2]))
            for r in self.conn.execute(
                "SELECT id, version, on_version FROM dependency WHERE on_id=? ORDER BY id, version",
                (assertion_id,),
            )
        ]

    def current(self, predicate: str | None = None) -> list[Assertion]:
        """Assertions whose head is ``current`` (optionally with one predicate), by id."""
        if predicate is None:
            rows = self.conn.execute(
                "SELECT id FROM assertion WHERE status='current' ORDER BY id"
            ).fetchall()
        else:
            rows = self.conn.execute(
                "SELECT a.id FROM assertion a JOIN version v ON v.id=a.id AND v.version=a.head "
                "WHERE a.status='current' AND v.predicate=? ORDER BY a.id",
                (predicate,),
            ).fetchall()
        return [self.get(str(r[0])) for r in rows]

    def status_counts(self) -> dict[str, int]:
        return {
            str(s): int(n)
            for s, n in self.conn.execute("SELECT status, count(*) FROM assertion GROUP BY status")
        }

    # ------------------------------------------------------------------ sensitivity
    def register_source(self, source: Source, sensitivity: str) -> tuple[list[str], list[str]]:
        """Record the sensitivity of an outside source (a mail, a timeline entry, …).

        Raising it raises everything that came from it, transitively (and re-indexes it
        with the new level); lowering it lowers nothing already derived. Returns the
        ``(assertion ids, derived ids)`` that were raised.
        """
        parsed = parse_source(source)
        if parsed is None:
            raise _invalid("source", f"{source!r} is not a (kind, id) source")
        if check_level(sensitivity) is None:
            raise _invalid("sensitivity", f"{sensitivity!r}: one of {', '.join(LEVELS)}")
        with transaction(self.conn):
            self.conn.execute(
                "INSERT INTO source(kind, id, sensitivity) VALUES (?,?,?) "
                "ON CONFLICT(kind, id) DO UPDATE SET sensitivity=excluded.sensitivity",
                (*parsed, sensitivity),
            )
            assertions, derived = raise_from(self.conn, parsed, sensitivity)
        if assertions or derived:
            log.info(
                "source %s is now %s: raised %d assertions, %d derived items",
                format_source(parsed),
                sensitivity,
                len(assertions),
                len(derived),
            )
            self._reindex(assertions, derived)
        return assertions, derived

    def _reindex(self, assertions: list[str], derived: list[str]) -> None:
        """Upsert the index entries of these items again (their level changed)."""
        if self.index is None:
            return
        for aid in assertions:
            a = self.find(aid)
            if a is None or a.status == "forgotten" or not a.head.sentence:
                continue
            try:
                self.index.upsert(
                    assertion_item(aid),
                    a.head.sentence,
                    sensitivity=a.sensitivity,
                    sources=list(a.sources) or [("assertion", aid)],
                    importance=float(a.head.importance or 0.0),
                    created_ms=a.head.created_ms,
                )
            except Exception:
                log.exception("index re-upsert of %s failed", aid)
        for did in derived:
            row = self.conn.execute(
                "SELECT text, sensitivity, created_ms, indexed FROM derived WHERE id=?", (did,)
            ).fetchone()
            if row is None or not row[3] or row[0] is None:
                continue
            sources = [
                (str(k), str(i))
                for k, i in self.conn.execute(
                    "SELECT kind, source_id FROM derived_source WHERE derived_id=?", (did,)
                )
            ]
            try:
                self.index.upsert(
                    derived_item(did),
                    str(row[0]),
                    sensitivity=str(row[1]),
                    sources=sources,
                    importance=0.5,
                    created_ms=int(row[2]),
                )
            except Exception:
                log.exception("index re-upsert of derived %s failed", did)

    def registered_sensitivity(self, source: Source) -> str | None:
        """The level registered for an outside source (None: none registered)."""
        row = self.conn.execute(
            "SELECT sensitivity FROM source WHERE kind=? AND id=?", tuple(source)
        ).fetchone()
        return None if row is None else str(row[0])

    def source_sensitivity(self, source: Source) -> str:
        """The sensitivity of one source; anything missing or forgotten counts as high."""
        kind, ident = source
        row: tuple[Any, ...] | None
        if kind == "assertion":
            row = self.conn.execute(
                "SELECT v.sensitivity FROM assertion a JOIN version v "
                "ON v.id=a.id AND v.version=a.head WHERE a.id=? AND a.status!='forgotten'",
                (ident,),
            ).fetchone()
        elif kind == "derived":
            row = self.conn.execute(
                "SELECT sensitivity FROM derived WHERE id=? AND status='current'", (ident,)
            ).fetchone()
        else:
            row = self.conn.execute(
                "SELECT sensitivity FROM source WHERE kind=? AND id=?", (kind, ident)
            ).fetchone()
        return highest([row[0] if row else None])

    # ------------------------------------------------------------------ writing
    def commit(
        self,
        assertion_id: str | None,
        expected_version: int,
        *,
        subject: str,
        predicate: str,
        value: Any,
        confidence: float = 1.0,
        sources: Sequence[Any] = (),
        sensitivity: str = "medium",
        depends_on: Sequence[Dependency] = (),
        importance: float = 0.5,
        request_id: str | None = None,
        erase_previous: bool = False,
    ) -> CommitReceipt:
        """Write version ``expected_version + 1`` of ``assertion_id`` (None: a new id).

        Raises :class:`Conflict` if the head is not ``expected_version``;
        ``memory.forgotten`` if the id was forgotten. ``erase_previous`` also erases the
        payload of every earlier version (a correction that must not be kept).
        """
        aid = check_id(assertion_id) if assertion_id is not None else new_id()
        if assertion_id is None and expected_version != 0:
            raise _invalid("expected_version", "a new assertion is committed with version 0")
        if not isinstance(expected_version, int) or expected_version < 0:
            raise _invalid("expected_version", f"{expected_version!r} is not a version (≥ 0)")
        if not isinstance(subject, str) or not subject.strip() or len(subject) > MAX_SUBJECT:
            raise _invalid("subject", f"a non-empty text of at most {MAX_SUBJECT} characters")
        if not isinstance(predicate, str) or not PREDICATE_RE.match(predicate):
            raise _invalid("predicate", f"{predicate!r}: lower-case words joined by . _ -")
        try:
            value_json = json.dumps(value, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise _invalid("value", f"not JSON: {exc}") from None
        if value is None or len(value_json.encode()) > MAX_VALUE_BYTES:
            raise _invalid("value", f"a JSON value of at most {MAX_VALUE_BYTES} bytes")
        for name, number in (("confidence", confidence), ("importance", importance)):
            if not isinstance(number, int | float) or not 0.0 <= float(number) <= 1.0:
                raise _invalid(name, f"{number!r} is not a number from 0 to 1")
        if check_level(sensitivity) is None:
            raise _invalid("sensitivity", f"{sensitivity!r}: one of {', '.join(LEVELS)}")
        parsed_sources = parse_sources(sources)
        deps = self._parse_dependencies(aid, depends_on)
        if request_id is not None and (
            not isinstance(request_id, str) or not request_id or len(request_id) > MAX_REQUEST_ID
        ):
            raise _invalid("request_id", f"a text of 1 to {MAX_REQUEST_ID} characters")
        digest = hashlib.sha256(
            json.dumps(
                [
                    assertion_id,  # None for a new id: a retry draws another random one
                    expected_version,
                    subject,
                    predicate,
                    value_json,
                    float(confidence),
                    [list(s) for s in parsed_sources],
                    sensitivity,
                    [list(d) for d in deps],
                    float(importance),
                    erase_previous,
                ],
                ensure_ascii=False,
            ).encode()
        ).hexdigest()

        merged: CommitReceipt | None = None
        with transaction(self.conn):
            if request_id is not None:
                row = self.conn.execute(
                    "SELECT digest, receipt FROM request WHERE request_id=?", (request_id,)
                ).fetchone()
                if row is not None:
                    earlier = CommitReceipt.from_json(row[1])
                    if row[0] != digest:
                        raise MemoryStoreError(
                            "memory.request_reused",
                            request_id=request_id,
                            id=earlier.id,
                            version=earlier.version,
                        )
                    log.info("commit %s: request %s already committed", aid, request_id)
                    return earlier
            if assertion_id is None:
                merged = self._merge_duplicate(
                    subject, predicate, value_json, parsed_sources, sensitivity, request_id, digest
                )
            if merged is None:
                receipt, correction = self._commit_locked(
                    aid,
                    expected_version,
                    digest=digest,
                    row=(
                        subject,
                        predicate,
                        value_json,
                        float(confidence),
                        parsed_sources,
                        sensitivity,
                        float(importance),
                    ),
                    deps=deps,
                    request_id=request_id,
                    erase_previous=erase_previous,
                )
        if merged is not None:  # after the transaction: listeners (the profile) write too
            self._after_merge(merged)
            return merged
        if correction is not None:
            # entries derived from the erased versions go before the new text goes in
            candidates = [c for c in correction.index_candidates() if c != assertion_item(aid)]
            forgetting.remove_from_index(self.index, candidates, ForgetReport())
            forgetting.checkpoint(self.conn)
            log.info(
                "commit %s v%d erased versions %s, forgot %s",
                aid,
                receipt.version,
                receipt.erased_versions,
                receipt.forgotten,
            )
        self._after_commit(receipt, subject, predicate, value, parsed_sources, importance)
        return receipt

    def _merge_duplicate(
        self,
        subject: str,
        predicate: str,
        value_json: str,
        sources: tuple[Source, ...],
        declared: str,
        request_id: str | None,
        digest: str,
    ) -> CommitReceipt | None:
        """A new commit of a fact already current (same subject, predicate and value):
        its sources join the existing head (no new version, dependents untouched) and its
        sensitivity rises to the highest of theirs. None: no such fact."""
        row = self.conn.execute(
            "SELECT a.id, a.head, v.sources, v.sensitivity FROM assertion a "
            "JOIN version v ON v.id=a.id AND v.version=a.head "
            "WHERE a.status='current' AND v.predicate=? AND v.subject=? AND v.value=? "
            "ORDER BY a.created_ms LIMIT 1",
            (predicate, subject, value_json),
        ).fetchone()
        if row is None:
            return None
        aid, head, stored, level = str(row[0]), int(row[1]), row[2], str(row[3] or "high")
        have = list(_stored_sources(stored))
        added = [s for s in sources if s not in have]
        effective = highest([level, declared, *(self.source_sensitivity(s) for s in added)])
        at = self.clock()
        if added or effective != level:
            self.conn.execute(
                "UPDATE version SET sources=?, sensitivity=? WHERE id=? AND version=?",
                (
                    json.dumps([list(s) for s in have + added], ensure_ascii=False),
                    effective,
                    aid,
                    head,
                ),
            )
            self.conn.execute("UPDATE assertion SET updated_ms=? WHERE id=?", (at, aid))
        for source_kind, source_id in added:
            self.conn.execute(
                "INSERT OR IGNORE INTO assertion_source(kind, source_id, id) VALUES (?,?,?)",
                (source_kind, source_id, aid),
            )
        receipt = CommitReceipt(
            id=aid,
            version=head,
            status="current",
            sensitivity=effective,
            committed_ms=at,
            request_id=request_id,
            merged=True,
        )
        if request_id is not None:
            self.conn.execute(
                "INSERT INTO request(request_id, id, digest, receipt) VALUES (?,?,?,?)",
                (request_id, aid, digest, receipt.to_json()),
            )
        log.info(
            "commit of a fact already held as %s v%d: %d sources merged", aid, head, len(added)
        )
        return receipt

    def _after_merge(self, receipt: CommitReceipt) -> None:
        """The index entry of a merged fact carries its new sources and level."""
        self._reindex([receipt.id], [])
        found = self.find(receipt.id)
        predicates = {found.head.predicate} if found and found.head.predicate else set()
        self._changed(Change(frozenset({receipt.id}), frozenset(predicates)))

    def _parse_dependencies(self, aid: str, depends_on: Sequence[Any]) -> tuple[Dependency, ...]:
        out: dict[str, int] = {}
        for dep in depends_on:
            if (
                not isinstance(dep, list | tuple)
                or len(dep) != 2
                or not isinstance(dep[1], int)
                or isinstance(dep[1], bool)
            ):
                raise _invalid("depends_on", f"{dep!r} is not an (id, version) pair")
            dep_id = check_id(dep[0], "depends_on")
            if dep_id == aid:
                raise MemoryStoreError(
                    "memory.dependency",
                    id=aid,
                    dep=dep_id,
                    reason="an assertion cannot depend on itself",
                )
            if dep_id in out and out[dep_id] != dep[1]:
                raise MemoryStoreError(
                    "memory.dependency", id=aid, dep=dep_id, reason="named with two versions"
                )
            out[dep_id] = int(dep[1])
        if len(out) > MAX_DEPENDENCIES:
            raise _invalid("depends_on", f"at most {MAX_DEPENDENCIES} dependencies")
        return tuple(sorted(out.items()))

    def _commit_locked(
        self,
        aid: str,
        expected: int,
        *,
        digest: str,
        row: tuple[str, str, str, float, tuple[Source, ...], str, float],
        deps: tuple[Dependency, ...],
        request_id: str | None,
        erase_previous: bool,
    ) -> tuple[CommitReceipt, forgetting.Plan | None]:
        subject, predicate, value_json, confidence, sources, declared, importance = row
        at = self.clock()
        head_row = self.conn.execute(
            "SELECT head, status FROM assertion WHERE id=?", (aid,)
        ).fetchone()
        if head_row is not None and head_row[1] == "forgotten":
            raise MemoryStoreError("memory.forgotten", id=aid)
        head, head_status = head_row if head_row is not None else (0, "absent")
        if head != expected:
            raise Conflict(aid, expected, int(head), str(head_status))

        stale = False
        levels: list[str | None] = [declared]
        for dep_id, dep_version in deps:
            dep_row = self.conn.execute(
                "SELECT a.head, a.status, v.sensitivity FROM assertion a LEFT JOIN version v "
                "ON v.id=a.id AND v.version=? WHERE a.id=?",
                (dep_version, dep_id),
            ).fetchone()
            name = f"{dep_id} v{dep_version}"
            if dep_row is None:
                raise MemoryStoreError(
                    "memory.dependency", id=aid, dep=name, reason="no such assertion"
                )
            dep_head, dep_status, dep_sensitivity = dep_row
            if dep_status == "forgotten":
                raise MemoryStoreError(
                    "memory.dependency", id=aid, dep=name, reason="it was forgotten"
                )
            if not 1 <= dep_version <= dep_head:
                raise MemoryStoreError(
                    "memory.dependency", id=aid, dep=name, reason=f"its head is v{dep_head}"
                )
            stale = stale or dep_version != dep_head or dep_status != "current"
            levels.append(dep_sensitivity)
        levels += [self.source_sensitivity(s) for s in sources]
        effective = highest(levels)

        version = head + 1
        status = "needs_reevaluation" if stale else "current"
        if head_row is None:
            self.conn.execute(
                "INSERT INTO assertion(id, head, status, created_ms, updated_ms) "
                "VALUES (?,?,?,?,?)",
                (aid, version, status, at, at),
            )
        else:
            self.conn.execute(
                "UPDATE assertion SET head=?, status=?, updated_ms=? WHERE id=?",
                (version, status, at, aid),
            )
            self.conn.execute(
                "UPDATE version SET status='superseded' WHERE id=? AND version<?", (aid, version)
            )
        self.conn.execute(
            "INSERT INTO version(id, version, status, subject, predicate, value, confidence, "
            "sources, sensitivity, importance, request_id, created_ms) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                aid,
                version,
                status,
                subject,
                predicate,
                value_json,
                confidence,
                json.dumps([list(s) for s in sources], ensure_ascii=False),
                effective,
                importance,
                request_id,
                at,
            ),
        )
        for dep_id, dep_version in deps:
            self.conn.execute(
                "INSERT INTO dependency(id, version, on_id, on_version) VALUES (?,?,?,?)",
                (aid, version, dep_id, dep_version),
            )
        for source_kind, source_id in sources:
            self.conn.execute(
                "INSERT OR IGNORE INTO assertion_source(kind, source_id, id) VALUES (?,?,?)",
                (source_kind, source_id, aid),
            )
        correction: forgetting.Plan | None = None
        report = ForgetReport()
        if erase_previous and head:
            correction = forgetting.plan(
                self.conn, forgetting.Roots(versions={aid: list(range(1, version))})
            )
            if not correction.empty:
                forgetting.log_deletion(self.conn, self.deletion_log, correction.log_entry(), at)
                report = forgetting.execute(self.conn, correction, at)
        marked = self._mark_dependents(aid, at)
        receipt = CommitReceipt(
            id=aid,
            version=version,
            status=status,
            sensitivity=effective,
            committed_ms=at,
            request_id=request_id,
            marked=tuple(marked),
            erased_versions=tuple(report.versions.get(aid, ())),
            forgotten=tuple(report.assertions),
        )
        if request_id is not None:
            self.conn.execute(
                "INSERT INTO request(request_id, id, digest, receipt) VALUES (?,?,?,?)",
                (request_id, aid, digest, receipt.to_json()),
            )
        return receipt, correction

    def _mark_dependents(self, changed: str, at: int) -> list[str]:
        """Mark current assertions whose head depends on a stale version, transitively."""
        marked: list[str] = []
        queue = [changed]
        while queue:
            upstream = queue.pop(0)
            rows = self.conn.execute(
                "SELECT DISTINCT a.id FROM dependency d "
                "JOIN assertion a ON a.id=d.id AND a.head=d.version "
                "JOIN assertion u ON u.id=d.on_id "
                "WHERE d.on_id=? AND a.status='current' "
                "AND (d.on_version!=u.head OR u.status!='current') ORDER BY a.id",
                (upstream,),
            ).fetchall()
            for (dependent,) in rows:
                self.conn.execute(
                    "UPDATE assertion SET status='needs_reevaluation', updated_ms=? WHERE id=?",
                    (at, dependent),
                )
                self.conn.execute(
                    "UPDATE version SET status='needs_reevaluation' WHERE id=? AND version="
                    "(SELECT head FROM assertion WHERE id=?)",
                    (dependent, dependent),
                )
                marked.append(str(dependent))
                queue.append(str(dependent))
        if marked:
            log.info("%s changed: %s need re-evaluation", changed, ", ".join(marked))
        return marked

    def _after_commit(
        self,
        receipt: CommitReceipt,
        subject: str,
        predicate: str,
        value: Any,
        sources: tuple[Source, ...],
        importance: float,
    ) -> None:
        if self.index is not None:
            try:
                self.index.upsert(
                    assertion_item(receipt.id),
                    Version(
                        receipt.id,
                        receipt.version,
                        receipt.status,
                        subject,
                        predicate,
                        value,
                        None,
                        sources,
                        receipt.sensitivity,
                        importance,
                        (),
                        receipt.committed_ms,
                    ).sentence,
                    sensitivity=receipt.sensitivity,
                    sources=list(sources) or [("assertion", receipt.id)],
                    importance=float(importance),
                    created_ms=receipt.committed_ms,
                )
            except Exception:
                log.exception("index upsert of %s v%d failed", receipt.id, receipt.version)
        predicates = {predicate}
        for dependent in receipt.marked:
            found = self.find(dependent)
            if found is not None and found.head.predicate:
                predicates.add(found.head.predicate)
        self._changed(Change(frozenset({receipt.id, *receipt.marked}), frozenset(predicates)))

    # ------------------------------------------------------------------ forgetting
    def forget(self, assertion_id: str) -> ForgetReport:
        """Erase the id and everything derived from it; report exactly what was deleted."""
        check_id(assertion_id)
        if self.find(assertion_id) is None:
            raise MemoryStoreError("memory.unknown", id=assertion_id)
        return self.erase(forgetting.Roots(assertions=[assertion_id]))

    def forget_source(self, source: Source) -> ForgetReport:
        """An outside source was deleted: erase what came from it (assertions, derived)."""
        parsed = parse_source(source)
        if parsed is None:
            raise _invalid("source", f"{source!r} is not a (kind, id) source")
        if parsed[0] == "assertion":
            return self.forget(parsed[1])
        return self.erase(forgetting.Roots(sources=[parsed]))

    def erase(self, roots: forgetting.Roots) -> ForgetReport:
        """Carry out one deletion from ``roots`` (see :mod:`hub.memory.forget`)."""
        with transaction(self.conn):
            plan = forgetting.plan(self.conn, roots)
            at = self.clock()
            if not plan.empty:
                forgetting.log_deletion(self.conn, self.deletion_log, plan.log_entry(), at)
            report = forgetting.execute(self.conn, plan, at)
        forgetting.remove_from_index(self.index, plan.index_candidates(), report)
        forgetting.checkpoint(self.conn)
        log.info(
            "forgot %s: %d assertions, %d derived, %d to re-derive, %d index entries",
            ", ".join(format_source(s) for s in roots.all()),
            len(report.assertions),
            len(report.derived),
            len(report.rederive),
            len(report.index_entries),
        )
        if plan.predicates or report.assertions:
            self._changed(Change(frozenset(plan.assertions), frozenset(plan.predicates)))
        return report
