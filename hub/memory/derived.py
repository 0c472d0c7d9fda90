"""Derived items: summaries, snippets, embeddings and contexts, with their provenance.

A derived item records every ``(kind, id)`` source it came from and carries at least the
highest sensitivity of them — an unknown, forgotten or unparsable source counts as
``high``, and an item with no sources at all is ``high`` too. The deriver may raise the
level (``floor``), never lower it: a shorter or vaguer summary is no less sensitive.

Deleting a source (forgetting an assertion, :meth:`AssertionStore.forget_source`, deleting
a derived item) deletes the items that came only from deleted sources and erases the
payload of the others, which wait to be derived again (``needs_rederivation``); their
recall-index entries (``derived:<id>``) are removed either way.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from typing import Any

from hub.memory import forget as forgetting
from hub.memory.assertions import AssertionStore, check_id
from hub.memory.errors import MemoryStoreError
from hub.memory.models import DerivedItem, ForgetReport, derived_item
from hub.memory.sensitivity import LEVELS, check_level, highest, parse_source, parse_sources
from storage.sqlite import transaction

log = logging.getLogger(__name__)

KINDS = ("summary", "snippet", "embedding", "context")
MAX_TEXT = 64 * 1024


class DerivedStore:
    """Derived items in the same database (and with the same index hook) as ``store``."""

    def __init__(self, store: AssertionStore) -> None:
        self.store = store
        self.conn = store.conn

    def record(
        self,
        kind: str,
        text: str,
        sources: Sequence[Any],
        *,
        floor: str = "low",
        item_id: str | None = None,
        importance: float = 0.5,
        index: bool = True,
    ) -> DerivedItem:
        """Store (or re-derive) one item; index its text unless ``index`` is False."""
        if kind not in KINDS:
            raise MemoryStoreError(
                "memory.invalid", field="kind", reason=f"{kind!r}: one of {', '.join(KINDS)}"
            )
        if check_level(floor) is None:
            raise MemoryStoreError(
                "memory.invalid", field="floor", reason=f"{floor!r}: one of {', '.join(LEVELS)}"
            )
        if not isinstance(text, str) or len(text) > MAX_TEXT:
            raise MemoryStoreError(
                "memory.invalid", field="text", reason=f"a text of at most {MAX_TEXT} characters"
            )
        did = check_id(item_id) if item_id is not None else "d-" + secrets.token_hex(8)
        parsed = parse_sources(sources)
        at = self.store.clock()
        with transaction(self.conn):
            levels = [floor, *(self.store.source_sensitivity(s) for s in parsed)]
            sensitivity = highest(levels) if parsed else "high"
            self.conn.execute(
                "INSERT INTO derived(id, kind, status, text, sensitivity, indexed, created_ms) "
                "VALUES (?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET kind=excluded.kind, "
                "status='current', text=excluded.text, sensitivity=excluded.sensitivity, "
                "indexed=excluded.indexed, created_ms=excluded.created_ms, erased_ms=NULL",
                (did, kind, "current", text, sensitivity, int(index), at),
            )
            self.conn.execute("DELETE FROM derived_source WHERE derived_id=?", (did,))
            for source_kind, source_id in parsed:
                self.conn.execute(
                    "INSERT INTO derived_source(derived_id, kind, source_id) VALUES (?,?,?)",
                    (did, source_kind, source_id),
                )
        item = DerivedItem(did, kind, "current", text, sensitivity, parsed, at)
        if index and self.store.index is not None:
            try:
                self.store.index.upsert(
                    derived_item(did),
                    text,
                    sensitivity=sensitivity,
                    sources=list(parsed),
                    importance=importance,
                    created_ms=at,
                )
            except Exception:
                log.exception("index upsert of derived %s failed", did)
        return item

    def find(self, item_id: str) -> DerivedItem | None:
        row = self.conn.execute(
            "SELECT id, kind, status, text, sensitivity, created_ms FROM derived WHERE id=?",
            (item_id,),
        ).fetchone()
        if row is None:
            return None
        sources = tuple(
            s
            for s in (
                parse_source((str(k), str(i)))
                for k, i in self.conn.execute(
                    "SELECT kind, source_id FROM derived_source WHERE derived_id=? "
                    "ORDER BY kind, source_id",
                    (item_id,),
                )
            )
            if s is not None
        )
        return DerivedItem(
            str(row[0]), str(row[1]), str(row[2]), row[3], str(row[4]), sources, int(row[5])
        )

    def get(self, item_id: str) -> DerivedItem:
        found = self.find(item_id)
        if found is None:
            raise MemoryStoreError("memory.derived_unknown", id=item_id)
        return found

    def waiting(self) -> list[DerivedItem]:
        """Items whose payload was erased and that wait to be derived again."""
        rows = self.conn.execute(
            "SELECT id FROM derived WHERE status='needs_rederivation' ORDER BY id"
        ).fetchall()
        return [self.get(str(r[0])) for r in rows]

    def delete(self, item_id: str) -> ForgetReport:
        """Delete one derived item and whatever was derived from it."""
        if self.find(item_id) is None:
            raise MemoryStoreError("memory.derived_unknown", id=item_id)
        return self.store.erase(forgetting.Roots(derived=[item_id]))
