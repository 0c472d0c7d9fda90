"""A hub's stop begins with withdrawing its mDNS advert (zeroconf's goodbyes take a quarter
of a second): the withdrawal runs alongside the rest of the stop, not after the turns and
the gateway have stopped, and the stop still ends with it done."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from hub.gateway.courier import MeshConsent
from hub.mesh.daemon import HubDaemon, HubOptions
from provisioning.home import Home
from sync import discovery
from tests.mesh_harness import Mesh
from tests.waiting import poll

pytestmark = pytest.mark.slow


async def test_the_advert_is_withdrawn_as_the_stop_begins(
    mesh: Mesh, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("YIMI_MDNS_INTERFACES", "127.0.0.1")
    caplog.set_level(logging.INFO, logger="sync.discovery")
    events: list[str] = []
    close = discovery.HubAdvertiser.close
    consent_exit = MeshConsent.__aexit__

    async def closing(self: discovery.HubAdvertiser) -> None:
        events.append("withdrawing the advert")
        await close(self)
        events.append("advert withdrawn")

    async def consent_stopping(self: MeshConsent, *exc: Any) -> None:
        events.append("the gateway stopping")
        await consent_exit(self, *exc)

    monkeypatch.setattr(discovery.HubAdvertiser, "close", closing)
    monkeypatch.setattr(MeshConsent, "__aexit__", consent_stopping)
    opts = HubOptions(
        mqtt_port=mesh.mqtt_port, grpc_port=mesh.grpc_port, bind="127.0.0.1", advertise=True
    )
    async with HubDaemon(Home.load(mesh.home), opts) as hub:
        await asyncio.wait_for(hub.turns.started.wait(), 60)
        await poll(lambda: "advertising hub" in caplog.text, 30, "the advert registered")
    assert events[0] == "withdrawing the advert", events  # before the gateway began to stop
    assert sorted(events) == ["advert withdrawn", "the gateway stopping", "withdrawing the advert"]
    assert "withdrew mDNS advert" in caplog.text
