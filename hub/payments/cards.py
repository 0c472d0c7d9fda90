"""The phone cards of payments: issued for an authorisation (an approval card, or the notice
of an auto-payment, which the phone denies to undo), closed with what became of the payment
(voided, expired, executed …), expired, and answered: the phone's signed answer is checked
(:meth:`PaymentCards.judge`), then a denial cancels, an approval authorises and pays (the
cashier's ``execute``), and a denied auto-payment notice is the undo (the authority's).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from hub.gateway.consent import EXPIRED_NOW, Answer, Card
from hub.gateway.gateway import Gateway, ToolCall
from hub.gateway.receipts import Receipt
from hub.payments import policy
from hub.payments.model import (
    AUTH_TTL_S,
    AUTHORISED,
    AWAITING,
    CANCELLED,
    EXPIRED,
    Authorisation,
    Payment,
)
from hub.payments.money import fmt
from hub.payments.policy import PAY_TOOL
from hub.payments.records import PaymentRecords
from hub.payments.store import PaymentStore
from protos import consent_pb2, signed
from storage.sqlite import transaction

STATE_NAMES: dict[int, str] = {
    consent_pb2.DENIED: "denied",
    consent_pb2.VOIDED: "voided",
    consent_pb2.EXPIRED: "expired",
    consent_pb2.EXECUTED: "executed",
}
"""the consent ledger's card state for a ``CardUpdate`` state"""


@dataclass(frozen=True)
class Judged:
    """A phone's answer to a payment card, checked: ``problem`` (refuse) or a verdict."""

    card: Card
    auth: Authorisation | None
    body: consent_pb2.ApprovalBody
    problem: str = ""


Execute = Callable[[str], Awaitable[Receipt | None]]
Undo = Callable[[str, str, str], Awaitable[bool]]
"""(payment id, trace id, by) → whether the auto-payment was undone"""


class PaymentCards:
    """``execute`` pays an authorised payment (once); ``undo`` undoes an auto-payment."""

    def __init__(
        self,
        gateway: Gateway,
        store: PaymentStore,
        records: PaymentRecords,
        clock: Callable[[], int],
        execute: Execute,
        undo: Undo,
    ) -> None:
        self.gw = gateway
        self.store = store
        self.records = records
        self.clock = clock
        self.execute = execute
        self.undo = undo

    def of(self, auth: Authorisation | None) -> Card | None:
        """The card of an authorisation, if it has one."""
        return self.gw.consent.card(auth.card_id) if auth is not None and auth.card_id else None

    async def issue(self, p: Payment, auth: Authorisation) -> Card:
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
            undo_s = self.store.options().undo_seconds
            title = f"{signed.AUTO_PAY_TITLE}: {amount} to {p.payee} in {undo_s} s"
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
        self.records.audit(
            p,
            "auto_pay_notice" if auto else "card_issued",
            card_id=card.card_id,
            auth_id=auth.auth_id,
            expires_ms=expires,
        )
        for old in voided:
            await self.gw.update_card(old, consent_pb2.VOIDED, "the amount changed")
        await self.gw.show_card(card)
        return card

    async def close(
        self,
        card: Card | None,
        state: int,
        reason: str = "",
        r: Receipt | None = None,
        *,
        note: str | None = None,
    ) -> None:
        """End ``card`` in the consent ledger (``state``: a ``consent_pb2`` card state; the
        ledger keeps ``note``, by default ``reason``) and tell the phone ``reason``, with the
        payment's receipt when there is one."""
        if card is None:
            return
        ledger_reason = reason if note is None else note
        self.gw.consent.set_state(card.card_id, STATE_NAMES.get(state, "voided"), ledger_reason)
        await self.gw.update_card(card, state, reason, r)

    async def close_notice(
        self, payment_id: str, state: int, reason: str, r: Receipt | None
    ) -> None:
        """Tell the phone what became of an auto-payment's notice card."""
        auth = next((a for a in self.store.auths(payment_id) if a.method == "auto"), None)
        await self.close(self.of(auth), state, reason, r)

    async def refuse(
        self, card: Card, p: Payment | None, device_id: str, reason: str
    ) -> tuple[Answer, Receipt | None]:
        """Refuse a phone's answer to ``card`` (the card stays as it was)."""
        self.records.audit(
            p,
            "approval_refused",
            card_id=card.card_id,
            device=device_id,
            reason=reason,
            trace_id=str(card.context.get("trace_id", "")),
        )
        await self.gw.update_card(card, consent_pb2.REFUSED, reason)
        return Answer("refused", reason, card), None

    # ------------------------------------------------------------------ answers
    def judge(
        self,
        approval: consent_pb2.Approval,
        *,
        device_id: str,
        sign_pk: bytes,
        scopes: Sequence[str],
        profile: str,
        revoked: bool,
        now: int,
    ) -> Judged | None:
        """Check a phone's answer to a payment card; ``None`` if it is not for one."""
        body = signed.read_approval(approval)
        if body is None:
            return None
        card = self.gw.consent.card(body.card_id[:64])
        if card is None or card.effect != "spend":
            return None
        auth = self.store.auth_by_card(card.card_id)
        if auth is None:
            return Judged(card, None, body, "no authorisation behind this card")
        problem = policy.phone_problem(profile, scopes, revoked)
        if not problem and not signed.verify(
            sign_pk, signed.APPROVAL_CONTEXT, approval.body, approval.signature
        ):
            problem = "bad signature"
        if not problem and body.device_id != device_id:
            problem = "signed by another device"
        if not problem and body.decision == consent_pb2.APPROVE and auth.method != "auto":
            problem = policy.approval_problem(body, auth, card.action_hash, now)
        return Judged(card, auth, body, problem)

    @staticmethod
    def undo_problem(j: Judged) -> str:
        """Why an answer to an auto-payment's notice card is not its undo."""
        assert j.auth is not None
        if j.body.decision != consent_pb2.DENY:
            return "an auto-payment pays by itself: deny its card to undo it"
        if (j.body.action_hash, j.body.nonce, j.body.expires_ms) != (
            j.auth.binding,
            j.card.nonce,
            j.card.expires_ms,
        ) or j.card.action_hash != j.auth.binding:
            return "the undo is for another payment"
        return ""

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
        t = self.clock()
        j = self.judge(
            approval,
            device_id=device_id,
            sign_pk=sign_pk,
            scopes=scopes,
            profile=profile,
            revoked=revoked,
            now=t,
        )
        if j is None:
            return None
        card, auth = j.card, j.auth
        p = self.records.get(auth.payment_id) if auth is not None else None
        if p is None or auth is None or j.problem:
            return await self.refuse(card, p, device_id, j.problem)
        if auth.method == "auto":
            return await self._answer_notice(j, p, device_id, trace_id)
        ans = self.gw.consent.answer(
            approval, device_id=device_id, sign_pk=sign_pk, scopes=scopes, now=t
        )
        self.records.audit(
            p,
            "approval",
            trace_id=trace_id,
            card_id=card.card_id,
            auth_id=auth.auth_id,
            device=device_id,
            outcome=ans.outcome,
            reason=ans.reason,
            lock_sensor=j.body.lock_sensor,
            unlocked=j.body.unlocked,
        )
        if ans.outcome == "refused":
            if ans.reason == EXPIRED_NOW:
                return ans, await self.expire(p, auth, card)
            await self.gw.update_card(card, consent_pb2.REFUSED, ans.reason)
            return ans, None
        if ans.outcome == "denied":
            with transaction(self.store.db):
                self.store.end_auth(auth.auth_id, ("issued",), "denied", "denied by the owner")
                self.store.move(p.payment_id, AWAITING, CANCELLED, "denied by the owner")
            self.records.audit(p, "denied", card_id=card.card_id, device=device_id)
            r = await self.records.receipt(p, "cancelled", "denied by the owner: not paid")
            await self.gw.update_card(card, consent_pb2.DENIED, "denied by the owner", r)
            return ans, await self.records.result(r)
        if not self.store.approve(auth.auth_id, by=device_id, method="card", at_ms=t):
            reason = "the payment is no longer waiting for approval"
            await self.close(card, consent_pb2.VOIDED, reason)
            return Answer("refused", reason, card), None
        self.records.audit(p, "authorised", method="card", auth_id=auth.auth_id, device=device_id)
        await self.gw.update_card(card, consent_pb2.APPROVED, "approved: paying")
        return ans, await self.execute(p.payment_id)

    async def _answer_notice(
        self, j: Judged, p: Payment, device_id: str, trace_id: str
    ) -> tuple[Answer, Receipt | None]:
        """The phone answered an auto-payment's notice card: a denial is the undo (inside
        the undo window); an approval is refused (it pays by itself)."""
        problem = self.undo_problem(j)
        if problem:
            return await self.refuse(j.card, p, device_id, problem)
        trace = trace_id or p.trace_id
        if not await self.undo(p.payment_id, trace, device_id):
            q = self.records.get(p.payment_id)
            why = f"too late to undo: the payment is {q.state.replace('_', ' ')}"
            return await self.refuse(j.card, p, device_id, why)
        r = self.records.of_call(ToolCall(p.package, PAY_TOOL, {}, p.checkout_call, p.task_id))
        return Answer("denied", "undone", self.gw.consent.card(j.card.card_id)), r

    async def expire(self, p: Payment, auth: Authorisation, card: Card | None) -> Receipt | None:
        """``auth`` ran out before it was approved or used: the payment expires, so does
        its card."""
        with transaction(self.store.db):
            self.store.end_auth(auth.auth_id, ("issued", "approved"), "expired", "expired (60 s)")
            moved = self.store.move(
                p.payment_id, (AWAITING, AUTHORISED), EXPIRED, "the authorisation expired (60 s)"
            )
        if not moved:
            return None
        self.records.audit(p, "expired", auth_id=auth.auth_id, card_id=auth.card_id)
        r = await self.records.receipt(
            p, "cancelled", f"not approved within {AUTH_TTL_S} s: not paid"
        )
        await self.close(card, consent_pb2.EXPIRED, "the card expired", r, note="expired")
        return await self.records.result(r)

    async def card_expired(self, card: Card) -> Receipt | None:
        """The consent sweep found this payment card expired."""
        auth = self.store.auth_by_card(card.card_id)
        if auth is None or auth.method == "auto":
            return None  # the notice of an auto-payment ends with its undo window
        return await self.expire(self.records.get(auth.payment_id), auth, card)
