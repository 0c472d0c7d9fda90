"""``yimi pay approve|deny|unlock`` on a phone bundle: the phone's side of payments.

A payment card (effect ``spend``) is answered like any card — the phone's device key signs
an ``ApprovalBody`` over card id, action hash (the authorisation's binding of intent,
payee, amount, currency, checkout, nonce and expiry), expiry and nonce — plus the phone's
lock state from its lock sensor (on this machine the FAKE sensor of
:mod:`hardware.lock_sensor`). The hub refuses an approval from a locked phone, from any
device that is not a phone, or older than 60 s.

``yimi pay unlock`` reports a signed unlock lease ("unlocked by the owner until …"), which
voice pay and small-amount auto-pay require. The phone's edge daemon does the same by
itself (:class:`LockWatcher`): when its lock sensor reports *unlocked* it sends a lease
(renewed while the phone stays unlocked), and when it reports *locked* it ends the lease.

``yimi pay undo`` denies an auto-payment's notice card (the hub sends it when auto-pay
starts; the payment goes out after the undo window): inside the window, nothing is paid.
``yimi pay options set --bundle PHONE`` sends a phone-signed change of the payment options
to the hub over the mesh.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from edge_agent.approve import PhoneSession
from edge_agent.cards import STATE_NAMES, describe
from edge_agent.errors import EdgeError
from hardware.lock_sensor import FakeLockSensor, LockSensor, LockState
from protos import consent_pb2, mesh_pb2, signed
from protos.clock import now_ms
from provisioning.bundle import Bundle

if TYPE_CHECKING:
    from edge_agent.node import DeviceNode

log = logging.getLogger(__name__)

TERMINAL = {"executed", "denied", "expired", "voided"}
LEASE_MINUTES = 10.0
"""how long a lease the phone's daemon sends lasts (the hub caps it at 15 min)"""
WATCH_EVERY_S = 0.5
"""how often the daemon reads its lock sensor (the FAKE sensor is a file; a phone OS would
call back instead)"""


def lock_sensor(bundle: Bundle) -> LockSensor:
    """The bundle's lock sensor: the fake one (no phone OS on this machine)."""
    return FakeLockSensor(bundle.state_dir)


def _check_phone(bundle: Bundle) -> None:
    if bundle.profile.name != "phone":
        raise EdgeError("pay.not_phone", profile=bundle.profile.name)


def sign_payment_answer(
    bundle: Bundle, card: consent_pb2.ConfirmCard, decision: int, lock: LockState
) -> consent_pb2.Approval:
    return signed.approval(
        bundle.keys.sign,
        card,
        decision,
        device_id=bundle.device_id,
        signed_ms=now_ms(),
        unlocked=lock.unlocked,
        lock_sensor=lock.sensor,
    )


def sign_lease(bundle: Bundle, lock: LockState, seconds: int) -> consent_pb2.Approval:
    """A signed unlock lease of ``seconds``; ``0`` ends the phone's lease (it locked)."""
    t = now_ms()
    return signed.lease(
        bundle.keys.sign,
        device_id=bundle.device_id,
        unlocked_ms=lock.since_ms if lock.unlocked else 0,
        expires_ms=t + seconds * 1000,
        lock_sensor=lock.sensor,
        signed_ms=t,
    )


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
        raise EdgeError("pay.locked", sensor=lock.sensor)
    session = PhoneSession(bundle, hub)
    try:
        async with session.node:
            await session.sync(timeout)
            pending = [
                c.card
                for c in session.inbox.store.pending()
                if c.card.effect == "spend" and not c.card.title.startswith(signed.AUTO_PAY_TITLE)
            ]
            if card_id is None:
                if not pending:
                    raise EdgeError("pay.no_card")
                if len(pending) > 1:
                    raise EdgeError("pay.several", ids=", ".join(c.card_id for c in pending))
                chosen = pending[0]
            else:
                stored = session.inbox.store.get(card_id)
                if stored is None or stored.card.short_form or stored.card.effect != "spend":
                    raise EdgeError("card.unknown", card=card_id)
                chosen = stored.card
            decision = consent_pb2.APPROVE if approve else consent_pb2.DENY
            await session.send(sign_payment_answer(bundle, chosen, decision, lock))
            u = await _await_update(session, chosen.card_id, timeout, TERMINAL | {"refused"})
            state = STATE_NAMES.get(u.state, "")
            if state == "refused":
                raise EdgeError("pay.refused", card=chosen.card_id, reason=u.reason)
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
        raise EdgeError("pay.locked", sensor=lock.sensor)
    session = PhoneSession(bundle, hub)
    try:
        async with session.node:
            await session.sync(timeout)
            await session.send(sign_lease(bundle, lock, max(1, int(minutes * 60))))
            u = await _await_update(session, "", timeout, {"lease_accepted", "refused"})
            if STATE_NAMES.get(u.state, "") == "refused":
                raise EdgeError("pay.lease_refused", reason=u.reason)
            return f"{u.reason} (lock sensor: {lock.sensor})"
    finally:
        session.inbox.store.close()


def _auto_notice(session: PhoneSession, payment_id: str | None) -> consent_pb2.ConfirmCard:
    notices = [
        c.card
        for c in session.inbox.store.pending()
        if c.card.effect == "spend" and c.card.title.startswith(signed.AUTO_PAY_TITLE)
    ]
    if payment_id:
        notices = [c for c in notices if f"payment: {payment_id}" in c.preview.splitlines()]
    if not notices:
        raise EdgeError("pay.no_card")
    if len(notices) > 1:
        raise EdgeError("pay.several", ids=", ".join(c.card_id for c in notices))
    return notices[0]


async def undo_payment(
    bundle: Bundle, payment_id: str | None, *, hub: str | None, timeout: float
) -> str:
    """Deny an auto-payment's notice card: the hub undoes it inside its undo window."""
    _check_phone(bundle)
    lock = lock_sensor(bundle).read()
    session = PhoneSession(bundle, hub)
    try:
        async with session.node:
            await session.sync(timeout)
            card = _auto_notice(session, payment_id)
            await session.send(sign_payment_answer(bundle, card, consent_pb2.DENY, lock))
            u = await _await_update(session, card.card_id, timeout, TERMINAL | {"refused"})
            if STATE_NAMES.get(u.state, "") != "denied":
                raise EdgeError("pay.refused", card=card.card_id, reason=u.reason or "too late")
            return f"undone: {card.title.removeprefix(signed.AUTO_PAY_TITLE + ': ')} was not paid"
    finally:
        session.inbox.store.close()


async def send_options(
    bundle: Bundle, changes: dict[str, Any], *, hub: str | None, timeout: float
) -> str:
    """A phone-signed change of the payment options, sent to the hub over the mesh."""
    _check_phone(bundle)
    body, signature = signed.options_change(bundle.keys.sign, bundle.device_id, changes)
    session = PhoneSession(bundle, hub)
    try:
        async with session.node:
            await session.sync(timeout)
            await session.send(consent_pb2.Approval(options=body, options_signature=signature))
            u = await _await_update(session, "", timeout, {"options_changed", "refused"})
            if STATE_NAMES.get(u.state, "") == "refused":
                raise EdgeError("pay.options_refused", reason=u.reason)
            return u.reason
    finally:
        session.inbox.store.close()


Send = Callable[[consent_pb2.Approval], Awaitable[bool]]


class LockWatcher:
    """The phone daemon's lock watch: a lease when the lock sensor reports unlocked
    (renewed at two thirds of its life while the phone stays unlocked), the lease ended
    when it reports locked. ``send`` returns ``False`` when the hub is not reachable now;
    the next tick tries again (the hub keeps an accepted lease across reconnections)."""

    def __init__(
        self,
        bundle: Bundle,
        send: Send,
        *,
        sensor: LockSensor | None = None,
        minutes: float = LEASE_MINUTES,
        every_s: float = WATCH_EVERY_S,
    ) -> None:
        self.bundle = bundle
        self.send = send
        self.sensor = sensor or lock_sensor(bundle)
        self.minutes = minutes
        self.every_s = every_s
        self.sent: tuple[bool, int, int] | None = None
        """(unlocked, sensor's since_ms, renew at ms) of what the hub was last told"""
        self.reported = 0
        """leases and lease ends sent (tests)"""

    async def tick(self) -> None:
        lock = self.sensor.read()
        t = now_ms()
        last = self.sent
        if lock.unlocked:
            if last is not None and last[:2] == (True, lock.since_ms) and t < last[2]:
                return
            seconds = max(1, int(self.minutes * 60))
            approval = sign_lease(self.bundle, lock, seconds)
            renew = t + seconds * 2000 // 3
        else:
            if last is None or not last[0]:
                return  # nothing to end (a phone locked since start has no lease)
            approval = sign_lease(self.bundle, lock, 0)
            renew = 0
        if await self.send(approval):
            self.sent = (lock.unlocked, lock.since_ms, renew)
            self.reported += 1
            log.info(
                "lock sensor %s: %s; %s sent",
                lock.sensor,
                "unlocked" if lock.unlocked else "locked",
                "unlock lease" if lock.unlocked else "lease end",
            )

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:
                log.exception("lock watch failed")
            await asyncio.sleep(self.every_s)


@asynccontextmanager
async def lock_watch(bundle: Bundle, node: DeviceNode) -> AsyncIterator[LockWatcher | None]:
    """Run a :class:`LockWatcher` for ``node`` while the block runs — on a phone (a device
    that answers cards) only; other devices get ``None``."""
    if bundle.profile.name != "phone" or "approve" not in bundle.certificate.scopes:
        yield None
        return

    async def send(approval: consent_pb2.Approval) -> bool:
        mqtt = node.mqtt
        if mqtt is None or not mqtt.connected.is_set():
            return False
        try:
            await node.send(mesh_pb2.APPROVAL, approval)
        except Exception as exc:
            log.info("unlock lease not sent now: %s", exc)
            return False
        return True

    watcher = LockWatcher(bundle, send)
    task = asyncio.create_task(watcher.run(), name=f"lock-watch-{bundle.name}")
    try:
        yield watcher
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
