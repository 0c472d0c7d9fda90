"""The memory of a home: ``HOME/memory.db``, its deletion log, the recall index and the
L2 profile files."""

from __future__ import annotations

from pathlib import Path

from hub.memory.assertions import AssertionStore
from hub.memory.index_api import IndexHook
from hub.memory.profile import ProfileWriter

MEMORY_DB = "memory.db"
PROFILE_DIR = "profile"


def memory_db_path(home: Path) -> Path:
    return home / MEMORY_DB


def profile_dir(home: Path) -> Path:
    return home / PROFILE_DIR


def open_memory(
    home: Path, *, index: IndexHook | None = None, with_index: bool = True
) -> AssertionStore:
    """The home's assertion store, wired to its recall index and L2 profile.

    Without an ``index`` given, the home's own recall index (``HOME/recall/<model>.db``,
    see ``hub.memory.index.live_index``) is opened (``with_index=False``: none); it skips
    items the store has forgotten. The profile files are regenerated after every change
    that touches a profile entry.
    """
    store = AssertionStore.open(memory_db_path(home), index=index)
    if index is None and with_index:
        from hub.memory.index import MemoryIndex

        owned = MemoryIndex.for_home(home, is_live=store.live)
        store.index = owned
        store.close_with(owned.close)
    ProfileWriter(store, profile_dir(home)).attach()
    return store
