"""The slot lists are read one at a time: a request that arrives while the hub's start-up read
runs (the home and errands packages starting) waits for that read instead of starting another."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from hub.brain.slots import LiveSlots


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
