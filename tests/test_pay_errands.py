"""The ``errands`` package and the sandbox provider: the contract on fake and real, the
read-back right before paying, idempotency keys, and what a timeout or a dead provider
looks like on a receipt. Amounts in minor units."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from hub.capabilities.contract import run_contract
from hub.capabilities.host import PackageHost
from hub.capabilities.manifest import load
from hub.gateway.receipts import Receipt, enforce, parse_receipt
from hub.payments import PaymentError
from hub.payments.money import fmt, to_minor
from packages.errands.provider import HttpProvider, ProviderError
from packages.errands.sandbox import SandboxShop
from tests.pay_kit import ERRANDS
from worlds.fakes import WORLDS


async def test_the_errands_contract_passes_on_fake_and_real() -> None:
    report = await run_contract(ERRANDS, worlds=WORLDS)
    assert report.ok, report.results
    assert {v for v, *_ in report.results} == {"fake", "real"}


@asynccontextmanager
async def errands(tmp: Path, shop: SandboxShop) -> AsyncIterator[Any]:
    m = load(ERRANDS)
    env = {**shop.env(), "YIMI_STATE_DIR": str(tmp)}
    async with PackageHost({m.name: m}, env_for=lambda _m, _v: env, log_dir=tmp / "logs") as host:

        async def call(tool: str, **args: Any) -> Receipt:
            outcome = await host.call("errands", tool, args)
            raw = parse_receipt(outcome.structured)
            if raw is None:  # the host's TIMEOUT / DISCONNECTED, as the gateway sees them
                raw = Receipt(status="failed", error_code=outcome.error_code, error=outcome.text)
            spec = m.tools[tool]
            return enforce(raw, retry=spec.retry, check_with=spec.check_with)

        yield call


async def test_checkout_reads_back_and_pay_rereads_before_paying(tmp_path: Path) -> None:
    async with SandboxShop(pay_timeout=1.0) as shop, errands(tmp_path, shop) as call:
        r = await call("add_to_cart", shop="lotus-kitchen", item_id="noodles", quantity=2)
        cart = r.effects[0].fields["cart_id"]
        co = await call("go_to_checkout", cart_id=cart)
        assert co.status == "succeeded"
        (e,) = co.effects
        assert e.kind == "checkout.opened" and e.target == "Lotus Kitchen"
        assert (e.fields["amount_minor"], e.fields["currency"]) == (2500, "EUR")
        assert shop.charges() == [], "the checkout stops there"
        checkout = e.fields["checkout_id"]

        shop.set_price(checkout, 2700)  # between the read-back and the payment
        r = await call(
            "pay", checkout_id=checkout, amount_minor=2500, currency="EUR", idempotency_key="k1"
        )
        assert r.status == "failed" and r.error_code == "PRICE_CHANGED"
        assert r.effects[0].fields["amount_minor"] == 2700
        assert shop.charges() == []
        assert not any(m == "POST" and p.endswith("/pay") for m, p in shop.requests), (
            "the executor saw the change itself and never asked the provider to pay"
        )

        r = await call(
            "pay", checkout_id=checkout, amount_minor=2700, currency="EUR", idempotency_key="k2"
        )
        assert r.status == "succeeded" and r.effects[0].kind == "payment.paid"
        assert r.effects[0].fields["amount_minor"] == 2700
        # the same key again: the first outcome, no second charge
        again = await call(
            "pay", checkout_id=checkout, amount_minor=2700, currency="EUR", idempotency_key="k2"
        )
        assert again.status == "succeeded"
        assert again.effects[0].fields["payment_ref"] == r.effects[0].fields["payment_ref"]
        # another key for a paid checkout: refused
        other = await call(
            "pay", checkout_id=checkout, amount_minor=2700, currency="EUR", idempotency_key="k3"
        )
        assert other.status == "failed" and other.error_code == "ALREADY_PAID"
        assert len(shop.charges()) == 1
        st = await call("payment_status", idempotency_key="k2")
        assert st.effects[0].fields["state"] == "paid"
        assert (await call("payment_status", idempotency_key="k9")).effects[0].fields[
            "state"
        ] == "not_found"


async def test_a_timeout_or_a_dead_provider_is_uncertain_on_the_receipt(tmp_path: Path) -> None:
    async with SandboxShop(pay_timeout=1.0) as shop, errands(tmp_path, shop) as call:
        r = await call("add_to_cart", shop="tea-house", item_id="oolong", quantity=1)
        co = await call("go_to_checkout", cart_id=r.effects[0].fields["cart_id"])
        checkout = co.effects[0].fields["checkout_id"]
        shop.control(pay_mode="timeout", hang_s=2.0)
        r = await call(
            "pay", checkout_id=checkout, amount_minor=300, currency="EUR", idempotency_key="k1"
        )
        assert r.status == "unknown" and r.error_code == "TIMEOUT"
        assert r.next.check_with == "payment_status" and r.next.retry == "forbidden"
        st = await call("payment_status", idempotency_key="k1")
        assert st.effects[0].fields["state"] in ("processing", "failed")
    # the provider is gone
    async with SandboxShop() as gone:
        pass
    async with errands(tmp_path / "2", gone) as call:
        r = await call("payment_status", idempotency_key="k1")
        assert r.status == "unknown" and r.error_code == "DISCONNECTED"
        r = await call(
            "pay", checkout_id="co-1", amount_minor=300, currency="EUR", idempotency_key="k1"
        )
        assert r.status == "failed" and r.error_code == "NOT_PAID", "not sent: surely not paid"


def test_the_http_provider_speaks_the_sandbox_api() -> None:
    shop = SandboxShop().start()
    try:
        p = HttpProvider(shop.url, timeout=5, pay_timeout=5)
        menu = p.menu("corner-bakery")
        assert menu.payee == "Corner Bakery" and [i.item_id for i in menu.items] == [
            "bread",
            "cake",
        ]
        cart = p.add_to_cart("corner-bakery", "bread", 2)
        cart = p.add_to_cart("corner-bakery", "cake", 1, cart.cart_id)
        assert cart.total_minor == 2 * 520 + 2400
        co = p.checkout(cart.cart_id)
        assert p.checkout(cart.cart_id) == co, "one checkout per cart"
        with pytest.raises(ProviderError) as err:
            p.pay(co.checkout_id, co.total_minor - 1, "EUR", "k1")
        assert err.value.code == "PRICE_CHANGED" and err.value.data["total_minor"] == 3440
        shop.control(pay_mode="fail")
        with pytest.raises(ProviderError) as err:
            p.pay(co.checkout_id, co.total_minor, "EUR", "k2")
        assert err.value.code == "DECLINED"
        assert p.status("k2").state == "failed"
        done = p.pay(co.checkout_id, co.total_minor, "EUR", "k3")
        assert done.state == "paid" and p.status("k3").payment_ref == done.payment_ref
        with pytest.raises(ProviderError) as err:
            p.pay("co-other", 100, "EUR", "k3")
        assert err.value.code == "KEY_REUSED"
        with pytest.raises(ProviderError) as err:
            p.menu("nowhere")
        assert err.value.code == "NOT_FOUND"
        assert len(shop.charges()) == 1
    finally:
        shop.stop()


def test_amounts_are_exact_minor_units() -> None:
    assert to_minor("23.50", "EUR") == 2350
    assert to_minor("200", "EUR") == 20000
    assert to_minor("1500", "JPY") == 1500
    assert fmt(2350, "EUR") == "23.50 EUR" and fmt(1500, "JPY") == "1500 JPY"
    for bad in ("23.505", "-1", "0", "abc", "NaN", "1e20"):
        with pytest.raises(PaymentError):
            to_minor(bad, "EUR")
    with pytest.raises(PaymentError):
        to_minor("1.5", "JPY")
