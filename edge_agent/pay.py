"""``yimi pay approve|deny|unlock`` on a phone bundle: the phone's side of payments.

A payment card (effect ``spend``) is answered like any card — the phone's device key signs
an ``ApprovalBody`` over card id, action hash (the authorisation's binding of intent,
payee, amount, currency, checkout, nonce and expiry), expiry and nonce — plus the phone's
lock state from its lock sensor (on this machine the FAKE sensor of
:mod:`hardware.lock_sensor`). The hub refuses an approval from a locked phone, from any
device that is not a phone, or older than 60 s.

``yimi pay unlock`` reports a signed unlock lease ("unlocked by the owner until …"), which
voice pay and small-amount auto-pay require.
"""

from __future__ import annotations

import asyncio
import time

from edge_agent.approve import PhoneSession
from edge_agent.cards import STATE_NAMES, describe
from edge_agent.errors import EdgeError
from hardware.lock_sensor import FakeLockSensor, LockSensor, LockState
from hub.payments.errors import PaymentError
from protos import consent_pb2
from protos.codec import APPROVAL_CONTEXT, UNLOCK_LEASE_CONTEXT, signing_input
from provisioning.bundle import Bundle

TERMINAL = {"executed", "denied", "expired", "voided"}


def now_ms() -> int:
    return int(time.time() * 1000)


def lock_sensor(bundle: Bundle) -> LockSensor:
    """The bundle's lock sensor: the fake one (no phone OS on this machine)."""
    return FakeLockSensor(bundle.state_dir)


def _check_phone(bundle: Bundle) -> None:
    if bundle.profile.name != "phone":
        raise PaymentError("pay.not_phone", profile=bundle.profile.name)


def sign_payment_answer(
    bundle: Bundle, card: consent_pb2.ConfirmCard, decision: int, lock: LockState
) -> consent_pb2.Approval:
    body = consent_pb2.ApprovalBody(
        card_id=card.card_id,
        action_hash=card.action_hash,
        expires_ms=card.expires_ms,
        nonce=card.nonce,
        decision=decision,  # type: ignore[arg-type]
        device_id=bundle.device_id,
        signed_ms=now_ms(),
        unlocked=lock.unlocked,
        lock_sensor=lock.sensor,
    ).SerializeToString()
    signature = bundle.keys.sign.sign(signing_input(APPROVAL_CONTEXT, body)).signature
    return consent_pb2.Approval(body=body, signature=signature)


def sign_lease(bundle: Bundle, lock: LockState, seconds: int) -> consent_pb2.Approval:
    t = now_ms()
    lease = consent_pb2.UnlockLease(
        device_id=bundle.device_id,
        unlocked_ms=lock.since_ms,
        expires_ms=t + seconds * 1000,
        lock_sensor=lock.sensor,
        signed_ms=t,
    ).SerializeToString()
    signature = bundle.keys.sign.sign(signing_input(UNLOCK_LEASE_CONTEXT, lease)).signature
    return consent_pb2.Approval(lease=lease, lease_signature=signature)


async def _await_update(
    session: PhoneSession, card_id: str, timeout: float, states: set[str]
) -> consent_pb2.CardUpdate:
    try:
        async with asyncio.timeout(timeout):
            while True:
                u = await session.inbox.updates.get()
                if u.card_id == card_id and STATE_NAMES.get(u.state, "") in states:
                    return u
    except TimeoutError:
        raise EdgeError("card.no_answer", card=card_id or "(lease)", seconds=timeout) from None


async def answer_payment(
    bundle: Bundle, card_id: str | None, *, approve: bool, hub: str | None, timeout: float
) -> str:
    _check_phone(bundle)
    lock = lock_sensor(bundle).read()
    if approve and not lock.unlocked:
        raise PaymentError("pay.locked", sensor=lock.sensor)
    session = PhoneSession(bundle, hub)
    try:
        async with session.node:
            await session.sync(timeout)
            pending = [c.card for c in session.inbox.store.pending() if c.card.effect == "spend"]
            if card_id is None:
                if not pending:
                    raise PaymentError("pay.no_card")
                if len(pending) > 1:
                    raise PaymentError("pay.several", ids=", ".join(c.card_id for c in pending))
                chosen = pending[0]
            else:
                stored = session.inbox.store.get(card_id)
                if stored is None or stored.card.short_form or stored.card.effect != "spend":
                    raise EdgeError("card.unknown", card=card_id)
                chosen = stored.card
            decision = consent_pb2.APPROVE if approve else consent_pb2.DENY
            await session._send(sign_payment_answer(bundle, chosen, decision, lock))
            u = await _await_update(session, chosen.card_id, timeout, TERMINAL | {"refused"})
            state = STATE_NAMES.get(u.state, "")
            if state == "refused":
                raise PaymentError("pay.refused", card=chosen.card_id, reason=u.reason)
            if state == "voided" and approve:
                # the amount changed at the checkout: the hub voided this card and sent a
                # new one — say so (the new card needs its own approval)
                return f"card {chosen.card_id}: voided. {u.reason}".strip()
            what = u.summary or u.reason or state
            return f"card {chosen.card_id}: {state}. {what}".strip()
    finally:
        session.inbox.store.close()


async def list_payment_cards(bundle: Bundle, *, hub: str | None, timeout: float) -> list[str]:
    session = PhoneSession(bundle, hub)
    try:
        async with session.node:
            await session.sync(timeout)
            return [
                f"{describe(c.card)}\n    " + c.card.preview.replace("\n", "\n    ")
                for c in session.inbox.store.pending()
                if c.card.effect == "spend"
            ]
    finally:
        session.inbox.store.close()


async def send_lease(bundle: Bundle, *, minutes: float, hub: str | None, timeout: float) -> str:
    _check_phone(bundle)
    lock = lock_sensor(bundle).read()
    if not lock.unlocked:
        raise PaymentError("pay.locked", sensor=lock.sensor)
    session = PhoneSession(bundle, hub)
    try:
        async with session.node:
            await session.sync(timeout)
            await session._send(sign_lease(bundle, lock, max(1, int(minutes * 60))))
            u = await _await_update(session, "", timeout, {"lease_accepted", "refused"})
            if STATE_NAMES.get(u.state, "") == "refused":
                raise PaymentError("pay.lease_refused", reason=u.reason)
            return f"{u.reason} (lock sensor: {lock.sensor})"
    finally:
        session.inbox.store.close()
