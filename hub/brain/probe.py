"""Probing a model endpoint before a configuration that names it is accepted.

``yimi brain use`` calls :func:`probe_config` before it proposes anything: for each
endpoint, ``GET /v1/models`` must answer, list the endpoint's model, and (for the chat roles
``brain``, ``subagent``, ``vision``) a one-token chat completion must succeed. The first
failure is a :class:`~hub.brain.errors.BrainError` naming what failed — unreachable, an
HTTP status, the model not listed, a failing completion, a timeout — with a stable key
(``probe.*``, text in :mod:`protos.errors`); nothing is proposed, so nothing changes.

The ``asr`` role is probed with ``/v1/models`` only (a transcription server has no chat
completions). API keys are decrypted only to build the probe's HTTP client, and never
appear in an error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hub.brain.errors import BrainError
from hub.brain.providers import NO_KEY, Endpoint, ProviderConfig

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 10.0
"""seconds each probe request may take (a stalled server fails the probe, it never hangs)"""
CHAT_ROLES = ("brain", "subagent", "vision")
MAX_LISTED = 8
"""model ids named in a "model not listed" error"""


@dataclass(frozen=True)
class Probed:
    role: str
    endpoint: Endpoint
    models: int
    """how many models the endpoint lists"""
    completion: bool
    """whether a one-token completion was tried (and succeeded)"""


def _detail(exc: Any) -> str:
    """A short, key-free description of an SDK error."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        msg = err.get("message") if isinstance(err, dict) else err
        if msg:
            return str(msg)[:160]
    return (str(getattr(exc, "message", "")) or type(exc).__name__)[:160]


async def probe_endpoint(
    role: str, endpoint: Endpoint, api_key: str = "", *, timeout_s: float = PROBE_TIMEOUT_S
) -> Probed:
    """Check one endpoint (see the module doc); raises ``BrainError`` ``probe.*``."""
    import openai

    url = endpoint.base_url
    where = {"url": url, "role": role}
    client = openai.AsyncOpenAI(
        base_url=url, api_key=api_key or NO_KEY, max_retries=0, timeout=timeout_s
    )

    async def step(what: str, call: Callable[[], Any]) -> Any:
        try:
            async with asyncio.timeout(timeout_s):
                return await call()
        except (TimeoutError, openai.APITimeoutError):
            raise BrainError("probe.timeout", **where, what=what, seconds=timeout_s) from None
        except openai.APIConnectionError as exc:
            reason = str(exc.__cause__ or exc)[:160] or "connection failed"
            raise BrainError("probe.unreachable", **where, reason=reason) from None
        except openai.APIStatusError as exc:
            if what == "GET /models":
                raise BrainError(
                    "probe.http", **where, what=what, status=exc.status_code, detail=_detail(exc)
                ) from None
            raise BrainError(
                "probe.completion",
                **where,
                model=endpoint.model,
                reason=f"HTTP {exc.status_code}: {_detail(exc)}",
            ) from None
        except openai.OpenAIError as exc:  # an answer the SDK cannot read
            if what == "GET /models":
                raise BrainError(
                    "probe.http", **where, what=what, status="(unreadable)", detail=_detail(exc)
                ) from None
            raise BrainError(
                "probe.completion", **where, model=endpoint.model, reason=_detail(exc)
            ) from None

    try:
        page = await step("GET /models", client.models.list)
        ids = [str(m.id) for m in getattr(page, "data", []) or []]
        if endpoint.model not in ids:
            listed = ", ".join(ids[:MAX_LISTED]) + (" …" if len(ids) > MAX_LISTED else "")
            raise BrainError(
                "probe.model_missing", **where, model=endpoint.model, listed=listed or "nothing"
            )
        if role not in CHAT_ROLES:
            return Probed(role, endpoint, len(ids), False)

        async def complete() -> Any:
            return await client.chat.completions.create(
                model=endpoint.model,
                messages=[{"role": "user", "content": "Say OK."}],
                max_tokens=1,
            )

        done = await step("a one-token completion", complete)
        if not getattr(done, "choices", None):
            raise BrainError(
                "probe.completion", **where, model=endpoint.model, reason="no choices in the answer"
            )
        return Probed(role, endpoint, len(ids), True)
    finally:
        await client.close()


async def probe_config(
    config: ProviderConfig,
    api_key: Callable[[str], str],
    *,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> list[Probed]:
    """Probe every endpoint of ``config`` (each distinct one once, in role order); the
    first failure raises. ``api_key(key_id)`` decrypts a stored key."""
    out: list[Probed] = []
    seen: dict[tuple[str, str, str, bool], Probed] = {}
    for role in ("brain", "subagent", "vision", "asr"):
        for ep in config.endpoints(role):
            chat = role in CHAT_ROLES
            key = (ep.base_url, ep.model, ep.key_id, chat)
            if key not in seen:
                secret = api_key(ep.key_id) if ep.key_id else ""
                seen[key] = await probe_endpoint(role, ep, secret, timeout_s=timeout_s)
                log.info("probed %s endpoint %s: ok", role, ep.label())
            out.append(seen[key])
    return out
