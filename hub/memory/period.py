"""When a recall question is about: past time phrases in English and Chinese.

:func:`past_period` finds one phrase that names a past stretch of time in a question
("yesterday", "last week", "on Tuesday", "3 days ago", "昨天", "上周", "周二", "三天前") and
returns the local :class:`Period` it means, with the rest of the question (what to search
for). Weekday names and spoken numbers are read as :mod:`hub.brain.when` reads them for
reminders; here they point back in time: a weekday named alone is the latest such day
before today ("on Tuesday" on a Thursday is two days ago, on a Tuesday a week ago), "last
week" is the calendar week before this one (Monday to Sunday), "last month" the calendar
month before this one. Nothing that reads as a past time → ``None``: recall is not narrowed.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass

from hub.brain.when import EN_DAYS, ZH_DAYS, read_number

DAY = dt.timedelta(days=1)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


@dataclass(frozen=True)
class Period:
    """A stretch of local time ``[start, end)`` and the question without its phrase
    (``rest``; empty when the question was only the phrase)."""

    start: dt.datetime
    end: dt.datetime
    rest: str
    phrase: str

    @property
    def start_ms(self) -> int:
        return int(self.start.timestamp() * 1000)

    @property
    def end_ms(self) -> int:
        return int(self.end.timestamp() * 1000)


def _midnight(now: dt.datetime, days_back: int = 0) -> dt.datetime:
    day = now.date() - dt.timedelta(days=days_back)
    return dt.datetime.combine(day, dt.time(), tzinfo=now.tzinfo)


def _days(now: dt.datetime, back: int, length: int = 1) -> tuple[dt.datetime, dt.datetime]:
    start = _midnight(now, back)
    return start, start + length * DAY


def _week(now: dt.datetime, weeks_back: int) -> tuple[dt.datetime, dt.datetime]:
    monday = _midnight(now, now.weekday() + 7 * weeks_back)
    end = monday + 7 * DAY
    return monday, min(end, now) if weeks_back == 0 else end


def _weekday(
    now: dt.datetime, weekday: int, *, weeks_back: int | None
) -> tuple[dt.datetime, dt.datetime]:
    """``weeks_back`` None: the latest such day before today; else that day of the week
    ``weeks_back`` weeks before this one."""
    if weeks_back is None:
        back = (now.weekday() - weekday) % 7 or 7
    else:
        back = now.weekday() - weekday + 7 * weeks_back
    return _days(now, back)


def _weekend(now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    saturday, _ = _weekday(now, 5, weeks_back=None)
    if now.weekday() == 6:  # on a Sunday "last weekend" is the one a week ago
        saturday -= 7 * DAY
    return saturday, saturday + 2 * DAY


def _month(now: dt.datetime, months_back: int) -> tuple[dt.datetime, dt.datetime]:
    first = dt.datetime(now.year, now.month, 1, tzinfo=now.tzinfo)
    if months_back == 0:
        return first, now
    prev_end = first
    prev_start = (first - DAY).replace(day=1)
    return prev_start, prev_end


Reader = Callable[[re.Match[str], dt.datetime], tuple[dt.datetime, dt.datetime] | None]

_PAST = re.compile(
    r"\b(?:said|say|told|tell|mentioned|mention|wrote|did|was|were|had|asked|talked|noted)\b"
    r"|说过|说的|说了|讲过|讲的|提过|提到|告诉过|问过|记过|聊过|聊的"
)
"""words that make a question about the past: a bare weekday or "this week" narrows only
with one of them ("what did I say on Tuesday", not "what class is on Tuesday")"""
_CLEARLY_PAST = re.compile(r"yesterday|last|ago|past|昨|前|上")
"""phrases that name the past by themselves ("last Tuesday", "上周二", "三天前")"""


def _count(word: str) -> int | None:
    if word in ("a", "an", "one"):
        return 1
    n = read_number(word.replace("-", " "))
    return n if n is not None and 0 < n <= 400 else None


def _ago(m: re.Match[str], now: dt.datetime) -> tuple[dt.datetime, dt.datetime] | None:
    n = _count(m.group("n"))
    if n is None:
        return None
    unit = m.group("unit")
    if unit.startswith(("week", "周", "星期", "礼拜")):
        return _week(now, n)
    return _days(now, n)


def _zh_weekday(m: re.Match[str], now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    which = m.group("which") or ""
    day = ZH_DAYS[m.group("day")]
    if which.startswith("上上"):
        return _weekday(now, day, weeks_back=2)
    if which.startswith("上"):
        return _weekday(now, day, weeks_back=1)
    if which in ("这", "这个", "本"):
        return _weekday(now, day, weeks_back=0)
    return _weekday(now, day, weeks_back=None)


_EN_DAY_NAMES = "|".join(EN_DAYS)
_EN_NUM = r"\d{1,3}|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
_WEEK = r"(?:周|星期|礼拜)"

# (pattern, reader), tried in order: longer phrases before the phrases inside them
_RULES: tuple[tuple[re.Pattern[str], Reader], ...] = (
    (re.compile(r"\bthe day before yesterday\b"), lambda m, now: _days(now, 2)),
    (re.compile(r"\b(?:yesterday|last night)\b"), lambda m, now: _days(now, 1)),
    (
        re.compile(r"\b(?:today|this morning|this afternoon|this evening|tonight|earlier today)\b"),
        lambda m, now: (_midnight(now), now),
    ),
    (re.compile(rf"\b(?P<n>{_EN_NUM}) (?P<unit>days?|weeks?) ago\b"), _ago),
    (
        re.compile(r"\b(?:last|this past) weekend\b|\bover the weekend\b"),
        lambda m, now: _weekend(now),
    ),
    (re.compile(r"\blast week\b|\ba week ago\b"), lambda m, now: _week(now, 1)),
    (re.compile(r"\bthis week\b"), lambda m, now: _week(now, 0)),
    (re.compile(r"\blast month\b"), lambda m, now: _month(now, 1)),
    (re.compile(r"\bthis month\b"), lambda m, now: _month(now, 0)),
    (
        re.compile(rf"\blast week(?:'s)? (?P<day>{_EN_DAY_NAMES})\b"),
        lambda m, now: _weekday(now, EN_DAYS[m.group("day")], weeks_back=1),
    ),
    (
        re.compile(rf"\b(?:on |last |this past )?(?P<day>{_EN_DAY_NAMES})\b"),
        lambda m, now: _weekday(now, EN_DAYS[m.group("day")], weeks_back=None),
    ),
    (re.compile(r"大前天"), lambda m, now: _days(now, 3)),
    (re.compile(r"前天"), lambda m, now: _days(now, 2)),
    (re.compile(r"昨天|昨晚|昨日|昨儿"), lambda m, now: _days(now, 1)),
    (
        re.compile(r"今天|今早|今晚|今日|今儿|今天早上|今天上午"),
        lambda m, now: (_midnight(now), now),
    ),
    (
        re.compile(
            rf"(?P<n>\d{{1,3}}|[一二两三四五六七八九十]+)(?:个)?(?P<unit>天|{_WEEK})(?:前|之前|以前)"
        ),
        _ago,
    ),
    (
        re.compile(rf"(?P<which>上上个?|上个?|这个?|本)?{_WEEK}(?P<day>[一二三四五六日天])"),
        _zh_weekday,
    ),
    (re.compile(rf"上个?{_WEEK}末"), lambda m, now: _weekend(now)),
    (re.compile(r"(?:上个?|这个?)?周末"), lambda m, now: _weekend(now)),
    (re.compile(rf"上上个?{_WEEK}"), lambda m, now: _week(now, 2)),
    (re.compile(rf"上个?{_WEEK}"), lambda m, now: _week(now, 1)),
    (re.compile(rf"(?:这个?|本){_WEEK}"), lambda m, now: _week(now, 0)),
    (re.compile(r"上个?月"), lambda m, now: _month(now, 1)),
    (re.compile(r"(?:这个|本)月"), lambda m, now: _month(now, 0)),
)


def past_period(text: str, now: dt.datetime) -> Period | None:
    """The past stretch of time ``text`` names (``now``: aware local time), or None."""
    if now.tzinfo is None:
        now = now.astimezone()
    low = text.lower()
    best: tuple[int, int, re.Match[str], Reader] | None = None
    for order, (pattern, reader) in enumerate(_RULES):
        m = pattern.search(low)
        if m is None:
            continue
        # the longest phrase wins ("last week's tuesday" over "last week"), then rule order
        key = (-(m.end() - m.start()), order)
        if best is None or key < (best[0], best[1]):
            best = (key[0], key[1], m, reader)
    if best is None:
        return None
    _, _, m, reader = best
    phrase = low[m.start() : m.end()]
    if not _CLEARLY_PAST.search(phrase) and not _PAST.search(low):
        return None  # "what class is on Tuesday", "孩子周末有什么课": not about the past
    span = reader(m, now)
    if span is None:
        return None
    start, end = span
    source = text if len(low) == len(text) else low
    left, right = source[: m.start()].strip(), source[m.end() :].strip()
    joint = "" if _CJK.match(left[-1:]) or _CJK.match(right[:1]) else " "
    rest = " ".join((left + joint + right).split())
    return Period(start, end, rest, source[m.start() : m.end()])
