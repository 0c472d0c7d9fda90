"""``ConfiguredBrain``: the rule-based brain until an LLM endpoint is configured for the
``brain`` role, the LLM brain from the first turn after one is (changes apply between
turns). Both share the task store and the gateway, so tasks of either kind resume.

The LLM brain (and with it pydantic_ai, a large import) is built the first time it is
needed: an endpoint configured for the ``brain`` role, or an unfinished task of its own to
resume or to settle. A hub that runs the rule-based brain never imports it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from hub.brain.base import Brain, EventSink, ReplyChunk, Turn
from hub.brain.providers import ProviderStore
from hub.brain.rules import Contacts, RuleBrain
from hub.brain.tasks import TaskStore
from hub.gateway import Gateway, Receipt

if TYPE_CHECKING:
    from hub.brain.agents import PydanticBrain


class ConfiguredBrain(Brain):
    def __init__(
        self,
        gateway: Gateway,
        store: TaskStore,
        providers: ProviderStore,
        *,
        contacts: Contacts | None = None,
        on_event: EventSink | None = None,
    ) -> None:
        self.gateway = gateway
        self.store = store
        self.providers = providers
        self.on_event = on_event
        self.rules = RuleBrain(gateway, store, contacts=contacts, on_event=on_event)
        self._llm: PydanticBrain | None = None

    @property
    def llm(self) -> PydanticBrain:
        """The LLM brain, built on first use."""
        if self._llm is None:
            from hub.brain.agents import PydanticBrain

            self._llm = PydanticBrain(
                self.gateway, self.store, self.providers, on_event=self.on_event
            )
        return self._llm

    def _configured(self) -> bool:
        return bool(self.providers.current().endpoints("brain"))

    def _llm_has_work(self) -> bool:
        """Whether the LLM brain is configured or owns an unfinished task (every unfinished
        task but the rule-based brain's turns)."""
        return self._configured() or any(
            not (t.kind == "turn" and t.spec.get("brain") == self.rules.kind)
            for t in self.store.unfinished()
        )

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self.llm.kind if self._configured() else self.rules.kind

    async def close(self) -> None:
        if self._llm is not None:
            await self._llm.close()
        await self.rules.close()

    async def turn(self, turn: Turn) -> AsyncIterator[ReplyChunk]:
        self.providers.apply_pending()  # between turns
        brain: Brain = self.llm if self._configured() else self.rules
        async for chunk in brain.turn(turn):
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
