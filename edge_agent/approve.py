"""``yimi approve`` / ``yimi deny`` / ``yimi cards`` on a phone bundle.

The command joins the mesh briefly, asks the hub to send the cards still waiting (they
are kept in the bundle's ``state/cards.db`` alongside those the edge daemon received),
picks the card (the one named, or the only pending one), signs the answer with the
phone's device key and waits for the hub's verdict: executed (with the receipt's summary),
denied, or refused with the reason (expired, already answered, changed content…).
"""

from __future__ import annotations

import asyncio
from typing import Any

from edge_agent.cards import STATE_NAMES, CardInbox, describe, sign_answer
from edge_agent.errors import EdgeError
from edge_agent.node import DeviceNode, NodeOptions
from protos import consent_pb2, mesh_pb2
from provisioning.bundle import Bundle
from sync import topics
from sync.envelope import HUB

SYNC_TIMEOUT_S = 5.0
TERMINAL = {"executed", "denied", "expired", "voided", "refused"}


async def _ignore(*_: Any) -> None:
    return None


class PhoneSession:
    """A short-lived connection of a phone bundle for answering cards."""

    def __init__(self, bundle: Bundle, hub: str | None) -> None:
        if "approve" not in bundle.certificate.scopes:
            raise EdgeError("card.not_phone", profile=bundle.profile.name)
        self.bundle = bundle
        self.inbox = CardInbox(bundle)
        self.node = DeviceNode(bundle, NodeOptions(mode="say", hub=hub), _ignore)
        self.node.handlers.update(self.inbox.handlers())

    async def send(self, approval: consent_pb2.Approval) -> None:
        assert self.node.mqtt is not None
        data = self.node.sealer.seal(
            mesh_pb2.APPROVAL, approval, recipient=HUB, recipient_box_pk=self.bundle.hub_box_pk
        )
        await self.node.mqtt.publish(
            topics.uplink(self.bundle.home_id, self.bundle.device_id), data, qos=1
        )

    async def sync(self, timeout: float) -> None:
        assert self.node.mqtt is not None
        try:
            async with asyncio.timeout(timeout):
                await self.node.mqtt.connected.wait()
        except TimeoutError:
            raise EdgeError(
                "hub.unreachable",
                target="the hub",
                reason=self.node.mqtt.last_error or "not connected",
            ) from None
        await self.send(consent_pb2.Approval(sync=True))
        try:
            async with asyncio.timeout(SYNC_TIMEOUT_S):
                await self.inbox.synced.wait()
        except TimeoutError:
            raise EdgeError("card.no_answer", card="(sync)", seconds=SYNC_TIMEOUT_S) from None

    async def answer(self, card_id: str | None, decision: int, timeout: float) -> str:
        pending = self.inbox.store.pending()
        if card_id is None:
            if not pending:
                raise EdgeError("card.none")
            if len(pending) > 1:
                raise EdgeError("card.several", ids=", ".join(c.card.card_id for c in pending))
            chosen = pending[0].card
        else:
            stored = self.inbox.store.get(card_id)
            if stored is None or stored.card.short_form:
                raise EdgeError("card.unknown", card=card_id)
            chosen = stored.card  # even if answered or expired: the hub says why it refuses
        await self.send(sign_answer(self.bundle, chosen, decision))
        try:
            async with asyncio.timeout(timeout):
                while True:
                    u = await self.inbox.updates.get()
                    if u.card_id != chosen.card_id:
                        continue
                    state = STATE_NAMES.get(u.state, "")
                    if state == "refused":
                        raise EdgeError("card.refused", card=chosen.card_id, reason=u.reason)
                    if state in TERMINAL:
                        what = u.summary or u.reason or state
                        return f"card {chosen.card_id}: {state}. {what}".strip()
        except TimeoutError:
            raise EdgeError("card.no_answer", card=chosen.card_id, seconds=timeout) from None


async def answer_card(
    bundle: Bundle, card_id: str | None, *, approve: bool, hub: str | None, timeout: float
) -> str:
    session = PhoneSession(bundle, hub)
    try:
        async with session.node:
            await session.sync(timeout)
            decision = consent_pb2.APPROVE if approve else consent_pb2.DENY
            return await session.answer(card_id, decision, timeout)
    finally:
        session.inbox.store.close()


async def list_cards(bundle: Bundle, *, hub: str | None, timeout: float, offline: bool) -> str:
    session = PhoneSession(bundle, hub)
    note = ""
    try:
        if not offline:
            try:
                async with session.node:
                    await session.sync(timeout)
            except EdgeError as exc:
                note = f"(not synced with the hub: {exc})\n"
        cards = session.inbox.store.pending()
    finally:
        session.inbox.store.close()
    if not cards:
        return note + "no pending cards"
    return note + "\n".join(
        f"{describe(c.card)}\n    " + c.card.preview.replace("\n", "\n    ") for c in cards
    )
