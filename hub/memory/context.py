"""Call-time short context: six sources read in parallel, each given 1,200 ms, 2,400 characters.

During a call the assistant cannot wait for a full recall, so it gets a short block of text
gathered from six sources at once — profile, notes, assertions, recent timeline, time zone
and health (ARCHITECTURE § Memory). Each source has 1,200 ms; a source that has not answered
by then is dropped and not waited for (its task is cancelled and left to finish on its own),
and the block is built from the rest. The block is at most 2,400 characters: sources take
turns, one snippet each per round in the caller's order, so one talkative source cannot
crowd out the others. The block carries the highest sensitivity of what it includes (never
of what was left out) and the structured sources it came from.

A source is anything with a ``name`` and an ``async fetch(query)``; :class:`IndexSource`
adapts the recall index, :class:`FunctionSource` any coroutine function, :class:`StaticSource`
fixed text, :class:`FileSource` a small text file (``USER.md``).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from hub.memory.sensitivity import Source, highest

if TYPE_CHECKING:
    from hub.memory.index import MemoryIndex

SOURCE_NAMES = ("profile", "notes", "assertions", "timeline", "timezone", "health")
"""the six sources, in the default order of precedence"""
SOURCE_DEADLINE_S = 1.2
BUDGET_CHARS = 2400
ELLIPSIS = "…"


@dataclass(frozen=True)
class Snippet:
    """One piece of context and where it came from."""

    text: str
    sensitivity: str
    sources: tuple[Source, ...] = ()


class ContextSource(Protocol):
    @property
    def name(self) -> str: ...

    def fetch(self, query: str) -> Awaitable[Sequence[Snippet]]: ...


@dataclass(frozen=True)
class ShortContext:
    """The assembled block. ``dropped`` names sources that timed out or failed, and why."""

    text: str
    sensitivity: str
    sources: tuple[Source, ...]
    included: dict[str, int]
    dropped: dict[str, str]
    truncated: bool
    elapsed_ms: float
    lines: tuple[str, ...] = field(default=())


# ---------------------------------------------------------------- adapters
class IndexSource:
    """Recall-index hits as snippets (the search runs in a worker thread): L3 assertions
    and timeline entries fused by rank, narrowed to the time the question names ("what did
    I say on Tuesday", :func:`hub.memory.timeline_recall.recall`); ``hide``: item ids never
    given (the turn's own utterance)."""

    def __init__(
        self,
        index: MemoryIndex,
        name: str = "assertions",
        k: int = 5,
        *,
        hide: Collection[str] = (),
    ) -> None:
        self.index = index
        self.name = name
        self.k = k
        self.hide = frozenset(hide)

    async def fetch(self, query: str) -> Sequence[Snippet]:
        from hub.memory.timeline_recall import dated, recall  # imports hub.brain.when

        found = await asyncio.to_thread(recall, self.index, query, self.k, hide=self.hide)
        return [Snippet(dated(h), h.sensitivity, h.sources) for h in found.hits]


class FunctionSource:
    """Any ``async fn(query) -> snippets`` under a name."""

    def __init__(self, name: str, fn: Callable[[str], Awaitable[Sequence[Snippet]]]) -> None:
        self.name = name
        self._fn = fn

    async def fetch(self, query: str) -> Sequence[Snippet]:
        return await self._fn(query)


class StaticSource:
    """Fixed snippets, whatever the query (a profile line, say; the local time is a
    :class:`FunctionSource`: made when read)."""

    def __init__(self, name: str, snippets: Sequence[Snippet]) -> None:
        self.name = name
        self._snippets = list(snippets)

    async def fetch(self, query: str) -> Sequence[Snippet]:
        return list(self._snippets)


class FileSource:
    """The non-empty lines of a small text file (``USER.md``); nothing if it is missing.

    ``sensitivity`` is the file's; unknown files should stay ``high``.
    """

    def __init__(
        self,
        name: str,
        path: Path,
        *,
        sensitivity: str = "high",
        sources: tuple[Source, ...] = (),
        max_bytes: int = 64 * 1024,
    ) -> None:
        self.name = name
        self.path = path
        self.sensitivity = sensitivity
        self.sources = sources
        self.max_bytes = max_bytes

    async def fetch(self, query: str) -> Sequence[Snippet]:
        def read() -> str:
            try:
                with self.path.open("rb") as f:
                    return f.read(self.max_bytes).decode("utf-8", errors="replace")
            except FileNotFoundError:
                return ""

        text = await asyncio.to_thread(read)
        return [
            Snippet(line.strip().lstrip("-* ").strip(), self.sensitivity, self.sources)
            for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        ]


# ---------------------------------------------------------------- assembly
def _retrieve(task: asyncio.Task[Sequence[Snippet]]) -> None:
    """Done-callback of an abandoned source: consume its outcome so nothing is logged."""
    if not task.cancelled():
        task.exception()


async def short_context(
    query: str,
    sources: Sequence[ContextSource],
    *,
    deadline_s: float = SOURCE_DEADLINE_S,
    budget: int = BUDGET_CHARS,
) -> ShortContext:
    """Query every source at once; build the block from those that answered in time."""
    started = time.monotonic()
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise ValueError(f"source names must be unique: {names}")
    tasks: dict[str, asyncio.Task[Sequence[Snippet]]] = {}
    for src in sources:
        tasks[src.name] = asyncio.ensure_future(src.fetch(query))
    if tasks:
        await asyncio.wait(tasks.values(), timeout=deadline_s)
    answers: dict[str, list[Snippet]] = {}
    dropped: dict[str, str] = {}
    for name, task in tasks.items():
        if not task.done():
            task.cancel()
            task.add_done_callback(_retrieve)  # not awaited: a slow source is not waited for
            dropped[name] = "timeout"
            continue
        if task.cancelled():
            dropped[name] = "cancelled"
            continue
        exc = task.exception()
        if exc is not None:
            dropped[name] = f"error: {type(exc).__name__}: {exc}"
            continue
        result = task.result()
        if not all(isinstance(s, Snippet) for s in result):
            dropped[name] = "error: not a list of snippets"
            continue
        answers[name] = [s for s in result if s.text.strip()]
    lines, used_snippets, truncated = assemble(names, answers, budget)
    included = {name: len(snips) for name, snips in used_snippets.items() if snips}
    chosen = [s for snips in used_snippets.values() for s in snips]
    sources_out: dict[Source, None] = {}
    for s in chosen:
        for origin in s.sources:
            sources_out.setdefault(origin, None)
    return ShortContext(
        text="\n".join(lines),
        sensitivity=highest(s.sensitivity for s in chosen),
        sources=tuple(sources_out),
        included=included,
        dropped=dropped,
        truncated=truncated,
        elapsed_ms=(time.monotonic() - started) * 1000,
        lines=tuple(lines),
    )


def _clean(text: str) -> str:
    return " ".join(text.split())


def assemble(
    order: Sequence[str], answers: dict[str, list[Snippet]], budget: int
) -> tuple[list[str], dict[str, list[Snippet]], bool]:
    """Lines ``[source] text`` taken round-robin in ``order`` until ``budget`` characters.

    A line is at most an equal share of the budget among the sources that answered (longer
    snippets end with "…"); the joined block, newlines included, never exceeds ``budget``.
    """
    queues = {name: deque(answers[name]) for name in order if answers.get(name)}
    used: dict[str, list[Snippet]] = {name: [] for name in queues}
    lines: list[str] = []
    total = 0
    truncated = False
    if not queues or budget <= 0:
        return lines, used, False
    share = max(1, budget // len(queues))
    while any(queues.values()):
        progress = False
        for name in order:
            queue = queues.get(name)
            while queue:
                snippet = queue.popleft()
                prefix = f"[{name}] "
                line = prefix + _clean(snippet.text)
                room = budget - total - (1 if lines else 0)
                limit = min(share, room)
                if len(line) > limit:
                    if limit - len(prefix) < 16:  # too little left to say anything useful
                        truncated = True
                        continue
                    line = line[: limit - len(ELLIPSIS)] + ELLIPSIS
                    truncated = True
                lines.append(line)
                used[name].append(snippet)
                total += len(line) + (1 if len(lines) > 1 else 0)
                progress = True
                break
        if not progress:
            break
    return lines, used, truncated
