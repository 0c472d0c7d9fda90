"""The companion's reminders over the web API (issue 17): listed with their next local time,
moved to another time (a recurring one keeps its days), cancelled; refusals are text keys
(an unknown reminder, a time passed, a session without the scope, a malformed body)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Iterator
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from nacl.signing import SigningKey

pytest.importorskip("webauthn")

from hub.schedule import JobStore, Scheduler, TestClock
from hub.schedule.reminders import ReminderDesk
from hub.timeline import HubStore
from hub.web import texts
from hub.web.app import WebApp
from hub.web.sessions import Passkeys
from provisioning.home import Home
from provisioning.pairing import issue_code
from provisioning.registry import Registry
from tests.test_web_app import Hub, call, page_link, pair, signature

TZ = "Asia/Shanghai"
NOW = dt.datetime(2026, 12, 1, 15, 0, tzinfo=ZoneInfo(TZ))


@pytest.fixture
def world(tmp_path: Any) -> Iterator[tuple[Hub, ReminderDesk, str]]:
    home = Home.init(tmp_path / "home")
    registry = Registry(home.path / "registry.db")
    store = HubStore(home.path / "hub.db")
    passkeys = Passkeys(home.path / "web.db")
    clock = TestClock(int(NOW.timestamp() * 1000) - TestClock().now_ms())
    scheduler = Scheduler(JobStore(home.path / "schedule.db"), clock=clock, tz=TZ)
    desk = ReminderDesk(scheduler)

    link = page_link(home, registry, store, passkeys, reminders=desk)
    hub = Hub(home, WebApp(link), [], [])
    key = SigningKey.generate()
    code, _ = issue_code(home)
    status, granted = pair(hub, code, "page-phone", key)
    assert status == 200, granted
    _, _, out = asyncio.run(call(hub.app, "GET", "/api/challenge"))
    challenge = json.loads(out)["challenge"]
    body = {
        "device_id": granted["device_id"],
        "challenge": challenge,
        "signature": signature(key, challenge).hex(),
    }
    _, headers, _ = asyncio.run(call(hub.app, "POST", "/api/session", json.dumps(body).encode()))
    token = headers["set-cookie"].split(";")[0].split("=", 1)[1]
    try:
        yield hub, desk, token
    finally:
        scheduler.store.close()
        passkeys.close()
        store.close()
        registry.close()


def request(hub: Hub, token: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    raw = b"" if body is None else json.dumps(body).encode()
    status, _, out = asyncio.run(call(hub.app, method, path, raw, cookie=token))
    return status, json.loads(out)


def test_reminders_listed_moved_and_cancelled_from_the_companion(
    world: tuple[Hub, ReminderDesk, str],
) -> None:
    hub, desk, token = world
    five = NOW.replace(hour=17)
    desk.add(
        "r1", device="d", what="call mum", when="today at 5:00 pm", lang="en", trace="", at=five
    )
    desk.add(
        "r2", device="d", what="吃药", when="每天上午八点", lang="zh", trace="",
        rule="FREQ=DAILY;BYHOUR=8;BYMINUTE=0;BYSECOND=0",
    )  # fmt: skip
    status, out = request(hub, token, "GET", "/api/reminders")
    assert status == 200 and out["tz"] == TZ
    assert [(r["what"], r["at"], r["recurring"]) for r in out["reminders"]] == [
        ("call mum", "2026-12-01T17:00", False),
        ("吃药", "2026-12-02T08:00", True),
    ]
    one, daily = (r["id"] for r in out["reminders"])

    status, out = request(
        hub, token, "POST", f"/api/reminders/{one}/move", {"at": "2026-12-01T18:30"}
    )
    assert status == 200, out
    assert out["reminder"]["at"] == "2026-12-01T18:30"
    assert out["reminder"]["when"] == "today at 6:30 pm"
    status, out = request(
        hub, token, "POST", f"/api/reminders/{daily}/move", {"at": "2026-12-05T07:15", "lang": "zh"}
    )
    assert status == 200, out
    assert out["reminder"]["at"] == "2026-12-02T07:15"  # every day, now at 7:15
    assert out["reminder"]["when"] == "每天上午七点十五分"
    job = desk.scheduler.store.get(daily)
    assert job is not None and job.rule == "FREQ=DAILY;BYHOUR=7;BYMINUTE=15;BYSECOND=0"

    assert request(
        hub, token, "POST", f"/api/reminders/{one}/move", {"at": "2026-12-01T09:00"}
    ) == (
        400,
        {"error": "web.reminder_past", "fields": {"at": "2026-12-01T09:00"}},
    )
    for bad in ({}, {"at": 5}, {"at": "tomorrow"}):
        status, out = request(hub, token, "POST", f"/api/reminders/{one}/move", bad)
        assert (status, out["error"]) == (400, "web.bad_request"), bad
    status, out = request(hub, token, "POST", f"/api/reminders/{one}/cancel", {})
    assert (status, out) == (200, {"cancelled": one})
    status, out = request(hub, token, "POST", f"/api/reminders/{one}/cancel", {})
    assert (status, out["error"]) == (404, "web.reminder_unknown")
    status, out = request(hub, token, "GET", "/api/reminders")
    assert [r["what"] for r in out["reminders"]] == ["吃药"]
    status, out = request(hub, "", "GET", "/api/reminders")
    assert (status, out["error"]) == (401, "web.session_required")
    for key in ("web.reminder_unknown", "web.reminder_past", "web.reminders_off"):
        assert key in texts.TEXTS
