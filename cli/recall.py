"""``yimi memory search QUERY --home DIR [--k N] [--all] [--json]``: recall as the brain sees it.

Prints the fused, blended ranking (keyword and vector ranks shown), each item's sensitivity
and sources. Items unused for 30 days are left out unless ``--all`` is given. A search counts
as a use: the items it prints become recent again.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from cli.common import EXIT_OK, Command
from hub.memory.index import LIST_LIMIT, MemoryIndex, RecallError
from hub.memory.sensitivity import format_source


def _k(text: str) -> int:
    try:
        k = int(text)
    except ValueError:
        raise RecallError(
            "recall.invalid", field="--k", reason=f"{text!r} is not a number"
        ) from None
    if not 1 <= k <= LIST_LIMIT:
        raise RecallError("recall.invalid", field="--k", reason=f"{k} is not in 1..{LIST_LIMIT}")
    return k


def _rank(rank: int | None) -> str:
    return "-" if rank is None else str(rank)


def cmd_memory_search(args: argparse.Namespace) -> int:
    from hub.memory.home import open_memory
    from hub.memory.timeline_recall import dated, recall
    from provisioning.errors import ProvisioningError

    k = _k(args.k)
    query = " ".join(args.query).strip()
    if not query:
        raise RecallError("recall.invalid", field="QUERY", reason="empty")
    if not (args.home / "home.yaml").exists():
        raise ProvisioningError("home.missing", path=args.home)
    store = open_memory(args.home, with_index=True)
    try:
        index = store.index
        if not isinstance(index, MemoryIndex):
            raise RecallError("recall.invalid", field="--home", reason="no recall index")
        found = recall(index, query, k, include_stale=args.all)
        hits = found.hits
    finally:
        store.close()
    if args.json:
        for hit in hits:
            print(json.dumps(hit.as_dict(), ensure_ascii=False, sort_keys=True))
        return EXIT_OK
    if not hits:
        print("nothing found" + ("" if args.all else " (--all also searches stale items)"))
        if found.period is not None:
            p = found.period
            print(f"  (only items from {p.start:%Y-%m-%d %H:%M} to {p.end:%Y-%m-%d %H:%M})")
        return EXIT_OK
    for n, hit in enumerate(hits, 1):
        stale = "  stale" if hit.stale else ""
        print(
            f"{n:>2}. {hit.item_id}  score {hit.score:.3f} (keyword #{_rank(hit.fts_rank)},"
            f" vector #{_rank(hit.vec_rank)})  {hit.sensitivity}{stale}"
        )
        print(f"    {dated(hit)}")
        if hit.sources:
            print("    sources: " + ", ".join(format_source(s) for s in hit.sources))
    return EXIT_OK


def add_search_command(mem_sub: Any, command: Command) -> None:
    """Add ``search`` to the ``yimi memory`` subcommands."""
    sp = command(mem_sub, "search", cmd_memory_search, "recall: keyword + vector search, fused")
    sp.add_argument("query", nargs="+", metavar="QUERY")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--k", default="10", help=f"how many items (1..{LIST_LIMIT}; default 10)")
    sp.add_argument("--all", action="store_true", help="also items unused for 30 days")
    sp.add_argument("--json", action="store_true", help="one JSON object per line")
