"""The worldline store lives in :mod:`storage.worldlines` (the Mac's executor forks its
allowed folders with it too, and ``edge_agent`` never imports ``hub``); re-exported here."""

from __future__ import annotations

from storage.worldlines import (
    HISTORY_KEEP,
    MAX_DIFF_BYTES,
    MAX_FORKS,
    METHODS,
    Commit,
    Diff,
    Fork,
    Worldlines,
    copy_tree,
    diff_trees,
    exchange,
    remove_tree,
)

__all__ = [
    "HISTORY_KEEP",
    "MAX_DIFF_BYTES",
    "MAX_FORKS",
    "METHODS",
    "Commit",
    "Diff",
    "Fork",
    "Worldlines",
    "copy_tree",
    "diff_trees",
    "exchange",
    "remove_tree",
]
