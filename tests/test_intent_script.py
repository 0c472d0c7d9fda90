"""A request without any character of a language's script is matched against only the
templates that can match it (hub/brain/intents/engine.py ``_without_script``): the results
are the ones the whole template set gives, so no sentence of the labelled sets is understood
differently, and the cross-language try costs a few templates instead of hundreds."""

from __future__ import annotations

from hassil import Intents, recognize_all

from hub.brain.intents.engine import HA_LANG, IntentEngine, _has_script, _lists_in_script
from hub.brain.intents.text import Lang
from tests.intent_eval import fixture_lists
from tests.intent_set import LANGS, load_set

Found = list[tuple[str, list[tuple[str, str]]]]


def _results(
    engine: IntentEngine, intents_by_lang: dict[Lang, Intents], text: str, lang: Lang
) -> Found:
    live = engine._live
    return [
        (r.intent.name, sorted((k, str(v.value)) for k, v in r.entities.items()))
        for r in recognize_all(
            text, intents_by_lang[lang], slot_lists=dict(live.lists), language=HA_LANG[lang]
        )
    ]


def test_the_scriptless_templates_give_what_all_templates_give() -> None:
    engine = IntentEngine(fixture_lists())
    full, scriptless = engine._intents, engine._scriptless
    sizes = {
        lang: sum(len(d.sentences) for i in scriptless[lang].intents.values() for d in i.data)
        for lang in LANGS
    }
    assert all(0 < n < 50 for n in sizes.values()), sizes
    texts = [s.text for lang in LANGS for s in load_set(lang)]
    texts += ["kitchen", "Ｔｕｒｎ ｏｎ the fan", "Ｔｕｒｎ ｏｎ", "50", "OK", "好的", "red"]
    # a name and a value of a list whose values are all in one script ("{name}的颜色{color}",
    # "{name}是{on_off_states}"): only that script can match them
    texts += ["kitchen light red", "desk lamp on", "kitchen light 4000K", "前门 locked"]
    texts += ["台灯 红色", "台灯开着", "desk lamp 打开", "kitchen light 50%"]
    compared = 0
    for text in texts:
        for lang in LANGS:
            if _has_script(text, lang):
                continue
            compared += 1
            assert _results(engine, scriptless, text, lang) == _results(engine, full, text, lang), (
                text,
                lang,
            )
    assert compared >= 300, compared


def test_which_requests_hold_a_script() -> None:
    assert _has_script("Turn", "en") and not _has_script("打开灯", "en")
    assert _has_script("打开 light", "zh") and not _has_script("turn on 50%", "zh")


def test_a_template_that_needs_a_value_in_the_script_is_left_out() -> None:
    engine = IntentEngine(fixture_lists())
    zh = {
        str(s.text)
        for i in engine._scriptless["zh"].intents.values()
        for d in i.data
        for s in d.sentences
    }
    assert not any("{color}" in t or "{on_off_states" in t for t in zh), zh
    assert any("{color_temperature:temperature}" in t for t in zh)  # a number: any script
    in_script = _lists_in_script(engine._intents["zh"], "zh")
    assert {"color", "on_off_states"} <= in_script
    assert not {"name", "area", "contact"} & in_script  # the home's own lists: never judged
