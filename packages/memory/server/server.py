"""memory: the hub's L3 assertions as an MCP stdio server (the real backend).

It opens the home's memory (``HOME/memory.db``, the recall index ``HOME/recall/<model>.db``
and the L2 profile files in ``HOME/profile/``), the same files ``yimi memory`` uses.
``recall`` searches the recall index (keywords fused with vectors; L3 assertions and the
timeline's entries, which the hub indexes), narrowed to the time a question names ("last
Tuesday", "昨天"); forgotten items are skipped. ``told_only`` leaves out what the owner did
not tell (the hub's replies, the owner's questions: read from the timeline in ``hub.db``).

Environment (set by the hub from the package's settings): ``YIMI_MEMORY_HOME`` (default:
the home holding ``YIMI_STATE_DIR``), ``YIMI_MODEL_LOCATION`` (``cloud`` — the default —
or ``local``), ``YIMI_CLOUD_SOURCES`` (``kind:id,…`` allowed to reach a cloud model).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from hub.capabilities.package_server import MCPServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import Found, Tools, memory_home, register

from hub.memory.assertions import AssertionStore
from hub.memory.erasure import Erasure
from hub.memory.home import open_memory
from hub.memory.index import MemoryIndex
from hub.memory.timeline_recall import dated, recall, untold


def _open() -> AssertionStore:
    return open_memory(memory_home())


def _search(
    store: AssertionStore,
    query: str,
    k: int,
    include_stale: bool,
    *,
    told_only: bool = False,
    hide: Sequence[str] = (),
) -> list[Found]:
    index = store.index
    if index is None or not hasattr(index, "search"):
        return []
    skip = untold(memory_home() / "hub.db") if told_only else None
    found = recall(index, query, k, include_stale=include_stale, hide=hide, skip=skip)  # type: ignore[arg-type]
    return [
        Found(
            h.item_id,
            dated(h),
            h.sensitivity,
            tuple(h.sources),
            round(h.score, 4),
            h.fts_rank is not None,
        )
        for h in found.hits
    ]


def _erasure(store: AssertionStore) -> Erasure:
    """Forgetting whole over the home's stores (each safe to share with the running hub: the
    hub broadcasts the replicas' tombstones when it sees them on disk)."""
    from hub.archive.settings import open_archive
    from hub.timeline import HubStore
    from sync.replicas import ReplicaSet

    home = memory_home()
    index = store.index
    assert isinstance(index, MemoryIndex)
    archive = open_archive(home) if (home / "archive").exists() else None
    return Erasure(
        home,
        memory=store,
        index=index,
        timeline=HubStore(home / "hub.db"),
        replicas=ReplicaSet(home / "replicas") if (home / "replicas").exists() else None,
        archive=archive,
    )


def _plans() -> Path:
    return Path(os.environ.get("YIMI_STATE_DIR", ".")) / "forget-plans"


mcp = MCPServer("memory")
register(mcp, Tools(_open, _search, erasure=_erasure, plans=_plans()))

if __name__ == "__main__":
    mcp.run("stdio")
