"""Rebuilding the recall index for another embedding model, before the model takes effect.

The index of each model is its own file (``HOME/recall/<model>.db``, see
:func:`hub.memory.index.live_index`). A switch of the ``embed`` role
(:meth:`models.catalog.Catalog.switch` with a :class:`RecallRebuild`) runs:

1. **build** — every item of the index in use is embedded with the new model into
   ``recall/<new>.db.building`` (progress ``done/total`` goes to the catalog, which
   ``yimi models status`` shows); recall keeps using the old file and model meanwhile.
   Items added, changed or removed meanwhile are caught up (passes until nothing differs);
   then the file is renamed to ``recall/<new>.db`` — still unused, as the catalog names the
   old model;
2. the catalog's selection changes (one atomic file write): from now on
   :meth:`MemoryIndex.for_home` opens the new file;
3. **commit** — a last catch-up from the old file, the old file is deleted (open indexes
   see it gone and reopen the new one), and the home's deletion log is re-applied to the
   new file, so nothing forgotten meanwhile survives.

A failed build deletes its file; the catalog keeps the old selection. :func:`migrate_home`
moves a home whose index was built before the default changed (the pre-catalog
``memory_index.db`` of MiniLM) the same way, on the hub's start.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from hub.memory.index import (
    BUILDING_SUFFIX,
    Entry,
    MemoryIndex,
    RecallError,
    index_model,
    index_path,
    live_index,
    older_indexes,
    remove_index_files,
    selected_model,
)

if TYPE_CHECKING:
    from models.catalog import ModelEntry, RoleStatus
    from models.embed import Embedder

log = logging.getLogger(__name__)

BATCH = 64
CATCH_UP_PASSES = 5
ROLE = "embed"

ProgressFn = Callable[[int, int], None]


def _key(e: Entry) -> tuple[object, ...]:
    return (e.text, e.sensitivity, tuple(e.sources), e.importance, e.created_ms)


Snapshot = dict[str, tuple[object, ...]]


def snapshot(ix: MemoryIndex) -> Snapshot:
    return {e.item_id: _key(e) for e in ix.entries()}


def sync(
    src: MemoryIndex,
    dst: MemoryIndex,
    progress: ProgressFn | None = None,
    *,
    since: Snapshot | None = None,
    remove: bool = True,
) -> int:
    """Bring ``src``'s items into ``dst`` (embedding them with ``dst``'s model); returns how
    many items were written or removed.

    Without ``since``, ``dst`` ends up holding exactly ``src``'s items (``remove=False``:
    items only in ``dst`` stay). With ``since`` (``src`` as it was when ``dst`` last matched
    it), only what changed in ``src`` after that is applied — ``dst``'s own later writes
    stay.
    """
    have = {e.item_id: e for e in src.entries()}
    if since is None:
        made = snapshot(dst)
        extra = [i for i in made if i not in have] if remove else []
    else:
        made = since
        extra = [i for i in since if i not in have]
    if extra:
        dst.remove(extra)
    todo = [e for i, e in have.items() if made.get(i) != _key(e)]
    total = len(have)
    done = total - len(todo)
    if progress is not None:
        progress(done, total)
    for start in range(0, len(todo), BATCH):
        chunk = todo[start : start + BATCH]
        dst.upsert_many(chunk)
        done += len(chunk)
        if progress is not None:
            progress(done, total)
    return len(extra) + len(todo)


class RecallRebuild:
    """The recall index as a switch's derived data (``models.catalog.DerivedData``)."""

    def __init__(
        self,
        home: Path,
        *,
        embedder: Embedder | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.home = Path(home)
        self._stop = stop
        """set: the build gives up at its next batch (the hub is shutting down)"""
        self._embedder = embedder
        """the new model's runner (default: the shared one of the entry's name)"""
        self._source: Path | None = None
        self._since: Snapshot | None = None
        """the old index's items when the new one last matched them"""

    def _runner(self, entry: ModelEntry) -> Embedder:
        if self._embedder is not None:
            return self._embedder
        from models.embed import shared_embedder

        return shared_embedder(entry.name)

    def build(self, entry: ModelEntry, progress: ProgressFn) -> None:
        source, _ = live_index(self.home)
        target = index_path(self.home, entry.name)
        if source == target:
            progress(1, 1)
            return
        building = Path(str(target) + BUILDING_SUFFIX)
        remove_index_files(building)
        remove_index_files(target)  # a file of this model that is not in use is stale
        embedder = self._runner(entry)

        def report(done: int, total: int) -> None:
            if self._stop is not None and self._stop.is_set():
                raise RecallError("recall.invalid", field="rebuild", reason="stopped")
            progress(done, total)

        with MemoryIndex(source) as src, MemoryIndex(building, embedder=embedder) as dst:
            log.info("rebuilding the recall index %s -> %s (%d items)", source, target, src.count())
            sync(src, dst, report)
            for _ in range(CATCH_UP_PASSES):
                if sync(src, dst) == 0:
                    break
            self._since = snapshot(src)
            dst.drop_freed_pages()
        os.replace(building, target)
        self._source = source

    def commit(self, entry: ModelEntry) -> None:
        target = index_path(self.home, entry.name)
        source = self._source
        if source is None or not source.exists():
            return
        with MemoryIndex(source) as src, MemoryIndex(target, embedder=self._runner(entry)) as dst:
            # what reached the old file after the build (the new one is in use already)
            sync(src, dst, since=self._since if self._since is not None else snapshot(dst))
        remove_index_files(source)
        self._reapply_deletions(target)
        log.info("recall index now %s (%s)", target, entry.name)

    def abort(self, entry: ModelEntry) -> None:
        target = index_path(self.home, entry.name)
        remove_index_files(Path(str(target) + BUILDING_SUFFIX))
        if live_index(self.home)[0] != target:
            remove_index_files(target)

    def _reapply_deletions(self, target: Path) -> None:
        from hub.memory.home import memory_db_path

        db = memory_db_path(self.home)
        if not db.exists():
            return
        from hub.memory.forget import reapply_deletions

        with MemoryIndex(target) as ix:
            reapply_deletions(db, index=ix)


def migrate_home(
    home: Path, *, embedder: Embedder | None = None, stop: threading.Event | None = None
) -> RoleStatus | None:
    """Rebuild an index made with another model than the selected one (a home from before
    the default changed), as a switch does; ``None`` if there is nothing to do.

    The file's own model is pinned in the catalog while the new index is built, so recall
    keeps working with it; a failure leaves it in use (and raises).
    """
    from models.catalog import Catalog
    from models.embed import by_model_id

    home = Path(home)
    catalog = Catalog.open(home)
    interrupted = catalog.clear_interrupted(ROLE)
    if interrupted is not None:  # its process died: drop what it left, the old stays
        RecallRebuild(home).abort(_entry_named(interrupted))
    path, current = live_index(home)
    if current:
        _drop_leftovers(home, path, embedder)
        return None
    model_id = index_model(path)
    info = by_model_id(model_id) if model_id is not None else None
    if info is None:
        raise RecallError(
            "recall.invalid",
            field="model",
            reason=f"{path} was built with {model_id}, which has no runner here",
        )
    name = selected_model(home)
    log.info("recall index %s was built with %s: rebuilding it for %s", path, info.name, name)
    return catalog.adopt(ROLE, info.name, name, RecallRebuild(home, embedder=embedder, stop=stop))


def _entry_named(name: str) -> ModelEntry:
    from models.catalog import ModelEntry

    return ModelEntry(name, ROLE, "", "", "", "", "")


def _drop_leftovers(home: Path, live: Path, embedder: Embedder | None) -> None:
    """Index files beside the live one (a switch that stopped after its selection changed,
    before the old file went): caught up into the live index, then deleted."""
    from models.embed import by_model_id

    for old in older_indexes(home, live):
        with MemoryIndex(live, embedder=embedder) as dst:
            info = by_model_id(dst.model_id)
            if embedder is None and info is None:
                continue
            with MemoryIndex(old) as src:
                sync(src, dst, remove=False)  # the live index is the newer: only add
        remove_index_files(old)
        RecallRebuild(home, embedder=embedder)._reapply_deletions(live)
        log.info("removed the recall index %s left by an earlier switch", old)
