"""What the payment authority writes through the gateway: audit records (kind ``payment``,
with the payment's trace id), the payment's receipts (revisions of its checkout call in the
ledger), results handed on, and the authority's own calls (``pay``, ``payment_status``) —
recorded like any decision and run on the package host.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from hub.capabilities.host import ToolOutcome
from hub.gateway.gateway import CallContext, Decision, Gateway, ToolCall
from hub.gateway.receipts import Effect, Next, Receipt, Value, canonical
from hub.payments.errors import PaymentError
from hub.payments.model import Payment
from hub.payments.money import major
from hub.payments.policy import PAY_TOOL
from hub.payments.store import PaymentStore

log = logging.getLogger(__name__)


class PaymentRecords:
    def __init__(self, gateway: Gateway, store: PaymentStore) -> None:
        self.gw = gateway
        self.store = store

    def get(self, payment_id: str) -> Payment:
        p = self.store.get(payment_id)
        if p is None:
            raise PaymentError("pay.unknown", payment=payment_id)
        return p

    def audit(self, p: Payment | None, step: str, *, trace_id: str = "", **data: Any) -> None:
        rec: dict[str, Any] = {"step": step}
        if p is not None:
            q = self.store.get(p.payment_id) or p
            rec.update(
                payment_id=q.payment_id,
                task_id=q.task_id,
                state=q.state,
                payee=q.payee,
                amount_minor=q.amount_minor,
                currency=q.currency,
                mode=q.mode,
            )
        rec.update(data)
        self.gw.audit.append("payment", rec, trace_id=trace_id or (p.trace_id if p else ""))

    @staticmethod
    def context(p: Payment) -> CallContext:
        """The call context of ``p``'s request (for the authority's own calls)."""
        c = p.context
        return CallContext(
            owner=p.owner,
            scope=str(c.get("scope", "owner")),
            session_id=str(c.get("session_id", "")),
            run_id=str(c.get("run_id", "")),
            trace_id=p.trace_id,
        )

    async def receipt(
        self,
        p: Payment,
        status: str,
        reason: str = "",
        *,
        card_id: str = "",
        effects: tuple[Effect, ...] = (),
        waiting_for: str | None = None,
        check_with: str | None = None,
        unknowns: tuple[str, ...] = (),
    ) -> Receipt:
        """The payment's receipt: the next revision of its checkout call in the ledger."""
        p = self.get(p.payment_id)
        rev = self.store.next_revision(p.payment_id)
        values: tuple[Value, ...] = ()
        if p.amount_minor is not None:
            values = (
                Value(
                    "amount",
                    float(major(p.amount_minor, p.currency)),
                    p.currency,
                    "checkout read-back",
                ),
            )
        r = Receipt(
            status=status,
            effects=effects,
            values=values,
            unknowns=unknowns,
            next=Next(
                retry="forbidden",
                check_with=check_with,
                waiting_for=waiting_for or ("owner" if status == "waiting" else None),
            ),
            error=reason[:2000],
            revision=rev,
            card_id=card_id,
        )
        # the receipt names the payment ("pay"), recorded on the checkout call's ledger row
        call = ToolCall(p.package, PAY_TOOL, {}, p.checkout_call, p.task_id)
        d = Decision("allow", "", {}, "spend", p.payee, "")
        return await self.gw.record_revision(r, call, d, rev, p.trace_id)

    def of_call(self, call: ToolCall) -> Receipt:
        """The latest receipt the ledger holds for ``call``."""
        row = self.gw.ledger.call(call.task_id, call.call_id)
        if row is not None and row.receipt is not None:
            return Receipt.from_dict(row.receipt)
        return Receipt(status="unknown", package=call.package, tool=call.tool)

    async def result(self, r: Receipt) -> Receipt:
        """Hand a payment's outcome on (to the task waiting for it)."""
        if self.gw.on_result is not None:
            try:
                await self.gw.on_result(r)
            except Exception:
                log.exception("payment result not handed on")
        return r

    async def run_own(
        self, call: ToolCall, ctx: CallContext, effect: str, target: str, reason: str
    ) -> Receipt:
        """Record a call the authority itself makes (ledger and audit), run it on the
        package host and return the gateway's receipt of it."""
        fp = hashlib.sha256(
            canonical({"p": call.package, "t": call.tool, "a": call.args})
        ).hexdigest()
        d = Decision("allow", reason, dict(call.args), effect, target, fp)
        self.gw.record_decision(call, ctx, d, fp)
        host = self.gw.host
        if host is None:
            outcome = ToolOutcome(text="no package host", is_error=True, error_code="START_FAILED")
        else:
            outcome = await host.call(call.package, call.tool, call.args, task_id=call.task_id)
        return await self.gw.receipt(call, ctx, d, outcome)
