"""The errands tools over a provider (shared by the server and its fake): every tool
returns a receipt.

``go_to_checkout`` opens the checkout and reads back payee and amount — and stops there.
``pay`` is called only by the hub's payment authority (the gateway refuses it to a model):
right before paying it reads the checkout again and pays only if the total is still the
authorised amount (``PRICE_CHANGED`` otherwise, nothing charged), with the authority's
idempotency key. A timeout or dropped connection is reported as such: the payment may or
may not have happened, and ``payment_status`` must be asked before anything else.
"""

from __future__ import annotations

from typing import Any

from hub.capabilities.package_sdk import receipt
from hub.payments.money import major
from packages.errands.provider import Checkout, Provider, ProviderError


def _money(name: str, minor: int, currency: str, source: str) -> dict[str, Any]:
    return {
        "name": name,
        "value": float(major(minor, currency)),
        "unit": currency,
        "source": source,
    }


def _failed(exc: ProviderError) -> dict[str, Any]:
    return receipt("failed", error=(exc.code, exc.reason))


def list_shops(p: Provider) -> dict[str, Any]:
    try:
        shops = p.shops()
    except ProviderError as exc:
        return _failed(exc)
    return receipt(
        "succeeded",
        effects=[
            {
                "kind": "shop.listed",
                "state": "verified",
                "target": x.shop,
                "fields": {"name": x.name, "aliases": list(x.aliases)},
            }
            for x in shops
        ],
        values=[{"name": "shops", "value": len(shops), "unit": "items", "source": p.name}],
    )


def browse_menu(p: Provider, shop: str) -> dict[str, Any]:
    try:
        menu = p.menu(shop)
    except ProviderError as exc:
        return _failed(exc)
    items = [
        {
            "item_id": i.item_id,
            "name": i.name,
            "price_minor": i.price_minor,
            **({"aliases": list(i.aliases)} if i.aliases else {}),
        }
        for i in menu.items
    ]
    return receipt(
        "succeeded",
        effects=[
            {
                "kind": "menu.read",
                "state": "verified",
                "target": shop,
                "fields": {"payee": menu.payee, "currency": menu.currency, "items": items},
            }
        ],
        values=[
            {"name": "items on the menu", "value": len(items), "unit": "items", "source": p.name}
        ],
    )


def _cart_receipt(p: Provider, cart: Any) -> dict[str, Any]:
    lines = [
        {"item_id": x.item_id, "name": x.name, "quantity": x.quantity, "price_minor": x.price_minor}
        for x in cart.lines
    ]
    return receipt(
        "succeeded",
        effects=[
            {
                "kind": "cart.updated",
                "state": "verified",
                "target": cart.shop,
                "fields": {
                    "cart_id": cart.cart_id,
                    "lines": lines,
                    "total_minor": cart.total_minor,
                    "currency": cart.currency,
                },
            }
        ],
        values=[_money("cart total", cart.total_minor, cart.currency, p.name)],
    )


def add_to_cart(
    p: Provider, shop: str, item_id: str, quantity: int = 1, cart_id: str = ""
) -> dict[str, Any]:
    try:
        return _cart_receipt(p, p.add_to_cart(shop, item_id, quantity, cart_id))
    except ProviderError as exc:
        return _failed(exc)


def view_cart(p: Provider, cart_id: str) -> dict[str, Any]:
    try:
        return _cart_receipt(p, p.cart(cart_id))
    except ProviderError as exc:
        return _failed(exc)


def _checkout_effect(kind: str, co: Checkout) -> dict[str, Any]:
    return {
        "kind": kind,
        "state": "verified",
        "target": co.payee,
        "fields": {
            "checkout_id": co.checkout_id,
            "cart_id": co.cart_id,
            "payee": co.payee,
            "amount_minor": co.total_minor,
            "currency": co.currency,
            "state": co.state,
        },
    }


def go_to_checkout(p: Provider, cart_id: str) -> dict[str, Any]:
    """Open the checkout, read back payee and amount, and stop: no payment here."""
    try:
        # the read-back: what the checkout page says now, not what the cart said
        co = p.read_checkout(p.checkout(cart_id).checkout_id)
    except ProviderError as exc:
        return _failed(exc)
    return receipt(
        "succeeded",
        effects=[_checkout_effect("checkout.opened", co)],
        values=[_money("amount", co.total_minor, co.currency, "checkout read-back")],
    )


def pay(
    p: Provider, checkout_id: str, amount_minor: int, currency: str, idempotency_key: str
) -> dict[str, Any]:
    """Pay exactly ``amount_minor`` — after reading the checkout once more."""
    if not idempotency_key:
        return receipt("failed", error=("BAD_REQUEST", "no idempotency key: not paid"))
    try:
        co = p.read_checkout(checkout_id)
    except ProviderError as exc:
        if exc.code in ("TIMEOUT", "DISCONNECTED"):  # nothing was sent to pay yet
            return receipt("failed", error=("NOT_PAID", f"checkout not readable: {exc.reason}"))
        return _failed(exc)
    if (co.total_minor, co.currency) != (amount_minor, currency):
        return receipt(
            "failed",
            effects=[_checkout_effect("checkout.read", co)],
            values=[_money("amount now", co.total_minor, co.currency, "checkout read-back")],
            error=("PRICE_CHANGED", "the checkout total is not the authorised amount: not paid"),
        )
    try:
        r = p.pay(checkout_id, amount_minor, currency, idempotency_key)
    except ProviderError as exc:
        if exc.code == "PRICE_CHANGED":
            total = int(exc.data.get("total_minor", 0))
            co = Checkout(co.checkout_id, co.cart_id, co.payee, total, co.currency, co.state)
            return receipt(
                "failed",
                effects=[_checkout_effect("checkout.read", co)],
                values=[_money("amount now", total, co.currency, "provider")],
                error=("PRICE_CHANGED", "the provider's total changed: not paid"),
            )
        return _failed(exc)
    if r.state != "paid":
        return receipt("failed", error=("DECLINED", r.reason or f"payment {r.state}"))
    return receipt(
        "succeeded",
        effects=[
            {
                "kind": "payment.paid",
                "state": "service_ack",
                "target": r.payee,
                "fields": {
                    "checkout_id": r.checkout_id,
                    "payee": r.payee,
                    "amount_minor": r.amount_minor,
                    "currency": r.currency,
                    "payment_ref": r.payment_ref,
                    "idempotency_key": idempotency_key,
                },
            }
        ],
        values=[_money("amount paid", r.amount_minor, r.currency, p.name)],
    )


def payment_status(p: Provider, idempotency_key: str) -> dict[str, Any]:
    """What the provider knows about the payment made with this key."""
    try:
        r = p.status(idempotency_key)
    except ProviderError as exc:
        return _failed(exc)
    return receipt(
        "succeeded",
        effects=[
            {
                "kind": "payment.status",
                "state": "verified",
                "target": r.payee,
                "fields": {
                    "state": r.state,
                    "idempotency_key": idempotency_key,
                    "payment_ref": r.payment_ref,
                    "checkout_id": r.checkout_id,
                    "payee": r.payee,
                    "amount_minor": r.amount_minor,
                    "currency": r.currency,
                    "reason": r.reason,
                },
            }
        ],
    )
