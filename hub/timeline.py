"""The hub's store (``hub.db``): the timeline with its one ``seq``, replies, deliveries,
replay windows, presence and message counters.

The hub is the only writer. Ingesting an utterance is one transaction: the entry, its
``seq``, the reply, and the sender's replay window commit together, so a crash at any point
leaves either all of it or none, and a retry of the same utterance id returns the same reply.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import apsw

from sync.store import open_db, transaction


class ReplicatedEntry(Protocol):
    """A timeline entry as replicated (``sync.documents.Entry``)."""

    @property
    def id(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def ts(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def text(self) -> str: ...


ReplyMaker = Callable[[int, str], tuple[str, str, bool]]
"""Makes the reply to an utterance from (seq, text): (reply id, text, placeholder)."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS timeline (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT NOT NULL UNIQUE,
    device     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    text       TEXT NOT NULL,
    ts_ms      INTEGER NOT NULL,
    received_ms INTEGER NOT NULL,
    trace_id   TEXT NOT NULL,
    meta       TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS replies (
    id           TEXT PRIMARY KEY,
    utterance_id TEXT NOT NULL UNIQUE,
    device       TEXT NOT NULL,
    text         TEXT NOT NULL,
    placeholder  INTEGER NOT NULL,
    utterance_seq INTEGER NOT NULL,
    reply_seq    INTEGER NOT NULL,
    trace_id     TEXT NOT NULL,
    created_ms   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS deliveries (
    reply_id TEXT NOT NULL,
    device   TEXT NOT NULL,
    state    TEXT NOT NULL,
    at_ms    INTEGER NOT NULL,
    PRIMARY KEY (reply_id, state)
);
CREATE TABLE IF NOT EXISTS replay (
    sender  TEXT PRIMARY KEY,
    highest INTEGER NOT NULL,
    seen    BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS presence (
    device     TEXT PRIMARY KEY,
    state      TEXT NOT NULL,
    session    TEXT NOT NULL,
    since_ms   INTEGER NOT NULL,
    last_seen_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""


@dataclass(frozen=True)
class Entry:
    seq: int
    id: str
    device: str
    kind: str
    text: str
    ts_ms: int
    trace_id: str


@dataclass(frozen=True)
class StoredReply:
    id: str
    utterance_id: str
    device: str
    text: str
    placeholder: bool
    utterance_seq: int
    reply_seq: int
    trace_id: str


@dataclass(frozen=True)
class PresenceRow:
    device: str
    state: str
    session: str
    since_ms: int
    last_seen_ms: int


REPLY_COLUMNS = "id, utterance_id, device, text, placeholder, utterance_seq, reply_seq, trace_id"


def _reply(row: tuple[Any, ...]) -> StoredReply:
    rid, utterance_id, device, text, placeholder, useq, rseq, trace_id = row
    return StoredReply(rid, utterance_id, device, text, bool(placeholder), useq, rseq, trace_id)


class HubStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn: apsw.Connection = open_db(path, SCHEMA)

    def close(self) -> None:
        self.conn.close()

    # ------------------------------------------------------------------ ingestion
    def ingest_utterance(
        self,
        *,
        utterance_id: str,
        device: str,
        text: str,
        ts_ms: int,
        received_ms: int,
        trace_id: str,
        meta: dict[str, object],
        make_reply: ReplyMaker,
        replay_state: tuple[str, int, bytes] | None,
    ) -> tuple[StoredReply, bool]:
        """Append the utterance and its reply; returns (reply, was_duplicate)."""
        with transaction(self.conn):
            if replay_state is not None:
                self._save_replay(*replay_state)
            existing = self._reply_for(utterance_id)
            if existing is not None:
                self._bump("accepted.duplicate")
                return existing, True
            seq = self._append(
                utterance_id, device, "utterance", text, ts_ms, received_ms, trace_id, meta
            )
            reply_id, reply_text, placeholder = make_reply(seq, text)
            reply_seq = self._append(
                reply_id,
                "hub",
                "reply",
                reply_text,
                received_ms,
                received_ms,
                trace_id,
                {"to": device, "utterance": utterance_id, "placeholder": placeholder},
            )
            self.conn.execute(
                "INSERT INTO replies VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    reply_id,
                    utterance_id,
                    device,
                    reply_text,
                    int(placeholder),
                    seq,
                    reply_seq,
                    trace_id,
                    received_ms,
                ),
            )
            self._bump("accepted.utterance")
            reply = self._reply_for(utterance_id)
        assert reply is not None
        return reply, False

    def record_delivery(
        self,
        reply_id: str,
        device: str,
        state: str,
        at_ms: int,
        replay_state: tuple[str, int, bytes] | None,
    ) -> bool:
        """Record an ACK; ``False`` if this (reply, state) was already recorded or unknown."""
        with transaction(self.conn):
            if replay_state is not None:
                self._save_replay(*replay_state)
            owner = self.conn.execute(
                "SELECT device FROM replies WHERE id=?", (reply_id,)
            ).fetchone()
            if owner is None or owner[0] != device:
                self._bump("rejected.ack_unknown_reply")
                return False
            row = self.conn.execute(
                "INSERT OR IGNORE INTO deliveries VALUES (?,?,?,?) RETURNING reply_id",
                (reply_id, device, state, at_ms),
            ).fetchone()
            self._bump("accepted.ack" if row else "accepted.ack_duplicate")
            return row is not None

    def _append(
        self,
        entry_id: str,
        device: str,
        kind: str,
        text: str,
        ts_ms: int,
        received_ms: int,
        trace_id: str,
        meta: dict[str, object],
    ) -> int:
        row = self.conn.execute(
            "INSERT INTO timeline (id, device, kind, text, ts_ms, received_ms, trace_id, meta) "
            "VALUES (?,?,?,?,?,?,?,?) RETURNING seq",
            (entry_id, device, kind, text, ts_ms, received_ms, trace_id, json.dumps(meta)),
        ).fetchone()
        assert row is not None
        return int(row[0])

    def reply_for(self, utterance_id: str) -> StoredReply | None:
        """The reply already made to ``utterance_id`` (``None``: not on the timeline yet)."""
        return self._reply_for(utterance_id)

    def _reply_for(self, utterance_id: str) -> StoredReply | None:
        row = self.conn.execute(
            f"SELECT {REPLY_COLUMNS} FROM replies WHERE utterance_id=?",
            (utterance_id,),
        ).fetchone()
        if row is None:
            return None
        return _reply(row)

    def unacked_replies(self, device: str, limit: int = 100) -> list[StoredReply]:
        rows = self.conn.execute(
            f"SELECT {REPLY_COLUMNS} FROM replies r WHERE device=? AND NOT EXISTS "
            "(SELECT 1 FROM deliveries d WHERE d.reply_id = r.id) ORDER BY utterance_seq LIMIT ?",
            (device, limit),
        )
        return [_reply(r) for r in rows]

    # ------------------------------------------------------------------ replay windows
    def _save_replay(self, sender: str, highest: int, seen: bytes) -> None:
        self.conn.execute(
            "INSERT INTO replay VALUES (?,?,?) ON CONFLICT(sender) DO UPDATE SET "
            "highest=excluded.highest, seen=excluded.seen",
            (sender, highest, seen),
        )

    def replay_windows(self) -> list[tuple[str, int, bytes]]:
        return [(r[0], r[1], bytes(r[2])) for r in self.conn.execute("SELECT * FROM replay")]

    # ------------------------------------------------------------------ presence
    def set_presence(self, device: str, state: str, session: str, since_ms: int, now: int) -> None:
        with transaction(self.conn):
            self.conn.execute(
                "INSERT INTO presence VALUES (?,?,?,?,?) ON CONFLICT(device) DO UPDATE SET "
                "state=excluded.state, session=excluded.session, since_ms=excluded.since_ms, "
                "last_seen_ms=excluded.last_seen_ms",
                (device, state, session, since_ms, now),
            )

    def presence(self) -> dict[str, PresenceRow]:
        rows = self.conn.execute(
            "SELECT device, state, session, since_ms, last_seen_ms FROM presence"
        )
        return {r[0]: PresenceRow(*r) for r in rows}

    def mark_all_offline(self) -> None:
        with transaction(self.conn):
            self.conn.execute("UPDATE presence SET state='offline'")

    # ------------------------------------------------------------------ counters
    def _bump(self, name: str, by: int = 1) -> None:
        self.conn.execute(
            "INSERT INTO counters VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value=value+?",
            (name, by, by),
        )

    def add_counts(
        self, counts: Iterable[tuple[str, int]], seen: Iterable[tuple[str, int]] = ()
    ) -> None:
        """Add to message counters and move devices' last-seen times forward, in one go."""
        with transaction(self.conn):
            for name, by in counts:
                self._bump(name, by)
            for device, at_ms in seen:
                self.conn.execute(
                    "INSERT INTO presence VALUES (?, 'offline', '', 0, ?) ON CONFLICT(device) "
                    "DO UPDATE SET last_seen_ms=max(last_seen_ms, excluded.last_seen_ms)",
                    (device, at_ms),
                )

    def counters(self) -> dict[str, int]:
        return {
            r[0]: r[1] for r in self.conn.execute("SELECT name, value FROM counters ORDER BY name")
        }

    # ------------------------------------------------------------------ replicated entries
    def sequence_entries(self, entries: Sequence[ReplicatedEntry], sender: str) -> dict[str, int]:
        """Give entries that arrived through replication their ``seq`` (idempotent by id).

        This table is the source of truth for ``seq``; the CRDT ``seq`` documents are
        written from it, and re-written from it on every hub start.
        """
        now = int(time.time() * 1000)
        with transaction(self.conn):
            added = 0
            for e in entries:
                row = self.conn.execute(
                    "INSERT OR IGNORE INTO timeline (id, device, kind, text, ts_ms, received_ms, "
                    "trace_id, meta) VALUES (?,?,?,?,?,?,?,?) RETURNING seq",
                    (e.id, e.device, e.kind, e.text, e.ts, now, "", json.dumps({"via": sender})),
                ).fetchone()
                added += row is not None
            if added:
                self._bump("accepted.sync_entry", added)
            return {
                e.id: int(r[0])
                for e in entries
                if (
                    r := self.conn.execute(
                        "SELECT seq FROM timeline WHERE id=?", (e.id,)
                    ).fetchone()
                )
            }

    # ------------------------------------------------------------------ reading
    def entries(self, *, after: int = 0, limit: int = 1000) -> list[Entry]:
        rows = self.conn.execute(
            "SELECT seq, id, device, kind, text, ts_ms, trace_id FROM timeline WHERE seq > ? "
            "ORDER BY seq LIMIT ?",
            (after, limit),
        )
        return [Entry(*r) for r in rows]
