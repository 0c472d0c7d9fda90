"""Reminders by voice through the rule-based brain and the scheduler (issue 17): absolute,
relative and recurring times in English and Chinese (read by ``hub.brain.when``), said back
in the request's language, listed and cancelled by voice; they come due at their times on a
test clock, in the owner's zone."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hub.brain.base import Turn, collect
from hub.brain.rules import RuleBrain
from hub.brain.tasks import TaskStore
from hub.brain.when import parse
from hub.schedule import JobStore, Occurrence, Scheduler, TestClock
from hub.schedule.reminders import ReminderDesk
from tests.brain_kit import BOOK, fake_gateway
from tests.waiting import poll

TZ = "Europe/London"
NOW = dt.datetime(2026, 12, 1, 15, 0, tzinfo=ZoneInfo(TZ))  # a Tuesday afternoon


def test_times_read_from_english_and_chinese_words() -> None:
    def at(text: str, lang: str = "en") -> tuple[str, str]:
        w = parse(text, lang, NOW)
        assert w is not None, text
        return (w.at.isoformat(timespec="minutes") if w.at else w.rule), w.rest

    assert at("at five to call mum") == ("2026-12-01T17:00+00:00", "call mum")
    assert at("call Dana at 5") == ("2026-12-01T17:00+00:00", "call Dana")
    assert at("at 2 to call") == ("2026-12-02T02:00+00:00", "call")
    assert at("tomorrow at five to call") == ("2026-12-02T17:00+00:00", "call")
    assert at("tomorrow morning at 8 to water the plants") == (
        "2026-12-02T08:00+00:00",
        "water the plants",
    )
    assert at("in 10 minutes to check the oven") == ("2026-12-01T15:10+00:00", "check the oven")
    assert at("on Friday at 10:15 to pay rent") == ("2026-12-04T10:15+00:00", "pay rent")
    assert at("every weekday at 7:30 to take the bins out") == (
        "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=7;BYMINUTE=30;BYSECOND=0",
        "take the bins out",
    )
    assert at("every Monday at 9 to e-mail me the shopping list")[0] == (
        "FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0;BYSECOND=0"
    )
    assert at("明天早上八点吃药", "zh") == ("2026-12-02T08:00+00:00", "吃药")
    assert at("五点给达娜打电话", "zh") == ("2026-12-01T17:00+00:00", "给达娜打电话")
    assert at("下午三点半开会", "zh") == ("2026-12-01T15:30+00:00", "开会")
    assert at("十分钟后关火", "zh") == ("2026-12-01T15:10+00:00", "关火")
    assert at("每天早上八点吃药", "zh")[0] == "FREQ=DAILY;BYHOUR=8;BYMINUTE=0;BYSECOND=0"
    assert at("每周一上午九点开会", "zh")[0] == (
        "FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0;BYSECOND=0"
    )
    assert parse("call 3 people", "en", NOW) is None
    assert parse("给妈妈打电话", "zh", NOW) is None


@asynccontextmanager
async def reminder_world(
    tmp: Path,
) -> AsyncIterator[tuple[RuleBrain, TestClock, list[Occurrence], Scheduler]]:
    clock = TestClock(int(NOW.timestamp() * 1000) - TestClock().now_ms())
    due: list[Occurrence] = []

    async def remind(occ: Occurrence) -> None:
        due.append(occ)

    scheduler = Scheduler(
        JobStore(tmp / "schedule.db"), handlers={"reminder": remind}, clock=clock, tz=TZ
    )
    async with fake_gateway(tmp, "home") as gw, scheduler:
        store = TaskStore(tmp / "tasks.db")
        try:
            async with RuleBrain(
                gw, store, contacts=BOOK, reminders=ReminderDesk(scheduler)
            ) as brain:
                yield brain, clock, due, scheduler
        finally:
            store.close()
            scheduler.store.close()


async def test_reminders_set_listed_cancelled_and_due(tmp_path: Path) -> None:
    async with reminder_world(tmp_path) as (brain, clock, due, scheduler):

        async def say(text: str, lang: str = "") -> str:
            return await collect(brain.turn(Turn(text, device_id="mac1", language=lang)))

        assert await say("what are my reminders") == "You have no reminders."
        assert await say("remind me at five to call mum") == (
            "OK, I'll remind you today at 5:00 pm to call mum."
        )
        assert await say("remind me every weekday at 7:30 to take the bins out") == (
            "OK, I'll remind you every weekday at 7:30 am to take the bins out."
        )
        assert await say("明天早上八点提醒我吃药", "zh") == "好的，明天上午八点提醒你吃药。"
        assert await say("remind me to water the plants") == (
            "When should I remind you to water the plants? Nothing was set."
        )
        listed = await say("what are my reminders")
        assert listed == (
            "Your reminders: today at 5:00 pm, call mum; every weekday at 7:30 am, take the "
            "bins out; 明天上午八点, 吃药."
        ), listed
        assert (await say("cancel my reminders")).startswith("Which reminder?")
        assert await say("cancel the reminder to take the bins out") == (
            "Cancelled the reminder to take the bins out."
        )
        clock.advance(2 * 3600)  # 5 pm
        await poll(lambda: due, 5, "call mum")
        assert [o.job.spec["what"] for o in due] == ["call mum"]
        clock.advance(15 * 3600)  # 8 am tomorrow
        await poll(lambda: len(due) == 2, 5, "吃药")
        assert due[1].job.spec["what"] == "吃药" and due[1].job.spec["lang"] == "zh"
        assert await say("我有哪些提醒", "zh") == "你没有提醒。"
        clock.advance(7 * 24 * 3600)
        await scheduler.run_due()
        assert len(due) == 2  # the weekday one was cancelled


WORDS = st.sampled_from(
    [
        "every",
        "at",
        "in",
        "tomorrow",
        "tonight",
        "pm",
        "am",
        "7:30",
        "5",
        "99",
        "25:61",
        "monday",
        "weekday",
        "morning",
        "minutes",
        "hours",
        "half an",
        "to",
        "call",
        "明天",
        "每天",
        "每周一",
        "早上",
        "下午",
        "八点",
        "半",
        "三刻",
        "十分钟后",
        "点",
        "提醒我",
        "吃药",
        "工作日",
        "后天",
        "百",
        "零",
        ":",
        "：",
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(st.text(max_size=60), st.lists(WORDS, max_size=8).map(" ".join)),
    st.sampled_from(["en", "zh"]),
)
def test_reading_a_time_never_raises(text: str, lang: str) -> None:
    when = parse(text, lang, NOW)
    if when is not None:
        assert (when.at is None) != (when.rule == "")
        assert when.at is None or when.at.tzinfo is not None


async def test_reminders_moved_by_voice_in_english_and_chinese(tmp_path: Path) -> None:
    async with reminder_world(tmp_path) as (brain, clock, due, scheduler):

        async def say(text: str, lang: str = "en") -> str:
            return await collect(brain.turn(Turn(text, device_id="mac1", language=lang)))

        def local_due(what: str) -> str:
            (job,) = [j for j in scheduler.store.jobs("reminder") if j.spec["what"] == what]
            assert job.next_ms is not None
            at = dt.datetime.fromtimestamp(job.next_ms / 1000, ZoneInfo(TZ))
            return at.isoformat(timespec="minutes")

        assert "OK" in await say("remind me at 5 pm to call mum")
        # "to 6": the next six after five, the same evening (not tomorrow morning)
        assert await say("move my 5 pm reminder to 6") == (
            "OK, I'll remind you today at 6:00 pm to call mum instead."
        )
        assert local_due("call mum") == "2026-12-01T18:00+00:00"
        assert await say("move the reminder to call mum to tomorrow at 9 am") == (
            "OK, I'll remind you tomorrow at 9:00 am to call mum instead."
        )
        assert await say("remind me every day at 8 am to take my pills") == (
            "OK, I'll remind you every day at 8:00 am to take my pills."
        )
        assert (await say("move my reminder to 7")).startswith("Which reminder?")
        assert await say("move my 8 am reminder to 9") == (
            "OK, I'll remind you every day at 9:00 am to take my pills instead."
        )
        (pills,) = [
            j for j in scheduler.store.jobs("reminder") if j.spec["what"] == "take my pills"
        ]
        assert pills.rule == "FREQ=DAILY;BYHOUR=9;BYMINUTE=0;BYSECOND=0"
        assert await say("move my 4 am reminder to 5") == "You have no reminder to 4 am."
        assert await say("明天下午三点提醒我买菜", "zh") == "好的，明天下午三点提醒你买菜。"
        assert await say("把买菜的提醒改到四点", "zh") == "好的，改成明天下午四点提醒你买菜。"
        assert local_due("买菜") == "2026-12-02T16:00+00:00"
        for j in scheduler.store.jobs("reminder"):
            if j.spec["what"] != "买菜":
                scheduler.cancel(j.id)
        assert await say("把提醒改到六点", "zh") == "好的，改成明天晚上六点提醒你买菜。"
        clock.advance(27 * 3600 + 1)  # 6 pm tomorrow: due once, at its new time only
        await poll(lambda: due, 5, "the moved reminder")
        assert [o.job.spec["what"] for o in due] == ["买菜"]
        assert due[0].occurrence_ms == int(
            dt.datetime(2026, 12, 2, 18, 0, tzinfo=ZoneInfo(TZ)).timestamp() * 1000
        )
