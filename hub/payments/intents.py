"""Payment intents: opened only from the owner's own request (platform code, from the
admitted turn), handed to the sub-task that drives the checkout, and found again ("the same
as last time", the payments waiting for approval, those still undoable).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from hub.gateway.gateway import CallContext
from hub.payments import model as m
from hub.payments import policy
from hub.payments.errors import PaymentError
from hub.payments.model import AUTHORISED, AWAITING, INTENT, PAID, Payment, PaymentRequest
from hub.payments.money import check_currency, to_minor
from hub.payments.records import PaymentRecords
from hub.payments.store import PaymentStore


class PaymentIntents:
    def __init__(
        self, store: PaymentStore, records: PaymentRecords, clock: Callable[[], int]
    ) -> None:
        self.store = store
        self.records = records
        self.clock = clock

    def open(
        self,
        ctx: CallContext,
        request: PaymentRequest,
        *,
        task_id: str,
        description: str,
        budget: str | int | None = None,
        currency: str | None = None,
        order: dict[str, Any] | None = None,
    ) -> Payment:
        """Open the payment intent of ``task_id`` — only for the owner's own request."""
        problem = policy.intent_problem(request.source, ctx, task_id)
        if problem:
            self.records.audit(
                None,
                "intent_refused",
                trace_id=ctx.trace_id,
                task_id=task_id,
                source=request.source,
                scope=ctx.scope,
                scheduled=ctx.scheduled,
                reason=problem,
            )
            raise PaymentError("pay.not_owner_request", reason=problem)
        active = [p for p in self.store.for_task(task_id) if p.state not in m.FINAL]
        if active:
            raise PaymentError("pay.intent_exists", task=task_id, payment=active[0].payment_id)
        cur = check_currency(currency or self.store.options().currency)
        budget_minor = to_minor(budget, cur) if budget is not None else None
        t = self.clock()
        p = Payment(
            payment_id="pay-" + secrets.token_hex(8),
            task_id=task_id,
            owner=ctx.owner,
            trace_id=ctx.trace_id,
            request=request,
            description=description[:300],
            budget_minor=budget_minor,
            currency=cur,
            state=INTENT,
            context={
                "scope": ctx.scope,
                "session_id": ctx.session_id,
                "run_id": ctx.run_id,
                **({"order": order} if order else {}),
            },
            created_ms=t,
            updated_ms=t,
        )
        self.store.insert(p)
        self.records.audit(
            p,
            "intent_opened",
            source=request.source,
            utterance_id=request.utterance_id,
            device_id=request.device_id,
            description=p.description,
            budget_minor=budget_minor,
        )
        return p

    def hand_to(self, payment_id: str, task_id: str, ctx: CallContext) -> bool:
        """Give an open intent to ``task_id`` (the same owner's task that drives the
        checkout), once; ``False`` if it is no longer open or that task is busy paying."""
        p = self.store.get(payment_id)
        if p is None or p.owner != ctx.owner or not task_id:
            return False
        if any(q.state not in m.FINAL for q in self.store.for_task(task_id)):
            return False
        if not self.store.rekey(payment_id, p.task_id, task_id):
            return False
        self.records.audit(p, "intent_handed", trace_id=ctx.trace_id, to_task=task_id)
        return True

    def note_order(self, payment_id: str, order: dict[str, Any]) -> None:
        """Keep what was ordered (shop, item ids, quantities) with the payment."""
        p = self.records.get(payment_id)
        self.store.set_context(payment_id, dict(p.context, order=order))

    def last_order(self, owner: str, word: str = "") -> Payment | None:
        """The owner's most recent paid payment that kept its order (shop and items),
        preferring one whose description holds ``word`` ("lunch")."""
        paid = [
            p
            for p in reversed(self.store.recent(200))
            if p.owner == owner and p.state == PAID and isinstance(p.context.get("order"), dict)
        ]
        if word:
            w = word.lower()
            named = [p for p in paid if w in p.description.lower()]
            if named:
                return named[0]
        return paid[0] if paid else None

    def waiting(self, owner: str) -> list[Payment]:
        """The owner's payments waiting for approval (newest first)."""
        rows = [p for p in self.store.in_states([AWAITING]) if p.owner == owner]
        return sorted(rows, key=lambda p: p.updated_ms, reverse=True)

    def undoable(self, owner: str) -> list[Payment]:
        """The owner's auto-payments still inside their undo window (newest first)."""
        t = self.clock()
        rows = [
            p
            for p in self.store.in_states([AUTHORISED])
            if p.owner == owner
            and p.mode == "auto"
            and p.undo_until_ms is not None
            and t < p.undo_until_ms
        ]
        return sorted(rows, key=lambda p: p.updated_ms, reverse=True)
