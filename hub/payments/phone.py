"""What the owner's phone reports to the payment authority besides card answers, each signed
with its device key (:mod:`protos.signed`): unlock leases ("unlocked by the owner until …",
which voice pay and auto-pay require) and changes of the payment options.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hub.payments import policy
from hub.payments.errors import PaymentError
from hub.payments.options import PayOptions, apply
from hub.payments.store import Lease, PaymentStore
from protos import consent_pb2, signed
from protos.clock import now_ms
from provisioning.registry import DeviceRecord

DeviceLookup = Callable[[str], DeviceRecord | None]


def valid_lease(store: PaymentStore, devices: DeviceLookup | None, now: int) -> Lease | None:
    """An unexpired unlock lease of a phone that is still enrolled and not revoked."""
    for lease in store.leases():
        if lease.expires_ms <= now:
            continue
        if devices is not None:
            rec = devices(lease.device_id)
            if rec is None or policy.phone_problem(rec.profile, rec.scopes, rec.revoked):
                continue
        return lease
    return None


def report_lease(
    store: PaymentStore, audit: Any, approval: consent_pb2.Approval, device: DeviceRecord, now: int
) -> tuple[bool, str, int]:
    """A phone's signed unlock lease: (accepted, reason, until_ms). A lease that ends when
    it is signed (``expires_ms <= signed_ms``) is the phone saying "locked now": its earlier
    lease ends (accepted, until 0)."""
    lease = signed.read_lease(approval)
    problem = policy.phone_problem(device.profile, device.scopes, device.revoked)
    if not problem and lease is None:
        problem = "malformed lease"
    if not problem and not signed.verify(
        device.sign_pk, signed.UNLOCK_LEASE_CONTEXT, approval.lease, approval.lease_signature
    ):
        problem = "bad signature"
    until = 0
    if not problem:
        assert lease is not None
        problem = policy.lease_problem(lease, device.device_id, now)
        if not problem and lease.expires_ms <= lease.signed_ms:
            store.end_lease(device.device_id, lease.signed_ms)
        elif not problem:
            until = min(lease.expires_ms, now + policy.LEASE_MAX_S * 1000)
            store.put_lease(
                Lease(device.device_id, lease.unlocked_ms, until, lease.lock_sensor[:64]),
                lease.signed_ms,
            )
    locked = lease is not None and not problem and lease.expires_ms <= lease.signed_ms
    audit.append(
        "payment",
        {
            "step": "unlock_lease_ended" if locked else "unlock_lease",
            "device": device.device_id,
            "accepted": not problem,
            "reason": problem,
            "until_ms": until,
            "lock_sensor": lease.lock_sensor[:64] if lease is not None else "",
        },
        trace_id="",
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

    def refused(reason: str) -> None:
        audit.append(
            "payment", {"step": "options_refused", "device": device.device_id, "reason": reason}
        )

    problem = policy.phone_problem(device.profile, device.scopes, device.revoked)
    change: signed.OptionsChange | None = None
    if not problem and (len(body) > signed.MAX_OPTIONS_BYTES or len(signature) != 64):
        problem = "malformed change"
    if not problem and not signed.verify(
        device.sign_pk, signed.PAY_OPTIONS_CONTEXT, body, signature
    ):
        problem = "bad signature"
    if not problem:
        change = signed.read_options_change(body, signature)
        problem = (
            policy.change_problem(change, device.device_id, t)
            if change is not None
            else "malformed change"
        )
    if problem:
        refused(problem)
        raise PaymentError("pay.options_refused", reason=problem)
    assert change is not None
    try:
        new = apply(store.options(), change.changes)
    except PaymentError as exc:
        refused(str(exc))
        raise
    if not store.set_options(new, by=device.device_id, nonce=change.nonce[:64]):
        refused("replayed")
        raise PaymentError("pay.options_refused", reason="this change was already applied")
    audit.append(
        "payment",
        {
            "step": "options_changed",
            "device": device.device_id,
            "changes": change.changes,
            "options": new.to_dict(),
        },
    )
    return new
