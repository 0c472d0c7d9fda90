"""The slot lists are read one at a time: a request that arrives while the hub's start-up read
runs (the home and errands packages starting) waits for that read instead of starting another."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from hub.brain.slots import Device, LiveSlots
from hub.turns.context import FileContacts


class CountingGateway:
    """Stands in for the gateway: ``home.list_devices`` and ``errands.list_shops`` answer once
    ``release`` is set, each call counted."""

    def __init__(self) -> None:
        self.catalog = {
            "home": SimpleNamespace(tools={"list_devices": None}),
            "errands": SimpleNamespace(tools={"list_shops": None}),
        }
        self.calls: list[str] = []
        self.release = asyncio.Event()
        self.asked = asyncio.Event()

    async def call(self, call: Any, ctx: Any) -> Any:
        self.calls.append(f"{call.package}.{call.tool}")
        self.asked.set()
        await self.release.wait()
        return SimpleNamespace(status="succeeded", effects=[], values=[], error=None)


async def test_a_read_asked_during_another_waits_for_it_and_reads_nothing_more() -> None:
    gw = CountingGateway()
    live = LiveSlots(gw)  # type: ignore[arg-type]
    first = asyncio.create_task(live.refresh(), name="warm-up")
    await asyncio.wait_for(gw.asked.wait(), 5)
    second = asyncio.create_task(live.recognize("back online"), name="a first turn")
    gw.release.set()
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert sorted(gw.calls) == ["errands.list_shops", "home.list_devices"]  # one read
    assert second.result() is None  # not understood, answered at once after the read

    # read just now: a request not understood reads again only after RETRY_S
    assert await live.recognize("still nothing") is None
    assert len(gw.calls) == 2


class DownGateway(CountingGateway):
    """``errands.list_shops`` fails (its shop service is down) until ``up`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release.set()
        self.up = False

    async def call(self, call: Any, ctx: Any) -> Any:
        if call.package == "errands" and not self.up:
            raise ConnectionRefusedError(111, "Connection refused")
        return await super().call(call, ctx)


async def test_a_read_that_keeps_failing_the_same_way_is_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gw = DownGateway()
    live = LiveSlots(gw)  # type: ignore[arg-type]
    with caplog.at_level(logging.DEBUG, logger="hub.brain.slots"):
        for _ in range(3):
            await live._refresh()
        gw.up = True
        await live._refresh()
    shops = [r for r in caplog.records if "errands.list_shops" in r.getMessage()]
    assert [r.levelno for r in shops] == [
        logging.WARNING,
        logging.DEBUG,
        logging.DEBUG,
        logging.INFO,
    ]
    assert "Connection refused" in shops[0].getMessage()
    assert "read again" in shops[-1].getMessage()


def test_the_named_lists_are_made_again_only_when_contacts_or_devices_change(
    tmp_path: Path,
) -> None:
    """Asked before every request, the lists are made from the address book and the devices
    only when either changed: a thousand contacts are not named again every turn, and an
    edit of ``contacts.yaml`` or a new device listing is taken at once."""
    book = tmp_path / "contacts.yaml"
    people = [{"name": f"Person{i} Example", "email": f"p{i}@example.org"} for i in range(1000)]
    book.write_text(yaml.safe_dump(people))
    live = LiveSlots(CountingGateway(), contacts=FileContacts(book))  # type: ignore[arg-type]
    first = live.slot_lists()
    assert len(first.contacts) == 1000
    again = live.slot_lists()
    assert again == first and again.contacts is first.contacts  # not made again

    book.write_text(yaml.safe_dump([*people, {"name": "Dana Reyes", "email": "d@example.org"}]))
    os.utime(book, ns=(time.time_ns(), time.time_ns() + 1_000_000_000))  # a new stamp
    edited = live.slot_lists()
    assert [c.value for c in edited.contacts][-1] == "Dana Reyes"
    assert edited.devices == () and edited.contacts is not first.contacts

    live.devices = [Device("light.desk", "desk lamp", "light", "study")]
    listed = live.slot_lists()
    assert [d.value for d in listed.devices] == ["light.desk"]
    assert [a.value for a in listed.areas] == ["study"]
    assert listed.contacts is edited.contacts  # the address book did not change
    assert live.engine is not None and live.engine.recognize("turn on the desk lamp") is None
    live._update()  # what recognize() does first: the engine takes the new lists
    match = live.engine.recognize("turn on the desk lamp")
    assert match is not None and match.slots.get("name") == "light.desk", match
