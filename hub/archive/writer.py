"""The hot archive writer: batches L5 writes at 500 ms / 20 frames / 64 KiB, whichever first.

An async context manager that owns its flush task. Producers hand it audio frames (16-bit
16 kHz mono PCM), images and events, each with a trace id and a source, and get back a
future that resolves to a :class:`~hub.archive.archive.WriteResult` once the batch holding
it was written — or refused by disk admission, in which case ``stored`` is False and the
reason says why (the writer never reports a refused write as stored).

Within one batch, consecutive audio frames of the same (source, trace id) become one audio
object; every image and event is its own object. The thresholds are checked on every
submission (frames, bytes) and against an injectable clock (age of the oldest pending
item), so tests drive time without sleeping: advance the clock, then ``await poll()``.

:class:`LazyArchiveWriter` is the writer of a part of the hub that archives only when it
has something to keep (voice audio, typed originals): the archive is opened in a worker
thread at first use, a failure to open it is said once (nothing of that part is archived
then), and leaving writes what is pending before closing an archive it opened itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from hub.archive import pack as fmt
from hub.archive.archive import Archive, NewObject, WriteResult
from hub.archive.errors import ArchiveError
from sync.tasks import TaskOwner, woken

log = logging.getLogger(__name__)

MAX_DELAY_S = 0.5
MAX_FRAMES = 20
MAX_BYTES = 64 * 1024
MAX_BACKLOG_BYTES = 16 << 20
"""Pending bytes beyond which new items are refused at once (the disk is stuck)."""

BYTES_PER_MS = fmt.AUDIO_RATE * 2 // 1000


@dataclass
class _Item:
    kind: str
    data: bytes
    source: str
    trace_id: str
    ts_ms: int
    meta: dict[str, Any]
    future: asyncio.Future[WriteResult]


@dataclass(frozen=True)
class FlushRecord:
    """One flush: why it happened, how many items and bytes, how many objects stored."""

    reason: str  # "age", "frames", "bytes", "flush" or "close"
    items: int
    bytes: int
    objects: int
    stored: int


@dataclass
class _Batch:
    items: list[_Item] = field(default_factory=list)
    bytes: int = 0
    first_at: float | None = None


class ArchiveWriter:
    def __init__(
        self,
        archive: Archive,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_delay_s: float = MAX_DELAY_S,
        max_frames: int = MAX_FRAMES,
        max_bytes: int = MAX_BYTES,
        max_backlog_bytes: int = MAX_BACKLOG_BYTES,
    ) -> None:
        self.archive = archive
        self._clock = clock
        self.max_delay_s = max_delay_s
        self.max_frames = max_frames
        self.max_bytes = max_bytes
        self.max_backlog_bytes = max_backlog_bytes
        self._batch = _Batch()
        self._full: deque[tuple[_Batch, str]] = deque()
        """batches cut at their frame or byte limit, waiting for the flush task (items added
        after the cut start a new batch: no batch is ever over a limit)"""
        self._in_flight = 0
        self._wake = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        self._tasks: TaskOwner | None = None
        self._closed = True
        self.flushes: deque[FlushRecord] = deque(maxlen=1000)
        self.stored = 0
        self.not_stored = 0

    # -------------------------------------------------------------- lifecycle
    async def __aenter__(self) -> ArchiveWriter:
        self._tasks = TaskOwner("archive-writer")
        self._tasks.spawn(self._run(), "flush")
        self._closed = False
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._closed = True
        try:
            await self._flush_now("close")
        finally:
            if self._tasks is not None:
                await self._tasks.close()
                self._tasks = None

    # -------------------------------------------------------------- submitting
    def add_audio(
        self,
        pcm: bytes,
        *,
        trace_id: str,
        source: str,
        ts_ms: int | None = None,
        meta: dict[str, Any] | None = None,
    ) -> asyncio.Future[WriteResult]:
        """One audio frame: 16-bit little-endian PCM, 16 kHz, mono. Frames of one (source,
        trace id, ``meta["utterance_id"]``) in one batch become one object, with the first
        frame's ``meta``."""
        if len(pcm) == 0 or len(pcm) % 2:
            raise ArchiveError(
                "archive.frame_invalid", reason=f"{len(pcm)} bytes is not whole 16-bit samples"
            )
        return self._add("audio", pcm, trace_id, source, ts_ms, dict(meta or {}))

    def add_image(
        self,
        data: bytes,
        *,
        trace_id: str,
        source: str,
        meta: dict[str, Any] | None = None,
        ts_ms: int | None = None,
    ) -> asyncio.Future[WriteResult]:
        return self._add("image", data, trace_id, source, ts_ms, dict(meta or {}))

    def add_event(
        self,
        data: bytes,
        *,
        trace_id: str,
        source: str,
        meta: dict[str, Any] | None = None,
        ts_ms: int | None = None,
    ) -> asyncio.Future[WriteResult]:
        return self._add("event", data, trace_id, source, ts_ms, dict(meta or {}))

    def _add(
        self,
        kind: str,
        data: bytes,
        trace_id: str,
        source: str,
        ts_ms: int | None,
        meta: dict[str, Any],
    ) -> asyncio.Future[WriteResult]:
        if self._closed:
            raise ArchiveError("archive.closed", what=kind)
        future: asyncio.Future[WriteResult] = asyncio.get_running_loop().create_future()
        queued = sum(b.bytes for b, _ in self._full)
        if self._batch.bytes + queued + self._in_flight + len(data) > self.max_backlog_bytes:
            reason = "the archive is falling behind (write backlog full)"
            log.warning("NOT STORED: %s of %d bytes: %s", kind, len(data), reason)
            self.not_stored += 1
            future.set_result(WriteResult(False, kind, len(data), reason=reason))
            return future
        if ts_ms is None:
            ts_ms = self.archive.now_ms()
        b = self._batch
        if b.first_at is None:
            b.first_at = self._clock()
        b.items.append(_Item(kind, bytes(data), source, trace_id, ts_ms, meta, future))
        b.bytes += len(data)
        due = self._due()
        if due in ("frames", "bytes"):
            self._full.append((b, due))
            self._batch = _Batch()
            self._wake.set()
        elif due is not None:
            self._wake.set()
        elif len(b.items) == 1:
            self._wake.set()  # the flush task re-arms its timer for the new oldest item
        return future

    # -------------------------------------------------------------- flushing
    def _due(self) -> str | None:
        b = self._batch
        if not b.items:
            return None
        if len(b.items) >= self.max_frames:
            return "frames"
        if b.bytes >= self.max_bytes:
            return "bytes"
        if b.first_at is not None and self._clock() - b.first_at >= self.max_delay_s:
            return "age"
        return None

    @property
    def pending(self) -> int:
        return len(self._batch.items) + sum(len(b.items) for b, _ in self._full)

    async def poll(self) -> FlushRecord | None:
        """Flush if a threshold is reached now (by the clock, frames or bytes); the last
        flush's record."""
        record = None
        while self._full:
            record = await self._flush_full()
        reason = self._due()
        return (await self._flush_now(reason) if reason else None) or record

    async def _flush_full(self) -> FlushRecord | None:
        async with self._flush_lock:
            if not self._full:
                return None
            batch, reason = self._full.popleft()
            return await self._write(batch, reason)

    async def flush(self) -> FlushRecord | None:
        """Write whatever is pending now."""
        return await self._flush_now("flush")

    async def _flush_now(self, reason: str) -> FlushRecord | None:
        if reason in ("flush", "close"):
            while self._full:  # in the order they were cut
                await self._flush_full()
        async with self._flush_lock:
            if reason not in ("flush", "close"):
                reason = self._due() or ""
                if not reason:
                    return None
            batch, self._batch = self._batch, _Batch()
            if not batch.items:
                return None
            return await self._write(batch, reason)

    async def _write(self, batch: _Batch, reason: str) -> FlushRecord:
        groups = _group(batch.items)
        objects = [obj for obj, _ in groups]
        self._in_flight += batch.bytes
        try:
            results = await asyncio.to_thread(self.archive.store, objects)
        except Exception as exc:  # the caller must learn it was not stored, whatever happened
            log.exception("archive flush failed")
            results = [
                WriteResult(False, o.kind, len(o.data), reason=f"write failed: {exc}")
                for o in objects
            ]
        finally:
            self._in_flight -= batch.bytes
        stored = 0
        for (_, items), result in zip(groups, results, strict=True):
            if result.stored:
                stored += 1
                self.stored += len(items)
            else:
                self.not_stored += len(items)
            for item in items:
                if not item.future.done():
                    item.future.set_result(result)
        record = FlushRecord(reason, len(batch.items), batch.bytes, len(objects), stored)
        self.flushes.append(record)
        log.debug("archive flush (%s): %s", reason, record)
        return record

    async def _run(self) -> None:
        while True:
            first = self._batch.first_at
            timeout = None if first is None else max(0.0, first + self.max_delay_s - self._clock())
            await woken(self._wake, timeout)
            self._wake.clear()
            await self.poll()


ArchiveSource = Archive | Callable[[], Archive] | None
"""an archive given open, a way to open one, or ``None``: the home's (``open_archive``)"""


class LazyArchiveWriter:
    """An :class:`ArchiveWriter` over an archive opened at first use (see the module doc);
    ``what`` names what it keeps in the one error said when the archive cannot be opened,
    ``options`` are the writer's thresholds."""

    def __init__(self, home: Path, what: str, source: ArchiveSource = None, **options: Any):
        self._home = home
        self._what = what
        self._source = source
        self._options = options
        self._archive: Archive | None = None
        self._writer: ArchiveWriter | None = None
        self._failed = False
        self._opening = asyncio.Lock()

    async def __aenter__(self) -> LazyArchiveWriter:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        writer, self._writer = self._writer, None
        archive, self._archive = self._archive, None
        try:
            if writer is not None:  # what is pending is written (and its waiters told) first
                await writer.__aexit__(None, None, None)
        finally:
            if archive is not None and not isinstance(self._source, Archive):
                archive.close()  # one this opened

    async def get(self) -> ArchiveWriter | None:
        """The writer, the archive opened now if it is not yet (``None``: it cannot be)."""
        if self._writer is not None or self._failed:
            return self._writer
        async with self._opening:
            if self._writer is None and not self._failed:
                try:
                    self._archive = await asyncio.to_thread(self._open)
                except Exception as exc:
                    self._failed = True
                    log.error("%s will not be archived: %s", self._what, exc)
                    return None
                self._writer = await ArchiveWriter(self._archive, **self._options).__aenter__()
        return self._writer

    def _open(self) -> Archive:
        source = self._source
        if isinstance(source, Archive):
            return source
        if source is not None:
            return source()
        from hub.archive.settings import open_archive

        return open_archive(self._home)


def _group(items: list[_Item]) -> list[tuple[NewObject, list[_Item]]]:
    """The audio frames of one (source, trace id, utterance id) join into one object, in
    arrival order, with the first frame's meta; every image and event is an object of its
    own."""
    streams: dict[tuple[str, str, str], list[_Item]] = {}
    out: list[tuple[NewObject, list[_Item]]] = []
    for item in items:
        if item.kind == "audio":
            key = (item.source, item.trace_id, str(item.meta.get("utterance_id", "")))
            streams.setdefault(key, []).append(item)
        else:
            obj = NewObject(item.kind, item.data, item.source, item.trace_id, item.ts_ms, item.meta)
            out.append((obj, [item]))
    for run in streams.values():
        pcm = b"".join(i.data for i in run)
        meta = {
            **run[0].meta,
            "sample_rate": fmt.AUDIO_RATE,
            "channels": fmt.AUDIO_CHANNELS,
            "format": fmt.AUDIO_FORMAT,
            "frames": len(run),
            "duration_ms": len(pcm) // BYTES_PER_MS,
        }
        first = run[0]
        out.append((NewObject("audio", pcm, first.source, first.trace_id, first.ts_ms, meta), run))
    return out
