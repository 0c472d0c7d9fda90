"""Extra message handlers a device gets from its profile's roles: confirmation cards
(``confirm_cards``, ``hud``), the executor (``executor``) and voiceprints (``voiceprint``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from edge_agent.cards import card_handlers
from edge_agent.executor import executor_handlers
from edge_agent.voiceprint import voiceprint_handlers
from sync.envelope import Opened

if TYPE_CHECKING:
    from edge_agent.node import DeviceNode


def role_handlers(node: DeviceNode) -> dict[int, Callable[[Opened], Awaitable[None]]]:
    return {**card_handlers(node), **executor_handlers(node), **voiceprint_handlers(node)}
