"""The hub's lists (shopping, to-do): a small SQLite store and its in-hub tools.

The store lives at ``HOME/brain/lists.db``. Its operations are tools of the in-hub
package ``lists`` (:func:`lists_manifest`), so every change is decided, counted and audited
by the gateway like a package call; they run in the hub process (:class:`ListTools`). A
change is visible on every device because the turn's reply (and, for background work, the
activity card) goes on the shared timeline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hub.brain.base import ALL_SCOPES
from hub.capabilities.host import ToolOutcome
from hub.capabilities.manifest import Manifest, Runtime, ToolSpec
from storage.sqlite import open_db, transaction

LISTS_PACKAGE = "lists"
LIST_IDS = ("shopping", "todo")
"""the lists every hub has"""
MAX_ITEM = 200
"""characters of one item"""

SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    list_id TEXT NOT NULL,
    item TEXT NOT NULL,
    key TEXT NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    added_ms INTEGER NOT NULL,
    done_ms INTEGER,
    PRIMARY KEY (list_id, key)
);
"""


def item_key(item: str) -> str:
    """What makes two items the same: case, spaces and punctuation ignored."""
    return "".join(ch for ch in item.casefold() if ch.isalnum())


@dataclass(frozen=True)
class ListItem:
    list_id: str
    item: str
    done: bool
    added_ms: int


class ListStore:
    """Items of the hub's lists (one row per list and item; checked-off items stay, done)."""

    def __init__(self, path: Path, *, synchronous: str = "FULL") -> None:
        self.path = path
        self.db = open_db(path, SCHEMA, synchronous=synchronous)

    def close(self) -> None:
        self.db.close()

    def add(self, list_id: str, item: str) -> bool:
        """Put ``item`` on the list (again, if it was checked off); ``False``: already on."""
        key = item_key(item)
        now = int(time.time() * 1000)
        with transaction(self.db):
            row = self.db.execute(
                "SELECT done FROM items WHERE list_id=? AND key=?", (list_id, key)
            ).fetchone()
            if row is not None and not row[0]:
                return False
            self.db.execute(
                "INSERT OR REPLACE INTO items (list_id, item, key, done, added_ms) "
                "VALUES (?, ?, ?, 0, ?)",
                (list_id, item, key, now),
            )
        return True

    def complete(self, list_id: str, item: str) -> str | None:
        """Check ``item`` off; the item as it was written, ``None`` if it is not on the list."""
        key = item_key(item)
        with transaction(self.db):
            row = self.db.execute(
                "SELECT item FROM items WHERE list_id=? AND key=? AND done=0", (list_id, key)
            ).fetchone()
            if row is None:
                return None
            self.db.execute(
                "UPDATE items SET done=1, done_ms=? WHERE list_id=? AND key=?",
                (int(time.time() * 1000), list_id, key),
            )
        return str(row[0])

    def items(self, list_id: str, *, done: bool = False) -> list[ListItem]:
        rows = self.db.execute(
            "SELECT list_id, item, done, added_ms FROM items WHERE list_id=? AND done=? "
            "ORDER BY added_ms, rowid",
            (list_id, int(done)),
        )
        return [ListItem(str(a), str(b), bool(c), int(d)) for a, b, c, d in rows]


def lists_manifest() -> Manifest:
    """The gateway's declaration of the list tools (in-hub; no MCP server)."""
    owner = ("owner", "owner_uncertain", "care")
    tools = {
        "add_item": ToolSpec(
            "add_item", effect="workspace", target="list", scopes=owner, preview=("list", "item")
        ),
        "complete_item": ToolSpec(
            "complete_item",
            effect="workspace",
            target="list",
            scopes=owner,
            preview=("list", "item"),
        ),
        "read_list": ToolSpec("read_list", effect="observe", target="list", scopes=owner),
    }
    return Manifest(
        root=Path(__file__).resolve().parent,
        name=LISTS_PACKAGE,
        version="1.0.0",
        description="The owner's shopping and to-do lists on the hub: add an item, check "
        "one off, read a list.",
        maintainer="core",
        schema_version=1,
        receipt_version=1,
        runtime=Runtime(start="lazy", idle_reclaim_s=900, host="shared", server="", fake=None),
        servers={},
        scopes=tuple(s for s in ALL_SCOPES if s in owner),
        tools=tools,
    )


class ListTools:
    """The list tools over a :class:`ListStore`: receipts in the package wire form."""

    def __init__(self, store: ListStore) -> None:
        self.store = store

    def run(self, tool: str, args: dict[str, Any]) -> ToolOutcome:
        from hub.capabilities.package_sdk import receipt

        list_id = str(args.get("list", ""))
        item = " ".join(str(args.get("item", "")).split())[:MAX_ITEM]
        if list_id not in LIST_IDS:
            return ToolOutcome(
                structured=receipt("failed", error=("NOT_FOUND", f"no list {list_id!r}"))
            )
        if tool == "read_list":
            items = [i.item for i in self.store.items(list_id)]
            r = receipt(
                "succeeded",
                effects=[
                    {
                        "kind": "list.read",
                        "state": "verified",
                        "target": list_id,
                        "fields": {"list": list_id, "items": items},
                    }
                ],
            )
            return ToolOutcome(structured=r)
        if not item:
            return ToolOutcome(structured=receipt("failed", error=("BAD_REQUEST", "no item")))
        if tool == "add_item":
            fresh = self.store.add(list_id, item)
            kind = "list.added" if fresh else "list.present"
        elif tool == "complete_item":
            found = self.store.complete(list_id, item)
            if found is None:
                return ToolOutcome(
                    structured=receipt(
                        "failed", error=("NOT_FOUND", f"{item!r} is not on the {list_id} list")
                    )
                )
            item, kind = found, "list.completed"
        else:
            return ToolOutcome(
                structured=receipt("failed", error=("NOT_FOUND", f"no tool {tool!r}"))
            )
        r = receipt(
            "succeeded",
            effects=[
                {
                    "kind": kind,
                    "state": "verified",
                    "target": list_id,
                    "fields": {"list": list_id, "item": item},
                }
            ],
        )
        return ToolOutcome(structured=r)
