"""What the dashboard's operator panels show, and the two things they do (pair, revoke).

Each panel is one narrow callable of :class:`OperatorLink` (the daemon builds it with
:func:`operator_link`): packages (running, failed and why — the capability host), models
(selected, effective, progress, errors — the node's model catalog), brain providers, payments
with their states, and the audit log with its verification result
(:func:`hub.gateway.audit.verify`). ``pair_code`` issues a one-time code like
``yimi hub pair-code``; ``revoke`` is ``yimi device revoke`` (the registry the hub polls, so
the revoked device's sessions end within a second either way).

Only a session whose device's certificate grants :data:`OPERATOR_SCOPE` sees them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from hub.gateway.audit import records, verify

if TYPE_CHECKING:
    from hub.gateway.courier import MeshConsent
    from provisioning.home import Home
    from provisioning.registry import DeviceRecord

log = logging.getLogger(__name__)

OPERATOR_SCOPE = "approve"
"""the scope of the owner's phone (it alone answers cards): it alone sees the operator
panels and pairs or revokes devices from the page"""
AUDIT_SHOWN = 12
"""audit records the panel lists (the newest)"""
PAYMENTS_SHOWN = 30


@dataclass(frozen=True)
class OperatorLink:
    packages: Callable[[], dict[str, Any]]
    models: Callable[[], list[dict[str, Any]]]
    """blocking (reads the catalog): call it in a thread"""
    brain: Callable[[], dict[str, Any]]
    """blocking (reads the provider store): call it in a thread"""
    payments: Callable[[], list[dict[str, Any]]]
    audit: Callable[[], dict[str, Any]]
    """blocking (verifies the whole log): call it in a thread"""
    pair_code: Callable[[], tuple[str, int]]
    """a new one-time pairing code and its expiry (ms)"""
    revoke: Callable[[str], DeviceRecord]
    """revoke a device by name (``ProvisioningError`` for an unknown one)"""


def _packages(consent: MeshConsent) -> dict[str, Any]:
    loaded, running, failed = consent.packages()
    return {
        "loaded": list(loaded),
        "running": list(running),
        "failed": [{"name": n, "why": why} for n, why in sorted(failed.items())],
    }


def _models(home: Home) -> list[dict[str, Any]]:
    from models.catalog import Catalog

    return [asdict(s) for s in Catalog.open(home.path).status()]


def _brain(home: Home) -> dict[str, Any]:
    from hub.brain.providers import ProviderStore

    store = ProviderStore.for_home(home)
    try:
        cfg = store.current()
        return {
            "version": cfg.version,
            "prefer_local": cfg.prefer_local,
            "providers": [
                {"role": role, "endpoint": e.label(), "key_id": e.key_id, "local": e.is_local}
                for role, endpoints in sorted(cfg.roles.items())
                for e in endpoints
            ],
        }
    finally:
        store.close()


def _payments(consent: MeshConsent) -> list[dict[str, Any]]:
    pay = consent.payments
    if pay is None:
        return []
    return [
        {
            "payment_id": p.payment_id,
            "description": p.description,
            "payee": p.payee,
            "amount_minor": p.amount_minor,
            "currency": p.currency,
            "state": p.state,
            "mode": p.mode,
            "reason": p.reason,
            "updated_ms": p.updated_ms,
        }
        for p in reversed(pay.store.recent(PAYMENTS_SHOWN))
    ]


def _audit(home: Home) -> dict[str, Any]:
    where = home.path / "gateway" / "audit"
    verdict = verify(where, home.hub_keys.sign_pk)
    recent = list(records(where))[-AUDIT_SHOWN:]
    return {
        "ok": verdict.ok,
        "records": verdict.records,
        "problem": verdict.problem,
        "line": verdict.line,
        "recent": [
            {
                "seq": r.get("seq"),
                "ts_ms": r.get("ts_ms"),
                "kind": r.get("kind"),
                "trace_id": str(r.get("trace_id", ""))[:12],
            }
            for r in reversed(recent)
        ],
    }


def revoke_device(home: Home, name: str) -> DeviceRecord:
    """``yimi device revoke``'s path: a connection of its own, so the hub's registry poll
    (``PRAGMA data_version``) sees the change as it sees the command's."""
    registry = home.registry()
    try:
        return registry.revoke(name)
    finally:
        registry.close()


def operator_link(home: Home, consent: MeshConsent) -> OperatorLink:
    """The panels of the hub on ``home``: its gateway and payments (``consent``), its model
    catalog, provider store, audit log and device registry."""
    from provisioning.pairing import issue_code

    return OperatorLink(
        packages=lambda: _packages(consent),
        models=lambda: _models(home),
        brain=lambda: _brain(home),
        payments=lambda: _payments(consent),
        audit=lambda: _audit(home),
        pair_code=lambda: issue_code(home),
        revoke=lambda name: revoke_device(home, name),
    )
