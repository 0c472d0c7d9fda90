"""Local commands for the LLM brain: which intents a model may run through
``brain__run_intent`` and the narrow handle (engine + rule brain ``turn``) it runs them with.
Shared by :mod:`hub.brain.configured` (which builds it) and :mod:`hub.brain.agents` (which
offers the tool), so neither imports the other."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hub.brain.base import ReplyChunk, Turn
from hub.brain.intents.engine import HA_INTENTS
from hub.brain.llm_texts import lang

if TYPE_CHECKING:
    from hub.brain.intents import IntentEngine, Match

LOCAL_TOOL_INTENTS = (HA_INTENTS - {"HassNevermind"}) | {
    "YimiRecall",
    "YimiTimeline",
    "YimiListRead",
}
"""intents a model may run with ``brain__run_intent``. Not: payments (an order, "pay it",
undo — a payment intent comes only from the owner's own words), sending a message,
remembering or forgetting (the model's words are not the owner's), help, never mind"""
READING_INTENTS = frozenset(
    {"HassGetState", "YimiRecall", "YimiTimeline", "YimiListRead", "HassTimerStatus"}
)
"""intents whose reply carries the owner's data back to the model (it is then tainted)"""


@dataclass
class LocalCommands:
    """What the LLM brain needs to run an intent locally: the live intent engine and the
    rule brain's ``turn``."""

    engine: Callable[[], IntentEngine]
    """the engine in use now (the rule brain rebuilds it when slot lists change)"""
    turn: Callable[[Turn], AsyncGenerator[ReplyChunk, None]]

    def recognize(self, text: str, language: str = "") -> Match | None:
        """A confident match of ``text`` (``None`` below ``LOCAL_CONFIDENCE``)."""
        from hub.brain.intents import LOCAL_CONFIDENCE

        match = self.engine().recognize(text, lang(language, text))
        if match is None or match.score < LOCAL_CONFIDENCE:
            return None
        return match

    def run(self, turn: Turn) -> AsyncGenerator[ReplyChunk, None]:
        """Run ``turn`` on the rule brain (its steps go through the gateway)."""
        return self.turn(turn)
