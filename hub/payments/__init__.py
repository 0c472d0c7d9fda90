"""Payments (issue 8): every payment authorised on its own, checked at the checkout, never
remembered.

Python API (the hub daemon opens it next to the gateway; the brain calls it)::

    from hub.payments import open_payments, PaymentRequest, VoiceEvidence

    async with open_gateway(state_dir, ...) as gw, open_payments(gw, state_dir) as pay:
        # the owner said "order the same lunch as last time" (platform code, from the
        # admitted turn — never from a model's tool call or from content it read)
        intent = pay.open_intent(ctx, PaymentRequest("owner_voice", utterance_id=u,
                                 device_id=d, text=t, voice=VoiceEvidence(...)),
                                 task_id=task, description="lunch", budget="30")
        # the sub-agent drives the errands package through the gateway as usual:
        #   browse_menu → add_to_cart → go_to_checkout  (refused without an open intent)
        # go_to_checkout's receipt comes back "waiting": a card is on the phone (60 s) —
        # or "running" for an auto-payment with a 5-second undo
        await pay.voice_confirm(intent.payment_id, evidence, ctx)  # "pay it" (option)
        await pay.undo(intent.payment_id, ctx)                     # "undo" (auto-pay)
        pay.cancel(intent.payment_id)
        # the phone answers with `yimi pay approve|deny --bundle PHONE`; the gateway hands
        # spend cards to pay.answer(...); results reach gw.on_result and the ledger
        # auto-pay sends the phone a notice card (title "auto-pay: …"); the phone denies
        # it to undo: `yimi pay undo --bundle PHONE PAYMENT`

    The brain's side (``hub/brain/ordering.py``): ``voice_evidence(device, utterance, meta,
    heard_ms=...)`` builds the evidence from the admission meta (``Turn.evidence``);
    ``pay.last_order(owner, "lunch")``, ``pay.waiting(owner)``, ``pay.undoable(owner)``,
    ``pay.note_order(...)``, and ``pay.hand_to(payment, sub_task, ctx)`` (the LLM brain's
    sub-agent that goes to the checkout takes over the turn's intent).

Modules: :mod:`.authority` (the coordinating shell), :mod:`.policy` (the rules, pure, with
an explicit ``now``), :mod:`.lifecycle` (which state may follow which), :mod:`.intents`,
:mod:`.checkout` (the hand-over at the checkout), :mod:`.cards` (the phone's payment
cards and its answers), :mod:`.cashier` (paying once, status checks), :mod:`.phone`
(unlock leases, owner-signed option changes), :mod:`.records` (audit and receipts through
the gateway), :mod:`.sweeper` (the owned sweep and undo timers), :mod:`.store`
(``payments.db``), :mod:`.model` (states, requests, the authorisation binding),
:mod:`.options` (the two optional modes). The shop provider, its sandbox service and the
in-memory shop of the fake are the errands package's (``packages/errands``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from hub.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from hub.gateway.gateway import Gateway
    from hub.payments.authority import PaymentAuthority, VoiceOutcome
    from hub.payments.errors import PaymentError
    from hub.payments.model import Payment, PaymentRequest, VoiceEvidence, voice_evidence
    from hub.payments.options import PayOptions
    from hub.payments.phone import DeviceLookup, change_options
    from hub.payments.store import PaymentStore

# imported on first use: a package server that needs only ``hub.payments.money`` does not
# load the authority, the gateway and the MCP host with it
__getattr__ = lazy_exports(
    __name__,
    {
        "hub.payments.authority": ("PaymentAuthority", "VoiceOutcome"),
        "hub.payments.errors": ("PaymentError",),
        "hub.payments.model": ("Payment", "PaymentRequest", "VoiceEvidence", "voice_evidence"),
        "hub.payments.options": ("PayOptions",),
        "hub.payments.phone": ("change_options",),
        "hub.payments.store": ("PaymentStore",),
    },
)

__all__ = [
    "PayOptions",
    "Payment",
    "PaymentAuthority",
    "PaymentError",
    "PaymentRequest",
    "PaymentStore",
    "VoiceEvidence",
    "VoiceOutcome",
    "change_options",
    "open_payments",
    "voice_evidence",
]


@asynccontextmanager
async def open_payments(
    gateway: Gateway,
    state_dir: Path,
    *,
    devices: DeviceLookup | None = None,
    durable: bool = True,
    sweep: bool = True,
) -> AsyncIterator[PaymentAuthority]:
    """The payment authority over ``state_dir/payments.db``, attached to ``gateway`` (its
    ``spend`` gate, cards and audit log) until the block ends. ``devices`` looks up the
    device registry (revocation is checked at every use). ``sweep=False``: no periodic
    sweep (tests call ``sweep()`` themselves); undo timers still run."""
    from hub.payments.authority import PaymentAuthority
    from hub.payments.store import PaymentStore
    from hub.payments.sweeper import PaymentSweeper

    store = PaymentStore(state_dir / "payments.db", synchronous="FULL" if durable else "OFF")
    authority = PaymentAuthority(gateway, store, devices=devices)
    sweeper = PaymentSweeper(authority.sweep, authority.execute, authority.now, periodic=sweep)
    gateway.payments = authority
    try:
        await authority.reconcile()
        async with sweeper:
            authority.sweeper = sweeper
            try:
                yield authority
            finally:
                authority.sweeper = None
    finally:
        gateway.payments = None
        store.close()
