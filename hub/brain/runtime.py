"""What both brains share: the task store, gateway steps, consent continuation, events.

A *step* is one gateway call of a task, under a key unique in the task (``recall``,
``send``, or the model's tool-call position). Its call id is fixed the first time the step
starts and persisted, so a step re-issued after a restart reaches the gateway with the same
(task id, call id) and gets the recorded decision and receipt back instead of running the
tool again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from hub.brain.base import BRAIN_PACKAGE, EventSink, TaskEvent, brain_manifest
from hub.brain.tasks import Step, TaskRecord, TaskStore
from hub.capabilities.host import ToolOutcome
from hub.capabilities.manifest import Manifest
from hub.gateway import CallContext, Gateway, Receipt, ToolCall
from hub.gateway.facts import facts_of, join_sentences
from hub.gateway.gateway import guarded

log = logging.getLogger(__name__)

LOOKUP = "#lookup"
BAD = frozenset({"failed", "unknown", "cancelled", "rejected", "not_executed", "running"})
"""receipt statuses that leave a task ``failed`` when they are an action's last word"""


class LocalTools(Protocol):
    def run(self, tool: str, args: dict[str, Any]) -> ToolOutcome: ...


@dataclass
class BrainCore:
    """The task store, the gateway and the event sink one brain works with."""

    gateway: Gateway
    store: TaskStore
    on_event: EventSink | None = None
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    local: dict[str, LocalTools] = field(default_factory=dict)
    """in-hub packages (``lists``): package name → ``run(tool, args)``, declared to the
    gateway with :meth:`add_local`; their calls are decided and audited like any other"""

    def __post_init__(self) -> None:
        # the brain's own tools are declared to the gateway like any package's
        self.gateway.catalog.setdefault(BRAIN_PACKAGE, brain_manifest())

    def add_local(self, manifest: Manifest, tools: LocalTools) -> None:
        """Declare an in-hub package to the gateway and run its tools here."""
        self.gateway.catalog.setdefault(manifest.name, manifest)
        self.local[manifest.name] = tools

    def lock(self, task_id: str) -> asyncio.Lock:
        return self._locks.setdefault(task_id, asyncio.Lock())

    @staticmethod
    def context(task: TaskRecord) -> CallContext:
        return CallContext(
            owner=task.owner,
            scope=task.scope,
            session_id=task.session_id,
            run_id=task.run_id,
            trace_id=task.trace_id,
            scheduled=bool(task.spec.get("scheduled", False)),
        )

    # ------------------------------------------------------------------ steps
    async def step(
        self,
        task: TaskRecord,
        key: str,
        package: str,
        tool: str,
        args: dict[str, Any],
        *,
        lookup: bool = False,
    ) -> Receipt:
        """Run one step through the gateway (``decide`` → host → ``receipt``), once.

        A step with a settled receipt returns it without calling anything. A step that was
        started before (a restart) is re-issued with its recorded call id and arguments —
        ``args`` is then ignored — so the gateway ledger answers it without a second run.
        ``lookup``: a read whose facts are not the task's (finding a device before switching
        it): recorded in the ledger under ``<task id>#lookup``, so the reply checker does not
        append them to the report."""
        ledger = task.task_id + LOOKUP if lookup else task.task_id
        done = self.store.step(task.task_id, key)
        if done is not None and done.receipt is not None and done.status != "waiting":
            return Receipt.from_dict(done.receipt)
        if done is None:
            done = self.store.start_step(task.task_id, key, f"{task.task_id}.{key}", args)
        call = ToolCall(package, tool, dict(done.args), done.call_id, ledger)
        if done.status == "waiting":
            # the card may have been answered while we were away: the ledger knows
            recorded = self.recorded(ledger, done.call_id)
            if recorded is not None and recorded.status != "waiting":
                self.store.finish_step(task.task_id, key, recorded.to_dict())
                return recorded
        tools = self.local.get(package)
        if tools is not None:  # an in-hub package: decided and recorded by the gateway

            async def execute(a: dict[str, Any]) -> ToolOutcome:
                assert tools is not None
                return tools.run(tool, a)

            receipt = await guarded(self.gateway, call, self.context(task), execute)
        else:
            receipt = await self.gateway.call(call, self.context(task))
        self.store.finish_step(task.task_id, key, receipt.to_dict())
        return receipt

    def recorded(self, task_id: str, call_id: str) -> Receipt | None:
        row = self.gateway.ledger.call(task_id, call_id)
        if row is None or row.receipt is None:
            return None
        return Receipt.from_dict(row.receipt)

    def waiting_steps(self, task_id: str) -> list[str]:
        """Steps waiting for the owner: a card (``waiting``) or an auto-payment inside its
        undo window (``running``, waiting for ``undo``)."""
        return _waiting_steps(self.store.steps(task_id))

    def receipts(self, task_id: str) -> list[Receipt]:
        return _receipts(self.store.steps(task_id))

    # ------------------------------------------------------------------ reports
    async def report(self, task_id: str, text: str, *, voice: bool = False, lang: str = "") -> str:
        """``text`` checked against the task's receipts: contradicting sentences removed,
        facts left out appended in ``lang`` (default: the task's ``spec["lang"]``, else
        English) by the gateway's checker. Facts count as said only once the device ACKs
        (``gateway.delivered``)."""
        lang = lang or self.lang_of(task_id)
        checked = await self.gateway.observe(task_id, text, voice=voice, lang=lang)
        if checked.removed:
            log.info(
                "task %s: %d sentence(s) removed by the checker", task_id, len(checked.removed)
            )
        return checked.text

    def lang_of(self, task_id: str) -> str:
        """The language of a task's replies (its ``spec["lang"]``; ``en`` by default)."""
        return _lang(self.store.get(task_id))

    async def emit(
        self, task: TaskRecord, text: str = "", *, receipts: Sequence[Receipt] | None = None
    ) -> None:
        """The task's event (``receipts``: its receipts when the caller knows them, e.g. none
        for a task answered without a step; else they are read)."""
        if self.on_event is None:
            return
        event = TaskEvent(
            task_id=task.task_id,
            trace_id=task.trace_id,
            state=task.state,
            title=task.title,
            text=text,
            parent_id=task.parent_id,
            session_id=task.session_id,
            device_id=task.device_id,
            owner=task.owner,
            receipts=tuple(self.receipts(task.task_id) if receipts is None else receipts),
        )
        try:
            await self.on_event(event)
        except Exception:
            log.exception("task %s: event not delivered", task.task_id)

    async def settle(self, task_id: str, *, text: str = "") -> TaskRecord:
        """After the last step: ``waiting_for_consent`` while a card is open; else
        ``verifying`` and then ``done``, or ``failed`` if the last receipt of any action
        (package, tool, target) failed, is unknown, or was cancelled or refused. The report
        (``text`` or one built from the receipts) is checked and sent as a task event."""
        task = self.store.require(task_id)
        if task.finished:
            return task
        lang = _lang(task)  # read once: a turn's settle is on the hub's loop
        steps = self.store.steps(task_id)
        waiting = _waiting_steps(steps)
        if waiting:
            task = self.store.move(task_id, "waiting_for_consent", waiting_for=",".join(waiting))
            await self.emit(task, await self.report(task_id, text, lang=lang) if text else "")
            return task
        self.store.walk(task_id, "verifying")
        receipts = _receipts(steps)
        # the brain's own calls (a delegation still running) do not fail the task
        last = {(r.package, r.tool, r.target): r for r in receipts if r.package != BRAIN_PACKAGE}
        bad = [r for r in last.values() if r.status in BAD]
        fallback = _default_report(receipts, lang)
        report = await self.report(task_id, text or fallback, lang=lang)
        if not report.strip():  # the checker removed every sentence: say what receipts say
            report = await self.report(task_id, fallback, lang=lang)
        task = self.store.move(
            task_id, "failed" if bad else "done", waiting_for="", result={"report": report}
        )
        await self.emit(task, report)
        return task

    # ------------------------------------------------------------------ consent
    async def receipt_arrived(self, receipt: Receipt) -> TaskRecord | None:
        """A card was answered (executed, denied, expired or voided): finish the step that
        was waiting and settle its task."""
        async with self.lock(receipt.task_id):
            step = self.store.step_for_call(receipt.task_id, receipt.call_id)
            if step is None:
                return None
            self.store.finish_step(receipt.task_id, step.step, receipt.to_dict())
            task = self.store.get(receipt.task_id)
            if task is None or task.finished:
                return task
            if task.state == "waiting_for_consent" and not self.waiting_steps(task.task_id):
                self.store.move(task.task_id, "acting", "the owner answered")
                return await self.settle(task.task_id)
            return task


def _lang(task: TaskRecord | None) -> str:
    """A task's reply language (its ``spec["lang"]``; ``en`` by default)."""
    return str((task.spec if task is not None else {}).get("lang") or "en")


def _waiting_steps(steps: Sequence[Step]) -> list[str]:
    return [s.step for s in steps if waiting(s.status, s.receipt)]


def _receipts(steps: Sequence[Step]) -> list[Receipt]:
    return [Receipt.from_dict(s.receipt) for s in steps if s.receipt]


def waiting(status: str | None, receipt: dict[str, Any] | None) -> bool:
    """Whether a step with this receipt still waits for the owner."""
    if status == "waiting":
        return True
    nxt = (receipt or {}).get("next") or {}
    return status == "running" and isinstance(nxt, dict) and nxt.get("waiting_for") == "undo"


def _default_report(receipts: list[Receipt], lang: str = "en") -> str:
    # the actions' facts (a payment, a send), not the look-ups that prepared them (a menu,
    # a cart), when the task has both
    acts = [r for r in receipts if r.effect not in ("", "observe", "workspace")]
    texts = [f.text for r in (acts or receipts) for f in facts_of(r, lang)[:1]]
    if texts:
        return join_sentences(texts)
    from hub.brain.replies import say

    return say("report.no_tool", lang)
