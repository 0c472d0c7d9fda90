"""With an LLM configured: "prefer handling commands locally" — a sentence the intent engine
matches confidently runs on the rule brain at once, the rest go to the LLM (fake
OpenAI-compatible server, real HTTP) — and the LLM's sub-agents run local commands with
``brain__run_intent``, inside the gateway's rules (real gateway over the packages' fakes)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hub.brain.base import Turn, collect
from hub.brain.configured import ConfiguredBrain
from hub.brain.intents import IntentEngine, Named, SlotLists
from hub.brain.providers import ProviderStore
from hub.brain.tasks import TaskStore
from hub.gateway import Gateway
from tests.brain_kit import BOOK, Events, configure, fake_config, fake_gateway
from tests.fake_openai import FakeOpenAI, Reply, Request, calls, text
from tests.gateway_kit import RecordingCourier

LISTS = SlotLists(
    contacts=(Named("Dana Lee", ("Dana Lee", "Dana", "colleague", "my colleague", "同事")),),
    devices=(
        Named("light.kitchen", ("kitchen light", "Kitchen light", "厨房灯"), "light", "kitchen"),
        Named("switch.kettle", ("kettle", "Kettle", "水壶"), "switch", "kitchen"),
    ),
    areas=(Named("kitchen", ("kitchen", "厨房")),),
)


@pytest.fixture(scope="module")
def engine() -> IntentEngine:
    return IntentEngine(LISTS)


@dataclass
class World:
    fake: FakeOpenAI
    gw: Gateway
    store: TaskStore
    brain: ConfiguredBrain
    events: Events


@asynccontextmanager
async def world(
    tmp: Path, responder: Any, engine: IntentEngine, **config: Any
) -> AsyncIterator[World]:
    events = Events()
    async with FakeOpenAI(responder) as fake, fake_gateway(tmp, courier=RecordingCourier()) as gw:
        providers = ProviderStore(tmp / "providers.db", hub_box_secret=b"h" * 32, home_id="home1")
        store = TaskStore(tmp / "tasks.db", synchronous="OFF")
        configure(providers, fake_config(fake.base_url, **config))
        try:
            async with ConfiguredBrain(
                gw, store, providers, contacts=BOOK, on_event=events, engine=engine
            ) as brain:
                yield World(fake, gw, store, brain, events)
        finally:
            store.close()
            providers.close()


def first(req: Request) -> bool:
    return not any(m.get("role") in ("assistant", "tool") for m in req.messages)


def tool_results(req: Request) -> str:
    return "\n".join(str(m.get("content", "")) for m in req.messages if m.get("role") == "tool")


# ---------------------------------------------------------------- prefer local
async def test_confident_commands_run_locally_the_rest_go_to_the_llm(
    tmp_path: Path, engine: IntentEngine
) -> None:
    async with world(tmp_path, lambda req: text("Forty-two."), engine) as w:
        local = await collect(w.brain.turn(Turn("turn on the kitchen light", turn_id="t-local")))
        assert w.fake.chat_requests() == [], "a confident match never reaches the model"
        task = w.store.require("t-local")
        assert task.spec.get("brain") == "rule-based" and task.state == "done", task
        assert "kitchen" in local.lower(), local
        gw_calls = [(r.package, r.tool) for r in w.gw.ledger.task_receipts("t-local")]
        assert ("home", "set_state") in gw_calls, gw_calls
        # not understood by the engine: the LLM answers
        other = await collect(w.brain.turn(Turn("what is the meaning of life", turn_id="t-llm")))
        assert other == "Forty-two."
        assert w.store.require("t-llm").spec.get("brain") == "llm"
        assert [r.last_user() for r in w.fake.chat_requests()] == ["what is the meaning of life"]
        # a redelivered turn stays with the brain that started it
        again = await collect(w.brain.turn(Turn("turn on the kitchen light", turn_id="t-local")))
        assert again == local and len(w.fake.chat_requests()) == 1
        # prefer_local off (a confirmed change, applied between turns): all to the LLM
        configure(w.brain.providers, fake_config(w.fake.base_url, prefer_local=False))
        assert await collect(w.brain.turn(Turn("turn off the kitchen light"))) == "Forty-two."
        assert w.fake.chat_requests()[-1].last_user() == "turn off the kitchen light"


# ---------------------------------------------------------------- brain__run_intent
def sub_responder(command: str, *, read_first: bool = False) -> Any:
    """The main agent delegates; the sub-agent (optionally after reading memory) runs
    ``command`` with brain__run_intent, then reports. ``responder.plan`` may be changed
    between turns."""
    plan = {"command": command, "read_first": read_first}

    def responder(req: Request) -> Reply:
        command, read_first = str(plan["command"]), bool(plan["read_first"])
        if req.model == "brain-model":
            if first(req):
                return calls(("brain__delegate", {"instructions": "do it", "title": "job"}))
            return text("On it.")
        done = tool_results(req)
        if read_first and "memory.recall" not in done:
            return calls(("memory__recall", {"query": "kitchen"}))
        if "brain.run_intent" not in done:
            return calls(("brain__run_intent", {"command": command}))
        return text("Done.")

    responder.plan = plan  # type: ignore[attr-defined]
    return responder


async def _sub_run(w: World, words: str, turn_id: str = "t-main") -> tuple[str, list[str]]:
    """One delegated job; what its sub-agent's last request saw, and the tasks of the turn."""
    before = len(w.fake.chat_requests("sub-model"))
    await collect(w.brain.turn(Turn(words, session_id=turn_id, turn_id=turn_id)))
    await w.brain.llm.idle()
    reqs = w.fake.chat_requests("sub-model")[before:]
    assert "brain__run_intent" in reqs[0].tool_names
    rows = w.store.db.execute("SELECT task_id FROM tasks WHERE task_id LIKE ?", (turn_id + "%",))
    return tool_results(reqs[-1]), [str(t) for (t,) in rows]


async def test_a_sub_agent_runs_a_local_command_through_the_rule_brain(
    tmp_path: Path, engine: IntentEngine
) -> None:
    words = "could you maybe get some light going where I cook"  # not a template: the LLM
    async with world(tmp_path, sub_responder("turn on the kitchen light"), engine) as w:
        seen, tasks = await _sub_run(w, words)
        assert "[brain.run_intent] status: succeeded" in seen, seen
        assert "HassTurnOn" in seen and "kitchen" in seen.lower(), seen
        nested = [t for t in tasks if re.search(r"\.i[0-9a-f]{10}$", t)]
        assert len(nested) == 1, tasks
        rec = w.store.require(nested[0])
        assert rec.spec.get("brain") == "rule-based" and rec.state == "done", rec
        gw_calls = [(r.package, r.tool) for r in w.gw.ledger.task_receipts(nested[0])]
        assert ("home", "set_state") in gw_calls, gw_calls


async def test_run_intent_keeps_the_gateways_rules(tmp_path: Path, engine: IntentEngine) -> None:
    responder = sub_responder("")
    async with world(tmp_path, responder, engine) as w:
        for i, (command, read_first, expect) in enumerate(
            [
                ("e-mail Dana saying hi", False, "NOT_LOCAL"),  # sending is never local
                ("order the same lunch as last time", False, "NOT_LOCAL"),  # nor a payment
                ("tell me a joke", False, "NOT_LOCAL"),  # not understood
                ("turn on the kitchen light", True, "UNTRUSTED"),  # after reading memory
            ]
        ):
            responder.plan.update(command=command, read_first=read_first)
            seen, tasks = await _sub_run(w, "please handle it", f"t{i}")
            assert expect in seen, (command, seen)
            assert not [t for t in tasks if re.search(r"\.i[0-9a-f]{10}$", t)], tasks
            assert not any(
                r.tool == "set_state" for t in tasks for r in w.gw.ledger.task_receipts(t)
            )
        # a guest's agents are not offered the tool at all
        n = len(w.fake.chat_requests("sub-model"))
        await collect(w.brain.turn(Turn("please handle it", scope="guest", session_id="g")))
        await w.brain.llm.idle()
        assert "brain__run_intent" not in w.fake.chat_requests("brain-model")[-1].tool_names
        assert "brain__run_intent" not in w.fake.chat_requests("sub-model")[n].tool_names
