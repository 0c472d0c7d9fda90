"""The memory page: search, explain, and forget shown as a plan first, then confirmed.

Each call opens the home's assertion store as ``yimi memory`` does (the memory package's
server has it open too: SQLite in WAL mode, one writer at a time). Forgetting is
:meth:`AssertionStore.forget` — the one path every forget takes; the plan the page shows is
:func:`hub.memory.forget.plan` of the same roots, and the confirmation names that plan's
digest, so a plan that changed in between (something new derived from it) is shown again
rather than carried out unseen.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hub.memory.sensitivity import format_source

if TYPE_CHECKING:
    from hub.memory.assertions import AssertionStore
    from provisioning.home import Home

SEARCH_K = 10
ASSERTION_ITEM = "assertion:"


@dataclass(frozen=True)
class MemoryLink:
    """Every callable blocks (SQLite, the recall index): call them in a thread; each
    raises ``MemoryStoreError`` (``memory.unknown``, ``memory.invalid``) for a bad id."""

    search: Callable[[str], list[dict[str, Any]]]
    explain: Callable[[str], dict[str, Any]]
    plan: Callable[[str], dict[str, Any]]
    """what forgetting the assertion would erase, with its ``plan_id``"""
    forget: Callable[[str, str], list[str] | None]
    """(assertion id, plan id) → what was deleted; ``None`` if the plan is not that one"""


def _plan_of(store: AssertionStore, assertion_id: str) -> dict[str, Any]:
    from hub.memory import forget as forgetting
    from hub.memory.assertions import check_id

    check_id(assertion_id)
    store.get(assertion_id)  # memory.unknown
    entry = forgetting.plan(store.conn, forgetting.Roots(assertions=[assertion_id])).log_entry()
    digest = hashlib.sha256(json.dumps(entry, sort_keys=True).encode()).hexdigest()
    return {
        "plan_id": digest,
        "assertions": entry["assertions"],
        "derived_delete": entry["derived_delete"],
        "derived_rederive": entry["derived_rederive"],
        "sources": [format_source((str(k), str(i))) for k, i in entry["sources"]],
        "index": entry["index"],
    }


def memory_link(home: Home) -> MemoryLink:
    from hub.memory.errors import MemoryStoreError
    from hub.memory.home import open_memory

    def with_store(fn: Callable[[AssertionStore], Any], *, index: bool = False) -> Any:
        store = open_memory(home.path, with_index=index)
        try:
            return fn(store)
        finally:
            store.close()

    def search(query: str) -> list[dict[str, Any]]:
        def run(store: AssertionStore) -> list[dict[str, Any]]:
            index = store.index
            if index is None:
                return []
            try:
                hits = index.search(query, SEARCH_K)  # type: ignore[attr-defined]
            except MemoryStoreError:
                raise
            except Exception:  # no embedding model here: the keyword list alone
                hits = index.search_fts(query, SEARCH_K)  # type: ignore[attr-defined]
            out = []
            for h in hits:
                if not h.item_id.startswith(ASSERTION_ITEM):
                    continue
                a = store.find(h.item_id[len(ASSERTION_ITEM) :])
                if a is None or a.status == "forgotten":
                    continue
                out.append(
                    {
                        "id": a.id,
                        "text": a.head.sentence,
                        "status": a.status,
                        "version": a.version,
                        "sensitivity": a.sensitivity,
                    }
                )
            return out

        return list(with_store(run, index=True))

    def explain(assertion_id: str) -> dict[str, Any]:
        def run(store: AssertionStore) -> dict[str, Any]:
            a = store.get(assertion_id)
            return {
                "id": a.id,
                "status": a.status,
                "version": a.version,
                "sensitivity": a.sensitivity,
                "sources": [format_source(s) for s in a.sources],
                "versions": [
                    {
                        "version": v.version,
                        "status": v.status,
                        "text": "" if v.erased else v.sentence,
                        "created_ms": v.created_ms,
                    }
                    for v in store.history(assertion_id)
                ],
                "dependents": [
                    {"id": d, "version": dv, "on": on} for d, dv, on in store.dependents(a.id)
                ],
            }

        return dict(with_store(run))

    def plan(assertion_id: str) -> dict[str, Any]:
        return dict(with_store(lambda store: _plan_of(store, assertion_id)))

    def forget(assertion_id: str, plan_id: str) -> list[str] | None:
        def run(store: AssertionStore) -> list[str] | None:
            if _plan_of(store, assertion_id)["plan_id"] != plan_id:
                return None
            return store.forget(assertion_id).lines()

        result: list[str] | None = with_store(run, index=True)
        return result

    return MemoryLink(search, explain, plan, forget)
