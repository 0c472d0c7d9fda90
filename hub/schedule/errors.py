"""The schedule package's exception root."""

from __future__ import annotations

from protos.errors import YimiError


class ScheduleError(YimiError):
    """A job the scheduler cannot keep: a bad recurrence rule, an unknown time zone."""
