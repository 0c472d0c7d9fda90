"""The labelled intent sentence set itself is well formed (fast; no engine involved)."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.intent_set import (
    DEVICE_NAME_INTENTS,
    ENUM_SLOTS,
    FREE_TEXT_SLOTS,
    INTENTS,
    LANGS,
    LIST_NAME_INTENTS,
    LIST_SLOTS,
    NUMBER_SLOTS,
    SETS,
    Labelled,
    Lang,
    load_lists,
    load_set,
    normalise_free_text,
    slots_agree,
)


def _all_canonical() -> dict[str, set[str]]:
    """The canonical values of every kind in lists.yaml, read once (not once per sentence)."""
    return {kind: {entry["value"] for entry in entries} for kind, entries in load_lists().items()}


def _canonical(kind: str) -> set[str]:
    return _all_canonical()[kind]


def test_lists_yaml_loads_with_canonical_names() -> None:
    lists = load_lists()
    assert set(lists) == {"contacts", "devices", "areas", "shops", "lists"}
    areas = _canonical("areas")
    for kind, entries in lists.items():
        values = [e["value"] for e in entries]
        assert len(values) == len(set(values)), kind
        for e in entries:
            assert e["names"] and all(isinstance(n, str) and n for n in e["names"]), e
        if kind == "devices":
            for e in entries:
                assert e["value"].split(".")[0] == e["domain"], e
                assert e["area"] in areas, e
    assert "Dana Lee" in _canonical("contacts")
    assert "light.kitchen" in _canonical("devices")


@pytest.mark.parametrize("lang", LANGS)
def test_sizes(lang: Lang) -> None:
    items = load_set(lang)
    ood = [s for s in items if s.intent is None]
    assert len(items) >= 200
    assert len(ood) >= 30
    in_domain = [s for s in items if s.intent is not None]
    held = [s for s in in_domain if s.held_out]
    assert 0.3 <= len(held) / len(in_domain) <= 0.5, len(held)
    assert not any(s.held_out for s in ood)


@pytest.mark.parametrize("lang", LANGS)
def test_every_intent_covered(lang: Lang) -> None:
    counts = Counter(s.intent for s in load_set(lang) if s.intent is not None)
    assert set(counts) <= set(INTENTS), set(counts) - set(INTENTS)
    thin = {i: counts[i] for i in INTENTS if counts[i] < 4}
    assert not thin, thin


@pytest.mark.parametrize("lang", LANGS)
def test_no_duplicate_texts(lang: Lang) -> None:
    seen = Counter(normalise_free_text(s.text) for s in load_set(lang))
    assert not [t for t, n in seen.items() if n > 1]


@pytest.mark.parametrize("lang", LANGS)
def test_probe_set_is_fresh_and_covers_every_intent(lang: Lang) -> None:
    """The probe set shares no sentence with the labelled set (or itself), holds >= 100
    sentences and >= 25 out-of-domain ones, and has >= 3 sentences for every intent."""
    probe = load_set(lang, "probe")
    labelled = {normalise_free_text(s.text) for s in load_set(lang)}
    texts = Counter(normalise_free_text(s.text) for s in probe)
    assert not [t for t, n in texts.items() if n > 1]
    assert not [s.text for s in probe if normalise_free_text(s.text) in labelled]
    assert len(probe) >= 100
    assert len([s for s in probe if s.intent is None]) >= 25
    assert all(s.held_out for s in probe)
    counts = Counter(s.intent for s in probe if s.intent is not None)
    assert set(counts) <= set(INTENTS), set(counts) - set(INTENTS)
    thin = {i: counts[i] for i in INTENTS if counts[i] < 3}
    assert not thin, thin


def _check_slots(s: Labelled, canonical: dict[str, set[str]]) -> None:
    """``canonical``: :func:`_all_canonical`."""
    devices = canonical["devices"]
    list_ids = canonical["lists"]
    if s.intent is None:
        assert not s.slots, s
        return
    for key, value in s.slots.items():
        if key in FREE_TEXT_SLOTS:
            assert isinstance(value, str) and value == value.strip() and value, s
            assert normalise_free_text(value), s
        elif key in LIST_SLOTS:
            assert value in canonical[LIST_SLOTS[key]], s
        elif key in NUMBER_SLOTS:
            assert isinstance(value, int | float) and not isinstance(value, bool), s
            if key in {"brightness", "position", "volume_level"}:
                assert 0 <= value <= 100, s
        elif key in ENUM_SLOTS:
            assert value in ENUM_SLOTS[key], s
        elif key == "name":
            if s.intent in DEVICE_NAME_INTENTS:
                assert value in devices, s
            elif s.intent in LIST_NAME_INTENTS:
                assert value in list_ids, s
            else:
                assert "Timer" in s.intent, s
                assert isinstance(value, str) and value, s
        elif key == "state":
            assert s.intent in ("HassGetState", "YimiWatch") and isinstance(value, str), s
        else:
            raise AssertionError(f"unknown slot {key} in {s}")
    if s.intent == "YimiSendMessage":
        assert "contact" in s.slots and ("body" in s.slots or "what" in s.slots), s
    if s.intent == "YimiOrder":
        assert {"items", "shop"} <= set(s.slots), s


@pytest.mark.parametrize("which", SETS)
@pytest.mark.parametrize("lang", LANGS)
def test_slots_follow_the_contract(lang: Lang, which: str) -> None:
    canonical = _all_canonical()
    for s in load_set(lang, which):
        _check_slots(s, canonical)
        if lang == "zh":
            assert any("\u4e00" <= ch <= "\u9fff" for ch in s.text), s
        else:
            assert not any("\u4e00" <= ch <= "\u9fff" for ch in s.text), s


def test_normalise_free_text() -> None:
    assert normalise_free_text("The meeting notes.") == "meetingnotes"
    assert normalise_free_text("my passport") == normalise_free_text("Passport")
    assert normalise_free_text("an apple") == "apple"
    assert normalise_free_text("I don't eat cilantro") == "idonteatcilantro"
    assert normalise_free_text(" 我不吃香菜。") == "我不吃香菜"
    assert normalise_free_text("两份 牛肉面，") == "两份牛肉面"
    assert normalise_free_text("“护照”在哪？") == "护照在哪"
    assert normalise_free_text("theatre") == "theatre"


def test_slots_agree() -> None:
    by_text = {s.text: s for s in load_set("en")}
    order = by_text["order two beef noodles from lotus kitchen for up to 30 euros"]
    assert slots_agree(
        order,
        {"items": "Two beef noodles", "shop": "lotus-kitchen", "budget": 30.0, "x": 1},
    )
    assert not slots_agree(order, {"items": "two beef noodles", "shop": "lotus-kitchen"})
    assert not slots_agree(
        order, {"items": "two beef noodles", "shop": "Lotus Kitchen", "budget": 30}
    )
    assert not slots_agree(
        order, {"items": "two beef noodles", "shop": "lotus-kitchen", "budget": "30"}
    )
    timer = by_text["set a 10 minute pasta timer"]
    assert slots_agree(timer, {"minutes": 10, "name": "the Pasta"})
    assert not slots_agree(timer, {"minutes": 10.5, "name": "pasta"})
    zh = {s.text: s for s in load_set("zh")}["我不吃什么？"]
    assert slots_agree(zh, {"query": "不吃什么？"})
    assert not slots_agree(zh, {"query": "我不吃什么"})
