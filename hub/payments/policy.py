"""The payment rules as pure checks: every function takes the facts it judges and an
explicit ``now`` (milliseconds), reads no store and changes nothing. Each returns why not
(an empty string or list: it may).

- :func:`intent_problem` — who may open a payment intent (the owner's own live words);
- :func:`gate_problem` — the gateway's ``spend`` gate (a checkout needs an open intent; the
  ``pay`` tool is the authority's alone);
- :func:`auto_unmet` — small-amount auto-pay; :func:`voice_unmet` — "pay it";
- :func:`phone_problem`, :func:`approval_problem`, :func:`lease_problem`,
  :func:`change_problem` — what a phone signed (answers, unlock leases, option changes).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from hub.gateway.gateway import CallContext
from hub.payments import model as m
from hub.payments.model import AUTH_TTL_S, AWAITING, INTENT, Authorisation, Payment, VoiceEvidence
from hub.payments.money import fmt
from hub.payments.options import CHANGE_TTL_S, PayOptions
from protos import consent_pb2
from protos.signed import OptionsChange

PHONE_PROFILE = "phone"
PAY_TOOL = "pay"
"""a checkout package's paying tool: only the authority calls it"""
LEASE_MAX_S = 15 * 60
"""an unlock lease lasts at most this long"""
LEASE_SIGNED_WITHIN_S = 60


@dataclass(frozen=True)
class Standing:
    """What the rules of auto-pay and voice pay need to know beyond the payment itself."""

    known_payee: bool
    """paid before, or named as known by the owner"""
    lease: bool
    """a valid unlock lease of the owner's phone"""
    spent_today: int = 0
    """auto-payments counted against today's cap, in the payment's currency"""
    recent_to_payee: tuple[str, ...] = ()
    """other live payments to the payee inside the same-payee window"""


def local_midnight_ms(t_ms: int) -> int:
    """The start of ``t_ms``'s calendar day in the hub's local time."""
    day = dt.datetime.fromtimestamp(t_ms / 1000).astimezone()
    start = day.replace(hour=0, minute=0, second=0, microsecond=0)
    return int(start.timestamp() * 1000)


def phone_problem(profile: str, scopes: Sequence[str], revoked: bool) -> str:
    """Why this device may not answer payment cards or sign leases and options."""
    if revoked:
        return "the device is revoked"
    if profile != PHONE_PROFILE:
        return "payments are approved only on the owner's phone"
    if "approve" not in scopes:
        return "this device may not answer cards"
    return ""


def intent_problem(source: str, ctx: CallContext, task_id: str) -> str:
    """Why a request from ``source`` in ``ctx`` may not open a payment intent."""
    if source not in m.OWNER_SOURCES:
        what = source or "an unknown source"
        return (
            f"the request came from {what}: content is never a request to pay"
            if source in m.EXTERNAL_SOURCES or not source
            else f"the request came from {what}, not from the owner's own words"
        )
    if ctx.scope != "owner":
        return f"scope {ctx.scope!r}: only the verified owner may ask for a payment"
    if ctx.scheduled:
        return "a scheduled run never opens a payment"
    if not task_id:
        return "no task"
    return ""


def gate_problem(tool: str, ctx: CallContext, mine: Sequence[Payment]) -> str:
    """Why a ``spend`` call to ``tool`` may not pass; ``mine`` are the task's payments of
    this owner."""
    if tool == PAY_TOOL:
        return (
            "a payment is made only by the payment authority, after the owner authorised "
            "exactly that payee and amount"
        )
    if ctx.scope != "owner" or ctx.scheduled:
        return "only the owner's own, live request may go to a checkout"
    if any(p.state == INTENT for p in mine):
        return ""
    busy = [p for p in mine if p.state not in m.FINAL]
    if busy:
        return f"this task's payment is already {busy[0].state.replace('_', ' ')}"
    return "no payment intent from the owner for this task: the checkout is refused"


def _currency_unmet(p: Payment, opts: PayOptions, mode: str) -> list[str]:
    unmet: list[str] = []
    if p.currency != opts.currency:
        unmet.append(f"{mode} limits are in {opts.currency}, this is {p.currency}")
    if p.context.get("request_currency", p.currency) != p.currency:
        unmet.append("the checkout's currency is not the request's")
    return unmet


def auto_unmet(p: Payment, opts: PayOptions, s: Standing) -> list[str]:
    """Why small-amount auto-pay may not pay ``p`` (empty: it may)."""
    assert p.amount_minor is not None
    if not opts.auto_pay:
        return ["auto-pay is off"]
    unmet = _currency_unmet(p, opts, "auto-pay")
    if p.amount_minor > opts.auto_pay_limit:
        unmet.append(f"over the auto-pay limit of {fmt(opts.auto_pay_limit, opts.currency)}")
    if s.spent_today + p.amount_minor > opts.auto_pay_daily:
        unmet.append(
            f"over today's auto-pay cap of {fmt(opts.auto_pay_daily, opts.currency)} "
            f"({fmt(s.spent_today, p.currency)} already)"
        )
    if p.budget_minor is not None and p.amount_minor > p.budget_minor:
        unmet.append("over the request's budget")
    if not s.known_payee:
        unmet.append(f"{p.payee} is not a known payee")
    voice = p.request.voice
    if voice is None or not voice.owner_verified:
        unmet.append("the request was not voice-verified as the owner's")
    if not s.lease:
        unmet.append("no valid unlock lease from the phone")
    if s.recent_to_payee:
        unmet.append(
            f"another payment to {p.payee} within {opts.same_payee_minutes} min "
            f"({s.recent_to_payee[0]})"
        )
    return unmet


def voice_unmet(
    p: Payment,
    auth: Authorisation | None,
    ev: VoiceEvidence,
    ctx: CallContext,
    opts: PayOptions,
    s: Standing,
    now: int,
) -> list[str]:
    """Why "pay it" (``ev``) may not authorise ``p`` (empty: it may)."""
    if not opts.voice_pay:
        return ["voice pay is off"]
    if p.state != AWAITING or auth is None or auth.state != "issued" or auth.expires_ms < now:
        return [f"the payment is {p.state.replace('_', ' ')}, not waiting for approval"]
    unmet: list[str] = []
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
    unmet += _currency_unmet(p, opts, "voice pay")
    if p.amount_minor > opts.voice_pay_limit:
        unmet.append(f"over the voice pay limit of {fmt(opts.voice_pay_limit, opts.currency)}")
    if p.budget_minor is None:
        unmet.append("the request named no budget")
    elif p.amount_minor > p.budget_minor:
        unmet.append(f"over the request's budget of {fmt(p.budget_minor, p.currency)}")
    if not s.known_payee:
        unmet.append(f"{p.payee} is not a known payee")
    if not s.lease:
        unmet.append("no valid unlock lease from the phone")
    return unmet


def approval_problem(
    body: consent_pb2.ApprovalBody, auth: Authorisation, card_hash: bytes, now: int
) -> str:
    """Why a phone's approval of a payment card (signature already checked) is refused."""
    if not body.lock_sensor:
        return "no lock state reported: answer payment cards with 'yimi pay approve'"
    if not body.unlocked:
        return "the phone was locked: unlock it and approve again"
    if now - body.signed_ms > AUTH_TTL_S * 1000:
        return f"the approval is older than {AUTH_TTL_S} s"
    if body.signed_ms - now > m.APPROVAL_SKEW_S * 1000:
        return "the approval is signed in the future"
    if m.rebind(auth) != card_hash or auth.binding != card_hash:
        return "the card does not match its authorisation"
    if body.action_hash != auth.binding:
        return "the approval is for another payment (payee, amount, currency or nonce differ)"
    return ""


def lease_problem(lease: consent_pb2.UnlockLease, device_id: str, now: int) -> str:
    """Why a signed unlock lease is refused (a lease that ends at its signed time — "locked
    now" — is accepted)."""
    if lease.device_id != device_id:
        return "signed by another device"
    if abs(now - lease.signed_ms) > LEASE_SIGNED_WITHIN_S * 1000:
        return "the lease is not fresh"
    if not lease.lock_sensor:
        return "no lock sensor named"
    if lease.signed_ms < lease.expires_ms <= now:
        return "the lease has expired"
    return ""


def change_problem(change: OptionsChange, device_id: str, now: int) -> str:
    """Why a signed options change is refused (its signature already checked)."""
    if change.device_id != device_id:
        return "signed by another device"
    if change.signed_ms < 0 or abs(now - change.signed_ms) > CHANGE_TTL_S * 1000:
        return "the change is not fresh"
    if not change.nonce:
        return "no nonce"
    return ""
