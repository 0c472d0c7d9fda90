"""Sensitivity levels, structured sources and the cloud-eligibility rule.

A source is a structured ``(kind, id)`` pair, never a path or a model-given string.
Anything derived carries at least the highest sensitivity of its real sources; a source
that is missing or cannot be parsed counts as ``high``. Only ``low`` content whose every
source is on an allow-list of ``(kind, id)`` pairs may reach a cloud model.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Protocol

LEVELS = ("low", "medium", "high")
"""sensitivity levels, lowest first"""
HIGHEST = "high"
_KIND_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
MAX_SOURCE_ID = 256

Source = tuple[str, str]


def check_level(level: object) -> str | None:
    """``level`` if it is a known sensitivity level, else None."""
    return level if isinstance(level, str) and level in LEVELS else None


def highest(levels: Iterable[str | None]) -> str:
    """The highest of ``levels``; an unknown or missing level counts as ``high``.

    No levels at all gives ``low`` (callers decide whether "no sources" is allowed).
    """
    rank = 0
    for level in levels:
        checked = check_level(level)
        if checked is None:
            return HIGHEST
        rank = max(rank, LEVELS.index(checked))
    return LEVELS[rank]


def parse_source(raw: Any) -> Source | None:
    """A validated ``(kind, id)`` pair from a 2-item list/tuple or ``"kind:id"``; else None."""
    if isinstance(raw, str):
        kind, sep, ident = raw.partition(":")
        if not sep:
            return None
        raw = (kind, ident)
    if not isinstance(raw, list | tuple) or len(raw) != 2:
        return None
    kind, ident = raw
    if not isinstance(kind, str) or not isinstance(ident, str):
        return None
    if not _KIND_RE.match(kind) or not ident or len(ident) > MAX_SOURCE_ID:
        return None
    if any(ord(c) < 32 for c in ident):
        return None
    return (kind, ident)


def parse_sources(raw: Iterable[Any], *, limit: int = 64) -> tuple[Source, ...]:
    """Validated, de-duplicated sources in order; raises ``memory.invalid`` on a bad one."""
    from hub.memory.errors import MemoryStoreError

    out: list[Source] = []
    for item in raw:
        source = parse_source(item)
        if source is None:
            raise MemoryStoreError(
                "memory.invalid", field="sources", reason=f"{item!r} is not a (kind, id) source"
            )
        if source not in out:
            out.append(source)
    if len(out) > limit:
        raise MemoryStoreError("memory.invalid", field="sources", reason=f"at most {limit}")
    return tuple(out)


def format_source(source: Source) -> str:
    return f"{source[0]}:{source[1]}"


class HasProvenance(Protocol):
    """Anything with a sensitivity and its structured sources (assertions, derived items)."""

    @property
    def sensitivity(self) -> str: ...

    @property
    def sources(self) -> Sequence[Source]: ...


NO_CLOUD_SOURCES: frozenset[Source] = frozenset()
"""the default allow-list: nothing may reach a cloud model until the owner lists sources"""


def cloud_eligible(item: HasProvenance, allowed: Collection[Source] = NO_CLOUD_SOURCES) -> bool:
    """True only for ``low`` items with at least one source, every one allow-listed.

    Sources are compared as exact ``(kind, id)`` pairs: no prefixes, globs or case folding.
    """
    sources = list(item.sources)
    return (
        item.sensitivity == "low"
        and bool(sources)
        and all(parse_source(s) is not None and tuple(s) in allowed for s in sources)
    )
