"""Holding a :class:`~storage.checkpoint.Checkpointer`'s checkpoints, for the tests that
show a commit over the threshold does not wait for one."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from storage import checkpoint
from storage.checkpoint import Checkpointer

PAGES = 8
"""the threshold in these tests (SQLite's default is a thousand pages)"""


@contextmanager
def held_checkpoints(
    checkpointer: Checkpointer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[str]]:
    """Checkpoints at :data:`PAGES` pages, each held until the block ends (then it runs):
    yields the names of the threads they ran on, as they start."""
    monkeypatch.setattr(checkpoint, "CHECKPOINT_PAGES", PAGES)
    release = threading.Event()
    ran: list[str] = []
    apart = checkpointer._checkpoint_apart

    def held(db: str) -> None:
        ran.append(threading.current_thread().name)
        release.wait(30)
        apart(db)

    monkeypatch.setattr(checkpointer, "_checkpoint_apart", held)
    try:
        yield ran
    finally:
        release.set()
