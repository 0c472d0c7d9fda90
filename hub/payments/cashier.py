"""Paying, once: the cashier claims an authorised payment's authorisation with one
compare-and-set (approved → used, authorised → paying) and only the winner calls the
package's ``pay`` tool, with the authorisation id as the provider's idempotency key. It
settles what the provider answered — paid, failed, a changed amount (void the card, a new
one: at most 2), or ``unknown`` — and checks an unknown payment with the provider
(``payment_status``); nothing ever retries a payment.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from hub.gateway.consent import Card
from hub.gateway.gateway import ToolCall
from hub.gateway.receipts import Effect, Receipt
from hub.payments.cards import PaymentCards
from hub.payments.model import (
    AWAITING,
    CANCELLED,
    FAILED,
    MAX_REISSUES,
    PAID,
    PAYING,
    UNKNOWN,
    Authorisation,
    Payment,
    new_authorisation,
)
from hub.payments.money import fmt
from hub.payments.policy import PAY_TOOL
from hub.payments.records import PaymentRecords
from hub.payments.store import PaymentStore
from protos import consent_pb2
from storage.sqlite import transaction

STATUS_TOOL = "payment_status"
"""a checkout package's status tool (``pay``'s ``check_with``)"""
PAY_CALL = "authority-pay-"
CHECK_CALL = "authority-check-"


class Cashier:
    def __init__(
        self,
        store: PaymentStore,
        records: PaymentRecords,
        cards: PaymentCards,
        clock: Callable[[], int],
    ) -> None:
        self.store = store
        self.records = records
        self.cards = cards
        self.clock = clock
        self.checked_ms: dict[str, int] = {}
        """payment id → when its status was last checked with the provider"""

    async def execute(self, payment_id: str) -> Receipt | None:
        """Pay an authorised payment — once. Every concurrent or later attempt gets
        ``None``: only the attempt that claims the authorisation calls the provider."""
        auth = self.store.claim(payment_id, at_ms=self.clock())
        if auth is None:
            return None
        p = self.records.get(payment_id)
        self.records.audit(p, "paying", auth_id=auth.auth_id, method=auth.method)
        call = ToolCall(
            p.package,
            PAY_TOOL,
            {
                "checkout_id": auth.checkout_id,
                "amount_minor": auth.amount_minor,
                "currency": auth.currency,
                "idempotency_key": auth.auth_id,
            },
            PAY_CALL + auth.auth_id,
            p.task_id,
        )
        ctx = self.records.context(p)
        r = await self.records.run_own(
            call, ctx, "spend", auth.payee, f"authorised ({auth.method})"
        )
        return await self.records.result(await self._settle(p, auth, r))

    async def _settle(self, p: Payment, auth: Authorisation, r: Receipt) -> Receipt:
        # the phone's card follows the outcome only when it was what authorised the payment
        card = self.cards.of(auth) if auth.method in ("card", "auto") else None
        if r.status == "succeeded":
            eff = next((e for e in r.confirmed_effects if e.kind == "payment.paid"), None)
            f = eff.fields if eff else {}
            if eff is not None and (
                f.get("amount_minor"),
                f.get("currency"),
                f.get("checkout_id"),
            ) == (auth.amount_minor, auth.currency, auth.checkout_id):
                ref = str(f.get("payment_ref", ""))[:128]
                self.store.move(p.payment_id, PAYING, PAID, "paid", provider_ref=ref)
                self.records.audit(p, "paid", auth_id=auth.auth_id, provider_ref=ref)
                out = await self.records.receipt(
                    p,
                    "succeeded",
                    effects=(Effect("payment.paid", eff.state, auth.payee, dict(f)),),
                )
                await self.cards.close(card, consent_pb2.EXECUTED, "", out, note="")
                return out
            return await self._unknown(
                p, auth, "the provider's confirmation does not match the authorisation", card
            )
        if r.status == "failed" and r.error_code == "PRICE_CHANGED":
            read = next((e for e in r.effects if e.kind == "checkout.read"), None)
            try:
                new_amount = int(read.fields["amount_minor"]) if read else 0
            except (KeyError, TypeError, ValueError):
                new_amount = 0
            return await self._price_changed(p, auth, new_amount, card)
        if r.status == "failed":
            reason = f"{r.error_code or 'failed'}: {r.error}".strip(": ")
            self.store.move(p.payment_id, PAYING, FAILED, reason)
            self.records.audit(
                p, "failed", auth_id=auth.auth_id, error_code=r.error_code, reason=r.error
            )
            out = await self.records.receipt(p, "failed", f"not paid: {reason}")
            await self.cards.close(card, consent_pb2.EXECUTED, reason, out, note="")
            return out
        why = r.error or "; ".join(r.unknowns) or r.status
        return await self._unknown(p, auth, why, card)

    async def _unknown(
        self, p: Payment, auth: Authorisation, why: str, card: Card | None
    ) -> Receipt:
        self.store.move(p.payment_id, PAYING, UNKNOWN, why[:300])
        self.records.audit(p, "unknown", auth_id=auth.auth_id, reason=why[:300])
        out = await self.records.receipt(
            p,
            "unknown",
            "the provider did not confirm: checking with it before anything else",
            check_with=STATUS_TOOL,
            unknowns=(why[:300],),
        )
        await self.cards.close(card, consent_pb2.EXECUTED, "result unknown: checking", out, note="")
        checked = await self.check(p.payment_id)
        return checked or out

    async def _price_changed(
        self, p: Payment, auth: Authorisation, new_amount: int, card: Card | None
    ) -> Receipt:
        old = auth.amount_minor
        reason = (
            f"the amount changed at the checkout: {fmt(old, auth.currency)} → "
            f"{fmt(new_amount, auth.currency) if new_amount > 0 else 'unreadable'}"
        )
        self.store.end_auth(auth.auth_id, ("used",), "voided", reason)
        await self.cards.close(card, consent_pb2.VOIDED, reason)
        p = self.records.get(p.payment_id)
        if p.reissues >= MAX_REISSUES or new_amount <= 0:
            stop = f"{reason}; stopped after {p.reissues} new cards: not paid"
            self.store.move(p.payment_id, PAYING, CANCELLED, stop)
            self.records.audit(p, "stopped", auth_id=auth.auth_id, reason=stop, reissues=p.reissues)
            return await self.records.receipt(p, "cancelled", stop)
        t = self.clock()
        with transaction(self.store.db):
            self.store.move(
                p.payment_id,
                PAYING,
                AWAITING,
                reason,
                amount_minor=new_amount,
                reissues=p.reissues + 1,
                mode="",
                undo_until_ms=None,
            )
            p = self.records.get(p.payment_id)
            new = new_authorisation(p, "card", t)
            self.store.insert_auth(new)
        self.records.audit(
            p,
            "card_reissued",
            old_auth=auth.auth_id,
            auth_id=new.auth_id,
            old_amount_minor=old,
            amount_minor=new_amount,
            reissues=p.reissues,
        )
        new_card = await self.cards.issue(p, new)
        return await self.records.receipt(
            p,
            "waiting",
            f"{reason}: a new card waits for the owner ({p.reissues} of {MAX_REISSUES})",
            card_id=new_card.card_id,
        )

    async def check(self, payment_id: str) -> Receipt | None:
        """Ask the provider what became of an ``unknown`` payment (never pays again)."""
        p = self.records.get(payment_id)
        if p.state != UNKNOWN:
            return None
        auth = next((a for a in reversed(self.store.auths(payment_id)) if a.state == "used"), None)
        if auth is None:
            return None
        self.checked_ms[payment_id] = self.clock()
        call = ToolCall(
            p.package,
            STATUS_TOOL,
            {"idempotency_key": auth.auth_id},
            f"{CHECK_CALL}{auth.auth_id}-{secrets.token_hex(3)}",
            p.task_id,
        )
        ctx = self.records.context(p)
        r = await self.records.run_own(
            call, ctx, "observe", auth.payee, "status check of an unknown payment"
        )
        eff = next((e for e in r.effects if e.kind == "payment.status"), None)
        f = eff.fields if eff is not None and r.status == "succeeded" else {}
        state = str(f.get("state", ""))
        self.records.audit(
            p, "status_check", auth_id=auth.auth_id, provider_state=state or r.status
        )
        if state == "paid" and (f.get("amount_minor"), f.get("currency")) == (
            auth.amount_minor,
            auth.currency,
        ):
            ref = str(f.get("payment_ref", ""))[:128]
            if not self.store.move(
                payment_id, UNKNOWN, PAID, "the provider says: paid", provider_ref=ref
            ):
                return None
            self.records.audit(
                p, "paid", auth_id=auth.auth_id, provider_ref=ref, via="status check"
            )
            paid = Effect(
                "payment.paid",
                "verified",
                auth.payee,
                {
                    "checkout_id": auth.checkout_id,
                    "payee": auth.payee,
                    "amount_minor": auth.amount_minor,
                    "currency": auth.currency,
                    "payment_ref": ref,
                },
            )
            out = await self.records.receipt(p, "succeeded", effects=(paid,))
            return await self.records.result(out)
        if state in ("failed", "not_found"):
            why = str(f.get("reason", "")) or "the provider has no such payment"
            if not self.store.move(payment_id, UNKNOWN, FAILED, f"not charged: {why}"):
                return None
            self.records.audit(p, "failed", auth_id=auth.auth_id, reason=why, via="status check")
            out = await self.records.receipt(p, "failed", f"not paid: the provider says {why}")
            return await self.records.result(out)
        return None  # processing, or the provider could not be asked: still unknown
