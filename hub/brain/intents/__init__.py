"""Offline intent engine (issue 14): hassil templates, Yimi's own and Home Assistant's.

The contract (names, slots, normalisation) is ``INTENTS.md``; in short::

    engine = IntentEngine(SlotLists(contacts=..., devices=..., areas=..., shops=...))
    engine.update(new_lists)                      # live data changed: cheap (lists only)
    m = engine.recognize("Yimi, turn on the kitchen light")   # or recognize(text, "zh")
    if m is not None and m.score >= LOCAL_CONFIDENCE: ...     # m.intent, m.slots, m.lang

How a sentence is matched (``engine.py``):

1. ``detect_language`` (any Han character → zh), then ``strip_request`` (``text.py``, plain
   string code): wake word, politeness and fillers off the front, "please"/"谢谢"/"吧" and
   punctuation off the end.
2. hassil matches the whole sentence against one ``hassil.Intents`` per language, built once
   and cached: Home Assistant's templates for the contract's Hass* intents (from
   ``home-assistant-intents``; blocks for unused domains, delayed commands, zones and floors
   dropped) merged with Yimi's own templates, ``sentences/<lang>/*.yaml`` (one file per
   area: memory, messages, orders, timeline and lists, help, extra home phrasings). The
   parsed templates are kept on disk (``cache.py``, keyed by the templates' content and
   hassil's version): a hub start loads them instead of parsing them again.
   Slot lists: ``name`` (devices, with domain/area context, and list names as domain
   ``todo``), ``area``, ``floor`` (empty), ``contact``, ``shop``, ``list``, ``subject``;
   free-text slots are wildcard lists. Long lists are narrowed per request to the names the
   request contains, and templates needing a list none of whose names it contains ("[the]
   {name}", "{area} to {brightness}") are not tried (``prefilter.py``). A home's only
   cover / fan / speaker / light also answers to the kind ("the blinds", "风扇";
   ``GENERIC_NAMES``), and the hub's "shopping"/"todo" lists to the default spoken forms
   ("grocery list", "待办清单"; ``DEFAULT_LISTS``).
3. Of hassil's results the one with the least wildcard text wins (then a device ``name`` over
   an area, then more literal text). Slots are normalised: list values → canonical ids,
   numbers → int (budget float; Chinese numerals via ``numerals.py`` when hassil's range
   lists leave text), free text trimmed (``clean_free_text``).
4. Refusals: a sentence that starts with a negation ("don't …", "别…", "先不要…") matches only
   templates marked ``negation_ok`` ("don't forget that …", "别忘了…", "不用计时了"); a
   state question needs a state or a sensor ("what is a kettle" → None); free text that is a
   question ("莲花厨房点什么好") → None. When the whole sentence fails, the last clause after
   a plain statement is tried ("I'm going to bed, turn off …"; never after a negation,
   question or condition), scoring × 0.9.

Template metadata used by the engine: ``query_is_text`` (a direct question about the owner,
query = the question), ``negation_ok``; slot value ``"@temperature"``/``"@kettle"`` = the
home's device in that role (found by name; none → no match). To add a phrasing, add a
sentence to the YAML of its area and a labelled sentence to ``tests/data/intents``; check
with ``python bench/intents.py``. Generalise (alternation, optional words, expansion rules)
rather than paste a sentence: ``tests/data/intents/probe_{en,zh}.yaml`` was written without
reading the templates and measures how far they carry beyond their own examples.
"""

from typing import TYPE_CHECKING

from hub.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from hub.brain.intents.engine import (
        DEFAULT_LISTS,
        LOCAL_CONFIDENCE,
        IntentEngine,
        Match,
        Named,
        SlotLists,
    )
    from hub.brain.intents.numerals import parse_number, zh_to_int
    from hub.brain.intents.text import Lang, detect_language, strip_request

# imported on first use: the numerals (``hub.brain.when``'s dates) do not load hassil and
# the engine with them
__getattr__ = lazy_exports(
    __name__,
    {
        "hub.brain.intents.engine": (
            "DEFAULT_LISTS",
            "LOCAL_CONFIDENCE",
            "IntentEngine",
            "Match",
            "Named",
            "SlotLists",
        ),
        "hub.brain.intents.numerals": ("parse_number", "zh_to_int"),
        "hub.brain.intents.text": ("Lang", "detect_language", "strip_request"),
    },
)

__all__ = [
    "DEFAULT_LISTS",
    "LOCAL_CONFIDENCE",
    "IntentEngine",
    "Lang",
    "Match",
    "Named",
    "SlotLists",
    "detect_language",
    "parse_number",
    "strip_request",
    "zh_to_int",
]
