"""errands fake: the same tools and receipts as the real server over an in-memory shop
(the sandbox's menus): no service is called and no money moves."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hub.capabilities.package_server import MCPServer

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout: packages.errands
from packages.errands import common
from packages.errands.provider import MemoryProvider

mcp = MCPServer("errands-fake")
PROVIDER = MemoryProvider()


@mcp.tool()
def list_shops() -> dict[str, Any]:
    """The shops (fake: the sandbox's, in memory)."""
    return common.list_shops(PROVIDER)


@mcp.tool()
def browse_menu(shop: str) -> dict[str, Any]:
    """The shop's menu (fake: in memory)."""
    return common.browse_menu(PROVIDER, shop)


@mcp.tool()
def add_to_cart(shop: str, item_id: str, quantity: int = 1, cart_id: str = "") -> dict[str, Any]:
    """Put an item into a cart (fake: in memory)."""
    return common.add_to_cart(PROVIDER, shop, item_id, quantity, cart_id)


@mcp.tool()
def view_cart(cart_id: str) -> dict[str, Any]:
    """What the cart holds (fake: in memory)."""
    return common.view_cart(PROVIDER, cart_id)


@mcp.tool()
def go_to_checkout(cart_id: str) -> dict[str, Any]:
    """Go to the checkout and read back payee and amount (fake: in memory)."""
    return common.go_to_checkout(PROVIDER, cart_id)


@mcp.tool()
def pay(
    checkout_id: str, amount_minor: int, currency: str, idempotency_key: str = ""
) -> dict[str, Any]:
    """Pay the checkout (fake: recorded in memory, no money moves)."""
    return common.pay(PROVIDER, checkout_id, amount_minor, currency, idempotency_key)


@mcp.tool()
def payment_status(idempotency_key: str) -> dict[str, Any]:
    """What became of a payment (fake: in memory)."""
    return common.payment_status(PROVIDER, idempotency_key)


if __name__ == "__main__":
    mcp.run("stdio")
