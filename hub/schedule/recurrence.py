"""Recurrence rules (RFC 5545 ``RRULE``, by ``dateutil.rrule``) in the owner's time zone.

A rule is kept as its text (``FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=7;BYMINUTE=30``) with
its start and time zone name; occurrences are computed in local wall time and only then
turned into epoch milliseconds, so "every day at 8" stays at 8 across a daylight-saving
change. A local time that does not exist (the skipped spring hour) is taken as the same
wall time after the change (``zoneinfo``'s ``fold=0``), an ambiguous one as its first
instance.
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from functools import lru_cache

from dateutil import rrule

from hub.schedule.errors import ScheduleError

MAX_RULE_CHARS = 400


@lru_cache(maxsize=64)
def zone(name: str) -> dt.tzinfo:
    """The time zone ``name`` (IANA); ``""``: the hub's local zone."""
    if not name:
        from dateutil import tz

        local = tz.tzlocal()
        return local
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleError("schedule.tz_unknown", name=name, reason=exc) from None


def local(ms: int, tz_name: str) -> dt.datetime:
    """Epoch ``ms`` as an aware local datetime in ``tz_name``."""
    return dt.datetime.fromtimestamp(ms / 1000, zone(tz_name))


def to_ms(when: dt.datetime) -> int:
    return int(when.timestamp() * 1000)


@lru_cache(maxsize=4096)
def _parsed(rule: str, start_ms: int, tz_name: str) -> rrule.rrule:
    start = local(start_ms, tz_name).replace(microsecond=0)
    try:
        parsed = rrule.rrulestr(rule, dtstart=start, cache=False)
    except (ValueError, TypeError) as exc:
        raise ScheduleError("schedule.rule_invalid", rule=rule, reason=exc) from None
    if not isinstance(parsed, rrule.rrule):
        raise ScheduleError("schedule.rule_invalid", rule=rule, reason="a set, not one rule")
    return parsed


def check(rule: str, tz_name: str) -> None:
    """Raise :class:`ScheduleError` unless ``rule`` is a usable recurrence in ``tz_name``."""
    if not rule or len(rule) > MAX_RULE_CHARS:
        raise ScheduleError("schedule.rule_invalid", rule=rule[:80], reason="empty or too long")
    zone(tz_name)
    _parsed(rule, 0, tz_name)


def next_after(rule: str, start_ms: int, tz_name: str, after_ms: int) -> int | None:
    """The first occurrence of ``rule`` (started at ``start_ms``) strictly after
    ``after_ms``; ``None`` when the rule has ended."""
    parsed = _parsed(rule, start_ms, tz_name)
    found = parsed.after(local(after_ms, tz_name), inc=False)
    if found is None:
        return None
    at = to_ms(found)
    if at <= after_ms:  # the wall time of a DST fold maps back: step past it
        found = parsed.after(found, inc=False)
        return None if found is None else to_ms(found)
    return at


def first_at_or_after(rule: str, start_ms: int, tz_name: str, at_ms: int) -> int | None:
    """The first occurrence at ``at_ms`` or later."""
    return next_after(rule, start_ms, tz_name, at_ms - 1)


WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")


def at_time(rule: str, hour: int, minute: int) -> str:
    """``rule`` at ``hour:minute`` instead (its days unchanged)."""
    parts = [p for p in rule.split(";") if p and not re.match(r"BY(HOUR|MINUTE|SECOND)=", p)]
    return ";".join([*parts, f"BYHOUR={hour}", f"BYMINUTE={minute}", "BYSECOND=0"])


def days_of(rule: str) -> tuple[int, ...]:
    """The weekdays (0 = Monday) of a weekly ``rule``; ``()`` for every day."""
    m = re.search(r"BYDAY=([A-Z,]+)", rule)
    if m is None:
        return ()
    return tuple(WEEKDAYS.index(d) for d in m.group(1).split(",") if d in WEEKDAYS)
