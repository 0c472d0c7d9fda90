"""A nod or a shake answers the card on the glasses' HUD (``yimi edge run --imu``).

The hub sends glasses holding the ``approve.gesture`` scope the full card (effect, target,
preview, action hash, nonce) only for the effects the owner lets glasses answer; every other
card arrives as a notice. While a full card is shown, :class:`HudAnswers` feeds the IMU's
samples to :class:`~edge_agent.nod.HeadGestures` (a recording is replayed for each card
shown, a sensor is read while the card waits); the gesture's answer (:func:`answer_for`: a
nod approves, a shake denies, a payment card ignores both) is signed with the glasses'
device key over the same ``ApprovalBody`` the phone signs and sent to the hub, which checks
again that glasses may answer that card. The card's updates (executed, denied, refused…) end
the watch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from types import TracebackType

from edge_agent.cards import STATE_NAMES, sign_answer, valid_card
from edge_agent.errors import EdgeError
from edge_agent.nod import HeadGestures, answer_for
from edge_agent.port import Handler, Handlers, SendToHub
from hardware.imu import ImuSource
from protos import consent_pb2, mesh_pb2
from protos.clock import now_ms
from provisioning.bundle import Bundle
from sync.envelope import Opened
from sync.scopes import GESTURE_SCOPE
from sync.tasks import TaskOwner

log = logging.getLogger(__name__)

Show = Callable[[str], None]
CLOSED = frozenset({"approved", "executed", "denied", "expired", "voided"})
"""card states after which the head no longer answers the card"""


class HudAnswers:
    """Answers the full cards arriving through ``handlers`` with the head's gestures from
    ``imu``; ``send`` seals a message to the hub; ``show`` renders a line on the HUD."""

    def __init__(
        self, bundle: Bundle, imu: ImuSource, send: SendToHub, show: Show | None = None
    ) -> None:
        if not bundle.profile.has("hud") or GESTURE_SCOPE not in bundle.certificate.scopes:
            raise EdgeError("imu.no_hud", profile=bundle.profile.name)
        self.bundle = bundle
        self.imu = imu
        self.send = send
        self.show = show
        self._cards: asyncio.Queue[consent_pb2.ConfirmCard] = asyncio.Queue()
        self._closed: set[str] = set()
        self._tasks = TaskOwner("hud answers")
        self.answered: dict[str, int] = {}
        """card id → the decision sent for it"""

    def wrap(self, handlers: Handlers) -> None:
        """Hook into the node's card handlers (the card inbox keeps storing and printing)."""
        card_h, update_h = handlers.get(mesh_pb2.CARD), handlers.get(mesh_pb2.CARD_UPDATE)
        handlers[mesh_pb2.CARD] = self._chain(card_h, self._on_card)
        handlers[mesh_pb2.CARD_UPDATE] = self._chain(update_h, self._on_update)

    @staticmethod
    def _chain(first: Handler | None, then: Handler) -> Handler:
        async def both(opened: Opened) -> None:
            if first is not None:
                await first(opened)
            await then(opened)

        return both

    async def __aenter__(self) -> HudAnswers:
        self._tasks.spawn(self._run(), "gestures")
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._tasks.close()

    async def _on_card(self, opened: Opened) -> None:
        card = opened.payload
        assert isinstance(card, consent_pb2.ConfirmCard)
        if card.short_form or not valid_card(card) or card.card_id in self._closed:
            return
        if card.card_id in self.answered or card.expires_ms <= now_ms():
            return
        await self._cards.put(card)

    async def _on_update(self, opened: Opened) -> None:
        u = opened.payload
        assert isinstance(u, consent_pb2.CardUpdate)
        if not u.card_id:
            return
        state = STATE_NAMES.get(u.state, "")
        if state == "refused" and self.show is not None:
            self.show(f"card {u.card_id}: the hub refused the answer: {u.reason}")
        if state in CLOSED:  # a refused answer (ours or the phone's) leaves the card open
            self._closed.add(u.card_id)

    def _open(self, card: consent_pb2.ConfirmCard) -> bool:
        return card.card_id not in self._closed and card.expires_ms > now_ms()

    async def _run(self) -> None:
        while True:
            card = await self._cards.get()
            if not self._open(card) or card.card_id in self.answered:
                continue
            decision = await self._watch(card)
            if decision is None:
                continue
            self.answered[card.card_id] = decision
            word = "approved" if decision == consent_pb2.APPROVE else "dismissed"
            log.info("card %s %s with the head", card.card_id, word)
            if self.show is not None:
                self.show(f"card {card.card_id} {word} (nod/shake): waiting for the hub")
            try:
                await self.send(mesh_pb2.APPROVAL, sign_answer(self.bundle, card, decision))
            except Exception as exc:
                log.warning("the answer to card %s was not sent: %s", card.card_id, exc)
                del self.answered[card.card_id]

    async def _watch(self, card: consent_pb2.ConfirmCard) -> int | None:
        """Feed the detector while ``card`` is open; the decision of the first gesture that
        answers it (``None``: the stream ended or the card closed first)."""
        detector = HeadGestures()
        allowed = {card.effect}  # the hub sent it in full: its effect is allowed here
        async for sample in self.imu.samples():
            if not self._open(card):
                return None
            gesture = detector.feed(sample)
            if gesture is None:
                continue
            decision = answer_for(card, gesture, allowed)
            if decision is not None:
                return decision
        return None
