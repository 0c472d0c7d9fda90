"""When a reminder is due, from the words of the request (English and Chinese).

:func:`parse` finds one time expression in a reminder's text and returns a :class:`When`:
a one-shot local time ("at five", "tomorrow morning at 8", "in 10 minutes", "明天早上八点",
"十分钟后") or a recurrence rule ("every weekday at 7:30", "每天早上八点", "每周一上午九点"),
with the words left over (what to be reminded of). The words are only *read* here; all date
arithmetic is ``dateutil``'s (``relativedelta`` for "tomorrow" and "in 10 minutes", an
``RRULE`` for recurrences, computed by :mod:`hub.schedule.recurrence` in the owner's zone).

An hour without am/pm or a part of the day is the next one to come ("at five" at 3 pm is
5 pm; at 6 pm it is 5 am tomorrow); with a day named ("tomorrow at five") 1–6 are afternoon
hours and 7–11 morning ones. Nothing that reads as a time → ``None``: the brain asks when.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from dateutil.relativedelta import FR, MO, SA, SU, TH, TU, WE, relativedelta

from hub.brain.intents.numerals import en_words_to_number, zh_to_int

WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
_RD = (MO, TU, WE, TH, FR, SA, SU)
EN_DAYS = {
    "monday": 0,
    "tuesday": 1,
    "wednesday": 2,
    "thursday": 3,
    "friday": 4,
    "saturday": 5,
    "sunday": 6,
}
ZH_DAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
PART_HOURS = {"morning": 8, "afternoon": 15, "evening": 19, "night": 21, "noon": 12}
"""the hour of a part of the day named without a time"""
DEFAULT_HOUR = 9
PM_PARTS = ("afternoon", "evening", "night", "tonight")
ZH_PARTS = {
    "凌晨": "early",
    "早上": "morning",
    "早晨": "morning",
    "上午": "morning",
    "中午": "noon",
    "下午": "afternoon",
    "傍晚": "evening",
    "晚上": "evening",
    "今晚": "evening",
    "夜里": "night",
}


@dataclass(frozen=True)
class When:
    at: dt.datetime | None
    """a one-shot reminder's local time"""
    rule: str
    """a recurring reminder's RRULE ("" for a one-shot one)"""
    rest: str
    """the words that are not the time: what to be reminded of"""
    days: tuple[int, ...] = ()
    """a weekly rule's weekdays (0 = Monday); () for daily"""
    hour: int = 0
    minute: int = 0


@dataclass
class _Found:
    days: list[int] | None = None
    """recurring weekdays ([] = every day)"""
    day_offset: int | None = None
    weekday: int | None = None
    hour: int | None = None
    minute: int = 0
    part: str = ""
    relative: relativedelta | None = None


def read_number(word: str) -> int | None:
    if word.isdigit():
        return int(word)
    n = zh_to_int(word)
    if n is not None:
        return n
    v = en_words_to_number(word)
    return None if v is None else int(v)


# ---------------------------------------------------------------- English
_EN_NUM = (
    r"(?:\d{1,2}|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
    r"twenty|thirty|forty|fifty|fifteen|forty[- ]five)"
)
_EN_REL = re.compile(
    r"\bin\s+(an?|one|half an|\d+|[a-z]+(?:[- ][a-z]+)?)\s+(second|minute|hour|day|week)s?\b"
)
_EN_EVERY = re.compile(
    r"\b(?:every\s+(day|morning|evening|night|weekday|weekend|week|"
    r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
    r"(?:\s*(?:,|and)\s*(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday))*)"
    r"|(daily)|on\s+(weekdays|weekends))\b"
)
_EN_TIME = re.compile(
    r"\b(?:at\s+)?(?:(noon|midday|midnight)|"
    rf"({_EN_NUM})(?::(\d{{2}})|\s+({_EN_NUM}))?\s*(?:o'?clock)?\s*(am|pm|a\.m\.|p\.m\.)?)"
    r"(?=\W|$)"
)
_EN_DAY = re.compile(
    r"\b(?:(today|tonight|tomorrow)|(?:on\s+|this\s+|next\s+)?"
    r"(monday|tuesday|wednesday|thursday|friday|saturday|sunday))\b"
)
_EN_PART = re.compile(r"\b(?:in the|this|tomorrow)?\s*(morning|afternoon|evening|night)\b")


def _cut(text: str, m: re.Match[str]) -> str:
    return text[: m.start()] + " " + text[m.end() :]


class _Text:
    """The request's words, matched lower-case, cut from the original (its case kept)."""

    def __init__(self, text: str) -> None:
        self.orig = " " + text + " "
        self.low = self.orig.lower()
        if len(self.low) != len(self.orig):
            self.orig = self.low

    def cut(self, m: re.Match[str]) -> None:
        self.orig = _cut(self.orig, m)
        self.low = _cut(self.low, m)


def _parse_en(text: str, found: _Found) -> str:
    words = _Text(text)
    _read_en(words, found)
    return words.orig


def _read_en(words: _Text, found: _Found) -> None:
    t = words.low
    m = _EN_REL.search(t)
    if m:
        n_word, unit = m.group(1), m.group(2)
        n = 1 if n_word in ("a", "an", "one") else read_number(n_word.replace("-", " "))
        if n_word == "half an":
            found.relative = relativedelta(minutes=30)
        elif n is not None:
            found.relative = relativedelta(**{unit + "s": n})  # type: ignore[arg-type]
        if found.relative is not None:
            words.cut(m)
            return
    m = _EN_EVERY.search(t)
    if m:
        what = m.group(1) or m.group(2) or m.group(3) or ""
        if what in ("weekday", "weekdays"):
            found.days = [0, 1, 2, 3, 4]
        elif what in ("weekend", "weekends"):
            found.days = [5, 6]
        elif what in ("day", "daily", "week"):
            found.days = []
        elif what in ("morning", "evening", "night"):
            found.days, found.part = [], what
        else:
            found.days = [EN_DAYS[d] for d in re.findall(r"[a-z]+day", what) if d in EN_DAYS]
        words.cut(m)
        t = words.low
    m = _EN_DAY.search(t)
    if m and found.days is None:
        word = m.group(1) or ""
        if word == "tomorrow":
            found.day_offset = 1
        elif word in ("today", "tonight"):
            found.day_offset = 0
            found.part = "evening" if word == "tonight" else found.part
        else:
            found.weekday = EN_DAYS[m.group(2)]
        words.cut(m)
        t = words.low
    m = _EN_PART.search(t)
    if m:
        found.part = m.group(1)
        words.cut(m)
        t = words.low
    for m in _EN_TIME.finditer(t):
        special, h, mm, mm_word, ampm = m.groups()
        if special:
            found.hour = 0 if special == "midnight" else 12
        else:
            hour = read_number(h)
            if hour is None or hour > 23:
                continue
            if not m.group(0).lstrip().startswith("at") and not (mm or ampm):
                continue  # a bare number is not a time ("call 3 people")
            minute = int(mm) if mm else (read_number(mm_word.replace("-", " ")) if mm_word else 0)
            if minute is None or minute > 59:
                continue
            found.hour, found.minute = hour, minute
            if ampm:
                pm = ampm.startswith("p")
                found.hour = hour % 12 + (12 if pm else 0)
                found.part = found.part or ("afternoon" if pm else "morning")
        words.cut(m)
        t = words.low
        break


# ---------------------------------------------------------------- Chinese
_ZH_N = r"[零〇一二两三四五六七八九十百\d]+"
_ZH_REL = re.compile(rf"({_ZH_N}|半)(个)?(秒钟|秒|分钟|分|小时|钟头|天)(以后|之后|后)")
_ZH_EVERY = re.compile(
    r"(每天|每日|天天|每个?工作日|工作日|每个?周末|"
    r"(?:每个?(?:周|星期|礼拜))([一二三四五六日天](?:[、和,，]?[一二三四五六日天])*))"
)
_ZH_DAY = re.compile(
    r"(今天|明天|后天|今晚|明晚|(?:这个?|下个?)?(?:周|星期|礼拜)([一二三四五六日天]))"
)
_ZH_PART = re.compile("|".join(ZH_PARTS))
_ZH_TIME = re.compile(
    rf"({_ZH_N})(?:点|[:：](\d{{2}}))(?:(半)|(一刻)|(三刻)|(?:({_ZH_N})分?))?(?:钟)?"
)


def _parse_zh(text: str, found: _Found) -> str:
    t = text
    m = _ZH_REL.search(t)
    if m:
        n_word, half, unit = m.group(1), m.group(2), m.group(3)
        n = read_number(n_word) if n_word != "半" else None
        units = {"秒钟": "seconds", "秒": "seconds", "分钟": "minutes", "分": "minutes"}
        key = units.get(unit, "days" if unit == "天" else "hours")
        if n_word == "半":
            found.relative = relativedelta(minutes=30) if key == "hours" else None
        elif n is not None:
            found.relative = relativedelta(**{key: n})  # type: ignore[arg-type]
        del half
        if found.relative is not None:
            return _cut(t, m)
    m = _ZH_EVERY.search(t)
    if m:
        word = m.group(1)
        if "工作日" in word:
            found.days = [0, 1, 2, 3, 4]
        elif "周末" in word:
            found.days = [5, 6]
        elif m.group(2):
            found.days = sorted({ZH_DAYS[c] for c in m.group(2) if c in ZH_DAYS})
        else:
            found.days = []
        t = _cut(t, m)
    m = _ZH_DAY.search(t)
    if m and found.days is None:
        word = m.group(1)
        if word in ("今天", "今晚"):
            found.day_offset = 0
            if word == "今晚":
                found.part = "evening"
        elif word in ("明天", "明晚"):
            found.day_offset = 1
            if word == "明晚":
                found.part = "evening"
        elif word == "后天":
            found.day_offset = 2
        else:
            found.weekday = ZH_DAYS[m.group(2)]
        t = _cut(t, m)
    m = _ZH_PART.search(t)
    if m:
        found.part = ZH_PARTS[m.group(0)]
        t = _cut(t, m)
    m = _ZH_TIME.search(t)
    if m:
        h, colon, half, q1, q3, mins = m.groups()
        hour = read_number(h)
        minute = int(colon) if colon else 30 if half else 15 if q1 else 45 if q3 else 0
        if mins:
            minute = read_number(mins) or 0
        if hour is not None and hour <= 24 and minute <= 59:
            found.hour, found.minute = hour % 24, minute
            t = _cut(t, m)
    return t


# ---------------------------------------------------------------- the time
def _hour24(hour: int, part: str) -> int | None:
    """An hour as said with a part of the day ("" when none was said: ``None``)."""
    if not part:
        return None
    if part in ("afternoon", "evening", "night", "tonight") and hour < 12:
        return hour + 12 if not (part == "night" and hour <= 3) else hour
    if part == "noon" and hour < 6:
        return hour + 12
    if part in ("morning", "early") and hour == 12:
        return 0
    return hour


def _tidy(rest: str, lang: str) -> str:
    rest = " ".join(rest.split())
    if lang == "zh":
        rest = rest.replace(" ", "").strip("，,。的在")
        return rest.removeprefix("提醒我").removeprefix("要")
    rest = re.sub(r"^(?:at|on|to|that|about)\s+", "", rest.strip(" ,."))
    rest = re.sub(r"\s+(?:at|on|to)$", "", rest)
    return rest.strip(" ,.")


def parse(text: str, lang: str, now: dt.datetime) -> When | None:
    """The time in ``text`` (see the module doc); ``now`` is aware, in the owner's zone."""
    found = _Found()
    rest = _parse_zh(text, found) if lang == "zh" else _parse_en(text, found)
    rest = _tidy(rest, lang)
    if found.relative is not None:
        return When((now + found.relative).replace(microsecond=0), "", rest)
    if found.days is None and found.day_offset is None and found.weekday is None:
        if found.hour is None:
            return None
    hour, minute = found.hour, found.minute
    if hour is None:
        hour, minute = PART_HOURS.get(found.part, DEFAULT_HOUR), 0
    else:
        said = _hour24(hour, found.part)
        if said is not None:
            hour = said
        elif hour <= 12 and (found.days is not None or found.day_offset or found.weekday):
            hour = hour + 12 if 1 <= hour <= 6 else hour  # "tomorrow at five": 5 pm
        elif hour < 12 and found.days is None:  # "at five": the next five to come
            start = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
            for later in (start, start + relativedelta(hours=12), start + relativedelta(days=1)):
                if later > now:
                    return When(later, "", rest, (), later.hour, later.minute)
    if found.days is not None:
        rule = f"FREQ=DAILY;BYHOUR={hour};BYMINUTE={minute};BYSECOND=0"
        if found.days:
            days = ",".join(WEEKDAYS[d] for d in found.days)
            rule = f"FREQ=WEEKLY;BYDAY={days};BYHOUR={hour};BYMINUTE={minute};BYSECOND=0"
        return When(None, rule, rest, tuple(found.days), hour, minute)
    base = now.replace(hour=hour % 24, minute=minute, second=0, microsecond=0)
    if found.day_offset is not None:
        at = base + relativedelta(days=found.day_offset)
    elif found.weekday is not None:
        at = base + relativedelta(weekday=_RD[found.weekday](+1))
        if at <= now:
            at = at + relativedelta(weeks=1)
    else:
        at = base if base > now else base + relativedelta(days=1)
    return When(at, "", rest, (), hour, minute)


_DAY_WORDS = re.compile(
    r"\b(today|tonight|tomorrow|monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    r"in|next|every|each|daily)\b|今天|明天|后天|今晚|周|星期|礼拜|后|每",
    re.IGNORECASE,
)


def parse_moved(text: str, lang: str, now: dt.datetime, was: dt.datetime | None) -> When | None:
    """The new time of a reminder due at ``was`` that is moved "to ``text``": a bare clock
    time ("to 6", "改到六点") is the next one after its old time (the same evening, not
    this morning); a time with a day or a delay ("to tomorrow at 6", "in an hour") is read
    from ``now``."""
    if lang != "zh" and re.fullmatch(r"\s*\d{1,2}([:.]\d{2})?\s*(am|pm|a\.m\.|p\.m\.)?\s*", text):
        text = f"at {text}"
    if was is None or was <= now or _DAY_WORDS.search(text):
        return parse(text, lang, now)
    return parse(text, lang, was)
