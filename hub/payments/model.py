"""What the payment authority keeps: payments (one per intent), authorisations, requests.

Payment states (ARCHITECTURE F3, issue 8)::

    intent → awaiting_approval → authorised → paying → paid
                                                     → failed
                                                     → unknown → (status check) paid / failed
    intent / awaiting_approval / authorised → cancelled (denied, undone, stopped) / expired

``unknown`` (a timeout or a dropped connection while paying) is left only by a status check
with the provider; a payment is never retried automatically.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any

from hub.gateway.receipts import canonical

INTENT = "intent"
AWAITING = "awaiting_approval"
AUTHORISED = "authorised"
PAYING = "paying"
PAID = "paid"
FAILED = "failed"
UNKNOWN = "unknown"
CANCELLED = "cancelled"
EXPIRED = "expired"
STATES = (INTENT, AWAITING, AUTHORISED, PAYING, PAID, FAILED, UNKNOWN, CANCELLED, EXPIRED)
FINAL = frozenset({PAID, FAILED, CANCELLED, EXPIRED})
LIVE = frozenset({AUTHORISED, PAYING, PAID, UNKNOWN})
"""states that count as "a payment to this payee" for auto-pay's 30-minute rule and cap"""

AUTH_TTL_S = 60
"""an authorisation (and its card) is valid this long after it is issued"""
MAX_REISSUES = 2
"""a changed amount at the checkout re-issues the card at most this often per intent"""
INTENT_TTL_S = 30 * 60
"""an intent that never reached a checkout expires after this long"""
APPROVAL_SKEW_S = 5
"""how far in the future a phone's signed time may be"""

OWNER_SOURCES = frozenset({"owner_voice", "owner_typed"})
"""request sources that may open an intent: the owner's own words on an owner's device"""
EXTERNAL_SOURCES = frozenset({"email", "web", "agent", "document", "notification"})
"""content from outside (never an instruction): a request from here never opens an intent"""

BINDING_CONTEXT = "yimi.payment-authorisation.v1"


@dataclass(frozen=True)
class VoiceEvidence:
    """The hub admission's view of one utterance (the device signed its verdict; the hub
    verified the envelope). Built by platform code from the admitted turn, never by a model."""

    device_id: str
    utterance_id: str
    verdict: str
    """``verified`` / ``uncertain`` / ``unmatched`` / ``unenrolled``"""
    basis: str
    """``voiceprint`` (the segment matched the channel centroid), ``trust_window`` or
    ``call_anchor`` — payments accept only ``voiceprint``"""
    heard_ms: int
    score: float = 0.0
    text: str = ""

    @property
    def owner_verified(self) -> bool:
        return self.verdict == "verified" and self.basis == "voiceprint"

    def to_dict(self) -> dict[str, Any]:
        return {
            "device_id": self.device_id,
            "utterance_id": self.utterance_id,
            "verdict": self.verdict,
            "basis": self.basis,
            "heard_ms": self.heard_ms,
            "score": self.score,
            "text": self.text[:500],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> VoiceEvidence | None:
        if not d:
            return None
        return cls(
            str(d.get("device_id", "")),
            str(d.get("utterance_id", "")),
            str(d.get("verdict", "")),
            str(d.get("basis", "")),
            int(d.get("heard_ms", 0)),
            float(d.get("score", 0.0)),
            str(d.get("text", "")),
        )


BASIS_OF_REASON = {
    "verified": "voiceprint",
    "trust_window": "trust_window",
    "call_anchor": "call_anchor",
}
"""the hub's scope reason (``hub/voice/voiceprints.py`` ``scope_for``) → the evidence's basis"""


def voice_evidence(
    device_id: str,
    utterance_id: str,
    meta: dict[str, Any],
    *,
    heard_ms: int,
    text: str = "",
) -> VoiceEvidence | None:
    """The payment view of an admitted voice utterance, from the timeline meta the hub's
    voice ingest wrote (``scope``, ``scope_reason``, ``scope_score``); ``None`` for a typed
    one. The hub's own scope decision is what counts, not the device's verdict: ``owner``
    by voiceprint is ``verified``/``voiceprint``; ``owner`` by a trust window or a call
    anchor keeps that basis (payments refuse it); ``owner_uncertain`` is ``uncertain``."""
    if str(meta.get("source", "")) != "voice":
        return None
    scope = str(meta.get("scope", ""))
    reason = str(meta.get("scope_reason", ""))
    verdict = {"owner": "verified", "owner_uncertain": "uncertain"}.get(scope, "unmatched")
    basis = BASIS_OF_REASON.get(reason, "voiceprint")
    try:
        score = float(meta.get("scope_score") or 0.0)
    except (TypeError, ValueError):
        score = 0.0
    if score != score:  # NaN: no voice
        score = 0.0
    return VoiceEvidence(device_id, utterance_id, verdict, basis, int(heard_ms), score, text)


@dataclass(frozen=True)
class PaymentRequest:
    """Where a request to pay came from, set by the platform from the admitted turn.

    ``source`` is ``owner_voice`` or ``owner_typed`` for the owner's own words; content the
    assistant read (``email``, ``web``, ``agent`` …) is never a request."""

    source: str
    utterance_id: str = ""
    device_id: str = ""
    text: str = ""
    voice: VoiceEvidence | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "utterance_id": self.utterance_id,
            "device_id": self.device_id,
            "text": self.text[:500],
            "voice": self.voice.to_dict() if self.voice else None,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PaymentRequest:
        return cls(
            str(d.get("source", "")),
            str(d.get("utterance_id", "")),
            str(d.get("device_id", "")),
            str(d.get("text", "")),
            VoiceEvidence.from_dict(d.get("voice")),
        )


@dataclass(frozen=True)
class Payment:
    payment_id: str
    """also the intent id"""
    task_id: str
    owner: str
    trace_id: str
    request: PaymentRequest
    description: str
    budget_minor: int | None
    currency: str
    state: str
    package: str = ""
    checkout_call: str = ""
    checkout_id: str = ""
    payee: str = ""
    amount_minor: int | None = None
    mode: str = ""
    """how it was authorised: ``card`` / ``voice`` / ``auto``"""
    reissues: int = 0
    revision: int = 0
    reason: str = ""
    undo_until_ms: int | None = None
    provider_ref: str = ""
    context: dict[str, Any] = field(default_factory=dict)
    created_ms: int = 0
    updated_ms: int = 0


@dataclass(frozen=True)
class Authorisation:
    auth_id: str
    """one-time; also the provider's idempotency key for the payment it authorises"""
    payment_id: str
    card_id: str
    payee: str
    amount_minor: int
    currency: str
    checkout_id: str
    nonce: bytes
    binding: bytes
    method: str
    state: str
    """``issued`` → ``approved`` → ``used``; or ``voided`` / ``expired`` / ``denied``"""
    issued_ms: int
    expires_ms: int
    approved_ms: int | None = None
    approved_by: str = ""
    used_ms: int | None = None
    reason: str = ""


def binding(
    *,
    payment_id: str,
    auth_id: str,
    payee: str,
    amount_minor: int,
    currency: str,
    checkout_id: str,
    nonce: bytes,
    expires_ms: int,
) -> bytes:
    """What an approval signs (the card's action hash): intent, payee, amount, currency,
    checkout, nonce and expiry. Another amount or payee is another hash."""
    return hashlib.sha256(
        canonical(
            {
                "v": BINDING_CONTEXT,
                "payment": payment_id,
                "auth": auth_id,
                "payee": payee,
                "amount_minor": amount_minor,
                "currency": currency,
                "checkout": checkout_id,
                "nonce": nonce.hex(),
                "expires_ms": expires_ms,
            }
        )
    ).digest()


def rebind(a: Authorisation) -> bytes:
    """The binding ``a``'s fields give (equal to ``a.binding`` unless it was tampered with)."""
    return binding(
        payment_id=a.payment_id,
        auth_id=a.auth_id,
        payee=a.payee,
        amount_minor=a.amount_minor,
        currency=a.currency,
        checkout_id=a.checkout_id,
        nonce=a.nonce,
        expires_ms=a.expires_ms,
    )


def new_authorisation(p: Payment, method: str, now: int) -> Authorisation:
    """A fresh one-time authorisation of ``p``'s payee and amount, valid ``AUTH_TTL_S``."""
    assert p.amount_minor is not None
    auth_id = "pa-" + secrets.token_hex(12)
    nonce = secrets.token_bytes(16)
    expires = now + AUTH_TTL_S * 1000
    return Authorisation(
        auth_id=auth_id,
        payment_id=p.payment_id,
        card_id="",
        payee=p.payee,
        amount_minor=p.amount_minor,
        currency=p.currency,
        checkout_id=p.checkout_id,
        nonce=nonce,
        binding=binding(
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
        issued_ms=now,
        expires_ms=expires,
    )
