"""Cards over the real mesh: the hub (in this process, with its real mosquitto, gRPC and
gateway over the real messaging package) sends a card to the phone's edge daemon and to
the glasses (a send they may answer with a nod); ``yimi cards`` / ``yimi approve`` /
``yimi deny`` on the phone bundle answer it; the hub executes exactly once; the audit log
verifies."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from hub.capabilities.settings import only
from hub.gateway import CallContext, ToolCall
from hub.mesh.daemon import HubDaemon, HubOptions
from provisioning.home import Home
from tests.mesh_harness import Mesh
from tests.waiting import poll_sync
from worlds.fakes import SmtpWorld

pytestmark = pytest.mark.slow

OWNER = CallContext(owner="owner", scope="owner", trace_id="trace-mesh")


def email(to: str, body: str) -> dict[str, Any]:
    return {"to": to, "subject": "Dinner", "body": body, "owner_requested": True}


def phone_cards(bundle: Path) -> list[tuple[str, str]]:
    path = bundle / "state" / "cards.db"
    if not path.exists():
        return []
    db = sqlite3.connect(path)
    try:
        return [(str(a), str(b)) for a, b in db.execute("SELECT card_id, state FROM cards")]
    finally:
        db.close()


async def test_card_to_phone_approve_deny_and_audit(mesh: Mesh) -> None:
    phone = mesh.add_device("phone1", "phone")
    glasses = mesh.add_device("specs", "glasses")
    async with SmtpWorld() as smtp:
        (mesh.home / "packages.yaml").write_text(
            yaml.safe_dump(
                only(
                    {"messaging": {"config": {"SMTP_HOST": smtp.host, "SMTP_PORT": str(smtp.port)}}}
                )
            )
        )
        options = HubOptions(
            mqtt_port=mesh.mqtt_port, grpc_port=mesh.grpc_port, bind="127.0.0.1", advertise=False
        )
        async with HubDaemon(Home.load(mesh.home), options) as hub:
            gw = hub.consent.gateway
            assert gw is not None
            edge = await asyncio.to_thread(mesh.start_edge, phone, hub=mesh.hub_target)
            specs = await asyncio.to_thread(mesh.start_edge, glasses, hub=mesh.hub_target)

            r = await gw.call(
                ToolCall("messaging", "send_email", email("ann@example.org", "Seven?"), "c1", "t1"),
                OWNER,
            )
            assert r.status == "waiting" and smtp.messages() == []
            # the phone's daemon shows and keeps the card; the glasses (approve.gesture) show
            # it too, to be answered by a nod (test_nod_mesh.py) — never with `yimi approve`
            await asyncio.to_thread(
                poll_sync, lambda: f"card {r.card_id}" in edge.text(), 20, "the card on the phone"
            )
            assert "Seven?" in edge.text()
            assert phone_cards(phone) == [(r.card_id, "pending")]
            await asyncio.to_thread(
                poll_sync, lambda: "nod to approve" in specs.text(), 20, "the HUD"
            )
            assert "Seven?" in specs.text(), "a send card the glasses may answer, in full"

            listed = await asyncio.to_thread(
                mesh.yimi, "cards", "--bundle", str(phone), "--hub", mesh.hub_target
            )
            assert listed.returncode == 0 and r.card_id in listed.stdout, listed.stderr

            ok = await asyncio.to_thread(
                mesh.yimi, "approve", "--bundle", str(phone), "--hub", mesh.hub_target
            )
            assert ok.returncode == 0, ok.stderr
            assert "executed" in ok.stdout and "ann@example.org" in ok.stdout, ok.stdout
            assert [m.recipients for m in smtp.messages()] == [["ann@example.org"]]
            await asyncio.to_thread(
                poll_sync,
                lambda: (r.card_id, "executed") in phone_cards(phone),
                20,
                "the phone's copy of the card to close",
            )

            again = await asyncio.to_thread(
                mesh.yimi, "approve", "--bundle", str(phone), "--hub", mesh.hub_target, r.card_id
            )
            assert again.returncode == 1 and "already executed" in again.stderr, again.stderr
            assert len(smtp.messages()) == 1, "approving twice executes once"

            # a card that arrives while the phone's daemon is off waits at the hub and is
            # fetched by `yimi deny` itself
            assert mesh.stop(edge) == 0
            r2 = await gw.call(
                ToolCall("messaging", "send_email", email("bob@example.org", "Eight?"), "c2", "t2"),
                OWNER,
            )
            assert r2.status == "waiting"
            no = await asyncio.to_thread(
                mesh.yimi, "deny", "--bundle", str(phone), "--hub", mesh.hub_target
            )
            assert no.returncode == 0 and "denied" in no.stdout, no.stderr
            assert len(smtp.messages()) == 1
            assert [x.status for x in gw.ledger.task_receipts("t2")] == ["cancelled"]

            none = await asyncio.to_thread(
                mesh.yimi, "approve", "--bundle", str(phone), "--hub", mesh.hub_target
            )
            assert none.returncode == 1 and "no pending cards" in none.stderr
            # glasses cannot answer
            refused = await asyncio.to_thread(
                mesh.yimi, "approve", "--bundle", str(glasses), "--hub", mesh.hub_target
            )
            assert refused.returncode == 1 and "approve scope" in refused.stderr
            mesh.stop(specs)

    verified = mesh.yimi("audit", "verify", "--home", str(mesh.home))
    assert verified.returncode == 0, verified.stderr
    shown = mesh.yimi("audit", "show", "--home", str(mesh.home)).stdout
    assert "approval" in shown and "outcome=approved" in shown and "outcome=denied" in shown
    assert "trace-mesh" in shown or "trace-me" in shown
