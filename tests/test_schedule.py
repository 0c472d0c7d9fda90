"""The durable scheduler (issue 17): recurrence in the owner's zone across DST, missed
occurrences inside / outside the grace window, idempotency per (job, occurrence) across a
restart, timers' pause / resume / add time; time moved by a test clock, never waited for."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import stat
from collections.abc import Callable
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from hub.schedule import JobStore, Occurrence, ScheduleError, Scheduler, TestClock, recurrence
from hub.schedule.store import DONE, FIRED, MISSED, PAUSED
from tests.waiting import poll

LONDON = "Europe/London"
WEEKDAYS_730 = "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=7;BYMINUTE=30;BYSECOND=0"


def ms(when: dt.datetime) -> int:
    return int(when.timestamp() * 1000)


def test_daily_8am_stays_8am_local_across_both_dst_changes() -> None:
    tz = ZoneInfo(LONDON)
    start = ms(dt.datetime(2026, 3, 27, 12, 0, tzinfo=tz))
    rule = "FREQ=DAILY;BYHOUR=8;BYMINUTE=0;BYSECOND=0"
    at, seen = start, []
    for _ in range(4):
        nxt = recurrence.next_after(rule, start, LONDON, at)
        assert nxt is not None
        seen.append(dt.datetime.fromtimestamp(nxt / 1000, tz))
        at = nxt
    assert [d.hour for d in seen] == [8, 8, 8, 8]
    assert [d.utcoffset() for d in seen] == [dt.timedelta(0)] + [dt.timedelta(hours=1)] * 3
    autumn = ms(dt.datetime(2026, 10, 23, 12, 0, tzinfo=tz))  # BST ends 25 Oct
    a = recurrence.next_after(rule, autumn, LONDON, autumn)
    b = recurrence.next_after(rule, autumn, LONDON, a or 0)
    assert a is not None and b is not None
    assert b - a == 25 * 3600 * 1000  # the autumn day is 25 hours long; still 8:00 local


def test_weekday_rule_skips_the_weekend() -> None:
    tz = ZoneInfo(LONDON)
    friday = ms(dt.datetime(2026, 12, 4, 8, 0, tzinfo=tz))
    nxt = recurrence.next_after(WEEKDAYS_730, friday, LONDON, friday)
    assert nxt is not None
    when = dt.datetime.fromtimestamp(nxt / 1000, tz)
    assert (when.weekday(), when.hour, when.minute) == (0, 7, 30)


def test_bad_rules_and_zones_are_refused() -> None:
    with pytest.raises(ScheduleError):
        recurrence.check("FREQ=SOMETIMES", LONDON)
    with pytest.raises(ScheduleError):
        recurrence.check("FREQ=DAILY", "Mars/Olympus")


class Fired:
    def __init__(self) -> None:
        self.got: list[Occurrence] = []
        self.missed: list[Occurrence] = []

    async def fire(self, occ: Occurrence) -> None:
        self.got.append(occ)

    async def miss(self, occ: Occurrence) -> None:
        self.missed.append(occ)


def scheduler(path: Path, clock: TestClock, fired: Fired) -> Scheduler:
    return Scheduler(
        JobStore(path / "schedule.db"),
        handlers={"reminder": fired.fire, "timer": fired.fire},
        on_missed={"reminder": fired.miss},
        clock=clock,
        tz=LONDON,
    )


async def wait_for(pred: Callable[[], object], what: str) -> None:
    await poll(pred, 5, what)


def test_the_store_is_owner_only(tmp_path: Path) -> None:
    s = scheduler(tmp_path, TestClock(), Fired())
    s.store.close()
    mode = stat.S_IMODE(os.stat(tmp_path / "schedule.db").st_mode)
    assert mode & 0o077 == 0, oct(mode)


async def test_one_shot_fires_once_when_the_clock_reaches_it(tmp_path: Path) -> None:
    clock, fired = TestClock(), Fired()
    s = scheduler(tmp_path, clock, fired)
    async with s:
        job = s.add("t1", "timer", {"device": "mac1"}, at_ms=clock.now_ms() + 20_000)
        await asyncio.sleep(0)  # the loop's first pass (nothing due)
        assert fired.got == []
        clock.advance(20)
        await wait_for(lambda: fired.got, "the timer")
        assert [o.job.id for o in fired.got] == ["t1"]
        assert fired.got[0].late_ms < 1000
        assert s.store.get(job.id).state == DONE  # type: ignore[union-attr]
        assert [st for _, st in s.store.occurrences("t1")] == [FIRED]
        assert await s.run_due() == 0
    s.store.close()


async def test_missed_while_down_inside_grace_fires_once_else_missed(tmp_path: Path) -> None:
    clock, fired = TestClock(), Fired()
    s = scheduler(tmp_path, clock, fired)
    now = clock.now_ms()
    s.add("soon", "reminder", {}, at_ms=now + 60_000, grace_ms=10 * 60_000)
    s.add("long", "reminder", {}, at_ms=now + 60_000, grace_ms=30_000)
    s.store.close()
    clock.advance(5 * 60)  # the hub is down for five minutes
    for _ in range(2):  # started twice: the first start fired it, the second does not again
        s = scheduler(tmp_path, clock, fired)
        async with s:
            await wait_for(lambda: fired.got and fired.missed, "the start pass")
            await s.run_due()
        s.store.close()
    assert [o.job.id for o in fired.got] == ["soon"]
    assert [o.job.id for o in fired.missed] == ["long"]
    s = scheduler(tmp_path, clock, fired)
    assert s.store.occurrences("long")[0][1] == MISSED
    s.store.close()


async def test_recurring_job_down_for_days_fires_the_last_one_at_most(tmp_path: Path) -> None:
    clock, fired = TestClock(), Fired()
    s = scheduler(tmp_path, clock, fired)
    s.add("daily", "reminder", {}, rule="FREQ=HOURLY;BYMINUTE=0;BYSECOND=0", grace_ms=3600_000)
    claimed = s.claim_due(clock.now_ms() + 3 * 24 * 3600_000)
    assert len(claimed.fire) == 1 and len(claimed.missed) >= 70
    job = s.store.get("daily")
    assert job is not None and job.next_ms is not None
    assert job.next_ms > clock.now_ms() + 3 * 24 * 3600_000
    again = s.claim_due(clock.now_ms() + 3 * 24 * 3600_000)
    assert again.fire == [] and again.missed == []
    s.store.close()


async def test_a_handler_cut_off_by_a_stop_runs_again_at_start(tmp_path: Path) -> None:
    clock, fired = TestClock(), Fired()
    s = scheduler(tmp_path, clock, fired)
    s.add("r", "reminder", {}, at_ms=clock.now_ms())
    claimed = s.claim_due()  # claimed; the hub stops before the handler ran
    assert len(claimed.fire) == 1
    s.store.close()
    s = scheduler(tmp_path, clock, fired)
    async with s:
        await wait_for(lambda: fired.got, "the re-run")
    assert [o.job.id for o in fired.got] == ["r"]
    assert s.store.occurrences("r") == [(claimed.fire[0].occurrence_ms, FIRED)]
    s.store.close()


async def test_pause_resume_extend_and_the_same_id_twice(tmp_path: Path) -> None:
    clock, fired = TestClock(), Fired()
    s = scheduler(tmp_path, clock, fired)
    async with s:
        t = s.add("t", "timer", {}, at_ms=clock.now_ms() + 60_000)
        assert s.add("t", "timer", {"other": 1}, at_ms=clock.now_ms() + 5).spec == {}
        clock.advance(20)
        paused = s.pause(t.id)
        assert paused is not None and paused.state == PAUSED
        assert 39_000 <= s.remaining_ms(paused) <= 40_000
        clock.advance(3600)  # paused: nothing counts down
        await s.run_due()
        assert fired.got == []
        s.extend(t.id, 30_000)
        resumed = s.resume(t.id)
        assert resumed is not None and 69_000 <= s.remaining_ms(resumed) <= 70_000
        clock.advance(69)
        await s.run_due()
        assert fired.got == []
        clock.advance(1.5)
        await wait_for(lambda: fired.got, "the timer")
        assert s.cancel(t.id) is None  # done already
    s.store.close()


def test_notification_settings_order_and_quiet_hours() -> None:
    from hub.turns.notify import NotifySettings, in_quiet

    s = NotifySettings.of({"quiet_hours": "22:00-07:00", "ack_deadline_s": 5})
    assert s.deadline_ms == 5000 and s.order == ("glasses", "phone", "watch", "mac")
    assert s.quiet is not None
    tz = ZoneInfo(LONDON)
    assert in_quiet(dt.datetime(2026, 12, 1, 23, 30, tzinfo=tz), s.quiet)
    assert in_quiet(dt.datetime(2026, 12, 2, 6, 59, tzinfo=tz), s.quiet)
    assert not in_quiet(dt.datetime(2026, 12, 2, 7, 0, tzinfo=tz), s.quiet)
    assert not in_quiet(dt.datetime(2026, 12, 1, 12, 0, tzinfo=tz), NotifySettings.of({}).quiet)


async def test_a_notification_in_quiet_hours_waits_unless_urgent(tmp_path: Path) -> None:
    from hub.timeline import HubStore
    from hub.turns.delivery import Delivery
    from hub.turns.notify import NOTIFY, Notifier, NotifySettings

    tz = ZoneInfo(LONDON)
    night = int(dt.datetime(2026, 12, 1, 23, 0, tzinfo=tz).timestamp() * 1000)
    clock = TestClock(night - TestClock().now_ms())
    sent: list[tuple[str, str]] = []

    async def send(device: str, kind: int, msg: object, trace: str | None) -> None:
        sent.append((device, getattr(msg, "text", "")))

    def hold(entries: object) -> None:
        return None

    hub_store = HubStore(tmp_path / "hub.db")
    delivery = Delivery(
        hub_store, send=send, hold=hold, commit=lambda o: None, gateway=lambda: None
    )
    s = scheduler(tmp_path, clock, Fired())
    devices = [("m", "mac"), ("g", "glasses"), ("p", "phone")]
    notifier = Notifier(
        hub_store,
        delivery,
        s,
        devices=lambda: devices,
        settings=NotifySettings.of({"quiet_hours": "22:00-07:00", "ack_deadline_s": 30}),
    )
    s.handlers.update(notifier.handlers())
    assert notifier.order("p") == ["p", "g", "m"]
    try:
        notifier.notify("quiet", "not now", first="m", urgent=False, trace="")
        notifier.notify("loud", "now", first="m", urgent=True, trace="")
        await s.run_due()
        assert sent == [("m", "now")]
        (waiting,) = [j for j in s.store.jobs(NOTIFY) if j.spec["nid"] == "quiet"]
        morning = dt.datetime.fromtimestamp((waiting.next_ms or 0) / 1000, tz)
        assert (morning.day, morning.hour, morning.minute) == (2, 7, 0)
        clock.advance(31)  # nobody ACKed the urgent one: the next device
        await s.run_due()
        assert sent[-1] == ("g", "now")
    finally:
        s.store.close()
        hub_store.close()


def test_a_notification_goes_first_to_the_device_used_last(tmp_path: Path) -> None:
    from hub.timeline import HubStore
    from hub.turns.delivery import Delivery
    from hub.turns.notify import Notifier, NotifySettings

    async def nothing(*args: object) -> None:
        return None

    hub_store = HubStore(tmp_path / "hub.db")
    delivery = Delivery(
        hub_store, send=nothing, hold=lambda _e: None, commit=lambda o: None, gateway=lambda: None
    )
    s = scheduler(tmp_path, TestClock(), Fired())
    devices = [("m", "mac"), ("g", "glasses"), ("p", "phone"), ("w", "watch")]
    notifier = Notifier(
        hub_store,
        delivery,
        s,
        devices=lambda: devices,
        settings=NotifySettings.of({}),
        last_used=hub_store.last_used_device,
    )
    try:
        assert notifier.order("m") == ["m", "g", "p", "w"]  # nobody used one: the asker
        for i, device in enumerate(["g", "w"]):
            hub_store.admit_utterance(
                utterance_id=f"u{i}",
                device=device,
                text="hello",
                ts_ms=1000 + i,
                received_ms=1000 + i,
                trace_id="",
                meta={},
                replay_state=None,
            )
        assert hub_store.last_used_device() == "w"
        assert notifier.order("m") == ["w", "m", "g", "p"]  # used last, asker, then the order
        assert notifier.order("w") == ["w", "g", "p", "m"]
        assert notifier.order("gone") == ["w", "g", "p", "m"]  # a revoked asker: skipped
    finally:
        s.store.close()
        hub_store.close()
