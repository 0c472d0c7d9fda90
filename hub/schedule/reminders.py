"""Reminders: one-shot or recurring jobs of kind ``reminder``, the owner's (not a room's).

A reminder is said on the device that set it and put on the timeline, so every device shows
it when it comes due (the daemon's handler, :mod:`hub.turns.later`). The job id is the
request's id (a redelivered request sets no second reminder); ``spec.when`` keeps how the
time was said back, for listing.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from hub.schedule import recurrence
from hub.schedule.scheduler import Scheduler
from hub.schedule.store import Job

REMINDER = "reminder"
RUN = "run"
"""a scheduled brain run: ``spec.command`` run as a turn with a scheduled scope"""
GRACE_MS = 60 * 60 * 1000
"""a reminder that came due while the hub was down is still said within this"""


@dataclass(frozen=True)
class ReminderView:
    id: str
    what: str
    when: str
    """as it was said back when it was set"""
    next_ms: int | None
    recurring: bool


class ReminderDesk:
    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def now(self) -> dt.datetime:
        """The scheduler's time, in the owner's zone."""
        return recurrence.local(self.scheduler.now_ms(), self.scheduler.tz)

    @staticmethod
    def view(job: Job) -> ReminderView:
        return ReminderView(
            job.id,
            str(job.spec.get("what", "")),
            str(job.spec.get("when", "")),
            job.next_ms,
            job.recurring,
        )

    def add(
        self,
        request_id: str,
        *,
        device: str,
        what: str,
        when: str,
        lang: str,
        trace: str,
        at: dt.datetime | None = None,
        rule: str = "",
    ) -> ReminderView:
        spec = {"device": device, "what": what[:300], "when": when, "lang": lang, "trace_id": trace}
        job = self.scheduler.add(
            f"reminder-{request_id}",
            REMINDER,
            spec,
            at_ms=None if at is None else recurrence.to_ms(at),
            rule=rule,
            grace_ms=GRACE_MS,
        )
        return self.view(job)

    def add_run(
        self,
        request_id: str,
        *,
        device: str,
        command: str,
        when: str,
        lang: str,
        trace: str,
        rule: str,
    ) -> Job:
        spec = {"device": device, "command": command[:500], "when": when, "lang": lang}
        return self.scheduler.add(
            f"run-{request_id}", RUN, {**spec, "trace_id": trace}, rule=rule, grace_ms=GRACE_MS
        )

    def all(self, what: str = "") -> list[ReminderView]:
        """Active reminders, soonest first (their words containing ``what``, if given)."""
        views = [self.view(j) for j in self.scheduler.store.jobs(REMINDER, active=True)]
        want = what.casefold().strip()
        if want:
            views = [v for v in views if want in v.what.casefold() or v.what.casefold() in want]
        return views

    def get(self, reminder_id: str) -> ReminderView | None:
        job = self.scheduler.store.get(reminder_id)
        if job is None or job.kind != REMINDER or not job.active:
            return None
        return self.view(job)

    def cancel(self, view: ReminderView) -> None:
        self.scheduler.cancel(view.id)

    def at(self, view: ReminderView) -> dt.datetime | None:
        """When ``view`` is next due, in the owner's zone."""
        return None if view.next_ms is None else recurrence.local(view.next_ms, self.scheduler.tz)

    def move(
        self, view: ReminderView, *, when: str, at: dt.datetime | None = None, rule: str = ""
    ) -> ReminderView | None:
        """``view`` due at ``at`` (one-shot) or by ``rule`` (recurring) instead; ``when``:
        the new time as said back. ``None`` if it is no longer active."""
        job = self.scheduler.store.get(view.id)
        if job is None:
            return None
        moved = self.scheduler.reschedule(
            view.id,
            at_ms=None if at is None else recurrence.to_ms(at),
            rule=rule,
            spec={**job.spec, "when": when},
        )
        return None if moved is None else self.view(moved)
