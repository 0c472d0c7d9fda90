"""Typed originals: the raw ``Utterance`` message of every typed turn, kept in the L5 archive.

:class:`TypedOriginals` is an async context manager owned by :class:`hub.turns.answering.Turns`.
A turn hands it its message and goes on answering at once: the message is written by the
archive's batching writer (:class:`hub.archive.writer.LazyArchiveWriter`), at most
:data:`DELAY_S` later and together with the other turns' messages of that window, so a
turn never waits on the archive's file syncs and a busy hub syncs its index once a batch
instead of once a turn. The archive is opened (in a worker thread) on the first typed turn;
if it cannot be opened, typed originals are not archived and the hub says so once. Leaving
the context writes what is pending before the archive is closed.

The utterance itself is durable before this (it is on the timeline before it is ACKed);
this is the second copy, the one kept byte for byte. Each outcome is counted
(``turn.archived`` / ``turn.not_archived``). A forget plan made in another process
(``yimi memory forget``, the memory package) finds the originals already written: one of an
utterance said less than :data:`DELAY_S` before the plan was made can be missed, as one
still being written could be before (the window was the turn's own write).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from hub.archive.archive import WriteResult
from hub.archive.errors import ArchiveError
from hub.archive.writer import LazyArchiveWriter
from hub.timeline import Admitted

log = logging.getLogger(__name__)

DELAY_S = 0.1
"""seconds: the longest a typed original waits for others to share its write"""
MAX_ITEMS = 64
"""originals written together at most (a fuller batch is written at once)"""
MAX_BYTES = 256 * 1024
"""bytes of originals written together at most"""
FORMAT = "yimi.mesh.v1.Utterance"


class TypedOriginals:
    def __init__(self, home: Path, count: Callable[[str], None]) -> None:
        self._count = count
        self._writer = LazyArchiveWriter(
            home, "typed originals", max_delay_s=DELAY_S, max_frames=MAX_ITEMS, max_bytes=MAX_BYTES
        )

    async def __aenter__(self) -> TypedOriginals:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._writer.__aexit__(et, e, tb)  # writes what is pending, closes the archive

    async def keep(self, adm: Admitted, raw: bytes) -> None:
        """Queue ``raw``, the typed utterance ``adm``'s message, for the archive."""
        writer = await self._writer.get()
        if writer is None:
            self._count("turn.not_archived")
            return
        try:
            stored = writer.add_event(
                raw,
                trace_id=adm.trace_id,
                source=adm.device,
                ts_ms=adm.ts_ms,
                meta={"utterance_id": adm.utterance_id, "format": FORMAT, "source": "typed"},
            )
        except ArchiveError as exc:  # the writer is closing
            log.warning("typed original of %s not archived: %s", adm.utterance_id, exc)
            self._count("turn.not_archived")
            return
        uid = adm.utterance_id
        stored.add_done_callback(lambda f: self._outcome(uid, f))

    def _outcome(self, uid: str, done: asyncio.Future[WriteResult]) -> None:
        result = None if done.cancelled() else done.result()
        self._count(
            "turn.archived" if result is not None and result.stored else "turn.not_archived"
        )
        log.debug("typed original of %s: %s", uid, result or "cancelled")
