"""Extra message handlers a device gets from its profile's roles: confirmation cards
(``confirm_cards``, ``hud``), the executor (``executor``), voiceprints (``voiceprint``) and
the audit witness (every device; the hub sends heads only to phone and Mac)."""

from __future__ import annotations

from edge_agent.cards import card_handlers
from edge_agent.executor import executor_handlers
from edge_agent.port import Handlers, SendToHub
from edge_agent.voiceprint import voiceprint_handlers
from edge_agent.witness import witness_handlers
from provisioning.bundle import Bundle


def role_handlers(bundle: Bundle, send: SendToHub, *, show_cards: bool) -> Handlers:
    """The handlers of ``bundle``'s roles; ``show_cards``: print arriving cards (the
    long-lived ``yimi edge run``, not a one-shot ``yimi say``)."""
    return {
        **card_handlers(bundle, show=show_cards),
        **executor_handlers(bundle, send),
        **voiceprint_handlers(bundle),
        **witness_handlers(bundle, send),
    }
