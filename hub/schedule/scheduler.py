"""The hub's durable scheduler: one-shot and recurring jobs that survive restarts.

The core is pure with an explicit clock: :meth:`Scheduler.claim_due` takes every job due at
``now`` in one transaction — for each, its due occurrences are claimed in ``occurrences``
(idempotent on (job, occurrence)): the latest fires if it is still inside the job's grace
window, every other one (and the latest too when it is later than that) is recorded
``missed``; the job moves on to its next occurrence after ``now`` (a one-shot job is done).
So a job missed while the hub was down fires once on start within its grace, else is
reported missed, and never fires twice.

The async shell (an async context manager) owns the task that sleeps until the next due
time (at most :data:`MAX_SLEEP_S`, so a changed system clock is noticed), runs the handler
of each fired occurrence by the job's ``kind`` (a table of handlers) and then marks it
``fired``. An occurrence claimed whose handler did not finish (the hub stopped in between)
runs again at start: handlers are idempotent by (job, occurrence) — their reply and
timeline ids derive from it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from types import TracebackType
from typing import Any

from hub.schedule import recurrence
from hub.schedule.clock import Clock, SystemClock
from hub.schedule.errors import ScheduleError
from hub.schedule.store import (
    CANCELLED,
    DONE,
    FIRING,
    MISSED,
    PAUSED,
    PENDING,
    Claimed,
    Job,
    JobStore,
    Occurrence,
)
from sync.tasks import TaskOwner, woken

log = logging.getLogger(__name__)

MAX_SLEEP_S = 30.0
"""the loop looks at the clock at least this often"""
BATCH = 512
"""jobs claimed per transaction"""
MAX_MISSED = 1000
"""occurrences of one recurring job recorded missed in one pass at most"""
DEFAULT_GRACE_MS = 15 * 60 * 1000

Handler = Callable[[Occurrence], Awaitable[None]]


def next_occurrence(job: Job, after_ms: int) -> int | None:
    """The job's first occurrence strictly after ``after_ms`` (one-shot: none)."""
    if not job.recurring:
        return None
    return recurrence.next_after(job.rule, job.start_ms, job.tz, after_ms)


class Scheduler:
    """``handlers``: kind → what runs a fired occurrence; ``on_missed``: kind → what reports
    a missed one (optional); ``clock``: wall milliseconds (tests move a
    :class:`~hub.schedule.clock.TestClock`)."""

    def __init__(
        self,
        store: JobStore,
        *,
        handlers: Mapping[str, Handler] | None = None,
        on_missed: Mapping[str, Handler] | None = None,
        clock: Clock | None = None,
        tz: str = "",
    ) -> None:
        self.store = store
        self.handlers: dict[str, Handler] = dict(handlers or {})
        self.on_missed: dict[str, Handler] = dict(on_missed or {})
        self.clock: Clock = clock or SystemClock()
        self.tz = tz
        """the owner's time zone (IANA name; "" = the hub's local zone)"""
        self._wake = asyncio.Event()
        self._tasks: TaskOwner | None = None
        self._unlisten: Callable[[], None] | None = None
        self.fired = asyncio.Event()
        """set after every pass that ran a handler (tests wait on it)"""
        self.stats = {"fired": 0, "missed": 0, "failed": 0}
        self.lateness_ms: list[int] = []
        """how late each occurrence fired (the bench reads it)"""

    def now_ms(self) -> int:
        return self.clock.now_ms()

    # -------------------------------------------------------------- jobs
    def add(
        self,
        job_id: str,
        kind: str,
        spec: Mapping[str, Any],
        *,
        at_ms: int | None = None,
        rule: str = "",
        start_ms: int | None = None,
        tz: str | None = None,
        grace_ms: int = DEFAULT_GRACE_MS,
    ) -> Job:
        """Keep a job: one-shot at ``at_ms``, or recurring by ``rule`` from ``start_ms``
        (default now) in ``tz`` (default the owner's). The same id again returns the kept
        job (a redelivered request adds nothing)."""
        now = self.now_ms()
        zone = self.tz if tz is None else tz
        if rule:
            recurrence.check(rule, zone)
            start = now if start_ms is None else start_ms
            first = recurrence.first_at_or_after(rule, start, zone, max(start, now))
            if first is None:
                raise ScheduleError("schedule.rule_invalid", rule=rule, reason="no occurrence")
        else:
            if at_ms is None:
                raise ScheduleError("schedule.rule_invalid", rule="", reason="no time")
            start = first = at_ms
        job = Job(
            id=job_id,
            kind=kind,
            spec=dict(spec),
            start_ms=start,
            next_ms=first,
            grace_ms=grace_ms,
            rule=rule,
            tz=zone,
            state=PENDING,
            created_ms=now,
            updated_ms=now,
        )
        kept = self.store.put(job)
        self.poke()
        return kept

    def cancel(self, job_id: str) -> Job | None:
        job = self.store.get(job_id)
        if job is None or not job.active:
            return None
        job = self.store.set(job, state=CANCELLED, next_ms=None, updated_ms=self.now_ms())
        self.poke()
        return job

    def pause(self, job_id: str) -> Job | None:
        """A pending one-shot job stops counting down (its time left is kept)."""
        job = self.store.get(job_id)
        if job is None or job.state != PENDING or job.next_ms is None:
            return None
        now = self.now_ms()
        left = max(0, job.next_ms - now)
        job = self.store.set(job, state=PAUSED, next_ms=None, remaining_ms=left, updated_ms=now)
        self.poke()
        return job

    def resume(self, job_id: str) -> Job | None:
        job = self.store.get(job_id)
        if job is None or job.state != PAUSED:
            return None
        now = self.now_ms()
        due = now + (job.remaining_ms or 0)
        job = self.store.set(
            job, state=PENDING, next_ms=due, start_ms=due, remaining_ms=None, updated_ms=now
        )
        self.poke()
        return job

    def extend(self, job_id: str, ms: int) -> Job | None:
        """Move a one-shot job ``ms`` later (paused: more time left)."""
        job = self.store.get(job_id)
        if job is None or not job.active or job.recurring:
            return None
        now = self.now_ms()
        if job.state == PAUSED:
            job = self.store.set(job, remaining_ms=(job.remaining_ms or 0) + ms, updated_ms=now)
        else:
            due = (job.next_ms or now) + ms
            job = self.store.set(job, next_ms=due, start_ms=due, updated_ms=now)
        self.poke()
        return job

    def reschedule(
        self,
        job_id: str,
        *,
        at_ms: int | None = None,
        rule: str = "",
        spec: Mapping[str, Any] | None = None,
    ) -> Job | None:
        """An active job due at another time: one-shot at ``at_ms``, or recurring by ``rule``
        from now (``spec``: its new spec); ``None`` if it is no longer active."""
        job = self.store.get(job_id)
        if job is None or not job.active:
            return None
        now = self.now_ms()
        if rule:
            recurrence.check(rule, job.tz)
            first = recurrence.first_at_or_after(rule, now, job.tz, now)
            if first is None:
                raise ScheduleError("schedule.rule_invalid", rule=rule, reason="no occurrence")
            start, nxt = now, first
        elif at_ms is not None:
            start = nxt = at_ms
        else:
            raise ScheduleError("schedule.rule_invalid", rule="", reason="no time")
        job = self.store.set(
            job,
            rule=rule,
            start_ms=start,
            next_ms=nxt,
            state=PENDING,
            remaining_ms=None,
            spec=dict(spec if spec is not None else job.spec),
            updated_ms=now,
        )
        self.poke()
        return job

    def remaining_ms(self, job: Job) -> int:
        if job.state == PAUSED:
            return job.remaining_ms or 0
        return max(0, (job.next_ms or 0) - self.now_ms())

    # -------------------------------------------------------------- pure core
    def claim_due(self, now_ms: int | None = None) -> Claimed:
        """Claim every occurrence due at ``now_ms`` (see the module doc)."""
        now = self.now_ms() if now_ms is None else now_ms
        out = Claimed()
        while True:
            with self.store.transaction():
                jobs = self.store.due(now, BATCH)
                for job in jobs:
                    self._claim(job, now, out)
            if len(jobs) < BATCH:
                return out

    def _claim(self, job: Job, now: int, out: Claimed) -> None:
        assert job.next_ms is not None
        due = [job.next_ms]
        nxt = next_occurrence(job, job.next_ms)
        while nxt is not None and nxt <= now:
            due.append(nxt)
            if len(due) > MAX_MISSED:  # keep the last ones only
                due = due[-MAX_MISSED:]
            nxt = next_occurrence(job, nxt)
        *earlier, last = due
        for occ in earlier:
            if self.store.claim(job, occ, MISSED, now - occ, now):
                out.missed.append(Occurrence(job, occ, now - occ, MISSED))
        late = now - last
        state = FIRING if late <= job.grace_ms else MISSED
        if self.store.claim(job, last, state, late, now):
            (out.fire if state == FIRING else out.missed).append(Occurrence(job, last, late, state))
        moved = replace(
            job, next_ms=nxt, state=PENDING if nxt is not None else DONE, updated_ms=now
        )
        self.store.write(moved)

    # -------------------------------------------------------------- async shell
    async def __aenter__(self) -> Scheduler:
        self._unlisten = self.clock.listen(self.poke)
        self._tasks = TaskOwner("scheduler")
        self._tasks.spawn(self._run(), "due")
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        if self._tasks is not None:
            await self._tasks.close()
            self._tasks = None

    def poke(self) -> None:
        """Look at the due jobs now (a job was added or changed, or the clock jumped)."""
        self._wake.set()

    async def run_due(self) -> int:
        """One pass: claim what is due and run its handlers (awaited); returns how many
        fired. The loop runs the same pass without waiting for the handlers."""
        claimed = await self._claim_pass()
        await self._run_fired(claimed.fire)
        return len(claimed.fire)

    async def _claim_pass(self) -> Claimed:
        claimed = self.claim_due()
        for occ in claimed.missed:
            self.stats["missed"] += 1
            log.info(
                "job %s (%s): occurrence %d missed (%.0f s late)",
                occ.job.id,
                occ.job.kind,
                occ.occurrence_ms,
                occ.late_ms / 1000,
            )
            report = self.on_missed.get(occ.job.kind)
            if report is not None:
                await self._call(report, occ)
        return claimed

    async def _run_fired(self, fire: list[Occurrence]) -> None:
        """The handlers of one pass, concurrently (a slow one — a device that is away —
        holds up no other); those that finished are marked ``fired`` in one transaction."""
        if not fire:
            return
        ok = await asyncio.gather(*(self._fire(occ) for occ in fire))
        done = [(o.job.id, o.occurrence_ms) for o, good in zip(fire, ok, strict=True) if good]
        self.store.finish_many(done, self.now_ms())
        self.fired.set()

    async def _fire(self, occ: Occurrence) -> bool:
        """Run the occurrence's handler; ``False`` if it failed (it stays ``firing`` and
        runs again at the next start)."""
        handler = self.handlers.get(occ.job.kind)
        if handler is None:
            log.warning("job %s: no handler for kind %s", occ.job.id, occ.job.kind)
        elif not await self._call(handler, occ):
            return False
        self.stats["fired"] += 1
        self.lateness_ms.append(occ.late_ms)
        log.info("job %s (%s) fired %d ms late", occ.job.id, occ.job.kind, occ.late_ms)
        return True

    async def _call(self, handler: Handler, occ: Occurrence) -> bool:
        try:
            await handler(occ)
        except Exception:
            self.stats["failed"] += 1
            log.exception("job %s: handler failed", occ.job.id)
            return False
        return True

    async def _run(self) -> None:
        again = list(self.store.unfinished())  # cut off by a stop: once more
        for occ in again:
            log.info(
                "job %s: occurrence %d cut off by a stop, fired again",
                occ.job.id,
                occ.occurrence_ms,
            )
        await self._run_fired(again)
        assert self._tasks is not None
        while True:
            self._wake.clear()
            claimed = await self._claim_pass()
            if claimed.fire:  # the loop goes on while the handlers run
                self._tasks.spawn(self._run_fired(claimed.fire), "fire")
            nxt = self.store.next_due_ms()
            most = min(MAX_SLEEP_S, self.clock.max_sleep_s)
            timeout = most
            if nxt is not None:
                timeout = min(most, max(0.0, (nxt - self.now_ms()) / 1000))
            if timeout > 0:
                await woken(self._wake, timeout)
