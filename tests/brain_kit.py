"""Helpers for brain tests: a gateway over the built-in packages' fake servers (same tools
and receipts, no side effects), an address book, and a recorder for task events."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hub.brain.base import TaskEvent
from hub.brain.rules import AddressBook, Contact
from hub.gateway import Gateway, open_gateway

REPO = Path(__file__).resolve().parent.parent
PACKAGES = {
    "messaging": REPO / "packages" / "messaging",
    "home": REPO / "packages" / "home",
    "memory": REPO / "packages" / "memory",
}
BOOK = AddressBook([Contact("Dana Lee", "dana@example.org", ("colleague",))])


@asynccontextmanager
async def fake_gateway(
    tmp: Path,
    *packages: str,
    courier: Any = None,
    model_location: str = "local",
) -> AsyncIterator[Gateway]:
    """A real gateway (ledger, consent, audit) over the packages' fake MCP servers."""
    state = tmp / "package-state"
    state.mkdir(parents=True, exist_ok=True)
    env = {"YIMI_STATE_DIR": str(state), "YIMI_MODEL_LOCATION": model_location}
    async with open_gateway(
        tmp / "gateway",
        packages=[PACKAGES[p] for p in packages or tuple(PACKAGES)],
        env_for=lambda _m, _v: env,
        courier=courier,
        variant="fake",
        durable=False,
    ) as gw:
        yield gw


@dataclass
class Events:
    seen: list[TaskEvent] = field(default_factory=list)

    async def __call__(self, event: TaskEvent) -> None:
        self.seen.append(event)

    def of(self, task_id: str) -> list[TaskEvent]:
        return [e for e in self.seen if e.task_id == task_id]


def confirm_only(providers: Any, config: dict[str, Any]) -> None:
    """Propose ``config`` and confirm it with a fresh owner phone key (what ``yimi brain
    use`` does): not applied yet."""
    from nacl.signing import SigningKey

    from hub.brain.providers import sign_change

    phone = SigningKey.generate()
    change = providers.propose(config)
    providers.confirm(
        change.change_id,
        sign_change(change.body, phone),
        device_id="phone0000000001",
        sign_pk=bytes(phone.verify_key),
        scopes=("approve",),
    )


def configure(providers: Any, config: dict[str, Any]) -> Any:
    """Propose ``config``, confirm it with a fresh owner phone key, and apply it."""
    confirm_only(providers, config)
    return providers.apply_pending()


def fake_config(base_url: str, **extra: Any) -> dict[str, Any]:
    """Brain and sub-agents on the fake server (loopback: local endpoints)."""
    return {
        "roles": {
            "brain": [{"base_url": base_url, "model": "brain-model"}],
            "subagent": [{"base_url": base_url, "model": "sub-model"}],
        },
        **extra,
    }
