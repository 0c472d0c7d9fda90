"""The LLM brain's limits on the real mesh: the hub (in this process: mosquitto, gRPC, the
gateway over the real memory and home packages, the home package on a throwaway mosquitto
with fake MQTT-discovery devices) answers ``yimi say`` from a Mac bundle — typed on a
device that may utter: the owner's turn — and a fake OpenAI-compatible endpoint (real HTTP,
scripted replies) plays the models:

- the one strict budget of 120 tool calls per run: a runaway sub-agent is refused its 121st
  call and stopped; the task fails, and the activity entry saying so (naming the budget)
  and the report reach the Mac;
- three sub-agents at once: of four jobs the fourth waits, admitted, until a slot frees;
  the jobs' activity entries reach the Mac and all four finish;
- steering: the owner's follow-up while a sub-agent works goes into that sub-agent's next
  model request, and the follow-up turn gets its own reply on the Mac."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from hub.brain.agents import TOOL_BUDGET, PydanticBrain
from hub.capabilities.settings import only
from hub.gateway import Gateway
from hub.mesh.daemon import HubDaemon
from tests.fake_openai import FakeOpenAI, Reply, Request, Responder, calls, text
from tests.mesh_harness import Mesh, Proc
from tests.test_brain_llm import delegate, first_request, job_of
from tests.test_turns_mesh import _configure, activity, reply_text, turn_id
from tests.waiting import poll
from worlds.fakes import DEVICES, MqttHomeWorld

pytestmark = pytest.mark.slow

ENTITIES = [f"{d['component']}.{d['object_id']}" for d in DEVICES[:4]]
"""four of the fake home's devices (the runaway sub-agent's look-ups per response)"""
RUNNING = "Background tasks still running in this conversation:"


# ---------------------------------------------------------------- helpers
@dataclass
class Rig:
    """The hub, the fake model endpoint and the Mac (bundle and running edge daemon)."""

    mesh: Mesh
    hub: HubDaemon
    fake: FakeOpenAI
    mac: Path
    edge: Proc

    @property
    def brain(self) -> PydanticBrain:
        brain = self.hub.turns.brain
        assert brain is not None and brain.kind == "llm"
        return brain.llm

    @property
    def gateway(self) -> Gateway:
        gw = self.hub.consent.gateway
        assert gw is not None
        return gw

    def decided(self, task_id: str) -> int:
        """Calls of ``task_id`` the gateway decided (recorded in its ledger)."""
        rows = self.gateway.ledger.db.execute(
            "SELECT COUNT(*) FROM calls WHERE task_id=?", (task_id,)
        )
        return int(next(iter(rows))[0])

    def mac_timeline(self) -> str:
        """The Mac's own view of the timeline (its replica, as ``yimi timeline`` shows it)."""
        return self.mesh.yimi("timeline", "--bundle", str(self.mac), check=True).stdout


@asynccontextmanager
async def rig(mesh: Mesh, responder: Responder) -> AsyncIterator[Rig]:
    """The memory and home packages (home on fake MQTT devices), the brain and sub-agents
    on the fake endpoint (every turn to the model), the hub up and the Mac's edge daemon
    connected."""
    mac = mesh.add_device("mac1", "mac")
    async with MqttHomeWorld() as world, FakeOpenAI(responder) as fake:
        broker = world.broker
        (mesh.home / "packages.yaml").write_text(
            yaml.safe_dump(
                only(
                    {
                        "memory": {},
                        "home": {
                            "config": {"MQTT_HOST": broker.host, "MQTT_PORT": str(broker.port)}
                        },
                    }
                )
            )
        )
        # every turn to the model: these test its sub-agents ("turn on the kitchen light"
        # is a local command the hub's intents know once it has read the devices at start)
        _configure(mesh.home, fake.base_url, prefer_local=False)
        async with mesh.hub_in_process() as hub:
            edge = await asyncio.to_thread(mesh.start_edge, mac, hub=mesh.hub_target)
            try:
                yield Rig(mesh, hub, fake, mac, edge)
            finally:
                mesh.stop(edge)


def rendered(mesh: Mesh, uid: str) -> bool:
    """Whether the device ACKed the reply to ``uid`` as rendered."""
    rows = mesh.hub_query(
        "SELECT d.state FROM deliveries d JOIN replies r ON r.id = d.reply_id "
        "WHERE r.utterance_id=?",
        uid,
    )
    return rows == [("rendered",)]


def running_jobs(req: Request) -> list[str]:
    """The task ids of the background jobs the main agent is told are still running."""
    _, listed, rest = req.message_text().partition(RUNNING)
    return re.findall(r"^- (\S+\.s\w+): ", rest, re.M) if listed else []


# ---------------------------------------------------------------- budget
async def test_a_runaway_sub_agent_is_stopped_by_the_run_budget(mesh: Mesh) -> None:
    words = "keep an eye on everything in the house"

    def responder(req: Request) -> Reply:
        if req.model == "brain-model":
            if first_request(req):
                return delegate("watch the house")
            return text("I'll keep an eye on the house.")
        # a runaway sub-agent: four harmless look-ups per response, forever
        return calls(*[("home__get_state", {"entity": e}) for e in ENTITIES])

    async with rig(mesh, responder) as r:
        out = await mesh.say_answered(r.mac, words)
        assert "I'll keep an eye on the house." in out, out
        uid = turn_id(mesh, words)
        (sub,) = r.brain.store.children(uid)
        await poll(lambda: r.brain.store.require(sub.task_id).finished, 60, "the sub-agent")
        assert r.brain.store.require(sub.task_id).state == "failed"
        # one budget for the run: the main agent's delegate call and 119 of the sub-agent
        assert r.brain.store.budget_used(uid) == TOOL_BUDGET
        assert r.decided(uid + "#main") == 1
        assert r.decided(sub.task_id) == TOOL_BUDGET - 1
        refused = [s for s in r.brain.store.steps(sub.task_id) if s.status == "not_executed"]
        assert refused, "the calls after the budget were refused"
        assert all("budget" in (s.receipt or {})["error"]["message"] for s in refused)
        # the agent that kept calling after the refusal was stopped
        assert len(r.fake.chat_requests("sub-model")) <= TOOL_BUDGET // len(ENTITIES) + 2

        def failed() -> list[str]:
            return [a for a in activity(mesh) if a.startswith("watch the house — failed")]

        await poll(failed, 10, "the failed activity entry")
        (entry,) = failed()
        assert f"budget of {TOOL_BUDGET} tool calls" in entry, entry
        await poll(lambda: entry in r.mac_timeline(), 30, "the failed entry on the Mac")
        await poll(lambda: "budget" in r.edge.text(), 20, "the report on the Mac")


# ---------------------------------------------------------------- concurrency
async def test_three_sub_agents_at_once_a_fourth_waits(mesh: Mesh) -> None:
    release = asyncio.Event()
    started: list[str] = []
    jobs = ["job 1", "job 2", "job 3", "job 4"]

    async def responder(req: Request) -> Reply:
        if req.model == "brain-model":
            return delegate(*jobs) if first_request(req) else text("Four jobs started.")
        started.append(job_of(req))
        await release.wait()
        return text(f"Looked into {job_of(req)}; nothing needed changing.")

    try:
        async with rig(mesh, responder) as r:
            out = await mesh.say_answered(r.mac, "do four things")
            assert "Four jobs started." in out, out
            subs = r.brain.store.children(turn_id(mesh, "do four things"))
            assert sorted(t.title for t in subs) == jobs
            await poll(lambda: len(started) == 3, 30, "three sub-agents thinking")
            states = {t.title: r.brain.store.require(t.task_id).state for t in subs}
            assert sorted(states.values()) == ["admitted", "thinking", "thinking", "thinking"]
            assert r.brain.running == 3
            (waiting,) = [j for j, s in states.items() if s == "admitted"]
            assert waiting not in started

            # every job's activity reaches the Mac: four admitted, three of them thinking
            expected = [f"{j} — admitted" for j in jobs] + [
                f"{j} — thinking" for j in jobs if j != waiting
            ]
            await poll(lambda: all(e in activity(mesh) for e in expected), 10, "the jobs' activity")
            await poll(
                lambda: all(e in r.mac_timeline() for e in expected), 30, "the activity on the Mac"
            )
            assert f"{waiting} — thinking" not in activity(mesh)

            release.set()
            await poll(
                lambda: all(r.brain.store.require(t.task_id).state == "done" for t in subs),
                30,
                "the four jobs done",
            )
            assert sorted(started) == jobs
            assert r.brain.running_peak == 3
            # each job reports to the Mac, where the owner asked for it
            await poll(
                lambda: all(f"hub: Looked into {j};" in r.edge.text() for j in jobs),
                20,
                "the four reports on the Mac",
            )
            assert all(f"{j} — done" in activity(mesh) for j in jobs), activity(mesh)
    finally:
        release.set()


# ---------------------------------------------------------------- steering
async def test_a_follow_up_is_steered_to_the_running_sub_agent(mesh: Mesh) -> None:
    gate = asyncio.Event()
    in_flight = asyncio.Event()
    follow_up = "the bedroom, not the kitchen"

    async def responder(req: Request) -> Reply:
        if req.model == "brain-model":
            running = running_jobs(req)
            if first_request(req) and "kitchen" in req.last_user():
                return delegate("turn on the kitchen light")
            if first_request(req) and running:
                return calls(("brain__steer", {"task_id": running[0], "message": follow_up}))
            if "task.steered" in req.message_text():
                return text("OK, the bedroom instead.")
            return text("I'll turn on the kitchen light.")
        if first_request(req):
            in_flight.set()
            await gate.wait()
            return calls(("home__get_state", {"entity": "light.kitchen"}))
        return text("There is no bedroom light to switch; I switched nothing.")

    try:
        async with rig(mesh, responder) as r:
            out = await mesh.say_answered(r.mac, "turn on the kitchen light")
            assert "I'll turn on the kitchen light." in out, out
            (sub,) = r.brain.store.children(turn_id(mesh, "turn on the kitchen light"))
            await asyncio.wait_for(in_flight.wait(), 30)

            # same Mac, same day: the same session, so the main agent sees the running job
            out = await mesh.say_answered(r.mac, "actually the bedroom")
            assert "OK, the bedroom instead." in out, out
            uid = turn_id(mesh, "actually the bedroom")
            main2 = next(
                q
                for q in r.fake.chat_requests("brain-model")
                if first_request(q) and q.last_user() == "actually the bedroom"
            )
            assert running_jobs(main2) == [sub.task_id]
            assert r.brain.store.require(sub.task_id).spec["steering"] == [follow_up]
            assert r.decided(uid + "#main") == 1  # the steer call, through the gateway
            # the follow-up's own reply, rendered on the Mac (by ``yimi say`` or the daemon)
            assert reply_text(mesh, uid) == "OK, the bedroom instead."
            await poll(lambda: rendered(mesh, uid), 20, "the reply rendered on the Mac")

            gate.set()
            await poll(lambda: r.brain.store.require(sub.task_id).finished, 30, "the sub-agent")
            second = r.fake.chat_requests("sub-model")[1].message_text()
            assert f"The owner's follow-up for this job: {follow_up}" in second
            assert r.brain.store.require(sub.task_id).state == "done"
            await poll(
                lambda: "no bedroom light" in r.edge.text(), 20, "the job's report on the Mac"
            )
    finally:
        gate.set()
