"""The hub's store (``hub.db``): the timeline with its one ``seq``, replies, deliveries,
replay windows, presence and message counters.

The hub is the only writer. Admitting an utterance is one transaction
(:meth:`HubStore.admit_utterance`): the entry, its ``seq`` and the sender's replay window
commit together, so a crash at any point leaves either all of it or none, and a retry of the
same utterance id finds the entry already there. Turns are answered later (the brain's, or
the hub's own words for an utterance it could not use): every piece of the answer is a *chunk*
(``reply_chunks``, one ``Reply`` message each) that the device ACKs on its own; the whole
reply joins the timeline in the transaction that keeps its final chunk
(:meth:`HubStore.keep_chunk`; :meth:`HubStore.finish_reply` alone for a reply made whole),
and counts as delivered (``deliveries``) once every chunk is ACKed. Reports of tasks that
finished later are replies without an utterance.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import apsw

from protos.clock import now_ms
from storage.group_commit import GroupCommit
from storage.sqlite import joined, open_db, transaction
from sync.documents import REFUSED as REFUSED_SEQ
from sync.envelope import HUB as HUB_NAME
from sync.scopes import HUB_ENTRY_KINDS

log = logging.getLogger(__name__)


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


ReplayState = tuple[str, int, bytes]
"""(sender, highest counter, seen bitmap): one sender's replay window as kept here"""

SCHEMA = """
CREATE TABLE IF NOT EXISTS refused_entries (
    id       TEXT PRIMARY KEY,
    device   TEXT NOT NULL,
    sender   TEXT NOT NULL,
    at_ms    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS forgotten_entries (
    id       TEXT PRIMARY KEY,
    at_ms    INTEGER NOT NULL
);
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
CREATE TABLE IF NOT EXISTS reply_chunks (
    reply_id      TEXT NOT NULL,
    idx           INTEGER NOT NULL,
    device        TEXT NOT NULL,
    utterance_id  TEXT NOT NULL,
    task_id       TEXT NOT NULL,
    text          TEXT NOT NULL,
    final         INTEGER NOT NULL,
    brain         TEXT NOT NULL,
    trace_id      TEXT NOT NULL,
    utterance_seq INTEGER NOT NULL,
    created_ms    INTEGER NOT NULL,
    acked         TEXT,
    acked_ms      INTEGER,
    PRIMARY KEY (reply_id, idx)
);
CREATE INDEX IF NOT EXISTS reply_chunks_unacked ON reply_chunks (device) WHERE acked IS NULL;
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


NOT_UNDERSTOOD = "?"
"""the intent a reply records when no intent matched its request (the rule brain's honest "I
can't do that yet — here is what I can do …"). The recall index leaves that reply out: it
is the request heard back and the same list of what the hub can do every time, and
embedding it costs more than the request (about 60 tokens against 5-10), which is indexed.
The utterance records no intent then, as for a model's turn."""


@dataclass(frozen=True)
class EntryMeta:
    """A timeline entry with what its meta says of it."""

    entry: Entry
    scope: str
    """the scope it was admitted in (``""``: none, the hub's own and replicated entries)"""
    intent: str
    """what the brain understood the request as, on an utterance and on the reply to it
    (``""``: not recorded, as for a model's turn; :data:`NOT_UNDERSTOOD`: on a reply)"""


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
class Chunk:
    """One piece of a reply as sent (and re-sent until ACKed)."""

    reply_id: str
    index: int
    device: str
    utterance_id: str
    """"" for a report of a task that finished after its turn was answered"""
    task_id: str
    text: str
    final: bool
    brain: str
    trace_id: str
    utterance_seq: int
    reply_seq: int = 0
    """timeline seq of the whole reply (0 until it is on the timeline)"""
    acked: str | None = None


@dataclass(frozen=True)
class Delivery:
    """What an ACK changed."""

    fresh: bool
    """this (reply, chunk, state) was not recorded before"""
    complete: bool
    """with it, every chunk of the reply (final one included) is ACKed"""
    task_id: str = ""
    text: str = ""
    """the whole reply's text (when ``complete``)"""


class _ChunkAck(NamedTuple):
    """What the ACK of one chunk of a kept reply changed."""

    task_id: str
    fresh: bool


@dataclass(frozen=True)
class Admitted:
    """An utterance on the timeline (a brain turn's first half)."""

    utterance_id: str
    device: str
    seq: int
    text: str
    trace_id: str
    meta: dict[str, Any]
    ts_ms: int
    duplicate: bool


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


CHUNK_COLUMNS = (
    "c.reply_id, c.idx, c.device, c.utterance_id, c.task_id, c.text, c.final, c.brain, "
    "c.trace_id, c.utterance_seq, COALESCE(t.seq, 0), c.acked"
)
CHUNK_FROM = "reply_chunks c LEFT JOIN timeline t ON t.id = c.reply_id"


def _chunk(row: tuple[Any, ...]) -> Chunk:
    rid, idx, device, uid, task, text, final, brain, trace, useq, rseq, acked = row
    return Chunk(rid, idx, device, uid, task, text, bool(final), brain, trace, useq, rseq, acked)


def _ascii_word(char: str) -> bool:
    return char.isascii() and char.isalnum()


class HubStore:
    def __init__(self, path: Path, *, group: GroupCommit | None = None) -> None:
        """``group``: commits are synced by its flush, before the hub sends what they say."""
        self.path = path
        self.conn: apsw.Connection = open_db(path, SCHEMA, group=group)

    def close(self) -> None:
        self.conn.close()

    # ------------------------------------------------------------------ deliveries
    def record_delivery(
        self,
        reply_id: str,
        device: str,
        state: str,
        at_ms: int,
        replay_state: ReplayState | None,
        chunk: int = 0,
    ) -> bool:
        """Record an ACK; ``False`` if this (reply, state) was already recorded or unknown."""
        return self.record_chunk_delivery(reply_id, device, state, at_ms, replay_state, chunk).fresh

    def record_chunk_delivery(
        self,
        reply_id: str,
        device: str,
        state: str,
        at_ms: int,
        replay_state: ReplayState | None,
        chunk: int = 0,
    ) -> Delivery:
        """Record the ACK of one chunk (see :meth:`record_chunks_delivery`)."""
        return self.record_chunks_delivery(reply_id, device, state, at_ms, replay_state, (chunk,))

    def record_chunks_delivery(
        self,
        reply_id: str,
        device: str,
        state: str,
        at_ms: int,
        replay_state: ReplayState | None,
        chunks: Sequence[int],
    ) -> Delivery:
        """Record one ACK of the chunks ``chunks`` of a reply (a device gathers the ACKs of
        chunks that come together), in one transaction; once every chunk of the reply (its
        final one included) is ACKed, the reply is delivered (``deliveries``) and
        ``complete``. ``fresh`` when any of them was not recorded in this state before."""
        with transaction(self.conn):
            if replay_state is not None:
                self._save_replay(*replay_state)
            task_id: str | None = None
            fresh = 0
            for chunk in chunks:
                got = self._ack_chunk(reply_id, device, state, at_ms, chunk)
                if isinstance(got, Delivery):  # a reply from before chunks were kept
                    return got
                if got is not None:
                    task_id, fresh = got.task_id, fresh + got.fresh
            if task_id is None:
                return Delivery(False, False)
            if not fresh:
                return Delivery(False, False, task_id)
            pieces = self.conn.execute(
                "SELECT text, final, acked FROM reply_chunks WHERE reply_id=? ORDER BY idx",
                (reply_id,),
            ).fetchall()
            whole = bool(pieces) and bool(pieces[-1][1]) and all(p[2] for p in pieces)
            if not whole:
                self._bump("accepted.ack_chunk", fresh)
                return Delivery(True, False, task_id)
            if fresh > 1:
                self._bump("accepted.ack_chunk", fresh - 1)
            delivered = self._delivered(reply_id, device, state, at_ms)
            text = " ".join(str(p[0]) for p in pieces)
            return Delivery(True, delivered, task_id, text)

    def _ack_chunk(
        self, reply_id: str, device: str, state: str, at_ms: int, chunk: int
    ) -> _ChunkAck | Delivery | None:
        """One chunk's ACK inside :meth:`record_chunks_delivery`'s transaction: what it
        changed, a reply from before chunks were kept (its whole answer), or ``None`` when
        it is not this device's chunk (counted)."""
        first = self.conn.execute(  # the usual case: the first ACK, from its device
            "UPDATE reply_chunks SET acked=?, acked_ms=? WHERE reply_id=? AND idx=? "
            "AND device=? AND acked IS NULL RETURNING task_id",
            (state, at_ms, reply_id, chunk, device),
        ).fetchone()
        if first is not None:
            return _ChunkAck(str(first[0]), True)
        # another device's, a repeat, shown then played, or an unknown chunk
        row = self.conn.execute(
            "SELECT device, task_id, acked FROM reply_chunks WHERE reply_id=? AND idx=?",
            (reply_id, chunk),
        ).fetchone()
        if row is None:  # a reply from before chunks were kept
            owner = self.conn.execute(
                "SELECT device FROM replies WHERE id=?", (reply_id,)
            ).fetchone()
            if owner is None or owner[0] != device or chunk != 0:
                self._bump("rejected.ack_unknown_reply")
                return None
            fresh = self._delivered(reply_id, device, state, at_ms)
            return Delivery(fresh, fresh)
        if row[0] != device:
            self._bump("rejected.ack_unknown_reply")
            return None
        if row[2] == state or state != "played":
            self._bump("accepted.ack_duplicate")
            return _ChunkAck(str(row[1]), False)
        self.conn.execute(  # shown first, spoken now: the stronger state is kept
            "UPDATE reply_chunks SET acked=? WHERE reply_id=? AND idx=?",
            (state, reply_id, chunk),
        )
        return _ChunkAck(str(row[1]), True)

    def _delivered(self, reply_id: str, device: str, state: str, at_ms: int) -> bool:
        row = self.conn.execute(
            "INSERT OR IGNORE INTO deliveries VALUES (?,?,?,?) RETURNING reply_id",
            (reply_id, device, state, at_ms),
        ).fetchone()
        self._bump("accepted.ack" if row else "accepted.ack_duplicate")
        return row is not None

    # ------------------------------------------------------------------ brain turns
    def admit_utterance(
        self,
        *,
        utterance_id: str,
        device: str,
        text: str,
        ts_ms: int,
        received_ms: int,
        trace_id: str,
        meta: dict[str, object],
        replay_state: ReplayState | None,
    ) -> Admitted:
        """Put an utterance on the timeline (idempotent by id: a repeat returns the entry
        already there, ``duplicate``), with the sender's replay window, in one transaction.
        Its reply comes later, in chunks."""
        with transaction(self.conn):
            if replay_state is not None:
                self._save_replay(*replay_state)
            old = self._admitted(utterance_id)
            if old is not None:
                self._bump("accepted.duplicate")
                return old
            seq = self._append(
                utterance_id, device, "utterance", text, ts_ms, received_ms, trace_id, meta
            )
            self._bump("accepted.utterance")
        stored = json.loads(json.dumps(meta))  # the meta as a read gives it back
        return Admitted(utterance_id, device, seq, text, trace_id, stored, ts_ms, False)

    def admitted(self, utterance_id: str) -> Admitted | None:
        """The utterance entry ``utterance_id`` (``duplicate`` set), if on the timeline."""
        return self._admitted(utterance_id)

    def _admitted(self, utterance_id: str) -> Admitted | None:
        row = self.conn.execute(
            "SELECT seq, device, text, trace_id, meta, ts_ms FROM timeline WHERE id=?",
            (utterance_id,),
        ).fetchone()
        if row is None:
            return None
        seq, device, text, trace_id, meta, ts_ms = row
        return Admitted(utterance_id, device, seq, text, trace_id, json.loads(meta), ts_ms, True)

    def unanswered(self, *, since_ms: int, limit: int = 200) -> list[Admitted]:
        """Admitted turns (meta ``admitted``) since ``since_ms`` that have no reply yet:
        the hub stopped between admitting and answering them."""
        rows = self.conn.execute(
            "SELECT id FROM timeline t WHERE kind='utterance' AND received_ms >= ? "
            "AND json_extract(meta, '$.admitted') = 1 "
            "AND NOT EXISTS (SELECT 1 FROM replies r WHERE r.utterance_id = t.id) "
            "ORDER BY seq LIMIT ?",
            (since_ms, limit),
        ).fetchall()
        return [a for (uid,) in rows if (a := self._admitted(str(uid))) is not None]

    def add_chunk(self, chunk: Chunk) -> Chunk:
        """Keep one chunk of a reply (idempotent by (reply id, index): a chunk made again
        after a restart keeps its first text)."""
        with transaction(self.conn):
            self._insert_chunk(chunk, now_ms())
        return self._kept_chunk(chunk)

    def keep_chunk(
        self, chunk: Chunk, earlier: Sequence[str] | None, *, intent: str = ""
    ) -> tuple[Chunk, StoredReply | None]:
        """:meth:`add_chunk`, and when the kept chunk is final, :meth:`finish_reply` in the
        same transaction (idempotent alike). The reply's text is then ``earlier`` (the kept
        texts of its chunks before this one; ``None``: read here) and this chunk's kept
        text, joined by spaces; its entry's meta names the utterance and the kept chunk's
        task and brain. Returns the kept chunk (with the reply's ``seq`` once finished)
        and the finished reply, if it was."""
        kept, stored = self.keep_chunks([chunk], earlier, intent=intent)
        return kept[0], stored

    def keep_chunks(
        self, chunks: Sequence[Chunk], earlier: Sequence[str] | None, *, intent: str = ""
    ) -> tuple[list[Chunk], StoredReply | None]:
        """:meth:`keep_chunk` for consecutive chunks of one reply made together, in one
        transaction: ``earlier`` are the kept texts of the reply's chunks before the first
        of them; the last one, when final, finishes the reply."""
        if not chunks:
            raise ValueError("no chunks to keep")
        now = now_ms()
        with transaction(self.conn):
            kept: list[Chunk] = []
            for chunk in chunks:
                fresh = self._insert_chunk(chunk, now)
                kept.append(chunk if fresh else self._kept_chunk(chunk))
            last = kept[-1]
            if not last.final:
                return kept, None
            texts = (
                [*earlier, *(k.text for k in kept)]
                if earlier is not None
                else [c.text for c in self.chunks(last.reply_id)]
            )
            stored = self.finish_reply(
                reply_id=last.reply_id,
                utterance_id=last.utterance_id,
                device=last.device,
                text=" ".join(texts),
                trace_id=last.trace_id,
                utterance_seq=last.utterance_seq,
                meta={"utterance": last.utterance_id, "task": last.task_id, "brain": last.brain},
                intent=intent,
                now=now,
            )
        kept[-1] = dataclasses.replace(last, reply_seq=stored.reply_seq)
        return kept, stored

    def _kept_chunk(self, chunk: Chunk) -> Chunk:
        """The row of ``chunk`` just written or kept (its own row, not all the reply's)."""
        row = self.conn.execute(
            f"SELECT {CHUNK_COLUMNS} FROM {CHUNK_FROM} WHERE c.reply_id=? AND c.idx=?",
            (chunk.reply_id, chunk.index),
        ).fetchone()
        assert row is not None  # written or kept just now, in this connection
        return _chunk(tuple(row))

    def _insert_chunk(self, c: Chunk, now: int) -> bool:
        """Keep ``c`` unless it is kept already; whether it was new (then its row is ``c``:
        not ACKed, and its reply not on the timeline before its final chunk is)."""
        self.conn.execute(
            "INSERT OR IGNORE INTO reply_chunks (reply_id, idx, device, utterance_id, task_id, "
            "text, final, brain, trace_id, utterance_seq, created_ms) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                c.reply_id,
                c.index,
                c.device,
                c.utterance_id,
                c.task_id,
                c.text,
                int(c.final),
                c.brain,
                c.trace_id,
                c.utterance_seq,
                now,
            ),
        )
        return self.conn.changes() > 0

    def finish_reply(
        self,
        *,
        reply_id: str,
        utterance_id: str,
        device: str,
        text: str,
        trace_id: str,
        utterance_seq: int,
        meta: dict[str, object],
        intent: str = "",
        now: int | None = None,
    ) -> StoredReply:
        """The whole reply on the timeline (and, when it answers an utterance, in
        ``replies``); idempotent by reply id. ``intent``: what the brain understood the
        utterance as, recorded in the reply's meta and, in the same transaction, in the
        utterance's unless it is :data:`NOT_UNDERSTOOD` (``intent``; recall leaves the owner's
        recall questions out of what it remembers, and the answer to a request not
        understood out of the index). Joins the caller's transaction when one is open
        (:meth:`keep_chunk`'s)."""
        now = now_ms() if now is None else now
        with joined(self.conn):
            row = self.conn.execute("SELECT seq FROM timeline WHERE id=?", (reply_id,)).fetchone()
            if row is None:
                reply_seq = self._append(
                    reply_id,
                    "hub",
                    "reply",
                    text,
                    now,
                    now,
                    trace_id,
                    {"to": device, **meta, **({"intent": intent} if intent else {})},
                )
                if intent and intent != NOT_UNDERSTOOD and utterance_id:
                    self.conn.execute(
                        "UPDATE timeline SET meta = json_set(meta, '$.intent', ?) "
                        "WHERE id = ? AND kind = 'utterance'",
                        (intent, utterance_id),
                    )
            else:
                reply_seq = int(row[0])
            if utterance_id:
                self.conn.execute(
                    "INSERT OR IGNORE INTO replies VALUES (?,?,?,?,?,?,?,?,?)",
                    (
                        reply_id,
                        utterance_id,
                        device,
                        text,
                        0,
                        utterance_seq,
                        reply_seq,
                        trace_id,
                        now,
                    ),
                )
            return StoredReply(
                reply_id, utterance_id, device, text, False, utterance_seq, reply_seq, trace_id
            )

    def chunks(self, reply_id: str) -> list[Chunk]:
        rows = self.conn.execute(
            f"SELECT {CHUNK_COLUMNS} FROM {CHUNK_FROM} WHERE c.reply_id=? ORDER BY c.idx",
            (reply_id,),
        )
        return [_chunk(r) for r in rows]

    def unacked_chunks(self, device: str, limit: int = 500) -> list[Chunk]:
        """Chunks ``device`` has not ACKed, oldest reply first (sent again when it is back)."""
        rows = self.conn.execute(
            f"SELECT {CHUNK_COLUMNS} FROM {CHUNK_FROM} WHERE c.device=? AND c.acked IS NULL "
            "ORDER BY c.created_ms, c.reply_id, c.idx LIMIT ?",
            (device, limit),
        )
        return [_chunk(r) for r in rows]

    def append_entry(
        self,
        entry_id: str,
        *,
        device: str,
        kind: str,
        text: str,
        ts_ms: int,
        trace_id: str,
        meta: dict[str, object],
    ) -> tuple[int, bool]:
        """An entry the hub writes itself (an activity card): its ``seq`` and whether it is
        new (idempotent by id)."""
        with transaction(self.conn):
            row = self.conn.execute("SELECT seq FROM timeline WHERE id=?", (entry_id,)).fetchone()
            if row is not None:
                return int(row[0]), False
            return self._append(entry_id, device, kind, text, ts_ms, ts_ms, trace_id, meta), True

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

    def replay_windows(self) -> list[ReplayState]:
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

    def refuse(self, counter: str, replay_state: ReplayState | None) -> None:
        """Count a refused message (``counter``, a ``rejected.*`` name) and keep its
        sender's replay window, in one transaction."""
        with transaction(self.conn):
            if replay_state is not None:
                self._save_replay(*replay_state)
            self._bump(counter)

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
        written from it, and re-written from it on every hub start. A device writes
        entries only in its own name and never of a kind only the hub writes
        (``sync.scopes.HUB_ENTRY_KINDS``: ``reply``, ``utterance``): one it sent in
        another's name (a device id that is not the sender's) or of such a kind is refused —
        kept out of the timeline, remembered in ``refused_entries`` and marked
        ``docs.REFUSED`` (-1) so every replica leaves it out.
        """
        now = now_ms()
        refused: dict[str, int] = {}
        with transaction(self.conn):
            added = 0
            for e in entries:
                if (
                    self.conn.execute(
                        "SELECT 1 FROM refused_entries WHERE id=? UNION ALL "
                        "SELECT 1 FROM forgotten_entries WHERE id=?",
                        (e.id, e.id),
                    ).fetchone()
                    is not None
                ):
                    refused[e.id] = REFUSED_SEQ
                    continue
                problem = None
                if sender != HUB_NAME and not self._known(e.id):
                    if e.device != sender:
                        problem = "entry_other_device", f"claims device {e.device[:64]!r}"
                    elif e.kind in HUB_ENTRY_KINDS:
                        problem = "entry_hub_kind", f"of kind {e.kind!r} (the hub's)"
                if problem is not None:
                    self.conn.execute(
                        "INSERT INTO refused_entries VALUES (?,?,?,?)",
                        (e.id, e.device[:128], sender, now),
                    )
                    self._bump(f"rejected.{problem[0]}")
                    log.warning(
                        "timeline entry %s from %s %s: refused", e.id[:64], sender, problem[1]
                    )
                    refused[e.id] = REFUSED_SEQ
                    continue
                row = self.conn.execute(
                    "INSERT OR IGNORE INTO timeline (id, device, kind, text, ts_ms, received_ms, "
                    "trace_id, meta) VALUES (?,?,?,?,?,?,?,?) RETURNING seq",
                    (e.id, e.device, e.kind, e.text, e.ts, now, "", json.dumps({"via": sender})),
                ).fetchone()
                added += row is not None
            if added:
                self._bump("accepted.sync_entry", added)
            return refused | {
                e.id: int(r[0])
                for e in entries
                if e.id not in refused
                and (
                    r := self.conn.execute(
                        "SELECT seq FROM timeline WHERE id=?", (e.id,)
                    ).fetchone()
                )
            }

    def _known(self, entry_id: str) -> bool:
        return (
            self.conn.execute("SELECT 1 FROM timeline WHERE id=?", (entry_id,)).fetchone()
            is not None
        )

    def refused_entries(self) -> list[tuple[str, str, str]]:
        """(entry id, the device it claimed, the device that sent it) of refused entries."""
        return [
            (str(i), str(d), str(s))
            for i, d, s in self.conn.execute(
                "SELECT id, device, sender FROM refused_entries ORDER BY at_ms"
            )
        ]

    # ------------------------------------------------------------------ reading
    def entries(self, *, after: int = 0, limit: int = 1000) -> list[Entry]:
        rows = self.conn.execute(
            "SELECT seq, id, device, kind, text, ts_ms, trace_id FROM timeline WHERE seq > ? "
            "ORDER BY seq LIMIT ?",
            (after, limit),
        )
        return [Entry(*r) for r in rows]

    def replies_of(self, utterance_ids: Sequence[str]) -> dict[str, str]:
        """utterance id → the id of its reply (for those that have one)."""
        out = {}
        for uid in utterance_ids:
            row = self.conn.execute(
                "SELECT id FROM replies WHERE utterance_id=?", (uid,)
            ).fetchone()
            if row is not None:
                out[uid] = str(row[0])
        return out

    def replies_naming(self, words: str, limit: int = 500) -> dict[str, str]:
        """The hub's replies whose text holds ``words`` as whole words (ASCII
        case-insensitive), id → text, oldest first; read from ``hub.db`` itself, so a reply
        the recall index has not caught up with yet is found too."""
        needle = " ".join(words.split())
        if not needle:
            return {}
        whole = re.compile(
            ("(?<![a-z0-9])" if _ascii_word(needle[0]) else "")
            + re.escape(needle)
            + ("(?![a-z0-9])" if _ascii_word(needle[-1]) else ""),
            re.IGNORECASE,
        )
        rows = self.conn.execute(
            "SELECT id, text FROM timeline WHERE kind='reply' AND instr(lower(text), lower(?))"
            " ORDER BY seq",
            (needle,),
        )
        out: dict[str, str] = {}
        for eid, text in rows:
            if whole.search(str(text)):  # "Al" is not in "Always" (a Chinese name has no edges)
                out[str(eid)] = str(text)
                if len(out) >= limit:
                    break
        return out

    def forget_entries(self, entry_ids: Sequence[str], at_ms: int) -> list[str]:
        """Erase these entries' text (timeline rows, replies and their chunks): the rows
        keep their ids and ``seq`` (the order and the delivery records stay), the payload
        is overwritten in the file (``secure_delete``), and the ids are tombstoned so a
        device that pushes one again is refused. Returns the ids whose text was erased
        here (idempotent: an erased one is not counted again)."""
        erased = []
        self.conn.execute("PRAGMA secure_delete=ON").fetchall()
        with transaction(self.conn):
            for eid in dict.fromkeys(entry_ids):
                self.conn.execute(
                    "INSERT OR IGNORE INTO forgotten_entries(id, at_ms) VALUES (?,?)", (eid, at_ms)
                )
                row = self.conn.execute(
                    "UPDATE timeline SET text='', meta='{}' WHERE id=? AND (text!='' OR meta!='{}')"
                    " RETURNING id",
                    (eid,),
                ).fetchone()
                reply = self.conn.execute(
                    "UPDATE replies SET text='' WHERE id=? AND text!='' RETURNING id", (eid,)
                ).fetchone()
                chunks = self.conn.execute(
                    "UPDATE reply_chunks SET text='' WHERE reply_id=? AND text!='' RETURNING idx",
                    (eid,),
                ).fetchall()
                if row is not None or reply is not None or chunks:
                    erased.append(eid)
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return erased

    def forgotten(self, entry_ids: Sequence[str]) -> set[str]:
        """Which of these entry ids were forgotten."""
        return {
            eid
            for eid in entry_ids
            if self.conn.execute("SELECT 1 FROM forgotten_entries WHERE id=?", (eid,)).fetchone()
        }

    def entries_with_scope(self, *, after: int = 0, limit: int = 500) -> list[tuple[Entry, str]]:
        """Entries after ``seq`` ``after`` with the scope they were admitted in (``""`` for
        entries that carry none: the hub's own, replicated ones)."""
        return [(e.entry, e.scope) for e in self.entries_with_meta(after=after, limit=limit)]

    def entries_with_meta(self, *, after: int = 0, limit: int = 500) -> list[EntryMeta]:
        """Entries after ``seq`` ``after`` with what their meta says of them (the recall
        indexer's read)."""
        rows = self.conn.execute(
            "SELECT seq, id, device, kind, text, ts_ms, trace_id, meta FROM timeline "
            "WHERE seq > ? ORDER BY seq LIMIT ?",
            (after, limit),
        )
        out = []
        for *fields, meta in rows:
            try:
                known = json.loads(meta)
                scope, intent = known.get("scope", ""), known.get("intent", "")
            except (ValueError, AttributeError):
                scope = intent = ""
            out.append(EntryMeta(Entry(*fields), str(scope or ""), str(intent or "")))
        return out

    def entries_before(self, before: int, limit: int = 50) -> list[Entry]:
        """The ``limit`` entries just below ``seq`` ``before`` (a page of the timeline, newest
        last; ``before <= 0``: the newest page)."""
        rows = self.conn.execute(
            "SELECT seq, id, device, kind, text, ts_ms, trace_id FROM (SELECT * FROM timeline "
            "WHERE seq < ? ORDER BY seq DESC LIMIT ?) ORDER BY seq",
            (before if before > 0 else 2**62, limit),
        )
        return [Entry(*r) for r in rows]

    def last_used_device(self) -> str:
        """The device of the newest utterance on the timeline (the one the owner used most
        recently); ``""`` when there is none."""
        row = self.conn.execute(
            "SELECT device FROM timeline WHERE kind='utterance' ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        return "" if row is None else str(row[0])

    def entries_since(self, ts_ms: int, limit: int = 500) -> list[Entry]:
        """Entries whose time is at or after ``ts_ms``, in ``seq`` order (the last ``limit``)."""
        rows = self.conn.execute(
            "SELECT seq, id, device, kind, text, ts_ms, trace_id FROM (SELECT * FROM timeline "
            "WHERE ts_ms >= ? ORDER BY seq DESC LIMIT ?) ORDER BY seq",
            (ts_ms, limit),
        )
        return [Entry(*r) for r in rows]
