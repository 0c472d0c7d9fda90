"""The package side of the receipt contract: what a capability package's MCP server returns.

Built-in packages (``packages/*``) build their receipts here; the gateway parses and checks
them at the trust boundary (``hub.gateway.receipts``), which shares :data:`RECEIPT_VERSION`.
"""

from __future__ import annotations

from typing import Any

RECEIPT_VERSION = 1


def receipt(
    status: str,
    *,
    effects: list[dict[str, Any]] | None = None,
    values: list[dict[str, Any]] | None = None,
    unknowns: list[str] | None = None,
    error: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A receipt: ``status`` (one of the nine), effects, values with units, unknowns, and an
    optional ``(code, message)`` error."""
    out: dict[str, Any] = {
        "receipt_version": RECEIPT_VERSION,
        "status": status,
        "effects": effects or [],
        "values": values or [],
        "unknowns": unknowns or [],
    }
    if error is not None:
        out["error"] = {"code": error[0], "message": error[1]}
    return out
