"""Snapshots in the recall index (:mod:`hub.memory.index`): one item per photo, its local
description (time, device, faces, the people recognised, the text read) as the text,
``high`` sensitivity, its source ``("image", photo id)``. Recall fuses it with the other
lists by rank like every item; a forgotten person's name leaves the items with the photos'
new descriptions (:meth:`PhotoIndex.put` replaces an item's text and vector)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hub.vision.store import PhotoRecord

if TYPE_CHECKING:
    from hub.memory.index import Entry, MemoryIndex

SENSITIVITY = "high"


def item_id(photo_id: str) -> str:
    return f"photo:{photo_id}"


def entries(photos: Sequence[PhotoRecord]) -> list[Entry]:
    """The photos' recall items (their current descriptions)."""
    from hub.memory.index import Entry

    return [
        Entry(item_id(p.id), p.description, SENSITIVITY, [("image", p.id)], created_ms=p.taken_ms)
        for p in photos
    ]


class PhotoIndex:
    """The home's recall index, opened on first use (it loads the text embedding model)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._lock = threading.Lock()
        self._index: MemoryIndex | None = None

    def _open(self) -> MemoryIndex:
        with self._lock:
            if self._index is None:
                from hub.memory.index import MemoryIndex

                self._index = MemoryIndex.for_home(self.home)
            return self._index

    def put(self, photos: Sequence[PhotoRecord]) -> None:
        if photos:
            self._open().upsert_many(entries(photos))

    def close(self) -> None:
        with self._lock:
            if self._index is not None:
                self._index.close()
                self._index = None
