"""One ordered lane per sender: a device's messages one after another, devices side by side.

The MQTT session hands the hub its messages one at a time. Handled there, one device's
handler waiting — for the disk (the group commit's flush), for a PUBACK — held up every
other device's messages, and turns that arrived together could never share a flush. The
hub now opens each message as it comes (signature, replay window, scopes: still one at a
time, in arrival order) and puts what it opened in its sender's lane; each lane has its own
task, so a sender's messages keep their order and different senders' run concurrently.

:class:`Lanes` is an async context manager owning one named task per lane (a sender with
nothing queued keeps an idle task: there are as many as enrolled devices). A lane holds at
most :data:`LANE_DEPTH` messages; past that :meth:`Lanes.put` refuses (the caller counts the
drop — the device's outbox sends again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Generic, TypeVar

import aiomqtt

from sync.errors import SyncError
from sync.tasks import TaskOwner

log = logging.getLogger(__name__)

T = TypeVar("T")

LANE_DEPTH = 256
"""messages one sender may have waiting to be handled"""


class Lanes(Generic[T]):
    """Per-sender queues handled by ``handle``, each in its own owned task."""

    def __init__(self, handle: Callable[[T], Awaitable[None]], name: str = "lanes") -> None:
        self._handle = handle
        self._queues: dict[str, asyncio.Queue[T]] = {}
        self._tasks = TaskOwner(name)
        self._open = False

    async def __aenter__(self) -> Lanes[T]:
        await self._tasks.__aenter__()
        self._open = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._open = False
        await self._tasks.__aexit__(exc_type, exc, tb)

    def put(self, sender: str, item: T) -> bool:
        """Queue ``item`` in ``sender``'s lane; ``False`` when that lane is full (or the
        lanes are closed)."""
        if not self._open:
            return False
        queue = self._queues.get(sender)
        if queue is None:
            queue = self._queues[sender] = asyncio.Queue(LANE_DEPTH)
            self._tasks.spawn(self._run(queue), f"lane:{sender[:32]}")
        try:
            queue.put_nowait(item)
        except asyncio.QueueFull:
            return False
        return True

    def waiting(self) -> int:
        """messages queued in every lane, not yet handled"""
        return sum(q.qsize() for q in self._queues.values())

    async def _run(self, queue: asyncio.Queue[T]) -> None:
        while True:
            item = await queue.get()
            try:
                await self._handle(item)
            except (aiomqtt.MqttError, SyncError) as exc:  # the link dropped mid-handler
                log.info("handler stopped: %s", exc)
            except Exception:  # one message's failure never stops its sender's lane
                log.exception("a message handler failed")
