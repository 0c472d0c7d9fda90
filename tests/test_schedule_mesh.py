"""Timers and reminders on the real mesh (issue 17): the hub in this process (mosquitto,
gRPC, the rule-based brain, the scheduler on a test clock), edge daemons and ``yimi say`` as
processes. A 20-second timer set by voice on the Mac rings on the Mac and nowhere else, and
the Mac ACKs it; reminders set in Chinese and English fire at their times across a hub
restart, once; a reminder due while the hub was down fires at start within its grace; a
timeline watch set by voice tells the owner once.
The clock is moved, never waited for."""

from __future__ import annotations

import asyncio

import pytest

from hub.mesh.daemon import HubDaemon
from hub.schedule import TestClock
from provisioning.bundle import Bundle
from tests.mesh_harness import Mesh
from tests.speech import silence, write_wav
from tests.waiting import poll

pytestmark = pytest.mark.slow


RING = "Time's up: your timer for 20 seconds is done."


async def test_a_20_second_timer_rings_on_the_asking_device_only(mesh: Mesh) -> None:
    mac = mesh.add_device("mac1", "mac")
    specs = mesh.add_device("specs", "glasses")
    quiet = write_wav(mesh.root / "quiet.wav", silence(1.0))
    clock = TestClock()
    async with mesh.hub_in_process(clock=clock) as hub:
        # the Mac speaks its replies (into a null sink): it ACKs them "played"
        mac_edge = await asyncio.to_thread(
            mesh.start_edge, mac, "--audio", str(quiet), "--out", "null", hub=mesh.hub_target
        )
        specs_edge = await asyncio.to_thread(mesh.start_edge, specs, hub=mesh.hub_target)
        out = await mesh.say_answered(mac, "Yimi, set a timer for 20 seconds")
        assert "Timer set for 20 seconds." in out, out
        mac_id = Bundle.load(mac).device_id
        (timer,) = hub.timers.on(mac_id)
        assert 19_000 <= timer.remaining_ms <= 20_000
        clock.advance(19)
        await hub.scheduler.run_due()
        assert RING not in mac_edge.text()
        clock.advance(1.5)
        await poll(lambda: RING in mac_edge.text(), 20, "the ring on the Mac")
        await poll(
            lambda: mesh.hub_query("SELECT acked FROM reply_chunks WHERE text=?", RING)[0][0],
            10,
            "the Mac's ACK",
        )
        rows = mesh.hub_query("SELECT device, acked FROM reply_chunks WHERE text=?", RING)
        assert rows == [(mac_id, "played")], rows  # spoken, ACKed once
        delivered = mesh.hub_query(
            "SELECT d.device, d.state FROM deliveries d JOIN reply_chunks c "
            "ON c.reply_id = d.reply_id WHERE c.text=?",
            RING,
        )
        assert delivered == [(mac_id, "played")], delivered
        clock.advance(120)  # ACKed: never sent again
        await hub.scheduler.run_due()
        assert mac_edge.text().count(RING) == 1
        entries = [t for _, _, kind, t in mesh.hub_timeline() if kind == "reply"]
        assert RING in entries  # the ring is on the timeline
        assert RING not in specs_edge.text()
        mesh.stop(mac_edge)
        mesh.stop(specs_edge)


def reminders_on_timeline(mesh: Mesh) -> list[str]:
    return [t for _, _, kind, t in mesh.hub_timeline() if kind == "reminder"]


def due_in_s(hub: HubDaemon, what: str) -> float:
    (job,) = [j for j in hub.scheduler.store.jobs("reminder") if j.spec["what"] == what]
    assert job.next_ms is not None
    return (job.next_ms - hub.scheduler.now_ms()) / 1000


async def test_reminders_in_chinese_and_english_fire_once_across_restarts(mesh: Mesh) -> None:
    mesh.configure(timezone="Asia/Shanghai")
    mac = mesh.add_device("mac1", "mac")
    specs = mesh.add_device("specs", "glasses")
    clock = TestClock()
    mac_edge = specs_edge = None
    async with mesh.hub_in_process(clock=clock) as hub:
        mac_edge = await asyncio.to_thread(mesh.start_edge, mac, hub=mesh.hub_target)
        specs_edge = await asyncio.to_thread(mesh.start_edge, specs, hub=mesh.hub_target)
        out = await mesh.say_answered(mac, "明天早上八点提醒我吃药")
        assert "好的，明天上午八点提醒你吃药。" in out, out
        out = await mesh.say_answered(mac, "remind me in 10 minutes to call mum")
        assert "OK, I'll remind you " in out and "to call mum." in out, out
        zh_in, en_in = due_in_s(hub, "吃药"), due_in_s(hub, "call mum")
        assert 570 <= en_in <= 600 and en_in < zh_in <= 32 * 3600  # 8 am the day after today
    mac_id = Bundle.load(mac).device_id

    def rendered_on_mac(said: str) -> bool:  # the Mac's ACK recorded by the hub
        sent = mesh.hub_query("SELECT device, acked FROM reply_chunks WHERE text=?", said)
        return sent == [(mac_id, "rendered")]

    async with mesh.hub_in_process(clock=clock) as hub:  # restarted in between: both still pending
        clock.advance(en_in + 1)
        await poll(lambda: "hub: Reminder: call mum." in mac_edge.text(), 30, "call mum")
        # the ACK is in before the clock jumps past its deadline (else: the fallback device)
        await poll(lambda: rendered_on_mac("Reminder: call mum."), 30, "call mum ACKed")
        clock.advance(zh_in - en_in)
        await poll(lambda: "hub: 提醒：吃药。" in mac_edge.text(), 30, "吃药 on the Mac")
        await poll(lambda: rendered_on_mac("提醒：吃药。"), 30, "吃药 ACKed")
        assert reminders_on_timeline(mesh) == ["Reminder: call mum.", "提醒：吃药。"]
    async with mesh.hub_in_process(clock=clock) as hub:  # and again: nothing fires twice
        clock.advance(120)  # past the notifications' ACK deadline: the Mac ACKed, no fallback
        await hub.scheduler.run_due()
        for said in ("Reminder: call mum.", "提醒：吃药。"):
            sent = mesh.hub_query("SELECT device, acked FROM reply_chunks WHERE text=?", said)
            assert sent == [(mac_id, "rendered")], sent
        for job in hub.scheduler.store.jobs("reminder", active=False):
            assert [s for _, s in hub.scheduler.store.occurrences(job.id)] == ["fired"]

        async def on_specs() -> str:  # the CLI syncs with the hub: off this loop
            r = await asyncio.to_thread(mesh.yimi, "timeline", "--bundle", str(specs))
            return r.stdout

        async def both_on_specs() -> bool:
            view = await on_specs()
            return "提醒：吃药。" in view and "Reminder: call mum." in view

        await poll(both_on_specs, 30, "the reminders on the glasses")
        assert reminders_on_timeline(mesh) == ["Reminder: call mum.", "提醒：吃药。"]
        assert mac_edge.text().count("Reminder: call mum.") == 1
        assert "Reminder: call mum." not in specs_edge.text()  # said on the Mac only
        mesh.stop(mac_edge)
        mesh.stop(specs_edge)


async def test_a_reminder_due_while_the_hub_was_down_fires_on_start(mesh: Mesh) -> None:
    mac = mesh.add_device("mac1", "mac")
    clock = TestClock()
    async with mesh.hub_in_process(clock=clock):
        mac_edge = await asyncio.to_thread(mesh.start_edge, mac, hub=mesh.hub_target)
        assert "OK" in await mesh.say_answered(mac, "remind me in 10 minutes to stretch")
        assert "OK" in await mesh.say_answered(mac, "remind me in 20 minutes to check the post")
    clock.advance(15 * 60)  # down for 15 minutes: 5 minutes late, inside the grace
    async with mesh.hub_in_process(clock=clock) as hub:
        await poll(lambda: "hub: Reminder: stretch." in mac_edge.text(), 30, "stretch")
        (stretch_job,) = [
            j
            for j in hub.scheduler.store.jobs("reminder", active=False)
            if j.spec["what"] == "stretch"
        ]
        assert [s for _, s in hub.scheduler.store.occurrences(stretch_job.id)] == ["fired"]
    clock.advance(3 * 3600)  # down for three hours: past the post's grace (an hour)
    async with mesh.hub_in_process(clock=clock) as hub:
        await poll(lambda: hub.scheduler.stats["missed"] == 1, 10, "the missed reminder")
        stretch, missed = reminders_on_timeline(mesh)
        assert stretch == "Reminder: stretch."
        assert missed.startswith(
            "Missed while the hub was off: the reminder to check the post ("
        ), missed
        assert "Reminder: check the post." not in mac_edge.text()  # missed: not said late
        mesh.stop(mac_edge)


async def test_a_scheduled_run_that_needs_a_card_is_blocked_and_reported(mesh: Mesh) -> None:
    from tests.test_turns_mesh import prepare
    from worlds.fakes import SmtpWorld

    mac = mesh.add_device("mac1", "mac")
    phone = mesh.add_device("phone1", "phone")
    clock = TestClock()
    async with SmtpWorld() as smtp:
        prepare(mesh, smtp)
        async with mesh.hub_in_process(clock=clock) as hub:
            mac_edge = await asyncio.to_thread(mesh.start_edge, mac, hub=mesh.hub_target)
            phone_edge = await asyncio.to_thread(mesh.start_edge, phone, hub=mesh.hub_target)
            out = await mesh.say_answered(
                mac, "every Monday at 9 e-mail the meeting notes to my colleague"
            )
            assert "OK: every Monday at 9:00 am, I'll e-mail the meeting notes" in out, out
            (job,) = hub.scheduler.store.jobs("run")
            assert job.next_ms is not None
            clock.advance((job.next_ms - hub.scheduler.now_ms()) / 1000 + 1)
            blocked = "Needs you: open the companion."

            def activity() -> list[str]:
                rows = mesh.hub_query("SELECT text FROM timeline WHERE kind='activity'")
                return [str(r[0]) for r in rows]

            await poll(lambda: any(blocked in a for a in activity()), 30, "the blocked run")
            await poll(lambda: blocked in mac_edge.text(), 20, "the notice on the Mac")
            gw = hub.consent.gateway
            assert gw is not None
            assert gw.consent.pending() == []  # never a card
            assert smtp.messages() == []  # never executed
            assert "card " not in phone_edge.text()
            (run,) = [a for a in activity() if blocked in a]
            assert "e-mail the meeting notes to my colleague" in run
            again = hub.scheduler.store.get(job.id)
            assert again is not None and again.state == "pending"  # next Monday again
            assert again.next_ms is not None and again.next_ms > job.next_ms
            mesh.stop(mac_edge)
            mesh.stop(phone_edge)


async def test_an_unacked_notification_falls_back_to_the_next_device(mesh: Mesh) -> None:
    mesh.configure(notifications={"ack_deadline_s": 30, "order": ["glasses", "phone", "mac"]})
    mac = mesh.add_device("mac1", "mac")
    specs = mesh.add_device("specs", "glasses")
    phone = mesh.add_device("phone1", "phone")
    ids = {b.name: Bundle.load(b).device_id for b in (mac, specs, phone)}
    clock = TestClock()
    said = "Reminder: call the plumber."

    def sent_to() -> list[tuple[object, ...]]:
        return mesh.hub_query("SELECT device, acked FROM reply_chunks WHERE text=?", said)

    async with mesh.hub_in_process(clock=clock) as hub:
        specs_edge = await asyncio.to_thread(mesh.start_edge, specs, hub=mesh.hub_target)
        # set from the Mac, whose edge daemon is not running: nobody there ACKs
        assert "OK" in await mesh.say_answered(mac, "remind me in 5 minutes to call the plumber")
        clock.advance(5 * 60 + 1)
        await poll(lambda: sent_to(), 20, "the first attempt")
        assert sent_to() == [(ids["bundle-mac1"], None)]
        clock.advance(29)
        await hub.scheduler.run_due()
        assert len(sent_to()) == 1  # still inside the Mac's deadline
        clock.advance(2)
        await poll(lambda: said in specs_edge.text(), 20, "the fallback on the glasses")
        await poll(lambda: len([r for r in sent_to() if r[1]]) == 1, 10, "the glasses' ACK")
        assert sorted(sent_to(), key=str) == sorted(
            [(ids["bundle-mac1"], None), (ids["bundle-specs"], "rendered")], key=str
        )
        clock.advance(120)  # ACKed: the phone is never bothered
        await hub.scheduler.run_due()
        assert all(r[0] != ids["bundle-phone1"] for r in sent_to())
        mesh.stop(specs_edge)


async def test_a_timeline_watch_set_by_voice_tells_the_owner_once(mesh: Mesh) -> None:
    mac = mesh.add_device("mac1", "mac")
    mac_id = Bundle.load(mac).device_id
    async with mesh.hub_in_process(clock=TestClock()) as hub:
        mac_edge = await asyncio.to_thread(mesh.start_edge, mac, hub=mesh.hub_target)
        out = await mesh.say_answered(mac, "tell me when the timeline mentions the parcel")
        assert "OK, I'll tell you when the timeline mentions the parcel." in out, out
        await mesh.say_answered(mac, "the parcel is with the neighbour")
        told = "Watch “the parcel”: the parcel is with the neighbour"

        def delivered() -> list[tuple[object, ...]]:
            return mesh.hub_query("SELECT device, acked FROM reply_chunks WHERE text=?", told)

        # to the Mac (used last), ACKed by one of its processes (the edge, or the yimi say
        # that was waiting there)
        await poll(lambda: delivered() and delivered()[0][1], 20, "the watch's notification")
        assert delivered() == [(mac_id, "rendered")]
        (watch,) = hub.scheduler.store.jobs("watch")
        assert [s for _, s in hub.scheduler.store.occurrences(watch.id)] == ["fired"]
        assert mac_edge.text().count(told) <= 1  # its own notification is no occurrence
        mesh.stop(mac_edge)
