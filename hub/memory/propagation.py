"""Raising sensitivity along derivation when a source turns out more sensitive.

When a registered source is re-registered at a higher level, everything that came from it
— assertions naming it, assertions depending on those, derived items citing any of them —
is raised to at least that level, transitively. Levels are only ever raised here: lowering
one is a separate, reviewed decision, never a side effect.
"""

from __future__ import annotations

import apsw

from hub.memory.sensitivity import LEVELS, Source, highest


def _below(current: str | None, level: str) -> bool:
    return LEVELS.index(highest([current])) < LEVELS.index(level)


def raise_from(conn: apsw.Connection, source: Source, level: str) -> tuple[list[str], list[str]]:
    """Inside the caller's transaction: raise what came from ``source`` to ``level``.

    Returns ``(assertion ids, derived ids)`` whose level was raised.
    """
    raised_assertions: list[str] = []
    raised_derived: list[str] = []
    queue: list[Source] = [source]
    seen: set[Source] = set()
    while queue:
        src = queue.pop(0)
        if src in seen:
            continue
        seen.add(src)
        kind, ident = src
        citing = [
            str(r[0])
            for r in conn.execute(
                "SELECT id FROM assertion_source WHERE kind=? AND source_id=?", (kind, ident)
            )
        ]
        if kind == "assertion":
            citing += [
                str(r[0])
                for r in conn.execute("SELECT DISTINCT id FROM dependency WHERE on_id=?", (ident,))
            ]
        for aid in citing:
            versions: list[tuple[int, str | None]] = [
                (int(str(v)), None if s is None else str(s))
                for v, s in conn.execute(
                    "SELECT version, sensitivity FROM version WHERE id=? AND erased_ms IS NULL",
                    (aid,),
                )
            ]
            low = [v for v, s in versions if _below(s, level)]
            for v in low:
                conn.execute(
                    "UPDATE version SET sensitivity=? WHERE id=? AND version=?", (level, aid, v)
                )
            if low and aid not in raised_assertions:
                raised_assertions.append(aid)
            queue.append(("assertion", aid))
        for did, current in conn.execute(
            "SELECT d.id, d.sensitivity FROM derived_source s JOIN derived d ON d.id=s.derived_id "
            "WHERE s.kind=? AND s.source_id=? AND d.status='current'",
            (kind, ident),
        ).fetchall():
            if _below(None if current is None else str(current), level):
                conn.execute("UPDATE derived SET sensitivity=? WHERE id=?", (level, did))
                raised_derived.append(str(did))
            queue.append(("derived", str(did)))
    return raised_assertions, raised_derived
