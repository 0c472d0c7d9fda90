"""The offline intent engine: hassil templates (Yimi's own + Home Assistant's) over live lists.

Built once per language and cached (parsing — or loading the parsed templates from
:mod:`.cache` — and hassil's lazy compilation happen in the constructor, never at recognise
time); ``update`` only swaps the slot lists.

Score (0..1, ``LOCAL_CONFIDENCE`` = 0.8 means "handle locally"):

* 1.0 for a whole-sentence match of a template without free-text (wildcard) slots;
* with wildcards, ``0.6 + 0.4 * min(1, anchored / 8)``, where ``anchored`` is the number of
  characters matched by template words and list names (not by wildcards; a Han character
  counts three) — "remember {fact}" scores 1.0, a template anchored by two Han characters
  ("记住{fact}") 0.85, a wildcard with barely any template text around it below 0.8;
* matches with unmatched or fuzzy entities are never returned (hassil runs without
  ``allow_unmatched_entities``), so they need no score.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import types
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml
from hassil import Intents, RecognizeResult, recognize_all
from hassil.expression import Alternative, Expression, Group, TextChunk
from hassil.intents import SlotList, TextSlotList, TextSlotValue
from hassil.util import fold_case, normalize_for_matching
from home_assistant_intents import get_intents

from hub.brain.intents.cache import load_or_parse
from hub.brain.intents.numerals import parse_number
from hub.brain.intents.prefilter import MAX_DEPTH, TemplateIndex, haystack, required_lists
from hub.brain.intents.text import (
    Lang,
    clean_free_text,
    detect_language,
    has_negation,
    is_han,
    mixed_script,
    negated,
    soften,
    strip_request,
    trailing_clauses,
)

log = logging.getLogger(__name__)

LOCAL_CONFIDENCE = 0.8
HA_LANG: dict[Lang, str] = {"en": "en", "zh": "zh-CN"}
# Home Assistant intents the contract uses (INTENTS.md); the rest of the package is left out.
HA_INTENTS = frozenset(
    {
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
        "HassShoppingListAddItem",
        "HassListAddItem",
        "HassShoppingListCompleteItem",
        "HassGetCurrentTime",
        "HassGetCurrentDate",
        "HassNevermind",
    }
)
# Template blocks naming these lists are dropped: a delayed command, a zone, a broadcast.
UNSUPPORTED_LISTS = ("{timer_command", "{zone", "{message", "{search_query", "{floor")
WILDCARDS = ("fact", "query", "body", "what", "items")
FREE_TEXT_SLOTS = frozenset({"fact", "query", "body", "what", "item", "items", "when", "command"})
NUMBER_SLOTS = frozenset(
    {
        "brightness",
        "position",
        "volume_level",
        "hours",
        "minutes",
        "seconds",
        "budget",
        "temperature",
    }
)
FLOAT_SLOTS = frozenset({"budget"})
DROPPED_SLOTS = frozenset({"conversation_command"})
MAX_RESULTS = 8
# Intents a softened request (text.soften: "I want to …", "你能…吗") never yields: wanting to
# remember or forget something is not asking Yimi to.
NOT_SOFTENED = frozenset({"YimiRemember", "YimiForget"})
CLAUSE_FACTOR = 0.9
# Lists longer than this are narrowed per request to the names the request contains (a sound
# filter: a list value matches only where its text occurs). hassil scans every value of a list
# in Chinese (no word boundaries) and after a wildcard; with 1,000 contacts that is the cost.
PREFILTER_MIN = 24


@dataclass(frozen=True)
class Named:
    value: str
    names: tuple[str, ...]
    domain: str = ""
    area: str = ""


DEFAULT_LISTS: tuple[Named, ...] = (
    Named(
        "shopping",
        (
            "shopping",
            "shopping list",
            "groceries",
            "grocery",
            "grocery list",
            "购物",
            "购物清单",
            "购物单",
            "购物列表",
        ),
    ),
    Named(
        "todo",
        (
            "todo",
            "to-do",
            "to do",
            "todo list",
            "to-do list",
            "to do list",
            "待办",
            "待办事项",
            "待办清单",
            "待办列表",
            "任务清单",
        ),
    ),
)


@dataclass(frozen=True)
class SlotLists:
    contacts: Sequence[Named] = ()
    devices: Sequence[Named] = ()
    areas: Sequence[Named] = ()
    shops: Sequence[Named] = ()
    lists: Sequence[Named] = DEFAULT_LISTS
    subjects: Sequence[Named] = ()


@dataclass(frozen=True)
class Match:
    intent: str
    slots: Mapping[str, str | int | float]
    lang: Lang
    text: str
    score: float


SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader when PyYAML has it (the same documents, ten times faster: the
templates are read at every hub start), else the pure-Python one"""


def _sentence_files(lang: Lang) -> list[dict[str, Any]]:
    root = resources.files("hub.brain.intents").joinpath("sentences", lang)
    docs = []
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            docs.append(yaml.load(entry.read_text(encoding="utf-8"), Loader=SAFE_LOADER) or {})
    return docs


DOMAINS = frozenset({"light", "switch", "cover", "media_player", "fan", "sensor", "lock", "todo"})


def _domains_supported(block: Mapping[str, Any]) -> bool:
    """False for a template block that needs a device domain the contract has no use for
    (valve, climate, vacuum, scene, …): fewer templates, faster matching."""
    required = (block.get("requires_context") or {}).get("domain")
    if required is None:
        domain = (block.get("slots") or {}).get("domain")
        if domain is None:
            return True
        required = domain
    wanted = [required] if isinstance(required, str) else list(required)
    return any(d in DOMAINS for d in wanted)


@lru_cache(maxsize=4)
def _intents_dict(lang: Lang) -> dict[str, Any]:
    """Home Assistant's intents for ``lang`` (the contract's subset) merged with Yimi's."""
    ha = get_intents(HA_LANG[lang])
    if ha is None:
        raise RuntimeError(f"home-assistant-intents has no {lang}")
    merged: dict[str, Any] = {
        "language": HA_LANG[lang],
        "settings": dict(ha.get("settings", {})),
        "skip_words": list(ha.get("skip_words", [])),
        "lists": dict(ha.get("lists", {})),
        "expansion_rules": dict(ha.get("expansion_rules", {})),
        "intents": {},
    }
    for name, intent in ha["intents"].items():
        if name not in HA_INTENTS:
            continue
        blocks = [
            block
            for block in intent.get("data", [])
            if not any(u in repr(block.get("sentences", [])) for u in UNSUPPORTED_LISTS)
            and _domains_supported(block)
        ]
        merged["intents"][name] = {"data": blocks}
    for doc in _sentence_files(lang):
        merged["lists"].update(doc.get("lists", {}))
        merged["expansion_rules"].update(doc.get("expansion_rules", {}))
        merged["skip_words"].extend(doc.get("skip_words", []))
        for name, intent in doc.get("intents", {}).items():
            target = merged["intents"].setdefault(name, {"data": []})
            # Yimi's blocks first: hassil tries them first for equal matches
            target["data"] = list(intent.get("data", [])) + target["data"]
    for name in WILDCARDS:
        merged["lists"].setdefault(name, {"wildcard": True})
    return merged


@lru_cache(maxsize=4)
def _intents(lang: Lang) -> Intents:
    """The parsed templates of ``lang``, from the template cache when it holds them
    (:mod:`.cache`: keyed by the templates' content and hassil's version)."""
    return load_or_parse(_intents_dict(lang), lang)


def _ascii_letter(ch: str) -> bool:
    return "a" <= ch <= "z"


def _not_ascii(ch: str) -> bool:
    return ord(ch) > 127


SCRIPT: dict[Lang, Callable[[str], bool]] = {"en": _ascii_letter, "zh": _not_ascii}
"""a character of the language's script (on hassil's folded text): a request without one
can only match the language's templates that need none (:func:`_without_script`)"""


def _has_script(request: str, lang: Lang) -> bool:
    """Whether the text hassil matches ``request`` as holds a character of ``lang``'s
    script (hassil normalises and folds the text first: full-width letters, the Kelvin
    sign)."""
    is_script = SCRIPT[lang]
    if any(is_script(ch) for ch in request.lower()):
        return True
    if request.isascii():  # normalising ASCII text gives ASCII text, with no letter more
        return False
    return any(is_script(ch) for ch in fold_case(normalize_for_matching(request).text))


LETTERS: dict[Lang, Callable[[str], bool]] = {
    "en": _ascii_letter,
    "zh": lambda ch: ord(ch) >= 0x2E80,  # CJK and beyond: no folding makes these ASCII
}
"""a letter of the language's script that no normalisation turns into another script's: a
slot value holding one cannot be found in a request without :data:`SCRIPT`'s characters"""


def _lists_in_script(intents: Intents, lang: Lang) -> frozenset[str]:
    """The fixed text slot lists of ``intents`` whose every value needs a letter of ``lang``
    (:data:`LETTERS`) to match: "红色", "(开着|打开)". The lists the engine fills from the
    home (names, areas, contacts...) change, so no template is judged by them."""
    has_letter = LETTERS[lang]
    live = _build_lists(SlotLists())
    return frozenset(
        name
        for name, slot_list in intents.slot_lists.items()
        if name not in live
        and isinstance(slot_list, TextSlotList)
        and slot_list.values
        and all(_needs_letter(v.text_in, has_letter) for v in slot_list.values)
    )


def _needs_letter(exp: Expression, has_letter: Callable[[str], bool], depth: int = 0) -> bool:
    """Whether every text ``exp`` matches holds a letter ``has_letter`` accepts (a slot
    value's template: "(开着|打开)"). Conservative: rules and lists inside count as none."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(exp, TextChunk):
        return any(has_letter(ch) for ch in exp.text)
    if isinstance(exp, Alternative):
        return (
            not exp.is_optional
            and bool(exp.items)
            and all(_needs_letter(item, has_letter, depth + 1) for item in exp.items)
        )
    if isinstance(exp, Group):
        return any(_needs_letter(item, has_letter, depth + 1) for item in exp.items)
    return False


def _without_script(intents: Intents, lang: Lang) -> Intents:
    """The templates of ``intents`` a request with no character of ``lang``'s script can
    match: those without a required clause (hassil's sound pre-filter,
    ``Sentence.get_required_clauses``) whose every fragment holds such a character, and
    without a required slot list whose every value holds a letter of it
    (:func:`_lists_in_script`: "{name}的颜色{color}" needs a Chinese colour). Every other
    template is one hassil cannot match for such a request, so matching against this subset
    gives the same results, in the same order, from a few templates instead of hundreds
    ("bench trip 3" heard in English and tried against the Chinese templates)."""
    is_script = SCRIPT[lang]
    in_script = _lists_in_script(intents, lang)
    kept_intents = {}
    for name, intent in intents.intents.items():
        data = []
        for d in intent.data:
            rules = {**intents.expansion_rules, **d.expansion_rules}  # what hassil uses
            kept = [
                sentence
                for sentence in d.sentences
                if not any(
                    all(any(is_script(ch) for ch in fragment) for fragment in clause)
                    for clause in sentence.get_required_clauses(rules)
                )
                and in_script.isdisjoint(required_lists(sentence.expression, rules))
            ]
            if kept:
                sub = dataclasses.replace(d, sentence_texts=[str(x.text) for x in kept])
                sub.__dict__["sentences"] = kept  # the same parsed templates, same order
                data.append(sub)
        if data:
            kept_intents[name] = dataclasses.replace(intent, data=data)
    return dataclasses.replace(intents, intents=kept_intents)


def _text_list(
    name: str, entries: Iterable[tuple[str, Any, dict[str, Any] | None]]
) -> TextSlotList:
    values = []
    seen: set[tuple[str, Any]] = set()
    for text, value, context in entries:
        spoken = " ".join(text.split())
        if not spoken or (spoken.casefold(), value) in seen:
            continue
        seen.add((spoken.casefold(), value))
        values.append(TextSlotValue(TextChunk(spoken), value, context=context))
    return TextSlotList(name=name, values=values)


# A home with exactly one device of a domain may call it by the kind of thing it is ("set the
# blinds halfway", "turn off the fan", "音箱关掉"): these words name that one device, unless a
# device already has the word as a name. Locks are left out ("open the door" is ambiguous).
GENERIC_NAMES: Mapping[str, tuple[str, ...]] = types.MappingProxyType(
    {
        "cover": (
            "blinds",
            "blind",
            "curtains",
            "curtain",
            "shades",
            "shade",
            "窗帘",
            "百叶窗",
            "帘子",
        ),
        "fan": ("fan", "风扇", "电扇"),
        "media_player": ("speaker", "音箱", "音响"),
        "light": ("light", "lamp", "灯"),
        "lock": ("门", "大门"),
    }
)


def _device_domain(dev: Named) -> str:
    return dev.domain or dev.value.partition(".")[0]


def _generic_names(devices: Sequence[Named]) -> list[tuple[str, Named]]:
    by_domain: dict[str, list[Named]] = {}
    for dev in devices:
        by_domain.setdefault(_device_domain(dev), []).append(dev)
    taken = {n.casefold() for dev in devices for n in dev.names}
    out: list[tuple[str, Named]] = []
    for domain, words in GENERIC_NAMES.items():
        found = by_domain.get(domain, [])
        if len(found) == 1:
            out.extend((w, found[0]) for w in words if w.casefold() not in taken)
    return out


def _with_default_names(given: Sequence[Named]) -> list[Named]:
    """The hub's lists, each with the default spoken forms of its id added ("grocery list"
    for "shopping", "to-do list" for "todo") when the hub's own names leave them out."""
    defaults = {d.value: d.names for d in DEFAULT_LISTS}
    out = []
    for lst in given:
        extra = tuple(
            n
            for n in defaults.get(lst.value, ())
            if n.casefold() not in {m.casefold() for m in lst.names}
        )
        out.append(dataclasses.replace(lst, names=lst.names + extra) if extra else lst)
    return out


def _build_lists(lists: SlotLists) -> dict[str, SlotList]:
    names: list[tuple[str, Any, dict[str, Any] | None]] = []
    generic = _generic_names(lists.devices)
    for dev in lists.devices:
        ctx = {"domain": _device_domain(dev)}
        if dev.area:
            ctx["area"] = dev.area
        names.extend((n, dev.value, ctx) for n in dev.names)
        names.extend((w, dev.value, ctx) for w, d in generic if d is dev)
    for lst in _with_default_names(lists.lists):
        names.extend((n, lst.value, {"domain": "todo"}) for n in lst.names)
    return {
        "name": _text_list("name", names),
        "area": _text_list("area", ((n, a.value, None) for a in lists.areas for n in a.names)),
        "floor": _text_list("floor", ()),
        "contact": _text_list(
            "contact", ((n, c.value, None) for c in lists.contacts for n in c.names)
        ),
        "shop": _text_list("shop", ((n, s.value, None) for s in lists.shops for n in s.names)),
        "list": _text_list(
            "list", ((n, x.value, None) for x in _with_default_names(lists.lists) for n in x.names)
        ),
        "subject": _text_list(
            "subject", ((n, s.value, None) for s in lists.subjects for n in s.names)
        ),
    }


def _key(text: str) -> str:
    """NFC, folded as hassil folds (:func:`hassil.util.fold_case`), without whitespace,
    punctuation, '-' and '_' (for the list prefilter): a value hassil finds in a request has
    its key in the request's key."""
    return "".join(ch for ch in fold_case(unicodedata.normalize("NFC", text)) if ch.isalnum())


@dataclass(frozen=True)
class _IndexedList:
    """A text slot list indexed by each value's first two key characters, so a request keeps
    only the names it contains (found through the request's own character pairs)."""

    full: TextSlotList
    keys: tuple[str, ...]
    by_pair: Mapping[str, tuple[int, ...]]
    short: tuple[int, ...]  # values whose key is shorter than two characters (checked each)

    @staticmethod
    def of(slot_list: TextSlotList) -> _IndexedList:
        keys = tuple(
            _key(v.text_in.text) if isinstance(v.text_in, TextChunk) else ""
            for v in slot_list.values
        )
        pairs: dict[str, list[int]] = {}
        short = []
        for i, k in enumerate(keys):
            if len(k) < 2:
                short.append(i)
            else:
                pairs.setdefault(k[:2], []).append(i)
        return _IndexedList(slot_list, keys, {k: tuple(v) for k, v in pairs.items()}, tuple(short))

    def picked(self, request_key: str) -> list[int]:
        """The values that may occur in the request (their key is in ``request_key``; a
        value without a key, one that is no plain text, always may), in list order."""
        if len(self.keys) <= PREFILTER_MIN:
            return [j for j, k in enumerate(self.keys) if k in request_key]
        picked = {j for j in self.short if self.keys[j] in request_key}  # "" always is
        seen: set[str] = set()
        for i in range(len(request_key) - 1):
            pair = request_key[i : i + 2]
            if pair in seen:
                continue
            seen.add(pair)
            for j in self.by_pair.get(pair, ()):
                if self.keys[j] in request_key:
                    picked.add(j)
        return sorted(picked)

    def narrowed(self, picked: Sequence[int]) -> TextSlotList:
        """The list with only the ``picked`` values (a short list as it is: hassil scans it
        as fast as a narrowed one)."""
        if len(self.keys) <= PREFILTER_MIN:
            return self.full
        return TextSlotList(name=self.full.name, values=[self.full.values[j] for j in picked])


def _weight(text: str) -> int:
    return sum(3 if is_han(ch) else 1 for ch in text if not ch.isspace())


def _score(result: RecognizeResult, text: str) -> float:
    wild = [e for e in result.entities_list if e.is_wildcard]
    if not wild:
        return 1.0
    anchored = _weight(text) - sum(_weight(e.text) for e in wild)
    return round(0.6 + 0.4 * min(1.0, max(0, anchored) / 8), 3)


LAST_RESORT = frozenset({"YimiScheduleRun"})
"""intents that win only when no other reading of the sentence matches ("every day at 8
remind me …" is a reminder, not a scheduled run of "remind me …")"""


def _rank(result: RecognizeResult) -> tuple[int, int, int, int]:
    wild_chars = sum(len(e.text) for e in result.entities_list if e.is_wildcard)
    has_name = 1 if "name" in result.entities and not result.entities["name"].is_wildcard else 0
    last = 1 if result.intent.name in LAST_RESORT else 0
    return (last, wild_chars, -has_name, -result.text_chunks_matched)


# A free-text slot that is really a question or a refusal ("莲花厨房点什么好", "茶馆来不来",
# "你记住了吗", "remember when we went to Paris") means the sentence was not the command.
QUESTION_ITEMS_ZH = ("什么", "吗", "哪", "多少", "不", "没", "啥")
# 订 is "order" and "reserve": "在莲花厨房订个位子" books a table, which Yimi cannot do.
RESERVATION_ITEMS_ZH = ("位子", "座位", "桌位", "订位", "包间", "包厢", "房间")
WH_WORDS_EN = frozenset({"when", "what", "how", "why", "where", "who", "if", "whether", "which"})


# "send mom a message": the kind of message, not a thing to send — not understood (no guess).
BARE_MESSAGE = frozenset(
    {"message", "amessage", "email", "anemail", "text", "atext", "note", "anote", "mail"}
    | {"消息", "邮件", "短信", "信息", "微信", "一条消息", "一封邮件"}
)


# Who a "do you remember X" asks about when it is chit-chat rather than recall.
PERSONS = frozenset({"me", "you", "us", "him", "her", "them", "我", "你", "我们"})


VAGUE_QUERIES = frozenset(
    {"这个", "那个", "这", "那", "它", "这件事", "那件事", "这些", "那些", "it", "this", "that"}
)
VAGUE_ITEMS = frozenset(
    {"外卖", "东西", "吃的", "喝的", "饭", "点东西", "点吃的", "something", "food", "takeout"}
    | {"takeaway", "delivery", "somefood", "stuff"}
)


def _free_text_ok(name: str, value: str, lang: Lang) -> bool:
    key = _key(value)
    if name == "query" and (
        key in VAGUE_QUERIES or (key[:1] in "着住" and key[1:] in VAGUE_QUERIES)
    ):
        return False  # "把这个删了", "别记着这个了", "forget this": nothing named
    if name == "item" and key.removeprefix("把") in VAGUE_QUERIES:
        return False  # "mark it as done": no item named
    if name == "items" and _key(value) in VAGUE_ITEMS:
        return False  # "从莲花厨房叫个外卖": no dish named
    if name == "what":
        key = _key(value)
        if lang == "zh":
            key = key.removeprefix("一")
            key = key[1:] if key[:1] in "个封条份" and len(key) > 1 else key
        return key not in BARE_MESSAGE
    if name == "items":
        if lang == "zh":
            return not any(q in value for q in QUESTION_ITEMS_ZH + RESERVATION_ITEMS_ZH)
        return value.casefold().split()[0] not in WH_WORDS_EN
    if name == "query" and lang == "en":
        # "forget it, what's the weather": "it" opens no query
        words = value.casefold().split()
        return not (len(words) > 1 and words[0] == "it")
    if name == "fact":
        if lang == "zh":
            return not (value.startswith("了") or value.endswith("吗"))
        # "remember to call Dana" asks for a reminder (not a fact; Yimi has no reminders)
        return value.casefold().split()[0] not in WH_WORDS_EN | {"to"}
    return True


# A Chinese on/off state question asks: "烧水壶打开" (no question word or particle) is the
# command "turn the kettle on", not "is the kettle on".
QUESTION_MARKS_ZH = (
    "吗",
    "么",
    "不",
    "没",
    "呢",
    "是否",
    "是不是",
    "多少",
    "几",
    "什么",
    "啥",
    "哪",
)


def _plausible(result: RecognizeResult, request: str, lang: Lang) -> bool:
    """False for a reading the request's wording rules out (see QUESTION_MARKS_ZH)."""
    if lang == "zh" and result.intent.name == "HassGetState" and "state" in result.entities:
        return any(q in request for q in QUESTION_MARKS_ZH)
    return True


def _unbeatable(result: RecognizeResult) -> bool:
    """No wildcard and a device/list name: no later result can rank better (see _rank)."""
    if any(e.is_wildcard for e in result.entities_list):
        return False
    return "name" in result.entities or "area" not in result.entities


# "买个蛋糕", "点个沙拉": a measure word without its numeral belongs to the verb, not the
# thing ("个人护理用品" keeps its 个).
BARE_MEASURE_ZH = "个"
NOT_MEASURE_ZH = "人性子头体"


def _without_bare_measure(text: str) -> str:
    if len(text) > 2 and text[0] in BARE_MEASURE_ZH and text[1] not in NOT_MEASURE_ZH:
        return text[1:]
    return text


def _slot_value(name: str, entity: Any, lang: Lang) -> str | int | float | None:
    value = entity.value
    if name in NUMBER_SLOTS:
        number = value if isinstance(value, (int, float)) and not entity.is_wildcard else None
        if number is None:
            number = parse_number(str(entity.text))
        if number is None:
            return None
        return float(number) if name in FLOAT_SLOTS else round(float(number))
    if entity.is_wildcard or name in FREE_TEXT_SLOTS:
        cleaned = clean_free_text(str(entity.text if entity.is_wildcard else value), lang)
        if lang == "zh" and name in ("item", "items"):
            cleaned = _without_bare_measure(cleaned)
        return cleaned or None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, (str, int, float)):
        return value
    return str(value)


# Templates may name a device by role ("how warm is it in here", "烧点水"): the first device
# of that domain whose names contain one of the words fills the slot (none: no match).
PLACEHOLDERS: Mapping[str, tuple[str, tuple[str, ...]]] = types.MappingProxyType(
    {
        "@temperature": ("sensor", ("temperature", "thermometer", "温度", "气温", "室温")),
        "@kettle": ("switch", ("kettle", "水壶")),
    }
)


def _placeholders(devices: Sequence[Named]) -> dict[str, str]:
    found: dict[str, str] = {}
    for key, (domain, words) in PLACEHOLDERS.items():
        for dev in devices:
            if (dev.domain or dev.value.partition(".")[0]) == domain and any(
                w in n.casefold() for n in dev.names for w in words
            ):
                found[key] = dev.value
                break
    return found


def _question_query(request: str, lang: Lang) -> str:
    """A direct question about the owner as its own query: English as spoken; Chinese
    without the leading "我的"/"我" ("我的车停在哪了" → "车停在哪了")."""
    text = clean_free_text(request, lang)
    if lang == "zh":
        # "你知道我不吃什么吗" asks "我不吃什么"
        for lead in ("你还记得", "你知道", "你记得", "还记得"):
            if text.startswith(lead) and text.endswith("吗") and len(text) > len(lead) + 1:
                text = text[len(lead) : -1]
                break
        for prefix in ("我的", "我"):
            if text.startswith(prefix) and len(text) > len(prefix):
                return text[len(prefix) :]
    return text


def _state_question_ok(slots: Mapping[str, object], request: str) -> bool:
    """A state question names a state ("is the kettle on") or asks a sensor for its value;
    "what is a kettle" / "水壶是什么" is a question about the thing, not its state."""
    if "state" in slots:
        return True
    name = str(slots.get("name", ""))
    if name.startswith("sensor."):
        return True
    return "state" in request.casefold() or "状态" in request


WARM_UP: Mapping[Lang, tuple[str, ...]] = types.MappingProxyType(
    {
        "en": (
            "turn on the light",
            "set the blinds to 50 percent",
            "set the volume to forty",
            "set a timer for five minutes and 30 seconds",
            "remember that tea is green",
            "add milk to the shopping list",
            "what time is it",
            "tell me a joke",
        ),
        "zh": (
            "打开灯",
            "把窗帘开到百分之三十",
            "音量调到三十",
            "设一个一小时五分钟的计时器",
            "记住茶是绿的",
            "把牛奶加到购物清单",
            "现在几点",
            "讲个笑话",
        ),
    }
)
WARM_UP_LISTS = SlotLists(
    devices=(
        Named("light.warm_up", ("warm-up lamp",), "light", "warm_up"),
        Named("cover.warm_up", ("warm-up blinds",), "cover", "warm_up"),
        Named("media_player.warm_up", ("warm-up speaker",), "media_player", "warm_up"),
    ),
    areas=(Named("warm_up", ("warm-up room",)),),
)
"""the lists :data:`WARM_UP` is matched with: one light, blinds and speaker (each answering to
its kind: "the light", "窗帘"), so the device templates are among those hassil prepares"""


@dataclass(frozen=True)
class _Live:
    """The slot lists of one ``SlotLists`` as hassil wants them, built by ``update``."""

    lists: Mapping[str, SlotList]
    indexed: Mapping[str, _IndexedList]
    placeholders: Mapping[str, str]
    device_areas: Mapping[str, str]  # entity id -> area id (devices with an area)

    @staticmethod
    def of(lists: SlotLists) -> _Live:
        built = _build_lists(lists)
        indexed = {
            name: _IndexedList.of(slot_list)
            for name, slot_list in built.items()
            if isinstance(slot_list, TextSlotList)
        }
        areas = {d.value: d.area for d in lists.devices if d.area}
        return _Live(built, indexed, _placeholders(lists.devices), areas)

    def for_request(self, hay: str) -> tuple[dict[str, SlotList], frozenset[str]]:
        """For a request whose :func:`~.prefilter.haystack` is ``hay`` (the text hassil
        looks in, with and without skip words): the slot lists to match it with (long ones
        narrowed to the values it may hold) and the lists none of whose values it holds (a
        value matches only where its key occurs)."""
        hay_key = _key(hay)
        slot_lists: dict[str, SlotList] = dict(self.lists)
        absent = []
        for name, indexed in self.indexed.items():
            picked = indexed.picked(hay_key)
            slot_lists[name] = indexed.narrowed(picked)
            if not picked:
                absent.append(name)
        return slot_lists, frozenset(absent)


RECENT_REQUESTS = 256
"""requests whose outcome the engine keeps, for the slot lists it has: an owner says "what
time is it" and "turn on the kitchen light" again and again, and matching one costs
0.2-1.2 ms of the hub's CPU"""


class IntentEngine:
    """Whole-sentence intent matching; ``recognize`` never raises and never guesses."""

    def __init__(self, lists: SlotLists = SlotLists()) -> None:
        self._intents = {lang: _intents(lang) for lang in HA_LANG}
        self._scriptless = {lang: _without_script(self._intents[lang], lang) for lang in HA_LANG}
        """per language: the templates a request without its script can match"""
        self._index = {lang: TemplateIndex(self._intents[lang]) for lang in HA_LANG}
        self._scriptless_index = {lang: TemplateIndex(self._scriptless[lang]) for lang in HA_LANG}
        """the same templates, filed by their required words (:mod:`.prefilter`)"""
        self._live = _Live.of(lists)
        self._recent: OrderedDict[tuple[str, Lang | None], Match | None] = OrderedDict()
        """outcomes of the last requests, for the slot lists ``self._recent_for``"""
        self._recent_for: _Live | None = None
        self._recent_lock = threading.Lock()
        # hassil builds its number-word tries and template indexes lazily (120-200 ms on the
        # first sentence): pay that here, once, not in the owner's first turn — with devices,
        # or the templates that need one would be left out (no name in the request)
        warm = _Live.of(WARM_UP_LISTS)
        for lang, sentences in WARM_UP.items():
            for sentence in sentences:
                self._recognize(sentence, lang, warm)

    def update(self, lists: SlotLists) -> None:
        """New live data: only the slot lists are rebuilt."""
        self._live = _Live.of(lists)  # one reference swap: a concurrent turn sees old or new

    def recognize(self, text: str, lang: Lang | None = None) -> Match | None:
        """None = not understood (the brain answers honestly, never acts). A request among
        the last :data:`RECENT_REQUESTS` gets the same outcome again without matching (the
        outcome depends only on the words, the language and the slot lists)."""
        if not isinstance(text, str) or len(text) > 500:
            return None
        live, key = self._live, (text, lang)
        with self._recent_lock:
            if self._recent_for is live and key in self._recent:
                self._recent.move_to_end(key)
                return self._recent[key]
        try:
            match = self._recognize(text, lang, live)
        except Exception:  # hassil on adversarial input: not understood, never a crash
            log.exception("intent matching failed on %r", text[:200])
            return None
        with self._recent_lock:
            if self._recent_for is not live:  # new slot lists: what was kept is stale
                self._recent.clear()
                self._recent_for = live
            self._recent[key] = match
            if len(self._recent) > RECENT_REQUESTS:
                self._recent.popitem(last=False)
        return match

    def _recognize(self, text: str, lang: Lang | None, live: _Live) -> Match | None:
        language: Lang = lang or detect_language(text)
        match = self._recognize_in(live, text, language)
        if match is None and lang is None and mixed_script(text):
            # "turn on 厨房灯", "remember that 我喜欢绿茶": the other language's templates
            other: Lang = "en" if language == "zh" else "zh"
            match = self._recognize_in(live, text, other)
        return match

    def _recognize_in(self, live: _Live, text: str, language: Lang) -> Match | None:
        request = strip_request(text, language)
        if not request:
            return None
        if language == "zh":
            # "百分之百" (a hundred percent) has no number hassil's range lists read
            request = request.replace("百分之百", "百分之一百")
        match = self._match_whole(live, request, language)
        if match is None:
            # "你能告诉我现在几点吗", "我想撤销订单", "let's set a timer for 5 minutes"
            soft = soften(request, language, text)
            if soft and soft != request:
                match = self._match_whole(live, soft, language)
                if match is not None and match.intent in NOT_SOFTENED:
                    match = None  # "I need to remember my password" states a need
        if match is not None or has_negation(request, language):
            return match
        # "I'm going to bed, turn off the bedroom lights": the last clause alone, a little
        # less sure (score × CLAUSE_FACTOR); never when anything before it is negated.
        for clause in trailing_clauses(request, language):
            match = self._match_whole(live, clause, language)
            if match is not None:
                return dataclasses.replace(match, score=round(match.score * CLAUSE_FACTOR, 3))
        return None

    def _match_whole(self, live: _Live, request: str, language: Lang) -> Match | None:
        is_negated = negated(request, language)
        index = (self._index if _has_script(request, language) else self._scriptless_index)[
            language
        ]
        hay = haystack(request, index.intents)
        slot_lists, absent = live.for_request(hay)
        candidates = index.candidates_in(hay, absent)
        if not candidates.intents:
            return None  # no template has the words this request would need
        results = []
        for result in recognize_all(
            request,
            candidates,
            slot_lists=slot_lists,
            language=HA_LANG[language],
        ):
            if not _plausible(result, request, language):
                continue
            results.append(result)
            if len(results) >= MAX_RESULTS or _unbeatable(result):
                break
        for result in sorted(results, key=_rank):
            if is_negated and not (result.intent_metadata or {}).get("negation_ok"):
                continue  # "don't …", "别…": never an action
            match = self._to_match(live, result, request, language)
            if match is not None:
                return match
        return None

    def _to_match(
        self, live: _Live, result: RecognizeResult, request: str, lang: Lang
    ) -> Match | None:
        slots: dict[str, str | int | float] = {}
        for name, entity in result.entities.items():
            if name in DROPPED_SLOTS:
                continue
            value = _slot_value(name, entity, lang)
            if value is None:
                if entity.is_wildcard or name in NUMBER_SLOTS:
                    return None  # an empty free-text slot or an unreadable number
                continue
            slots[name] = value
        intent = result.intent.name
        if not all(_free_text_ok(k, v, lang) for k, v in slots.items() if isinstance(v, str)):
            return None
        meta = result.intent_metadata or {}
        slots.pop("rest", None)
        if meta.get("query_not_person") and _key(str(slots.get("query", ""))) in PERSONS:
            return None  # "do you remember me": chit-chat, not a question about memory
        if meta.get("query_is_text"):
            # the question is the query; a contact named in it ("when is Dana's birthday")
            # is part of the question, not a slot of its own
            slots = {"query": _question_query(request, lang)}
        device_area = live.device_areas.get(str(slots.get("name", "")), "")
        if "area" in slots and device_area and slots["area"] != device_area:
            return None  # "打开卧室的风扇" when the fan is in the study: not that device
        placeholder = slots.get("name")
        if isinstance(placeholder, str) and placeholder.startswith("@"):
            device = live.placeholders.get(placeholder, "")
            if not device:
                return None
            slots["name"] = device
        if intent == "HassGetState" and not _state_question_ok(slots, request):
            return None
        if intent == "HassListAddItem" and slots.get("name") == "shopping":
            intent = "HassShoppingListAddItem"
            del slots["name"]
        if intent == "YimiListRead":
            slots.setdefault("name", "shopping")
        if intent == "YimiTimeline":
            slots.setdefault("period", "today")
        return Match(
            intent=intent,
            slots=types.MappingProxyType(slots),
            lang=lang,
            text=request,
            score=_score(result, request),
        )
