"""The hub's durable scheduler (issue 17): jobs, timers, reminders, scheduled runs.

- :mod:`hub.schedule.scheduler`: :class:`Scheduler`, one-shot and recurring jobs in
  ``HOME/schedule.db``, idempotent per (job, occurrence), restart-safe, with an explicit
  clock (:mod:`hub.schedule.clock`);
- :mod:`hub.schedule.recurrence`: RRULEs (``dateutil``) in the owner's time zone;
- :mod:`hub.schedule.timers`: the timers of a device (start, cancel, pause, resume, add
  time, status);
- :mod:`hub.schedule.reminders`: the owner's reminders (set, moved, cancelled) and
  scheduled brain runs;
- :mod:`hub.schedule.watches`: observe-only watches (a home device's state polled with
  backoff, timeline entries pushed), told once per occurrence.

Reading a time from words ("at five", "明天早上八点", "every weekday at 7:30") is the
brain's (:mod:`hub.brain.when`); what a due job says and to whom is the turns' (rings and
reminders: :mod:`hub.turns.later`, notifications with fallback: :mod:`hub.turns.notify`,
scheduled runs: :meth:`hub.turns.answering.Turns.run_scheduled`, the morning briefing:
:mod:`hub.turns.briefing`, watches: :mod:`hub.turns.watching`). It never imports the
brain, the turns, the mesh or the gateway (an import-linter contract): the daemon (the
composition root) hands it those handlers by job kind.
"""

from hub.schedule.clock import Clock, FileClock, SystemClock, TestClock, clock_from_env
from hub.schedule.errors import ScheduleError
from hub.schedule.scheduler import Scheduler
from hub.schedule.store import Job, JobStore, Occurrence

__all__ = [
    "Clock",
    "FileClock",
    "Job",
    "JobStore",
    "Occurrence",
    "ScheduleError",
    "Scheduler",
    "SystemClock",
    "TestClock",
    "clock_from_env",
]
