""" "What do you remember about …" answers with what the owner told, never with the questions
asked about it nor the hub's own replies: the rule brain over the real memory package, the
home's timeline (each turn admitted, answered and delivered as the hub does, so the intent
the brain understood is recorded on the utterance) and its recall index, in English and
Chinese. The answer is short: a remembered fact said once, at most a few items."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hub.brain.base import Turn
from hub.brain.replies import RECALL_CHARS, RECALL_ITEMS, say
from hub.brain.rules import RuleBrain
from hub.brain.tasks import TaskStore
from hub.memory.home import open_memory
from hub.memory.index import MemoryIndex
from hub.memory.timeline_recall import (
    TimelineIndexer,
    cursor_path,
    read_timeline,
    timeline_item,
    told,
)
from hub.timeline import NOT_UNDERSTOOD, HubStore
from hub.turns.delivery import Delivery, Piece
from models.embed import Embedder, shared_embedder
from protos.clock import now_ms


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return shared_embedder()


@dataclass
class Hub:
    """The parts of the hub one turn goes through: timeline, brain, delivery, indexer."""

    timeline: HubStore
    brain: RuleBrain
    delivery: Delivery
    indexer: TimelineIndexer
    index: MemoryIndex
    ids: itertools.count[int]

    async def say(self, text: str) -> str:
        n = next(self.ids)
        uid = f"u-{n}"
        ts = now_ms()
        adm = self.timeline.admit_utterance(
            utterance_id=uid,
            device="glasses",
            text=text,
            ts_ms=ts,
            received_ms=ts,
            trace_id=f"t-{n}",
            meta={"scope": "owner", "admitted": 1},
            replay_state=None,
        )
        # the question is in the index before it is answered (a slow answer, a fast indexer)
        await asyncio.to_thread(self.indexer.catch_up)
        turn = Turn(text, owner="owner", scope="owner", trace_id=adm.trace_id, turn_id=uid)
        texts = []
        async for c in self.brain.turn(turn):
            await self.delivery.deliver(
                adm, f"r-{n}", [Piece(c.text, c.final, c.task_id, c.brain, c.intent)], start=c.index
            )
            texts.append(c.text)
            if c.final:
                break
        await asyncio.to_thread(self.indexer.catch_up)  # the reply too
        return " ".join(texts)


@asynccontextmanager
async def hub(tmp: Path, embedder: Embedder) -> AsyncIterator[Hub]:
    from hub.gateway import open_gateway
    from tests.brain_kit import BOOK, PACKAGES

    home = tmp / "home"
    home.mkdir()
    timeline = HubStore(home / "hub.db")
    index = MemoryIndex.for_home(home, embedder=embedder, clock=now_ms)
    memory = open_memory(home, index=index)
    indexer = TimelineIndexer(read_timeline(timeline), index, cursor_path(home))
    state = tmp / "package-state"
    state.mkdir()
    env = {
        "YIMI_STATE_DIR": str(state),
        "YIMI_MEMORY_HOME": str(home),
        "YIMI_MODEL_LOCATION": "local",
    }

    async def nothing(*_a: Any, **_k: Any) -> None:
        return None

    delivery = Delivery(
        timeline, send=nothing, hold=lambda _e: None, commit=lambda _o: None, gateway=lambda: None
    )
    store = TaskStore(tmp / "tasks.db")
    try:
        async with (
            open_gateway(
                tmp / "gateway",
                packages=[PACKAGES["memory"]],
                env_for=lambda _m, _v: env,
                variant="real",
                durable=False,
            ) as gw,
            RuleBrain(gw, store, contacts=BOOK) as brain,
        ):
            yield Hub(timeline, brain, delivery, indexer, index, itertools.count(1))
    finally:
        store.close()
        memory.close()
        timeline.close()


def test_told_is_the_owners_words_not_questions_nor_replies() -> None:
    assert told("utterance", "Remember I don't eat cilantro.", "YimiRemember")
    assert told("utterance", "the dentist moved to West Lake Road")
    assert not told("utterance", "Tell me what you remember about cilantro", "YimiRecall")
    assert not told("utterance", "What do you remember about Ceylon Troop?")  # a model's turn
    assert not told("utterance", "关于香菜你记得什么")
    assert not told("reply", "I'll remember: I don't eat cilantro.")
    assert told("note", "buy oat milk")


@pytest.mark.slow
async def test_recall_answers_with_what_was_told_in_english(
    tmp_path: Path, embedder: Embedder
) -> None:
    async with hub(tmp_path, embedder) as h:
        assert "I'll remember" in await h.say("Yimi, remember I don't eat cilantro.")
        await h.say("Yimi, remember I don't eat cilantro.")  # the same fact twice
        first = await h.say("Yimi, what do you remember about cilantro?")
        again = await h.say("Yimi, what do you remember about cilantro?")
        for answer in (first, again):
            assert answer == "About cilantro I remember: I don't eat cilantro.", answer
        # said in passing (no fact): the owner's words answer — not the questions about it
        # (nor this one), not the hub's reply to it ("I heard: …") nor its earlier answers
        heard = await h.say("The dentist moved to West Lake Road.")
        assert heard.startswith("I heard: The dentist moved")
        await h.say("What do you remember about the dentist?")
        answer = await h.say("What do you remember about the dentist?")
        assert answer.startswith("About the dentist I remember:"), answer
        assert "The dentist moved to West Lake Road" in answer
        for echo in ("What do you remember", "I heard", "I remember: 20", "can't do that"):
            assert echo not in answer.removeprefix("About the dentist I remember:"), answer
        lines = answer.removeprefix("About the dentist I remember: ")
        assert len(lines) <= RECALL_CHARS["en"] + 1 and lines.count(";") < RECALL_ITEMS
        # the intent is on the utterance's timeline entry, recorded with its reply
        assert h.timeline.admitted("u-3").meta["intent"] == "YimiRecall"  # type: ignore[union-attr]
        assert h.timeline.admitted("u-1").meta["intent"] == "YimiRemember"  # type: ignore[union-attr]
        assert "intent" not in h.timeline.admitted("u-5").meta  # type: ignore[union-attr]
        # its answer says so on the reply, and stays out of the recall index (the request
        # heard back and the list of what the hub can do); understood replies go in
        intents = {m.entry.id: m.intent for m in h.timeline.entries_with_meta()}
        assert intents["r-5"] == NOT_UNDERSTOOD and intents["r-1"] == "YimiRemember"
        indexed = set(h.index.ids())
        assert timeline_item("u-5") in indexed and timeline_item("r-5") not in indexed
        assert {timeline_item("u-1"), timeline_item("r-1")} <= indexed


@pytest.mark.slow
async def test_recall_answers_with_what_was_told_in_chinese(
    tmp_path: Path, embedder: Embedder
) -> None:
    async with hub(tmp_path, embedder) as h:
        assert "我记住了" in await h.say("依米，记住我不吃香菜")
        first = await h.say("关于香菜你记得什么")
        again = await h.say("关于香菜你记得什么")
        for answer in (first, again):
            assert answer == "关于香菜，我记得：我不吃香菜。", answer
        heard = await h.say("牙医诊所搬到了西湖路")
        assert heard.startswith("我听到的是：牙医诊所搬到了西湖路")
        await h.say("关于牙医你记得什么")
        answer = await h.say("关于牙医你记得什么")
        assert answer.startswith("关于牙医，我记得："), answer
        lines = answer.removeprefix("关于牙医，我记得：")
        assert "牙医诊所搬到了西湖路" in lines, answer
        for echo in ("你记得什么", "我听到的是", "我记得", say("unknown", "zh")[:6]):
            assert echo not in lines, answer
        assert len(lines) <= RECALL_CHARS["zh"] + 1
