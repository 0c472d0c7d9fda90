"""Payments over the real mesh: the hub (in this process, with its real mosquitto, gRPC,
gateway and payment authority over the real ``errands`` package and the sandbox provider)
sends a payment card to the phone; ``yimi pay approve --bundle PHONE`` answers it with the
phone's key and its (FAKE) lock sensor's state; the hub pays once; ``yimi pay list|show``
and ``yimi audit verify`` on the home."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import yaml

from hub.brain.base import Turn, collect
from hub.capabilities.settings import only
from hub.gateway import CallContext, ToolCall
from hub.mesh.daemon import HubDaemon, HubOptions
from hub.payments import PaymentRequest, VoiceEvidence
from packages.errands.sandbox import SandboxShop
from provisioning.bundle import Bundle
from provisioning.home import Home
from tests.mesh_harness import Mesh
from tests.pay_kit import now_ms
from tests.waiting import poll

pytestmark = pytest.mark.slow


def hub_using(mesh: Mesh, shop: SandboxShop) -> HubDaemon:
    """The mesh's hub, in this process on loopback, with the errands package pointed at
    ``shop``."""
    (mesh.home / "packages.yaml").write_text(
        yaml.safe_dump(
            only({"errands": {"config": {"PROVIDER_URL": shop.url, "PAY_TIMEOUT": "2"}}})
        )
    )
    options = HubOptions(
        mqtt_port=mesh.mqtt_port, grpc_port=mesh.grpc_port, bind="127.0.0.1", advertise=False
    )
    return HubDaemon(Home.load(mesh.home), options)


CTX = CallContext(owner="owner", scope="owner", trace_id="trace-lunch")


async def test_pay_card_to_phone_approve_list_show_and_audit(mesh: Mesh) -> None:
    phone = mesh.add_device("phone1", "phone")
    glasses = mesh.add_device("specs", "glasses")
    specs_id = Bundle.load(glasses).device_id
    async with SandboxShop(pay_timeout=2.0) as shop:
        async with hub_using(mesh, shop) as hub:
            gw, pay = hub.consent.gateway, hub.consent.payments
            assert gw is not None and pay is not None and gw.payments is pay

            voice = VoiceEvidence(specs_id, "u1", "verified", "voiceprint", now_ms())
            request = PaymentRequest("owner_voice", "u1", specs_id, "order lunch", voice)
            p = pay.open_intent(CTX, request, task_id="t1", description="lunch", budget="30")
            cart = ""
            for i, item in enumerate(("noodles", "noodles")):
                r = await gw.call(
                    ToolCall(
                        "errands",
                        "add_to_cart",
                        {"shop": "lotus-kitchen", "item_id": item, "quantity": 1, "cart_id": cart},
                        f"a{i}",
                        "t1",
                    ),
                    CTX,
                )
                cart = str(r.effects[0].fields["cart_id"])
            r = await gw.call(
                ToolCall("errands", "go_to_checkout", {"cart_id": cart}, "co", "t1"), CTX
            )
            assert r.status == "waiting" and shop.charges() == [], r

            listed = await asyncio.to_thread(
                mesh.yimi, "pay", "cards", "--bundle", str(phone), "--hub", mesh.hub_target
            )
            assert listed.returncode == 0 and "pay 25.00 EUR to Lotus Kitchen" in listed.stdout, (
                listed.stderr
            )
            # the phone's (fake) lock sensor says locked: no approval leaves the phone
            await asyncio.to_thread(
                mesh.yimi, "pay", "lock-sensor", "--bundle", str(phone), "locked", check=True
            )
            locked = await asyncio.to_thread(
                mesh.yimi, "pay", "approve", "--bundle", str(phone), "--hub", mesh.hub_target
            )
            assert locked.returncode == 1 and "locked" in locked.stderr, locked.stderr
            # glasses are not a phone
            specs = await asyncio.to_thread(
                mesh.yimi, "pay", "approve", "--bundle", str(glasses), "--hub", mesh.hub_target
            )
            assert specs.returncode == 1 and "not a phone" in specs.stderr

            unlocked = await asyncio.to_thread(
                mesh.yimi, "pay", "lock-sensor", "--bundle", str(phone), "unlocked", check=True
            )
            assert "FAKE" in unlocked.stdout
            ok = await asyncio.to_thread(
                mesh.yimi, "pay", "approve", "--bundle", str(phone), "--hub", mesh.hub_target
            )
            assert ok.returncode == 0, ok.stderr
            assert "executed" in ok.stdout and "Paid 25.00 EUR to Lotus Kitchen" in ok.stdout
            assert [c["amount_minor"] for c in shop.charges()] == [2500]
            q = pay.store.get(p.payment_id)
            assert q is not None and q.state == "paid"

            again = await asyncio.to_thread(
                mesh.yimi,
                "pay",
                "approve",
                "--bundle",
                str(phone),
                "--hub",
                mesh.hub_target,
                r.card_id,
            )
            assert again.returncode == 1 and "already" in again.stderr, again.stderr
            assert len(shop.charges()) == 1

            lease = await asyncio.to_thread(
                mesh.yimi,
                "pay",
                "unlock",
                "--bundle",
                str(phone),
                "--hub",
                mesh.hub_target,
                "--minutes",
                "5",
            )
            assert lease.returncode == 0 and "unlock lease until" in lease.stdout, lease.stderr
            assert pay.valid_lease() is not None

    listed = mesh.yimi("pay", "list", "--home", str(mesh.home))
    assert listed.returncode == 0 and p.payment_id in listed.stdout and "paid" in listed.stdout
    assert "25.00 EUR" in listed.stdout
    shown = mesh.yimi("pay", "show", p.payment_id, "--home", str(mesh.home))
    assert shown.returncode == 0, shown.stderr
    assert "paying" in shown.stdout and "used" in shown.stdout and "Lotus Kitchen" in shown.stdout
    verified = mesh.yimi("audit", "verify", "--home", str(mesh.home))
    assert verified.returncode == 0, verified.stderr
    audit = mesh.yimi("audit", "show", "--home", str(mesh.home), "--json").stdout
    assert '"step":"paid"' in audit.replace(" ", "") and "trace-lunch" in audit


async def test_phone_daemon_lease_options_over_the_mesh_and_undo(mesh: Mesh) -> None:
    """The phone's edge daemon reports its (FAKE) lock sensor as unlock leases; the options
    change travels over the mesh signed by the phone (no home folder on the phone's side);
    auto-pay sends the phone its notice and `yimi pay undo` stops it inside the window."""
    phone = mesh.add_device("phone1", "phone")
    glasses = mesh.add_device("specs", "glasses")
    specs_id = Bundle.load(glasses).device_id
    async with SandboxShop(pay_timeout=2.0) as shop:
        async with hub_using(mesh, shop) as hub:
            gw, pay = hub.consent.gateway, hub.consent.payments
            assert gw is not None and pay is not None

            def yimi(*args: str) -> Any:
                return asyncio.to_thread(mesh.yimi, *args)

            changed = await yimi(
                "pay", "options", "set", "--bundle", str(phone), "--hub", mesh.hub_target,
                "auto_pay=on", "undo_seconds=30", "known_payees=Lotus Kitchen",
            )  # fmt: skip
            assert changed.returncode == 0, changed.stderr
            assert (
                "auto-pay:           on" in changed.stdout and "signed by phone1" in changed.stdout
            )
            assert pay.options.auto_pay and pay.options.known_payees == ("Lotus Kitchen",)
            refused = await yimi(
                "pay", "options", "set", "--bundle", str(phone), "--hub", mesh.hub_target,
                "tip=10",
            )  # fmt: skip
            assert refused.returncode == 1 and "no payment option 'tip'" in refused.stderr
            assert "tip" not in pay.options.to_dict()

            # the phone's daemon: locked → no lease; unlocked → a lease; locked → none
            await yimi("pay", "lock-sensor", "--bundle", str(phone), "locked")
            edge = await asyncio.to_thread(mesh.start_edge, phone, hub=mesh.hub_target)
            assert pay.valid_lease() is None
            await yimi("pay", "lock-sensor", "--bundle", str(phone), "unlocked")
            await poll(lambda: pay.valid_lease() is not None, 20, "the unlock lease")
            lease = pay.valid_lease()
            assert lease is not None and lease.sensor == "fake-lock-sensor"

            # auto-pay: the notice reaches the phone; the phone undoes it
            voice = VoiceEvidence(specs_id, "u2", "verified", "voiceprint", now_ms())
            request = PaymentRequest("owner_voice", "u2", specs_id, "order lunch", voice)
            ctx = CallContext(owner="owner", scope="owner", trace_id="trace-auto")
            p = pay.open_intent(ctx, request, task_id="t2", description="lunch", budget="30")
            r = await gw.call(
                ToolCall(
                    "errands",
                    "add_to_cart",
                    {"shop": "lotus-kitchen", "item_id": "noodles", "quantity": 2},
                    "a0",
                    "t2",
                ),
                ctx,
            )
            cart = str(r.effects[0].fields["cart_id"])
            r = await gw.call(
                ToolCall("errands", "go_to_checkout", {"cart_id": cart}, "co", "t2"), ctx
            )
            assert r.status == "running", r
            await poll(
                lambda: f"yimi pay undo --bundle {phone} {p.payment_id}" in edge.text(),
                20,
                "the auto-pay notice on the phone",
            )
            undone = await yimi("pay", "undo", "--bundle", str(phone), "--hub", mesh.hub_target)
            assert undone.returncode == 0, undone.stderr
            assert "undone: 25.00 EUR to Lotus Kitchen" in undone.stdout
            q = pay.store.get(p.payment_id)
            assert q is not None and q.state == "cancelled" and shop.charges() == []

            await yimi("pay", "lock-sensor", "--bundle", str(phone), "locked")
            await poll(lambda: pay.valid_lease() is None, 20, "the lease to end")
            mesh.stop(edge)
    verified = mesh.yimi("audit", "verify", "--home", str(mesh.home))
    assert verified.returncode == 0, verified.stderr


async def test_an_order_said_to_the_hub_goes_through_the_brain_to_the_phone(mesh: Mesh) -> None:
    """The product path: a typed order on the glasses → the hub's rule-based brain opens
    the intent and goes to the checkout → the phone's card → `yimi pay approve` → paid once
    → the brain's task reports it from the receipt."""
    phone = mesh.add_device("phone1", "phone")
    glasses = mesh.add_device("specs", "glasses")
    async with SandboxShop(pay_timeout=2.0) as shop:
        async with hub_using(mesh, shop) as hub:
            pay = hub.consent.payments
            assert pay is not None
            said = await asyncio.to_thread(
                mesh.say,
                glasses,
                "Yimi, order two beef noodles from Lotus Kitchen",
                "--hub",
                mesh.hub_target,
            )
            assert said.returncode == 0, said.stderr
            assert "The checkout says 25.00 EUR to Lotus Kitchen; not paid yet" in said.stdout
            (p,) = pay.store.recent()
            assert p.state == "awaiting_approval" and p.request.source == "owner_typed"
            assert p.request.device_id == Bundle.load(glasses).device_id
            assert shop.charges() == []
            await asyncio.to_thread(
                mesh.yimi, "pay", "lock-sensor", "--bundle", str(phone), "unlocked", check=True
            )
            ok = await asyncio.to_thread(
                mesh.yimi, "pay", "approve", "--bundle", str(phone), "--hub", mesh.hub_target
            )
            assert ok.returncode == 0 and "Paid 25.00 EUR to Lotus Kitchen" in ok.stdout, ok.stderr
            assert [c["amount_minor"] for c in shop.charges()] == [2500]
            brain = hub.turns.brain
            assert brain is not None
            await poll(lambda: brain.store.require(p.task_id).state == "done", 20, "the order task")
            assert "Paid 25.00 EUR" in str(brain.store.require(p.task_id).result.get("report"))
            # auto-pay on (phone-signed over the mesh), a lease: the same lunch, spoken and
            # verified, pays itself after the undo window and the result reaches the task
            for args in (
                ("options", "set", "--bundle", str(phone), "--hub", mesh.hub_target,
                 "auto_pay=on", "undo_seconds=1", "same_payee_minutes=0"),
                ("unlock", "--bundle", str(phone), "--hub", mesh.hub_target),
            ):  # fmt: skip
                done = await asyncio.to_thread(mesh.yimi, "pay", *args)
                assert done.returncode == 0, done.stderr
            specs = Bundle.load(glasses).device_id
            ev = VoiceEvidence(specs, "u-same", "verified", "voiceprint", now_ms(), 0.9)
            turn = Turn(
                "Yimi, order the same lunch as last time",
                device_id=specs,
                turn_id="t-same",
                evidence=ev,
                utterance_id="u-same",
            )
            reply = await collect(brain.turn(turn))
            assert "Auto-pay: 25.00 EUR to Lotus Kitchen will be paid in 1 seconds" in reply
            await poll(
                lambda: brain.store.require("t-same").state == "done", 20, "the auto-payment"
            )
            assert [c["amount_minor"] for c in shop.charges()] == [2500, 2500]
            assert "Paid 25.00 EUR" in str(brain.store.require("t-same").result.get("report"))
