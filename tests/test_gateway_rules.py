"""The gateway's rules, proven with real packages over MCP stdio (messaging against a real
local SMTP server, home against a real mosquitto with Home Assistant-style devices, and
the test package ``probe`` for misbehaving servers)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from hub.capabilities.host import ToolOutcome
from hub.gateway import CallContext, guarded
from hub.gateway.errors import GatewayError
from hub.gateway.facts import check_reply
from hub.gateway.receipts import (
    INVALID_RECEIPT,
    SELF_CONTRADICTION,
    VALUE_WITHOUT_UNIT,
    WROTE_REJECTED,
)
from protos import consent_pb2
from tests.gateway_kit import OWNER, Phone, RecordingCourier, call, gateway
from tests.waiting import poll
from worlds.fakes import MqttHomeWorld, SmtpWorld


def email(to: str, body: str = "See you at noon.", asked: bool = True) -> dict[str, Any]:
    return {"to": to, "subject": "Lunch", "body": body, "owner_requested": asked}


# ---------------------------------------------------------------- send / first-send memory
async def test_first_send_asks_same_recipient_again_does_not_new_recipient_asks(
    tmp_path: Path,
) -> None:
    courier, phone = RecordingCourier(), Phone()
    async with (
        SmtpWorld() as smtp,
        gateway(tmp_path, "messaging", env=smtp.env(), courier=courier) as gw,
    ):
        first = await gw.call(
            call("messaging", "send_email", email("ann@example.org"), "c1"), OWNER
        )
        assert first.status == "waiting" and first.card_id
        assert smtp.messages() == [], "nothing leaves before the owner's card"
        assert [c.card_id for c in courier.shown] == [first.card_id]
        card = courier.shown[0]
        assert (card.effect, card.target) == ("send", "ann@example.org")
        assert "See you at noon." in card.preview and card.expires_ms > card.created_ms

        ans, done = await phone.answer(gw, phone.sign(card))
        assert ans.outcome == "approved" and done is not None
        assert done.status == "succeeded" and done.revision == 1
        assert [m.recipients for m in smtp.messages()] == [["ann@example.org"]]

        # the same kind of message to the same recipient, asked by the owner: no card
        again = await gw.call(
            call("messaging", "send_email", email("ann@example.org", "Running late."), "c2", "t2"),
            OWNER,
        )
        assert again.status == "succeeded", again
        assert len(courier.shown) == 1 and len(smtp.messages()) == 2

        # a new recipient asks again
        other = await gw.call(
            call("messaging", "send_email", email("bob@example.org"), "c3", "t3"), OWNER
        )
        assert other.status == "waiting" and len(courier.shown) == 2
        assert len(smtp.messages()) == 2

        # a send the owner did not ask for asks even for a known recipient
        unasked = await gw.call(
            call(
                "messaging", "send_email", email("ann@example.org", "FYI", asked=False), "c4", "t4"
            ),
            OWNER,
        )
        assert unasked.status == "waiting" and len(smtp.messages()) == 2


async def test_duplicate_after_success_with_retry_forbidden_is_blocked(tmp_path: Path) -> None:
    async with SmtpWorld() as smtp, gateway(tmp_path, "messaging", env=smtp.env()) as gw:
        gw.consent.remember_send("owner", "ann@example.org", "email")
        ok = await gw.call(call("messaging", "send_email", email("ann@example.org"), "c1"), OWNER)
        assert ok.status == "succeeded" and ok.next.retry == "forbidden"
        dup = await gw.call(call("messaging", "send_email", email("ann@example.org"), "c2"), OWNER)
        assert dup.status == "rejected" and "retry is forbidden" in dup.error
        assert len(smtp.messages()) == 1
        # the same call id again is the recorded receipt, not a second send
        same = await gw.call(call("messaging", "send_email", email("ann@example.org"), "c1"), OWNER)
        assert same.status == "succeeded" and len(smtp.messages()) == 1
        # in another task the same message is a new action
        other = await gw.call(
            call("messaging", "send_email", email("ann@example.org"), "c1", "t2"), OWNER
        )
        assert other.status == "succeeded" and len(smtp.messages()) == 2


async def test_timeout_is_unknown_and_check_with_must_run_before_any_retry(
    tmp_path: Path,
) -> None:
    async with (
        SmtpWorld(delay=2.5) as smtp,
        gateway(tmp_path, "messaging", env={**smtp.env(), "YIMI_SMTP_TIMEOUT": "0.5"}) as gw,
    ):
        gw.consent.remember_send("owner", "ann@example.org", "email")
        r = await gw.call(call("messaging", "send_email", email("ann@example.org"), "c1"), OWNER)
        assert r.status == "unknown", r
        assert r.next.retry == "forbidden" and r.next.check_with == "find_sent"
        assert "uncertain_failure" in r.violations
        smtp.delay = 0
        for cid in ("c1", "c2"):  # neither the same call nor a new one may run yet
            blocked = await gw.call(
                call("messaging", "send_email", email("ann@example.org"), cid), OWNER
            )
            assert blocked.status in ("unknown", "rejected")
            if cid == "c2":
                assert blocked.status == "rejected" and "run find_sent" in blocked.error
        check = await gw.call(
            call("messaging", "find_sent", {"to": "ann@example.org", "subject": "Lunch"}, "c3"),
            OWNER,
        )
        assert check.status == "succeeded"
        assert any("without a reply" in u for u in check.unknowns)
        retry = await gw.call(
            call("messaging", "send_email", email("ann@example.org"), "c4"), OWNER
        )
        assert retry.status == "succeeded", retry


async def test_host_timeout_is_unknown_and_needs_its_check(tmp_path: Path) -> None:
    async with gateway(tmp_path, "probe") as gw:
        r = await gw.call(call("probe", "slow", {"seconds": 10}, "c1"), OWNER)
        assert r.status == "unknown" and r.next.check_with == "echo"
        again = await gw.call(call("probe", "slow", {"seconds": 0}, "c2"), OWNER)
        assert again.status == "rejected" and "run echo" in again.error
        assert (await gw.call(call("probe", "echo", {}, "c3"), OWNER)).status == "succeeded"
        assert (
            await gw.call(call("probe", "slow", {"seconds": 0}, "c4"), OWNER)
        ).status == "succeeded"


# ---------------------------------------------------------------- owner_data, scopes, effects
async def test_unrequested_owner_data_asks_requested_runs(tmp_path: Path) -> None:
    courier, phone = RecordingCourier(), Phone()
    async with gateway(tmp_path, "probe", courier=courier) as gw:
        notes = tmp_path / "package-state" / "notes.jsonl"
        r = await gw.call(call("probe", "save_note", {"title": "a", "text": "x"}, "c1"), OWNER)
        assert r.status == "waiting" and not notes.exists()
        asked = await gw.call(
            call("probe", "save_note", {"title": "b", "text": "y", "owner_requested": True}, "c2"),
            OWNER,
        )
        assert asked.status == "succeeded"
        assert notes.read_text().count("\n") == 1
        ans, done = await phone.answer(gw, phone.sign(courier.shown[0]))
        assert ans.outcome == "approved" and done is not None and done.status == "succeeded"
        assert notes.read_text().count("\n") == 2


async def test_effect_by_arg_without_mapping_is_blocked(tmp_path: Path) -> None:
    async with gateway(tmp_path, "probe") as gw:
        ok = await gw.call(call("probe", "mode", {"action": "read"}, "c1"), OWNER)
        assert ok.status == "succeeded" and ok.effect == "observe"
        asks = await gw.call(call("probe", "mode", {"action": "write"}, "c2"), OWNER)
        assert asks.status == "waiting" and asks.effect == "owner_data"
        blocked = await gw.call(call("probe", "mode", {"action": "format_disk"}, "c3"), OWNER)
        assert blocked.status == "rejected" and "no effect is declared" in blocked.error


async def test_scheduled_run_never_shows_a_card(tmp_path: Path) -> None:
    courier = RecordingCourier()
    async with gateway(tmp_path, "probe", courier=courier) as gw:
        ctx = replace(OWNER, scheduled=True)
        r = await gw.call(call("probe", "save_note", {"title": "a", "text": "x"}, "c1"), ctx)
        assert r.status == "rejected" and "scheduled" in r.error and courier.shown == []


async def test_scope_is_checked_first(tmp_path: Path) -> None:
    async with gateway(tmp_path, "probe") as gw:
        guest = CallContext(owner="owner", scope="guest")
        r = await gw.call(call("probe", "echo", {}, "c1"), guest)
        assert r.status == "rejected" and "scope 'guest'" in r.error
        unknown = await gw.call(call("probe", "nope", {}, "c2"), OWNER)
        assert unknown.status == "rejected" and "no tool" in unknown.error


async def test_trusted_fields_overwrite_and_owner_requested_is_stripped(tmp_path: Path) -> None:
    async with gateway(tmp_path, "probe") as gw:
        c = call(
            "probe",
            "echo",
            {"text": "hi", "owner_requested": True, "idempotency_key": "model-made"},
            "c1",
        )
        d = await gw.decide(c, OWNER)
        assert d.outcome == "rewrite" and "owner_requested" not in d.args
        assert d.args["idempotency_key"] != "model-made"
        assert gw.host is not None
        r = await gw.receipt(c, OWNER, d, await gw.host.call("probe", "echo", d.args))
        got = r.effects[0].fields["received"]
        # deciding the same call id again never runs it again
        assert (await gw.call(c, OWNER)).content() == r.content()
        assert got["owner_requested"] is None, "the tool never sees owner_requested"
        assert got["idempotency_key"] == d.args["idempotency_key"]


# ---------------------------------------------------------------- receipt invariants
async def test_package_writing_rejected_gets_unknown(tmp_path: Path) -> None:
    async with gateway(tmp_path, "probe") as gw:
        r = await gw.call(call("probe", "claim_rejected", {}, "c1"), OWNER)
        assert r.status == "unknown" and WROTE_REJECTED in r.violations


async def test_not_a_receipt_is_unknown(tmp_path: Path) -> None:
    async with gateway(tmp_path, "probe") as gw:
        r = await gw.call(call("probe", "garbage", {}, "c1"), OWNER)
        assert r.status == "unknown" and INVALID_RECEIPT in r.violations


async def test_success_with_unverified_effects_is_downgraded(tmp_path: Path) -> None:
    async with gateway(tmp_path, "probe") as gw:
        r = await gw.call(call("probe", "overclaim", {}, "c1"), OWNER)
        assert r.status == "partial" and SELF_CONTRADICTION in r.violations


async def test_value_without_unit_is_flagged(tmp_path: Path) -> None:
    async with gateway(tmp_path, "probe") as gw:
        r = await gw.call(call("probe", "unitless", {}, "c1"), OWNER)
        assert VALUE_WITHOUT_UNIT in r.violations and r.values[0].flagged == "no unit"
        assert any("without a unit" in u for u in r.unknowns)
        # the flagged value is never rendered as a fact, and a reply quoting it loses nothing
        # it could be checked against
        checked = check_reply("It is 21.5 degrees.", [r])
        assert "temperature: 21.5" not in checked.text


async def test_home_sensor_without_unit_is_flagged_and_device_rules(tmp_path: Path) -> None:
    devices = [
        {"component": "sensor", "object_id": "humidity", "name": "Humidity", "state": "40"},
        {
            "component": "sensor",
            "object_id": "temp",
            "name": "Temperature",
            "state": "21.5",
            "unit": "°C",
        },
        {
            "component": "light",
            "object_id": "hall",
            "name": "Hall light",
            "state": "OFF",
            "command": True,
        },
        {
            "component": "light",
            "object_id": "broken",
            "name": "Broken light",
            "state": "OFF",
            "command": True,
        },
        {
            "component": "lock",
            "object_id": "front",
            "name": "Front door",
            "state": "LOCKED",
            "command": True,
        },
    ]
    courier = RecordingCourier()
    async with (
        MqttHomeWorld(devices=devices, deaf={"light.broken"}) as world,
        gateway(
            tmp_path, "home", env={**world.env(), "YIMI_CONFIRM_TIMEOUT": "1"}, courier=courier
        ) as gw,
    ):
        hum = await gw.call(call("home", "get_state", {"entity": "sensor.humidity"}, "c1"), OWNER)
        assert VALUE_WITHOUT_UNIT in hum.violations
        temp = await gw.call(call("home", "get_state", {"entity": "sensor.temp"}, "c2"), OWNER)
        assert temp.status == "succeeded" and not temp.violations
        assert (temp.values[0].value, temp.values[0].unit) == (21.5, "°C")
        # locks are read-only: blocked by the gateway, never commanded
        lock = await gw.call(
            call(
                "home",
                "set_state",
                {"entity": "lock.front", "state": "off", "owner_requested": True},
                "c3",
            ),
            OWNER,
        )
        assert lock.status == "rejected" and "read-only" in lock.error
        assert world.devices is not None and world.devices.commands == []
        # unrequested physical: a card
        ask = await gw.call(
            call("home", "set_state", {"entity": "light.hall", "state": "on"}, "c4"), OWNER
        )
        assert ask.status == "waiting" and world.devices.commands == []
        # requested: runs, and the device's own report verifies it
        on = await gw.call(
            call(
                "home",
                "set_state",
                {"entity": "light.hall", "state": "on", "owner_requested": True},
                "c5",
                "t2",
            ),
            OWNER,
        )
        assert on.status == "succeeded" and on.effects[0].state == "verified", on
        assert world.devices.commands == [("light.hall", "ON")]
        # a device that does not confirm: the package's "succeeded" becomes unknown
        deaf = await gw.call(
            call(
                "home",
                "set_state",
                {"entity": "light.broken", "state": "on", "owner_requested": True},
                "c6",
                "t3",
            ),
            OWNER,
        )
        assert deaf.status == "unknown" and SELF_CONTRADICTION in deaf.violations
        again = await gw.call(
            call(
                "home",
                "set_state",
                {"entity": "light.broken", "state": "on", "owner_requested": True},
                "c7",
                "t3",
            ),
            OWNER,
        )
        assert again.status == "rejected" and "run get_state" in again.error


# ---------------------------------------------------------------- gateway unreachable
async def test_gateway_down_before_means_not_executed_after_means_not_verified(
    tmp_path: Path,
) -> None:
    async with SmtpWorld() as smtp, gateway(tmp_path, "messaging", env=smtp.env()) as gw:
        gw.consent.remember_send("owner", "ann@example.org", "email")
        gw.close()  # the gateway is gone
        ran: list[dict[str, Any]] = []

        async def execute(args: dict[str, Any]) -> ToolOutcome:
            ran.append(args)
            assert gw.host is not None
            return await gw.host.call("messaging", "send_email", args)

        r = await guarded(
            gw, call("messaging", "send_email", email("ann@example.org"), "c1"), OWNER, execute
        )
        assert r.status == "not_executed" and "not executed" in r.error
        assert ran == [] and smtp.messages() == []
        assert "Not executed" in r.summary

        gw.closed = False

        async def execute_then_lose_gateway(args: dict[str, Any]) -> ToolOutcome:
            out = await execute(args)
            gw.close()
            return out

        r2 = await guarded(
            gw,
            call("messaging", "send_email", email("ann@example.org"), "c2"),
            OWNER,
            execute_then_lose_gateway,
        )
        assert r2.status == "unknown" and r2.error == "result not verified"
        assert len(smtp.messages()) == 1, "it did run; the result is just not verified"


# ---------------------------------------------------------------- ledger
async def test_ledger_is_idempotent_conflicts_on_other_content_and_takes_revisions(
    tmp_path: Path,
) -> None:
    async with gateway(tmp_path, "probe") as gw:
        c = call("probe", "echo", {"text": "a"}, "c1")
        d1 = await gw.decide(c, OWNER)
        d2 = await gw.decide(c, OWNER)
        assert d1.args == d2.args and d1.action_hash == d2.action_hash
        with pytest.raises(GatewayError) as err:
            await gw.decide(call("probe", "echo", {"text": "b"}, "c1"), OWNER)
        assert err.value.key == "ledger.conflict"
        assert gw.host is not None
        r1 = await gw.receipt(c, OWNER, d1, await gw.host.call("probe", "echo", d1.args))
        r2 = await gw.receipt(c, OWNER, d1, await gw.host.call("probe", "echo", d1.args))
        assert r1.content() == r2.content(), "the same receipt again is the recorded one"
        assert (await gw.call(c, OWNER)).content() == r1.content()
        other = ToolOutcome(structured={"receipt_version": 1, "status": "failed"})
        with pytest.raises(GatewayError):
            await gw.receipt(c, OWNER, d1, other)
        # a long task: strictly increasing revisions replace the record
        p = call("probe", "progress", {"step": 1}, "p1")
        dp = await gw.decide(p, OWNER)
        assert gw.host is not None
        for step in (1, 2, 3):
            out = await gw.host.call("probe", "progress", {"step": step})
            r = await gw.receipt(p, OWNER, dp, out)
            assert r.revision == step
        assert r.status == "succeeded"
        with pytest.raises(GatewayError):  # an older revision never comes back
            await gw.receipt(p, OWNER, dp, await gw.host.call("probe", "progress", {"step": 2}))


async def test_host_starts_lazily_and_reclaims_idle_servers(tmp_path: Path) -> None:
    from hub.capabilities.host import PackageHost
    from hub.capabilities.manifest import load
    from tests.gateway_kit import PACKAGES

    m = load(PACKAGES["probe"])
    m = replace(m, runtime=replace(m.runtime, idle_reclaim_s=1))
    async with PackageHost({"probe": m}, env_for=lambda *_: {"YIMI_STATE_DIR": str(tmp_path)}) as h:
        assert h.running() == [] and h.starts == 0
        await h.call("probe", "echo", {})
        assert h.running() == ["probe"] and h.starts == 1
        await asyncio.wait_for(h.ended("probe"), timeout=10)
        assert h.running() == [], "an idle server is reclaimed"
        out = await h.call("probe", "echo", {})
        assert out.structured and h.starts == 2


async def test_a_server_in_use_is_not_reclaimed_and_one_left_idle_is(tmp_path: Path) -> None:
    """Calls do not wake the idle watcher each time: it reads the last use when its own
    deadline comes, so a server called more often than its idle time stays up."""
    from hub.capabilities.host import PackageHost
    from hub.capabilities.manifest import load
    from tests.gateway_kit import PACKAGES

    m = load(PACKAGES["probe"])
    m = replace(m, runtime=replace(m.runtime, idle_reclaim_s=1))
    async with PackageHost({"probe": m}, env_for=lambda *_: {"YIMI_STATE_DIR": str(tmp_path)}) as h:
        await h.call("probe", "echo", {})
        started = time.monotonic()
        while time.monotonic() - started < 2.5:  # in use for 2.5 idle times
            await asyncio.sleep(0.3)  # the workload's pace, not a wait for an event
            out = await h.call("probe", "echo", {})
            assert out.structured, out.text
        assert h.running() == ["probe"] and h.starts == 1, "reclaimed while in use"
        left = time.monotonic()
        await asyncio.wait_for(h.ended("probe"), timeout=10)
        assert time.monotonic() - left >= 0.9, "reclaimed before its idle time"
        assert h.running() == [] and h.starts == 1


async def test_a_changed_environment_restarts_the_server_after_its_calls(tmp_path: Path) -> None:
    """The owner switches the brain to a cloud model: packages that were started for a local
    one are restarted with the new environment; a call still running on the old server
    finishes there."""
    from hub.capabilities.host import PackageHost
    from hub.capabilities.manifest import load
    from tests.gateway_kit import PACKAGES

    env = {"YIMI_STATE_DIR": str(tmp_path), "YIMI_MODEL_LOCATION": "local"}

    def location(out: ToolOutcome) -> str:
        assert out.structured is not None, out.text
        return str(out.structured["effects"][0]["fields"]["received"]["model_location"])

    async with PackageHost({"probe": load(PACKAGES["probe"])}, env_for=lambda *_: dict(env)) as h:
        assert location(await h.call("probe", "echo", {})) == "local"
        running = asyncio.create_task(h.call("probe", "slow", {"seconds": 1.0}), name="slow")
        await poll(lambda: any(s.inflight for s in h._servers.values()), 10)  # slow holds it
        env["YIMI_MODEL_LOCATION"] = "cloud"
        assert location(await h.call("probe", "echo", {})) == "cloud"
        assert h.starts == 2
        slow = await asyncio.wait_for(running, 10)
        assert not slow.is_error, slow.text  # finished on the retired server
        assert location(await h.call("probe", "echo", {})) == "cloud" and h.starts == 2
        assert h.running() == ["probe"]


async def test_denied_card_is_cancelled(tmp_path: Path) -> None:
    courier, phone = RecordingCourier(), Phone()
    async with gateway(tmp_path, "probe", courier=courier) as gw:
        r = await gw.call(call("probe", "save_note", {"title": "a", "text": "x"}, "c1"), OWNER)
        ans, done = await phone.answer(gw, phone.sign(courier.shown[0], consent_pb2.DENY))
        assert ans.outcome == "denied" and done is not None and done.status == "cancelled"
        assert r.card_id and courier.updates[-1].state == consent_pb2.DENIED
        assert not (tmp_path / "package-state" / "notes.jsonl").exists()


async def test_waiting_call_does_not_hold_up_the_rest_of_the_batch(tmp_path: Path) -> None:
    """One call waits for the owner; the others of the same task run at once."""
    courier = RecordingCourier()
    async with gateway(tmp_path, "probe", courier=courier) as gw:
        batch = [
            call("probe", "save_note", {"title": "a", "text": "x"}, "c1"),
            call("probe", "echo", {"text": "hi"}, "c2"),
            call("probe", "mode", {"action": "read"}, "c3"),
        ]
        receipts = await asyncio.gather(*(gw.call(c, OWNER) for c in batch))
        assert [r.status for r in receipts] == ["waiting", "succeeded", "succeeded"]
        assert len(courier.shown) == 1


async def test_observe_adds_missing_facts_until_they_are_delivered(tmp_path: Path) -> None:
    async with gateway(tmp_path, "probe") as gw:
        r = await gw.call(call("probe", "progress", {"step": 3}, "c1"), OWNER)
        assert r.status == "succeeded" and r.new_facts and not r.said_facts
        checked = await gw.observe("t1", "All done. It is at 50 %.")
        assert any("50 %" in s for s, _ in checked.removed), checked
        assert "done: 99 %." in checked.text
        gw.delivered("t1", [r])
        again = await gw.observe("t1", "Anything else?")
        assert again.added == [] and again.text == "Anything else?"
        r2 = await gw.call(call("probe", "progress", {"step": 3}, "c1"), OWNER)
        assert r2.said_facts and not r2.new_facts


async def test_first_send_memory_is_per_owner_recipient_and_task_type(tmp_path: Path) -> None:
    async with gateway(tmp_path) as gw:
        c = gw.consent
        c.remember_send("owner", "Ann@Example.org", "email")
        assert not c.required(
            "send", owner_requested=True, owner="owner", target="ann@example.org", task_type="email"
        )
        assert c.required(
            "send",
            owner_requested=True,
            owner="owner",
            target="ann@example.org",
            task_type="invoice",
        )
        assert c.required(
            "send",
            owner_requested=True,
            owner="guest2",
            target="ann@example.org",
            task_type="email",
        )
        assert c.required(
            "send",
            owner_requested=False,
            owner="owner",
            target="ann@example.org",
            task_type="email",
        )
        assert not c.required(
            "observe", owner_requested=False, owner="owner", target="", task_type="x"
        )


async def test_dedicated_host_gives_each_task_its_own_server(tmp_path: Path) -> None:
    from hub.capabilities.host import PackageHost
    from hub.capabilities.manifest import load
    from tests.gateway_kit import PACKAGES

    m = load(PACKAGES["probe"])
    m = replace(m, runtime=replace(m.runtime, host="dedicated"))
    async with PackageHost({"probe": m}, env_for=lambda *_: {"YIMI_STATE_DIR": str(tmp_path)}) as h:
        await h.call("probe", "echo", {}, task_id="a")
        await h.call("probe", "echo", {}, task_id="a")
        await h.call("probe", "echo", {}, task_id="b")
        assert h.starts == 2


async def test_an_existing_mcp_server_is_wrapped_by_a_manifest_alone(tmp_path: Path) -> None:
    """No receipts from a third-party server: its text reaches the model as output, but it
    states no fact — the call is ``unknown`` (not a valid receipt)."""
    from hub.gateway import open_gateway
    from tests.gateway_kit import REPO

    async with open_gateway(tmp_path, packages=[REPO / "tests" / "packages" / "wrapped"]) as gw:
        r = await gw.call(call("weather", "forecast", {"city": "Lisbon"}, "c1"), OWNER)
        assert r.status == "unknown" and INVALID_RECEIPT in r.violations
        assert r.output == "Lisbon: sunny, 24 °C"
        checked = check_reply("Tomorrow in Lisbon: sunny, 24 °C.", [r])
        assert not checked.removed, "untrusted output is not a fact, nor a contradiction"
