"""memory fake: the same tools and receipts, over the fake's own store.

Its memory is ``YIMI_STATE_DIR/memory-fake.db`` (never the home's), with no recall index
and no profile files; ``recall`` is a word-overlap scan. Commits, conflicts, re-evaluation
and forgetting behave exactly as in the real store, because it is the real store code.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hub.capabilities.package_server import MCPServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import Tools, overlap_search, register

from hub.memory.assertions import AssertionStore


def _open() -> AssertionStore:
    state = Path(os.environ.get("YIMI_STATE_DIR", "."))
    return AssertionStore.open(state / "memory-fake.db")


mcp = MCPServer("memory-fake")
register(mcp, Tools(_open, overlap_search))

if __name__ == "__main__":
    mcp.run("stdio")
