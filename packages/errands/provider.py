"""The provider interface: a shop with a checkout and a payment API, as the ``errands``
executor drives it.

- :class:`Provider` — menu, cart, checkout (read back payee and amount), pay with an
  idempotency key, and a status query by that key.
- :class:`HttpProvider` — the client of a provider's HTTP API (the sandbox service in
  :mod:`packages.errands.sandbox` speaks it).
- :class:`ShopBook` — the shop logic itself (carts, checkouts, idempotent payments), used by
  the sandbox service and, directly, by :class:`MemoryProvider` — the ``errands`` fake: same
  answers, no service, no money.

Amounts are integers in minor units. A pay request names the amount it expects: a provider
refuses to charge anything else (``PRICE_CHANGED``), charges a checkout at most once, and
answers a repeated idempotency key with the first outcome.
"""

from __future__ import annotations

import http.client
import json
import secrets
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

from hub.payments.errors import PaymentError

UNCERTAIN = frozenset({"TIMEOUT", "DISCONNECTED"})
"""errors after which the payment may or may not have happened"""


class ProviderError(PaymentError):
    """A provider said no (``code``: PRICE_CHANGED, DECLINED, ALREADY_PAID, NOT_FOUND,
    KEY_REUSED, BAD_REQUEST) or could not be heard (TIMEOUT, DISCONNECTED)."""

    def __init__(self, code: str, reason: str, **data: Any) -> None:
        super().__init__("pay.provider", code=code, reason=reason)
        self.code = code
        self.reason = reason
        self.data = data


@dataclass(frozen=True)
class MenuItem:
    item_id: str
    name: str
    price_minor: int
    aliases: tuple[str, ...] = ()
    """other names of the item (any language)"""


@dataclass(frozen=True)
class Menu:
    shop: str
    payee: str
    currency: str
    items: tuple[MenuItem, ...]


@dataclass(frozen=True)
class CartLine:
    item_id: str
    name: str
    quantity: int
    price_minor: int


@dataclass(frozen=True)
class Cart:
    cart_id: str
    shop: str
    lines: tuple[CartLine, ...]
    total_minor: int
    currency: str


@dataclass(frozen=True)
class Checkout:
    checkout_id: str
    cart_id: str
    payee: str
    total_minor: int
    currency: str
    state: str
    """``open`` / ``paid``"""


@dataclass(frozen=True)
class PayResult:
    state: str
    """``paid`` / ``processing`` / ``failed`` / ``not_found``"""
    idempotency_key: str
    payment_ref: str = ""
    checkout_id: str = ""
    payee: str = ""
    amount_minor: int = 0
    currency: str = ""
    reason: str = ""


@dataclass(frozen=True)
class ShopInfo:
    """A shop the provider serves: id, display name, other names (any language)."""

    shop: str
    name: str
    aliases: tuple[str, ...] = ()


class Provider(Protocol):
    name: str

    def shops(self) -> list[ShopInfo]: ...

    def menu(self, shop: str) -> Menu: ...

    def add_to_cart(self, shop: str, item_id: str, quantity: int, cart_id: str = "") -> Cart: ...

    def cart(self, cart_id: str) -> Cart: ...

    def checkout(self, cart_id: str) -> Checkout: ...

    def read_checkout(self, checkout_id: str) -> Checkout: ...

    def pay(
        self, checkout_id: str, amount_minor: int, currency: str, idempotency_key: str
    ) -> PayResult: ...

    def status(self, idempotency_key: str) -> PayResult: ...


# ---------------------------------------------------------------- the shop logic
SHOPS_FILE = Path(__file__).resolve().parent / "shops.json"
"""the sandbox's shops, declared as data (the hub reads their names from it, too)"""
_DECLARED = json.loads(SHOPS_FILE.read_text(encoding="utf-8"))["shops"]
ITEM_ALIASES: dict[tuple[str, str], tuple[str, ...]] = {
    (d["shop"], i["item_id"]): tuple(i.get("aliases", ())) for d in _DECLARED for i in d["items"]
}
"""other names of the sandbox's menu items: (shop, item id) → names"""
SHOPS: dict[str, tuple[str, str, list[tuple[str, str, int]]]] = {
    d["shop"]: (
        d["name"],
        d["currency"],
        [(i["item_id"], i["name"], int(i["price_minor"])) for i in d["items"]],
    )
    for d in _DECLARED
}
"""the sandbox's shops: id → (payee, currency, [(item id, name, price in minor units)])"""
SHOP_ALIASES: dict[str, tuple[str, ...]] = {
    d["shop"]: tuple(d.get("aliases", ())) for d in _DECLARED
}
"""other names of the sandbox's shops"""


def _id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(6)}"


@dataclass
class _Payment:
    key: str
    checkout_id: str
    amount_minor: int
    currency: str
    state: str
    payment_ref: str = ""
    reason: str = ""


@dataclass
class ShopBook:
    """Carts, checkouts and payments; thread-safe. ``charges`` lists every charge made."""

    shops: dict[str, tuple[str, str, list[tuple[str, str, int]]]] = field(
        default_factory=lambda: dict(SHOPS)
    )
    carts: dict[str, Cart] = field(default_factory=dict)
    checkouts: dict[str, Checkout] = field(default_factory=dict)
    by_cart: dict[str, str] = field(default_factory=dict)
    payments: dict[str, _Payment] = field(default_factory=dict)
    charges: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def listing(self) -> list[ShopInfo]:
        return [
            ShopInfo(shop, payee, SHOP_ALIASES.get(shop, ()))
            for shop, (payee, _c, _i) in sorted(self.shops.items())
        ]

    def menu(self, shop: str) -> Menu:
        if shop not in self.shops:
            raise ProviderError("NOT_FOUND", f"no shop {shop!r}; shops: {', '.join(self.shops)}")
        payee, currency, items = self.shops[shop]
        return Menu(
            shop,
            payee,
            currency,
            tuple(MenuItem(*i, ITEM_ALIASES.get((shop, i[0]), ())) for i in items),
        )

    def add_to_cart(self, shop: str, item_id: str, quantity: int, cart_id: str = "") -> Cart:
        menu = self.menu(shop)
        item = next((i for i in menu.items if i.item_id == item_id), None)
        if item is None:
            raise ProviderError("NOT_FOUND", f"{shop} has no item {item_id!r}")
        if not 1 <= quantity <= 50:
            raise ProviderError("BAD_REQUEST", "quantity must be 1..50")
        with self.lock:
            if cart_id:
                cart = self.carts.get(cart_id)
                if cart is None:
                    raise ProviderError("NOT_FOUND", f"no cart {cart_id!r}")
                if cart.shop != shop:
                    raise ProviderError("BAD_REQUEST", f"cart {cart_id} is for {cart.shop}")
                if cart_id in self.by_cart:
                    raise ProviderError("BAD_REQUEST", f"cart {cart_id} is already checked out")
            else:
                cart = Cart(_id("cart"), shop, (), 0, menu.currency)
                self.carts[cart.cart_id] = cart
            lines = list(cart.lines)
            for n, line in enumerate(lines):
                if line.item_id == item_id:
                    lines[n] = CartLine(
                        item_id, item.name, line.quantity + quantity, item.price_minor
                    )
                    break
            else:
                lines.append(CartLine(item_id, item.name, quantity, item.price_minor))
            total = sum(x.quantity * x.price_minor for x in lines)
            cart = Cart(cart.cart_id, shop, tuple(lines), total, menu.currency)
            self.carts[cart.cart_id] = cart
            return cart

    def new_cart(self, shop: str) -> Cart:
        menu = self.menu(shop)
        cart = Cart(_id("cart"), shop, (), 0, menu.currency)
        with self.lock:
            self.carts[cart.cart_id] = cart
        return cart

    def cart(self, cart_id: str) -> Cart:
        with self.lock:
            cart = self.carts.get(cart_id)
        if cart is None:
            raise ProviderError("NOT_FOUND", f"no cart {cart_id!r}")
        return cart

    def checkout(self, cart_id: str) -> Checkout:
        cart = self.cart(cart_id)
        if not cart.lines:
            raise ProviderError("BAD_REQUEST", "the cart is empty")
        payee = self.shops[cart.shop][0]
        with self.lock:
            existing = self.by_cart.get(cart_id)
            if existing is not None:
                return self.checkouts[existing]
            co = Checkout(_id("co"), cart_id, payee, cart.total_minor, cart.currency, "open")
            self.checkouts[co.checkout_id] = co
            self.by_cart[cart_id] = co.checkout_id
            return co

    def read_checkout(self, checkout_id: str) -> Checkout:
        with self.lock:
            co = self.checkouts.get(checkout_id)
        if co is None:
            raise ProviderError("NOT_FOUND", f"no checkout {checkout_id!r}")
        return co

    def set_price(self, checkout_id: str, total_minor: int) -> Checkout:
        """The shop changes the total of an open checkout (a sandbox control)."""
        with self.lock:
            co = self.checkouts[checkout_id]
            co = Checkout(co.checkout_id, co.cart_id, co.payee, total_minor, co.currency, co.state)
            self.checkouts[checkout_id] = co
            return co

    def begin(
        self, checkout_id: str, amount_minor: int, currency: str, key: str
    ) -> PayResult | None:
        """Check a pay request and record it as processing; a repeated key returns its
        earlier outcome instead (``PayResult``), refusals raise."""
        if not key:
            raise ProviderError("BAD_REQUEST", "an idempotency key is required")
        with self.lock:
            old = self.payments.get(key)
            if old is not None:
                if (old.checkout_id, old.amount_minor, old.currency) != (
                    checkout_id,
                    amount_minor,
                    currency,
                ):
                    raise ProviderError("KEY_REUSED", "this key was used for another payment")
                return self._result(old)
            co = self.checkouts.get(checkout_id)
            if co is None:
                raise ProviderError("NOT_FOUND", f"no checkout {checkout_id!r}")
            if co.state == "paid":
                raise ProviderError("ALREADY_PAID", "this checkout was already paid")
            if (amount_minor, currency) != (co.total_minor, co.currency):
                raise ProviderError(
                    "PRICE_CHANGED",
                    "the checkout total is not the amount given",
                    total_minor=co.total_minor,
                    currency=co.currency,
                )
            if any(
                p.checkout_id == checkout_id and p.state == "processing"
                for p in self.payments.values()
            ):
                raise ProviderError("ALREADY_PAID", "a payment of this checkout is in progress")
            self.payments[key] = _Payment(key, checkout_id, amount_minor, currency, "processing")
            return None

    def settle(self, key: str, state: str, reason: str = "") -> PayResult:
        """Finish a processing payment: ``paid`` charges it, ``failed`` does not."""
        with self.lock:
            p = self.payments[key]
            if p.state != "processing":
                return self._result(p)
            co = self.checkouts[p.checkout_id]
            if state == "paid":
                p.payment_ref = _id("pm")
                self.checkouts[co.checkout_id] = Checkout(
                    co.checkout_id, co.cart_id, co.payee, co.total_minor, co.currency, "paid"
                )
                self.charges.append(
                    {
                        "payment_ref": p.payment_ref,
                        "idempotency_key": key,
                        "checkout_id": co.checkout_id,
                        "payee": co.payee,
                        "amount_minor": p.amount_minor,
                        "currency": p.currency,
                        "at_ms": int(time.time() * 1000),
                    }
                )
            p.state, p.reason = state, reason
            return self._result(p)

    def pay(
        self, checkout_id: str, amount_minor: int, currency: str, idempotency_key: str
    ) -> PayResult:
        earlier = self.begin(checkout_id, amount_minor, currency, idempotency_key)
        return earlier or self.settle(idempotency_key, "paid")

    def status(self, idempotency_key: str) -> PayResult:
        with self.lock:
            p = self.payments.get(idempotency_key)
            if p is None:
                return PayResult("not_found", idempotency_key)
            return self._result(p)

    def _result(self, p: _Payment) -> PayResult:
        co = self.checkouts.get(p.checkout_id)
        return PayResult(
            p.state,
            p.key,
            p.payment_ref,
            p.checkout_id,
            co.payee if co else "",
            p.amount_minor,
            p.currency,
            p.reason,
        )


class MemoryProvider:
    """The ``errands`` fake's provider: a :class:`ShopBook` in memory — no service, no money."""

    name = "memory (fake)"

    def __init__(self, book: ShopBook | None = None) -> None:
        self.book = book or ShopBook()

    def shops(self) -> list[ShopInfo]:
        return self.book.listing()

    def menu(self, shop: str) -> Menu:
        return self.book.menu(shop)

    def add_to_cart(self, shop: str, item_id: str, quantity: int, cart_id: str = "") -> Cart:
        return self.book.add_to_cart(shop, item_id, quantity, cart_id)

    def cart(self, cart_id: str) -> Cart:
        return self.book.cart(cart_id)

    def checkout(self, cart_id: str) -> Checkout:
        return self.book.checkout(cart_id)

    def read_checkout(self, checkout_id: str) -> Checkout:
        return self.book.read_checkout(checkout_id)

    def pay(
        self, checkout_id: str, amount_minor: int, currency: str, idempotency_key: str
    ) -> PayResult:
        return self.book.pay(checkout_id, amount_minor, currency, idempotency_key)

    def status(self, idempotency_key: str) -> PayResult:
        return self.book.status(idempotency_key)


# ---------------------------------------------------------------- JSON forms
def to_json(obj: Any) -> dict[str, Any]:
    return asdict(obj)


def menu_from(d: dict[str, Any]) -> Menu:
    return Menu(
        str(d["shop"]),
        str(d["payee"]),
        str(d["currency"]),
        tuple(
            MenuItem(
                str(i["item_id"]),
                str(i["name"]),
                int(i["price_minor"]),
                tuple(map(str, i.get("aliases", ()))),
            )
            for i in d["items"]
        ),
    )


def cart_from(d: dict[str, Any]) -> Cart:
    return Cart(
        str(d["cart_id"]),
        str(d["shop"]),
        tuple(
            CartLine(str(x["item_id"]), str(x["name"]), int(x["quantity"]), int(x["price_minor"]))
            for x in d["lines"]
        ),
        int(d["total_minor"]),
        str(d["currency"]),
    )


def checkout_from(d: dict[str, Any]) -> Checkout:
    return Checkout(
        str(d["checkout_id"]),
        str(d["cart_id"]),
        str(d["payee"]),
        int(d["total_minor"]),
        str(d["currency"]),
        str(d["state"]),
    )


def result_from(d: dict[str, Any]) -> PayResult:
    return PayResult(
        str(d["state"]),
        str(d["idempotency_key"]),
        str(d.get("payment_ref", "")),
        str(d.get("checkout_id", "")),
        str(d.get("payee", "")),
        int(d.get("amount_minor", 0)),
        str(d.get("currency", "")),
        str(d.get("reason", "")),
    )


HTTP_ERRORS = {402: "DECLINED", 404: "NOT_FOUND", 422: "KEY_REUSED", 400: "BAD_REQUEST"}
MAX_RESPONSE = 1024 * 1024


class HttpProvider:
    """A provider's HTTP API (``base_url``, e.g. the sandbox's ``http://127.0.0.1:PORT``).

    ``timeout`` bounds every request; ``pay_timeout`` the payment request. A timeout or a
    dropped connection raises ``ProviderError`` ``TIMEOUT`` / ``DISCONNECTED``: the caller
    must treat the payment as unknown and ask :meth:`status`."""

    name = "http"

    def __init__(self, base_url: str, *, timeout: float = 10.0, pay_timeout: float = 15.0):
        u = urlsplit(base_url)
        if u.scheme != "http" or not u.hostname:
            raise ProviderError("BAD_REQUEST", f"provider URL {base_url!r} is not http://HOST:PORT")
        self.host, self.port = u.hostname, u.port or 80
        self.timeout, self.pay_timeout = timeout, pay_timeout
        self.name = f"http {self.host}:{self.port}"

    def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout or self.timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            hdrs = {"Content-Type": "application/json", **(headers or {})}
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            raw = resp.read(MAX_RESPONSE + 1)
        except TimeoutError as exc:
            raise ProviderError("TIMEOUT", f"no answer from the provider: {exc}") from None
        except (ConnectionError, http.client.HTTPException, OSError) as exc:
            raise ProviderError("DISCONNECTED", f"{type(exc).__name__}: {exc}") from None
        finally:
            conn.close()
        try:
            payload = json.loads(raw) if raw and len(raw) <= MAX_RESPONSE else {}
        except ValueError:
            payload = {}
        if not isinstance(payload, dict):
            payload = {}
        if resp.status == 200:
            return payload
        message = str(payload.get("message", resp.reason))[:300]
        if resp.status == 409:
            code = "PRICE_CHANGED" if payload.get("error") == "price_changed" else "ALREADY_PAID"
            extra = {k: payload[k] for k in ("total_minor", "currency") if k in payload}
            raise ProviderError(code, message, **extra)
        if resp.status in (502, 503, 504):
            raise ProviderError("TIMEOUT", f"the provider gave up: {message}")
        raise ProviderError(HTTP_ERRORS.get(resp.status, "BAD_REQUEST"), message)

    def shops(self) -> list[ShopInfo]:
        rows = self._request("GET", "/shops").get("shops", [])
        return [
            ShopInfo(str(r["shop"]), str(r["name"]), tuple(map(str, r.get("aliases", []))))
            for r in rows
            if isinstance(r, dict) and r.get("shop")
        ]

    def menu(self, shop: str) -> Menu:
        return menu_from(self._request("GET", f"/shops/{quote(shop, safe='')}/menu"))

    def add_to_cart(self, shop: str, item_id: str, quantity: int, cart_id: str = "") -> Cart:
        if not cart_id:
            cart_id = cart_from(self._request("POST", "/carts", {"shop": shop})).cart_id
        d = self._request(
            "POST",
            f"/carts/{quote(cart_id, safe='')}/items",
            {"shop": shop, "item_id": item_id, "quantity": quantity},
        )
        return cart_from(d)

    def cart(self, cart_id: str) -> Cart:
        return cart_from(self._request("GET", f"/carts/{quote(cart_id, safe='')}"))

    def checkout(self, cart_id: str) -> Checkout:
        return checkout_from(self._request("POST", f"/carts/{quote(cart_id, safe='')}/checkout"))

    def read_checkout(self, checkout_id: str) -> Checkout:
        return checkout_from(self._request("GET", f"/checkouts/{quote(checkout_id, safe='')}"))

    def pay(
        self, checkout_id: str, amount_minor: int, currency: str, idempotency_key: str
    ) -> PayResult:
        d = self._request(
            "POST",
            f"/checkouts/{quote(checkout_id, safe='')}/pay",
            {"amount_minor": amount_minor, "currency": currency},
            headers={"Idempotency-Key": idempotency_key},
            timeout=self.pay_timeout,
        )
        return result_from(d)

    def status(self, idempotency_key: str) -> PayResult:
        return result_from(self._request("GET", f"/payments/{quote(idempotency_key, safe='')}"))
