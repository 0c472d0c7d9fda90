"""The built-in rule-based brain over the real gateway (packages' fake servers) and the
intent engine: every intent handler in English and in Chinese, replies in the turn's
language with no implementation detail in the words, guests, consent, the honest answer to
what it cannot do, and a restart in the middle."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from hub.brain.base import Turn, collect
from hub.brain.replies import REPLIES, say, spoken_date, spoken_time
from hub.brain.rules import AddressBook, Contact, RuleBrain
from hub.brain.slots import Device
from hub.brain.tasks import TaskStore
from hub.memory.context import Snippet, StaticSource
from tests.brain_kit import BOOK, Events, fake_gateway
from tests.gateway_kit import Phone, RecordingCourier

NOTES = StaticSource("notes", [Snippet("Meeting notes: ship on Friday.", "medium")])
TIMELINE = StaticSource(
    "timeline", [Snippet("09:00 stand-up", "low"), Snippet("13:00 lunch with Dana", "low")]
)
NOW = dt.datetime(2026, 12, 1, 17, 3)
BOOK2 = AddressBook([Contact("Dana Lee", "dana@example.org", ("colleague", "同事", "达娜"))])


class PeriodTimeline:
    """A timeline source that says which period it was asked for."""

    name = "timeline"

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def fetch(self, query: str) -> list[Snippet]:
        self.asked.append(query)
        return [Snippet(f"08:00 {query} entry", "low")]


def test_address_book() -> None:
    assert BOOK.find("my colleague").email == "dana@example.org"  # type: ignore[union-attr]
    assert BOOK.find("Dana").name == "Dana Lee"  # type: ignore[union-attr]
    assert BOOK.find("the boss") is None
    assert AddressBook().find("Dana") is None
    assert [c.name for c in BOOK.all()] == ["Dana Lee"]


def test_every_reply_has_both_languages() -> None:
    for key, texts in REPLIES.items():
        assert set(texts) == {"en", "zh"}, key
        assert all(t.strip() for t in texts.values()), key
    assert "rule-based" not in " ".join(t for v in REPLIES.values() for t in v.values())


def test_time_and_date_spoken_naturally() -> None:
    assert spoken_time(NOW, "en") == "5:03 pm"
    assert spoken_time(NOW, "zh") == "下午五点零三分"
    assert spoken_time(dt.time(9, 30), "zh") == "上午九点半"
    assert spoken_time(dt.time(14, 0), "zh") == "下午两点"
    assert spoken_time(dt.time(0, 15), "en") == "12:15 am"
    assert spoken_date(NOW.date(), "en") == "Tuesday, 1 December 2026"
    assert spoken_date(NOW.date(), "zh") == "2026年12月1日，星期二"


@asynccontextmanager
async def rule_world(
    tmp: Path, courier: Any = None
) -> AsyncIterator[tuple[RuleBrain, Any, Events]]:
    events = Events()
    async with fake_gateway(tmp, courier=courier) as gw:
        store = TaskStore(tmp / "tasks.db")
        try:
            async with RuleBrain(
                gw, store, contacts=BOOK2, on_event=events, now=lambda: NOW
            ) as brain:
                yield brain, gw, events
        finally:
            store.close()


async def test_english_requests_through_the_gateway(tmp_path: Path) -> None:
    courier = RecordingCourier()
    async with rule_world(tmp_path, courier) as (brain, gw, events):

        async def say_(text: str, **kw: Any) -> str:
            kw.setdefault("sources", [NOTES, TIMELINE])
            reply = await collect(brain.turn(Turn(text, **kw)))
            assert "rule-based" not in reply and "[" not in reply, reply
            return reply

        assert "I'll remember: I don't eat cilantro" in await say_(
            "Yimi, remember I don't eat cilantro"
        )
        assert "I don't eat cilantro" in await say_("what do you remember about cilantro")
        light = await say_("turn on the kitchen light")
        assert "Turned Kitchen light on" in light and "Front door" not in light
        assert "09:00 stand-up; 13:00 lunch with Dana" in await say_("what's on my timeline")
        assert await say_("what time is it") == "It's 5:03 pm."
        assert await say_("what's the date today") == "Today is Tuesday, 1 December 2026."
        assert "Not yet: timers" in await say_("set a timer for 5 minutes")
        assert await say_("never mind") == "OK."
        assert "Here is what I can do" in await say_("what can you do")
        unknown = await say_("write me a poem", turn_id="t-poem")
        assert unknown == f"I heard: write me a poem. {say('unknown', 'en')}"
        assert unknown.endswith(
            "I can't do that yet — here is what I can do: remember and "
            "recall things, e-mail a contact, control your devices, read your "
            "timeline, keep your shopping and to-do lists, tell the time and "
            "date, and order food."
        )
        assert brain.store.require("t-poem").spec["brain"] == "rule-based"
        assert gw.ledger.task_receipts("t-poem") == []  # no action
        waiting = await say_("Yimi, e-mail the meeting notes to my colleague", turn_id="t-mail")
        assert "approval" in waiting and "dana@example.org" in waiting
        assert brain.store.require("t-mail").state == "waiting_for_consent"
        card = courier.shown[-1]
        assert card.target == "dana@example.org" and "ship on Friday" in card.preview
        phone = Phone()
        _, receipt = await phone.answer(gw, phone.sign(card))
        assert receipt is not None
        await brain.on_receipt(receipt)
        assert brain.store.require("t-mail").state == "done"
        final = events.of("t-mail")[-1]
        assert final.state == "done" and "dana@example.org" in final.text
        assert brain.store.history_of_states("t-mail") == [
            "received",
            "admitted",
            "thinking",
            "acting",
            "waiting_for_consent",
            "acting",
            "verifying",
            "done",
        ]


async def test_chinese_requests_answered_in_chinese(tmp_path: Path) -> None:
    async with rule_world(tmp_path) as (brain, gw, _):

        async def say_(text: str, **kw: Any) -> str:
            kw.setdefault("sources", [NOTES, TIMELINE])
            return await collect(brain.turn(Turn(text, **kw)))

        assert "好的，我记住了：我不吃香菜" in await say_("依米，记住我不吃香菜")
        assert "我不吃香菜" in await say_("关于香菜你记得什么")
        assert await say_("现在几点") == "现在是下午五点零三分。"
        assert await say_("今天几号") == "今天是2026年12月1日，星期二。"
        assert await say_("算了") == "好的。"
        assert "还不行" in await say_("设一个五分钟的计时器")
        assert await say_("你能做什么") == say("help", "zh")
        assert "09:00 stand-up；13:00 lunch with Dana" in await say_("我今天的时间线上有什么")
        unknown = await say_("给我讲个笑话", turn_id="t-joke")
        assert unknown == "我听到的是：给我讲个笑话。" + say("unknown", "zh")
        assert say("unknown", "zh").startswith("这个我还做不到。我能做的有：")
        assert gw.ledger.task_receipts("t-joke") == []
        mail = await say_("给同事发邮件说我迟到了", turn_id="t-zh-mail")
        assert "需要你批准" in mail and "dana@example.org" in mail
        # the language the ASR heard wins over the script of the words
        assert await say_("what time is it", language="zh") == "现在是下午五点零三分。"


async def test_lists_in_both_languages(tmp_path: Path) -> None:
    async with rule_world(tmp_path) as (brain, gw, _):

        async def say_(text: str, **kw: Any) -> str:
            return await collect(brain.turn(Turn(text, **kw)))

        assert await say_("add milk to my shopping list") == "Added milk to your shopping list."
        assert await say_("把鸡蛋加到购物清单") == "已把鸡蛋加到购物清单。"
        assert "milk is already" in await say_("put milk on the shopping list")
        assert await say_("what's on my shopping list") == "On your shopping list: milk; 鸡蛋."
        assert await say_("购物清单上有什么") == "你的购物清单上有：milk；鸡蛋。"
        done = await say_("check milk off the shopping list", turn_id="t-done")
        assert done == "Checked milk off your shopping list."
        assert "is not on your shopping list" in await say_("check bread off my shopping list")
        assert await say_("what's on my shopping list") == "On your shopping list: 鸡蛋."
        assert "to-do list" in await say_("add call the bank to my todo list")
        # every change went through the gateway as a call of the in-hub lists package
        (r,) = gw.ledger.task_receipts("t-done")
        assert (r.package, r.tool, r.status) == ("lists", "complete_item", "succeeded")
        assert [i.item for i in brain.lists.items("shopping")] == ["鸡蛋"]


async def test_timeline_periods(tmp_path: Path) -> None:
    async with rule_world(tmp_path) as (brain, _gw, _):
        src = PeriodTimeline()
        y = await collect(brain.turn(Turn("what was on my timeline yesterday", sources=[src])))
        assert y == "On your timeline for yesterday: 08:00 yesterday entry."
        w = await collect(brain.turn(Turn("上周的时间线", sources=[src])))
        assert w == "你上周的时间线上有：08:00 last_week entry。"
        assert src.asked == ["yesterday", "last_week"]


async def test_devices_and_states(tmp_path: Path) -> None:
    async with rule_world(tmp_path) as (brain, gw, _):

        async def say_(text: str, **kw: Any) -> str:
            return await collect(brain.turn(Turn(text, **kw)))

        assert "Turned Kettle off" in await say_("switch the kettle off")
        assert await say_("is the kettle on") == "No, Kettle is off."
        assert "21.5" in await say_("what is the living room temperature")
        off = await say_("关掉Kitchen light", turn_id="t-zh-off")
        assert off == "已关闭Kitchen light。", off
        nothing = await say_("turn on the garage door", turn_id="t-none")
        assert "rule-based" not in nothing and gw.ledger.task_receipts("t-none") == []


async def test_a_guest_can_neither_send_nor_read_memory(tmp_path: Path) -> None:
    courier = RecordingCourier()
    async with rule_world(tmp_path, courier) as (brain, _gw, _):
        await collect(brain.turn(Turn("remember the code is 1234")))
        for text in (
            "what do you remember about the code",
            "send an e-mail to Dana saying hello",
            "remember x",
        ):
            reply = await collect(brain.turn(Turn(text, scope="guest")))
            assert "may not" in reply and "1234" not in reply, reply
        for text in ("你记得关于密码的什么", "记住密码是5678"):
            reply = await collect(brain.turn(Turn(text, scope="guest")))
            assert "不允许" in reply and "1234" not in reply, reply
        assert courier.shown == []
        uncertain = await collect(
            brain.turn(Turn("turn on the kitchen light", scope="owner_uncertain"))
        )
        assert "may not" in uncertain  # set_state is owner-only


async def test_forget(tmp_path: Path) -> None:
    courier = RecordingCourier()
    async with rule_world(tmp_path, courier) as (brain, gw, _):
        await collect(brain.turn(Turn("remember I don't eat cilantro")))
        reply = await collect(brain.turn(Turn("forget that I don't eat cilantro", turn_id="t-f")))
        assert reply.startswith("Forgotten: owner: I don't eat cilantro."), reply
        assert brain.store.require("t-f").state == "done"
        (r,) = [r for r in gw.ledger.task_receipts("t-f") if r.tool == "forget"]
        assert r.status == "succeeded" and courier.shown == []  # the owner asked: no card
        after = await collect(brain.turn(Turn("what do you remember about cilantro")))
        assert after == "I have nothing about cilantro."
        assert await collect(brain.turn(Turn("忘掉香菜"))) == "关于香菜，我没有可以忘掉的记忆。"


async def test_restart_resumes_a_task_cut_after_its_first_step(tmp_path: Path) -> None:
    async with rule_world(tmp_path) as (brain, gw, _):
        await brain.slots.refresh()
        _task, _ = brain.store.create(
            "t-cut",
            trace_id="tr",
            run_id="t-cut",
            owner="owner",
            scope="owner",
            kind="turn",
            spec={
                "brain": "rule-based",
                "intent": "HassTurnOn",
                "slots": {"name": "switch.kettle"},
                "lang": "en",
            },
        )
        brain.store.walk("t-cut", "admitted", "thinking")
        brain.store.move("t-cut", "acting")
        brain.store.start_step(
            "t-cut",
            "switch",
            "t-cut.switch",
            {"entity": "switch.kettle", "state": "on", "owner_requested": True},
        )
        # the hub dies here
    async with rule_world(tmp_path) as (brain, gw, events):
        assert await brain.resume() == ["t-cut"]
        assert brain.store.require("t-cut").state == "done"
        calls = [
            r for r in gw.ledger.db.execute("SELECT task_id, tool FROM calls") if r[0] == "t-cut"
        ]
        assert calls == [("t-cut", "set_state")]
        assert "kettle" in events.of("t-cut")[-1].text.lower()


async def test_restart_while_waiting_for_a_card_answered_meanwhile(tmp_path: Path) -> None:
    courier = RecordingCourier()
    async with rule_world(tmp_path, courier) as (brain, gw, _):
        await collect(brain.turn(Turn("send an e-mail to Dana saying I'm late", turn_id="t-w")))
        assert brain.store.require("t-w").state == "waiting_for_consent"
    card = courier.shown[0]
    # the phone answers while the brain is down (the gateway executes exactly once)
    async with fake_gateway(tmp_path) as gw:
        phone = Phone()
        _, receipt = await phone.answer(gw, phone.sign(card))
        assert receipt is not None and receipt.status == "succeeded"
    async with rule_world(tmp_path) as (brain, gw, events):
        assert await brain.resume() == ["t-w"]
        assert brain.store.require("t-w").state == "done"
        assert "dana@example.org" in events.of("t-w")[-1].text
        assert len(list(gw.ledger.db.execute("SELECT 1 FROM calls WHERE tool='send_email'"))) == 1
        # a re-delivered utterance does not start the task again
        again = await collect(
            brain.turn(Turn("send an e-mail to Dana saying I'm late", turn_id="t-w"))
        )
        assert "dana@example.org" in again and len(courier.shown) == 1


@pytest.mark.parametrize("text", ["I turned on the light yesterday", "don't turn on the kettle"])
async def test_near_misses_never_act(tmp_path: Path, text: str) -> None:
    async with rule_world(tmp_path) as (brain, gw, _):
        reply = await collect(brain.turn(Turn(text, turn_id="t-near")))
        assert reply == f"I heard: {text}. {say('unknown', 'en')}"
        assert gw.ledger.task_receipts("t-near") == []


HA_DEVICES = [
    Device("light.kitchen", "Kitchen light", "light", "kitchen", ("厨房灯",)),
    Device("light.counter", "Counter light", "light", "kitchen"),
    Device("switch.kettle", "Kettle", "switch", "kitchen", ("水壶",)),
    Device("cover.bedroom_blinds", "Bedroom blinds", "cover", "bedroom", ("卧室窗帘",)),
    Device("media_player.speaker", "Speaker", "media_player", "living_room", ("音箱",)),
]


async def test_areas_levels_and_volume_map_to_set_state(tmp_path: Path) -> None:
    """The ``home`` contract: ``set_state(entity, state="", brightness=None, position=None,
    volume=None)``; an area with a domain is every such device of the area. (The fake home
    here only switches: the arguments are what is asserted.)"""
    async with rule_world(tmp_path) as (brain, _gw, _):
        brain.slots.devices = list(HA_DEVICES)
        brain.slots._done_at = brain.slots.clock()  # fresh: no listing is read
        cases: list[tuple[str, list[str], dict[str, Any]]] = [
            (
                "turn off the lights in the kitchen",
                ["light.kitchen", "light.counter"],
                {"state": "off"},
            ),
            ("关掉厨房的灯", ["light.kitchen", "light.counter"], {"state": "off"}),
            ("set the kitchen light to 50%", ["light.kitchen"], {"brightness": 50}),
            ("set the bedroom blinds to 30%", ["cover.bedroom_blinds"], {"position": 30}),
            ("把卧室窗帘开到百分之三十", ["cover.bedroom_blinds"], {"position": 30}),
            ("set the volume to 20", ["media_player.speaker"], {"volume": 20}),
            ("把音箱音量调到百分之二十", ["media_player.speaker"], {"volume": 20}),
        ]
        for i, (text, entities, args) in enumerate(cases):
            tid = f"t-dev{i}"
            await collect(brain.turn(Turn(text, turn_id=tid)))
            steps = [s for s in brain.store.steps(tid) if s.step.startswith("switch")]
            got = [
                (s.args["entity"], {k: v for k, v in s.args.items() if k in args}) for s in steps
            ]
            assert got == [(e, args) for e in entities], (text, got)
            assert all(s.args.get("owner_requested") is True for s in steps)


async def test_a_request_answered_at_once_is_one_task_transaction(tmp_path: Path) -> None:
    """The time, help or a request not understood needs no step: its task is created
    answered in one transaction (not created, then finished in a second), with the same
    states, report and event (its steps are not read: it has none); a redelivered turn is
    answered from the task as before."""
    async with rule_world(tmp_path) as (brain, _gw, events):
        ran: list[str] = []

        def trace(_cursor: Any, sql: str, _bindings: Any) -> bool:
            ran.append(sql.lstrip().upper())
            return True

        brain.store.db.exec_trace = trace
        for turn_id, text, expected in (
            ("t-poem", "write me a poem", f"I heard: write me a poem. {say('unknown', 'en')}"),
            ("t-time", "what time is it", "It's 5:03 pm."),
            ("t-help", "what can you do", say("help", "en")),
            ("t-zh", "现在几点", say("time.now", "zh", time=spoken_time(NOW, "zh"))),
        ):
            ran.clear()
            reply = await collect(brain.turn(Turn(text, turn_id=turn_id)))
            assert reply == expected
            begins = [q for q in ran if q.startswith("BEGIN")]
            assert len(begins) == 1, (turn_id, ran)
            assert not [q for q in ran if "FROM STEPS" in q], ran  # no step: none read
            task = brain.store.require(turn_id)
            assert task.state == "done" and task.result == {"report": reply}
            assert brain.store.history_of_states(turn_id) == [
                "received",
                "admitted",
                "thinking",
                "verifying",
                "done",
            ]
            assert [(e.state, e.text) for e in events.of(turn_id)] == [("done", reply)]
            again = await collect(brain.turn(Turn(text, turn_id=turn_id)))
            assert again == reply  # redelivered: answered from the task, nothing moved
            assert len(brain.store.history_of_states(turn_id)) == 5
            assert len(events.of(turn_id)) == 1
