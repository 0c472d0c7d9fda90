"""Amounts as integers in minor units (cents, fen): no floats ever decide a payment."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from hub.payments.errors import PaymentError

EXPONENTS: dict[str, int] = {"JPY": 0, "KRW": 0, "VND": 0, "CLP": 0, "ISK": 0}
"""ISO 4217 minor-unit exponents that are not 2"""
CURRENCY_RE = re.compile(r"^[A-Z]{3}$")
MAX_MINOR = 10**12


def exponent(currency: str) -> int:
    return EXPONENTS.get(currency, 2)


def check_currency(currency: str) -> str:
    c = str(currency).strip().upper()
    if not CURRENCY_RE.match(c):
        raise PaymentError("pay.invalid", field="currency", reason=f"{currency!r} is not ISO 4217")
    return c


def to_minor(amount: str | int | Decimal, currency: str) -> int:
    """``"23.50"`` EUR → 2350. Refuses more decimals than the currency has, and ≤ 0."""
    try:
        d = Decimal(str(amount).strip())
    except InvalidOperation:
        raise PaymentError(
            "pay.invalid", field="amount", reason=f"{amount!r} is not a number"
        ) from None
    if not d.is_finite():
        raise PaymentError("pay.invalid", field="amount", reason=f"{amount!r} is not a number")
    scaled = d.scaleb(exponent(currency))
    if scaled != scaled.to_integral_value():
        raise PaymentError(
            "pay.invalid", field="amount", reason=f"{amount} has too many decimals for {currency}"
        )
    minor = int(scaled)
    if minor <= 0 or minor > MAX_MINOR:
        raise PaymentError("pay.invalid", field="amount", reason=f"{amount} is out of range")
    return minor


def major(minor: int, currency: str) -> Decimal:
    return Decimal(minor).scaleb(-exponent(currency))


def fmt(minor: int | None, currency: str) -> str:
    """2350, EUR → ``"23.50 EUR"``."""
    if minor is None:
        return f"? {currency}"
    e = exponent(currency)
    return f"{major(minor, currency):.{e}f} {currency}"
