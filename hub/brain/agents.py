"""``PydanticBrain``: an LLM main agent that converses and delegates, and background
sub-agents that act — every tool call of every agent through the capability gateway.

The platform, not the library, owns what must be exact (``../shared/DEPENDENCIES.md``):

- **gateway hooks**: :class:`GatewayHooks` (a pydantic-ai capability) runs
  ``before_tool_execute`` → :meth:`Gateway.decide` and ``after_tool_execute`` →
  :meth:`Gateway.receipt` around every call. ``block`` / ``confirm`` / an already-decided
  call never run: the hook hands the model the receipt instead (``SkipToolExecution``). A
  ``waiting`` receipt is just a result — the agent goes on with its other tools; the card is
  on the owner's phone and the gateway executes the call exactly once after a signed
  approval (:meth:`PydanticBrain.on_receipt` finishes the step).
- **one strict budget**: 120 tool calls per run (a turn and every sub-agent it started),
  counted in the hook before anything runs and persisted in the task store (not
  ``UsageLimits``, which undercounts running delegate calls). Call 121 is refused; an agent
  that keeps calling after the refusal is stopped. Every 20 calls the agent gets a
  milestone prompt.
- **delegation**: the main agent holds no execution tool — only ``memory`` observe tools,
  ``delegate`` and ``steer``. ``delegate`` starts a background sub-agent and returns at once;
  at most 3 sub-agents run at a time on this hub (a 4th waits, ``admitted``, for a slot);
  depth ≤ 2 (main → sub-agent → sub-sub-agent; the last gets no ``delegate`` tool and is
  refused if it calls it anyway).
- **local commands**: sub-agents in the owner's scope get ``brain__run_intent(command)``
  when the hub has an intent engine (:class:`hub.brain.local.LocalCommands`): a short
  command sentence ("turn on the kitchen light", "把牛奶加到购物清单") that the engine must
  match with ``score >= LOCAL_CONFIDENCE`` to one of
  :data:`~hub.brain.local.LOCAL_TOOL_INTENTS` (device control, timers, lists, time and
  date, recall, timeline — never a payment, a message, remember/forget); the rule brain
  then runs it as a turn of its own whose every step is a gateway call with the gateway's
  rules. The model is untrusted: a sub-agent that has read untrusted content gets
  ``rejected`` (only the owner's own words may start a local command then); a command whose
  reply carries the owner's data taints the sub-agent; a remote model sees its reply only
  if ``brain.run_intent`` is declared cloud-eligible (like any tool: default ``high``).
- **steering**: the main agent sees the session's active background tasks; the owner's
  follow-up goes to one with ``steer`` — into the running agent's next model request
  (``AgentRun.enqueue``), or into the queued one's first prompt.
- **untrusted content**: tool results, memory hits and context snippets enter the context
  only inside fences (:mod:`hub.brain.fences`). Once an agent has read untrusted content
  (any tool result with content, or a context block with snippets beyond the owner's profile
  and time zone), every later call it makes — and every sub-agent it starts — has
  ``owner_requested`` forced to false: fenced text can make the model *propose* an action,
  never skip the owner's confirmation.
- **cloud eligibility**: the turn's endpoint is chosen by :func:`hub.brain.providers.route`
  from the provenance of the words and the context block; a remote agent gets a tool
  result's content only if that content is cloud-eligible (else the status alone).
- **bounded calls**: every model call carries the endpoint's ``max_tokens`` and ends at its
  ``timeout_s`` (:mod:`hub.brain.providers`; defaults 1024 tokens, 60 s): a call past it
  fails its turn with a reply in the turn's language (:mod:`hub.brain.llm_texts`), or its
  sub-agent's task with a report; the HTTP request is cancelled, nothing keeps running.
- **persistence**: tasks, steps, message histories and the run budget are in the task store;
  :meth:`PydanticBrain.resume` continues unfinished work after a restart without running any
  completed call again (the ledger answers re-issued calls by their call id).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pydantic_ai import Agent, RunContext, SkipToolExecution, Tool
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ModelRequestTimeout
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    SystemPromptPart,
    ToolCallPart,
)
from pydantic_ai.models import Model
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import UsageLimits

from hub.brain.base import (
    BRAIN_PACKAGE,
    Brain,
    EventSink,
    Outbox,
    ReplyChunk,
    Turn,
    brain_receipt,
)
from hub.brain.cloud import Provenance, blockers, eligible, receipt_provenance
from hub.brain.errors import BrainError
from hub.brain.fences import RULES, fence, render_receipt
from hub.brain.llm_texts import lang, say
from hub.brain.ordering import PAYMENT_KINDS, PaymentDesk, parse_order
from hub.brain.providers import Endpoint, ProviderConfig, ProviderStore, route
from hub.brain.runtime import BrainCore, waiting
from hub.brain.tasks import TaskRecord, TaskStore
from hub.capabilities.host import ToolOutcome
from hub.gateway import Decision, Gateway, Receipt, ToolCall
from hub.gateway.facts import check_reply, fact_map
from hub.gateway.gateway import DECIDE_TIMEOUT_S, OWNER_REQUESTED, RECEIPT_TIMEOUT_S
from hub.memory.context import ShortContext, short_context
from sync.tasks import TaskOwner

if TYPE_CHECKING:
    from hub.brain.local import LocalCommands

log = logging.getLogger(__name__)

TOOL_BUDGET = 120
MILESTONE_EVERY = 20
MAX_CONCURRENT = 3
MAX_DEPTH = 2
MAX_REQUESTS = 2 * TOOL_BUDGET + 10
"""model requests one agent may make (a backstop; the tool budget ends runs first)"""
AFTER_EXHAUSTION = 1
"""model requests an agent gets after its budget ran out, to write its report"""
SEP = "__"
"""model-visible tool name = package + SEP + tool"""
CONSENT_EFFECTS = frozenset({"owner_data", "account", "delete", "send", "physical"})
UNTAINTING_CONTEXT = frozenset({"profile", "timezone"})
"""context sources whose snippets do not taint an agent (the owner's generated core profile
and the platform's time zone); any other snippet does"""
WAIT_MODEL = "an eligible model"
MAIN_LEDGER = "#main"
"""the main agent's calls are recorded under ``<turn id>#main`` so their lookups do not
become facts appended to the spoken reply"""

MAIN_PROMPT = (
    """You are Yimi, the owner's personal assistant, speaking on their devices.
You converse and you delegate; you never act yourself.
- Answer briefly, in the owner's language. If something must be done (send, switch, change,
  remember, look up in packages), say in one short sentence that you will do it, and call
  `brain__delegate` once per independent job with precise instructions that quote the
  owner's own words. Do not claim a job is done: a background task reports later.
- You may read memory with the memory tools to answer questions.
- If the owner adds to or corrects a job that is still running (listed below), call
  `brain__steer` with that task id and their words instead of delegating a new job.
"""
    + RULES
)

SUB_PROMPT = (
    """You are a background worker of the assistant Yimi. Do the job below with
your tools, then reply with a short report for the owner of what was done and what is still
waiting. Facts must come from tool receipts; never claim an effect a receipt does not show.
- A receipt with status `waiting` means the owner must approve on their phone: do not retry
  it, go on with the rest of the job and mention it in your report.
- `rejected` means the platform refused: do not retry it.
- Set `owner_requested` to true only when the owner's own words asked for exactly that
  action.
- Tool calls are budgeted for the whole run; stop when the job is done.
- For a simple command the hub can do itself (switch a device, set a timer, add to a list,
  the time or date, what is remembered), `brain__run_intent` with one short command
  sentence in the owner's language is the quickest way, if you have it.
"""
    + RULES
)


def _short_hash(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:10]


# ---------------------------------------------------------------- per-agent state
@dataclass
class AgentDeps:
    """What one agent's tools and hooks know (``RunContext.deps``)."""

    brain: PydanticBrain
    task: TaskRecord
    config: ProviderConfig
    endpoint: Endpoint
    depth: int
    tools: dict[str, tuple[str, str]]
    """model tool name → (package, tool)"""
    tainted: bool = False
    ledger_task: str = ""
    """gateway task id for this agent's calls (default: the task id)"""
    pending: dict[str, tuple[ToolCall, Decision]] = field(default_factory=dict)
    exhausted: bool = False
    utterance: str = ""
    provenance: tuple[Provenance, ...] = ()
    """what this agent's context came from (sub-agents inherit it)"""

    @property
    def remote(self) -> bool:
        return not self.endpoint.is_local

    @property
    def ledger_id(self) -> str:
        return self.ledger_task or self.task.task_id


def _call_id(ctx: RunContext[AgentDeps], tool_call_id: str) -> str:
    """A call id stable across a restart: the position of the model response that made
    the call in the message history, plus the model's own id (models may reuse ids)."""
    for i in range(len(ctx.messages) - 1, -1, -1):
        m = ctx.messages[i]
        if isinstance(m, ModelResponse) and any(
            isinstance(p, ToolCallPart) and p.tool_call_id == tool_call_id for p in m.parts
        ):
            return f"m{i}.{tool_call_id}"[:120]
    return f"m?.{tool_call_id}"[:120]


def _not_run(call: ToolCall, why: str) -> Receipt:
    return Receipt(
        status="not_executed",
        package=call.package,
        tool=call.tool,
        task_id=call.task_id,
        call_id=call.call_id,
        error=why,
    )


class GatewayHooks(AbstractCapability[AgentDeps]):
    """Every tool call of every agent: budget → gateway decide → run → gateway receipt."""

    async def before_tool_execute(
        self,
        ctx: RunContext[AgentDeps],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
    ) -> dict[str, Any]:
        deps = ctx.deps
        brain = deps.brain
        target = deps.tools.get(call.tool_name)
        if target is None:
            raise SkipToolExecution(f"no tool {call.tool_name}")
        package, tool = target
        call_id = _call_id(ctx, call.tool_call_id)
        model_args = dict(args)
        if deps.tainted or deps.task.scope != "owner":
            model_args[OWNER_REQUESTED] = False
        tc = ToolCall(package, tool, model_args, call_id, deps.ledger_id)
        recorded = brain.core.recorded(deps.ledger_id, call_id)
        if recorded is not None:  # re-issued after a restart: answered from the ledger
            raise SkipToolExecution(self.view(deps, recorded))
        used = brain.store.take_budget(deps.task.run_id, brain.budget)
        if used is None:
            deps.exhausted = True
            log.info("run %s: tool budget of %d spent", deps.task.run_id, brain.budget)
            receipt = _not_run(
                tc, f"the run's budget of {brain.budget} tool calls is spent: not executed"
            )
            brain.store.start_step(deps.task.task_id, call_id, call_id, model_args)
            brain.store.finish_step(deps.task.task_id, call_id, receipt.to_dict())
            raise SkipToolExecution(
                render_receipt(receipt) + "\nStop calling tools and write your report now."
            )
        if used % brain.milestone_every == 0:
            ctx.enqueue(
                SystemPromptPart(
                    f"Milestone: {used} of {brain.budget} tool calls of this run are used. "
                    "Check what is done against the job; finish and report if it is done; "
                    "never repeat a call that already succeeded."
                )
            )
        brain.store.start_step(deps.task.task_id, call_id, call_id, model_args)
        try:
            # a checkout of an ordering turn: the intent the platform opened from the
            # owner's words goes to this sub-agent (never opened from the model's call)
            brain.desk.before_call(brain.store, deps.task, tc, brain.core.context(deps.task))
            async with asyncio.timeout(DECIDE_TIMEOUT_S):
                decision = await brain.gateway.decide(tc, brain.core.context(deps.task))
        except Exception as exc:
            log.warning("gateway unreachable before %s.%s: %s", package, tool, exc)
            receipt = _not_run(tc, "not executed: the gateway could not be reached")
            brain.store.finish_step(deps.task.task_id, call_id, receipt.to_dict())
            raise SkipToolExecution(self.view(deps, receipt)) from None
        if not decision.runs:
            assert decision.receipt is not None
            brain.store.finish_step(deps.task.task_id, call_id, decision.receipt.to_dict())
            raise SkipToolExecution(self.view(deps, decision.receipt))
        if decision.effect not in ("observe", "workspace") and deps.task.state == "thinking":
            deps.task = brain.store.move(deps.task.task_id, "acting")
        deps.pending[call.tool_call_id] = (tc, decision)
        return dict(decision.args)

    async def on_tool_execute_error(
        self,
        ctx: RunContext[AgentDeps],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        error: Exception,
    ) -> Any:
        log.warning("tool %s raised %s: %s", call.tool_name, type(error).__name__, error)
        return ToolOutcome(text=f"{type(error).__name__}", is_error=True, error_code="DISCONNECTED")

    async def after_tool_execute(
        self,
        ctx: RunContext[AgentDeps],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        result: Any,
    ) -> Any:
        deps = ctx.deps
        brain = deps.brain
        tc, decision = deps.pending.pop(call.tool_call_id)
        if isinstance(result, ToolOutcome):
            outcome = result
        elif isinstance(result, dict):
            outcome = ToolOutcome(structured=result)
        else:
            outcome = ToolOutcome(text=str(result)[:2000])
        try:
            async with asyncio.timeout(RECEIPT_TIMEOUT_S):
                receipt = await brain.gateway.receipt(
                    tc, brain.core.context(deps.task), decision, outcome
                )
        except Exception as exc:
            log.warning("gateway unreachable after %s.%s: %s", tc.package, tc.tool, exc)
            receipt = replace(
                _not_run(tc, "result not verified"),
                status="unknown",
                unknowns=("result not verified",),
            )
        brain.store.finish_step(deps.task.task_id, tc.call_id, receipt.to_dict())
        return self.view(deps, receipt)

    @staticmethod
    def view(deps: AgentDeps, receipt: Receipt) -> str:
        """The receipt as this agent may read it; reading content taints the agent."""
        prov = receipt_provenance(receipt, deps.config.tool_levels)
        show = not deps.remote or eligible([prov], deps.config.cloud_sources)
        text = render_receipt(
            receipt,
            show_content=show,
            withheld="too sensitive for the remote model " + deps.endpoint.model,
        )
        if show and receipt.package != BRAIN_PACKAGE and "<untrusted" in text:
            deps.tainted = True
        return text


# ---------------------------------------------------------------- the brain
@dataclass
class _Live:
    """A sub-agent that is running (steering goes into its next request)."""

    run: Any
    deps: AgentDeps


class PydanticBrain(Brain):
    """The LLM brain over OpenAI-compatible endpoints (see the module doc)."""

    kind = "llm"

    def __init__(
        self,
        gateway: Gateway,
        store: TaskStore,
        providers: ProviderStore,
        *,
        on_event: EventSink | None = None,
        budget: int = TOOL_BUDGET,
        milestone_every: int = MILESTONE_EVERY,
        max_concurrent: int = MAX_CONCURRENT,
        max_depth: int = MAX_DEPTH,
        local: LocalCommands | None = None,
    ) -> None:
        self.gateway = gateway
        self.store = store
        self.providers = providers
        self.local = local
        """the intent engine and the rule brain (``brain__run_intent``), if the hub has them"""
        self.core = BrainCore(gateway, store, on_event)
        self.desk = PaymentDesk(gateway)
        self.budget = budget
        self.milestone_every = milestone_every
        self.max_depth = max_depth
        self.slots = asyncio.Semaphore(max_concurrent)
        self.config = providers.current()
        self._models: dict[tuple[int, str, str], Model] = {}
        self._schemas: dict[str, dict[str, dict[str, Any]]] = {}
        self._live: dict[str, _Live] = {}
        self._owner = TaskOwner("brain")
        self._agent: Agent[AgentDeps, str] = Agent(
            deps_type=AgentDeps, output_type=str, capabilities=[GatewayHooks()], retries=2
        )
        self.running = 0
        self.running_peak = 0
        """the most sub-agents that ran at once (tests, bench)"""

    async def close(self) -> None:
        await self._owner.close()

    # ------------------------------------------------------------------ config
    def between_turns(self) -> ProviderConfig:
        """Apply a confirmed model change, if any (never in the middle of a turn)."""
        self.providers.apply_pending()
        current = self.providers.current()
        if current.version != self.config.version:
            log.info("model configuration version %d in use from this turn", current.version)
            self.config = current
            self._models.clear()
            self._owner.spawn(self.retry_waiting(), "retry-waiting")
        return self.config

    async def retry_waiting(self) -> list[str]:
        """Start the turns and sub-agents that wait for an eligible model, if the current
        configuration now has one; turns answer through a task event."""
        config = self.config
        started = []
        for task in self.store.unfinished():
            if task.waiting_for != WAIT_MODEL:
                continue
            if task.kind == "subagent":
                self.store.move(task.task_id, task.state, waiting_for="")
                self._start(self.store.require(task.task_id), config)
                started.append(task.task_id)
                continue
            parked = task.spec.get("waiting") or {}
            turn, ctx_block = _unpark(task, parked)
            items = [Provenance(turn.sensitivity, turn.text_sources, "the owner's words")]
            if ctx_block is not None:
                items.append(Provenance(ctx_block.sensitivity, ctx_block.sources, "context"))
            endpoint, _ = route(config, "brain", items)
            if endpoint is None:
                continue
            self.store.move(task.task_id, task.state, waiting_for="")
            self._owner.spawn(
                self._main(task, turn, config, endpoint, ctx_block, items), f"turn:{task.task_id}"
            )
            started.append(task.task_id)
        return started

    def model(self, endpoint: Endpoint, config: ProviderConfig) -> Model:
        key = (config.version, endpoint.base_url, endpoint.model)
        if key not in self._models:
            self._models[key] = self.providers.chat_model(endpoint)
        return self._models[key]

    # ------------------------------------------------------------------ tools
    async def _schema(self, package: str) -> dict[str, dict[str, Any]]:
        if package not in self._schemas:
            host = self.gateway.host
            if host is None:
                raise BrainError("gateway.no_host")
            self._schemas[package] = await host.list_tools(package)
        return self._schemas[package]

    async def toolset(
        self, task: TaskRecord, depth: int
    ) -> tuple[FunctionToolset[AgentDeps], dict[str, tuple[str, str]]]:
        """The tools an agent at ``depth`` may see for this scope (the main agent: memory
        look-ups, delegate, steer; sub-agents: every package tool the scope allows, and
        delegate while depth < max)."""
        tools: list[Tool[AgentDeps]] = []
        names: dict[str, tuple[str, str]] = {}
        for pkg, m in sorted(self.gateway.catalog.items()):
            if pkg == BRAIN_PACKAGE:
                continue
            for tname, spec in sorted(m.tools.items()):
                scopes = spec.scopes if spec.scopes is not None else m.scopes
                if task.scope not in scopes:
                    continue
                if depth == 0 and not (pkg == "memory" and spec.effect == "observe"):
                    continue
                try:
                    schema = dict((await self._schema(pkg)).get(tname) or {})
                except Exception as exc:
                    log.warning("package %s lists no tools: %s", pkg, exc)
                    break
                if not schema:
                    continue
                schema.setdefault("type", "object")
                effects = spec.effects
                if effects & CONSENT_EFFECTS:
                    props = dict(schema.get("properties", {}))
                    props[OWNER_REQUESTED] = {
                        "type": "boolean",
                        "description": "true only if the owner's own words asked for exactly "
                        "this action",
                    }
                    schema["properties"] = props
                for trusted in spec.trusted_args:
                    schema.get("properties", {}).pop(trusted, None)
                name = f"{pkg}{SEP}{tname}"
                desc = f"{m.description} Tool {tname}; effect: {', '.join(sorted(effects))}."
                tools.append(
                    Tool.from_schema(_package_tool(pkg, tname), name, desc, schema, takes_ctx=True)
                )
                names[name] = (pkg, tname)
        if depth < self.max_depth:
            tools.append(
                Tool.from_schema(
                    self._delegate,
                    f"{BRAIN_PACKAGE}{SEP}delegate",
                    "Start a background sub-agent for one job; returns its task id at once.",
                    {
                        "type": "object",
                        "properties": {
                            "instructions": {"type": "string"},
                            "title": {"type": "string", "description": "a few words"},
                        },
                        "required": ["instructions"],
                    },
                    takes_ctx=True,
                )
            )
            names[f"{BRAIN_PACKAGE}{SEP}delegate"] = (BRAIN_PACKAGE, "delegate")
        if depth > 0 and self.local is not None and task.scope == "owner":
            tools.append(
                Tool.from_schema(
                    self._run_intent,
                    f"{BRAIN_PACKAGE}{SEP}run_intent",
                    "Run one simple command on the hub's own assistant at once: switch a "
                    "device, a timer, a shopping/todo list, the time or date, what is "
                    "remembered, the timeline. One short command sentence in the owner's "
                    "language; returns the assistant's reply.",
                    {
                        "type": "object",
                        "properties": {
                            "command": {
                                "type": "string",
                                "description": "e.g. 'turn on the kitchen light', '打开厨房灯'",
                            }
                        },
                        "required": ["command"],
                    },
                    takes_ctx=True,
                )
            )
            names[f"{BRAIN_PACKAGE}{SEP}run_intent"] = (BRAIN_PACKAGE, "run_intent")
        if depth == 0:
            tools.append(
                Tool.from_schema(
                    self._steer,
                    f"{BRAIN_PACKAGE}{SEP}steer",
                    "Pass the owner's follow-up to a running background task.",
                    {
                        "type": "object",
                        "properties": {
                            "task_id": {"type": "string"},
                            "message": {"type": "string"},
                        },
                        "required": ["task_id", "message"],
                    },
                    takes_ctx=True,
                )
            )
            names[f"{BRAIN_PACKAGE}{SEP}steer"] = (BRAIN_PACKAGE, "steer")
        return FunctionToolset(tools), names

    # ------------------------------------------------------------------ brain tools
    async def _delegate(
        self, ctx: RunContext[AgentDeps], instructions: str = "", title: str = "", **_: Any
    ) -> dict[str, Any]:
        parent = ctx.deps
        if parent.depth + 1 > self.max_depth:
            from hub.capabilities.package_sdk import receipt

            return receipt(
                "failed", error=("DEPTH", f"delegation depth is limited to {self.max_depth}")
            )
        if not instructions.strip():
            from hub.capabilities.package_sdk import receipt

            return receipt("failed", error=("INVALID", "instructions: say what to do"))
        call_id = _call_id(ctx, ctx.tool_call_id or "")
        task_id = f"{parent.task.task_id}.s{_short_hash(parent.task.task_id, call_id)}"
        task, fresh = self.store.create(
            task_id,
            trace_id=parent.task.trace_id,
            run_id=parent.task.run_id,
            owner=parent.task.owner,
            scope=parent.task.scope,
            kind="subagent",
            parent_id=parent.task.task_id,
            session_id=parent.task.session_id,
            device_id=parent.task.device_id,
            depth=parent.depth + 1,
            title=(title or instructions)[:80],
            spec={
                "instructions": instructions[:4000],
                "utterance": parent.utterance,
                "tainted": parent.tainted,
                "provenance": [
                    [p.sensitivity, [list(x) for x in p.sources], p.label]
                    for p in parent.provenance
                ],
                "steering": [],
            },
        )
        if fresh:
            task = self.store.move(task_id, "admitted", "delegated")
            await self.core.emit(task)
            self._start(task, parent.config)
        return brain_receipt("running", "task.delegated", task_id, title=task.title)

    async def _run_intent(
        self, ctx: RunContext[AgentDeps], command: str = "", **_: Any
    ) -> dict[str, Any]:
        """``brain__run_intent`` (see the module doc)."""
        from hub.brain.local import LOCAL_TOOL_INTENTS, READING_INTENTS
        from hub.capabilities.package_sdk import receipt

        deps = ctx.deps
        if self.local is None or deps.task.scope != "owner":
            return receipt("rejected", error=("SCOPE", "local commands run for the owner only"))
        if deps.tainted:
            return receipt(
                "rejected",
                error=(
                    "UNTRUSTED",
                    "this job has read untrusted content: a local command runs only on the "
                    "owner's own words now; report what should be done instead",
                ),
            )
        command = " ".join(command.split())[:300]
        match = self.local.recognize(command) if command else None
        if match is None or match.intent not in LOCAL_TOOL_INTENTS:
            what = match.intent if match is not None else "not understood"
            return receipt(
                "failed",
                error=(
                    "NOT_LOCAL",
                    f"not a command the hub runs itself ({what}); use your other tools",
                ),
            )
        call_id = _call_id(ctx, ctx.tool_call_id or "")
        task = deps.task
        turn = Turn(
            command,
            owner=task.owner,
            scope=task.scope,
            session_id=task.session_id,
            trace_id=task.trace_id,
            device_id=task.device_id,
            turn_id=f"{task.task_id}.i{_short_hash(task.task_id, call_id)}",
            language=match.lang,
        )
        reply = " ".join([c.text async for c in self.local.run(turn)])
        if match.intent in READING_INTENTS:
            deps.tainted = True  # the reply carries the owner's data (memory, states…)
        log.info("task %s ran %s locally (%s)", task.task_id, match.intent, turn.turn_id)
        return brain_receipt(
            "succeeded", "intent.ran", turn.turn_id, intent=match.intent, reply=reply[:2000]
        )

    async def _steer(
        self, ctx: RunContext[AgentDeps], task_id: str = "", message: str = "", **_: Any
    ) -> dict[str, Any]:
        from hub.capabilities.package_sdk import receipt

        sub = self.store.get(task_id)
        me = ctx.deps.task
        if sub is None or sub.session_id != me.session_id or sub.owner != me.owner:
            return receipt("failed", error=("UNKNOWN_TASK", f"no background task {task_id}"))
        if sub.finished:
            return receipt(
                "failed", error=("FINISHED", "that task already finished; delegate anew")
            )
        # persisted first, so a restart (or a queued start) keeps the follow-up
        self.store.update_spec(task_id, steering=[*sub.spec.get("steering", []), message[:2000]])
        live = self._live.get(task_id)
        if live is not None:
            live.run.enqueue(f"The owner's follow-up for this job: {message}")
            how = "delivered to the running task"
        else:
            how = "queued for the task's start"
        return brain_receipt("succeeded", "task.steered", task_id, how=how)

    # ------------------------------------------------------------------ turns
    async def turn(self, turn: Turn) -> AsyncGenerator[ReplyChunk, None]:
        turn = turn.ids()
        config = self.between_turns()
        task, fresh = self.store.create(
            turn.turn_id,
            trace_id=turn.trace_id,
            run_id=turn.turn_id,
            owner=turn.owner,
            scope=turn.scope,
            kind="turn",
            session_id=turn.session_id,
            device_id=turn.device_id,
            title=turn.text[:80],
            spec={"brain": self.kind, "utterance": turn.text, "voice": turn.voice},
        )
        out = Outbox(task.task_id, task.trace_id, turn.device_id, self.kind)
        if not fresh and task.finished:
            for c in out.make(str(task.result.get("report", ""))):
                yield c
            return
        order = parse_order(turn.text) if fresh else None
        if order is not None:  # payments: platform code, from the owner's own words
            task = self.store.update_spec(task.task_id, pay=self.desk.request_spec(turn))
            if order.kind not in PAYMENT_KINDS:  # "pay it" / "undo": never the model's call
                task = self.store.walk(task.task_id, "admitted", "thinking")
                act = self.desk.pay_it if order.kind == "pay_it" else self.desk.undo
                text = await act(task, self.store)
                done = self.store.move(
                    task.task_id, self.store.require(task.task_id).state, result={"report": text}
                )
                await self.core.emit(done, text)
                for c in out.make(text):
                    yield c
                return
            note = self.desk.open_for_turn(self.store, task, order)
            task = self.store.update_spec(task.task_id, pay_note=note)
        task = self.store.walk(task.task_id, "admitted")
        sources = [] if turn.scope == "guest" else list(turn.sources)
        ctx_block = await short_context(turn.text, sources) if sources else None
        items = [Provenance(turn.sensitivity, turn.text_sources, "the owner's words")]
        if ctx_block is not None and ctx_block.text:
            items.append(Provenance(ctx_block.sensitivity, ctx_block.sources, "context"))
        endpoint, configured = route(config, "brain", items)
        if endpoint is None:
            why = "; ".join(blockers(items, config.cloud_sources))
            if not configured:
                raise BrainError("brain.no_provider", role="brain")
            self.store.update_spec(task.task_id, waiting=_park(turn, ctx_block))
            self.store.move(task.task_id, "admitted", waiting_for=WAIT_MODEL)
            log.info("turn %s waits: no eligible endpoint (%s)", task.task_id, why)
            text = say("llm.waits_local", lang(turn.language, turn.text))
            for c in out.make(text):
                yield c
            return
        text = await self._main(task, turn, config, endpoint, ctx_block, items)
        for c in out.make(text):
            yield c

    def _main_prompt(self, task: TaskRecord, ctx_block: ShortContext | None) -> str:
        lines = [MAIN_PROMPT]
        active = [t for t in self.store.by_session(task.session_id) if t.kind == "subagent"]
        if active:
            lines.append("Background tasks still running in this conversation:")
            lines += [f"- {t.task_id}: {t.title} ({t.state})" for t in active]
        if task.spec.get("pay_note"):
            lines.append(f"Payment (from the platform): {task.spec['pay_note']}")
        if ctx_block is not None and ctx_block.text:
            lines.append("Context (untrusted data):")
            lines.append(fence("context:" + ",".join(sorted(ctx_block.included)), ctx_block.text))
        return "\n".join(lines)

    async def _main(
        self,
        task: TaskRecord,
        turn: Turn,
        config: ProviderConfig,
        endpoint: Endpoint,
        ctx_block: ShortContext | None,
        items: list[Provenance],
    ) -> str:
        task = self.store.walk(task.task_id, "thinking")
        toolset, names = await self.toolset(task, 0)
        tainted = ctx_block is not None and any(
            n not in UNTAINTING_CONTEXT for n in ctx_block.included
        )
        deps = AgentDeps(
            self,
            task,
            config,
            endpoint,
            0,
            names,
            tainted=tainted,
            ledger_task=task.task_id + MAIN_LEDGER,
            utterance=turn.text,
            provenance=tuple(items),
        )
        saved = self.store.history(task.task_id)  # a turn cut off by a restart goes on
        history = ModelMessagesTypeAdapter.validate_json(saved) if saved else None
        if history and not any(isinstance(m, ModelResponse) for m in history):
            history = None  # cut off before the model answered at all: ask again
        try:
            output = await self._drive(
                deps,
                toolset,
                self._main_prompt(task, ctx_block),
                None if history else turn.text,
                history,
            )
        except Exception as exc:  # the model endpoint failed: say so, never guess
            language = lang(turn.language, turn.text)
            if _timed_out(exc):
                log.warning(
                    "turn %s: the model did not answer within %g s (%s)",
                    task.task_id,
                    endpoint.call_timeout_s,
                    endpoint.label(),
                )
                text = say("llm.timeout", language, seconds=endpoint.call_timeout_s)
                why = f"timeout: no answer within {endpoint.call_timeout_s:g} s"
            else:
                log.warning(
                    "turn %s: the model failed: %s: %s", task.task_id, type(exc).__name__, exc
                )
                text = say("llm.unreachable", language)
                why = type(exc).__name__
            failed = self.store.move(task.task_id, "failed", why, result={"report": text})
            await self.core.emit(failed, text)
            return text
        receipts = self.gateway.ledger.task_receipts(deps.ledger_id)
        # the main reply: contradictions with its receipts removed; its look-ups are not
        # appended as facts (the jobs report themselves when they finish)
        checked = check_reply(output, receipts, voice=turn.voice, said=list(fact_map(receipts)))
        text = checked.text or "…"
        done = self.store.walk(task.task_id, "verifying")
        done = self.store.move(done.task_id, "done", result={"report": text})
        await self.core.emit(done, text)
        return text

    async def _drive(
        self,
        deps: AgentDeps,
        toolset: FunctionToolset[AgentDeps],
        instructions: str,
        prompt: str | None,
        history: list[ModelMessage] | None = None,
    ) -> str:
        """Run one agent to its end, saving its history after every node."""
        model = self.model(deps.endpoint, deps.config)
        after = 0
        output = ""
        async with self._agent.iter(
            prompt,
            model=model,
            deps=deps,
            toolsets=[toolset],
            instructions=instructions,
            message_history=history,
            usage_limits=UsageLimits(request_limit=MAX_REQUESTS),
        ) as run:
            if deps.depth > 0:
                self._live[deps.task.task_id] = _Live(run, deps)
            try:
                async for node in run:
                    self.store.save_history(
                        deps.task.task_id, ModelMessagesTypeAdapter.dump_json(run.all_messages())
                    )
                    if deps.exhausted and Agent.is_call_tools_node(node):
                        after += 1
                        if after > AFTER_EXHAUSTION:
                            log.info("task %s stopped: budget spent", deps.task.task_id)
                            output = "The tool-call budget of this run is spent; I stopped."
                            break
            finally:
                self._live.pop(deps.task.task_id, None)
            if run.result is not None:
                output = str(run.result.output)
        return output

    # ------------------------------------------------------------------ sub-agents
    def _start(
        self, task: TaskRecord, config: ProviderConfig, history: bytes | None = None
    ) -> None:
        self._owner.spawn(self._sub(task.task_id, config, history), f"sub:{task.task_id}")

    async def _sub(self, task_id: str, config: ProviderConfig, history: bytes | None) -> None:
        async with self.slots:
            task = self.store.require(task_id)
            if task.finished:
                return
            self.running += 1
            self.running_peak = max(self.running_peak, self.running)
            try:
                await self._run_sub(task, config, history)
            except Exception as exc:
                language = lang("", str(task.spec.get("utterance", "")))
                if _timed_out(exc):
                    seconds = _timeout_of(config)
                    log.warning("sub-agent %s: no model answer within %g s", task_id, seconds)
                    why = f"timeout: no answer within {seconds:g} s"
                    text = say("llm.sub_timeout", language, seconds=seconds)
                else:
                    log.exception("sub-agent %s failed", task_id)
                    why = f"{type(exc).__name__}: {exc}"[:300]
                    text = say("llm.sub_failed", language)
                cur = self.store.require(task_id)
                if not cur.finished:
                    cur = self.store.move(task_id, "failed", why)
                    await self.core.emit(cur, text)
            finally:
                self.running -= 1

    async def _run_sub(
        self, task: TaskRecord, config: ProviderConfig, history: bytes | None
    ) -> None:
        spec = task.spec
        items = [
            Provenance(str(lvl), tuple((str(k), str(v)) for k, v in srcs), str(label))
            for lvl, srcs, label in spec.get("provenance", [])
        ] or [Provenance("high", (), "unknown")]
        role = "subagent" if config.endpoints("subagent") else "brain"
        endpoint, _ = route(config, role, items)
        if endpoint is None:
            self.store.move(task.task_id, task.state, waiting_for=WAIT_MODEL)
            log.info("sub-agent %s waits: %s", task.task_id, blockers(items, config.cloud_sources))
            return
        task = self.store.walk(task.task_id, "thinking")
        await self.core.emit(task)
        toolset, names = await self.toolset(task, task.depth)
        deps = AgentDeps(
            self,
            task,
            config,
            endpoint,
            task.depth,
            names,
            tainted=bool(spec.get("tainted")),
            utterance=str(spec.get("utterance", "")),
            provenance=tuple(items),
        )
        msgs = ModelMessagesTypeAdapter.validate_json(history) if history else None
        prompt = None if msgs else self._sub_prompt(task)
        output = await self._drive(deps, toolset, SUB_PROMPT, prompt, msgs)
        async with self.core.lock(task.task_id):
            await self.core.settle(task.task_id, text=output)

    @staticmethod
    def _sub_prompt(task: TaskRecord) -> str:
        spec = task.spec
        lines = [f"Job ({task.task_id}): {spec.get('instructions', '')}"]
        if spec.get("utterance"):
            lines.append(f"The owner's own words: {spec['utterance']}")
        for s in spec.get("steering", []):
            lines.append(f"The owner's follow-up for this job: {s}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ restart
    async def resume(self) -> list[str]:
        """Continue unfinished sub-agents (from their saved history; calls that completed
        are answered by the ledger, not run again) and recheck tasks waiting for a card.
        Main-agent turns cut off mid-thought are left for their owner to run again through
        :meth:`turn` (the hub's ``Turns`` does, for turns it has not answered): they
        continue from their saved history, so a delegation the main agent already made is
        answered by the ledger and never made twice."""
        config = self.between_turns()
        resumed = []
        self._owner.spawn(self.retry_waiting(), "retry-waiting")
        for task in self.store.unfinished():
            if task.kind == "turn" and task.spec.get("brain") != self.kind:
                continue
            if task.state == "waiting_for_consent":
                for step in self.store.steps(task.task_id):
                    if waiting(step.status, step.receipt):
                        r = self.core.recorded(task.task_id, step.call_id)
                        if r is not None and not waiting(r.status, r.to_dict()):
                            await self.core.receipt_arrived(r)
                resumed.append(task.task_id)
                continue
            if task.waiting_for == WAIT_MODEL:
                continue  # waits for an eligible model (retry_waiting)
            if task.kind == "turn":
                continue
            self._start(task, config, self.store.history(task.task_id))
            resumed.append(task.task_id)
        return resumed

    async def on_receipt(self, receipt: Receipt) -> None:
        await self.core.receipt_arrived(receipt)

    async def idle(self, timeout: float = 30.0) -> None:
        """Wait until no sub-agent is running or queued (tests, orderly shutdown)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            busy = [
                t
                for t in self.store.unfinished(kind="subagent")
                if t.state not in ("waiting_for_consent",)
            ]
            if not busy:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"sub-agents still busy: {[t.task_id for t in busy]}")
            await asyncio.sleep(0.02)


def _timed_out(exc: BaseException) -> bool:
    """A model call that ran past its endpoint's ``timeout_s`` (pydantic-ai's deadline, or
    the SDK's own read timeout)."""
    if isinstance(exc, (ModelRequestTimeout, TimeoutError)):
        return True
    name = type(exc).__name__
    return name in ("APITimeoutError", "ReadTimeout", "TimeoutException") or (
        exc.__cause__ is not None and _timed_out(exc.__cause__)
    )


def _timeout_of(config: ProviderConfig) -> float:
    role = "subagent" if config.endpoints("subagent") else "brain"
    eps = config.endpoints(role)
    return eps[0].call_timeout_s if eps else 0.0


def _park(turn: Turn, ctx_block: ShortContext | None) -> dict[str, Any]:
    """What a waiting turn needs to run later exactly as it would have run now (kept in
    the hub's own task store, never sent anywhere)."""
    out: dict[str, Any] = {
        "text": turn.text,
        "voice": turn.voice,
        "sensitivity": turn.sensitivity,
        "text_sources": [list(x) for x in turn.text_sources],
        "language": turn.language,
    }
    if ctx_block is not None and ctx_block.text:
        out["context"] = {
            "text": ctx_block.text,
            "sensitivity": ctx_block.sensitivity,
            "sources": [list(x) for x in ctx_block.sources],
            "included": ctx_block.included,
        }
    return out


def _unpark(task: TaskRecord, parked: dict[str, Any]) -> tuple[Turn, ShortContext | None]:
    turn = Turn(
        text=str(parked.get("text", task.spec.get("utterance", ""))),
        owner=task.owner,
        scope=task.scope,
        session_id=task.session_id,
        trace_id=task.trace_id,
        device_id=task.device_id,
        turn_id=task.task_id,
        sensitivity=str(parked.get("sensitivity", "high")),
        text_sources=tuple((str(k), str(v)) for k, v in parked.get("text_sources", [])),
        voice=bool(parked.get("voice", False)),
        language=str(parked.get("language", "")),
    )
    c = parked.get("context")
    if not c:
        return turn, None
    block = ShortContext(
        text=str(c["text"]),
        sensitivity=str(c["sensitivity"]),
        sources=tuple((str(k), str(v)) for k, v in c["sources"]),
        included=dict(c["included"]),
        dropped={},
        truncated=False,
        elapsed_ms=0.0,
    )
    return turn, block


def _package_tool(package: str, tool: str) -> Any:
    async def run(ctx: RunContext[AgentDeps], **args: Any) -> ToolOutcome:
        host = ctx.deps.brain.gateway.host
        if host is None:
            return ToolOutcome(text="no package host", is_error=True, error_code="START_FAILED")
        return await host.call(package, tool, args, task_id=ctx.deps.ledger_id)

    run.__name__ = f"{package}{SEP}{tool}"
    return run
