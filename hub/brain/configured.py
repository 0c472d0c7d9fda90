"""``ConfiguredBrain``: the rule-based brain until an LLM endpoint is configured for the
``brain`` role, the LLM brain from the first turn after one is (changes apply between
turns). Both share the task store and the gateway, so tasks of either kind resume.

**Prefer handling commands locally** (Home Assistant's option; ``prefer_local`` in the
provider configuration, on by default, shown by ``yimi brain status``): with an LLM
configured, a sentence the intent engine matches with ``score >= LOCAL_CONFIDENCE`` still
runs on the rule brain, locally and at once; every other sentence goes to the LLM. A turn
that already has a task (a redelivered utterance, a turn cut off by a restart) stays with
the brain that started it.

The LLM's sub-agents get the intents' actions as one tool, ``brain__run_intent(command)``
(:class:`LocalCommands`): a short command sentence that the intent engine must match
confidently, run by the rule brain through the gateway like any other turn's steps (see
:mod:`hub.brain.agents` for the rules it keeps).

The LLM brain (and with it pydantic_ai, a large import) is built the first time it is
needed: an endpoint configured for the ``brain`` role, or an unfinished task of its own to
resume or to settle. A hub that runs the rule-based brain never imports it."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from hub.brain.base import Brain, EventSink, ReplyChunk, Turn
from hub.brain.local import LocalCommands
from hub.brain.providers import ProviderStore
from hub.brain.rules import Contacts, RuleBrain
from hub.brain.tasks import TaskStore
from hub.gateway import Gateway, Receipt

if TYPE_CHECKING:
    from hub.brain.agents import PydanticBrain
    from hub.brain.intents import IntentEngine
    from hub.brain.vision import VisionDesk
    from hub.schedule.reminders import ReminderDesk
    from hub.schedule.timers import TimerDesk
    from hub.schedule.watches import WatchDesk

log = logging.getLogger(__name__)


class ConfiguredBrain(Brain):
    def __init__(
        self,
        gateway: Gateway,
        store: TaskStore,
        providers: ProviderStore,
        *,
        contacts: Contacts | None = None,
        on_event: EventSink | None = None,
        engine: IntentEngine | None = None,
        timers: TimerDesk | None = None,
        reminders: ReminderDesk | None = None,
        watches: WatchDesk | None = None,
        vision: VisionDesk | None = None,
    ) -> None:
        self.gateway = gateway
        self.store = store
        self.providers = providers
        self.on_event = on_event
        self.rules = RuleBrain(
            gateway,
            store,
            contacts=contacts,
            on_event=on_event,
            timers=timers,
            reminders=reminders,
            watches=watches,
            vision=vision,
        )
        self._llm: PydanticBrain | None = None
        self._engine = engine
        self.local = LocalCommands(lambda: self.engine, self.rules.turn)

    @property
    def llm(self) -> PydanticBrain:
        """The LLM brain, built on first use."""
        if self._llm is None:
            from hub.brain.agents import PydanticBrain

            self._llm = PydanticBrain(
                self.gateway, self.store, self.providers, on_event=self.on_event, local=self.local
            )
        return self._llm

    @property
    def engine(self) -> IntentEngine:
        """The intent engine that decides what runs locally: the one given, else the rule
        brain's own (``RuleBrain.engine``, over the live slot lists; asked each time, so a
        rebuilt one is used) when it has one, else one with the default lists (built on
        first use: an LLM-configured hub's first turn)."""
        from hub.brain.intents import IntentEngine

        if self._engine is not None:
            return self._engine
        own: Any = getattr(self.rules, "engine", None)
        if isinstance(own, IntentEngine):
            return own
        self._engine = IntentEngine()
        return self._engine

    def _configured(self) -> bool:
        return bool(self.providers.current().endpoints("brain"))

    def _llm_has_work(self) -> bool:
        """Whether the LLM brain is configured or owns an unfinished task (every unfinished
        task but the rule-based brain's turns)."""
        return self._configured() or any(
            not (t.kind == "turn" and t.spec.get("brain") == self.rules.kind)
            for t in self.store.unfinished()
        )

    def pick(self, turn: Turn) -> Brain:
        """The brain for this turn (see the module doc)."""
        cfg = self.providers.current()
        if not cfg.endpoints("brain"):
            return self.rules
        if turn.turn_id:
            task = self.store.get(turn.turn_id)
            if task is not None:  # already started: it stays with its brain
                return self.rules if task.spec.get("brain") == self.rules.kind else self.llm
        if cfg.prefer_local:
            match = self.local.recognize(turn.text, turn.language)
            if match is not None:
                log.info("turn handled locally: %s (score %.2f)", match.intent, match.score)
                return self.rules
        return self.llm

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self.llm.kind if self._configured() else self.rules.kind

    async def close(self) -> None:
        if self._llm is not None:
            await self._llm.close()
        await self.rules.close()

    async def turn(self, turn: Turn) -> AsyncGenerator[ReplyChunk, None]:
        self.providers.apply_pending()  # between turns
        brain = self.pick(turn)
        async with aclosing(brain.turn(turn)) as chunks:  # closed with this one
            async for chunk in chunks:
                yield chunk

    async def resume(self) -> list[str]:
        resumed = await self.rules.resume()
        if self._llm is None:
            self.providers.apply_pending()  # what the LLM brain's resume does first
            if not self._llm_has_work():
                return resumed  # the LLM brain would find nothing to resume
        return [*resumed, *await self.llm.resume()]

    async def on_receipt(self, receipt: Receipt) -> None:
        task = self.store.get(receipt.task_id)
        if task is not None and task.spec.get("brain") == self.rules.kind:
            await self.rules.on_receipt(receipt)
        elif task is None and self._llm is None:
            # no task, no step to finish: either brain's core finds nothing to do
            await self.rules.on_receipt(receipt)
        else:
            await self.llm.on_receipt(receipt)
