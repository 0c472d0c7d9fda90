"""Recall over the timeline (L4): its entries in the recall index, and questions narrowed by
the time they name.

:class:`TimelineIndexer` puts timeline entries (utterances, replies, activity, reminders,
notes) into the same recall index as the L3 assertions — item
``timeline:<entry id>``, source ``("timeline", <entry id>)``, created at the entry's time —
so one search fuses both by rank. It reads the timeline from a cursor (the last ``seq``
indexed, ``HOME/recall/timeline.seq``) in batches, so a restart or a burst loses nothing and
indexes nothing twice. Guest utterances are not the owner's memory and are left out; an
entry is ``medium`` (what the call-time context gives timeline snippets) unless the memory
store registered its source higher. Questions the owner asked are indexed with low
importance: "what did I say about the dentist?" should not outrank what was said.
``photo`` entries are not indexed here: the entry is only a reference ("photo · 照片
(specs)"), and the vision service indexes each snapshot itself as ``photo:<id>`` with what
was read and recognised on it (:mod:`hub.vision.recall`) — one item per snapshot.

:func:`recall` is the search the memory package and ``yimi recall`` run: a past time phrase
in the question ("last Tuesday", "昨天", see :mod:`hub.memory.period`) narrows the
candidates to items created then, and the rest of the question is what is searched for.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hub.memory.index import RECALL_DIR, Entry, Hit, SkipFilter
from hub.memory.period import Period, past_period
from hub.memory.sensitivity import Source
from hub.timeline import NOT_UNDERSTOOD, HubStore
from storage.private import private_dir
from sync.tasks import woken

log = logging.getLogger(__name__)

TIMELINE_ITEM = "timeline:"
INDEXED_KINDS = frozenset({"utterance", "reply", "activity", "reminder", "note"})
"""entry kinds whose text is recalled (device entries of other kinds: status, sensor…, not;
``photo``: the vision service's ``photo:<id>`` item is the snapshot's one item)"""
CURSOR_NAME = "timeline.seq"
BATCH = 64
WAKE_INTERVAL_S = 10.0
SETTLE_S = 1.5
"""seconds the timeline stays quiet before a pass: a turn's entries arrive as a burst, and
the embedding model (loaded on the first pass) must not compete with answering it"""
SETTLE_MAX_S = 10.0
"""a busy timeline is indexed at least this often all the same"""
IMPORTANCE = {"utterance": 0.5, "reply": 0.3}
QUESTION_IMPORTANCE = 0.1
DEFAULT_IMPORTANCE = 0.4
SKIP_SCOPES = frozenset({"guest"})
_QUESTION = re.compile(
    r"[?？]\s*$|^\s*(?:what|when|where|who|why|how|do you|did i|can you)\b|什么|吗\s*$|哪|几",
    re.IGNORECASE,
)
ASKING_INTENTS = frozenset({"YimiRecall", "YimiForget", "YimiTimeline"})
"""intents of utterances that ask about the memory itself ("what do you remember about …",
"forget …", "what's on my timeline"): never something the owner told"""


def timeline_recall_on(config: Mapping[str, Any]) -> bool:
    """Whether the home's configuration (``home.yaml``) has the timeline in recall: on
    unless ``memory: {timeline_recall: false}`` (which also keeps the embedding model out
    of the hub process)."""
    memory = config.get("memory")
    return not (isinstance(memory, Mapping) and memory.get("timeline_recall") is False)


def timeline_item(entry_id: str) -> str:
    return TIMELINE_ITEM + entry_id


@dataclass(frozen=True)
class TimelineText:
    """One timeline entry as the indexer reads it."""

    seq: int
    id: str
    kind: str
    text: str
    ts_ms: int
    scope: str = ""
    intent: str = ""
    """what the brain understood the request as (on an utterance and its reply; ``""``: not
    recorded)"""


class IndexWriter(Protocol):
    """What the indexer needs of the recall index (``MemoryIndex``)."""

    def upsert_many(self, entries: Sequence[Entry]) -> None: ...


ReadTimeline = Callable[[int, int], Sequence[TimelineText]]
"""``(after seq, limit)`` → the next entries in ``seq`` order"""
Sensitivity = Callable[[Source], str | None]
"""the registered level of a source, if any"""


def read_timeline(store: HubStore) -> ReadTimeline:
    """The indexer's read of the hub's timeline: its entries with their scope and intent."""

    def read(after: int, limit: int) -> list[TimelineText]:
        return [
            TimelineText(
                m.entry.seq,
                m.entry.id,
                m.entry.kind,
                m.entry.text,
                m.entry.ts_ms,
                m.scope,
                m.intent,
            )
            for m in store.entries_with_meta(after=after, limit=limit)
        ]

    return read


def cursor_path(home: Path) -> Path:
    return home / RECALL_DIR / CURSOR_NAME


class TimelineIndexer:
    """Indexes timeline entries after its cursor; :meth:`catch_up` is one pass (blocking:
    it embeds, so the hub runs it in a worker thread)."""

    def __init__(
        self,
        read: ReadTimeline,
        index: IndexWriter,
        cursor: Path,
        *,
        sensitivity: Sensitivity | None = None,
        batch: int = BATCH,
    ) -> None:
        self._read = read
        self._index = index
        self._cursor = cursor
        self._sensitivity = sensitivity
        self._batch = batch

    @property
    def position(self) -> int:
        try:
            return int(self._cursor.read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def _save(self, seq: int) -> None:
        private_dir(self._cursor.parent)
        tmp = self._cursor.with_suffix(".tmp")
        tmp.write_text(str(seq))
        os.replace(tmp, self._cursor)

    def entry(self, t: TimelineText) -> Entry | None:
        """The index entry of one timeline entry (None: not recalled)."""
        if t.kind not in INDEXED_KINDS or t.scope in SKIP_SCOPES or not t.text.strip():
            return None
        if t.kind == "reply" and t.intent == NOT_UNDERSTOOD:
            return None  # the request heard back and the list of what the hub can do
        level = self._sensitivity(("timeline", t.id)) if self._sensitivity else None
        importance = IMPORTANCE.get(t.kind, DEFAULT_IMPORTANCE)
        if t.kind == "utterance" and _QUESTION.search(t.text):
            importance = QUESTION_IMPORTANCE
        return Entry(
            timeline_item(t.id),
            t.text,
            level or "medium",
            (("timeline", t.id),),
            importance,
            t.ts_ms,
        )

    async def run(
        self,
        wake: asyncio.Event,
        *,
        interval_s: float = WAKE_INTERVAL_S,
        settle_s: float = SETTLE_S,
    ) -> None:
        """Keep the index up with the timeline (an owned task): a pass once the timeline has
        been quiet for ``settle_s`` after ``wake`` is set (new entries), and every
        ``interval_s``. The timeline is read on the loop; only the embedding and the index
        write run in a worker thread. The cursor moves after a batch is written, so a
        cancelled pass is redone (upserts are idempotent)."""
        loop = asyncio.get_running_loop()
        while True:
            await self._settle(wake, settle_s, loop.time() + SETTLE_MAX_S)
            wake.clear()
            try:
                done = 0
                while True:
                    rows = self._read(self.position, self._batch)
                    if not rows:
                        break
                    entries = [e for e in (self.entry(t) for t in rows) if e is not None]
                    if entries:
                        await asyncio.to_thread(self._index.upsert_many, entries)
                    self._save(rows[-1].seq)
                    done += len(entries)
                    if len(rows) < self._batch:
                        break
                if done:
                    log.info("recall index: %d timeline entries indexed", done)
            except Exception:  # the index is behind; the next pass tries again
                log.exception("indexing the timeline failed")
            await woken(wake, interval_s)

    @staticmethod
    async def _settle(wake: asyncio.Event, settle_s: float, until: float) -> None:
        """Wait until no new entry has come for ``settle_s`` (at most until ``until``)."""
        loop = asyncio.get_running_loop()
        while settle_s > 0 and (left := until - loop.time()) > 0:
            wake.clear()
            if not await woken(wake, min(settle_s, left)):
                return

    def catch_up(self, limit: int = 10_000) -> int:
        """Index what came after the cursor (at most ``limit`` entries); the count indexed."""
        done = 0
        seq = self.position
        while done < limit:
            rows = self._read(seq, self._batch)
            if not rows:
                break
            entries = [e for e in (self.entry(t) for t in rows) if e is not None]
            if entries:
                self._index.upsert_many(entries)
            seq = rows[-1].seq
            self._save(seq)
            done += len(entries)
            if len(rows) < self._batch:
                break
        if done:
            log.info("recall index: %d timeline entries indexed (up to seq %d)", done, seq)
        return done


# ---------------------------------------------------------------- asking
class Searchable(Protocol):
    def search(
        self,
        query: str,
        k: int = 10,
        *,
        include_stale: bool = False,
        created: tuple[int, int] | None = None,
        skip: SkipFilter | None = None,
    ) -> list[Hit]: ...


def told(kind: str, text: str, intent: str = "") -> bool:
    """Whether a timeline entry is something the owner told — what "what do you remember
    about …" answers with. Not the hub's replies (its own words: they stay searchable, for
    the call-time context and for forgetting), and not the owner's questions: an utterance
    the brain understood as asking the memory (``intent``, recorded with its reply), or —
    no intent recorded (a model's turn, one not understood or not answered yet) — one
    phrased as a question."""
    if kind == "reply":
        return False
    if kind != "utterance":
        return True
    if intent:
        return intent not in ASKING_INTENTS
    return not _QUESTION.search(text)


def untold(hub_db: Path) -> SkipFilter:
    """A ``skip`` filter over the timeline in ``hub_db`` (read-only, the hub writes it):
    the timeline items among the candidates that are not something the owner told
    (:func:`told`). No timeline database: nothing left out."""
    from storage.sqlite import read_rows

    def skip(item_ids: list[str]) -> set[str]:
        ids = [i[len(TIMELINE_ITEM) :] for i in item_ids if i.startswith(TIMELINE_ITEM)]
        if not ids or not hub_db.exists():
            return set()
        marks = ",".join("?" * len(ids))
        rows = read_rows(
            hub_db,
            f"SELECT id, kind, text, json_extract(meta, '$.intent') FROM timeline "
            f"WHERE id IN ({marks})",
            *ids,
        )
        return {
            timeline_item(str(eid))
            for eid, kind, text, intent in rows
            if not told(str(kind), str(text or ""), str(intent or ""))
        }

    return skip


@dataclass(frozen=True)
class Recalled:
    hits: list[Hit]
    period: Period | None


def recall(
    index: Searchable,
    query: str,
    k: int = 5,
    *,
    include_stale: bool = False,
    now: dt.datetime | None = None,
    hide: Collection[str] = (),
    skip: SkipFilter | None = None,
) -> Recalled:
    """The ``k`` best items for a question, narrowed to the time it names (if any).

    A question narrowed by time also finds items unused for 30 days (it asks for them by
    their time). ``hide``: item ids never to return (the question's own entry); ``skip``:
    a filter of candidates to leave out (:func:`untold`: what the owner did not tell).
    """
    local = (now or dt.datetime.now()).astimezone()
    period = past_period(query, local)
    hidden = set(hide)
    if skip is not None and hidden:
        given = skip
        skip = lambda ids: hidden.union(given(ids))  # noqa: E731
    elif hidden:
        skip = lambda ids: hidden  # noqa: E731
    if period is None:
        hits = index.search(query, k, include_stale=include_stale, skip=skip)
    else:
        hits = index.search(
            period.rest or query,
            k,
            include_stale=True,
            created=(period.start_ms, period.end_ms),
            skip=skip,
        )
    return Recalled(hits, period)


def dated(hit: Hit, tz: dt.tzinfo | None = None) -> str:
    """A timeline hit's text with its local date ("2026-12-01 Tue …"); others as they are."""
    if not hit.item_id.startswith(TIMELINE_ITEM):
        return hit.text
    when = dt.datetime.fromtimestamp(
        hit.created_ms / 1000, tz or dt.datetime.now().astimezone().tzinfo
    )
    return f"{when:%Y-%m-%d %a %H:%M} {hit.text}"
