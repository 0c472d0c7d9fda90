"""errands: a shop's menu, cart and checkout over its provider's HTTP API (the real backend).

Environment (set by the hub from the package's settings): ``YIMI_PROVIDER_URL`` (the
provider; the sandbox provider in tests and demos), ``YIMI_PROVIDER_TIMEOUT`` and
``YIMI_PAY_TIMEOUT`` (seconds).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hub.capabilities.package_server import MCPServer

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout: packages.errands
from packages.errands import common
from packages.errands.provider import HttpProvider

mcp = MCPServer("errands")
PROVIDER = HttpProvider(
    os.environ.get("YIMI_PROVIDER_URL", "http://127.0.0.1:18890"),
    timeout=float(os.environ.get("YIMI_PROVIDER_TIMEOUT", "10")),
    pay_timeout=float(os.environ.get("YIMI_PAY_TIMEOUT", "15")),
)


@mcp.tool()
def list_shops() -> dict[str, Any]:
    """The provider's shops: id, name and other names."""
    return common.list_shops(PROVIDER)


@mcp.tool()
def browse_menu(shop: str) -> dict[str, Any]:
    """The shop's menu: items with their prices (minor units) and the payee."""
    return common.browse_menu(PROVIDER, shop)


@mcp.tool()
def add_to_cart(shop: str, item_id: str, quantity: int = 1, cart_id: str = "") -> dict[str, Any]:
    """Put an item into a cart (a new cart unless ``cart_id`` is given)."""
    return common.add_to_cart(PROVIDER, shop, item_id, quantity, cart_id)


@mcp.tool()
def view_cart(cart_id: str) -> dict[str, Any]:
    """What the cart holds and its total."""
    return common.view_cart(PROVIDER, cart_id)


@mcp.tool()
def go_to_checkout(cart_id: str) -> dict[str, Any]:
    """Go to the checkout and read back payee and amount. Stops there: paying needs the
    owner's authorisation, which the hub's payment authority asks for."""
    return common.go_to_checkout(PROVIDER, cart_id)


@mcp.tool()
def pay(
    checkout_id: str, amount_minor: int, currency: str, idempotency_key: str = ""
) -> dict[str, Any]:
    """Pay the checkout exactly the authorised amount (the payment authority calls this)."""
    return common.pay(PROVIDER, checkout_id, amount_minor, currency, idempotency_key)


@mcp.tool()
def payment_status(idempotency_key: str) -> dict[str, Any]:
    """Ask the provider what became of the payment made with this key."""
    return common.payment_status(PROVIDER, idempotency_key)


if __name__ == "__main__":
    mcp.run("stdio")
