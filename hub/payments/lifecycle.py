"""The lifecycle of a payment and of its one-time authorisations: which state may follow
which. Every state change in ``payments.db`` is a compare-and-set
(:meth:`hub.payments.store.PaymentStore.move`, ``end_auth``, ``approve``, ``claim``) checked
against these tables first, so no code path can take a payment where the diagram does not go::

    intent → awaiting_approval → authorised → paying → paid
                                                     → failed
                                                     → unknown → (status check) paid / failed
                                                     → awaiting_approval (the amount changed:
                                                       a new card, at most 2 times)
    intent / awaiting_approval / authorised → cancelled (denied, undone, stopped) / expired

An authorisation goes ``issued → approved → used``, or ends ``voided`` / ``expired`` /
``denied``; a used one is voided when the checkout's amount changed (nothing was charged).
"""

from __future__ import annotations

from collections.abc import Iterable

from hub.payments.model import (
    AUTHORISED,
    AWAITING,
    CANCELLED,
    EXPIRED,
    FAILED,
    INTENT,
    PAID,
    PAYING,
    UNKNOWN,
)

TRANSITIONS: dict[str, frozenset[str]] = {
    INTENT: frozenset({AWAITING, CANCELLED, EXPIRED}),
    AWAITING: frozenset({AUTHORISED, CANCELLED, EXPIRED}),
    AUTHORISED: frozenset({PAYING, CANCELLED, EXPIRED}),
    PAYING: frozenset({PAID, FAILED, UNKNOWN, AWAITING, CANCELLED}),
    UNKNOWN: frozenset({PAID, FAILED}),
    PAID: frozenset(),
    FAILED: frozenset(),
    CANCELLED: frozenset(),
    EXPIRED: frozenset(),
}
"""payment state → the states it may move to"""

AUTH_TRANSITIONS: dict[str, frozenset[str]] = {
    "issued": frozenset({"approved", "voided", "expired", "denied"}),
    "approved": frozenset({"used", "voided", "expired"}),
    "used": frozenset({"voided"}),
    "voided": frozenset(),
    "expired": frozenset(),
    "denied": frozenset(),
}
"""authorisation state → the states it may move to"""


def check(olds: Iterable[str], new: str, table: dict[str, frozenset[str]] = TRANSITIONS) -> None:
    """Raise ``ValueError`` if ``new`` may not follow one of ``olds`` (a programming error:
    the compare-and-set would otherwise write a move the lifecycle does not have)."""
    bad = [old for old in olds if new not in table.get(old, frozenset())]
    if bad:
        raise ValueError(f"no transition {', '.join(bad)} → {new}")
