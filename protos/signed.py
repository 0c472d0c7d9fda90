"""The bodies an owner's phone signs and the hub verifies — defined once, here.

=====================  ========================  ============================================
body                   context                   what it says
=====================  ========================  ============================================
``ApprovalBody``       ``yimi.approval.v1``      the answer to a confirmation card: card id,
                                                 action hash, expiry, nonce, decision, signed
                                                 time; a payment card's answer adds the
                                                 phone's lock state (``unlocked``, sensor)
``UnlockLease``        ``yimi.unlock-lease.v1``  "unlocked by the owner until …" (an expiry
                                                 at its signed time: "locked now")
options change         ``yimi.pay-options.v1``   canonical JSON ``{"device_id", "signed_ms",
                                                 "nonce", "set"}``: a change of the payment
                                                 options
=====================  ========================  ============================================

A signature covers ``context || 0x00 || body`` (:func:`protos.codec.signing_input`). The
device signs with :func:`approval`, :func:`lease` and :func:`options_change`; the hub reads
with :func:`read_approval`, :func:`read_lease`, :func:`read_options_change` (bounded, never
raising) and checks with :func:`verify`.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from protos import consent_pb2
from protos.codec import parse, signing_input

APPROVAL_CONTEXT = b"yimi.approval.v1"
"""what a phone signs when it answers a confirmation card (consent.proto ApprovalBody)"""
UNLOCK_LEASE_CONTEXT = b"yimi.unlock-lease.v1"
"""what a phone signs when it reports an unlock lease (consent.proto UnlockLease)"""
PAY_OPTIONS_CONTEXT = b"yimi.pay-options.v1"
"""what an owner device signs to change the payment options (hub.payments.options)"""

MAX_APPROVAL_BYTES = 4096
MAX_LEASE_BYTES = 1024
MAX_OPTIONS_BYTES = 8192

AUTO_PAY_TITLE = "auto-pay"
"""the title of an auto-payment's notice card starts with this: the phone undoes the
payment by denying the card; it cannot be approved"""


def sign(key: SigningKey, context: bytes, body: bytes) -> bytes:
    """The device key's signature of ``body`` under ``context``."""
    return bytes(key.sign(signing_input(context, body)).signature)


def verify(sign_pk: bytes, context: bytes, body: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is ``sign_pk``'s over ``body`` under ``context``. Never raises."""
    try:
        VerifyKey(sign_pk).verify(signing_input(context, body), signature)
    except (BadSignatureError, ValueError, TypeError):
        return False
    return True


# ---------------------------------------------------------------- card answers
def approval(
    key: SigningKey,
    card: consent_pb2.ConfirmCard,
    decision: int,
    *,
    device_id: str,
    signed_ms: int,
    unlocked: bool = False,
    lock_sensor: str = "",
) -> consent_pb2.Approval:
    """The device-signed answer to ``card`` (``consent_pb2.APPROVE`` / ``DENY``); a payment
    card's answer carries the lock state (``lock_sensor`` names the sensor)."""
    body = consent_pb2.ApprovalBody(
        card_id=card.card_id,
        action_hash=card.action_hash,
        expires_ms=card.expires_ms,
        nonce=card.nonce,
        decision=decision,  # type: ignore[arg-type]
        device_id=device_id,
        signed_ms=signed_ms,
        unlocked=unlocked,
        lock_sensor=lock_sensor,
    ).SerializeToString()
    return consent_pb2.Approval(body=body, signature=sign(key, APPROVAL_CONTEXT, body))


def read_approval(approval_: consent_pb2.Approval) -> consent_pb2.ApprovalBody | None:
    """The answer's body, or ``None`` if it is malformed or too long."""
    return parse(consent_pb2.ApprovalBody, approval_.body, MAX_APPROVAL_BYTES)


# ---------------------------------------------------------------- unlock leases
def lease(
    key: SigningKey,
    *,
    device_id: str,
    unlocked_ms: int,
    expires_ms: int,
    lock_sensor: str,
    signed_ms: int,
) -> consent_pb2.Approval:
    """A signed unlock lease (``expires_ms <= signed_ms``: the phone locked, the lease ends)."""
    body = consent_pb2.UnlockLease(
        device_id=device_id,
        unlocked_ms=unlocked_ms,
        expires_ms=expires_ms,
        lock_sensor=lock_sensor,
        signed_ms=signed_ms,
    ).SerializeToString()
    return consent_pb2.Approval(lease=body, lease_signature=sign(key, UNLOCK_LEASE_CONTEXT, body))


def read_lease(approval_: consent_pb2.Approval) -> consent_pb2.UnlockLease | None:
    """The lease of ``approval_`` if it is well formed and carries a signature's length."""
    body = parse(consent_pb2.UnlockLease, approval_.lease, MAX_LEASE_BYTES)
    if body is None or len(approval_.lease_signature) != 64:
        return None
    return body


# ---------------------------------------------------------------- payment options
@dataclass(frozen=True)
class OptionsChange:
    """A parsed options change (the hub decides whether it is fresh and allowed)."""

    device_id: str
    signed_ms: int
    nonce: str
    changes: dict[str, Any]


def options_change(
    key: SigningKey,
    device_id: str,
    changes: dict[str, Any],
    *,
    signed_ms: int | None = None,
    nonce: str | None = None,
) -> tuple[bytes, bytes]:
    """(body, signature) of an options change, as the owner's phone makes it (signed now
    unless ``signed_ms`` is given)."""
    body = json.dumps(
        {
            "device_id": device_id,
            "signed_ms": signed_ms if signed_ms is not None else int(time.time() * 1000),
            "nonce": nonce if nonce is not None else secrets.token_hex(16),
            "set": changes,
        },
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    return body, sign(key, PAY_OPTIONS_CONTEXT, body)


def read_options_change(body: bytes, signature: bytes) -> OptionsChange | None:
    """The change in ``body`` if it is well formed (a signature's length, a JSON object with
    ``set``); ``device_id``, ``signed_ms`` and ``nonce`` come back as found (empty or ``-1``
    when missing or of the wrong type). Never raises."""
    if len(body) > MAX_OPTIONS_BYTES or len(signature) != 64:
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("set"), dict):
        return None
    device = data.get("device_id")
    signed = data.get("signed_ms")
    nonce = data.get("nonce")
    return OptionsChange(
        device_id=device if isinstance(device, str) else "",
        signed_ms=signed if isinstance(signed, int) and not isinstance(signed, bool) else -1,
        nonce=nonce if isinstance(nonce, str) else "",
        changes=data["set"],
    )
