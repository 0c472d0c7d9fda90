"""The capability gateway: "the model proposes, the platform decides".

Python API (used in-process by the brain's pydantic-ai hooks, issue 6)::

    from hub.gateway import open_gateway, ToolCall, CallContext, guarded

    async with open_gateway(state_dir, packages=[Path("packages/messaging")],
                            courier=courier) as gw:
        ctx = CallContext(owner="owner", scope="owner", session_id=s, run_id=r,
                          trace_id=t, scheduled=False)
        call = ToolCall("messaging", "send_email", {"to": ..., "subject": ...,
                        "body": ..., "owner_requested": True}, call_id=c, task_id=task)

        # before_tool_execute:  decision = await gw.decide(call, ctx)
        #   decision.outcome in allow | rewrite → run the tool with decision.args
        #   block | confirm → hand back decision.receipt (rejected / waiting) instead
        # after_tool_execute:   receipt = await gw.receipt(call, ctx, decision, outcome)
        # or both at once, on the gateway's own MCP host:
        receipt = await gw.call(call, ctx)            # == guarded(gw, call, ctx, execute)

        checked = await gw.observe(task, model_reply)  # facts in, contradictions out
        gw.delivered(task, receipts)                   # after the device ACKed the reply

        await gw.answer(approval, device_id=..., sign_pk=..., scopes=...)  # phone's answer
        await gw.expire_cards()                        # periodic

``spend`` calls go to the payment authority once ``hub.payments.open_payments(gw, ...)``
attaches it (``gw.payments``); without it they are blocked.

Modules: :mod:`.gateway` (decide / receipt / observe, gates, :func:`guarded`),
:mod:`.receipts` (receipt model and the five invariants), :mod:`.ledger` (idempotent
per (task, call), checks, said facts), :mod:`.consent` (first-send memory, cards,
approvals, execution tokens), :mod:`.facts` (templates and the reply checker),
:mod:`.audit` (hash-chained log), :mod:`.courier` (cards over the mesh).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from hub.lazy_exports import lazy_exports
from storage.private import private_dir

if TYPE_CHECKING:
    from nacl.signing import SigningKey

    from hub.capabilities.host import EnvFor
    from hub.capabilities.manifest import Manifest
    from hub.gateway.gateway import (
        CallContext,
        Courier,
        Decision,
        Gateway,
        ToolCall,
        guarded,
    )
    from hub.gateway.receipts import Receipt

# imported on first use: ``hub.gateway.receipts`` (what a package server builds) does not
# load the MCP host, the manifest schema and the ledger with it
__getattr__ = lazy_exports(
    __name__,
    {
        "hub.gateway.gateway": (
            "CallContext",
            "Courier",
            "Decision",
            "Gateway",
            "ToolCall",
            "guarded",
        ),
        "hub.gateway.receipts": ("Receipt",),
    },
)

__all__ = [
    "CallContext",
    "Courier",
    "Decision",
    "Gateway",
    "Receipt",
    "ToolCall",
    "guarded",
    "open_gateway",
]


@asynccontextmanager
async def open_gateway(
    state_dir: Path,
    *,
    packages: list[Path] | None = None,
    manifests: dict[str, Manifest] | None = None,
    variant: str = "real",
    env_for: EnvFor | None = None,
    courier: Courier | None = None,
    durable: bool = True,
    audit_signer: SigningKey | None = None,
    settled_by_caller: bool = False,
) -> AsyncIterator[Gateway]:
    """A gateway with its ledger (``state_dir/gateway.db``), audit log
    (``state_dir/audit/``) and MCP host over ``packages``; everything closes on exit.
    ``settled_by_caller``: see :attr:`Gateway.settled_by_caller` (the hub's)."""
    from hub.capabilities.host import PackageHost
    from hub.capabilities.manifest import load
    from hub.gateway.audit import AuditLog
    from hub.gateway.gateway import Gateway
    from hub.gateway.ledger import Ledger

    catalog = dict(manifests or {})
    for root in packages or []:
        m = load(root)
        catalog[m.name] = m
    private_dir(state_dir)  # once, at start
    ledger = Ledger(state_dir / "gateway.db", synchronous="FULL" if durable else "OFF")
    audit = AuditLog(state_dir / "audit", durable=durable, signer=audit_signer)
    # after a crash: the records and head the ledger holds that the audit file lost
    batches = ledger.audit_batches()
    _, synced = audit.recover(ledger.audit_head(), batches)
    if batches:
        ledger.prune_audit(synced)  # the file holds them durably now
    try:
        async with PackageHost(
            catalog,
            variant=variant,
            env_for=env_for,
            log_dir=state_dir / "package-logs",
            audit=audit.append,
        ) as host:
            gw = Gateway(
                catalog,
                ledger,
                audit,
                host=host,
                courier=courier,
                settled_by_caller=settled_by_caller,
            )
            try:
                yield gw
            finally:
                gw.close()
                await gw.commits.aclose()
    finally:
        audit.close()
        ledger.close()
