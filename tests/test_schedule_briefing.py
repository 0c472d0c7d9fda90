"""The morning briefing (issue 17): a daily job at the configured time (off unless enabled,
moved when the time changes) whose one notification holds today's reminders, the timeline
since yesterday and the cards waiting, in the owner's language; time is a test clock."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from zoneinfo import ZoneInfo

from hub.schedule import JobStore, Scheduler, TestClock
from hub.schedule.reminders import ReminderDesk
from hub.timeline import HubStore
from hub.turns.briefing import JOB_ID, Briefing, BriefingSettings
from hub.turns.delivery import Delivery
from hub.turns.notify import Notifier, NotifySettings

TZ = "Europe/London"
SIX = dt.datetime(2026, 12, 1, 6, 0, tzinfo=ZoneInfo(TZ))


def ms(at: dt.datetime) -> int:
    return int(at.timestamp() * 1000)


@asynccontextmanager
async def home(
    tmp: Path, config: dict[str, object], cards: list[str]
) -> AsyncIterator[tuple[Briefing, TestClock, list[tuple[str, str]], HubStore]]:
    clock = TestClock(ms(SIX) - TestClock().now_ms())
    sent: list[tuple[str, str]] = []

    async def send(device: str, kind: int, msg: object, trace: str | None) -> None:
        sent.append((device, getattr(msg, "text", "")))

    def hold(entries: object) -> None:
        return None

    store = HubStore(tmp / "hub.db")
    delivery = Delivery(store, send=send, hold=hold, commit=lambda o: None, gateway=lambda: None)
    scheduler = Scheduler(JobStore(tmp / "schedule.db"), clock=clock, tz=TZ)
    notifier = Notifier(
        store,
        delivery,
        scheduler,
        devices=lambda: [("mac", "mac"), ("phone", "phone")],
        settings=NotifySettings.of({}),
        last_used=store.last_used_device,
    )
    briefing = Briefing(
        store,
        ReminderDesk(scheduler),
        notifier,
        cards=lambda: cards,
        settings=BriefingSettings.of(config),
    )
    scheduler.handlers.update(notifier.handlers())
    scheduler.handlers.update(briefing.handlers())
    briefing.ensure()
    try:
        yield briefing, clock, sent, store
    finally:
        scheduler.store.close()
        store.close()


def said(store: HubStore, i: int, device: str, text: str, at: dt.datetime) -> None:
    store.admit_utterance(
        utterance_id=f"u{i}", device=device, text=text, ts_ms=ms(at), received_ms=ms(at),
        trace_id="", meta={}, replay_state=None,
    )  # fmt: skip


async def test_the_morning_briefing_at_its_time_in_the_owners_language(tmp_path: Path) -> None:
    config = {"enabled": True, "at": "07:30"}
    async with home(tmp_path, config, ["E-mail Dana the meeting notes"]) as (b, clock, sent, store):
        desk, scheduler = b.reminders, b.reminders.scheduler
        (job,) = scheduler.store.jobs("briefing")
        assert job.next_ms == ms(SIX.replace(hour=7, minute=30))
        said(store, 1, "phone", "明天早上八点提醒我吃药", SIX - dt.timedelta(hours=10))
        said(store, 2, "mac", "把灯关了", SIX - dt.timedelta(hours=9))
        desk.add(
            "r1", device="mac", what="吃药", when="", lang="zh", trace="", at=SIX.replace(hour=8)
        )
        desk.add(
            "r2",
            device="mac",
            what="开会",
            when="",
            lang="zh",
            trace="",
            at=SIX + dt.timedelta(days=1),
        )
        clock.advance(3600)  # 7:00: not yet
        assert await scheduler.run_due() == 0
        clock.advance(30 * 60)
        assert await scheduler.run_due() == 1  # the briefing
        await scheduler.run_due()  # its notification
        ((to, text),) = sent
        assert to == "mac"  # the device used last
        assert text == (
            "早上好。今天的提醒：上午八点吃药。"
            "昨天以来时间线上有2条，最新的：明天早上八点提醒我吃药；把灯关了。"
            "手机助手里有1张卡片等你确认：E-mail Dana the meeting notes。"
        ), text
        assert "开会" not in text  # tomorrow's
        clock.advance(24 * 3600)  # the next morning: once more, once
        await scheduler.run_due()
        await scheduler.run_due()
        # unACKed, the first went on to the phone; the second morning's came once
        assert [d for d, _ in sent] == ["mac", "phone", "mac"]
        assert sent[2][1].startswith("早上好。今天没有提醒。时间线上没有新内容。")
        assert [s for _, s in scheduler.store.occurrences(JOB_ID)] == ["fired", "fired"]


async def test_the_briefing_in_english_moved_and_switched_off(tmp_path: Path) -> None:
    config: dict[str, object] = {"enabled": True, "at": "06:30", "language": "en"}
    async with home(tmp_path, config, []) as (b, clock, sent, _):
        scheduler = b.reminders.scheduler
        clock.advance(31 * 60)
        assert await scheduler.run_due() == 1
        await scheduler.run_due()
        assert sent == [  # nobody used a device yet: the first of notifications.order
            (
                "phone",
                "Good morning. No reminders today. Nothing new on the timeline. "
                "No cards wait for you.",
            )
        ]
        b.settings = BriefingSettings.of({"enabled": True, "at": "09:15"})
        b.ensure()
        job = scheduler.store.get(JOB_ID)
        assert job is not None and job.next_ms == ms(SIX.replace(hour=9, minute=15))
        b.settings = BriefingSettings.of({"enabled": False, "at": "09:15"})
        b.ensure()
        clock.advance(3 * 3600)
        await scheduler.run_due()
        assert len(scheduler.store.occurrences(JOB_ID)) == 1  # off: not at 9:15
        b.settings = BriefingSettings.of({"enabled": True, "at": "09:15"})
        b.ensure()  # on again: tomorrow at 9:15
        job = scheduler.store.get(JOB_ID)
        assert job is not None and job.next_ms == ms(
            SIX.replace(hour=9, minute=15) + dt.timedelta(days=1)
        )
    assert BriefingSettings.of(None).enabled is False
