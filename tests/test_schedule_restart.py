"""Reminders across restarts of a real hub *process* (issue 17): ``yimi hub run`` on the
test clock of ``YIMI_TEST_CLOCK`` (a file this test moves), an edge daemon and ``yimi say``
as processes. A reminder set in English and one set in Chinese fire at their times — the
English one due while the hub was down fires on start inside its grace — and neither fires
twice across three hub processes. The clock is moved, never waited for."""

from __future__ import annotations

import asyncio

import pytest

from hub.schedule.clock import CLOCK_ENV, advance_file
from provisioning.bundle import Bundle
from storage.sqlite import read_rows
from tests.mesh_harness import Mesh
from tests.waiting import poll

pytestmark = pytest.mark.slow


def due_in_s(mesh: Mesh, what: str, offset_ms: int) -> float:
    import time

    rows = read_rows(
        mesh.home / "schedule.db",
        "SELECT next_ms, spec FROM jobs WHERE kind='reminder' AND state='pending'",
    )
    (next_ms,) = [int(str(n)) for n, spec in rows if what in str(spec)]
    return (next_ms - (time.time() * 1000 + offset_ms)) / 1000


async def test_reminders_fire_once_across_hub_process_restarts(mesh: Mesh) -> None:
    clock = mesh.root / "clock"
    clock.write_text("0")
    mesh.env[CLOCK_ENV] = str(clock)
    mesh.configure(timezone="Asia/Shanghai")
    mac = mesh.add_device("mac1", "mac")
    mac_id = Bundle.load(mac).device_id
    hub = await asyncio.to_thread(mesh.start_hub)
    mac_edge = await asyncio.to_thread(mesh.start_edge, mac, hub=mesh.hub_target)
    out = await mesh.say_answered(mac, "remind me in 10 minutes to call mum")
    assert "to call mum." in out, out
    out = await mesh.say_answered(mac, "明天早上八点提醒我吃药")
    assert "明天上午八点提醒你吃药" in out, out
    assert "the scheduler runs on the test clock" in hub.text()
    assert mesh.stop(hub) == 0

    # down for 11 minutes: "call mum" came due meanwhile, inside its grace
    advance_file(clock, 11 * 60)
    hub = await asyncio.to_thread(mesh.start_hub)
    await poll(lambda: "hub: Reminder: call mum." in mac_edge.text(), 30, "call mum on start")
    zh_in = due_in_s(mesh, "吃药", int(clock.read_text()))
    assert 0 < zh_in <= 32 * 3600
    assert mesh.stop(hub) == 0

    hub = await asyncio.to_thread(mesh.start_hub)
    advance_file(clock, zh_in + 1)
    await poll(lambda: "hub: 提醒：吃药。" in mac_edge.text(), 30, "吃药 at eight")
    assert mesh.stop(hub) == 0

    hub = await asyncio.to_thread(mesh.start_hub)  # and once more: nothing fires again
    advance_file(clock, 120)

    def settled() -> bool:  # the ACK checks of the notifications ran: nothing is left
        pending = read_rows(mesh.home / "schedule.db", "SELECT id FROM jobs WHERE state='pending'")
        rows = read_rows(mesh.home / "schedule.db", "SELECT state FROM occurrences")
        return not pending and all(r[0] != "firing" for r in rows)

    await poll(settled, 20, "every job done")
    for what in ("call mum", "吃药"):
        (job,) = read_rows(
            mesh.home / "schedule.db",
            "SELECT id FROM jobs WHERE kind='reminder' AND spec LIKE ?",
            f"%{what}%",
        )
        fired = read_rows(
            mesh.home / "schedule.db", "SELECT state FROM occurrences WHERE job_id=?", job[0]
        )
        assert fired == [("fired",)], fired
    for said in ("Reminder: call mum.", "提醒：吃药。"):
        sent = mesh.hub_query("SELECT device, acked FROM reply_chunks WHERE text=?", said)
        assert sent == [(mac_id, "rendered")], sent
        assert mac_edge.text().count(f"hub: {said}") == 1
    reminders = [t for _, _, kind, t in mesh.hub_timeline() if kind == "reminder"]
    assert reminders == ["Reminder: call mum.", "提醒：吃药。"]
    mesh.stop(hub)
    mesh.stop(mac_edge)
