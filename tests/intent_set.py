"""The labelled intent sentence set (issue 14; contract: INTENTS.md).

Typed loader for ``tests/data/intents/{lists,en,zh}.yaml`` and the free-text comparison rule
the intent score uses. Pure: reads the YAML files, no hub imports.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import yaml

Lang = Literal["en", "zh"]
LANGS: tuple[Lang, ...] = ("en", "zh")

DATA_DIR = Path(__file__).parent / "data" / "intents"

# Every intent of the INTENTS.md table (None = out of domain is separate).
INTENTS: tuple[str, ...] = (
    "YimiRemember",
    "YimiRecall",
    "YimiForget",
    "YimiSendMessage",
    "YimiOrder",
    "YimiOrderSame",
    "YimiPayIt",
    "YimiUndo",
    "YimiTimeline",
    "YimiListRead",
    "YimiHelp",
    "HassTurnOn",
    "HassTurnOff",
    "HassLightSet",
    "HassSetPosition",
    "HassSetVolume",
    "HassGetState",
    "HassStartTimer",
    "HassCancelTimer",
    "HassPauseTimer",
    "HassUnpauseTimer",
    "HassTimerStatus",
    "HassIncreaseTimer",
    "HassDecreaseTimer",
    "YimiRemind",
    "YimiReminderList",
    "YimiReminderCancel",
    "YimiReminderMove",
    "YimiScheduleRun",
    "YimiWatch",
    "HassShoppingListAddItem",
    "HassListAddItem",
    "HassShoppingListCompleteItem",
    "HassGetCurrentTime",
    "HassGetCurrentDate",
    "HassNevermind",
)

# Slots whose value is free text (compared with normalise_free_text).
FREE_TEXT_SLOTS = frozenset(
    {"fact", "query", "body", "what", "item", "items", "when", "command", "old"}
)
# Slots whose value is a canonical value of a fixture list (lists.yaml key), per slot name.
LIST_SLOTS: Mapping[str, str] = MappingProxyType(
    {"contact": "contacts", "shop": "shops", "area": "areas"}
)
# `name` is a device for device/volume/state intents, a list id for list intents, free text
# (a timer's name) for timer intents.
DEVICE_NAME_INTENTS = frozenset(
    {
        "HassTurnOn",
        "HassTurnOff",
        "HassLightSet",
        "HassSetPosition",
        "HassSetVolume",
        "HassGetState",
        "YimiWatch",
    }
)
LIST_NAME_INTENTS = frozenset({"YimiListRead", "HassListAddItem"})
NUMBER_SLOTS = frozenset(
    {"budget", "brightness", "position", "volume_level", "hours", "minutes", "seconds"}
)
ENUM_SLOTS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "meal": frozenset({"breakfast", "lunch", "dinner", "snack"}),
        "period": frozenset({"today", "yesterday", "last_week"}),
        "domain": frozenset({"light", "switch", "cover", "media_player", "fan", "sensor", "lock"}),
    }
)

SlotValue = str | int | float


@dataclass(frozen=True)
class Labelled:
    """One labelled sentence: the expected intent (None = out of domain) and slots."""

    text: str
    intent: str | None
    slots: Mapping[str, SlotValue]
    held_out: bool
    lang: Lang


def _read_yaml(name: str) -> Any:
    with (DATA_DIR / name).open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def load_lists() -> dict[str, list[dict[str, Any]]]:
    """The fixture slot lists: {"contacts": [{"value", "names", ...}], "devices": ..., ...}."""
    data = _read_yaml("lists.yaml")
    if not isinstance(data, dict):
        raise ValueError("lists.yaml: expected a mapping")
    return data


SETS: tuple[str, ...] = ("labelled", "probe", "fresh")


def load_set(lang: Lang, which: str = "labelled") -> list[Labelled]:
    """The sentences of one language, in file order: ``which="labelled"`` is ``{lang}.yaml``
    (the labelled set), ``"probe"`` is ``probe_{lang}.yaml`` and ``"fresh"`` is
    ``fresh_{lang}.yaml`` (probes written without reading the templates; every probe sentence
    counts as held out)."""
    if which not in SETS:
        raise ValueError(f"unknown sentence set {which!r}")
    name = f"{lang}.yaml" if which == "labelled" else f"{which}_{lang}.yaml"
    data = _read_yaml(name)
    if not isinstance(data, list):
        raise ValueError(f"{lang}.yaml: expected a list")
    out: list[Labelled] = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict) or not isinstance(entry.get("text"), str):
            raise ValueError(f"{name} entry {i}: needs a text")
        intent = entry.get("intent")
        if intent is not None and not isinstance(intent, str):
            raise ValueError(f"{name} entry {i}: intent must be a name or null")
        slots = entry.get("slots") or {}
        if not isinstance(slots, dict):
            raise ValueError(f"{name} entry {i}: slots must be a mapping")
        for key, value in slots.items():
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise ValueError(f"{name} entry {i}: slot {key} has {value!r}")
        out.append(
            Labelled(
                text=entry["text"],
                intent=intent,
                slots=MappingProxyType(dict(slots)),
                held_out=which != "labelled" or bool(entry.get("held_out", False)),
                lang=lang,
            )
        )
    return out


_EN_ARTICLES = ("the ", "a ", "an ", "my ")


def normalise_free_text(s: str) -> str:
    """The comparison form of a free-text slot (INTENTS.md).

    Casefold; drop a leading English "the "/"a "/"an "/"my "; then remove all whitespace and
    punctuation (ASCII and CJK/full-width: ，。？！、：；「」…).
    """
    t = unicodedata.normalize("NFKC", s).casefold().strip()
    changed = True
    while changed:
        changed = False
        for article in _EN_ARTICLES:
            if t.startswith(article):
                t = t[len(article) :].lstrip()
                changed = True
    return "".join(
        ch for ch in t if not ch.isspace() and not unicodedata.category(ch).startswith(("P", "S"))
    )


def slot_agrees(key: str, expected: SlotValue, actual: object) -> bool:
    """Whether one recognised slot value counts as the labelled one.

    Free text (fact, query, body, what, item, items; and a timer's name) compares with
    normalise_free_text; numbers compare numerically (30 == 30.0); everything else (list
    values, enums, state) must be equal.
    """
    if isinstance(expected, bool) or isinstance(actual, bool):
        return False
    if isinstance(expected, int | float):
        return isinstance(actual, int | float) and float(actual) == float(expected)
    if not isinstance(actual, str):
        return False
    if key in FREE_TEXT_SLOTS:
        return normalise_free_text(actual) == normalise_free_text(expected)
    return actual == expected


def slots_agree(labelled: Labelled, actual: Mapping[str, object]) -> bool:
    """Every asserted slot of `labelled` is present in `actual` and agrees (extra slots are
    not asserted). A timer's `name` is free text."""
    for key, expected in labelled.slots.items():
        if key not in actual:
            return False
        timer_name = key == "name" and "Timer" in (labelled.intent or "")
        compare_key = "item" if timer_name else key
        if not slot_agrees(compare_key, expected, actual[key]):
            return False
    return True
