"""Templates found through their required words (hub/brain/intents/prefilter.py) give what
all templates give: every result hassil yields, in the same order, for every sentence of the
labelled, probe and fresh sets in both languages — while hassil looks at a few dozen
templates instead of hundreds."""

from __future__ import annotations

import dataclasses

import pytest
from hassil import Intents, recognize_all
from hassil.intents import SlotList

from hub.brain.intents.engine import HA_LANG, IntentEngine, Named
from hub.brain.intents.prefilter import SUBSETS_CACHED, TemplateIndex, haystack
from hub.brain.intents.text import Lang
from tests.intent_eval import fixture_lists
from tests.intent_set import LANGS, SETS, load_set

Found = list[tuple[str, list[tuple[str, str]], str | None]]


def _results(
    engine: IntentEngine,
    intents: Intents,
    text: str,
    lang: Lang,
    slot_lists: dict[str, SlotList] | None = None,
) -> Found:
    lists = dict(engine._live.lists) if slot_lists is None else slot_lists
    return [
        (
            r.intent.name,
            sorted((k, str(v.value)) for k, v in r.entities.items()),
            r.intent_sentence.text if r.intent_sentence else "",
        )
        for r in recognize_all(text, intents, slot_lists=lists, language=HA_LANG[lang])
    ]


def _templates(intents: Intents) -> int:
    return sum(len(d.sentences) for i in intents.intents.values() for d in i.data)


@dataclasses.dataclass(frozen=True)
class Case:
    text: str
    lang: Lang
    expected: Found
    """what hassil yields with every template and whole lists"""


@dataclasses.dataclass(frozen=True)
class Cases:
    engine: IntentEngine
    cases: list[Case]


@pytest.fixture(scope="module")
def cases() -> Cases:
    """Every sentence of the sets in both languages, plus edge cases, with what all
    templates give (worked out once: both equivalence tests compare with it). The lists are
    the fixture's plus contacts enough for the contact list to be narrowed (over
    ``PREFILTER_MIN``)."""
    lists = fixture_lists()
    many = tuple(Named(f"person{i:03d}", (f"Person{i:03d} Example",)) for i in range(60))
    engine = IntentEngine(dataclasses.replace(lists, contacts=(*lists.contacts, *many)))
    texts = [s.text for lang in LANGS for which in SETS for s in load_set(lang, which)]
    texts += ["Ｔｕｒｎ ｏｎ the fan", "turn-on the living-room lights", "50", "OK", "好的"]
    texts += ["bench block 1 trip 7", "把 牛奶 加到 购物清单", "打开  厨房的灯", ""]
    texts += ["please the kitchen please light", "KITCHEN LIGHT", "厨房 灯", "客厅"]
    texts += ["call person007 example", "text Person059 Example that I am late"]
    return Cases(
        engine,
        [
            Case(text, lang, _results(engine, engine._intents[lang], text, lang))
            for text in texts
            for lang in LANGS
        ],
    )


def test_the_indexed_templates_give_what_all_templates_give(cases: Cases) -> None:
    engine = cases.engine
    compared = matched = 0
    looked_at: list[float] = []
    for case in cases.cases:
        text, lang = case.text, case.lang
        index = engine._index[lang]
        subset = index.candidates(text)
        assert _results(engine, subset, text, lang) == case.expected, (text, lang)
        compared += 1
        matched += bool(case.expected)
        looked_at.append(_templates(subset) / index.templates)
    assert compared >= 600 and matched >= 300, (compared, matched)
    looked_at.sort()
    assert looked_at[len(looked_at) // 2] < 0.2, looked_at[len(looked_at) // 2]


def test_a_template_without_required_words_is_always_a_candidate() -> None:
    engine = IntentEngine(fixture_lists())
    index = engine._index["en"]
    always = [index._places[i].sentence for i in index._always]
    assert always  # "{query}"-like templates exist in the set
    subset = index.candidates("zzz qqq")
    kept = {id(s) for i in subset.intents.values() for d in i.data for s in d.sentences}
    assert {id(s) for s in always} <= kept


def test_the_haystack_is_folded_and_has_both_skip_word_forms() -> None:
    engine = IntentEngine(fixture_lists())
    zh = engine._intents["zh"]
    hay = haystack("请 打开 厨房的灯", zh)
    assert "打开厨房的灯" in hay  # CJK spaces dropped where whitespace is ignored
    assert haystack("Please Turn ON the fan", engine._intents["en"]).split("\n") == [
        "please turn on the fan",  # folded, with the skip word
        "turn on the fan",  # and without it
    ]


def test_subsets_are_cached_and_bounded() -> None:
    engine = IntentEngine(fixture_lists())
    index = TemplateIndex(engine._intents["en"])
    first = index.candidates("turn on the fan")
    assert index.candidates("turn on the fan") is first
    for i in range(SUBSETS_CACHED + 20):
        index.candidates(f"word{i} " * (i % 7) + "turn on the fan number " + str(i))
    assert len(index._subsets) <= SUBSETS_CACHED


def test_templates_needing_a_list_with_no_value_in_the_request_are_left_out(
    cases: Cases,
) -> None:
    """What the engine hands hassil — the templates found, less those needing a slot list
    none of whose values is in the request, and long lists narrowed to the values that are —
    gives what all templates with whole lists give, on every sentence of the sets; and a
    request naming nothing of the home is not tried against the templates that need a
    name or an area."""
    engine = cases.engine
    compared = pruned = 0
    for case in cases.cases:
        text, lang = case.text, case.lang
        index = engine._index[lang]
        slot_lists, absent = engine._live.for_request(haystack(text, index.intents))
        subset = index.candidates(text, absent)
        got = _results(engine, subset, text, lang, slot_lists)
        assert got == case.expected, (text, lang, absent)
        compared += 1
        pruned += _templates(subset) < _templates(index.candidates(text))
    assert compared >= 600 and pruned >= 150, (compared, pruned)
    for lang in LANGS:
        index = engine._index[lang]
        hay = haystack("bench block 1 trip 7", index.intents)
        _, absent = engine._live.for_request(hay)
        assert {"name", "area"} <= absent, absent
        # the templates with no required words all need a name or an area: none is left
        # ("lock" in "block" still finds the "are the locks locked" templates)
        left = _templates(index.candidates_in(hay, absent))
        assert left <= _templates(index.candidates_in(hay)) - len(index._always), left
