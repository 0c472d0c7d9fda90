"""The offline intent engine (issue 14): contract API, language, numerals, stripping, updates."""

from __future__ import annotations

import pytest

from hub.brain.intents import (
    LOCAL_CONFIDENCE,
    IntentEngine,
    Named,
    SlotLists,
    detect_language,
    parse_number,
    strip_request,
    zh_to_int,
)

LISTS = SlotLists(
    contacts=(
        Named("Dana Lee", ("Dana Lee", "Dana", "达娜", "my colleague")),
        Named("Mom", ("Mom", "妈妈")),
    ),
    devices=(
        Named("light.kitchen", ("Kitchen light", "厨房灯"), "light", "kitchen"),
        Named("switch.kettle", ("Kettle", "水壶"), "switch", "kitchen"),
    ),
    areas=(Named("kitchen", ("kitchen", "厨房")),),
    shops=(Named("lotus-kitchen", ("Lotus Kitchen", "莲花厨房")),),
)


@pytest.fixture(scope="module")
def engine() -> IntentEngine:
    return IntentEngine(LISTS)


def test_detect_language() -> None:
    assert detect_language("turn on the light") == "en"
    assert detect_language("打开 light") == "zh"
    assert detect_language("") == "en"


def test_numerals() -> None:
    assert zh_to_int("三十") == 30
    assert zh_to_int("两") == 2
    assert zh_to_int("十五") == 15
    assert zh_to_int("一百零五") == 105
    assert zh_to_int("两万三千") == 23000
    assert zh_to_int("灯") is None
    assert parse_number("三十块") == 30
    assert parse_number("百分之五十") == 50
    assert parse_number("一半") == 50
    assert parse_number("三点五") == 3.5
    assert parse_number("thirty five dollars") == 35
    assert parse_number("$12.50") == 12.5


def test_wake_and_politeness_stripped() -> None:
    assert (
        strip_request("Hey Yimi, could you please turn on the light?", "en") == "turn on the light"
    )
    assert strip_request("依米，请帮我打开厨房灯。", "zh") == "打开厨房灯"
    assert strip_request("Justin is here", "en") == "Justin is here"


def test_contract_matches(engine: IntentEngine) -> None:
    m = engine.recognize("Yimi, please turn on the kitchen light")
    assert m is not None and m.intent == "HassTurnOn" and m.slots["name"] == "light.kitchen"
    assert m.lang == "en" and m.score >= LOCAL_CONFIDENCE and m.text == "turn on the kitchen light"
    m = engine.recognize("设置一个五分钟的计时器")
    assert (
        m is not None
        and m.intent == "HassStartTimer"
        and m.slots["minutes"] == 5
        and m.lang == "zh"
    )
    m = engine.recognize("email Dana that the meeting moved")
    assert m is not None and m.intent == "YimiSendMessage"
    assert dict(m.slots) == {"contact": "Dana Lee", "body": "the meeting moved"}


def test_near_misses_and_unknown_are_none(engine: IntentEngine) -> None:
    for text in (
        "don't turn on the kitchen light",
        "I turned on the kitchen light yesterday",
        "别开厨房灯",
        "tell me a joke",
        "",
        "   ",
    ):
        assert engine.recognize(text) is None, text


def test_update_makes_a_new_contact_recognisable(engine: IntentEngine) -> None:
    assert engine.recognize("email Zhang Wei that I am late") is None
    engine.update(
        SlotLists(
            contacts=(*LISTS.contacts, Named("Zhang Wei", ("Zhang Wei", "张伟"))),
            devices=LISTS.devices,
        )
    )
    m = engine.recognize("email Zhang Wei that I am late")
    assert m is not None and m.slots["contact"] == "Zhang Wei"
    m = engine.recognize("给张伟发消息说我晚点到")
    assert m is not None and m.slots["contact"] == "Zhang Wei" and m.slots["body"] == "我晚点到"
    engine.update(LISTS)
