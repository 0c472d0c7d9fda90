"""Timers and reminders on the real mesh (issue 17): the hub in this process (mosquitto,
gRPC, the rule-based brain, the scheduler on a test clock), edge daemons and ``yimi say`` as
processes. A 20-second timer set by voice on the Mac rings on the Mac and nowhere else, and
the Mac ACKs it; reminders set in Chinese and English fire at their times across a hub
restart, once; a reminder due while the hub was down fires at start within its grace.
The clock is moved, never waited for."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from hub.mesh.daemon import HubDaemon, HubOptions
from hub.schedule import TestClock
from provisioning.bundle import Bundle
from provisioning.home import Home
from tests.mesh_harness import Mesh
from tests.waiting import poll

pytestmark = pytest.mark.slow


@asynccontextmanager
async def hub_up(mesh: Mesh, clock: TestClock) -> AsyncIterator[HubDaemon]:
    options = HubOptions(
        mqtt_port=mesh.mqtt_port,
        grpc_port=mesh.grpc_port,
        bind="127.0.0.1",
        advertise=False,
        clock=clock,
    )
    async with HubDaemon(Home.load(mesh.home), options) as hub:
        await asyncio.wait_for(hub.turns.started.wait(), 60)
        yield hub


async def say(mesh: Mesh, bundle: Path, words: str) -> str:
    r = await asyncio.to_thread(
        mesh.say, bundle, words, "--hub", mesh.hub_target, "--timeout", "60"
    )
    assert r.returncode == 0, (r.stdout, r.stderr)
    return r.stdout


RING = "Time's up: your timer for 20 seconds is done."


async def test_a_20_second_timer_rings_on_the_asking_device_only(mesh: Mesh) -> None:
    mac = mesh.add_device("mac1", "mac")
    specs = mesh.add_device("specs", "glasses")
    clock = TestClock()
    async with hub_up(mesh, clock) as hub:
        mac_edge = await asyncio.to_thread(mesh.start_edge, mac, hub=mesh.hub_target)
        specs_edge = await asyncio.to_thread(mesh.start_edge, specs, hub=mesh.hub_target)
        out = await say(mesh, mac, "Yimi, set a timer for 20 seconds")
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
        assert rows == [(mac_id, "rendered")], rows  # a device with a speaker ACKs "played"
        entries = [t for _, _, kind, t in mesh.hub_timeline() if kind == "reply"]
        assert RING in entries  # the ring is on the timeline
        assert RING not in specs_edge.text()
        mesh.stop(mac_edge)
        mesh.stop(specs_edge)
