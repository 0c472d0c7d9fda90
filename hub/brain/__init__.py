"""The hub's brain: turns in, reply chunks and gateway actions out.

Python API (for the hub daemon)::

    from hub.brain import Turn, open_brain

    async with open_gateway(home / "gateway", packages=..., courier=courier) as gw, \\
               open_brain(home_obj, gw, contacts=AddressBook.load(home / "contacts.yaml"),
                          on_event=cards_and_reports) as brain:
        await brain.resume()                          # once, after a (re)start
        turn = Turn(text, owner="owner", scope=verdict_scope, session_id=session,
                    trace_id=trace, device_id=device, turn_id=timeline_entry_id,
                    sources=[...six context sources...], voice=spoken,
                    language="zh")                # "" → detected from the text
        async for chunk in brain.turn(turn):          # ReplyChunk: task_id, index, text, final
            deliver(chunk)                            # to the device the sentence came from
        ...
        ans, receipt = await gw.answer(approval, ...) # the phone answered a card
        if receipt is not None:
            await brain.on_receipt(receipt)           # the waiting task continues / settles
        gw.delivered(task_id, receipts)               # after the device ACKed a report

``on_event(TaskEvent)`` receives every task state change (activity cards) and, for finished
or waiting tasks, the report to give the owner (already checked against receipts).

Parts:

- :mod:`.base` — :class:`Turn`, :class:`ReplyChunk`, :class:`TaskEvent`, the abstract
  :class:`Brain`, the gateway declaration of the brain's own tools;
- :mod:`.rules` — :class:`RuleBrain`, the offline rule-based brain on the intent engine
  (:mod:`.intents`; English and Chinese, live slot lists from :mod:`.slots`), and the
  :class:`AddressBook`; every sentence it says is in :mod:`.replies` (``en`` / ``zh``);
  the hub's shopping and to-do lists are :mod:`.lists` (in-hub gateway tools);
- :mod:`.agents` — :class:`PydanticBrain`: main agent + background sub-agents on
  pydantic-ai, gateway hooks, the strict 120-call budget, 3 concurrent / depth 2, steering;
- :mod:`.configured` — :class:`ConfiguredBrain`: rule-based until an LLM endpoint is
  configured for the ``brain`` role;
- :mod:`.providers` — OpenAI-compatible endpoints per role, encrypted API keys, owner-signed
  model changes applied between turns;
- :mod:`.cloud` — what a remote endpoint may receive; :mod:`.fences` — untrusted content
  in model context; :mod:`.tasks` — the persisted task state machine;
  :mod:`.runtime` — steps, consent continuation and reports shared by both brains.

State lives under ``HOME/brain/``: ``tasks.db`` (tasks, steps, histories, run budgets),
``lists.db`` (the shopping and to-do lists) and ``providers.db`` (configuration, changes,
encrypted keys).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from hub.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from hub.brain.base import Brain, EventSink, ReplyChunk, TaskEvent, Turn, collect
    from hub.brain.configured import ConfiguredBrain
    from hub.brain.errors import BrainError
    from hub.brain.rules import AddressBook, Contact, Contacts
    from hub.brain.vision import VisionDesk
    from hub.gateway import Gateway
    from hub.schedule.reminders import ReminderDesk
    from hub.schedule.timers import TimerDesk
    from hub.schedule.watches import WatchDesk
    from provisioning.home import Home
    from storage.group_commit import GroupCommit

# imported on first use: ``hub.brain.when`` (a package server's date words) does not load
# the rule brain, the intent engine and the gateway with it
__getattr__ = lazy_exports(
    __name__,
    {
        "hub.brain.base": ("Brain", "EventSink", "ReplyChunk", "TaskEvent", "Turn", "collect"),
        "hub.brain.errors": ("BrainError",),
        "hub.brain.rules": ("AddressBook", "Contact", "Contacts"),
    },
)

__all__ = [
    "AddressBook",
    "Brain",
    "BrainError",
    "Contact",
    "ReplyChunk",
    "TaskEvent",
    "Turn",
    "collect",
    "open_brain",
]


@asynccontextmanager
async def open_brain(
    home: Home,
    gateway: Gateway,
    *,
    contacts: Contacts | None = None,
    on_event: EventSink | None = None,
    durable: bool = True,
    timers: TimerDesk | None = None,
    reminders: ReminderDesk | None = None,
    watches: WatchDesk | None = None,
    vision: VisionDesk | None = None,
    group: GroupCommit | None = None,
) -> AsyncIterator[ConfiguredBrain]:
    """The hub's brain over ``HOME/brain/`` (rule-based until a model is configured);
    ``group``: the task store's commits are synced by its flush (the hub's group commit)."""
    from hub.brain.configured import ConfiguredBrain
    from hub.brain.providers import ProviderStore
    from hub.brain.tasks import TaskStore

    store = TaskStore(
        home.path / "brain" / "tasks.db", synchronous="FULL" if durable else "OFF", group=group
    )
    providers = ProviderStore.for_home(home)
    try:
        async with ConfiguredBrain(
            gateway,
            store,
            providers,
            contacts=contacts,
            on_event=on_event,
            timers=timers,
            reminders=reminders,
            watches=watches,
            vision=vision,
        ) as brain:
            yield brain
    finally:
        providers.close()
        store.close()
