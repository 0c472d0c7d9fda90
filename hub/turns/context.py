"""Context sources of a turn: the owner's profile, notes, recall (L3 and the timeline),
today's timeline, the time zone and health facts; and the address book the brain reads
(``HOME/contacts.yaml``).

Only ``owner`` turns get them (:meth:`ContextSources.sources`); ``owner_uncertain`` and
``guest`` turns read no private memory.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from hub.brain import AddressBook, Contact
from hub.brain.rules import HEARD_AS_NOTES, NOTE_WORDS
from hub.memory.assertions import AssertionStore
from hub.memory.context import (
    ContextSource,
    FunctionSource,
    IndexSource,
    Snippet,
)
from hub.memory.index import MemoryIndex
from hub.memory.timeline_recall import timeline_item
from hub.timeline import HubStore
from hub.turns.activity import ACTIVITY_KIND
from protos.errors import YimiError
from sync.documents import Note

log = logging.getLogger(__name__)

NOTE_STOP = frozenset("a an the my our your of to for from about with and or".split()) | frozenset(
    [*(w for w in NOTE_WORDS if w.isascii()), *HEARD_AS_NOTES]
)
"""words of a thing to send that do not narrow which note it is ('the meeting notes', and
'the meeting notice' as Whisper base hears it)"""
MAX_NOTES = 10
TIMELINE_SNIPPETS = 12
HEALTH_PREFIX = "health."
MAX_HEALTH = 8


class FileContacts:
    """``HOME/contacts.yaml`` as an address book, read again when the file changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._book = AddressBook()

    def _current(self) -> AddressBook:
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = (0, 0)
        if stamp != self._stamp:
            try:
                self._book = AddressBook.load(self.path)
            except YimiError as exc:
                log.error("%s", exc)
                self._book = AddressBook()
            self._stamp = stamp
        return self._book

    def find(self, name: str) -> Contact | None:
        return self._current().find(name)

    def all(self) -> list[Contact]:
        """Every contact (the intent engine's contact list)."""
        return list(self._current().contacts)


class ContextSources:
    """The context sources of turns: ``home`` (``profile/``), the timeline in ``store``,
    the replicated notes (``notes``) and, with ``memory`` (the home's assertion store and
    its recall index), recall and the owner's health facts — the six of
    ARCHITECTURE § Memory."""

    def __init__(
        self,
        home: Path,
        store: HubStore | None,
        notes: Callable[[], Sequence[Note]],
        memory: AssertionStore | None = None,
    ) -> None:
        self.home = home
        self.store = store
        self._all_notes = notes
        self.memory = memory

    def sources(self, scope: str, turn_id: str) -> list[ContextSource]:
        """The context sources of a turn: all of them for the owner, none otherwise."""
        if scope != "owner":
            return []
        out: list[ContextSource] = [
            FunctionSource("profile", self._profile),
            FunctionSource("notes", self._notes),
        ]
        index = self.memory.index if self.memory is not None else None
        if isinstance(index, MemoryIndex):
            out.append(IndexSource(index, "assertions", hide={timeline_item(turn_id)}))
        out += [
            FunctionSource("timeline", lambda q: self._timeline(q, turn_id)),
            FunctionSource("timezone", _local_time),
            FunctionSource("health", self._health),
        ]
        return out

    async def _health(self, query: str) -> Sequence[Snippet]:
        """The owner's health facts (current ``health.*`` assertions: allergies, medication,
        conditions) and notes of kind ``health``: always given, whatever the question."""
        memory = self.memory

        def read() -> list[Snippet]:
            if memory is None:
                return []
            return [
                Snippet(a.head.sentence, a.sensitivity, (("assertion", a.id),))
                for a in memory.current()
                if (a.head.predicate or "").startswith(HEALTH_PREFIX) and a.head.sentence
            ][:MAX_HEALTH]

        facts = await asyncio.to_thread(read)
        notes = [
            Snippet(n.text, "high", (("note", n.id),))
            for n in self._all_notes()
            if n.kind == "health"
        ]
        return facts + notes[: max(0, MAX_HEALTH - len(facts))]

    async def _profile(self, query: str) -> Sequence[Snippet]:
        def read() -> list[Snippet]:
            out = []
            for name in ("USER.md", "MEMORY.md"):
                path = self.home / "profile" / name
                try:
                    text = path.read_text(encoding="utf-8", errors="replace")[: 64 * 1024]
                except FileNotFoundError:
                    continue
                for line in text.splitlines():
                    line = line.strip().lstrip("-* ").strip()
                    if line and not line.startswith("#"):
                        out.append(Snippet(line, "high", (("profile", name),)))
            return out

        return await asyncio.to_thread(read)

    async def _notes(self, query: str) -> Sequence[Snippet]:
        words = {w for w in re.findall(r"\w+", query.lower()) if w not in NOTE_STOP}
        out = []
        for n in reversed(self._all_notes()):
            hay = f"{n.kind} {n.text}".lower()
            if not words or all(w in hay for w in words):
                out.append(Snippet(n.text, "medium", (("note", n.id),)))
            if len(out) >= MAX_NOTES:
                break
        return out

    async def _timeline(self, query: str, turn_id: str) -> Sequence[Snippet]:
        """Timeline entries of a period: ``query`` ``yesterday`` or ``last_week`` (the seven
        days before today), anything else today."""
        if self.store is None:
            return []
        today = dt.date.today()
        start_day, end_day = today, today + dt.timedelta(days=1)
        if query == "yesterday":
            start_day, end_day = today - dt.timedelta(days=1), today
        elif query == "last_week":
            start_day, end_day = today - dt.timedelta(days=7), today
        start = int(dt.datetime.combine(start_day, dt.time()).timestamp() * 1000)
        end = int(dt.datetime.combine(end_day, dt.time()).timestamp() * 1000)
        with_day = query == "last_week"
        rows = [
            e
            for e in self.store.entries_since(start, limit=2000)
            if e.ts_ms < end and e.id != turn_id and e.kind not in ("reply", ACTIVITY_KIND)
        ]
        fmt = "%a %H:%M" if with_day else "%H:%M"
        return [
            Snippet(
                f"{time.strftime(fmt, time.localtime(e.ts_ms / 1000))} {e.text}",
                "medium",
                (("timeline", e.id),),
            )
            for e in rows[-TIMELINE_SNIPPETS:]
        ]


async def _local_time(_query: str) -> list[Snippet]:
    """The time zone source: the local time when the context is read, not when the turn's
    sources are listed (a rule-based turn lists them and never reads them)."""
    return [timezone()]


def timezone() -> Snippet:
    now = dt.datetime.now().astimezone()
    return Snippet(
        f"Local time {now:%Y-%m-%d %H:%M} ({now.tzname()})", "low", (("system", "timezone"),)
    )
