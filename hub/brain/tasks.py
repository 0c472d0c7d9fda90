"""The brain's task state machine, persisted (``HOME/brain/tasks.db``, SQLite via apsw).

States, with a trace id on every task::

    received → admitted → thinking → waiting_for_consent → acting → verifying → done
                                                                               ↘ failed

Every transition is checked against :data:`TRANSITIONS` and written before the brain goes
on (``synchronous=FULL``), with a row in ``transitions`` (from, to, note, time).

What makes a restart *resume* instead of redo:

- **steps**: each gateway call a task makes is a step keyed by (task id, step key) with the
  call id it used and, once known, its receipt. A resumed task skips every step with a
  receipt; a step without one is re-issued with the *same* call id, and the gateway ledger
  (idempotent on (task id, call id)) hands back the recorded decision and receipt instead
  of running the tool twice;
- **history**: an LLM agent's message history is saved after every model response and every
  batch of tool results, so a resumed agent continues from its last saved message;
- **budget**: the shared tool-call budget of a run is counted here, so a restart does not
  hand out a fresh 120 calls.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from hub.brain.errors import BrainError
from protos.clock import now_ms
from storage.group_commit import GroupCommit
from storage.sqlite import open_db, transaction

STATES = (
    "received",
    "admitted",
    "thinking",
    "waiting_for_consent",
    "acting",
    "verifying",
    "done",
    "failed",
)
FINAL = frozenset({"done", "failed"})
TRANSITIONS: dict[str, frozenset[str]] = {
    "received": frozenset({"admitted", "failed"}),
    "admitted": frozenset({"thinking", "failed"}),
    "thinking": frozenset({"waiting_for_consent", "acting", "verifying", "done", "failed"}),
    "waiting_for_consent": frozenset({"acting", "verifying", "thinking", "done", "failed"}),
    "acting": frozenset({"waiting_for_consent", "verifying", "thinking", "done", "failed"}),
    "verifying": frozenset({"acting", "thinking", "waiting_for_consent", "done", "failed"}),
    "done": frozenset(),
    "failed": frozenset(),
}

SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    task_id     TEXT PRIMARY KEY,
    trace_id    TEXT NOT NULL,
    run_id      TEXT NOT NULL,
    parent_id   TEXT NOT NULL DEFAULT '',
    owner       TEXT NOT NULL,
    scope       TEXT NOT NULL,
    session_id  TEXT NOT NULL DEFAULT '',
    device_id   TEXT NOT NULL DEFAULT '',
    kind        TEXT NOT NULL,
    depth       INTEGER NOT NULL DEFAULT 0,
    title       TEXT NOT NULL DEFAULT '',
    spec        TEXT NOT NULL DEFAULT '{}',
    state       TEXT NOT NULL,
    waiting_for TEXT NOT NULL DEFAULT '',
    result      TEXT NOT NULL DEFAULT '{}',
    created_ms  INTEGER NOT NULL,
    updated_ms  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_state ON tasks (state);
CREATE INDEX IF NOT EXISTS tasks_parent ON tasks (parent_id);
CREATE TABLE IF NOT EXISTS transitions (
    task_id TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    src     TEXT NOT NULL,
    dst     TEXT NOT NULL,
    note    TEXT NOT NULL DEFAULT '',
    at_ms   INTEGER NOT NULL,
    PRIMARY KEY (task_id, seq)
);
CREATE TABLE IF NOT EXISTS steps (
    task_id  TEXT NOT NULL,
    step     TEXT NOT NULL,
    call_id  TEXT NOT NULL,
    args     TEXT NOT NULL DEFAULT '{}',
    status   TEXT,
    receipt  TEXT,
    at_ms    INTEGER NOT NULL,
    PRIMARY KEY (task_id, step)
);
CREATE INDEX IF NOT EXISTS steps_call ON steps (task_id, call_id);
CREATE TABLE IF NOT EXISTS history (
    task_id  TEXT PRIMARY KEY,
    messages BLOB NOT NULL,
    at_ms    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    used   INTEGER NOT NULL,
    lim    INTEGER NOT NULL
);
"""


@dataclass(frozen=True)
class TaskRecord:
    task_id: str
    trace_id: str
    run_id: str
    parent_id: str
    owner: str
    scope: str
    session_id: str
    device_id: str
    kind: str
    """``turn`` (a main-agent or rule turn) / ``subagent``"""
    depth: int
    title: str
    spec: dict[str, Any]
    state: str
    waiting_for: str
    result: dict[str, Any]
    created_ms: int
    updated_ms: int

    @property
    def finished(self) -> bool:
        return self.state in FINAL


@dataclass(frozen=True)
class Step:
    task_id: str
    step: str
    call_id: str
    status: str | None
    receipt: dict[str, Any] | None
    args: dict[str, Any]


class _Move(NamedTuple):
    """One transition asked of :meth:`TaskStore._move`."""

    state: str
    note: str = ""
    waiting_for: str | None = None
    result: dict[str, Any] | None = None


def _check_transition(task_id: str, src: str, dst: str) -> None:
    """Raise ``task.transition`` unless :data:`TRANSITIONS` lets ``src`` go to ``dst``."""
    if dst not in TRANSITIONS[src]:
        raise BrainError("task.transition", task=task_id, src=src, dst=dst)


def _step(task_id: str, r: Any) -> Step:
    """A :class:`Step` from a row of (step, call_id, status, receipt, args)."""
    receipt = json.loads(r[3]) if r[3] else None
    return Step(task_id, r[0], r[1], r[2], receipt, json.loads(r[4]))


_COLS = (
    "task_id, trace_id, run_id, parent_id, owner, scope, session_id, device_id, kind, depth, "
    "title, spec, state, waiting_for, result, created_ms, updated_ms"
)


def _task(r: Any) -> TaskRecord:
    return TaskRecord(
        r[0],
        r[1],
        r[2],
        r[3],
        r[4],
        r[5],
        r[6],
        r[7],
        r[8],
        int(r[9]),
        r[10],
        json.loads(r[11]),
        r[12],
        r[13],
        json.loads(r[14]),
        int(r[15]),
        int(r[16]),
    )


class TaskStore:
    def __init__(
        self, path: Path, *, synchronous: str = "FULL", group: GroupCommit | None = None
    ) -> None:
        """``group``: commits are synced by its flush, before the hub sends what they say."""
        self.path = path
        self.db = open_db(path, SCHEMA, synchronous=synchronous, group=group)

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ tasks
    def create(
        self,
        task_id: str,
        *,
        trace_id: str,
        run_id: str,
        owner: str,
        scope: str,
        kind: str,
        parent_id: str = "",
        session_id: str = "",
        device_id: str = "",
        depth: int = 0,
        title: str = "",
        spec: dict[str, Any] | None = None,
        then: Sequence[str] = (),
        result: dict[str, Any] | None = None,
    ) -> tuple[TaskRecord, bool]:
        """Create a task in ``received`` and move it on through the states ``then`` (as
        :meth:`walk` would, in the same transaction), with ``result`` (a task answered at
        once, ``then`` ending in a final state); idempotent: an existing id returns its
        record, as it is, and ``False``. One row and one insert of its transitions."""
        t = now_ms()
        states = ("received", *then)
        for src, dst in itertools.pairwise(states):
            _check_transition(task_id, src, dst)
        row = (
            task_id,
            trace_id,
            run_id,
            parent_id,
            owner,
            scope,
            session_id,
            device_id,
            kind,
            depth,
            title[:200],
            json.dumps(spec or {}, ensure_ascii=False),
            states[-1],
            "",
            json.dumps(result or {}, ensure_ascii=False),
            t,
            t,
        )
        with transaction(self.db):
            self.db.execute(
                f"INSERT OR IGNORE INTO tasks ({_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                row,
            )
            if not self.db.changes():
                return self.require(task_id), False
            marks = ",".join(["(?,?,?,?,?,?)"] * len(states))
            rows = [(task_id, i, ("", *states)[i], s, "", t) for i, s in enumerate(states)]
            self.db.execute(
                f"INSERT OR IGNORE INTO transitions VALUES {marks}", [v for r in rows for v in r]
            )
        return _task(row), True

    def get(self, task_id: str) -> TaskRecord | None:
        for r in self.db.execute(f"SELECT {_COLS} FROM tasks WHERE task_id=?", (task_id,)):
            return _task(r)
        return None

    def require(self, task_id: str) -> TaskRecord:
        rec = self.get(task_id)
        if rec is None:
            raise BrainError("task.unknown", task=task_id)
        return rec

    def move(
        self,
        task_id: str,
        state: str,
        note: str = "",
        *,
        waiting_for: str | None = None,
        result: dict[str, Any] | None = None,
    ) -> TaskRecord:
        """Go to ``state`` (a move to the current state only updates the note fields)."""
        if state not in STATES:
            raise BrainError("task.transition", task=task_id, src="?", dst=state)
        with transaction(self.db):
            move = _Move(state, note, waiting_for, result)
            return self._move(self.require(task_id), move)

    def walk(self, task_id: str, *states: str, note: str = "") -> TaskRecord:
        """Move forward through ``states`` in order, skipping those already reached or
        passed (in the order of :data:`STATES`); one transaction."""
        with transaction(self.db):
            rec = self.require(task_id)
            ahead: list[_Move] = []
            at = rec.state
            for s in states:
                if rec.finished or STATES.index(s) <= STATES.index(at):
                    continue
                ahead.append(_Move(s, note))
                at = s
            return self._move(rec, *ahead) if ahead else rec

    def finish(
        self,
        task_id: str,
        state: str,
        note: str = "",
        *,
        result: dict[str, Any] | None = None,
    ) -> TaskRecord:
        """Close a task answered without further steps: to ``verifying`` (unless reached or
        passed), then to the final ``state`` with ``note`` and ``result``, in one
        transaction (the same transitions as :meth:`walk` then :meth:`move`). A task
        already finished is returned as it is."""
        if state not in FINAL:
            raise BrainError("task.transition", task=task_id, src="?", dst=state)
        with transaction(self.db):
            rec = self.require(task_id)
            if rec.finished:
                return rec
            last = _Move(state, note, result=result)
            if STATES.index("verifying") > STATES.index(rec.state):
                return self._move(rec, _Move("verifying"), last)
            return self._move(rec, last)

    def _move(self, rec: TaskRecord, *moves: _Move) -> TaskRecord:
        """Transitions of ``rec`` (read in the caller's transaction) through ``moves``, in
        order, each to a state of :data:`STATES`: one update of the row and one insert of
        the transitions; the new record."""
        changes: dict[str, Any] = {}
        moved: list[tuple[str, str, str]] = []
        src = rec.state
        for m in moves:
            if m.state != src:  # a move to the current state only updates the other fields
                _check_transition(rec.task_id, src, m.state)
                moved.append((src, m.state, m.note[:300]))
            if m.waiting_for is not None:
                changes["waiting_for"] = m.waiting_for
            if m.result is not None:
                changes["result"] = m.result
            src = m.state
        t = now_ms()
        changes |= {"state": src, "updated_ms": t}
        params = {
            k: json.dumps(v, ensure_ascii=False) if k == "result" else v for k, v in changes.items()
        }
        if "result" in changes:
            changes["result"] = json.loads(params["result"])  # what a read gives back
        sets = ", ".join(f"{k}=?" for k in params)
        self.db.execute(f"UPDATE tasks SET {sets} WHERE task_id=?", (*params.values(), rec.task_id))
        if moved:  # numbered after the task's last transition
            row = self.db.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM transitions WHERE task_id=?", (rec.task_id,)
            ).fetchone()
            last = int(row[0]) if row else 0
            marks = ",".join(["(?,?,?,?,?,?)"] * len(moved))
            values = [v for i, m in enumerate(moved, last + 1) for v in (rec.task_id, i, *m, t)]
            self.db.execute(f"INSERT INTO transitions VALUES {marks}", values)
        return dataclasses.replace(rec, **changes)

    def update_spec(self, task_id: str, **changes: Any) -> TaskRecord:
        """Merge ``changes`` into a task's spec (steering messages, notes)."""
        with transaction(self.db):
            rec = self.require(task_id)
            spec = {**rec.spec, **changes}
            self.db.execute(
                "UPDATE tasks SET spec=?, updated_ms=? WHERE task_id=?",
                (json.dumps(spec, ensure_ascii=False), now_ms(), task_id),
            )
        return self.require(task_id)

    def history_of_states(self, task_id: str) -> list[str]:
        return [
            r[0]
            for r in self.db.execute(
                "SELECT dst FROM transitions WHERE task_id=? ORDER BY seq", (task_id,)
            )
        ]

    def unfinished(self, kind: str | None = None) -> list[TaskRecord]:
        rows = self.db.execute(
            f"SELECT {_COLS} FROM tasks WHERE state NOT IN ('done','failed') "
            "AND (? IS NULL OR kind=?) ORDER BY created_ms, task_id",
            (kind, kind),
        )
        return [_task(r) for r in rows]

    def children(self, task_id: str) -> list[TaskRecord]:
        rows = self.db.execute(
            f"SELECT {_COLS} FROM tasks WHERE parent_id=? ORDER BY created_ms, task_id",
            (task_id,),
        )
        return [_task(r) for r in rows]

    def by_session(self, session_id: str, *, active: bool = True) -> list[TaskRecord]:
        rows = self.db.execute(
            f"SELECT {_COLS} FROM tasks WHERE session_id=? "
            "AND (? = 0 OR state NOT IN ('done','failed')) ORDER BY created_ms, task_id",
            (session_id, 1 if active else 0),
        )
        return [_task(r) for r in rows]

    def count(self, states: Iterable[str] | None = None) -> int:
        if states is None:
            return int(next(iter(self.db.execute("SELECT COUNT(*) FROM tasks")))[0])
        wanted = list(states)
        marks = ",".join("?" * len(wanted))
        q = f"SELECT COUNT(*) FROM tasks WHERE state IN ({marks})"
        return int(next(iter(self.db.execute(q, wanted)))[0])

    # ------------------------------------------------------------------ steps
    def step(self, task_id: str, step: str) -> Step | None:
        for r in self.db.execute(
            "SELECT step, call_id, status, receipt, args FROM steps WHERE task_id=? AND step=?",
            (task_id, step),
        ):
            return _step(task_id, r)
        return None

    def start_step(
        self, task_id: str, step: str, call_id: str, args: dict[str, Any] | None = None
    ) -> Step:
        """Record that a step is about to call the gateway with ``call_id`` and ``args``
        (idempotent: an existing step keeps its call id and arguments, which are returned)."""
        with transaction(self.db):
            self.db.execute(
                "INSERT OR IGNORE INTO steps (task_id, step, call_id, args, at_ms) "
                "VALUES (?,?,?,?,?)",
                (task_id, step, call_id, json.dumps(args or {}, ensure_ascii=False), now_ms()),
            )
        got = self.step(task_id, step)
        assert got is not None
        return got

    def finish_step(self, task_id: str, step: str, receipt: dict[str, Any]) -> None:
        with transaction(self.db):
            self.db.execute(
                "UPDATE steps SET status=?, receipt=?, at_ms=? WHERE task_id=? AND step=?",
                (
                    receipt.get("status"),
                    json.dumps(receipt, ensure_ascii=False),
                    now_ms(),
                    task_id,
                    step,
                ),
            )

    def step_for_call(self, task_id: str, call_id: str) -> Step | None:
        for (step,) in self.db.execute(
            "SELECT step FROM steps WHERE task_id=? AND call_id=?", (task_id, call_id)
        ):
            return self.step(task_id, step)
        return None

    def steps(self, task_id: str) -> list[Step]:
        """The task's steps in the order they started (one query)."""
        rows = self.db.execute(
            "SELECT step, call_id, status, receipt, args FROM steps WHERE task_id=? "
            "ORDER BY at_ms, step",
            (task_id,),
        )
        return [_step(task_id, r) for r in rows]

    # ------------------------------------------------------------------ history
    def save_history(self, task_id: str, messages: bytes) -> None:
        with transaction(self.db):
            self.db.execute(
                "INSERT OR REPLACE INTO history VALUES (?,?,?)", (task_id, messages, now_ms())
            )

    def history(self, task_id: str) -> bytes | None:
        for (blob,) in self.db.execute("SELECT messages FROM history WHERE task_id=?", (task_id,)):
            return bytes(blob)
        return None

    # ------------------------------------------------------------------ budget
    def take_budget(self, run_id: str, limit: int) -> int | None:
        """Count one tool call against the run's budget: the new count, or ``None`` once
        ``limit`` calls were already counted (the call must not run)."""
        with transaction(self.db):
            self.db.execute("INSERT OR IGNORE INTO runs VALUES (?,?,?)", (run_id, 0, limit))
            used = int(
                next(iter(self.db.execute("SELECT used FROM runs WHERE run_id=?", (run_id,))))[0]
            )
            if used >= limit:
                return None
            self.db.execute("UPDATE runs SET used=? WHERE run_id=?", (used + 1, run_id))
        return used + 1

    def budget_used(self, run_id: str) -> int:
        for (used,) in self.db.execute("SELECT used FROM runs WHERE run_id=?", (run_id,)):
            return int(used)
        return 0
