"""The built-in rule-based brain over the real gateway (packages' fake servers): its fixed
set of requests, its name in every reply, guests, consent, and a restart in the middle."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from hub.brain.base import Turn, collect
from hub.brain.rules import PREFIX, AddressBook, RuleBrain, parse
from hub.brain.tasks import TaskStore
from hub.memory.context import Snippet, StaticSource
from tests.brain_kit import BOOK, Events, fake_gateway
from tests.gateway_kit import Phone, RecordingCourier

NOTES = StaticSource("notes", [Snippet("Meeting notes: ship on Friday.", "medium")])
TIMELINE = StaticSource(
    "timeline", [Snippet("09:00 stand-up", "low"), Snippet("13:00 lunch with Dana", "low")]
)


@pytest.mark.parametrize(
    ("text", "kind", "slots"),
    [
        ("Yimi, remember I don't eat cilantro", "remember", {"fact": "I don't eat cilantro"}),
        (
            "please remember that the bins go out on Monday.",
            "remember",
            {"fact": "the bins go out on Monday"},
        ),
        ("What do you remember about cilantro?", "recall", {"query": "cilantro"}),
        ("recall Dana", "recall", {"query": "Dana"}),
        (
            "Yimi, e-mail the meeting notes to my colleague",
            "send",
            {"what": "the meeting notes", "to": "my colleague"},
        ),
        ("send an e-mail to Dana saying I'm late", "send", {"to": "Dana", "body": "I'm late"}),
        ("message Dana: running late", "send", {"to": "Dana", "body": "running late"}),
        ("turn on the kitchen light", "device", {"state": "on", "device": "kitchen light"}),
        ("switch the kettle off", "device", {"device": "kettle", "state": "off"}),
        ("what's on my timeline today?", "timeline", {}),
        ("write me a poem", "unknown", {}),
    ],
)
def test_the_fixed_set_of_requests(text: str, kind: str, slots: dict[str, str]) -> None:
    got = parse(text)
    assert (got.kind, got.slots) == (kind, slots)


def test_address_book() -> None:
    assert BOOK.find("my colleague").email == "dana@example.org"  # type: ignore[union-attr]
    assert BOOK.find("Dana").name == "Dana Lee"  # type: ignore[union-attr]
    assert BOOK.find("the boss") is None
    assert AddressBook().find("Dana") is None


@asynccontextmanager
async def rule_world(
    tmp: Path, courier: Any = None
) -> AsyncIterator[tuple[RuleBrain, Any, Events]]:
    events = Events()
    async with fake_gateway(tmp, courier=courier) as gw:
        store = TaskStore(tmp / "tasks.db")
        try:
            async with RuleBrain(gw, store, contacts=BOOK, on_event=events) as brain:
                yield brain, gw, events
        finally:
            store.close()


async def test_every_request_through_the_gateway_named_rule_based(tmp_path: Path) -> None:
    courier = RecordingCourier()
    async with rule_world(tmp_path, courier) as (brain, gw, events):

        async def say(text: str, **kw: Any) -> str:
            reply = await collect(brain.turn(Turn(text, sources=[NOTES, TIMELINE], **kw)))
            assert reply.startswith(PREFIX)
            return reply

        assert "I'll remember: I don't eat cilantro" in await say(
            "Yimi, remember I don't eat cilantro"
        )
        assert "owner: I don't eat cilantro" in await say("what do you remember about cilantro")
        light = await say("turn on the kitchen light")
        assert "Turned Kitchen light on" in light and "Front door" not in light
        assert "09:00 stand-up; 13:00 lunch with Dana" in await say("what's on my timeline")
        help_text = await say("write me a poem")
        assert "rule-based assistant, not a language model" in help_text
        waiting = await say("Yimi, e-mail the meeting notes to my colleague", turn_id="t-mail")
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
        assert final.state == "done" and final.text.startswith(PREFIX)
        assert "dana@example.org" in final.text
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


async def test_a_guest_can_neither_send_nor_read_memory(tmp_path: Path) -> None:
    courier = RecordingCourier()
    async with rule_world(tmp_path, courier) as (brain, _gw, _):
        await collect(brain.turn(Turn("remember the code is 1234")))
        for text in ("what do you remember about the code", "message Dana: hello", "remember x"):
            reply = await collect(brain.turn(Turn(text, scope="guest")))
            assert "may not" in reply and "1234" not in reply
        assert courier.shown == []
        uncertain = await collect(
            brain.turn(Turn("turn on the kitchen light", scope="owner_uncertain"))
        )
        assert "may not" in uncertain  # set_state is owner-only


async def test_restart_resumes_a_task_cut_after_its_first_step(tmp_path: Path) -> None:
    async with rule_world(tmp_path) as (brain, gw, _):
        task, _ = brain.store.create(
            "t-cut",
            trace_id="tr",
            run_id="t-cut",
            owner="owner",
            scope="owner",
            kind="turn",
            spec={
                "brain": "rule-based",
                "intent": "device",
                "slots": {"device": "kettle", "state": "on"},
            },
        )
        brain.store.walk("t-cut", "admitted", "thinking")
        await brain.core.step(task, "devices", "home", "list_devices", {}, lookup=True)
        # the hub dies here
    async with rule_world(tmp_path) as (brain, gw, events):
        assert await brain.resume() == ["t-cut"]
        assert brain.store.require("t-cut").state == "done"
        calls = list(gw.ledger.db.execute("SELECT task_id, tool FROM calls ORDER BY created_ms"))
        assert calls == [("t-cut#lookup", "list_devices"), ("t-cut", "set_state")]
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
        assert again.startswith(PREFIX) and len(courier.shown) == 1
