"""The offline intent engine (issue 14): the labelled set's accuracy, no out-of-domain action,
and the contract API (INTENTS.md) — language, numerals, stripping, live updates, never raising.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hub.brain.intents import (
    LOCAL_CONFIDENCE,
    IntentEngine,
    Match,
    Named,
    SlotLists,
    detect_language,
    parse_number,
    strip_request,
    zh_to_int,
)
from tests.intent_eval import describe, evaluate, fixture_lists
from tests.intent_set import LANGS, SETS, Lang, load_set

TARGET = 0.95


@pytest.fixture(scope="module")
def engine() -> IntentEngine:
    return IntentEngine(fixture_lists())


@pytest.mark.parametrize("lang", LANGS)
def test_labelled_set_accuracy(engine: IntentEngine, lang: Lang) -> None:
    score = evaluate(engine, load_set(lang))
    report = describe(score.misses)
    assert score.intent_accuracy >= TARGET, report
    assert score.slot_accuracy >= TARGET, report
    assert score.ood >= 30


@pytest.mark.parametrize("which", ("probe", "fresh"))
@pytest.mark.parametrize("lang", LANGS)
def test_probe_set_accuracy(engine: IntentEngine, lang: Lang, which: str) -> None:
    """The probe sets (probe_{en,zh}.yaml, fresh_{en,zh}.yaml), written without reading the
    templates: how well the engine generalises to phrasings its templates were not written
    from."""
    score = evaluate(engine, load_set(lang, which))
    report = describe(score.misses)
    assert score.intent_accuracy >= TARGET, report
    assert score.slot_accuracy >= TARGET, report
    assert score.ood >= 25


@pytest.mark.parametrize("which", SETS)
@pytest.mark.parametrize("lang", LANGS)
def test_no_out_of_domain_sentence_acts(engine: IntentEngine, lang: Lang, which: str) -> None:
    acted = [
        (i.text, m.intent)
        for i in load_set(lang, which)
        if i.intent is None
        if (m := engine.recognize(i.text))
    ]
    assert acted == []


def test_detect_language() -> None:
    assert detect_language("turn on the light") == "en"
    assert detect_language("打开 the light") == "zh"
    assert detect_language("") == "en"
    assert detect_language("¿qué hora es?") == "en"


def test_chinese_numerals() -> None:
    assert zh_to_int("三十") == 30
    assert zh_to_int("两") == 2
    assert zh_to_int("十五") == 15
    assert zh_to_int("一百零五") == 105
    assert zh_to_int("两万三千") == 23000
    assert zh_to_int("灯") is None
    assert parse_number("三十块") == 30
    assert parse_number("十块钱") == 10
    assert parse_number("百分之五十") == 50
    assert parse_number("一半") == 50
    assert parse_number("三点五") == 3.5
    assert parse_number("thirty five dollars") == 35
    assert parse_number("$12.50") == 12.5
    assert parse_number("lots") is None


def test_numbers_in_sentences(engine: IntentEngine) -> None:
    cases: list[tuple[str, str, dict[str, object]]] = [
        ("设一个五分钟的计时器", "HassStartTimer", {"minutes": 5}),
        ("开一个两小时的计时器", "HassStartTimer", {"hours": 2}),
        ("把窗帘开到一半", "HassSetPosition", {"position": 50}),
        ("把厨房的灯亮度调到百分之三十", "HassLightSet", {"brightness": 30}),
        ("从莲花厨房点两份牛肉面，三十块以内", "YimiOrder", {"budget": 30.0}),
        ("set a timer for twenty minutes", "HassStartTimer", {"minutes": 20}),
        (
            "order three bagels from corner bakery for at most 10 euros",
            "YimiOrder",
            {"budget": 10.0},
        ),
    ]
    for text, intent, slots in cases:
        m = engine.recognize(text)
        assert m is not None and m.intent == intent, text
        for key, value in slots.items():
            assert m.slots[key] == value and type(m.slots[key]) is type(value), (text, key)


def test_wake_word_and_politeness_are_stripped(engine: IntentEngine) -> None:
    assert (
        strip_request("Hey Yimi, could you please turn on the light?", "en") == "turn on the light"
    )
    assert strip_request("依米，请帮我打开厨房灯。", "zh") == "打开厨房灯"
    assert strip_request("Justin is here", "en") == "Justin is here"
    for text in (
        "Yimi, please turn on the kitchen light",
        "hey yimi turn on the kitchen light please",
    ):
        m = engine.recognize(text)
        assert m is not None and m.text == "turn on the kitchen light", text
        assert dict(m.slots) == {"name": "light.kitchen"} and m.score >= LOCAL_CONFIDENCE
    m = engine.recognize("依米，麻烦你打开厨房灯，谢谢")
    assert m is not None and m.text == "打开厨房灯" and m.lang == "zh"


def test_match_is_read_only(engine: IntentEngine) -> None:
    m = engine.recognize("remember that I like green tea")
    assert isinstance(m, Match) and m.slots["fact"] == "I like green tea"
    with pytest.raises(TypeError):
        m.slots["fact"] = "x"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.intent = "x"  # type: ignore[misc]


def test_score_is_lower_when_a_wildcard_carries_the_sentence(engine: IntentEngine) -> None:
    device = engine.recognize("turn on the kitchen light")
    remember = engine.recognize("remember that the spare key is under the pot")
    zh = engine.recognize("记住备用钥匙在花盆底下")
    clause = engine.recognize("i'm going to bed turn off the kitchen light")
    assert device is not None and device.score == 1.0
    assert remember is not None and LOCAL_CONFIDENCE <= remember.score <= 1.0
    assert zh is not None and LOCAL_CONFIDENCE <= zh.score < 1.0
    assert clause is not None and clause.intent == "HassTurnOff" and clause.score < 1.0


def test_unknown_and_near_misses_are_none(engine: IntentEngine) -> None:
    for text in (
        "",
        "   ",
        "?!",
        "Yimi",
        "依米",
        "tell me a joke",
        "don't turn on the kitchen light",
        "I turned on the kitchen light yesterday",
        "should I turn off the kettle",
        "what is a kettle",
        "别开厨房灯",
        "我昨天打开了厨房灯",
        "水壶是什么",
        "turn on the garage door",
        "the blinds are broken",
        "the fan is too loud",
        "how much longer will this take",
        "my usual is coffee",
        "计时器停了",
        "计时器取消了吗",
        "窗帘坏了",
    ):
        assert engine.recognize(text) is None, text


def test_a_homes_only_device_of_a_kind_answers_to_the_kind() -> None:
    """ "the blinds", "the fan", "音箱" name the one cover / fan / speaker of a home; with two
    of a kind the word names neither (no guess); a device's own name always wins."""
    blinds = Named("cover.bedroom_blinds", ("Bedroom blinds", "卧室窗帘"), "cover", "bedroom")
    fan = Named("fan.desk", ("Desk fan", "台扇"), "fan", "study")
    one = IntentEngine(SlotLists(devices=(blinds, fan)))
    m = one.recognize("set the blinds halfway")
    assert m is not None and dict(m.slots) == {"name": "cover.bedroom_blinds", "position": 50}
    m = one.recognize("把风扇关掉")
    assert m is not None and m.intent == "HassTurnOff" and m.slots["name"] == "fan.desk"
    two = IntentEngine(
        SlotLists(devices=(blinds, fan, Named("cover.study", ("Study shades",), "cover")))
    )
    assert two.recognize("set the blinds halfway") is None
    m = two.recognize("turn off the fan")
    assert m is not None and m.slots["name"] == "fan.desk"


def test_default_list_names_are_added_to_the_hubs_lists() -> None:
    """A hub list with the id "shopping" / "todo" also answers to the default spoken forms
    ("grocery list", "to-do list", "购物列表") its own names leave out."""
    lists = SlotLists(lists=(Named("shopping", ("shopping",)), Named("todo", ("todo",))))
    eng = IntentEngine(lists)
    m = eng.recognize("what's on my grocery list")
    assert m is not None and dict(m.slots) == {"name": "shopping"}
    m = eng.recognize("add call the bank to my to-do list")
    assert m is not None and m.intent == "HassListAddItem" and m.slots["name"] == "todo"
    m = eng.recognize("购物列表上有什么")
    assert m is not None and m.intent == "YimiListRead" and m.slots["name"] == "shopping"


def test_update_makes_a_new_contact_recognisable(engine: IntentEngine) -> None:
    base = fixture_lists()
    assert engine.recognize("email Zhang Wei that I am late") is None
    try:
        engine.update(
            dataclasses.replace(
                base, contacts=(*base.contacts, Named("Zhang Wei", ("Zhang Wei", "张伟")))
            )
        )
        m = engine.recognize("email Zhang Wei that I am late")
        assert m is not None and dict(m.slots) == {"contact": "Zhang Wei", "body": "I am late"}
        m = engine.recognize("给张伟发消息说我晚点到")
        assert m is not None and m.slots["contact"] == "Zhang Wei" and m.slots["body"] == "我晚点到"
    finally:
        engine.update(base)
    assert engine.recognize("email Zhang Wei that I am late") is None


def test_a_repeated_request_is_not_matched_again(
    engine: IntentEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "What time is it" comes again and again: its outcome is kept (for these slot lists,
    among the last RECENT_REQUESTS requests), and hassil does not run for it again."""
    from hub.brain.intents import engine as engine_module

    runs: list[str] = []
    real = engine_module.recognize_all

    def counting(text: str, *args: object, **kwargs: object) -> object:
        runs.append(text)
        return real(text, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine_module, "recognize_all", counting)
    monkeypatch.setattr(engine_module, "RECENT_REQUESTS", 2)
    first = engine.recognize("turn on the kitchen light please")
    assert first is not None and runs
    matched = len(runs)
    assert engine.recognize("turn on the kitchen light please") is first
    assert engine.recognize("blorp the flange") is None  # not understood: kept too
    runs.clear()
    assert engine.recognize("blorp the flange") is None and runs == []
    assert engine.recognize("turn on the kitchen light please", "en") == first  # another key
    assert runs, "a request with its language given is its own key"
    runs.clear()
    engine.recognize("turn on the kitchen light please")  # the oldest of 2: gone
    assert len(runs) == matched


def test_new_device_and_empty_lists() -> None:
    empty = IntentEngine(SlotLists())
    assert empty.recognize("turn on the kitchen light") is None
    assert empty.recognize("what is the temperature") is None
    m = empty.recognize("add milk to the shopping list")
    assert m is not None and m.intent == "HassShoppingListAddItem" and m.slots["item"] == "milk"
    empty.update(
        SlotLists(devices=(Named("light.porch", ("porch light", "门廊灯"), "light", "porch"),))
    )
    m = empty.recognize("turn on the porch light")
    assert m is not None and m.intent == "HassTurnOn" and m.slots["name"] == "light.porch"
    m = empty.recognize("打开门廊灯")
    assert m is not None and m.slots["name"] == "light.porch"


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.one_of(
        st.text(max_size=80),
        st.text(alphabet="打开关厨房灯记住的了吗别 ，。！？0123456789%", max_size=30),
        st.lists(
            st.sampled_from(
                "turn on off the kitchen light remember that don't set timer for 5 minutes "
                "add to list yimi please , ? ! % 五 分钟 把 到".split()
            ),
            max_size=12,
        ).map(" ".join),
    )
)
def test_never_raises(engine: IntentEngine, text: str) -> None:
    result = engine.recognize(text)
    assert result is None or (isinstance(result, Match) and 0.0 <= result.score <= 1.0)
    if result is not None:
        assert result.lang in ("en", "zh")
        assert all(isinstance(v, str | int | float) for v in result.slots.values())


def test_mixed_scripts(engine: IntentEngine) -> None:
    m = engine.recognize("打开 kitchen light")
    assert m is not None and m.intent == "HassTurnOn" and m.slots["name"] == "light.kitchen"
    m = engine.recognize("turn on 厨房灯")
    assert m is not None and m.intent == "HassTurnOn" and m.slots["name"] == "light.kitchen"
    m = engine.recognize("给 Alice 发消息说 see you")
    assert m is not None and dict(m.slots) == {"contact": "Alice Chen", "body": "see you"}


# Phrasings beyond the labelled set (written for the engine, not labelled by the set's author):
# a regression guard for the templates' breadth.
MORE_PHRASINGS: list[tuple[str, str, dict[str, object]]] = [
    ("just so you know, I'm vegetarian", "YimiRemember", {"fact": "I'm vegetarian"}),
    ("shoot Dana an email saying I'll be late", "YimiSendMessage", {"contact": "Dana Lee"}),
    ("Text Mom: I'm boarding now", "YimiSendMessage", {"body": "I'm boarding now"}),
    ("I'll have my usual dinner", "YimiOrderSame", {"meal": "dinner"}),
    ("undo the order", "YimiUndo", {}),
    ("open the bedroom blinds halfway", "HassSetPosition", {"position": 50}),
    ("set an egg timer for 6 minutes", "HassStartTimer", {"minutes": 6, "name": "egg"}),
    ("Stop the tea timer", "HassCancelTimer", {"name": "tea"}),
    ("Put call the plumber on my to-do list", "HassListAddItem", {"name": "todo"}),
    ("Is the front door unlocked?", "HassGetState", {"state": "unlocked"}),
    ("顺便说一下，我吃素", "YimiRemember", {"fact": "我吃素"}),
    ("我说过大门密码是什么", "YimiRecall", {"query": "大门密码"}),
    ("我想从街角面包店买两个贝果", "YimiOrder", {"shop": "corner-bakery", "items": "两个贝果"}),
    ("再来一份一样的", "YimiOrderSame", {}),
    ("我可以问你什么", "YimiHelp", {}),
    ("把音量调低到十五", "HassSetVolume", {"volume_level": 15}),
    ("把卧室窗帘关到百分之十", "HassSetPosition", {"position": 10}),
    ("从绿碗点一份鸡肉饭和一杯柠檬水，不超过二十块", "YimiOrder", {"budget": 20.0}),
    ("把打电话给水管工加到待办清单", "HassListAddItem", {"item": "打电话给水管工", "name": "todo"}),
]


@pytest.mark.parametrize(("text", "intent", "slots"), MORE_PHRASINGS)
def test_more_phrasings(
    engine: IntentEngine, text: str, intent: str, slots: dict[str, object]
) -> None:
    m = engine.recognize(text)
    assert m is not None and m.intent == intent, text
    for key, value in slots.items():
        assert m.slots.get(key) == value, (text, key, dict(m.slots))


@pytest.mark.parametrize(
    "text",
    [
        "莲花厨房点什么好",
        "茶馆来不来",
        "你记住了吗",
        "remember when we went to Paris",
        "send mom a message",
    ],
)
def test_questions_dressed_as_commands_are_none(engine: IntentEngine, text: str) -> None:
    assert engine.recognize(text) is None
