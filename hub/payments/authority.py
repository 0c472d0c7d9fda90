"""The payment authority: intents from the owner's own request, one-time authorisations
approved on the phone, the checkout hand-over, exactly-once payment, status checks.

How a payment goes (issue 8, ARCHITECTURE F3):

1. **Intent** — :meth:`PaymentAuthority.open_intent`, called by platform code for a turn whose
   request came from the owner (scope ``owner``, not scheduled, source ``owner_voice`` or
   ``owner_typed``). Content the assistant read — an e-mail, a web page, another agent's
   message — never opens an intent.
2. **Checkout stop** — a capability package's ``spend`` tool (``errands.go_to_checkout``)
   passes the gateway only when the task holds an open intent (else the click is refused
   and audited). Its receipt reads back payee and amount; the authority binds them to the
   intent and
3. **asks** — a card on the phone (valid 60 s) carrying a one-time authorisation bound to
   intent, payee, amount, currency, checkout, nonce and expiry. The phone approves with
   its device key while unlocked (its lock state is in the signed body). Options, default
   off: small-amount auto-pay (5-second undo) and voice pay ("pay it"); any unmet
   condition falls back to the card.
4. **Pays once** — :meth:`execute` claims the authorisation with one compare-and-set
   (approved → used, authorised → paying); only the winner calls the package's ``pay``
   tool, which re-reads the checkout and pays exactly the authorised amount with the
   authorisation id as the provider's idempotency key. A changed amount voids the card
   and issues a new one (at most 2 re-issues, then stop). A timeout or dropped connection
   makes the payment ``unknown``: a status check with the provider (``payment_status``)
   comes first, and nothing ever retries a payment.

Every step leaves an audit record (kind ``payment``) with the payment's trace id. The
checkout call's receipt in the gateway ledger carries the payment's outcome as revisions
(``waiting`` → ``succeeded`` / ``failed`` / ``unknown`` / ``cancelled``).

This class is the coordinating shell; each part is its own module: :mod:`.policy` (the
rules, pure), :mod:`.lifecycle` (the state tables), :mod:`.intents`, :mod:`.checkout` (the
hand-over), :mod:`.cards`, :mod:`.cashier` (paying and status checks), :mod:`.phone`
(leases and option changes), :mod:`.records` (audit and receipts), :mod:`.sweeper`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hub.gateway.gateway import CallContext, Gateway, ToolCall
from hub.gateway.receipts import Receipt
from hub.payments import model as m
from hub.payments import phone, policy
from hub.payments.cards import PaymentCards
from hub.payments.cashier import STATUS_TOOL, Cashier
from hub.payments.checkout import CheckoutHandover
from hub.payments.intents import PaymentIntents
from hub.payments.model import (
    AUTHORISED,
    AWAITING,
    CANCELLED,
    EXPIRED,
    INTENT,
    PAYING,
    UNKNOWN,
    Payment,
    VoiceEvidence,
)
from hub.payments.options import PayOptions
from hub.payments.phone import DeviceLookup
from hub.payments.policy import PAY_TOOL, Standing
from hub.payments.records import PaymentRecords
from hub.payments.store import Lease, PaymentStore
from hub.payments.sweeper import PaymentSweeper
from protos import consent_pb2
from protos.clock import now_ms
from provisioning.registry import DeviceRecord
from storage.sqlite import transaction

UNKNOWN_RECHECK_S = 30.0
LEFTOVER_S = 5.0
"""an approved payment not paying after this long was left over by a stop: the sweep pays it"""


@dataclass(frozen=True)
class VoiceOutcome:
    """The result of "pay it": ``paid`` (a receipt follows) or a fallback to the card."""

    authorised: bool
    reason: str
    receipt: Receipt | None = None
    card_id: str = ""


class PaymentAuthority:
    """See the module docstring. Attach with :func:`hub.payments.open_payments`."""

    def __init__(
        self, gateway: Gateway, store: PaymentStore, *, devices: DeviceLookup | None = None
    ) -> None:
        self.gw = gateway
        self.store = store
        self.devices = devices
        self.clock: Callable[[], int] = now_ms
        """milliseconds now (tests move it)"""
        self.sweeper: PaymentSweeper | None = None
        """the owned sweep and undo timers (set by ``open_payments``)"""
        clock = self.now  # the parts follow ``self.clock``, which the tests replace
        self.records = PaymentRecords(gateway, store)
        self.cards = PaymentCards(
            gateway,
            store,
            self.records,
            clock,
            lambda payment_id: self.cashier.execute(payment_id),
            lambda payment_id, trace_id, by: self._undo(
                payment_id, trace_id=trace_id, by=by, allowed=True
            ),
        )
        self.cashier = Cashier(store, self.records, self.cards, clock)
        self.intents = PaymentIntents(store, self.records, clock)
        self.checkout = CheckoutHandover(
            store, self.records, self.cards, clock, self._standing, self._pay_at
        )
        # the public API the gateway, the brain and the daemon call
        self.open_intent = self.intents.open
        self.hand_to = self.intents.hand_to
        self.note_order = self.intents.note_order
        self.last_order = self.intents.last_order
        self.waiting = self.intents.waiting
        self.undoable = self.intents.undoable
        self.on_receipt = self.checkout.on_receipt
        self.answer = self.cards.answer
        self.card_expired = self.cards.card_expired
        self.execute = self.cashier.execute
        self.check = self.cashier.check

    # ------------------------------------------------------------------ facts
    def now(self) -> int:
        """Milliseconds now, by :attr:`clock`."""
        return self.clock()

    @property
    def options(self) -> PayOptions:
        return self.store.options()

    def known_payee(self, payee: str) -> bool:
        """Paid before (successfully), or named as known by the owner (signed options)."""
        named = {x.lower() for x in self.options.known_payees}
        return payee.lower() in named or self.store.paid_before(payee)

    def valid_lease(self, t: int | None = None) -> Lease | None:
        """An unexpired unlock lease of a phone that is still enrolled and not revoked."""
        return phone.valid_lease(self.store, self.devices, t if t is not None else self.clock())

    def report_lease(
        self, approval: consent_pb2.Approval, device: DeviceRecord
    ) -> tuple[bool, str, int]:
        """A phone's signed unlock lease: (accepted, reason, until_ms)."""
        return phone.report_lease(self.store, self.gw.audit, approval, device, self.clock())

    def _standing(self, p: Payment, t: int) -> Standing:
        window = self.options.same_payee_minutes * 60_000
        return Standing(
            known_payee=self.known_payee(p.payee),
            lease=self.valid_lease(t) is not None,
            spent_today=self.store.auto_spent(policy.local_midnight_ms(t), p.currency),
            recent_to_payee=tuple(self.store.recent_to_payee(p.payee, t - window, p.payment_id)),
        )

    def _pay_at(self, payment_id: str, at_ms: int) -> None:
        if self.sweeper is not None:
            self.sweeper.pay_at(payment_id, at_ms)

    # ------------------------------------------------------------------ the gate
    def gate(
        self, call: ToolCall, ctx: CallContext, tool: str, args: dict[str, Any]
    ) -> tuple[str, str]:
        """The gateway's ``spend`` gate: ``(allow|block, reason)``."""
        mine = [p for p in self.store.for_task(call.task_id) if p.owner == ctx.owner]
        reason = policy.gate_problem(tool, ctx, mine)
        if not reason:
            return "allow", ""
        self.records.audit(
            None,
            "checkout_refused" if tool != PAY_TOOL else "pay_call_refused",
            trace_id=ctx.trace_id,
            task_id=call.task_id,
            call_id=call.call_id,
            package=call.package,
            tool=tool,
            reason=reason,
        )
        return "block", reason

    # ------------------------------------------------------------------ cancel
    async def cancel(self, payment_id: str, reason: str = "cancelled by the owner") -> bool:
        """Cancel a payment that has not started paying (intent, awaiting, authorised)."""
        p = self.records.get(payment_id)
        with transaction(self.store.db):
            moved = self.store.move(payment_id, (INTENT, AWAITING, AUTHORISED), CANCELLED, reason)
            if moved:
                for a in self.store.auths(payment_id):
                    self.store.end_auth(a.auth_id, ("issued", "approved"), "voided", reason)
        if not moved:
            return False
        self.records.audit(p, "cancelled", reason=reason)
        r = None
        if p.checkout_call:
            r = await self.records.receipt(p, "cancelled", f"{reason}: not paid")
        card = self.cards.of(self.store.current_auth(payment_id))
        if card is not None and card.state == "pending":
            await self.cards.close(card, consent_pb2.VOIDED, reason, r)
        if r is not None:
            await self.records.result(r)
        return True

    # ------------------------------------------------------------------ voice & undo
    async def voice_confirm(
        self, payment_id: str, evidence: VoiceEvidence, ctx: CallContext
    ) -> VoiceOutcome:
        """The owner said "pay it". Pays when every voice-pay condition holds; otherwise the
        phone card (already shown) stays the way to approve, and the reason is returned."""
        p = self.records.get(payment_id)
        auth = self.store.current_auth(payment_id)
        t = self.clock()
        s = self._standing(p, t)
        unmet = policy.voice_unmet(p, auth, evidence, ctx, self.options, s, t)
        card_id = auth.card_id if auth else ""
        if not unmet and not self.store.claim_voice(evidence.utterance_id, payment_id):
            unmet = ["this utterance was already used"]
        if unmet:
            self.records.audit(
                p,
                "voice_pay_fallback",
                trace_id=ctx.trace_id,
                reasons=unmet,
                utterance_id=evidence.utterance_id,
            )
            return VoiceOutcome(False, unmet[0], None, card_id)
        assert auth is not None
        by = f"voice:{evidence.device_id}"
        if not self.store.approve(auth.auth_id, by=by, method="voice", at_ms=t):
            why = "the payment is no longer waiting for approval"
            return VoiceOutcome(False, why, None, card_id)
        self.records.audit(
            p,
            "authorised",
            trace_id=ctx.trace_id,
            method="voice",
            auth_id=auth.auth_id,
            utterance_id=evidence.utterance_id,
            device=evidence.device_id,
        )
        await self.cards.close(self.cards.of(auth), consent_pb2.VOIDED, "approved by voice")
        return VoiceOutcome(True, "", await self.execute(payment_id), card_id)

    async def undo(self, payment_id: str, ctx: CallContext) -> bool:
        """Cancel an auto-payment inside its undo window (the owner said "undo")."""
        allowed = ctx.scope in ("owner", "owner_uncertain")
        return await self._undo(payment_id, trace_id=ctx.trace_id, by="voice", allowed=allowed)

    async def _undo(self, payment_id: str, *, trace_id: str, by: str, allowed: bool) -> bool:
        p = self.records.get(payment_id)
        t = self.clock()
        ok = False
        if allowed:
            with transaction(self.store.db):
                q = self.store.get(payment_id)
                if (
                    q is not None
                    and q.state == AUTHORISED
                    and q.mode == "auto"
                    and q.undo_until_ms is not None
                    and t < q.undo_until_ms
                ):
                    ok = self.store.move(payment_id, AUTHORISED, CANCELLED, "undone by the owner")
                    for a in self.store.auths(payment_id):
                        self.store.end_auth(a.auth_id, ("approved",), "voided", "undone")
        self.records.audit(p, "undone" if ok else "undo_refused", trace_id=trace_id, by=by)
        if ok:
            r = await self.records.receipt(p, "cancelled", "undone by the owner: not paid")
            await self.cards.close_notice(payment_id, consent_pb2.DENIED, "undone: not paid", r)
            await self.records.result(r)
        return ok

    # ------------------------------------------------------------------ sweeps
    async def reconcile(self) -> None:
        """At start: a payment left ``paying`` (the hub stopped mid-payment) may or may not
        have happened — it becomes ``unknown`` and is checked with the provider."""
        why = "the hub stopped while paying"
        for p in self.store.in_states([PAYING]):
            if self.store.move(p.payment_id, PAYING, UNKNOWN, why):
                self.records.audit(p, "unknown", reason=why)
                await self.records.receipt(
                    p, "unknown", f"{why}: checking with the provider", check_with=STATUS_TOOL
                )
                await self.check(p.payment_id)

    async def sweep(self) -> None:
        """Expire what waited too long, pay auto-payments whose undo window passed, and
        re-check unknown payments with the provider (a status check, never a retry)."""
        t = self.clock()
        for p in self.store.in_states([INTENT]):
            if t - p.created_ms > m.INTENT_TTL_S * 1000 and self.store.move(
                p.payment_id, INTENT, EXPIRED, "no checkout within 30 min"
            ):
                self.records.audit(p, "expired", reason="no checkout within 30 min")
        for p in self.store.in_states([AWAITING, AUTHORISED]):
            a = self.store.current_auth(p.payment_id)
            if a is None:
                continue
            if a.expires_ms < t and a.state in ("issued", "approved"):
                await self.cards.expire(p, a, self.cards.of(a))
            elif p.state == AUTHORISED and a.state == "approved":
                # auto-pay after its undo window; an approved payment whose answer path did
                # not pay it (the hub stopped in between) once it is clearly left over
                due = (
                    t >= p.undo_until_ms
                    if p.undo_until_ms is not None
                    else t - (a.approved_ms or 0) > LEFTOVER_S * 1000
                )
                if due:
                    await self.execute(p.payment_id)
        for p in self.store.in_states([UNKNOWN]):
            if t - self.cashier.checked_ms.get(p.payment_id, 0) >= UNKNOWN_RECHECK_S * 1000:
                await self.check(p.payment_id)
