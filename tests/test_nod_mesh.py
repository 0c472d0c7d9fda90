"""A nod on the glasses answers a real card through the mesh (issue 19).

The hub (in this process: real mosquitto, gRPC, gateway over the real ``messaging`` package
on the local SMTP FAKE and the ``errands`` package on the sandbox shop) sends the glasses
(``approve.gesture``) the full card of a first-send mail and only a notice of a payment;
``yimi edge run --imu REC.csv`` replays a recorded head movement (FAKE hardware) for each
full card on the HUD. A nod sends an approval signed with the glasses' key → the mail goes
out exactly once; a shake → the call is cancelled; the payment card ignores the nod, and a
forged glasses approval of it, sent through the mesh, is refused by the hub (with a reason,
counted, audited)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from edge_agent.node import DeviceNode, NodeOptions
from hub.gateway import CallContext, ToolCall
from hub.gateway.audit import records
from hub.mesh.daemon import HubDaemon
from hub.payments import PaymentRequest, VoiceEvidence
from packages.errands.sandbox import SandboxShop
from protos import consent_pb2, mesh_pb2
from protos.clock import now_ms
from provisioning.bundle import Bundle
from sync.envelope import Opened
from tests.mesh_harness import Mesh, messaging_config
from tests.waiting import poll
from worlds.fakes import SmtpWorld

pytestmark = pytest.mark.slow

IMU = Path(__file__).parent / "data" / "imu"
CTX = CallContext(owner="owner", scope="owner", trace_id="trace-nod")


def mail(to: str, body: str) -> dict[str, Any]:
    return {"to": to, "subject": "Dinner", "body": body, "owner_requested": True}


def gesture_refusals(mesh: Mesh, hub: HubDaemon) -> int:
    rows = mesh.hub_query("SELECT value FROM counters WHERE name='rejected.gesture'")
    return hub.port.drops.get("rejected.gesture", 0) + sum(int(str(r[0])) for r in rows)


async def checkout(hub: HubDaemon, glasses_id: str) -> str:
    """A lunch order up to its payment card; the card's id."""
    gw, pay = hub.consent.gateway, hub.consent.payments
    assert gw is not None and pay is not None
    voice = VoiceEvidence(glasses_id, "u1", "verified", "voiceprint", now_ms())
    request = PaymentRequest("owner_voice", "u1", glasses_id, "order lunch", voice)
    pay.open_intent(CTX, request, task_id="t-pay", description="lunch", budget="30")
    args = {"shop": "lotus-kitchen", "item_id": "noodles", "quantity": 1, "cart_id": ""}
    r = await gw.call(ToolCall("errands", "add_to_cart", args, "a0", "t-pay"), CTX)
    cart = str(r.effects[0].fields["cart_id"])
    r = await gw.call(ToolCall("errands", "go_to_checkout", {"cart_id": cart}, "co", "t-pay"), CTX)
    assert r.status == "waiting", r
    return r.card_id


async def forge(bundle: Bundle, card: consent_pb2.ConfirmCard, hub: str) -> str:
    """What the hub answers an approval of ``card`` signed with ``bundle``'s key and sent
    through the mesh as the glasses (the device is not trusted to skip payments)."""
    from edge_agent.cards import sign_answer

    answers: asyncio.Queue[consent_pb2.CardUpdate] = asyncio.Queue()

    async def on_update(opened: Opened) -> None:
        assert isinstance(opened.payload, consent_pb2.CardUpdate)
        await answers.put(opened.payload)

    async def ignore(*_: Any) -> None:
        return None

    node = DeviceNode(bundle, NodeOptions(mode="say", hub=hub), ignore)
    node.handlers[mesh_pb2.CARD_UPDATE] = on_update
    async with node:
        assert node.mqtt is not None
        await asyncio.wait_for(node.mqtt.connected.wait(), 20)
        await node.send(mesh_pb2.APPROVAL, sign_answer(bundle, card, consent_pb2.APPROVE))
        async with asyncio.timeout(20):
            while True:
                u = await answers.get()
                if u.card_id == card.card_id and u.state == consent_pb2.REFUSED:
                    return u.reason


async def test_nod_sends_the_mail_shake_cancels_and_payments_wait_for_the_phone(
    mesh: Mesh,
) -> None:
    glasses = mesh.add_device("specs", "glasses")
    specs = Bundle.load(glasses)
    assert "approve.gesture" in specs.certificate.scopes
    assert "approve" not in specs.certificate.scopes
    mesh.configure(glasses={"nod_effects": ["send"]})
    async with SmtpWorld() as smtp, SandboxShop(pay_timeout=2.0) as shop:
        mesh.use_packages(
            {
                "messaging": {"config": messaging_config(smtp)},
                "errands": {"config": {"PROVIDER_URL": shop.url, "PAY_TIMEOUT": "2"}},
            }
        )
        async with mesh.hub_in_process() as hub:
            gw, pay = hub.consent.gateway, hub.consent.payments
            assert gw is not None and pay is not None
            pay_card = await checkout(hub, specs.device_id)

            nodding = await asyncio.to_thread(
                mesh.start_edge, glasses, "--imu", str(IMU / "nod.csv"), hub=mesh.hub_target
            )
            # the payment card reaches the HUD as a notice: nothing for a nod to answer
            await poll(lambda: "waiting for you on the phone" in nodding.text(), 20, "notice")

            r = await gw.call(
                ToolCall("messaging", "send_email", mail("ann@example.org", "Seven?"), "m1", "t1"),
                CTX,
            )
            assert r.status == "waiting" and smtp.messages() == []
            # the HUD shows the full card, the nod in the recording approves it
            await poll(lambda: len(smtp.messages()) == 1, 30, "the nod's mail")
            assert "Seven?" in nodding.text() and "nod to approve" in nodding.text()
            await poll(
                lambda: [x.status for x in gw.ledger.task_receipts("t1")] == ["succeeded"],
                20,
                "the mail's receipt",
            )
            await poll(lambda: f"card {r.card_id} executed" in nodding.text(), 20, "executed")
            assert [m.recipients for m in smtp.messages()] == [["ann@example.org"]]
            card = gw.consent.card(r.card_id)
            assert card is not None and card.answered_by == specs.device_id

            # the nod did not touch the payment: still waiting for the phone, nothing charged
            paid = gw.consent.card(pay_card)
            assert paid is not None and paid.state == "pending" and shop.charges() == []
            assert mesh.stop(nodding) == 0

            # a forged glasses approval of the payment, through the mesh: refused, counted,
            # audited; still nothing charged
            reason = await forge(specs, paid.to_proto(), mesh.hub_target)
            assert "only on the owner's phone" in reason, reason
            await poll(lambda: gesture_refusals(mesh, hub) >= 1, 20, "the refusal counted")
            audited = [
                x
                for x in records(mesh.home / "gateway" / "audit")
                if x["kind"] == "payment" and x["data"].get("step") == "approval_refused"
            ]
            assert audited and audited[-1]["data"]["device"] == specs.device_id, audited
            assert "only on the owner's phone" in audited[-1]["data"]["reason"]
            assert shop.charges() == []

            # a shake dismisses a card: the call is cancelled, no second mail
            r2 = await gw.call(
                ToolCall("messaging", "send_email", mail("bob@example.org", "Eight?"), "m2", "t2"),
                CTX,
            )
            assert r2.status == "waiting"
            shaking = await asyncio.to_thread(
                mesh.start_edge, glasses, "--imu", str(IMU / "shake.csv"), hub=mesh.hub_target
            )
            await poll(
                lambda: [x.status for x in gw.ledger.task_receipts("t2")] == ["cancelled"],
                30,
                "the shake's cancel",
            )
            assert len(smtp.messages()) == 1
            denied = gw.consent.card(r2.card_id)
            assert denied is not None and denied.state == "denied"
            still = gw.consent.card(pay_card)
            assert still is not None and still.state == "pending", "a shake ignores a payment"
            assert mesh.stop(shaking) == 0
