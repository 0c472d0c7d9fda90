"""The scheduler's durable state: ``HOME/schedule.db`` (SQLite via apsw, owner-only file).

``jobs``: one row per job (its kind, spec, recurrence, next due time, state); ``occurrences``:
one row per (job, occurrence) that was claimed — ``firing`` (claimed, its handler has not
finished), ``fired`` or ``missed``. The primary key on (job, occurrence) is the idempotency:
an occurrence is claimed at most once, so no restart, clock jump or second loop fires it twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from storage.sqlite import change_mark, open_db, transaction

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    spec TEXT NOT NULL,
    rule TEXT NOT NULL DEFAULT '',
    tz TEXT NOT NULL DEFAULT '',
    start_ms INTEGER NOT NULL,
    next_ms INTEGER,
    grace_ms INTEGER NOT NULL,
    state TEXT NOT NULL,
    remaining_ms INTEGER,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_due ON jobs (state, next_ms);
CREATE INDEX IF NOT EXISTS jobs_kind ON jobs (kind, state);
CREATE TABLE IF NOT EXISTS occurrences (
    job_id TEXT NOT NULL,
    occurrence_ms INTEGER NOT NULL,
    state TEXT NOT NULL,
    late_ms INTEGER NOT NULL,
    at_ms INTEGER NOT NULL,
    PRIMARY KEY (job_id, occurrence_ms)
);
CREATE INDEX IF NOT EXISTS occurrences_state ON occurrences (state);
"""

PENDING, PAUSED, DONE, CANCELLED = "pending", "paused", "done", "cancelled"
FIRING, FIRED, MISSED = "firing", "fired", "missed"
ACTIVE = (PENDING, PAUSED)


@dataclass(frozen=True)
class Job:
    id: str
    kind: str
    """what handles it: ``timer``, ``reminder``, ``run`` …"""
    spec: Mapping[str, Any]
    start_ms: int
    """the first occurrence (one-shot: the due time; recurring: the rule's start)"""
    next_ms: int | None
    grace_ms: int
    rule: str = ""
    """an RRULE (``FREQ=…``); empty for a one-shot job"""
    tz: str = ""
    state: str = PENDING
    remaining_ms: int | None = None
    """a paused job: how long it had left"""
    created_ms: int = 0
    updated_ms: int = 0

    @property
    def recurring(self) -> bool:
        return bool(self.rule)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


@dataclass(frozen=True)
class Occurrence:
    job: Job
    occurrence_ms: int
    late_ms: int
    state: str = FIRING


@dataclass
class Claimed:
    """What one pass over the due jobs claimed."""

    fire: list[Occurrence] = field(default_factory=list)
    missed: list[Occurrence] = field(default_factory=list)


_COLS = (
    "id, kind, spec, rule, tz, start_ms, next_ms, grace_ms, state, remaining_ms, "
    "created_ms, updated_ms"
)


def _job(row: tuple[Any, ...]) -> Job:
    return Job(
        id=str(row[0]),
        kind=str(row[1]),
        spec=json.loads(str(row[2])),
        rule=str(row[3]),
        tz=str(row[4]),
        start_ms=int(row[5]),
        next_ms=None if row[6] is None else int(row[6]),
        grace_ms=int(row[7]),
        state=str(row[8]),
        remaining_ms=None if row[9] is None else int(row[9]),
        created_ms=int(row[10]),
        updated_ms=int(row[11]),
    )


class JobStore:
    def __init__(self, path: Path, *, synchronous: str = "FULL") -> None:
        self.path = path
        self.db = open_db(path, SCHEMA, synchronous=synchronous)

    def close(self) -> None:
        self.db.close()

    def transaction(self) -> Any:
        return transaction(self.db)

    def version(self) -> tuple[int, int]:
        """Changes when a job may have changed (:func:`storage.sqlite.change_mark`); cheap
        to ask on every entry."""
        return change_mark(self.db)

    def put(self, job: Job) -> Job:
        """Insert ``job``; an id already kept returns the kept job (idempotent)."""
        with transaction(self.db):
            kept = self.get(job.id)
            if kept is not None:
                return kept
            self.write(job)
        return job

    def write(self, job: Job) -> None:
        """Keep ``job`` as it is now (insert or replace: one statement, or part of the caller's
        transaction)."""
        self.db.execute(
            f"INSERT OR REPLACE INTO jobs ({_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                job.id,
                job.kind,
                json.dumps(dict(job.spec), ensure_ascii=False, sort_keys=True),
                job.rule,
                job.tz,
                job.start_ms,
                job.next_ms,
                job.grace_ms,
                job.state,
                job.remaining_ms,
                job.created_ms,
                job.updated_ms,
            ),
        )

    def update(self, job: Job) -> Job:
        with transaction(self.db):
            self.write(job)
        return job

    def put_many(self, jobs: list[Job]) -> None:
        with transaction(self.db):
            for job in jobs:
                self.write(job)

    def get(self, job_id: str) -> Job | None:
        row = self.db.execute(f"SELECT {_COLS} FROM jobs WHERE id=?", (job_id,)).fetchone()
        return None if row is None else _job(row)

    def jobs(self, kind: str | None = None, *, active: bool = True) -> list[Job]:
        where, params = [], []
        if kind is not None:
            where.append("kind=?")
            params.append(kind)
        if active:
            where.append("state IN ('pending','paused')")
        sql = f"SELECT {_COLS} FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [_job(r) for r in self.db.execute(sql + " ORDER BY next_ms, id", params)]

    def next_due_ms(self) -> int | None:
        row = self.db.execute(
            "SELECT MIN(next_ms) FROM jobs WHERE state='pending' AND next_ms IS NOT NULL"
        ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def due(self, now_ms: int, limit: int) -> list[Job]:
        rows = self.db.execute(
            f"SELECT {_COLS} FROM jobs WHERE state='pending' AND next_ms IS NOT NULL "
            "AND next_ms <= ? ORDER BY next_ms LIMIT ?",
            (now_ms, limit),
        )
        return [_job(r) for r in rows]

    def claim(self, job: Job, occurrence_ms: int, state: str, late_ms: int, now_ms: int) -> bool:
        """Record (job, occurrence) once; ``False`` if it was already claimed."""
        self.db.execute(
            "INSERT OR IGNORE INTO occurrences (job_id, occurrence_ms, state, late_ms, at_ms) "
            "VALUES (?,?,?,?,?)",
            (job.id, occurrence_ms, state, late_ms, now_ms),
        )
        return bool(self.db.changes())

    def finish_many(self, done: list[tuple[str, int]], now_ms: int) -> None:
        """(job, occurrence) pairs whose handlers ran: ``fired`` (one transaction)."""
        if not done:
            return
        with transaction(self.db):
            for job_id, occurrence_ms in done:
                self.db.execute(
                    "UPDATE occurrences SET state='fired', at_ms=? "
                    "WHERE job_id=? AND occurrence_ms=? AND state='firing'",
                    (now_ms, job_id, occurrence_ms),
                )

    def unfinished(self) -> Iterator[Occurrence]:
        """Occurrences claimed whose handler never finished (the hub stopped in between)."""
        rows = list(
            self.db.execute(
                "SELECT job_id, occurrence_ms, late_ms FROM occurrences WHERE state='firing'"
            )
        )
        for job_id, occ, late in rows:
            job = self.get(str(job_id))
            if job is not None:
                yield Occurrence(job, int(occ), int(late))

    def occurrences(self, job_id: str) -> list[tuple[int, str]]:
        """(occurrence ms, state) of ``job_id``, oldest first."""
        return [
            (int(o), str(s))
            for o, s in self.db.execute(
                "SELECT occurrence_ms, state FROM occurrences WHERE job_id=? "
                "ORDER BY occurrence_ms",
                (job_id,),
            )
        ]

    def set(self, job: Job, **changes: Any) -> Job:
        return self.update(replace(job, **changes))
