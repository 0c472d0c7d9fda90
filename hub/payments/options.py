"""The two optional payment modes, default off, and how the owner changes them.

=====================  =======  ==========================================================
option                 default  meaning
=====================  =======  ==========================================================
``voice_pay``          off      "pay it" from a voiceprint-verified owner may authorise
``voice_pay_limit``    200      per payment, in ``currency``
``auto_pay``           off      small amounts are paid without asking (5-second undo)
``auto_pay_limit``     50       per payment
``auto_pay_daily``     150      per calendar day (hub local time), across restarts
``same_payee_minutes`` 30       no auto-pay if another payment to the payee is that recent
``undo_seconds``       5        the undo window of an auto-payment
``currency``           EUR      the currency the limits are in; other currencies: card only
``known_payees``       (none)   payees the owner named as known (besides those paid before)
=====================  =======  ==========================================================

A change is a JSON body ``{"device_id", "signed_ms", "nonce", "set": {...}}`` signed with
an owner device's key over ``"yimi.pay-options.v1" || 0x00 || body``
(:func:`protos.signed.options_change`; :func:`hub.payments.phone.change_options` applies
it). The hub accepts it
only from a phone (profile ``phone``, ``approve`` scope, not revoked), within 120 s of its
signed time, once per nonce.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from hub.payments.errors import PaymentError
from hub.payments.money import check_currency, fmt, to_minor

CHANGE_TTL_S = 120


@dataclass(frozen=True)
class PayOptions:
    voice_pay: bool = False
    voice_pay_limit: int = 20000
    auto_pay: bool = False
    auto_pay_limit: int = 5000
    auto_pay_daily: int = 15000
    same_payee_minutes: int = 30
    undo_seconds: int = 5
    currency: str = "EUR"
    known_payees: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["known_payees"] = list(self.known_payees)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PayOptions:
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if "known_payees" in kw:
            kw["known_payees"] = tuple(kw["known_payees"])
        return cls(**kw)

    def describe(self) -> list[str]:
        c = self.currency
        on = {True: "on", False: "off"}
        voice = f"≤ {fmt(self.voice_pay_limit, c)} per payment"
        auto = (
            f"≤ {fmt(self.auto_pay_limit, c)} per payment, ≤ {fmt(self.auto_pay_daily, c)} per day"
        )
        return [
            f"voice pay:          {on[self.voice_pay]} ({voice})",
            f"auto-pay:           {on[self.auto_pay]} ({auto})",
            f"same payee window:  {self.same_payee_minutes} min",
            f"undo window:        {self.undo_seconds} s",
            f"currency:           {c}",
            "known payees:       " + (", ".join(self.known_payees) or "(only those paid before)"),
        ]


def _bool(v: Any) -> bool:
    s = str(v).strip().lower()
    if s in ("1", "on", "true", "yes"):
        return True
    if s in ("0", "off", "false", "no"):
        return False
    raise ValueError(f"{v!r} is not on/off")


def _int_in(lo: int, hi: int) -> Any:
    def conv(v: Any) -> int:
        n = int(str(v).strip())
        if not lo <= n <= hi:
            raise ValueError(f"{n} is not in {lo}..{hi}")
        return n

    return conv


def apply(options: PayOptions, changes: dict[str, Any]) -> PayOptions:
    """``options`` with ``changes`` (strings as typed on the command line, or JSON values).
    Amount limits are in the (new) currency's major units ("200", "49.50")."""
    currency = check_currency(str(changes.get("currency", options.currency)))
    out = replace(options, currency=currency)
    for key, raw in changes.items():
        try:
            if key in ("voice_pay", "auto_pay"):
                flag: dict[str, Any] = {key: _bool(raw)}
                out = replace(out, **flag)
            elif key in ("voice_pay_limit", "auto_pay_limit", "auto_pay_daily"):
                limit: dict[str, Any] = {key: to_minor(str(raw), currency)}
                out = replace(out, **limit)
            elif key == "same_payee_minutes":
                out = replace(out, same_payee_minutes=_int_in(0, 24 * 60)(raw))
            elif key == "undo_seconds":
                out = replace(out, undo_seconds=_int_in(1, 60)(raw))
            elif key == "currency":
                continue
            elif key == "known_payees":
                items = raw if isinstance(raw, list) else str(raw).split(",")
                names = tuple(dict.fromkeys(str(x).strip()[:200] for x in items if str(x).strip()))
                out = replace(out, known_payees=names)
            else:
                known = ", ".join(f.name for f in fields(PayOptions))
                raise PaymentError("pay.option_unknown", name=key, known=known)
        except (ValueError, TypeError) as exc:
            raise PaymentError("pay.invalid", field=key, reason=str(exc)) from None
    if out.auto_pay_limit > out.auto_pay_daily:
        raise PaymentError(
            "pay.invalid", field="auto_pay_limit", reason="larger than the daily auto-pay cap"
        )
    return out
