"""The hub's durable scheduler (issue 17): jobs, timers, reminders, scheduled runs.

- :mod:`hub.schedule.scheduler`: :class:`Scheduler`, one-shot and recurring jobs in
  ``HOME/schedule.db``, idempotent per (job, occurrence), restart-safe, with an explicit
  clock (:mod:`hub.schedule.clock`);
- :mod:`hub.schedule.recurrence`: RRULEs (``dateutil``) in the owner's time zone;
- :mod:`hub.schedule.timers`: the timers of a device (start, cancel, pause, resume, add
  time, status);
- :mod:`hub.schedule.when`: reminder times in English and Chinese ("at five", "明天早上八点",
  "every weekday at 7:30") as a time or a rule.

It never imports the brain, the turns or the mesh: the daemon (the composition root) hands
it the callables that deliver a ring or a reminder.
"""

from hub.schedule.clock import Clock, SystemClock, TestClock
from hub.schedule.errors import ScheduleError
from hub.schedule.scheduler import Scheduler
from hub.schedule.store import Job, JobStore, Occurrence

__all__ = [
    "Clock",
    "Job",
    "JobStore",
    "Occurrence",
    "ScheduleError",
    "Scheduler",
    "SystemClock",
    "TestClock",
]
