"""PydanticBrain against the fake OpenAI-compatible server (real HTTP on loopback) and the
real gateway over the built-in packages' fake servers: delegation, the strict budget,
three concurrent sub-agents, the depth limit, steering, waiting receipts, restart resume."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hub.brain.agents import PydanticBrain
from hub.brain.base import Turn, collect
from hub.brain.providers import DEFAULT_MAX_TOKENS, DEFAULT_TIMEOUT_S, Endpoint, ProviderStore
from hub.brain.tasks import TaskStore
from hub.gateway import Gateway
from tests.brain_kit import Events, configure, fake_config, fake_gateway
from tests.fake_openai import FakeOpenAI, Reply, Request, calls, stall, text, trickle
from tests.gateway_kit import Phone, RecordingCourier
from tests.waiting import poll

JOB = re.compile(r"Job \(([^)]+)\): (.*)")


def job_of(req: Request) -> str:
    m = JOB.search(req.message_text())
    return m.group(2).strip() if m else ""


def first_request(req: Request) -> bool:
    return not any(m.get("role") in ("assistant", "tool") for m in req.messages)


@dataclass
class World:
    tmp: Path
    fake: FakeOpenAI
    gw: Gateway
    store: TaskStore
    providers: ProviderStore
    brain: PydanticBrain
    events: Events
    courier: RecordingCourier


@asynccontextmanager
async def world(
    tmp: Path, responder: Any, *, endpoint: dict[str, Any] | None = None, **brain_kw: Any
) -> AsyncIterator[World]:
    """``endpoint``: more fields for both endpoints (``timeout_s``, ``max_tokens``)."""
    courier, events = RecordingCourier(), Events()
    async with FakeOpenAI(responder) as fake, fake_gateway(tmp, courier=courier) as gw:
        providers = ProviderStore(tmp / "providers.db", hub_box_secret=b"h" * 32, home_id="home1")
        store = TaskStore(tmp / "tasks.db", synchronous="OFF")
        config = fake_config(fake.base_url)
        for eps in config["roles"].values():
            for ep in eps:
                ep.update(endpoint or {})
        configure(providers, config)  # this world's fake server
        try:
            async with PydanticBrain(gw, store, providers, on_event=events, **brain_kw) as brain:
                yield World(tmp, fake, gw, store, providers, brain, events, courier)
        finally:
            store.close()
            providers.close()


def delegate(*jobs: str) -> Reply:
    return calls(*[("brain__delegate", {"instructions": j, "title": j}) for j in jobs])


# ---------------------------------------------------------------- delegation
async def test_main_agent_only_converses_and_delegates(tmp_path: Path) -> None:
    def responder(req: Request) -> Reply:
        if req.model == "brain-model":
            return (
                delegate("switch on the kitchen light")
                if first_request(req)
                else text("OK, I'll switch on the kitchen light.")
            )
        if first_request(req):
            return calls(("home__get_state", {"entity": "light.kitchen"}))
        return text("The kitchen light is off; I looked.")

    async with world(tmp_path, responder) as w:
        reply = await collect(w.brain.turn(Turn("turn on the kitchen light", session_id="s1")))
        assert reply == "OK, I'll switch on the kitchen light."
        await w.brain.idle()
        main_tools = set(w.fake.chat_requests("brain-model")[0].tool_names)
        # the memory package's read-only tools (a forget plan writes nothing), never an action
        assert main_tools == {
            "memory__recall",
            "memory__show",
            "memory__plan_forget",
            "brain__delegate",
            "brain__steer",
        }
        sub_tools = set(w.fake.chat_requests("sub-model")[0].tool_names)
        assert {"home__set_state", "messaging__send_email", "brain__delegate"} <= sub_tools
        assert "brain__steer" not in sub_tools
        subs = [t for t in w.store.unfinished() + _all(w.store) if t.kind == "subagent"]
        sub = subs[0]
        assert sub.state == "done" and sub.depth == 1
        assert w.store.history_of_states(sub.task_id) == [
            "received",
            "admitted",
            "thinking",
            "verifying",
            "done",
        ]
        done = [e for e in w.events.of(sub.task_id) if e.state == "done"]
        assert done and "kitchen light is off" in done[0].text.lower()  # checked against receipts


def _all(store: TaskStore) -> list[Any]:
    rows = store.db.execute("SELECT task_id FROM tasks ORDER BY created_ms")
    return [store.require(r[0]) for r in rows]


# ---------------------------------------------------------------- waiting receipts
async def test_waiting_receipt_lets_other_tools_continue_then_approval_finishes(
    tmp_path: Path,
) -> None:
    def responder(req: Request) -> Reply:
        if req.model == "brain-model":
            return (
                delegate("e-mail Dana and check the kettle")
                if first_request(req)
                else text("On it.")
            )
        if first_request(req):
            return calls(
                (
                    "messaging__send_email",
                    {
                        "to": "dana@example.org",
                        "subject": "Notes",
                        "body": "Ship on Friday.",
                        "owner_requested": True,
                    },
                ),
                ("home__get_state", {"entity": "switch.kettle"}),
            )
        return text("The e-mail waits for your approval; the kettle is off.")

    async with world(tmp_path, responder) as w:
        await collect(w.brain.turn(Turn("e-mail Dana the notes and check the kettle")))
        await w.brain.idle()
        second = w.fake.chat_requests("sub-model")[1].message_text()
        assert "status: waiting" in second and "Kettle is off" in second
        sub = next(t for t in _all(w.store) if t.kind == "subagent")
        assert sub.state == "waiting_for_consent"
        card = w.courier.shown[0]
        phone = Phone()
        _, receipt = await phone.answer(w.gw, phone.sign(card))
        assert receipt is not None and receipt.status == "succeeded"
        await w.brain.on_receipt(receipt)
        sub = w.store.require(sub.task_id)
        assert sub.state == "done"
        assert "acting" in w.store.history_of_states(sub.task_id)
        final = [e for e in w.events.of(sub.task_id) if e.state == "done"][-1]
        assert "dana@example.org" in final.text


# ---------------------------------------------------------------- budget
async def test_budget_of_120_calls_is_strict_and_shared_with_milestones(tmp_path: Path) -> None:
    entities = ["light.kitchen", "switch.kettle", "lock.front_door", "sensor.living_temperature"]

    def responder(req: Request) -> Reply:
        if req.model == "brain-model":
            return delegate("watch the house") if first_request(req) else text("Watching.")
        # a runaway sub-agent: four look-ups per response, forever
        return calls(*[("home__get_state", {"entity": e}) for e in entities])

    async with world(tmp_path, responder) as w:
        turn = Turn("keep an eye on everything", turn_id="turn-budget")
        await collect(w.brain.turn(turn))
        await w.brain.idle(timeout=120)
        assert w.store.budget_used("turn-budget") == 120
        sub = next(t for t in _all(w.store) if t.kind == "subagent")
        assert sub.state == "failed"
        decided = next(
            iter(
                w.gw.ledger.db.execute("SELECT COUNT(*) FROM calls WHERE task_id=?", (sub.task_id,))
            )
        )[0]
        assert decided == 119  # + the main agent's delegate call = 120
        refused = [s for s in w.store.steps(sub.task_id) if s.status == "not_executed"]
        assert refused and all("budget" in (s.receipt or {})["error"]["message"] for s in refused)
        last = w.fake.chat_requests("sub-model")[-1].message_text()
        assert last.count("Milestone: ") == 6  # after calls 20, 40, …, 120
        assert "Milestone: 120 of 120" in last
        # the agent that kept calling after the refusal was stopped
        assert len(w.fake.chat_requests("sub-model")) <= 30 + 2


# ---------------------------------------------------------------- concurrency
async def test_three_sub_agents_at_once_a_fourth_waits(tmp_path: Path) -> None:
    release = asyncio.Event()
    started: list[str] = []

    async def responder(req: Request) -> Reply:
        if req.model == "brain-model":
            return (
                delegate("job 1", "job 2", "job 3", "job 4")
                if first_request(req)
                else text("Four jobs started.")
            )
        started.append(job_of(req))
        await release.wait()
        return text(f"{job_of(req)} done")

    async with world(tmp_path, responder) as w:
        await collect(w.brain.turn(Turn("do four things")))
        await poll(lambda: len(started) == 3)
        subs = [t for t in _all(w.store) if t.kind == "subagent"]
        assert len(subs) == 4
        states = sorted(t.state for t in subs)
        assert states == ["admitted", "thinking", "thinking", "thinking"]
        assert w.brain.running == 3
        release.set()
        await w.brain.idle()
        assert sorted(started) == ["job 1", "job 2", "job 3", "job 4"]
        assert w.brain.running_peak == 3
        assert all(w.store.require(t.task_id).state == "done" for t in subs)


# ---------------------------------------------------------------- depth
async def test_delegation_depth_is_at_most_two(tmp_path: Path) -> None:
    def responder(req: Request) -> Reply:
        if req.model == "brain-model":
            return delegate("job A") if first_request(req) else text("Started.")
        job = job_of(req)
        if first_request(req) and job == "job A":
            return delegate("job B")
        if first_request(req) and job == "job B":
            return delegate("job C")  # not offered at depth 2: refused
        return text(f"{job} finished")

    async with world(tmp_path, responder) as w:
        await collect(w.brain.turn(Turn("nest")))
        await w.brain.idle()
        subs = {t.spec["instructions"]: t for t in _all(w.store) if t.kind == "subagent"}
        assert set(subs) == {"job A", "job B"}
        assert subs["job A"].depth == 1 and subs["job B"].depth == 2
        reqs = {job_of(r): r for r in w.fake.chat_requests("sub-model") if first_request(r)}
        assert "brain__delegate" in reqs["job A"].tool_names
        assert "brain__delegate" not in reqs["job B"].tool_names
        assert all(t.state == "done" for t in subs.values())


# ---------------------------------------------------------------- steering
async def test_follow_up_is_steered_to_the_running_sub_agent(tmp_path: Path) -> None:
    gate = asyncio.Event()
    in_flight = asyncio.Event()

    async def responder(req: Request) -> Reply:
        if req.model == "brain-model":
            m = re.search(r"- (turn-[\w.]+): ", req.message_text())
            if first_request(req) and "kitchen" in req.last_user():
                return delegate("turn on the kitchen light")
            if first_request(req) and m:
                return calls(
                    (
                        "brain__steer",
                        {"task_id": m.group(1), "message": "the bedroom, not the kitchen"},
                    )
                )
            return text("OK.")
        if first_request(req):
            in_flight.set()
            await gate.wait()
            return calls(("home__list_devices", {}))
        return text("done")

    async with world(tmp_path, responder) as w:
        await collect(w.brain.turn(Turn("turn on the kitchen light", session_id="s1")))
        await asyncio.wait_for(in_flight.wait(), 20)
        sub = next(t for t in _all(w.store) if t.kind == "subagent")
        await collect(w.brain.turn(Turn("actually the bedroom", session_id="s1")))
        main2 = w.fake.chat_requests("brain-model")[-2]
        assert sub.task_id in main2.message_text()  # the main agent saw the running job
        gate.set()
        await w.brain.idle()
        second = w.fake.chat_requests("sub-model")[1]
        assert "The owner's follow-up for this job: the bedroom, not the kitchen" in (
            second.message_text()
        )
        assert w.store.require(sub.task_id).spec["steering"] == ["the bedroom, not the kitchen"]


# ---------------------------------------------------------------- restart
async def test_restart_resumes_without_redoing_a_completed_send(tmp_path: Path) -> None:
    hold = asyncio.Event()

    async def before(req: Request) -> Reply:
        if req.model == "brain-model":
            return delegate("e-mail Dana") if first_request(req) else text("Sending.")
        if first_request(req):
            return calls(
                (
                    "messaging__send_email",
                    {
                        "to": "dana@example.org",
                        "subject": "Hi",
                        "body": "Running late.",
                        "owner_requested": True,
                    },
                )
            )
        await hold.wait()  # the hub "dies" while the model writes its report
        return text("never")

    async with world(tmp_path, before) as w:
        w.gw.consent.remember_send("owner", "dana@example.org", "email")  # no card needed
        await collect(w.brain.turn(Turn("e-mail Dana I'm running late", turn_id="turn-r")))
        await poll(lambda: len(w.fake.chat_requests("sub-model")) == 2)
        sub = next(t for t in _all(w.store) if t.kind == "subagent")
        assert w.store.require(sub.task_id).state == "acting"
    sent_log = tmp_path / "package-state" / "messaging-fake.db"
    assert _sent(sent_log) == 1

    def after(req: Request) -> Reply:
        assert req.model == "sub-model"
        return text("Sent the e-mail to Dana.")

    async with world(tmp_path, after) as w2:
        resumed = await w2.brain.resume()
        assert sub.task_id in resumed
        await w2.brain.idle()
        assert w2.store.require(sub.task_id).state == "done"
        assert _sent(sent_log) == 1, "the send ran once"
        reqs = w2.fake.chat_requests("sub-model")
        assert len(reqs) == 1 and "email.sent" in reqs[0].message_text()
        assert w2.store.require("turn-r").state == "done"


async def test_a_main_turn_cut_off_after_delegating_goes_on_without_delegating_again(
    tmp_path: Path,
) -> None:
    """The hub stops while the main agent writes its reply after delegating: run again, the
    turn continues from its saved history — its delegation is answered by the ledger (one
    job, not two) and the model is asked only for the reply it was writing."""
    hold, stuck = asyncio.Event(), asyncio.Event()

    async def before(req: Request) -> Reply:
        if req.model == "brain-model":
            if first_request(req):
                return delegate("water the plants")
            stuck.set()
            await hold.wait()  # the hub "dies" here
            return text("never")
        await hold.wait()
        return text("never")

    turn = Turn("water the plants at six", turn_id="turn-cut")
    async with world(tmp_path, before) as w:
        run = asyncio.create_task(collect(w.brain.turn(turn)), name="turn-cut")
        await asyncio.wait_for(stuck.wait(), 20)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        assert w.store.require("turn-cut").state == "thinking"
    hold.set()

    def after(req: Request) -> Reply:
        if req.model == "brain-model":
            assert not first_request(req), "the turn continued from its history"
            return text("I'll water the plants at six.")
        return text("Watering is scheduled.")

    async with world(tmp_path, after) as w2:
        resumed = await w2.brain.resume()
        assert "turn-cut" not in resumed  # the turn's owner runs it again
        assert w2.store.require("turn-cut").state == "thinking"
        reply = await collect(w2.brain.turn(turn))
        assert reply.startswith("I'll water the plants at six."), reply
        assert w2.store.require("turn-cut").state == "done"
        await w2.brain.idle()
        subs = [t for t in _all(w2.store) if t.kind == "subagent"]
        assert len(subs) == 1 and subs[0].state == "done", subs
        main = w2.fake.chat_requests("brain-model")
        assert len(main) == 1 and "brain__delegate" in main[0].message_text()


async def test_a_report_the_checker_empties_falls_back_to_the_receipts(tmp_path: Path) -> None:
    """A sub-agent claims work no receipt backs: the checker removes the claim, and the
    owner still hears how the job ended — from the receipts, not nothing."""

    def responder(req: Request) -> Reply:
        if req.model == "brain-model":
            return delegate("tidy the inbox") if first_request(req) else text("On it.")
        return text("Finished tidying the inbox.")

    async with world(tmp_path, responder) as w:
        await collect(w.brain.turn(Turn("tidy my inbox", turn_id="turn-claim")))
        await w.brain.idle()
        sub = next(t for t in _all(w.store) if t.kind == "subagent")
        report = str(w.store.require(sub.task_id).result.get("report", ""))
        assert "Finished" not in report and report.strip(), report
        assert "No tool was used for this job." in report, report
        said = [e.text for e in w.events.of(sub.task_id) if e.text]
        assert said and said[-1] == report


def _sent(path: Path) -> int:
    import sqlite3

    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT COUNT(*) FROM sent").fetchone()[0])


@pytest.mark.parametrize("scope", ["guest", "owner_uncertain"])
async def test_guest_and_uncertain_see_only_their_tools(tmp_path: Path, scope: str) -> None:
    def responder(req: Request) -> Reply:
        if req.model == "brain-model":
            return delegate("send a message") if first_request(req) else text("ok")
        if first_request(req):
            return calls(
                (
                    "messaging__send_email",
                    {"to": "x@example.org", "subject": "s", "body": "b", "owner_requested": True},
                )
            )
        return text("could not")

    async with world(tmp_path, responder) as w:
        await collect(w.brain.turn(Turn("send it", scope=scope)))
        await w.brain.idle()
        main = set(w.fake.chat_requests("brain-model")[0].tool_names)
        assert not any(n.startswith("memory__") for n in main)
        sub_tools = set(w.fake.chat_requests("sub-model")[0].tool_names)
        assert "messaging__send_email" not in sub_tools
        if scope == "guest":
            assert not any(n.startswith(("memory__", "home__")) for n in sub_tools)
        assert w.courier.shown == []
        assert "No tool messaging__send_email" in w.fake.chat_requests("sub-model")[
            1
        ].message_text() or ("Unknown tool" in w.fake.chat_requests("sub-model")[1].message_text())


# ---------------------------------------------------------------- bounded model calls
async def test_every_call_carries_the_endpoints_max_tokens(tmp_path: Path) -> None:
    assert Endpoint("http://127.0.0.1:1/v1", "m").token_limit == DEFAULT_MAX_TOKENS == 1024
    assert Endpoint("http://127.0.0.1:1/v1", "m").call_timeout_s == DEFAULT_TIMEOUT_S == 60.0
    async with world(tmp_path, lambda req: text("Hi."), endpoint={"max_tokens": 64}) as w:
        assert await collect(w.brain.turn(Turn("hello"))) == "Hi."
        body = w.fake.chat_requests("brain-model")[0].body
        assert body.get("max_tokens", body.get("max_completion_tokens")) == 64


@pytest.mark.parametrize(
    ("misbehave", "said", "expect"),
    [
        (stall, "what is the meaning of life", "did not answer within 0.5 seconds"),
        (trickle, "给我讲个长故事", "语言模型在 0.5 秒内没有回答"),
    ],
)
async def test_a_runaway_model_call_ends_the_turn_clearly_in_its_language(
    tmp_path: Path, misbehave: Any, said: str, expect: str
) -> None:
    """A server that never answers, or answers forever: the call ends at the endpoint's
    timeout, the turn fails with a reply in the turn's language, and the HTTP request is
    gone (the fake sees the client hang up)."""
    loop = asyncio.get_running_loop()
    async with world(tmp_path, lambda req: misbehave(), endpoint={"timeout_s": 0.5}) as w:
        t0 = loop.time()
        reply = await collect(w.brain.turn(Turn(said, turn_id="turn-slow")))
        elapsed = loop.time() - t0
        assert expect in reply, reply
        assert elapsed < 5.0, elapsed  # one deadline for the call, SDK retries included
        task = w.store.require("turn-slow")
        assert task.state == "failed", task
        notes = w.store.db.execute(
            "SELECT note FROM transitions WHERE task_id=? AND dst='failed'", ("turn-slow",)
        )
        assert [n for (n,) in notes] == ["timeout: no answer within 0.5 s"]
        assert [e.text for e in w.events.of("turn-slow") if e.state == "failed"] == [reply]
        await poll(lambda: w.fake.answering == 0, timeout=5, what="the fake to see the hang-up")


async def test_a_turn_language_field_wins_over_the_script(tmp_path: Path) -> None:
    async with world(tmp_path, lambda req: stall(), endpoint={"timeout_s": 0.3}) as w:
        reply = await collect(w.brain.turn(Turn("ok", language="zh")))
        assert "语言模型" in reply, reply


async def test_a_stalled_sub_agent_call_fails_its_task_cleanly(tmp_path: Path) -> None:
    def responder(req: Request) -> Reply:
        if req.model == "brain-model":
            return delegate("check the kettle") if first_request(req) else text("On it.")
        return stall()

    async with world(tmp_path, responder, endpoint={"timeout_s": 0.5}) as w:
        assert await collect(w.brain.turn(Turn("check the kettle"))) == "On it."
        await w.brain.idle()
        sub = next(t for t in _all(w.store) if t.kind == "subagent")
        assert sub.state == "failed", sub
        said = [e.text for e in w.events.of(sub.task_id) if e.state == "failed"]
        assert said == [
            "The background task stopped: my language model did not answer within 0.5 seconds."
        ]
        await poll(lambda: w.fake.answering == 0, timeout=5, what="the hang-up")
