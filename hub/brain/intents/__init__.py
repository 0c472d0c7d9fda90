"""Offline intent engine (issue 14): hassil templates, Yimi's own and Home Assistant's.

The contract (names, slots, normalisation) is ``INTENTS.md`` at the top of the worktree set;
see ``engine.py`` for how the score is computed.
"""

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
