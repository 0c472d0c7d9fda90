"""The archive's background upkeep: pack, repack, expire — one round every interval.

An async context manager owning its task; each round runs in a thread (file and network
I/O). A round packs at most ``max_packs`` packs (2 by default) so one round stays short.
The hub runs one (:meth:`hub.mesh.daemon.HubDaemon`); it yields while a request window is
open.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

from hub.archive.archive import Archive, PackResult, ReleaseReport, RepackResult
from sync.tasks import TaskOwner

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 60.0
YIELD_POLL_S = 0.5
MAX_DEFER_S = 600.0


@dataclass
class RoundReport:
    packed: list[PackResult] = field(default_factory=list)
    repacked: list[RepackResult] = field(default_factory=list)
    released: ReleaseReport = field(default_factory=ReleaseReport)


def run_round(archive: Archive, *, max_packs: int | None = 2) -> RoundReport:
    """One upkeep round (blocking): pack what is due, repack deletions, expire hot copies."""
    report = RoundReport()
    report.packed = archive.pack(max_packs=max_packs)
    report.repacked = archive.repack()
    report.released = archive.expire()
    return report


class ArchiveMaintainer:
    """Rounds every ``interval_s``; while ``busy()`` (a call or request window is open) a
    round waits, checking every ``YIELD_POLL_S``, for at most ``max_defer_s`` — upkeep never
    competes with a conversation for the CPU, but is not put off for ever either."""

    def __init__(
        self,
        archive: Archive,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        max_packs: int = 2,
        busy: Callable[[], bool] | None = None,
        max_defer_s: float = MAX_DEFER_S,
    ) -> None:
        self.archive = archive
        self.interval_s = interval_s
        self.max_packs = max_packs
        self.busy = busy
        self.max_defer_s = max_defer_s
        self.rounds = 0
        self.deferred = 0
        """rounds that waited for a window to close"""
        self.last: RoundReport | None = None
        self._tasks: TaskOwner | None = None
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> ArchiveMaintainer:
        self._tasks = TaskOwner("archive-maintainer")
        self._tasks.spawn(self._run(), "rounds")
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.archive.pacer is not None:  # a paced upload waiting gives up (next round)
            self.archive.pacer.stop()
        if self._tasks is not None:
            await self._tasks.close()
            self._tasks = None

    async def run_once(self) -> RoundReport:
        async with self._lock:
            report = await asyncio.to_thread(run_round, self.archive, max_packs=self.max_packs)
            self.rounds += 1
            self.last = report
            return report

    async def _yield(self) -> None:
        if self.busy is None or not self.busy():
            return
        self.deferred += 1
        busy = self.busy
        for _ in range(max(1, int(self.max_defer_s / YIELD_POLL_S))):  # a probe, no event
            if not busy():
                return
            await asyncio.sleep(YIELD_POLL_S)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self._yield()
            try:
                await self.run_once()
            except Exception:
                log.exception("archive upkeep round failed")
