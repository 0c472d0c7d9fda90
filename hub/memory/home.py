"""The memory of a home: ``HOME/memory.db``, its deletion log and the L2 profile files."""

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


def open_memory(home: Path, *, index: IndexHook | None = None) -> AssertionStore:
    """The home's assertion store, with the L2 profile regenerated on every change to it."""
    store = AssertionStore.open(memory_db_path(home), index=index)
    ProfileWriter(store, profile_dir(home)).attach()
    return store
