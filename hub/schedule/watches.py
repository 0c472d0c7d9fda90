"""Watches: observe-only conditions that notify the owner once per occurrence (issue 17).

A watch is a job of kind ``watch`` (``HOME/schedule.db``) of one of two sources:

- ``home``: a home device's state, **polled** (the daemon reads it through the gateway: an
  observe call, never a change) every ``interval_ms``; a failed read polls less often
  (doubling up to :data:`MAX_INTERVAL_MS`), a good one goes back to the interval. The first
  reading is the baseline; an occurrence is a *change into* one of the wanted states ("the
  front door opens": from closed to open), so a door left open is told once, and again only
  after it closed and opened again. The last state read is kept in the job's spec, so a hub
  restart neither misses nor repeats an occurrence.
- ``timeline``: an entry on the hub's timeline whose text holds every word of the rule,
  **pushed** (the daemon hands each new entry to :meth:`WatchDesk.matching`); the
  occurrence is the entry, claimed once by its id in the scheduler's ledger.

Both ledgers are the scheduler's ``occurrences`` table: (job, occurrence) is claimed once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hub.schedule.scheduler import Scheduler
from hub.schedule.store import DONE, FIRED, PENDING, Job

WATCH = "watch"
HOME, TIMELINE = "home", "timeline"
INTERVAL_MS = 10_000
MAX_INTERVAL_MS = 5 * 60 * 1000
GRACE_MS = 24 * 3600 * 1000
"""a poll that came due while the hub was down is still made (it only reads)"""
MAX_WORDS = 8


@dataclass(frozen=True)
class WatchView:
    id: str
    source: str
    what: str
    """what it watches, as said back ("the front door opens")"""


@dataclass(frozen=True)
class Reading:
    """What one poll of a ``home`` watch decided."""

    notify: bool
    spec: dict[str, Any]
    """the spec to keep (last state, interval, failures)"""
    next_in_ms: int


def observe(spec: dict[str, Any], state: str | None) -> Reading:
    """The pure core of a poll: ``state`` read (``None``: the read failed)."""
    base = int(spec.get("interval_ms") or INTERVAL_MS)
    if state is None:
        fails = int(spec.get("fails") or 0) + 1
        wait = min(MAX_INTERVAL_MS, base * 2**fails)
        return Reading(False, {**spec, "fails": fails}, wait)
    now = state.strip().casefold()
    wanted = {str(s).casefold() for s in spec.get("states") or ()}
    last = spec.get("last")
    changed_in = last is not None and now in wanted and str(last) not in wanted
    return Reading(changed_in, {**spec, "last": now, "fails": 0}, base)


def entry_key(entry_id: str) -> int:
    """A timeline entry's occurrence key in the ledger (an integer, stable)."""
    return int(hashlib.sha256(entry_id.encode()).hexdigest()[:13], 16)


STOP_WORDS = frozenset({"the", "a", "an", "my", "any", "some", "of"})


def words_of(rule: str) -> list[str]:
    """The words an entry must hold (small words like "the" left out)."""
    return [w for w in rule.casefold().split() if w not in STOP_WORDS][:MAX_WORDS]


def matches(rule_words: Sequence[str], text: str) -> bool:
    """Every word of the rule is in ``text`` (case-folded; a Chinese rule is one "word" that
    must appear as it is)."""
    folded = text.casefold()
    return bool(rule_words) and all(w in folded for w in rule_words)


class WatchDesk:
    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self._timeline_watches: tuple[tuple[int, int], list[Job]] | None = None
        """(the store's version, the active timeline watches then): read once per change,
        not for every timeline entry"""

    @staticmethod
    def view(job: Job) -> WatchView:
        return WatchView(job.id, str(job.spec.get("source")), str(job.spec.get("what", "")))

    def watch_home(
        self,
        request_id: str,
        *,
        device: str,
        entity: str,
        states: Iterable[str],
        what: str,
        lang: str,
        trace: str,
        interval_ms: int = INTERVAL_MS,
    ) -> WatchView:
        """Poll ``entity`` from now; tell the owner when it changes into one of ``states``."""
        spec = {
            "source": HOME,
            "device": device,
            "entity": entity,
            "states": sorted({s.casefold() for s in states}),
            "what": what[:200],
            "lang": lang,
            "trace_id": trace,
            "interval_ms": max(1000, interval_ms),
        }
        job = self.scheduler.add(
            f"watch-{request_id}", WATCH, spec, at_ms=self.scheduler.now_ms(), grace_ms=GRACE_MS
        )
        return self.view(job)

    def watch_timeline(
        self, request_id: str, *, device: str, rule: str, what: str, lang: str, trace: str
    ) -> WatchView:
        """Tell the owner of every new timeline entry holding the words of ``rule``
        (``request_id``, the entry of the request that set it, is not one)."""
        now = self.scheduler.now_ms()
        spec = {
            "source": TIMELINE,
            "set_by": request_id,
            "device": device,
            "words": words_of(rule),
            "what": what[:200],
            "lang": lang,
            "trace_id": trace,
        }
        job = Job(
            id=f"watch-{request_id}",
            kind=WATCH,
            spec=spec,
            start_ms=now,
            next_ms=None,  # pushed: never due by time
            grace_ms=GRACE_MS,
            state=PENDING,
            created_ms=now,
            updated_ms=now,
        )
        return self.view(self.scheduler.store.put(job))

    def all(self) -> list[WatchView]:
        return [self.view(j) for j in self.scheduler.store.jobs(WATCH)]

    def cancel(self, view: WatchView) -> None:
        self.scheduler.cancel(view.id)

    def polled(self, job: Job, state: str | None) -> Reading:
        """Keep what a poll of ``job`` read and set its next poll (the job is one-shot per
        poll: the scheduler marked it done when it came due)."""
        reading = observe(dict(job.spec), state)
        kept = self.scheduler.store.get(job.id)
        if kept is None or kept.state not in (PENDING, DONE):
            return replace(reading, notify=False)  # cancelled meanwhile: no more polls
        at = self.scheduler.now_ms() + reading.next_in_ms
        self.scheduler.store.update(
            replace(kept, spec=reading.spec, state=PENDING, next_ms=at, start_ms=at)
        )
        self.scheduler.poke()
        return reading

    def _timeline(self) -> list[Job]:
        """The active timeline watches (re-read only when the job store changed)."""
        store = self.scheduler.store
        version = store.version()
        cached = self._timeline_watches
        if cached is None or cached[0] != version:
            jobs = [j for j in store.jobs(WATCH) if j.spec.get("source") == TIMELINE]
            cached = self._timeline_watches = (version, jobs)
        return cached[1]

    def matching(self, entry_id: str, text: str) -> list[Job]:
        """The timeline watches the entry ``entry_id`` is an occurrence of, each claimed
        once (a second call with the same entry returns none). The request that set a
        watch ("tell me when the timeline mentions the parcel") is not an occurrence of it:
        its entry reaches the timeline with its reply, after the watch was set."""
        jobs = [
            j
            for j in self._timeline()
            if entry_id not in (j.spec.get("set_by"), j.id.removeprefix("watch-"))
            and matches(j.spec.get("words") or (), text)
        ]
        if not jobs:
            return []  # the common case: no transaction per timeline entry
        claimed = []
        now = self.scheduler.now_ms()
        with self.scheduler.store.transaction():
            for j in jobs:
                if self.scheduler.store.claim(j, entry_key(entry_id), FIRED, 0, now):
                    claimed.append(j)
        return claimed
