"""Timers by voice through the rule-based brain and the hub's scheduler (issue 17): start,
status, pause, resume, add and take off time, cancel, several named timers, each device's
own; the ring's words in the request's language. Time is a test clock: nothing waits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from hub.brain.base import Turn, collect
from hub.brain.replies import spoken_duration
from hub.brain.rules import RuleBrain
from hub.brain.tasks import TaskStore
from hub.schedule import JobStore, Occurrence, Scheduler, TestClock
from hub.schedule.timers import TimerDesk
from hub.turns.later import ring_text
from tests.brain_kit import BOOK, fake_gateway
from tests.waiting import poll


@asynccontextmanager
async def timer_world(tmp: Path) -> AsyncIterator[tuple[RuleBrain, TestClock, list[Occurrence]]]:
    clock, rung = TestClock(), []

    async def ring(occ: Occurrence) -> None:
        rung.append(occ)

    scheduler = Scheduler(JobStore(tmp / "schedule.db"), handlers={"timer": ring}, clock=clock)
    async with fake_gateway(tmp, "home") as gw, scheduler:
        store = TaskStore(tmp / "tasks.db")
        try:
            async with RuleBrain(gw, store, contacts=BOOK, timers=TimerDesk(scheduler)) as brain:
                yield brain, clock, rung
        finally:
            store.close()
            scheduler.store.close()


def test_durations_are_spoken_in_both_languages() -> None:
    assert spoken_duration(20_000, "en") == "20 seconds"
    assert spoken_duration(90_000, "en") == "1 minute and 30 seconds"
    assert spoken_duration(3_725_000, "en") == "1 hour, 2 minutes and 5 seconds"
    assert spoken_duration(20_000, "zh") == "二十秒"
    assert spoken_duration(90_000, "zh") == "一分钟三十秒"
    assert spoken_duration(2 * 3600_000, "zh") == "两小时"
    assert spoken_duration(400, "en") == "1 second"


async def test_timers_by_voice_in_english(tmp_path: Path) -> None:
    async with timer_world(tmp_path) as (brain, clock, rung):

        async def say(text: str, device: str = "mac1", **kw: Any) -> str:
            return await collect(brain.turn(Turn(text, device_id=device, **kw)))

        assert await say("how much time is left on the timer") == "No timer is running here."
        assert await say("set a timer for 20 seconds") == "Timer set for 20 seconds."
        assert await say("set a pizza timer for 10 minutes") == "Pizza timer set for 10 minutes."
        status = await say("how much time is left on the timer")
        assert status == "Timer: 20 seconds left; Pizza timer: 10 minutes left.", status
        assert "Which timer?" in await say("pause the timer")
        assert (
            await say("how much time is left on the timer", device="specs")
            == "No timer is running here."
        )
        clock.advance(5)
        assert (
            await say("pause the pizza timer")
            == "Paused the pizza timer: 9 minutes and 55 seconds left."
        )
        clock.advance(15)
        await poll(lambda: rung, 5, "the 20 second timer")
        assert [o.job.spec["device"] for o in rung] == ["mac1"]
        assert ring_text(rung[0]) == "Time's up: your timer for 20 seconds is done."
        clock.advance(600)  # paused: it does not ring
        assert (await say("add 5 minutes to the timer")).startswith(
            "The pizza timer now has 14 minutes and 55 seconds left"
        )
        assert await say("resume the pizza timer") == (
            "Resumed the pizza timer: 14 minutes and 55 seconds left."
        )
        assert await say("take 2 minutes off the timer") == (
            "The pizza timer now has 12 minutes and 55 seconds left."
        )
        assert await say("cancel the pizza timer") == "Cancelled the pizza timer."
        clock.advance(3600)
        assert len(rung) == 1
        assert await say("cancel the timer") == "No timer is running here."


async def test_timers_by_voice_in_chinese_ring_in_chinese(tmp_path: Path) -> None:
    async with timer_world(tmp_path) as (brain, clock, rung):

        async def say(text: str) -> str:
            return await collect(brain.turn(Turn(text, device_id="specs", language="zh")))

        assert await say("设置一个二十秒的计时器") == "好的，二十秒的计时器开始了。"
        assert await say("暂停计时器") == "计时器已暂停，还剩二十秒。"
        assert await say("继续计时器") == "计时器继续计时，还剩二十秒。"
        assert await say("计时器还剩多少时间") == "计时器还剩二十秒。"
        clock.advance(20)
        await poll(lambda: rung, 5, "the timer")
        assert ring_text(rung[0]) == "时间到：二十秒的计时器结束了。"
        assert await say("取消计时器") == "这里没有正在运行的计时器。"


async def test_several_named_timers_in_chinese(tmp_path: Path) -> None:
    async with timer_world(tmp_path) as (brain, clock, rung):

        async def say(text: str) -> str:
            return await collect(brain.turn(Turn(text, device_id="specs", language="zh")))

        assert await say("设置一个十分钟的披萨计时器") == "好的，十分钟的披萨计时器开始了。"
        assert await say("设一个二十秒的计时器") == "好的，二十秒的计时器开始了。"
        assert await say("计时器还剩多少时间") == "计时器还剩二十秒；披萨计时器还剩十分钟。"
        assert await say("计时器加五分钟") == "哪个计时器？这里有：计时器；披萨计时器。"
        assert await say("暂停披萨计时器") == "披萨计时器已暂停，还剩十分钟。"
        assert await say("给披萨计时器加五分钟") == "披萨计时器现在还剩十五分钟。"
        assert await say("继续披萨计时器") == "披萨计时器继续计时，还剩十五分钟。"
        clock.advance(20)
        await poll(lambda: rung, 5, "the unnamed timer")
        assert ring_text(rung[0]) == "时间到：二十秒的计时器结束了。"
        assert await say("计时器减两分钟") == "披萨计时器现在还剩十二分钟四十秒。"
        assert await say("披萨计时器还剩多久") == "披萨计时器还剩十二分钟四十秒。"
        clock.advance(12 * 60 + 40)
        await poll(lambda: len(rung) == 2, 5, "the pizza timer")
        assert ring_text(rung[1]) == "时间到：十分钟的披萨计时器结束了。"
        assert await say("取消披萨计时器") == "这里没有披萨计时器。"  # it rang: done
