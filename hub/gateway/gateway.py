"""The capability gateway: every tool call passes :meth:`Gateway.decide` before it runs and
:meth:`Gateway.receipt` after; :meth:`Gateway.observe` checks the reply against receipts.

Decision order (ARCHITECTURE F2): scope → duplicate / unknown → effect → gate.

- **scope**: the turn's admission scope must be one the package (or tool) accepts;
- **duplicate / unknown**: a call whose identical action already succeeded in this task is
  blocked when the tool's retry rule is ``forbidden``; an action already waiting for the
  owner is not asked twice; after an ``unknown``/``partial`` result the tool's
  ``check_with`` tool must run before the tool runs again;
- **effect**: from the manifest; ``effect_by_arg`` without a mapping for the value blocks;
- **gate**: a table by effect (``observe``/``workspace`` allow; ``send`` and the others ask
  through the consent authority; ``physical`` never touches locks; ``spend`` is handed to
  the payment authority — ``hub.payments`` — and blocked when none is attached). A call
  that needs a card in a scheduled run is blocked instead.

Outcomes: ``allow``, ``rewrite`` (trusted fields — session, run, call id, idempotency key —
overwrote or filled the model's), ``block`` (a ``rejected`` receipt with the reason) and
``confirm`` (a ``waiting`` receipt at once; the card goes to the owner's phone; the rest of
the batch goes on). ``owner_requested`` is read, then stripped from the arguments.

Durability (issue 21): :meth:`Gateway.decide` reads only memory and the ledger's cached
pages (policy from the manifests, the consent authority's first-send memory in memory)
and commits its decision without an fsync; its ledger row and audit record join the next
group commit (:mod:`.commit`). A decision that lets something other than an ``observe``
tool run, blocks or asks for a card returns only once that batch is durable; an allowed
``observe`` call does not wait (running it twice after a crash changes nothing), and its
decision is durable no later than its receipt. Every receipt returns only once durable:
concurrent calls share one batch — one signed head and one fsync, of the ledger's WAL, which
holds the batch's audit records too (the audit file is synced in the background).

In the hub (``settled_by_caller``) an ``observe`` call's receipt returns once it is
staged (in the ledger's open group transaction, read back by every later decide), without
waiting for its batch: the batch is written with the next one anyone waits for, or
:data:`~.commit.LATER_S` later at the latest. Nothing the receipt tells can leave the hub
before the hub's group commit awaited :meth:`ReceiptBatches.settled` (before every
message, web response and gRPC answer), and a call with no effect needs no durable record
before the next step — the same rule as its decision (a ``kill -9`` in between can lose
both). Every other receipt still returns only once durable, so a later call with an
effect is decided on a durable ledger.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from hub.capabilities.host import REFUSED, PackageHost, ToolOutcome
from hub.capabilities.manifest import Manifest, ToolSpec
from hub.gateway import facts as factsmod
from hub.gateway.audit import AuditLog
from hub.gateway.commit import ReceiptBatches
from hub.gateway.consent import EXPIRED_NOW, Answer, Card, ConsentAuthority
from hub.gateway.errors import GatewayError
from hub.gateway.ledger import Ledger
from hub.gateway.receipts import (
    MAX_OUTPUT,
    Next,
    Receipt,
    canonical,
    canonical_object,
    enforce,
    gateway_receipt,
    invalid,
    mcp_receipt,
    parse_receipt,
)
from protos import consent_pb2
from protos.clock import now_ms

log = logging.getLogger(__name__)

DECIDE_TIMEOUT_S = 3.0
"""the brain's hook waits this long for a decision; then the call is not executed"""
RECEIPT_TIMEOUT_S = 3.0
OWNER_REQUESTED = "owner_requested"
TRUSTED = ("session_id", "run_id", "call_id", "idempotency_key")


SCHEDULED_BLOCK = "a scheduled run never shows a card: this call needs the owner"
"""the block reason of a call that needs a card in a scheduled run (``CallContext.scheduled``)"""


@dataclass(frozen=True)
class ToolCall:
    package: str
    tool: str
    args: dict[str, Any]
    call_id: str
    task_id: str


@dataclass(frozen=True)
class CallContext:
    owner: str = "owner"
    scope: str = "owner"
    session_id: str = ""
    run_id: str = ""
    trace_id: str = ""
    scheduled: bool = False


@dataclass(frozen=True)
class Decision:
    outcome: str
    """``allow`` / ``rewrite`` / ``block`` / ``confirm``; ``done`` for a repeated call id
    (its recorded receipt comes back, nothing runs again)"""
    reason: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    """what the tool runs with (trusted fields set, ``owner_requested`` stripped)"""
    effect: str = ""
    target: str = ""
    action_hash: str = ""
    receipt: Receipt | None = None
    """for ``block`` and ``confirm``: the receipt to hand back instead of running"""
    card: Card | None = None

    @property
    def runs(self) -> bool:
        return self.outcome in ("allow", "rewrite")

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "reason": self.reason,
            "args": self.args,
            "effect": self.effect,
            "target": self.target,
            "action_hash": self.action_hash,
            "card_id": self.card.card_id if self.card else "",
        }


class Courier(Protocol):
    """Where cards go: the owner's phone (and a short form to the glasses HUD)."""

    async def show(self, card: Card) -> None: ...

    async def update(self, update: consent_pb2.CardUpdate, card: Card) -> None: ...


class PaymentGate(Protocol):
    """The payment authority as the gateway sees it (``hub.payments``): it gates ``spend``
    calls, takes the checkout's receipt, and answers and expires payment cards."""

    def gate(
        self, call: ToolCall, ctx: CallContext, tool: str, args: dict[str, Any]
    ) -> tuple[str, str]: ...

    async def on_receipt(
        self, call: ToolCall, ctx: CallContext, decision: Decision, r: Receipt
    ) -> Receipt: ...

    async def answer(
        self,
        approval: consent_pb2.Approval,
        *,
        device_id: str,
        sign_pk: bytes,
        scopes: tuple[str, ...] | list[str],
        profile: str = "",
        revoked: bool = False,
        trace_id: str = "",
    ) -> tuple[Answer, Receipt | None] | None: ...

    async def card_expired(self, card: Card) -> Receipt | None: ...


@dataclass(frozen=True)
class _Gate:
    ctx: CallContext
    spec: ToolSpec
    effect: str
    target: str
    task_type: str
    owner_requested: bool
    call: ToolCall | None = None
    args: dict[str, Any] = field(default_factory=dict)


GateResult = tuple[str, str]
"""(outcome: allow | block | confirm, reason)"""


def _hash(obj: Any) -> str:
    return hashlib.sha256(canonical(obj)).hexdigest()


class Gateway:
    def __init__(
        self,
        catalog: dict[str, Manifest],
        ledger: Ledger,
        audit: AuditLog,
        *,
        host: PackageHost | None = None,
        courier: Courier | None = None,
        on_result: Callable[[Receipt], Awaitable[None]] | None = None,
        settled_by_caller: bool = False,
    ) -> None:
        self.catalog = catalog
        self.settled_by_caller = settled_by_caller
        """the receipt of an ``observe`` call returns once staged, its batch written with
        the next one: whoever lets anything out first awaits ``commits.settled()`` (the
        hub's group commit does before every message, response and answer)"""
        self.ledger = ledger
        self.audit = audit
        self.consent = ConsentAuthority(ledger)
        self.commits = ReceiptBatches(ledger, audit)
        """the group commit every decision and receipt of this gateway goes through"""
        self._unaudited: set[tuple[str, str, str]] = set()
        """(task, call, fingerprint) of receipts whose batch failed after their ledger row
        was written: their audit record is written again when the same receipt comes back"""
        self.host = host
        self.courier = courier
        self.on_result = on_result
        self.payments: PaymentGate | None = None
        """the payment authority (``hub.payments.open_payments`` attaches it): spend calls,
        payment cards"""
        self.closed = False
        self.gates: dict[str, Callable[[_Gate], GateResult]] = {
            "observe": self._gate_allow,
            "workspace": self._gate_allow,
            "owner_data": self._gate_consent,
            "account": self._gate_consent,
            "delete": self._gate_consent,
            "send": self._gate_consent,
            "self_change": self._gate_consent,
            "physical": self._gate_physical,
            "spend": self._gate_spend,
        }

    def close(self) -> None:
        self.closed = True

    def _alive(self) -> None:
        if self.closed:
            raise GatewayError("gateway.down")

    # ------------------------------------------------------------------ gates
    def _gate_allow(self, g: _Gate) -> GateResult:
        return "allow", ""

    def _gate_consent(self, g: _Gate) -> GateResult:
        if not self.consent.required(
            g.effect,
            owner_requested=g.owner_requested,
            owner=g.ctx.owner,
            target=g.target,
            task_type=g.task_type,
        ):
            return "allow", ""
        if g.ctx.scheduled:
            return "block", SCHEDULED_BLOCK
        if g.effect == "send":
            why = (
                "first send of this kind to this recipient"
                if g.owner_requested
                else ("the owner did not ask for this send")
            )
        else:
            why = f"{g.effect} the owner did not ask for"
        return "confirm", why

    def _gate_physical(self, g: _Gate) -> GateResult:
        if g.target.split(".", 1)[0] == "lock":
            return "block", "locks are read-only"
        return self._gate_consent(g)

    def _gate_spend(self, g: _Gate) -> GateResult:
        if self.payments is None or g.call is None:
            return "block", "payments go through the payment authority, never a tool call"
        return self.payments.gate(g.call, g.ctx, g.spec.name, g.args)

    # ------------------------------------------------------------------ decide
    async def decide(self, call: ToolCall, ctx: CallContext) -> Decision:
        """Decide one call. Idempotent on (task id, call id); other arguments conflict."""
        self._alive()
        args_fp = _hash({"p": call.package, "t": call.tool, "a": call.args})
        old = self.ledger.call(call.task_id, call.call_id)
        if old is not None:
            if old.args_fp != args_fp:
                raise GatewayError(
                    "ledger.conflict",
                    task=call.task_id,
                    call=call.call_id,
                    what="a different call was already decided",
                )
            await self.commits.durable()  # recorded by a caller whose batch may be open
            return self._restore(old.decision, old.receipt)
        decision = self._decide(call, ctx)
        return await self._record(call, ctx, decision, args_fp)

    def _decide(self, call: ToolCall, ctx: CallContext) -> Decision:
        m = self.catalog.get(call.package)
        spec = m.tool(call.tool) if m else None
        if m is None or spec is None:
            return self._block(f"no tool {call.package}.{call.tool}")
        model_args = dict(call.args)
        asked = model_args.pop(OWNER_REQUESTED, False) is True
        # scope
        scopes = spec.scopes if spec.scopes is not None else m.scopes
        if ctx.scope not in scopes:
            return self._block(f"scope {ctx.scope!r} may not use {m.name}.{spec.name}")
        # trusted fields overwrite the model's
        args = dict(model_args)
        trusted = {
            "session_id": ctx.session_id,
            "run_id": ctx.run_id,
            "call_id": call.call_id,
            "idempotency_key": _hash([call.task_id, call.call_id])[:32],
        }
        for name in spec.trusted_args:
            args[name] = trusted[name]
        rewritten = args != model_args
        effect = spec.effect_for(args)
        target = str(args.get(spec.target, "")) if spec.target else ""
        task_type = spec.task_type or f"{m.name}.{spec.name}"
        action = {k: v for k, v in args.items() if k not in spec.trusted_args}
        action_hash = _hash(
            {
                "package": m.name,
                "tool": spec.name,
                "args": action,
                "effect": effect,
                "target": target,
                "task_type": task_type,
                "owner": ctx.owner,
            }
        )
        base = Decision("block", "", args, effect or "", target, action_hash)
        # duplicate / unknown
        forbidden = spec.retry == "forbidden"
        same = self.ledger.same_action(
            call.task_id,
            action_hash,
            call.call_id,
            ("waiting", *((None, "succeeded", "partial", "running") if forbidden else ())),
        )
        if same is not None and same.status == "waiting":
            return self._block("already waiting for the owner's answer", base)
        if same is not None:
            done = same.status or "running"
            return self._block(f"{spec.name} already {done} in this task; retry is forbidden", base)
        check = self.ledger.pending_check(call.task_id, m.name, spec.name)
        if check is not None:
            return self._block(
                f"the last {spec.name} result is unknown: run {check} before any retry", base
            )
        # effect
        if effect is None:
            value = args.get(spec.effect_arg or "")
            return self._block(
                f"no effect is declared for {spec.effect_arg}={value!r}: blocked", base
            )
        # gate
        outcome, reason = self.gates[effect](
            _Gate(ctx, spec, effect, target, task_type, asked, call, args)
        )
        if outcome == "allow" and rewritten:
            outcome = "rewrite"
        return replace(base, outcome=outcome, reason=reason)

    def _block(self, reason: str, base: Decision | None = None) -> Decision:
        d = base or Decision("block")
        return replace(d, outcome="block", reason=reason)

    async def _record(
        self, call: ToolCall, ctx: CallContext, d: Decision, args_fp: str
    ) -> Decision:
        m = self.catalog.get(call.package)
        spec = m.tool(call.tool) if m else None
        if d.outcome == "block":
            d = replace(
                d,
                receipt=self._stamp(
                    gateway_receipt("rejected", d.reason, next=Next(retry="forbidden")), call, d
                ),
            )
        elif d.outcome == "confirm":
            assert m is not None and spec is not None
            card, voided = self.consent.issue(
                task_id=call.task_id,
                call_id=call.call_id,
                owner=ctx.owner,
                package=m.name,
                tool=spec.name,
                args=d.args,
                effect=d.effect,
                target=d.target,
                task_type=spec.task_type or f"{m.name}.{spec.name}",
                title=self._title(spec, d),
                preview=self._preview(spec, d.args),
                action_hash=bytes.fromhex(d.action_hash),
                context={
                    "scope": ctx.scope,
                    "session_id": ctx.session_id,
                    "run_id": ctx.run_id,
                    "trace_id": ctx.trace_id,
                },
            )
            waiting = gateway_receipt(
                "waiting",
                d.reason,
                next=Next(retry="forbidden", waiting_for="owner"),
                card_id=card.card_id,
            )
            d = replace(d, card=card, receipt=self._stamp(waiting, call, d))
            for old in voided:
                await self._cancel(old, "voided", "the action changed", ctx.trace_id)
        self.record_decision(call, ctx, d, args_fp, durable=False)
        if d.receipt is not None:  # _store waits for the batch (the decision's too)
            stored = self._facts(
                await self._store(call.task_id, call.call_id, d.receipt, ctx.trace_id)
            )
            d = replace(d, receipt=stored)
        elif d.runs and d.effect == "observe":
            self.commits.later()  # durable with its receipt's batch, at the latest
        else:
            await self.commits.durable()
        if d.card is not None:
            await self.show_card(d.card)
        return d

    def record_decision(
        self, call: ToolCall, ctx: CallContext, d: Decision, args_fp: str, *, durable: bool = True
    ) -> None:
        """The ledger row and the audit record of a decision (also for the calls the payment
        authority makes itself): durable on return, or with ``durable=False`` staged for the
        group commit (the caller then waits on :attr:`commits` or asks it to write soon)."""
        recorded = d.to_dict()  # once, for the ledger row and the audit record
        self.ledger.record_decision(
            task_id=call.task_id,
            call_id=call.call_id,
            package=call.package,
            tool=call.tool,
            action_hash=d.action_hash,
            args_fp=args_fp,
            effect=d.effect,
            target=d.target,
            outcome=d.outcome,
            decision=recorded,
            sync=durable,
        )
        write = self.audit.append if durable else self.audit.stage
        write(
            "decision",
            {
                "task_id": call.task_id,
                "call_id": call.call_id,
                "package": call.package,
                "tool": call.tool,
                **{k: v for k, v in recorded.items() if k != "args"},
                "args_fp": args_fp,
            },
            trace_id=ctx.trace_id,
        )

    async def show_card(self, card: Card) -> None:
        """Send ``card`` to the owner's phone now; if it is out of reach the card waits in
        the ledger and the phone gets it on sync."""
        if self.courier is None:
            return
        try:
            await self.courier.show(card)
        except Exception:  # the card waits in the ledger; the phone gets it on sync
            log.exception("card %s not delivered now", card.card_id)

    def _restore(self, decision: dict[str, Any], receipt: dict[str, Any] | None) -> Decision:
        card = self.consent.card(decision["card_id"]) if decision.get("card_id") else None
        d = Decision(
            decision["outcome"],
            decision["reason"],
            decision["args"],
            decision["effect"],
            decision["target"],
            decision["action_hash"],
            Receipt.from_dict(receipt) if receipt else None,
            card,
        )
        # a repeated (task, call) never runs twice: with a receipt recorded, ``done`` hands
        # it back; a call decided to run but without a receipt yet is ``running``
        if d.receipt is not None and d.outcome in ("allow", "rewrite"):
            return replace(d, outcome="done", receipt=self._facts(d.receipt))
        if d.runs:
            running = Receipt(
                status="running",
                error="this call was already started",
                effect=d.effect,
                target=d.target,
            )
            return replace(d, outcome="done", receipt=running)
        return d

    @staticmethod
    def _title(spec: ToolSpec, d: Decision) -> str:
        what = spec.name.replace("_", " ")
        return f"{d.effect}: {what}" + (f" → {d.target}" if d.target else "")

    @staticmethod
    def _preview(spec: ToolSpec, args: dict[str, Any]) -> str:
        keys = spec.preview or tuple(k for k in args if k not in TRUSTED)
        return "\n".join(f"{k}: {args[k]}" for k in keys if k in args)[:600]

    def _stamp(self, r: Receipt, call: ToolCall, d: Decision, revision: int = 0) -> Receipt:
        return self._stamped(r, call, d, revision)[0]

    @staticmethod
    def _stamped(
        r: Receipt, call: ToolCall, d: Decision, revision: int = 0, output: str | None = None
    ) -> tuple[Receipt, dict[str, str]]:
        """``r`` with the call's trusted fields (and ``output``, if given) and its summary,
        and its fact map (id → text: what the ledger records), its facts rendered once."""
        r = r.evolve(
            package=call.package,
            tool=call.tool,
            task_id=call.task_id,
            call_id=call.call_id,
            effect=d.effect,
            target=d.target,
            revision=revision,
            output=r.output if output is None else output,
        )
        found = factsmod.facts_of(r)
        r = r.evolve(summary=factsmod.summary(r, found))
        return r, {f.fact_id: f.text for f in found}

    async def _store(
        self,
        task_id: str,
        call_id: str,
        r: Receipt,
        trace_id: str,
        facts: dict[str, str] | None = None,
        *,
        wait: bool = True,
    ) -> Receipt:
        """Record ``r`` (idempotently) and return the stored receipt once it is durable
        (group commit: concurrent calls share the batch). ``facts``: ``r``'s fact map, if
        the caller has it already. ``wait=False``: return at once; it is made durable with the
        next batch (:meth:`ReceiptBatches.later`; :meth:`ReceiptBatches.settled` waits
        for it)."""
        stored, fresh = self.ledger.record_receipt(
            task_id, call_id, r, factsmod.fact_map([r]) if facts is None else facts, sync=False
        )
        key = (task_id, call_id, stored.fingerprint())
        if fresh or key in self._unaudited:
            encoded = canonical_object(  # the receipt's canonical bytes are known already
                {
                    "task_id": canonical(task_id),
                    "call_id": canonical(call_id),
                    "receipt": stored.canonical_content,
                }
            )
            self.audit.stage(
                "receipt",
                {"task_id": task_id, "call_id": call_id, "receipt": stored.content()},
                trace_id=trace_id,
                encoded=encoded,
            )
        if not wait:
            self.commits.later()
            return stored
        try:
            await self.commits.durable()  # also when not fresh: its first writer may wait
        except GatewayError:
            if fresh:  # in the ledger, but its audit record was lost with the batch:
                self._unaudited.add(key)  # a retry of the same receipt writes it again
            raise
        self._unaudited.discard(key)
        return stored

    def _facts(self, r: Receipt, facts: dict[str, str] | None = None) -> Receipt:
        """``r`` with its new and said facts (``facts``: its fact map, if known; the same
        for every receipt of the same content)."""
        ids = list(factsmod.fact_map([r]) if facts is None else facts)
        new, said = self.ledger.fact_states(r.task_id, ids)
        return r.evolve(new_facts=tuple(new), said_facts=tuple(said))

    async def record_revision(
        self, r: Receipt, call: ToolCall, d: Decision, revision: int, trace_id: str
    ) -> Receipt:
        """Record ``r`` as revision ``revision`` of ``call``'s receipt (stamped with the call
        and its decision, audited once) and return it with its new and said facts — how the
        payment authority writes a payment's outcome onto its checkout call."""
        stored = await self._store(
            call.task_id, call.call_id, self._stamp(r, call, d, revision), trace_id
        )
        return self._facts(stored)

    # ------------------------------------------------------------------ receipt
    async def receipt(
        self,
        call: ToolCall,
        ctx: CallContext,
        decision: Decision,
        outcome: ToolOutcome,
        *,
        revision: int = 0,
    ) -> Receipt:
        """Judge what the tool returned, record it (idempotently) and return the receipt."""
        self._alive()
        m = self.catalog[call.package]
        spec = m.tools[call.tool]
        if outcome.error_code in ("TIMEOUT", "DISCONNECTED"):
            raw = gateway_receipt("failed", outcome.text)
            raw = replace(raw, error_code=outcome.error_code)
        elif outcome.error_code == "START_FAILED":
            raw = gateway_receipt("not_executed", f"the package did not start: {outcome.text}")
        elif outcome.error_code == REFUSED:
            raw = gateway_receipt("not_executed", outcome.text, next=Next(retry="forbidden"))
        elif m.receipts == "mcp":
            raw = mcp_receipt(
                outcome.structured,
                outcome.text,
                is_error=outcome.is_error,
                effect=decision.effect,
                tool=spec.name,
                target=decision.target,
            )
        else:
            parsed = parse_receipt(outcome.structured)
            raw = (
                parsed
                if parsed is not None
                else invalid(
                    "not a valid receipt" + (f": {outcome.text[:300]}" if outcome.text else "")
                )
            )
        if spec.long_running:
            revision = max(revision, raw.revision)
        r = enforce(raw, retry=spec.retry, check_with=spec.check_with)
        output = raw.output or outcome.text[:MAX_OUTPUT]
        r, facts = self._stamped(r, call, decision, revision, output)
        stored = await self._store(
            call.task_id,
            call.call_id,
            r,
            ctx.trace_id,
            facts,
            wait=not (self.settled_by_caller and decision.effect == "observe"),
        )
        if stored.status in ("unknown", "partial") and spec.check_with:
            self.ledger.require_check(call.task_id, m.name, spec.name, spec.check_with)
        if stored.status == "succeeded" and any(
            t.check_with == spec.name for t in m.tools.values()
        ):
            self.ledger.check_ran(call.task_id, m.name, spec.name)
        if self.payments is not None and stored.effect == "spend":
            return await self.payments.on_receipt(call, ctx, decision, self._facts(stored, facts))
        return self._facts(stored, facts)

    # ------------------------------------------------------------------ observe
    async def observe(
        self, task_id: str, reply: str, *, voice: bool = False, lang: str = "en"
    ) -> factsmod.Checked:
        """Check a reply against this task's receipts (removing contradictions, adding
        missing facts, in ``lang``). Facts count as said only after :meth:`delivered`."""
        self._alive()
        receipts = self.ledger.task_receipts(task_id)
        said = self.ledger.split_facts(task_id, factsmod.fact_map(receipts))[1]
        return factsmod.check_reply(reply, receipts, voice=voice, said=said, lang=lang)

    def delivered(self, task_id: str, receipts: list[Receipt]) -> None:
        """The reply carrying these receipts' facts was ACKed: they are now said (at once
        for this gateway's reads). The marks are staged, not synced on the caller's loop:
        they are made durable with the next batch (:meth:`ReceiptBatches.later`), before
        anything the hub sends next. A power cut in between only has those facts said
        once more."""
        fact_ids = list(factsmod.fact_map(receipts))
        if fact_ids:
            self.ledger.mark_said(task_id, fact_ids, sync=False)
            self.commits.later()

    # ------------------------------------------------------------------ one call
    async def call(self, call: ToolCall, ctx: CallContext) -> Receipt:
        """decide → run on the package host → receipt, guarded like the brain's hooks."""
        host = self.host
        if host is None:
            raise GatewayError("gateway.no_host")

        async def execute(args: dict[str, Any]) -> ToolOutcome:
            return await host.call(call.package, call.tool, args, task_id=call.task_id)

        return await guarded(self, call, ctx, execute)

    # ------------------------------------------------------------------ consent
    async def answer(
        self,
        approval: consent_pb2.Approval,
        *,
        device_id: str,
        sign_pk: bytes,
        scopes: tuple[str, ...] | list[str],
        trace_id: str = "",
        profile: str = "",
        revoked: bool = False,
    ) -> tuple[Answer, Receipt | None]:
        """A phone's signed answer: refuse, cancel, or execute exactly once. Answers to
        payment cards go to the payment authority (``profile``/``revoked``: the device's)."""
        self._alive()
        if self.payments is not None:
            paid = await self.payments.answer(
                approval,
                device_id=device_id,
                sign_pk=sign_pk,
                scopes=scopes,
                profile=profile,
                revoked=revoked,
                trace_id=trace_id,
            )
            if paid is not None:
                return paid
        ans = self.consent.answer(approval, device_id=device_id, sign_pk=sign_pk, scopes=scopes)
        card = ans.card
        self.audit.append(
            "approval",
            {
                "card_id": card.card_id if card else "",
                "device": device_id,
                "outcome": ans.outcome,
                "reason": ans.reason,
            },
            trace_id=trace_id,
        )
        if card is None:
            return ans, None
        if ans.outcome == "refused":
            receipt = None
            if ans.reason == EXPIRED_NOW:
                receipt = await self._cancel(card, "expired", "the card expired", trace_id)
            else:
                await self.update_card(card, consent_pb2.REFUSED, ans.reason)
            return ans, receipt
        if ans.outcome == "denied":
            return ans, await self._cancel(card, "denied", "denied by the owner", trace_id)
        assert ans.token is not None
        return ans, await self._execute(card, ans.token, trace_id)

    async def _execute(self, card: Card, token: str, trace_id: str) -> Receipt:
        call = ToolCall(card.package, card.tool, card.args, card.call_id, card.task_id)
        ctx_d = card.context
        ctx = CallContext(
            owner=card.owner,
            scope=ctx_d.get("scope", "owner"),
            session_id=ctx_d.get("session_id", ""),
            run_id=ctx_d.get("run_id", ""),
            trace_id=trace_id or ctx_d.get("trace_id", ""),
        )
        d = Decision(
            "allow",
            "approved by the owner",
            card.args,
            card.effect,
            card.target,
            card.action_hash.hex(),
            card=card,
        )
        if not self.consent.consume_token(token, card):
            raise GatewayError("consent.token_spent", card=card.card_id)
        m = self.catalog.get(card.package)
        spec = m.tool(card.tool) if m else None
        problem = ""
        if card.effect == "spend":
            problem = "payments go through the payment authority"
        elif m is None or spec is None or self.host is None:
            problem = "the package is not available"
        elif spec.effect_for(card.args) != card.effect:
            problem = "the action changed"
        elif ctx.scope not in (spec.scopes if spec.scopes is not None else m.scopes):
            problem = f"scope {ctx.scope!r} may no longer use {m.name}.{spec.name}"
        else:
            ran = ("succeeded", "partial", None)
            if spec.retry == "forbidden" and (
                self.ledger.same_action(card.task_id, card.action_hash.hex(), card.call_id, ran)
                is not None
            ):
                problem = "the same action already ran in this task"
        if problem:
            self.consent.set_state(card.card_id, "voided", problem)
            r = self._stamp(gateway_receipt("cancelled", problem), call, d, revision=1)
            r = await self._store(card.task_id, card.call_id, r, trace_id)
            await self.update_card(card, consent_pb2.VOIDED, problem, r)
            return self._facts(r)
        assert self.host is not None
        outcome = await self.host.call(card.package, card.tool, card.args, task_id=card.task_id)
        r = await self.receipt(call, ctx, d, outcome, revision=1)
        self.consent.set_state(card.card_id, "executed")
        if card.effect == "send" and r.status == "succeeded":
            self.consent.remember_send(card.owner, card.target, card.task_type)
        await self.update_card(card, consent_pb2.EXECUTED, "", r)
        if self.on_result is not None:
            await self.on_result(r)
        return r

    async def _cancel(self, card: Card, state: str, reason: str, trace_id: str) -> Receipt:
        call = ToolCall(card.package, card.tool, card.args, card.call_id, card.task_id)
        d = Decision("block", reason, card.args, card.effect, card.target, card.action_hash.hex())
        if state != "expired":
            self.consent.set_state(card.card_id, state, reason)
        r = self._stamp(gateway_receipt("cancelled", reason), call, d, revision=1)
        r = self._facts(await self._store(card.task_id, card.call_id, r, trace_id))
        states = {
            "denied": consent_pb2.DENIED,
            "expired": consent_pb2.EXPIRED,
            "voided": consent_pb2.VOIDED,
        }
        await self.update_card(card, states.get(state, consent_pb2.VOIDED), reason, r)
        if self.on_result is not None:
            await self.on_result(r)
        return r

    async def expire_cards(self) -> list[Receipt]:
        """Cancel every card past its expiry (the hub runs this periodically)."""
        self._alive()
        out: list[Receipt] = []
        for c in self.consent.expire_due():
            if c.effect == "spend" and self.payments is not None:
                r = await self.payments.card_expired(c)
                if r is not None:
                    out.append(r)
            else:
                out.append(await self._cancel(c, "expired", "the card expired", ""))
        return out

    async def update_card(
        self, card: Card, state: int, reason: str, r: Receipt | None = None
    ) -> None:
        """Tell the phone what became of ``card`` (``consent_pb2.CardState``), with the
        receipt's status and summary; a phone out of reach gets it on its next sync."""
        if self.courier is None:
            return
        update = consent_pb2.CardUpdate(
            card_id=card.card_id,
            state=state,  # type: ignore[arg-type]
            reason=reason[:300],
            status=r.status if r else "",
            summary=(r.summary if r else "")[:600],
            at_ms=now_ms(),
        )
        try:
            await self.courier.update(update, card)
        except Exception:
            log.exception("card update %s not delivered now", card.card_id)


Execute = Callable[[dict[str, Any]], Awaitable[ToolOutcome]]


async def guarded(gateway: Gateway, call: ToolCall, ctx: CallContext, execute: Execute) -> Receipt:
    """The one path a tool call takes (the brain's hooks do the same around MCP toolsets).

    Gateway unreachable before execution → ``not_executed`` ("not executed"), the tool never
    runs; unreachable after → ``unknown`` with "result not verified" — never assumed success.
    """
    base = Receipt(
        status="not_executed",
        package=call.package,
        tool=call.tool,
        task_id=call.task_id,
        call_id=call.call_id,
    )
    try:
        async with asyncio.timeout(DECIDE_TIMEOUT_S):
            decision = await gateway.decide(call, ctx)
    except Exception as exc:
        log.warning("gateway unreachable before %s.%s: %s", call.package, call.tool, exc)
        r = replace(
            base, error="not executed: the gateway could not be reached", unknowns=("not executed",)
        )
        return replace(r, summary=factsmod.summary(r))
    if not decision.runs:
        assert decision.receipt is not None
        return decision.receipt
    outcome = await execute(decision.args)
    try:
        async with asyncio.timeout(RECEIPT_TIMEOUT_S):
            return await gateway.receipt(call, ctx, decision, outcome)
    except Exception as exc:
        log.warning("gateway unreachable after %s.%s: %s", call.package, call.tool, exc)
        r = replace(
            base,
            status="unknown",
            error="result not verified",
            unknowns=("result not verified",),
            effect=decision.effect,
            target=decision.target,
        )
        return replace(r, summary=factsmod.summary(r))
