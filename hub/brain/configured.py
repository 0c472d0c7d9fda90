"""``ConfiguredBrain``: the rule-based brain until an LLM endpoint is configured for the
``brain`` role, the LLM brain from the first turn after one is (changes apply between
turns). Both share the task store and the gateway, so tasks of either kind resume."""

from __future__ import annotations

from collections.abc import AsyncIterator

from hub.brain.agents import PydanticBrain
from hub.brain.base import Brain, EventSink, ReplyChunk, Turn
from hub.brain.providers import ProviderStore
from hub.brain.rules import Contacts, RuleBrain
from hub.brain.tasks import TaskStore
from hub.gateway import Gateway, Receipt


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
        self.store = store
        self.providers = providers
        self.rules = RuleBrain(gateway, store, contacts=contacts, on_event=on_event)
        self.llm = PydanticBrain(gateway, store, providers, on_event=on_event)

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self.llm.kind if self.providers.current().endpoints("brain") else self.rules.kind

    async def close(self) -> None:
        await self.llm.close()
        await self.rules.close()

    async def turn(self, turn: Turn) -> AsyncIterator[ReplyChunk]:
        self.providers.apply_pending()  # between turns
        brain: Brain = self.llm if self.providers.current().endpoints("brain") else self.rules
        async for chunk in brain.turn(turn):
            yield chunk

    async def resume(self) -> list[str]:
        return [*await self.rules.resume(), *await self.llm.resume()]

    async def on_receipt(self, receipt: Receipt) -> None:
        task = self.store.get(receipt.task_id)
        if task is not None and task.spec.get("brain") == self.rules.kind:
            await self.rules.on_receipt(receipt)
        else:
            await self.llm.on_receipt(receipt)
