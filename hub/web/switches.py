"""Model and brain switches confirmed from the phone's page.

The hub builds exactly what ``yimi models switch`` and ``yimi brain use`` have an owner
device sign — a switch confirmation body (:func:`models.catalog.switch_body`, context
``CONFIRM_CONTEXT``) or a pending provider change (:meth:`ProviderStore.propose`, context
``MODEL_CHANGE_CONTEXT``) — and the browser signs it with its device key (WebCrypto), as it
signs card answers. The signature then goes to the same check the command's does: the
catalog's (certificate from the home, owner profile, signature, expiry, used once) or the
provider store's (``approve`` scope, signature, expiry, once).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from provisioning.home import Home
    from provisioning.registry import DeviceRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Signable:
    """What the page is asked to sign, and what happens with the signature."""

    context: bytes
    body: bytes
    summary: str
    """what the owner confirms, as the command prints it"""
    finish: Callable[[bytes], str]
    """the signature → what became of it (blocking: call it in a thread); raises the
    authority's ``YimiError`` when it is refused"""


@dataclass(frozen=True)
class SwitchLink:
    choices: Callable[[], list[dict[str, Any]]]
    """per model role: selected, effective and the names it may switch to (blocking)"""
    model: Callable[[DeviceRecord, str, str], Signable]
    """(device, role, model name) → its switch to confirm (blocking)"""
    brain: Callable[[DeviceRecord, dict[str, Any] | None], Awaitable[Signable]]
    """(device, a brain endpoint ``{base_url, model[, key_id]}`` or ``None`` for the
    built-in rule-based model) → the change to confirm (every endpoint probed first)"""


def _choices(home: Home) -> list[dict[str, Any]]:
    from models.catalog import Catalog

    catalog = Catalog.open(home.path)
    entries = catalog.entries()
    out = []
    for s in catalog.status():
        names = {e.name for e in entries if e.role == s.role}
        names |= {b.name for b in catalog.packaged_models(s.role)}
        out.append(
            {
                "role": s.role,
                "selected": s.selected,
                "effective": s.effective,
                "error": s.error,
                "names": sorted(names),
            }
        )
    return out


def _model(home: Home, rec: DeviceRecord, role: str, name: str) -> Signable:
    from models.catalog import CONFIRM_CONTEXT, DERIVED, Catalog, SwitchConfirmation, switch_body

    catalog = Catalog.open(home.path)
    assert catalog.trust is not None  # a home's catalog always has one
    entry = catalog.resolve_name(role, name)
    node = catalog.trust.node_id
    body = switch_body(
        device_id=rec.device_id,
        home_id=home.home_id,
        node=node,
        role=role,
        name=entry.name,
        sha256=entry.sha256,
    )
    summary = f"{role} -> {entry.name} {entry.version} sha256 {entry.sha256} on {node}"

    def finish(signature: bytes) -> str:
        derived = None
        if role in DERIVED:
            from hub.memory.reindex import RecallRebuild

            derived = RecallRebuild(home.path)
        confirmation = SwitchConfirmation(body, signature, rec.certificate)
        s = Catalog.open(home.path).switch(role, entry.name, confirmation, derived)
        log.info("%s model switched to %s from the page of %s", role, s.selected, rec.name)
        return f"{s.role}: selected {s.selected}, effective {s.effective or '-'}"

    return Signable(CONFIRM_CONTEXT, body, summary, finish)


async def _brain(home: Home, rec: DeviceRecord, endpoint: dict[str, Any] | None) -> Signable:
    import asyncio

    from hub.brain.probe import probe_config
    from hub.brain.providers import MODEL_CHANGE_CONTEXT, ProviderConfig, ProviderStore

    def parse() -> tuple[ProviderConfig, dict[str, str]]:
        store = ProviderStore.for_home(home)
        try:
            # as ``yimi brain use``: ``--rule-based`` is the empty configuration, an endpoint
            # replaces the current configuration's brain
            config: dict[str, Any] = {}
            if endpoint is not None:
                config = store.current().to_dict()
                config["roles"]["brain"] = [endpoint]
            parsed = ProviderConfig.from_dict(config)
            endpoints = [e for eps in parsed.roles.values() for e in eps if e.key_id]
            return parsed, {e.key_id: store.api_key(e.key_id) for e in endpoints}
        finally:
            store.close()

    def propose() -> tuple[str, bytes, str]:
        store = ProviderStore.for_home(home)
        try:
            change = store.propose(parsed)
        finally:
            store.close()
        return change.change_id, change.body, change.summary()

    # as ``yimi brain use``: every endpoint answers before the owner is asked
    parsed, keys = await asyncio.to_thread(parse)
    await probe_config(parsed, keys.__getitem__)
    change_id, body, summary = await asyncio.to_thread(propose)

    def finish(signature: bytes) -> str:
        store = ProviderStore.for_home(home)
        try:
            done = store.confirm(
                change_id,
                signature,
                device_id=rec.device_id,
                sign_pk=rec.sign_pk,
                scopes=rec.scopes,
            )
        finally:
            store.close()
        log.info("brain change %s confirmed from the page of %s", change_id, rec.name)
        return f"change {done.change_id}: {done.state}"

    return Signable(MODEL_CHANGE_CONTEXT, body, summary, finish)


def switch_link(home: Home) -> SwitchLink:
    return SwitchLink(
        choices=lambda: _choices(home),
        model=lambda rec, role, name: _model(home, rec, role, name),
        brain=lambda rec, endpoint: _brain(home, rec, endpoint),
    )
