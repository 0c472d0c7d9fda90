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
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from hub.capabilities.host import ToolOutcome
from hub.gateway.consent import EXPIRED_NOW, Answer, Card
from hub.gateway.gateway import CallContext, Decision, Gateway, ToolCall
from hub.gateway.receipts import Effect, Next, Receipt, Value, canonical
from hub.payments import model as m
from hub.payments.errors import PaymentError
from hub.payments.model import (
    AUTH_TTL_S,
    AUTHORISED,
    AWAITING,
    CANCELLED,
    EXPIRED,
    FAILED,
    INTENT,
    MAX_REISSUES,
    PAID,
    PAYING,
    UNKNOWN,
    Authorisation,
    Payment,
    PaymentRequest,
    VoiceEvidence,
)
from hub.payments.money import check_currency, fmt, major, to_minor
from hub.payments.options import CHANGE_TTL_S, MAX_CHANGE_BYTES, PayOptions, apply
from hub.payments.store import Lease, PaymentStore, now_ms
from protos import consent_pb2
from protos.codec import (
    APPROVAL_CONTEXT,
    PAY_OPTIONS_CONTEXT,
    UNLOCK_LEASE_CONTEXT,
    parse,
    signing_input,
)
from provisioning.registry import DeviceRecord
from storage.sqlite import transaction

log = logging.getLogger(__name__)

PAY_TOOL = "pay"
"""a checkout package's paying tool: only the authority calls it"""
STATUS_TOOL = "payment_status"
"""a checkout package's status tool (``pay``'s ``check_with``)"""
CHECKOUT_EFFECT = "checkout.opened"
PAY_CALL = "authority-pay-"
CHECK_CALL = "authority-check-"
PHONE_PROFILE = "phone"
LEASE_MAX_S = 15 * 60
"""an unlock lease lasts at most this long"""
LEASE_SIGNED_WITHIN_S = 60
SWEEP_S = 1.0
UNKNOWN_RECHECK_S = 30.0
LEFTOVER_S = 5.0
"""an approved payment not paying after this long was left over by a stop: the sweep pays it"""
MAX_APPROVAL_BYTES = 4096
MAX_LEASE_BYTES = 1024
AUTO_TITLE = "auto-pay"
"""the title of an auto-payment's notice card starts with this (the phone undoes by denying
it; it cannot be approved)"""

DeviceLookup = Callable[[str], DeviceRecord | None]


@dataclass(frozen=True)
class VoiceOutcome:
    """The result of "pay it": ``paid`` (a receipt follows) or a fallback to the card."""

    authorised: bool
    reason: str
    receipt: Receipt | None = None
    card_id: str = ""


def _phone_problem(profile: str, scopes: tuple[str, ...] | list[str], revoked: bool) -> str:
    if revoked:
        return "the device is revoked"
    if profile != PHONE_PROFILE:
        return "payments are approved only on the owner's phone"
    if "approve" not in scopes:
        return "this device may not answer cards"
    return ""


def _verify(sign_pk: bytes, context: bytes, body: bytes, signature: bytes) -> bool:
    try:
        VerifyKey(sign_pk).verify(signing_input(context, body), signature)
    except (BadSignatureError, ValueError, TypeError):
        return False
    return True


def _local_midnight_ms(t_ms: int) -> int:
    day = dt.datetime.fromtimestamp(t_ms / 1000).astimezone()
    start = day.replace(hour=0, minute=0, second=0, microsecond=0)
    return int(start.timestamp() * 1000)


class PaymentAuthority:
    """See the module docstring. Attach with :func:`hub.payments.open_payments`."""

    def __init__(
        self,
        gateway: Gateway,
        store: PaymentStore,
        *,
        devices: DeviceLookup | None = None,
    ) -> None:
        self.gw = gateway
        self.store = store
        self.devices = devices
        self.clock: Callable[[], int] = now_ms
        """milliseconds now (tests move it)"""
        self.tasks: Any = None
        """a :class:`sync.tasks.TaskOwner` for undo timers (set by ``open_payments``)"""
        self._checked_ms: dict[str, int] = {}

    # ------------------------------------------------------------------ helpers
    @property
    def options(self) -> PayOptions:
        return self.store.options()

    def _audit(self, p: Payment | None, step: str, *, trace_id: str = "", **data: Any) -> None:
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

    def _ctx(self, p: Payment) -> CallContext:
        c = p.context
        return CallContext(
            owner=p.owner,
            scope=str(c.get("scope", "owner")),
            session_id=str(c.get("session_id", "")),
            run_id=str(c.get("run_id", "")),
            trace_id=p.trace_id,
        )

    def _get(self, payment_id: str) -> Payment:
        p = self.store.get(payment_id)
        if p is None:
            raise PaymentError("pay.unknown", payment=payment_id)
        return p

    def _new_auth(self, p: Payment, method: str, t: int) -> Authorisation:
        assert p.amount_minor is not None
        auth_id = "pa-" + secrets.token_hex(12)
        nonce = secrets.token_bytes(16)
        expires = t + AUTH_TTL_S * 1000
        return Authorisation(
            auth_id=auth_id,
            payment_id=p.payment_id,
            card_id="",
            payee=p.payee,
            amount_minor=p.amount_minor,
            currency=p.currency,
            checkout_id=p.checkout_id,
            nonce=nonce,
            binding=m.binding(
                payment_id=p.payment_id,
                auth_id=auth_id,
                payee=p.payee,
                amount_minor=p.amount_minor,
                currency=p.currency,
                checkout_id=p.checkout_id,
                nonce=nonce,
                expires_ms=expires,
            ),
            method=method,
            state="issued",
            issued_ms=t,
            expires_ms=expires,
        )

    @staticmethod
    def _rebind(a: Authorisation) -> bytes:
        return m.binding(
            payment_id=a.payment_id,
            auth_id=a.auth_id,
            payee=a.payee,
            amount_minor=a.amount_minor,
            currency=a.currency,
            checkout_id=a.checkout_id,
            nonce=a.nonce,
            expires_ms=a.expires_ms,
        )

    def known_payee(self, payee: str) -> bool:
        """Paid before (successfully), or named as known by the owner (signed options)."""
        named = {x.lower() for x in self.options.known_payees}
        return payee.lower() in named or self.store.paid_before(payee)

    def valid_lease(self, t: int | None = None) -> Lease | None:
        """An unexpired unlock lease of a phone that is still enrolled and not revoked."""
        t = t if t is not None else self.clock()
        for lease in self.store.leases():
            if lease.expires_ms <= t:
                continue
            if self.devices is not None:
                rec = self.devices(lease.device_id)
                if rec is None or _phone_problem(rec.profile, rec.scopes, rec.revoked):
                    continue
            return lease
        return None

    # ------------------------------------------------------------------ 1. intents
    def open_intent(
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
        """Open the payment intent of ``task_id`` — only for the owner's own request.
        ``order`` (shop and items, as the brain understood the request) is kept with the
        payment so "the same as last time" can be found again (:meth:`last_order`)."""
        problem = ""
        if request.source not in m.OWNER_SOURCES:
            what = request.source or "an unknown source"
            problem = (
                f"the request came from {what}: content is never a request to pay"
                if request.source in m.EXTERNAL_SOURCES or not request.source
                else f"the request came from {what}, not from the owner's own words"
            )
        elif ctx.scope != "owner":
            problem = f"scope {ctx.scope!r}: only the verified owner may ask for a payment"
        elif ctx.scheduled:
            problem = "a scheduled run never opens a payment"
        elif not task_id:
            problem = "no task"
        if problem:
            self._audit(
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
        cur = check_currency(currency or self.options.currency)
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
        self._audit(
            p,
            "intent_opened",
            source=request.source,
            utterance_id=request.utterance_id,
            device_id=request.device_id,
            description=p.description,
            budget_minor=budget_minor,
        )
        return p

    async def cancel(self, payment_id: str, reason: str = "cancelled by the owner") -> bool:
        """Cancel a payment that has not started paying (intent, awaiting, authorised)."""
        p = self._get(payment_id)
        with transaction(self.store.db):
            moved = self.store.move(payment_id, (INTENT, AWAITING, AUTHORISED), CANCELLED, reason)
            if moved:
                for a in self.store.auths(payment_id):
                    self.store.end_auth(a.auth_id, ("issued", "approved"), "voided", reason)
        if not moved:
            return False
        self._audit(p, "cancelled", reason=reason)
        r = await self._receipt(p, "cancelled", f"{reason}: not paid") if p.checkout_call else None
        cur = self.store.current_auth(payment_id)
        card = self.gw.consent.card(cur.card_id) if cur is not None and cur.card_id else None
        if card is not None and card.state == "pending":
            self.gw.consent.set_state(card.card_id, "voided", reason)
            await self.gw._update(card, consent_pb2.VOIDED, reason, r)
        if r is not None:
            await self._result(r)
        return True

    def hand_to(self, payment_id: str, task_id: str, ctx: CallContext) -> bool:
        """Give an open intent (state ``intent``, not yet at a checkout) to ``task_id``: the
        background task of the same owner that will drive the checkout (the LLM brain's
        sub-agent). Once; ``False`` if it is no longer open or the task already has a
        payment in progress."""
        p = self.store.get(payment_id)
        if p is None or p.owner != ctx.owner or not task_id:
            return False
        if any(q.state not in m.FINAL for q in self.store.for_task(task_id)):
            return False
        if not self.store.rekey(payment_id, p.task_id, task_id):
            return False
        self._audit(p, "intent_handed", trace_id=ctx.trace_id, to_task=task_id)
        return True

    def note_order(self, payment_id: str, order: dict[str, Any]) -> None:
        """Keep what was ordered (shop, item ids, quantities) with the payment, once the
        menu resolved the owner's words (for "the same as last time")."""
        p = self._get(payment_id)
        self.store.set_context(payment_id, dict(p.context, order=order))

    # ------------------------------------------------------------------ lookups (brain)
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

    # ------------------------------------------------------------------ 2. the gate
    def gate(
        self, call: ToolCall, ctx: CallContext, tool: str, args: dict[str, Any]
    ) -> tuple[str, str]:
        """The gateway's ``spend`` gate: ``(allow|block, reason)``."""
        reason = ""
        if tool == PAY_TOOL:
            reason = (
                "a payment is made only by the payment authority, after the owner authorised "
                "exactly that payee and amount"
            )
        elif ctx.scope != "owner" or ctx.scheduled:
            reason = "only the owner's own, live request may go to a checkout"
        else:
            mine = [p for p in self.store.for_task(call.task_id) if p.owner == ctx.owner]
            if not any(p.state == INTENT for p in mine):
                busy = [p for p in mine if p.state not in m.FINAL]
                reason = (
                    f"this task's payment is already {busy[0].state.replace('_', ' ')}"
                    if busy
                    else "no payment intent from the owner for this task: the checkout is refused"
                )
        if reason:
            self._audit(
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
        return "allow", ""

    # ------------------------------------------------------------------ 3. hand-over
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
            self._audit(p, "checkout_failed", status=r.status, error=r.error[:300])
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
            self._audit(p, "checkout_unreadable", fields_seen=sorted(f)[:20])
            return replace(
                r,
                status="unknown",
                unknowns=(*r.unknowns, "the checkout did not read back payee and amount"),
            )
        return await self._handover(p, call, checkout_id, payee, amount, currency)

    def _auto_unmet(self, p: Payment, opts: PayOptions, t: int) -> list[str]:
        """Why small-amount auto-pay may not pay ``p`` (empty: it may). Call inside the
        transaction that authorises, so the daily cap holds under concurrency."""
        assert p.amount_minor is not None
        unmet: list[str] = []
        if not opts.auto_pay:
            return ["auto-pay is off"]
        if p.currency != opts.currency:
            unmet.append(f"auto-pay limits are in {opts.currency}, this is {p.currency}")
        if p.context.get("request_currency", p.currency) != p.currency:
            unmet.append("the checkout's currency is not the request's")
        if p.amount_minor > opts.auto_pay_limit:
            unmet.append(f"over the auto-pay limit of {fmt(opts.auto_pay_limit, opts.currency)}")
        spent = self.store.auto_spent(_local_midnight_ms(t), p.currency)
        if spent + p.amount_minor > opts.auto_pay_daily:
            unmet.append(
                f"over today's auto-pay cap of {fmt(opts.auto_pay_daily, opts.currency)} "
                f"({fmt(spent, p.currency)} already)"
            )
        if p.budget_minor is not None and p.amount_minor > p.budget_minor:
            unmet.append("over the request's budget")
        if not self.known_payee(p.payee):
            unmet.append(f"{p.payee} is not a known payee")
        voice = p.request.voice
        if voice is None or not voice.owner_verified:
            unmet.append("the request was not voice-verified as the owner's")
        if self.valid_lease(t) is None:
            unmet.append("no valid unlock lease from the phone")
        window = opts.same_payee_minutes * 60_000
        recent = self.store.recent_to_payee(p.payee, t - window, p.payment_id)
        if recent:
            unmet.append(
                f"another payment to {p.payee} within {opts.same_payee_minutes} min ({recent[0]})"
            )
        return unmet

    async def _handover(
        self, p: Payment, call: ToolCall, checkout_id: str, payee: str, amount: int, currency: str
    ) -> Receipt:
        opts = self.options
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
                p = self._get(p.payment_id)
                unmet = self._auto_unmet(p, opts, t)
                auth = self._new_auth(p, "auto" if not unmet else "card", t)
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
                await self._receipt_for_call(call),
                status="cancelled",
                error="the payment intent is no longer open",
            )
        p = self._get(p.payment_id)
        self._audit(
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
            self._audit(
                p, "authorised", method="auto", auth_id=auth.auth_id, undo_until_ms=p.undo_until_ms
            )
            self._schedule(p.payment_id, p.undo_until_ms)
            notice = await self._issue_card(p, auth)
            return await self._receipt(
                p,
                "running",
                f"auto-pay: paying in {opts.undo_seconds} s unless you undo",
                waiting_for="undo",
                card_id=notice.card_id,
            )
        if opts.auto_pay:
            self._audit(p, "auto_pay_fallback", reasons=unmet)
        card = await self._issue_card(p, auth)
        return await self._receipt(
            p, "waiting", "waiting for the owner's approval on the phone", card_id=card.card_id
        )

    async def _receipt_for_call(self, call: ToolCall) -> Receipt:
        row = self.gw.ledger.call(call.task_id, call.call_id)
        if row is not None and row.receipt is not None:
            return Receipt.from_dict(row.receipt)
        return Receipt(status="unknown", package=call.package, tool=call.tool)

    async def _issue_card(self, p: Payment, auth: Authorisation) -> Card:
        """The phone card of an authorisation: an approval card, or — for an auto-payment
        (``auth.method == "auto"``) — the notice that it pays after the undo window, which
        the phone denies to undo (``yimi pay undo``)."""
        assert p.amount_minor is not None
        amount = fmt(p.amount_minor, p.currency)
        auto = auth.method == "auto"
        lines = [
            f"payee: {p.payee}",
            f"amount: {amount}",
            f"for: {p.description}" if p.description else "",
            f"checkout: {p.checkout_id}",
            f"payment: {p.payment_id}",
        ]
        asked = str(p.context.get("request_currency", p.currency))
        if asked != p.currency:
            lines.append(f"note: you asked in {asked}; the checkout is in {p.currency}")
        elif p.budget_minor is not None and p.amount_minor > p.budget_minor:
            lines.append(f"note: over your budget of {fmt(p.budget_minor, p.currency)}")
        if p.reissues:
            lines.append(f"the amount changed at the checkout (new card {p.reissues} of 2)")
        if auto:
            assert p.undo_until_ms is not None
            when = dt.datetime.fromtimestamp(p.undo_until_ms / 1000).strftime("%H:%M:%S")
            lines.append(
                f"auto-pay: paying at {when} unless you undo "
                f"(yimi pay undo --bundle PHONE {p.payment_id})"
            )
            title = f"{AUTO_TITLE}: {amount} to {p.payee} in {self.options.undo_seconds} s"
            expires = p.undo_until_ms
        else:
            lines.append(f"valid {AUTH_TTL_S} s; approve on this phone while it is unlocked")
            title = f"pay {amount} to {p.payee}"
            expires = auth.expires_ms
        card, voided = self.gw.consent.issue(
            task_id=p.task_id,
            call_id=p.checkout_call,
            owner=p.owner,
            package=p.package,
            tool=PAY_TOOL,
            args={
                "payment_id": p.payment_id,
                "auth_id": auth.auth_id,
                "payee": p.payee,
                "amount_minor": p.amount_minor,
                "currency": p.currency,
                "checkout_id": p.checkout_id,
            },
            effect="spend",
            target=p.payee,
            task_type="payment.auto" if auto else "payment",
            title=title,
            preview="\n".join(x for x in lines if x),
            action_hash=auth.binding,
            context={
                "trace_id": p.trace_id,
                "payment_id": p.payment_id,
                "scope": p.context.get("scope", "owner"),
                "session_id": p.context.get("session_id", ""),
                "run_id": p.context.get("run_id", ""),
            },
            expires_ms=expires,
        )
        self.store.set_card(auth.auth_id, card.card_id)
        self._audit(
            p,
            "auto_pay_notice" if auto else "card_issued",
            card_id=card.card_id,
            auth_id=auth.auth_id,
            expires_ms=expires,
        )
        for old in voided:
            await self.gw._update(old, consent_pb2.VOIDED, "the amount changed")
        if self.gw.courier is not None:
            try:
                await self.gw.courier.show(card)
            except Exception:  # the card waits in the ledger; the phone gets it on sync
                log.exception("payment card %s not delivered now", card.card_id)
        return card

    async def _receipt(
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
        p = self._get(p.payment_id)
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
        r = self.gw._stamp(r, call, d, rev)
        stored = await self.gw._store(p.task_id, p.checkout_call, r, p.trace_id)
        return self.gw._facts(stored)

    async def _result(self, r: Receipt) -> Receipt:
        if self.gw.on_result is not None:
            try:
                await self.gw.on_result(r)
            except Exception:
                log.exception("payment result not handed on")
        return r

    # ------------------------------------------------------------------ 4. answers
    async def answer(
        self,
        approval: consent_pb2.Approval,
        *,
        device_id: str,
        sign_pk: bytes,
        scopes: tuple[str, ...] | list[str],
        profile: str = "",
        revoked: bool = False,
        trace_id: str = "",
    ) -> tuple[Answer, Receipt | None] | None:
        """A phone's answer to a payment card; ``None`` if it is not for a payment card."""
        body = parse(consent_pb2.ApprovalBody, approval.body, MAX_APPROVAL_BYTES)
        if body is None:
            return None
        card = self.gw.consent.card(body.card_id[:64])
        if card is None or card.effect != "spend":
            return None
        auth = self.store.auth_by_card(card.card_id)
        if auth is None:
            return await self._refuse(card, None, device_id, "no authorisation behind this card")
        p = self._get(auth.payment_id)
        t = self.clock()
        problem = _phone_problem(profile, scopes, revoked)
        if not problem and not _verify(
            sign_pk, APPROVAL_CONTEXT, approval.body, approval.signature
        ):
            problem = "bad signature"
        if not problem and body.device_id != device_id:
            problem = "signed by another device"
        if not problem and body.decision == consent_pb2.APPROVE and auth.method != "auto":
            if not body.lock_sensor:
                problem = "no lock state reported: answer payment cards with 'yimi pay approve'"
            elif not body.unlocked:
                problem = "the phone was locked: unlock it and approve again"
            elif t - body.signed_ms > AUTH_TTL_S * 1000:
                problem = f"the approval is older than {AUTH_TTL_S} s"
            elif body.signed_ms - t > m.APPROVAL_SKEW_S * 1000:
                problem = "the approval is signed in the future"
            elif self._rebind(auth) != card.action_hash or auth.binding != card.action_hash:
                problem = "the card does not match its authorisation"
            elif body.action_hash != auth.binding:
                problem = (
                    "the approval is for another payment (payee, amount, currency or nonce differ)"
                )
        if not problem and auth.method == "auto":
            return await self._answer_notice(card, auth, p, body, device_id, trace_id)
        if problem:
            return await self._refuse(card, p, device_id, problem)
        ans = self.gw.consent.answer(
            approval, device_id=device_id, sign_pk=sign_pk, scopes=scopes, now=t
        )
        self._audit(
            p,
            "approval",
            trace_id=trace_id,
            card_id=card.card_id,
            auth_id=auth.auth_id,
            device=device_id,
            outcome=ans.outcome,
            reason=ans.reason,
            lock_sensor=body.lock_sensor,
            unlocked=body.unlocked,
        )
        if ans.outcome == "refused":
            if ans.reason == EXPIRED_NOW:
                return ans, await self._expire_auth(p, auth, card)
            await self.gw._update(card, consent_pb2.REFUSED, ans.reason)
            return ans, None
        if ans.outcome == "denied":
            with transaction(self.store.db):
                self.store.end_auth(auth.auth_id, ("issued",), "denied", "denied by the owner")
                self.store.move(p.payment_id, AWAITING, CANCELLED, "denied by the owner")
            self._audit(p, "denied", card_id=card.card_id, device=device_id)
            r = await self._receipt(p, "cancelled", "denied by the owner: not paid")
            await self.gw._update(card, consent_pb2.DENIED, "denied by the owner", r)
            return ans, await self._result(r)
        if not self.store.approve(auth.auth_id, by=device_id, method="card", at_ms=t):
            reason = "the payment is no longer waiting for approval"
            self.gw.consent.set_state(card.card_id, "voided", reason)
            await self.gw._update(card, consent_pb2.VOIDED, reason)
            return Answer("refused", reason, card), None
        self._audit(p, "authorised", method="card", auth_id=auth.auth_id, device=device_id)
        await self.gw._update(card, consent_pb2.APPROVED, "approved: paying")
        return ans, await self.execute(p.payment_id)

    async def _answer_notice(
        self,
        card: Card,
        auth: Authorisation,
        p: Payment,
        body: consent_pb2.ApprovalBody,
        device_id: str,
        trace_id: str,
    ) -> tuple[Answer, Receipt | None]:
        """The phone answered an auto-payment's notice card: a denial is the undo (inside
        the undo window); an approval is refused (it pays by itself)."""
        if body.decision != consent_pb2.DENY:
            return await self._refuse(
                card, p, device_id, "an auto-payment pays by itself: deny its card to undo it"
            )
        if (body.action_hash, body.nonce, body.expires_ms) != (
            auth.binding,
            card.nonce,
            card.expires_ms,
        ) or card.action_hash != auth.binding:
            return await self._refuse(card, p, device_id, "the undo is for another payment")
        trace = trace_id or p.trace_id
        if not await self._undo(p.payment_id, trace_id=trace, by=device_id, allowed=True):
            q = self._get(p.payment_id)
            why = f"too late to undo: the payment is {q.state.replace('_', ' ')}"
            return await self._refuse(card, p, device_id, why)
        r = await self._receipt_for_call(
            ToolCall(p.package, PAY_TOOL, {}, p.checkout_call, p.task_id)
        )
        return Answer("denied", "undone", self.gw.consent.card(card.card_id)), r

    async def _refuse(
        self, card: Card, p: Payment | None, device_id: str, reason: str
    ) -> tuple[Answer, Receipt | None]:
        self._audit(
            p,
            "approval_refused",
            card_id=card.card_id,
            device=device_id,
            reason=reason,
            trace_id=str(card.context.get("trace_id", "")),
        )
        await self.gw._update(card, consent_pb2.REFUSED, reason)
        return Answer("refused", reason, card), None

    async def _expire_auth(
        self, p: Payment, auth: Authorisation, card: Card | None
    ) -> Receipt | None:
        with transaction(self.store.db):
            self.store.end_auth(auth.auth_id, ("issued", "approved"), "expired", "expired (60 s)")
            moved = self.store.move(
                p.payment_id, (AWAITING, AUTHORISED), EXPIRED, "the authorisation expired (60 s)"
            )
        if not moved:
            return None
        self._audit(p, "expired", auth_id=auth.auth_id, card_id=auth.card_id)
        r = await self._receipt(p, "cancelled", f"not approved within {AUTH_TTL_S} s: not paid")
        if card is not None:
            self.gw.consent.set_state(card.card_id, "expired", "expired")
            await self.gw._update(card, consent_pb2.EXPIRED, "the card expired", r)
        return await self._result(r)

    async def card_expired(self, card: Card) -> Receipt | None:
        """The consent sweep found this payment card expired."""
        auth = self.store.auth_by_card(card.card_id)
        if auth is None:
            return None
        if auth.method == "auto":
            return None  # the notice of an auto-payment ends with its undo window, not the payment
        p = self._get(auth.payment_id)
        return await self._expire_auth(p, auth, card)

    # ------------------------------------------------------------------ 5. paying
    def _schedule(self, payment_id: str, at_ms: int) -> None:
        if self.tasks is None:
            return  # the sweep pays it when the undo window has passed

        async def later() -> None:
            await asyncio.sleep(max(0.0, (at_ms - self.clock()) / 1000))
            await self.execute(payment_id)

        self.tasks.spawn(later(), f"auto-pay:{payment_id}")

    def _record_own(
        self, call: ToolCall, ctx: CallContext, effect: str, target: str, reason: str
    ) -> Decision:
        """Ledger and audit rows for a call the authority itself makes."""
        fp = hashlib.sha256(
            canonical({"p": call.package, "t": call.tool, "a": call.args})
        ).hexdigest()
        d = Decision("allow", reason, dict(call.args), effect, target, fp)
        self.gw.ledger.record_decision(
            task_id=call.task_id,
            call_id=call.call_id,
            package=call.package,
            tool=call.tool,
            action_hash=fp,
            args_fp=fp,
            effect=effect,
            target=target,
            outcome="allow",
            decision=d.to_dict(),
        )
        self.gw.audit.append(
            "decision",
            {
                "task_id": call.task_id,
                "call_id": call.call_id,
                "package": call.package,
                "tool": call.tool,
                **{k: v for k, v in d.to_dict().items() if k != "args"},
                "args_fp": fp,
            },
            trace_id=ctx.trace_id,
        )
        return d

    async def _run(self, call: ToolCall, ctx: CallContext, d: Decision) -> Receipt:
        host = self.gw.host
        if host is None:
            outcome = ToolOutcome(text="no package host", is_error=True, error_code="START_FAILED")
        else:
            outcome = await host.call(call.package, call.tool, call.args, task_id=call.task_id)
        return await self.gw.receipt(call, ctx, d, outcome)

    async def execute(self, payment_id: str) -> Receipt | None:
        """Pay an authorised payment — once. Every concurrent or later attempt gets
        ``None``: only the attempt that claims the authorisation calls the provider."""
        auth = self.store.claim(payment_id, at_ms=self.clock())
        if auth is None:
            return None
        p = self._get(payment_id)
        self._audit(p, "paying", auth_id=auth.auth_id, method=auth.method)
        ctx = self._ctx(p)
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
        d = self._record_own(call, ctx, "spend", auth.payee, f"authorised ({auth.method})")
        r = await self._run(call, ctx, d)
        return await self._result(await self._settle(p, auth, r))

    async def _settle(self, p: Payment, auth: Authorisation, r: Receipt) -> Receipt:
        # the phone's card follows the outcome only when it was what authorised the payment
        card = (
            self.gw.consent.card(auth.card_id)
            if auth.card_id and auth.method in ("card", "auto")
            else None
        )
        if r.status == "succeeded":
            eff = next(
                (e for e in r.confirmed_effects if e.kind == "payment.paid"),
                None,
            )
            f = eff.fields if eff else {}
            if eff is not None and (
                f.get("amount_minor"),
                f.get("currency"),
                f.get("checkout_id"),
            ) == (auth.amount_minor, auth.currency, auth.checkout_id):
                ref = str(f.get("payment_ref", ""))[:128]
                self.store.move(p.payment_id, PAYING, PAID, "paid", provider_ref=ref)
                self._audit(p, "paid", auth_id=auth.auth_id, provider_ref=ref)
                out = await self._receipt(
                    p,
                    "succeeded",
                    effects=(Effect("payment.paid", eff.state, auth.payee, dict(f)),),
                )
                if card is not None:
                    self.gw.consent.set_state(card.card_id, "executed")
                    await self.gw._update(card, consent_pb2.EXECUTED, "", out)
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
            self._audit(p, "failed", auth_id=auth.auth_id, error_code=r.error_code, reason=r.error)
            out = await self._receipt(p, "failed", f"not paid: {reason}")
            if card is not None:
                self.gw.consent.set_state(card.card_id, "executed")
                await self.gw._update(card, consent_pb2.EXECUTED, reason, out)
            return out
        why = r.error or "; ".join(r.unknowns) or r.status
        return await self._unknown(p, auth, why, card)

    async def _unknown(
        self, p: Payment, auth: Authorisation, why: str, card: Card | None
    ) -> Receipt:
        self.store.move(p.payment_id, PAYING, UNKNOWN, why[:300])
        self._audit(p, "unknown", auth_id=auth.auth_id, reason=why[:300])
        out = await self._receipt(
            p,
            "unknown",
            "the provider did not confirm: checking with it before anything else",
            check_with=STATUS_TOOL,
            unknowns=(why[:300],),
        )
        if card is not None:
            self.gw.consent.set_state(card.card_id, "executed")
            await self.gw._update(card, consent_pb2.EXECUTED, "result unknown: checking", out)
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
        if card is not None:
            self.gw.consent.set_state(card.card_id, "voided", reason)
            await self.gw._update(card, consent_pb2.VOIDED, reason)
        p = self._get(p.payment_id)
        if p.reissues >= MAX_REISSUES or new_amount <= 0:
            stop = f"{reason}; stopped after {p.reissues} new cards: not paid"
            self.store.move(p.payment_id, PAYING, CANCELLED, stop)
            self._audit(p, "stopped", auth_id=auth.auth_id, reason=stop, reissues=p.reissues)
            return await self._receipt(p, "cancelled", stop)
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
            p = self._get(p.payment_id)
            new = self._new_auth(p, "card", t)
            self.store.insert_auth(new)
        self._audit(
            p,
            "card_reissued",
            old_auth=auth.auth_id,
            auth_id=new.auth_id,
            old_amount_minor=old,
            amount_minor=new_amount,
            reissues=p.reissues,
        )
        new_card = await self._issue_card(p, new)
        return await self._receipt(
            p,
            "waiting",
            f"{reason}: a new card waits for the owner ({p.reissues} of {MAX_REISSUES})",
            card_id=new_card.card_id,
        )

    async def check(self, payment_id: str) -> Receipt | None:
        """Ask the provider what became of an ``unknown`` payment (never pays again)."""
        p = self._get(payment_id)
        if p.state != UNKNOWN:
            return None
        auth = next((a for a in reversed(self.store.auths(payment_id)) if a.state == "used"), None)
        if auth is None:
            return None
        self._checked_ms[payment_id] = self.clock()
        ctx = self._ctx(p)
        call = ToolCall(
            p.package,
            STATUS_TOOL,
            {"idempotency_key": auth.auth_id},
            f"{CHECK_CALL}{auth.auth_id}-{secrets.token_hex(3)}",
            p.task_id,
        )
        d = self._record_own(call, ctx, "observe", auth.payee, "status check of an unknown payment")
        r = await self._run(call, ctx, d)
        eff = next((e for e in r.effects if e.kind == "payment.status"), None)
        f = eff.fields if eff is not None and r.status == "succeeded" else {}
        state = str(f.get("state", ""))
        self._audit(p, "status_check", auth_id=auth.auth_id, provider_state=state or r.status)
        if state == "paid" and (f.get("amount_minor"), f.get("currency")) == (
            auth.amount_minor,
            auth.currency,
        ):
            ref = str(f.get("payment_ref", ""))[:128]
            if not self.store.move(
                payment_id, UNKNOWN, PAID, "the provider says: paid", provider_ref=ref
            ):
                return None
            self._audit(p, "paid", auth_id=auth.auth_id, provider_ref=ref, via="status check")
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
            return await self._result(await self._receipt(p, "succeeded", effects=(paid,)))
        if state in ("failed", "not_found"):
            why = str(f.get("reason", "")) or "the provider has no such payment"
            if not self.store.move(payment_id, UNKNOWN, FAILED, f"not charged: {why}"):
                return None
            self._audit(p, "failed", auth_id=auth.auth_id, reason=why, via="status check")
            return await self._result(
                await self._receipt(p, "failed", f"not paid: the provider says {why}")
            )
        return None  # processing, or the provider could not be asked: still unknown

    # ------------------------------------------------------------------ 6. voice & undo
    def _voice_unmet(
        self, p: Payment, auth: Authorisation | None, ev: VoiceEvidence, ctx: CallContext, t: int
    ) -> list[str]:
        opts = self.options
        unmet: list[str] = []
        if not opts.voice_pay:
            return ["voice pay is off"]
        if p.state != AWAITING or auth is None or auth.state != "issued" or auth.expires_ms < t:
            return [f"the payment is {p.state.replace('_', ' ')}, not waiting for approval"]
        if ctx.scope != "owner" or ctx.scheduled:
            unmet.append("only the owner's live request may authorise by voice")
        if ev.basis != "voiceprint":
            unmet.append("payments never use trust windows or call-only identity")
        if ev.verdict != "verified":
            unmet.append("the voice was not verified as the owner's")
        if not ev.device_id or ev.device_id != p.request.device_id:
            unmet.append("not said on the device the request came from")
        if ev.heard_ms < auth.issued_ms:
            unmet.append("said before the amount was read back")
        assert p.amount_minor is not None
        if p.currency != opts.currency:
            unmet.append(f"voice pay limits are in {opts.currency}, this is {p.currency}")
        if p.context.get("request_currency", p.currency) != p.currency:
            unmet.append("the checkout's currency is not the request's")
        if p.amount_minor > opts.voice_pay_limit:
            unmet.append(f"over the voice pay limit of {fmt(opts.voice_pay_limit, opts.currency)}")
        if p.budget_minor is None:
            unmet.append("the request named no budget")
        elif p.amount_minor > p.budget_minor:
            unmet.append(f"over the request's budget of {fmt(p.budget_minor, p.currency)}")
        if not self.known_payee(p.payee):
            unmet.append(f"{p.payee} is not a known payee")
        if self.valid_lease(t) is None:
            unmet.append("no valid unlock lease from the phone")
        return unmet

    async def voice_confirm(
        self, payment_id: str, evidence: VoiceEvidence, ctx: CallContext
    ) -> VoiceOutcome:
        """The owner said "pay it". Pays when every voice-pay condition holds; otherwise the
        phone card (already shown) stays the way to approve, and the reason is returned."""
        p = self._get(payment_id)
        auth = self.store.current_auth(payment_id)
        t = self.clock()
        unmet = self._voice_unmet(p, auth, evidence, ctx, t)
        card_id = auth.card_id if auth else ""
        if not unmet and not self.store.claim_voice(evidence.utterance_id, payment_id):
            unmet = ["this utterance was already used"]
        if unmet:
            self._audit(
                p,
                "voice_pay_fallback",
                trace_id=ctx.trace_id,
                reasons=unmet,
                utterance_id=evidence.utterance_id,
            )
            return VoiceOutcome(False, unmet[0], None, card_id)
        assert auth is not None
        if not self.store.approve(
            auth.auth_id, by=f"voice:{evidence.device_id}", method="voice", at_ms=t
        ):
            return VoiceOutcome(
                False, "the payment is no longer waiting for approval", None, card_id
            )
        self._audit(
            p,
            "authorised",
            trace_id=ctx.trace_id,
            method="voice",
            auth_id=auth.auth_id,
            utterance_id=evidence.utterance_id,
            device=evidence.device_id,
        )
        card = self.gw.consent.card(card_id) if card_id else None
        if card is not None:
            self.gw.consent.set_state(card_id, "voided", "approved by voice")
            await self.gw._update(card, consent_pb2.VOIDED, "approved by voice")
        return VoiceOutcome(True, "", await self.execute(payment_id), card_id)

    async def undo(self, payment_id: str, ctx: CallContext) -> bool:
        """Cancel an auto-payment inside its undo window (the owner said "undo")."""
        return await self._undo(
            payment_id,
            trace_id=ctx.trace_id,
            by="voice",
            allowed=ctx.scope in ("owner", "owner_uncertain"),
        )

    async def _undo(self, payment_id: str, *, trace_id: str, by: str, allowed: bool) -> bool:
        p = self._get(payment_id)
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
        self._audit(p, "undone" if ok else "undo_refused", trace_id=trace_id, by=by)
        if ok:
            r = await self._receipt(p, "cancelled", "undone by the owner: not paid")
            await self._close_notice(payment_id, consent_pb2.DENIED, "undone: not paid", r)
            await self._result(r)
        return ok

    async def _close_notice(
        self, payment_id: str, state: int, reason: str, r: Receipt | None
    ) -> None:
        """Tell the phone what became of an auto-payment's notice card."""
        auth = next((a for a in self.store.auths(payment_id) if a.method == "auto"), None)
        card = self.gw.consent.card(auth.card_id) if auth is not None and auth.card_id else None
        if card is None:
            return
        names: dict[int, str] = {consent_pb2.DENIED: "denied", consent_pb2.VOIDED: "voided"}
        self.gw.consent.set_state(card.card_id, names.get(state, "voided"), reason)
        await self.gw._update(card, state, reason, r)

    # ------------------------------------------------------------------ sweeps
    async def reconcile(self) -> None:
        """At start: a payment left ``paying`` (the hub stopped mid-payment) may or may not
        have happened — it becomes ``unknown`` and is checked with the provider."""
        for p in self.store.in_states([PAYING]):
            if self.store.move(p.payment_id, PAYING, UNKNOWN, "the hub stopped while paying"):
                self._audit(p, "unknown", reason="the hub stopped while paying")
                await self._receipt(
                    p,
                    "unknown",
                    "the hub stopped while paying: checking with the provider",
                    check_with=STATUS_TOOL,
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
                self._audit(p, "expired", reason="no checkout within 30 min")
        for p in self.store.in_states([AWAITING, AUTHORISED]):
            a = self.store.current_auth(p.payment_id)
            if a is None:
                continue
            if a.expires_ms < t and a.state in ("issued", "approved"):
                card = self.gw.consent.card(a.card_id) if a.card_id else None
                await self._expire_auth(p, a, card)
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
            if t - self._checked_ms.get(p.payment_id, 0) >= UNKNOWN_RECHECK_S * 1000:
                await self.check(p.payment_id)

    async def run_sweeps(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            try:
                await self.sweep()
            except Exception:
                log.exception("payment sweep failed")

    # ------------------------------------------------------------------ 7. leases & options
    def report_lease(
        self, approval: consent_pb2.Approval, device: DeviceRecord
    ) -> tuple[bool, str, int]:
        """A phone's signed unlock lease: (accepted, reason, until_ms). A lease that ends
        when it is signed (``expires_ms <= signed_ms``) is the phone saying "locked now":
        its earlier lease ends (accepted, until 0)."""
        t = self.clock()
        lease = parse(consent_pb2.UnlockLease, approval.lease, MAX_LEASE_BYTES)
        problem = _phone_problem(device.profile, device.scopes, device.revoked)
        if not problem and (lease is None or len(approval.lease_signature) != 64):
            problem = "malformed lease"
        if not problem and not _verify(
            device.sign_pk, UNLOCK_LEASE_CONTEXT, approval.lease, approval.lease_signature
        ):
            problem = "bad signature"
        until = 0
        if not problem:
            assert lease is not None
            if lease.device_id != device.device_id:
                problem = "signed by another device"
            elif abs(t - lease.signed_ms) > LEASE_SIGNED_WITHIN_S * 1000:
                problem = "the lease is not fresh"
            elif not lease.lock_sensor:
                problem = "no lock sensor named"
            elif lease.expires_ms <= lease.signed_ms:
                self.store.end_lease(device.device_id, lease.signed_ms)
            elif lease.expires_ms <= t:
                problem = "the lease has expired"
            else:
                until = min(lease.expires_ms, t + LEASE_MAX_S * 1000)
                self.store.put_lease(
                    Lease(device.device_id, lease.unlocked_ms, until, lease.lock_sensor[:64]),
                    lease.signed_ms,
                )
        locked = lease is not None and not problem and lease.expires_ms <= lease.signed_ms
        self._audit(
            None,
            "unlock_lease_ended" if locked else "unlock_lease",
            device=device.device_id,
            accepted=not problem,
            reason=problem,
            until_ms=until,
            lock_sensor=lease.lock_sensor[:64] if lease is not None else "",
        )
        return not problem, problem, until


def change_options(
    store: PaymentStore,
    audit: Any,
    body: bytes,
    signature: bytes,
    device: DeviceRecord,
    *,
    now: int | None = None,
) -> PayOptions:
    """Apply an owner-device-signed options change (see :mod:`hub.payments.options`).
    Raises ``PaymentError`` ``pay.options_refused`` with the reason."""
    t = now if now is not None else now_ms()
    problem = _phone_problem(device.profile, device.scopes, device.revoked)
    data: Any = None
    if not problem and (len(body) > MAX_CHANGE_BYTES or len(signature) != 64):
        problem = "malformed change"
    if not problem and not _verify(device.sign_pk, PAY_OPTIONS_CONTEXT, body, signature):
        problem = "bad signature"
    if not problem:
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("set"), dict):
            problem = "malformed change"
        elif data.get("device_id") != device.device_id:
            problem = "signed by another device"
        elif not isinstance(data.get("signed_ms"), int) or abs(t - data["signed_ms"]) > (
            CHANGE_TTL_S * 1000
        ):
            problem = "the change is not fresh"
        elif not isinstance(data.get("nonce"), str) or not data["nonce"]:
            problem = "no nonce"
    if problem:
        audit.append(
            "payment",
            {"step": "options_refused", "device": device.device_id, "reason": problem},
        )
        raise PaymentError("pay.options_refused", reason=problem)
    try:
        new = apply(store.options(), data["set"])
    except PaymentError as exc:
        audit.append(
            "payment",
            {"step": "options_refused", "device": device.device_id, "reason": str(exc)},
        )
        raise
    if not store.set_options(new, by=device.device_id, nonce=data["nonce"][:64]):
        audit.append(
            "payment",
            {"step": "options_refused", "device": device.device_id, "reason": "replayed"},
        )
        raise PaymentError("pay.options_refused", reason="this change was already applied")
    audit.append(
        "payment",
        {
            "step": "options_changed",
            "device": device.device_id,
            "changes": data["set"],
            "options": new.to_dict(),
        },
    )
    return new
