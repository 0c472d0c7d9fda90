"""The checkout hand-over: a ``spend`` tool's receipt that reads back payee and amount
(effect ``checkout.opened``) binds them to the task's open intent and asks — a card on the
phone carrying a one-time authorisation (valid 60 s), or, when every auto-pay condition
holds, an auto-payment that pays after its undo window (the phone gets a notice card).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

from hub.gateway.gateway import CallContext, Decision, ToolCall
from hub.gateway.receipts import Receipt
from hub.payments import policy
from hub.payments.cards import PaymentCards
from hub.payments.cashier import CHECK_CALL, PAY_CALL
from hub.payments.errors import PaymentError
from hub.payments.model import AUTHORISED, AWAITING, INTENT, Payment, new_authorisation
from hub.payments.money import check_currency, fmt
from hub.payments.policy import PAY_TOOL, Standing
from hub.payments.records import PaymentRecords
from hub.payments.store import PaymentStore
from storage.sqlite import transaction

CHECKOUT_EFFECT = "checkout.opened"


class CheckoutHandover:
    """``standing`` gives the auto-pay facts of a payment at a time (read inside the
    transaction that authorises, so the daily cap holds under concurrency); ``pay_at``
    schedules an auto-payment for the end of its undo window."""

    def __init__(
        self,
        store: PaymentStore,
        records: PaymentRecords,
        cards: PaymentCards,
        clock: Callable[[], int],
        standing: Callable[[Payment, int], Standing],
        pay_at: Callable[[str, int], None],
    ) -> None:
        self.store = store
        self.records = records
        self.cards = cards
        self.clock = clock
        self.standing = standing
        self.pay_at = pay_at

    async def on_receipt(
        self, call: ToolCall, ctx: CallContext, decision: Decision, r: Receipt
    ) -> Receipt:
        """A ``spend`` tool's receipt: a checkout read-back is handed over (card, or
        auto-pay); the authority's own pay/status calls pass through unchanged."""
        if call.call_id.startswith((PAY_CALL, CHECK_CALL)) or call.tool == PAY_TOOL:
            return r
        open_ = [p for p in self.store.for_task(call.task_id, [INTENT]) if p.owner == ctx.owner]
        if not open_:
            return r
        p = open_[0]
        eff = next(
            (e for e in r.effects if e.kind == CHECKOUT_EFFECT and e.state == "verified"), None
        )
        if r.status != "succeeded" or eff is None:
            self.records.audit(p, "checkout_failed", status=r.status, error=r.error[:300])
            return r
        f = eff.fields
        try:
            checkout_id = str(f["checkout_id"])[:128]
            payee = str(f["payee"])[:200]
            amount = int(f["amount_minor"])
            currency = check_currency(str(f["currency"]))
            if not checkout_id or not payee or amount <= 0 or isinstance(f["amount_minor"], bool):
                raise ValueError("empty")
        except (KeyError, ValueError, TypeError, PaymentError):
            self.records.audit(p, "checkout_unreadable", fields_seen=sorted(f)[:20])
            return replace(
                r,
                status="unknown",
                unknowns=(*r.unknowns, "the checkout did not read back payee and amount"),
            )
        return await self._handover(p, call, checkout_id, payee, amount, currency)

    async def _handover(
        self, p: Payment, call: ToolCall, checkout_id: str, payee: str, amount: int, currency: str
    ) -> Receipt:
        opts = self.store.options()
        t = self.clock()
        context = dict(p.context, checkout_tool=call.tool, request_currency=p.currency)
        with transaction(self.store.db):
            moved = self.store.move(
                p.payment_id,
                INTENT,
                AWAITING,
                f"checkout read back: {fmt(amount, currency)} to {payee}",
                package=call.package,
                checkout_call=call.call_id,
                checkout_id=checkout_id,
                payee=payee,
                amount_minor=amount,
            )
            if moved:
                self.store.db.execute(
                    "UPDATE payments SET currency=?, context=? WHERE payment_id=?",
                    (currency, json.dumps(context), p.payment_id),
                )
                p = self.records.get(p.payment_id)
                unmet = policy.auto_unmet(p, opts, self.standing(p, t))
                auth = new_authorisation(p, "auto" if not unmet else "card", t)
                if not unmet:
                    auth = replace(auth, state="approved", approved_ms=t, approved_by="auto-pay")
                self.store.insert_auth(auth)
                if not unmet:
                    self.store.move(
                        p.payment_id,
                        AWAITING,
                        AUTHORISED,
                        "auto-pay: every condition met",
                        mode="auto",
                        authorised_ms=t,
                        undo_until_ms=t + opts.undo_seconds * 1000,
                    )
        if not moved:  # cancelled or handed over by a concurrent checkout call
            return replace(
                self.records.of_call(call),
                status="cancelled",
                error="the payment intent is no longer open",
            )
        p = self.records.get(p.payment_id)
        self.records.audit(
            p,
            "checkout_read",
            checkout_id=checkout_id,
            payee=payee,
            amount_minor=amount,
            currency=currency,
            call_id=call.call_id,
        )
        if not unmet:
            assert p.undo_until_ms is not None
            self.records.audit(
                p, "authorised", method="auto", auth_id=auth.auth_id, undo_until_ms=p.undo_until_ms
            )
            self.pay_at(p.payment_id, p.undo_until_ms)
            notice = await self.cards.issue(p, auth)
            return await self.records.receipt(
                p,
                "running",
                f"auto-pay: paying in {opts.undo_seconds} s unless you undo",
                waiting_for="undo",
                card_id=notice.card_id,
            )
        if opts.auto_pay:
            self.records.audit(p, "auto_pay_fallback", reasons=unmet)
        card = await self.cards.issue(p, auth)
        return await self.records.receipt(
            p, "waiting", "waiting for the owner's approval on the phone", card_id=card.card_id
        )
