"""Helpers for gateway tests: a gateway over real package servers, and a phone's key.

The phone here is a real Ed25519 device key answering cards exactly as ``yimi approve``
does (same ApprovalBody, same signing input); the mesh path itself is tested in
``test_consent_mesh.py``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from hub.gateway import CallContext, Gateway, Receipt, ToolCall, open_gateway
from hub.gateway.consent import Answer, Card
from protos import consent_pb2
from protos.codec import signing_input
from protos.signed import APPROVAL_CONTEXT

REPO = Path(__file__).resolve().parent.parent
PACKAGES = {
    "messaging": REPO / "packages" / "messaging",
    "home": REPO / "packages" / "home",
    "probe": REPO / "tests" / "packages" / "probe",
}


@dataclass
class RecordingCourier:
    """Stands in for the mesh: records what would go to the phone."""

    shown: list[Card] = field(default_factory=list)
    updates: list[consent_pb2.CardUpdate] = field(default_factory=list)

    async def show(self, card: Card) -> None:
        self.shown.append(card)

    async def update(self, update: consent_pb2.CardUpdate, card: Card) -> None:
        self.updates.append(update)


@asynccontextmanager
async def gateway(
    tmp: Path,
    *packages: str,
    env: dict[str, str] | None = None,
    courier: Any = None,
    variant: str = "real",
) -> AsyncIterator[Gateway]:
    state = tmp / "package-state"
    state.mkdir(parents=True, exist_ok=True)
    full = {**(env or {}), "YIMI_STATE_DIR": str(state)}
    async with open_gateway(
        tmp / "gateway",
        packages=[PACKAGES[p] for p in packages],
        env_for=lambda _m, _v: full,
        courier=courier,
        variant=variant,
    ) as gw:
        yield gw


class Phone:
    def __init__(self, device_id: str = "phone0000000001", scopes: tuple[str, ...] = ("approve",)):
        self.key = SigningKey.generate()
        self.device_id = device_id
        self.scopes = scopes

    def sign(self, card: Card, decision: int = consent_pb2.APPROVE, **override: Any) -> Any:
        fields: dict[str, Any] = {
            "card_id": card.card_id,
            "action_hash": card.action_hash,
            "expires_ms": card.expires_ms,
            "nonce": card.nonce,
            "decision": decision,
            "device_id": self.device_id,
            "signed_ms": int(time.time() * 1000),
        }
        fields.update(override)
        body = consent_pb2.ApprovalBody(**fields).SerializeToString()
        sig = self.key.sign(signing_input(APPROVAL_CONTEXT, body)).signature
        return consent_pb2.Approval(body=body, signature=sig)

    async def answer(
        self, gw: Gateway, approval: Any, *, key: SigningKey | None = None
    ) -> tuple[Answer, Receipt | None]:
        return await gw.answer(
            approval,
            device_id=self.device_id,
            sign_pk=bytes((key or self.key).verify_key),
            scopes=self.scopes,
        )


def call(package: str, tool: str, args: dict[str, Any], call_id: str, task: str = "t1") -> ToolCall:
    return ToolCall(package, tool, args, call_id, task)


OWNER = CallContext(owner="owner", scope="owner", session_id="s1", run_id="r1", trace_id="tr")
