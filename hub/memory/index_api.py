"""The interface between the assertion store (L3) and the recall index.

The store calls ``upsert`` when an assertion becomes current and ``remove`` when
an item is forgotten or superseded with deletion.  ``remove`` returns the ids it
actually removed, so callers can report exactly what was deleted.
"""

from __future__ import annotations

from typing import Protocol


class IndexHook(Protocol):
    """What the memory store needs from a recall index."""

    def upsert(
        self,
        item_id: str,
        text: str,
        *,
        sensitivity: str,
        sources: list[tuple[str, str]],
        importance: float,
        created_ms: int,
    ) -> None:
        """Insert or replace the derived index entries (text, embedding) of one item."""
        ...

    def remove(self, item_ids: list[str]) -> list[str]:
        """Remove the index entries of these items; return the ids actually removed."""
        ...
