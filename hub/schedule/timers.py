"""Timers: one-shot jobs of kind ``timer``, local to the device that asked.

A timer rings on the device whose request set it (``spec.device``), in the request's
language (``spec.lang``); "the timer" means this device's timers only. Several timers may
run at once, told apart by their names ("the pizza timer"); an unnamed request applies to
the device's only timer, else the answer names the ones there are. The job id is the
request's id, so a redelivered request sets no second timer.
"""

from __future__ import annotations

from dataclasses import dataclass

from hub.schedule.scheduler import Scheduler
from hub.schedule.store import PAUSED, Job

TIMER = "timer"
GRACE_MS = 10 * 60 * 1000
"""a timer that came due while the hub was down still rings within this"""
MAX_TIMER_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class TimerView:
    id: str
    name: str
    duration_ms: int
    remaining_ms: int
    paused: bool


def timer_name(name: object) -> str:
    return " ".join(str(name or "").casefold().split())[:60]


class TimerDesk:
    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def view(self, job: Job) -> TimerView:
        return TimerView(
            job.id,
            str(job.spec.get("name", "")),
            int(job.spec.get("duration_ms", 0)),
            self.scheduler.remaining_ms(job),
            job.state == PAUSED,
        )

    def start(
        self, request_id: str, device: str, duration_ms: int, *, name: str, lang: str, trace: str
    ) -> TimerView:
        duration_ms = max(1000, min(duration_ms, MAX_TIMER_MS))
        job = self.scheduler.add(
            f"timer-{request_id}",
            TIMER,
            {
                "device": device,
                "name": timer_name(name),
                "duration_ms": duration_ms,
                "lang": lang,
                "trace_id": trace,
            },
            at_ms=self.scheduler.now_ms() + duration_ms,
            grace_ms=GRACE_MS,
        )
        return self.view(job)

    def on(self, device: str, name: str = "") -> list[TimerView]:
        """The active timers of ``device`` (named ``name``, if given), soonest first."""
        want = timer_name(name)
        jobs = [j for j in self.scheduler.store.jobs(TIMER) if j.spec.get("device") == device]
        views = [self.view(j) for j in jobs]
        if want:
            views = [v for v in views if v.name == want]
        return sorted(views, key=lambda v: v.remaining_ms)

    def cancel(self, view: TimerView) -> None:
        self.scheduler.cancel(view.id)

    def pause(self, view: TimerView) -> TimerView | None:
        job = self.scheduler.pause(view.id)
        return None if job is None else self.view(job)

    def resume(self, view: TimerView) -> TimerView | None:
        job = self.scheduler.resume(view.id)
        return None if job is None else self.view(job)

    def extend(self, view: TimerView, ms: int) -> TimerView | None:
        """More (``ms`` > 0) or less time; less than none rings at once."""
        if ms < 0:
            ms = -min(-ms, view.remaining_ms)
        job = self.scheduler.extend(view.id, ms)
        return None if job is None else self.view(job)
