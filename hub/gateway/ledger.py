"""The ledger (``gateway.db``): decisions and receipts per (task id, call id), pending
checks, and which facts were already said.

- Idempotent on (task id, call id): the same decision or receipt content returns the
  recorded one; different content is a conflict (:class:`GatewayError` ``ledger.conflict``).
- Long tasks carry a strictly increasing ``revision``: a receipt with a higher revision
  replaces the recorded one (``waiting`` → ``succeeded`` after an approval is revision 1).
- After an ``unknown``/``partial`` receipt whose tool has ``check_with``, a check is pending
  for (task, package, tool) until a receipt of the check tool arrives in that task. The
  tasks with a pending check are also kept in memory (this object is the table's only
  writer), so a task with none answers without a read.
- Facts: rendered from receipts, ``said`` once the device ACKed the reply carrying them;
  :meth:`Ledger.split_facts` tells new from said.
- The audit log's records of each group commit and its signed head, in one row
  (:meth:`Ledger.stage_audit`), durable with that batch's rows: the audit file is written
  without a sync of its own, so these are the records' durable copy until the file is synced
  (:meth:`Ledger.prune_audit` then drops them); at open the audit log re-appends those its
  file lost and restores its head file (:meth:`AuditLog.recover`).
- Group commit: :meth:`Ledger.record_decision` and :meth:`Ledger.record_receipt` with
  ``sync=False`` join one open transaction (each in its own savepoint; every later read on
  this connection sees them). The gateway's group commit (:mod:`hub.gateway.commit`)
  commits it once per batch (:meth:`Ledger.commit_group`) and makes it durable with one
  fsync of the write-ahead log (:meth:`Ledger.sync`) before any caller of the batch is
  answered. Every other write (:meth:`Ledger.transaction`) commits the open group first
  and then itself, durably (``synchronous=FULL``).
- Checkpoints of the WAL run on a thread of their own (:mod:`storage.checkpoint`), not in
  the commit that fills it, which is a batch's on the event loop.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from hub.gateway.errors import GatewayError
from hub.gateway.receipts import Receipt
from protos.clock import now_ms
from storage.checkpoint import Checkpointer
from storage.sqlite import open_db, transaction

SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    task_id     TEXT NOT NULL,
    call_id     TEXT NOT NULL,
    package     TEXT NOT NULL,
    tool        TEXT NOT NULL,
    action_hash TEXT NOT NULL,
    args_fp     TEXT NOT NULL,
    effect      TEXT NOT NULL,
    target      TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    decision    TEXT NOT NULL,
    status      TEXT,
    receipt     TEXT,
    receipt_fp  TEXT,
    revision    INTEGER NOT NULL DEFAULT -1,
    created_ms  INTEGER NOT NULL,
    updated_ms  INTEGER NOT NULL,
    PRIMARY KEY (task_id, call_id)
);
DROP INDEX IF EXISTS calls_action;
CREATE INDEX IF NOT EXISTS calls_action_status ON calls (task_id, action_hash, status, outcome);
CREATE TABLE IF NOT EXISTS checks (
    task_id    TEXT NOT NULL,
    package    TEXT NOT NULL,
    tool       TEXT NOT NULL,
    check_with TEXT NOT NULL,
    since_ms   INTEGER NOT NULL,
    PRIMARY KEY (task_id, package, tool)
);
CREATE TABLE IF NOT EXISTS facts (
    task_id  TEXT NOT NULL,
    fact_id  TEXT NOT NULL,
    text     TEXT NOT NULL,
    said_ms  INTEGER,
    PRIMARY KEY (task_id, fact_id)
);
CREATE TABLE IF NOT EXISTS first_sends (
    owner     TEXT NOT NULL,
    recipient TEXT NOT NULL,
    task_type TEXT NOT NULL,
    first_ms  INTEGER NOT NULL,
    PRIMARY KEY (owner, recipient, task_type)
);
CREATE TABLE IF NOT EXISTS cards (
    card_id     TEXT PRIMARY KEY,
    task_id     TEXT NOT NULL,
    call_id     TEXT NOT NULL,
    owner       TEXT NOT NULL,
    package     TEXT NOT NULL,
    tool        TEXT NOT NULL,
    args        TEXT NOT NULL,
    effect      TEXT NOT NULL,
    target      TEXT NOT NULL,
    task_type   TEXT NOT NULL,
    title       TEXT NOT NULL,
    preview     TEXT NOT NULL,
    action_hash BLOB NOT NULL,
    nonce       BLOB NOT NULL,
    created_ms  INTEGER NOT NULL,
    expires_ms  INTEGER NOT NULL,
    state       TEXT NOT NULL,
    answered_by TEXT,
    answered_ms INTEGER,
    reason      TEXT NOT NULL DEFAULT '',
    context     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS cards_state ON cards (state, expires_ms);
CREATE TABLE IF NOT EXISTS audit_head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    head BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS audit_batches (
    first_seq INTEGER PRIMARY KEY,
    last_seq  INTEGER NOT NULL,
    lines     BLOB NOT NULL,
    head      BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS tokens (
    token       TEXT PRIMARY KEY,
    card_id     TEXT NOT NULL,
    action_hash BLOB NOT NULL,
    created_ms  INTEGER NOT NULL,
    consumed_ms INTEGER
);
"""


@dataclass(frozen=True)
class CallRow:
    task_id: str
    call_id: str
    package: str
    tool: str
    action_hash: str
    args_fp: str
    effect: str
    target: str
    outcome: str
    decision: dict[str, Any]
    status: str | None
    receipt: dict[str, Any] | None
    revision: int


class Ledger:
    def __init__(self, path: Path, *, synchronous: str = "FULL") -> None:
        self.path = path
        self.synchronous = synchronous.upper()
        self.db: apsw.Connection = open_db(path, SCHEMA, synchronous=synchronous)
        self.checkpointer = Checkpointer.watching(self.db)
        """checkpoints the ledger on a thread of its own, not in a batch's commit on the
        event loop (copying a thousand pages and two syncs, 5 ms here)"""
        self._wal_fd: int | None = None
        if self.synchronous == "FULL":
            # commits skip SQLite's own fsync; sync() does it (after each transaction() of
            # its own, once per batch for the group): the same durability as FULL
            self.db.execute("PRAGMA synchronous=NORMAL")
            self._wal_fd = os.open(f"{path}-wal", os.O_RDONLY)  # open_db made the WAL
            folder = os.open(path.parent, os.O_RDONLY)  # and its directory entry durable
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
        self._group = False
        """a group transaction is open (writes with ``sync=False`` since the last commit)"""
        self._checking = {str(t) for (t,) in self.db.execute("SELECT DISTINCT task_id FROM checks")}
        """tasks with a pending check: only this object writes ``checks``, so a task not in
        it has none (the decide and receipt paths then read nothing)"""

    def close(self) -> None:
        self.checkpointer.close()  # a checkpoint under way ends; the last commit's is inline
        self.commit_group()
        if self._wal_fd is not None:
            os.close(self._wal_fd)
            self._wal_fd = None
        self.db.close()

    @contextmanager
    def transaction(self) -> Iterator[apsw.Connection]:
        """A write transaction of its own, durable on return (one fsync of the WAL, as
        ``synchronous=FULL`` would); the open group of writes is committed first (the fsync
        covers it too). One that changed nothing (and followed no open group) syncs
        nothing: an empty transaction writes nothing to the WAL, as with FULL."""
        grouped = self._group
        self.commit_group()
        before = self.db.total_changes()
        with transaction(self.db):
            yield self.db
        if grouped or self.db.total_changes() != before:
            self.sync()

    @contextmanager
    def _write(self, sync: bool) -> Iterator[None]:
        """One write. ``sync``: its own durable transaction. Otherwise it joins the open
        group transaction (begun here if none is), in a savepoint of its own (a write that
        raises leaves the group as it was); :meth:`commit_group` commits the group and
        :meth:`sync` makes it durable."""
        if sync:
            with self.transaction():
                yield
            return
        if not self._group:
            self.db.execute("BEGIN IMMEDIATE")
            self._group = True
        with self.db:  # a savepoint inside the group
            yield

    def commit_group(self) -> None:
        """Commit the open group of writes (no fsync: :meth:`sync` follows); on failure the
        whole group is rolled back and :class:`GatewayError` ``ledger.commit_failed`` is
        raised — what earlier groups committed is untouched."""
        if not self._group:
            return
        self._group = False
        try:
            self.db.execute("COMMIT")
        except apsw.Error as exc:
            if not self.db.getautocommit():
                self.db.execute("ROLLBACK")
            raise GatewayError(
                "ledger.commit_failed", path=str(self.path), reason=str(exc)
            ) from exc

    def sync(self) -> None:
        """Make every commit so far durable: one ``fdatasync`` of the write-ahead log (a
        commit is durable once its WAL frames are). Touches no SQLite state, so a thread may
        run it while the event loop goes on committing; whatever was committed before it
        started is covered. Raises :class:`GatewayError` ``ledger.sync_failed``."""
        if self._wal_fd is None:  # synchronous OFF (or NORMAL: SQLite's own choice)
            return
        try:
            os.fdatasync(self._wal_fd)
        except OSError as exc:
            raise GatewayError("ledger.sync_failed", path=str(self.path), reason=str(exc)) from exc

    # ------------------------------------------------------------------ audit records
    def stage_audit(self, first_seq: int, last_seq: int, lines: bytes, head: bytes) -> None:
        """Record a batch of audit records (``lines``: their canonical lines, each ending in
        a newline, seq ``first_seq``..``last_seq``) and the signed head naming the last one
        in the open group, in one row (the batch adds one page to the WAL, not two), so the
        batch's WAL sync makes them durable with its rows: their durable copy until the
        audit file is synced (:meth:`prune_audit`). A batch at the same first seq (one whose
        write failed, chained again) replaces it."""
        with self._write(False):
            self.db.execute(
                "INSERT OR REPLACE INTO audit_batches (first_seq, last_seq, lines, head) "
                "VALUES (?,?,?,?)",
                (first_seq, last_seq, lines, head),
            )

    def _prune(self, seq: int) -> None:
        # the newest head among the dropped batches is kept (audit_head), then they go
        self.db.execute(
            "INSERT OR REPLACE INTO audit_head (id, head) SELECT 1, head FROM audit_batches "
            "WHERE last_seq <= ? ORDER BY last_seq DESC LIMIT 1",
            (seq,),
        )
        self.db.execute("DELETE FROM audit_batches WHERE last_seq <= ?", (seq,))

    def stage_audit_prune(self, seq: int) -> None:
        """Drop (in the open group) the audit batches ending at or before ``seq``: the
        audit file holds them durably now. The newest of their heads is kept."""
        with self._write(False):
            self._prune(seq)

    def prune_audit(self, seq: int) -> None:
        """:meth:`stage_audit_prune`, durable on return (at close, after a recovery)."""
        with self.transaction():
            self._prune(seq)

    def audit_batches(self) -> list[tuple[int, bytes]]:
        """(first seq, lines) of every audit batch not yet pruned, by first seq."""
        return [
            (int(first), bytes(lines))
            for first, lines in self.db.execute(
                "SELECT first_seq, lines FROM audit_batches ORDER BY first_seq"
            )
        ]

    def audit_head(self) -> bytes | None:
        """The last signed audit head recorded with a batch, if any: the newest batch's,
        else the one kept when the batches were dropped."""
        for (head,) in self.db.execute(
            "SELECT head FROM audit_batches ORDER BY last_seq DESC LIMIT 1"
        ):
            return bytes(head)
        for (head,) in self.db.execute("SELECT head FROM audit_head WHERE id=1"):
            return bytes(head)
        return None

    # ------------------------------------------------------------------ calls
    def _row(self, r: Any) -> CallRow:
        return CallRow(
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            r[6],
            r[7],
            r[8],
            json.loads(r[9]),
            r[10],
            json.loads(r[11]) if r[11] else None,
            r[12],
        )

    _COLS = (
        "task_id, call_id, package, tool, action_hash, args_fp, effect, target, outcome, "
        "decision, status, receipt, revision"
    )

    def call(self, task_id: str, call_id: str) -> CallRow | None:
        for r in self.db.execute(
            f"SELECT {self._COLS} FROM calls WHERE task_id=? AND call_id=?", (task_id, call_id)
        ):
            return self._row(r)
        return None

    def record_decision(
        self,
        *,
        task_id: str,
        call_id: str,
        package: str,
        tool: str,
        action_hash: str,
        args_fp: str,
        effect: str,
        target: str,
        outcome: str,
        decision: dict[str, Any],
        sync: bool = True,
    ) -> CallRow:
        """Record a decision once; the same (task, call) with other arguments conflicts.
        ``sync=False``: durable at the next :meth:`sync` (group commit). Returns the new
        row (with ``decision`` as given), or the stored one when this (task, call) was
        decided already."""
        t = now_ms()
        with self._write(sync):
            # one statement: the usual new call is inserted without a read first
            inserted = self.db.execute(
                "INSERT INTO calls (task_id, call_id, package, tool, action_hash, args_fp, "
                "effect, target, outcome, decision, created_ms, updated_ms) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?) "
                "ON CONFLICT (task_id, call_id) DO NOTHING RETURNING 1",
                (
                    task_id,
                    call_id,
                    package,
                    tool,
                    action_hash,
                    args_fp,
                    effect,
                    target,
                    outcome,
                    json.dumps(decision),
                    t,
                    t,
                ),
            ).fetchall()
            if not inserted:
                old = self.call(task_id, call_id)
                assert old is not None  # the insert did nothing: this key is taken
                if old.args_fp != args_fp or (old.package, old.tool) != (package, tool):
                    raise GatewayError(
                        "ledger.conflict",
                        task=task_id,
                        call=call_id,
                        what="a different call was already decided",
                    )
                return old
        # what was just inserted (no read back)
        return CallRow(
            task_id,
            call_id,
            package,
            tool,
            action_hash,
            args_fp,
            effect,
            target,
            outcome,
            decision,
            None,
            None,
            -1,
        )

    def record_receipt(
        self,
        task_id: str,
        call_id: str,
        receipt: Receipt,
        facts: dict[str, str] | None = None,
        *,
        sync: bool = True,
    ) -> tuple[Receipt, bool]:
        """Store the receipt of a decided call (and its facts, id → text, in the same
        transaction). Returns (stored receipt, fresh). ``sync=False``: durable at the next
        :meth:`sync` (group commit).

        Same content → the stored record (not fresh); a higher revision replaces it;
        anything else is a conflict."""
        fp = receipt.fingerprint()
        with self._write(sync):
            # the usual case, the call's first receipt: one UPDATE, no read first
            if self._set_receipt(task_id, call_id, receipt, fp, first=True):
                self._insert_facts(task_id, facts)
                return receipt, True
            row = None
            for r in self.db.execute(
                "SELECT receipt, receipt_fp, revision FROM calls WHERE task_id=? AND call_id=?",
                (task_id, call_id),
            ):
                row = r
            if row is None:
                raise GatewayError("ledger.no_decision", task=task_id, call=call_id)
            self._insert_facts(task_id, facts)
            stored, stored_fp, revision = row
            if stored is not None:
                if stored_fp == fp:
                    return Receipt.from_dict(json.loads(stored)), False
                if receipt.revision <= revision:
                    raise GatewayError(
                        "ledger.conflict",
                        task=task_id,
                        call=call_id,
                        what=f"another receipt at revision {revision}",
                    )
            self._set_receipt(task_id, call_id, receipt, fp, first=False)
        return receipt, True

    def _set_receipt(
        self, task_id: str, call_id: str, receipt: Receipt, fp: str, *, first: bool
    ) -> bool:
        """Write the call's receipt (``first``: only if it has none yet); whether it did."""
        return bool(
            self.db.execute(
                "UPDATE calls SET status=?, receipt=?, receipt_fp=?, revision=?, updated_ms=? "
                "WHERE task_id=? AND call_id=?"
                + (" AND receipt IS NULL" if first else "")
                + " RETURNING 1",
                (
                    receipt.status,
                    receipt.canonical_content.decode(),  # the fingerprinted bytes: JSON
                    fp,
                    receipt.revision,
                    now_ms(),
                    task_id,
                    call_id,
                ),
            ).fetchall()
        )

    def _insert_facts(self, task_id: str, facts: dict[str, str] | None) -> None:
        if facts:
            self.db.executemany(
                "INSERT OR IGNORE INTO facts (task_id, fact_id, text) VALUES (?,?,?)",
                [(task_id, fact_id, text) for fact_id, text in facts.items()],
            )

    def same_action(
        self, task_id: str, action_hash: str, call_id: str, statuses: Iterable[str | None]
    ) -> CallRow | None:
        """The first other call of this task with the same action that was let through
        (allowed or rewritten) and whose status is one of ``statuses`` (``None``: no
        outcome yet), for the duplicate rule; ``None`` if there is none.

        One index seek per status (and one more per status when a twin exists), however
        many such calls the task made: a task can grow for as long as the hub runs (the
        brain's slot-list reads are one task that gains a call every few seconds), so
        nothing here reads its other calls."""
        wanted = tuple(dict.fromkeys(statuses))
        match = (
            "FROM calls WHERE task_id=? AND action_hash=? AND status IS ? "
            "AND outcome IN ('allow','rewrite') AND call_id<>?"
        )
        # the usual answer is none: a bare look for any (no ordering, no aggregate, which
        # cost several times as much on the hot path), the first of them only if there is
        if not any(
            self.db.execute(
                f"SELECT 1 {match} LIMIT 1", (task_id, action_hash, s, call_id)
            ).fetchall()
            for s in wanted
        ):
            return None
        first: tuple[int, Any] | None = None
        for status in wanted:
            for r in self.db.execute(
                f"SELECT rowid, {self._COLS} {match} ORDER BY rowid LIMIT 1",
                (task_id, action_hash, status, call_id),
            ):
                if first is None or r[0] < first[0]:
                    first = (r[0], r[1:])
        return None if first is None else self._row(first[1])

    def task_receipts(self, task_id: str) -> list[Receipt]:
        return [
            Receipt.from_dict(json.loads(r[0]))
            for r in self.db.execute(
                "SELECT receipt FROM calls WHERE task_id=? AND receipt IS NOT NULL "
                "ORDER BY created_ms",
                (task_id,),
            )
        ]

    # ------------------------------------------------------------------ checks
    def require_check(self, task_id: str, package: str, tool: str, check_with: str) -> None:
        with self.transaction():
            self.db.execute(
                "INSERT OR REPLACE INTO checks VALUES (?,?,?,?,?)",
                (task_id, package, tool, check_with, now_ms()),
            )
        self._checking.add(task_id)

    def pending_check(self, task_id: str, package: str, tool: str) -> str | None:
        if task_id not in self._checking:
            return None  # no check pending in this task: no read
        for (check_with,) in self.db.execute(
            "SELECT check_with FROM checks WHERE task_id=? AND package=? AND tool=?",
            (task_id, package, tool),
        ):
            return str(check_with)
        return None

    def check_ran(self, task_id: str, package: str, check_tool: str) -> list[str]:
        """A check tool produced a receipt: clear the checks it satisfies; tools cleared."""
        if task_id not in self._checking:
            return []  # no check pending in this task: no read, no write
        for _ in self.db.execute(
            "SELECT 1 FROM checks WHERE task_id=? AND package=? AND check_with=? LIMIT 1",
            (task_id, package, check_tool),
        ):
            break
        else:
            return []  # nothing pending: no write, no sync
        with self.transaction():
            cleared = [
                str(t)
                for (t,) in self.db.execute(
                    "SELECT tool FROM checks WHERE task_id=? AND package=? AND check_with=?",
                    (task_id, package, check_tool),
                )
            ]
            self.db.execute(
                "DELETE FROM checks WHERE task_id=? AND package=? AND check_with=?",
                (task_id, package, check_tool),
            )
            left = any(
                True
                for _ in self.db.execute("SELECT 1 FROM checks WHERE task_id=? LIMIT 1", (task_id,))
            )
        if not left:
            self._checking.discard(task_id)
        return cleared

    # ------------------------------------------------------------------ facts
    def split_facts(self, task_id: str, facts: dict[str, str]) -> tuple[list[str], list[str]]:
        """Record facts (id → text); return (new ids, already said ids)."""
        new: list[str] = []
        said: list[str] = []
        with self.transaction():
            for fact_id, text in facts.items():
                self.db.execute(
                    "INSERT OR IGNORE INTO facts (task_id, fact_id, text) VALUES (?,?,?)",
                    (task_id, fact_id, text),
                )
                for (said_ms,) in self.db.execute(
                    "SELECT said_ms FROM facts WHERE task_id=? AND fact_id=?", (task_id, fact_id)
                ):
                    (said if said_ms is not None else new).append(fact_id)
        return new, said

    def fact_states(self, task_id: str, fact_ids: list[str]) -> tuple[list[str], list[str]]:
        """(new ids, already said ids) among recorded facts; a read, no write."""
        said = {
            str(f)
            for (f,) in self.db.execute(
                "SELECT fact_id FROM facts WHERE task_id=? AND said_ms IS NOT NULL", (task_id,)
            )
        }
        return [f for f in fact_ids if f not in said], [f for f in fact_ids if f in said]

    def mark_said(self, task_id: str, fact_ids: list[str], *, sync: bool = True) -> None:
        """Only ACKed facts count as said: call this when the reply's delivery is ACKed.
        No facts (most replies): no transaction. ``sync=False``: the marks join the open
        group of writes (visible at once to this ledger's reads), durable at the next
        :meth:`sync`."""
        if not fact_ids:
            return
        with self._write(sync):
            for fact_id in fact_ids:
                self.db.execute(
                    "UPDATE facts SET said_ms=? WHERE task_id=? AND fact_id=? AND said_ms IS NULL",
                    (now_ms(), task_id, fact_id),
                )
