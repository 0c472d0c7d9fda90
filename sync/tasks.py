"""Owned background tasks: named, logged if they fail, cancelled and awaited on exit."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

STOP_TIMEOUT_S = 10.0
"""seconds a component has to stop (its tasks to end after being cancelled); past that it
is abandoned with an error naming it, so a process always gets to its end"""


async def within(
    what: str,
    step: Callable[..., Awaitable[object]],
    *args: object,
    limit: float = STOP_TIMEOUT_S,
) -> None:
    """Await ``step(*args)``, one step of a shutdown, for at most ``limit`` seconds; a step
    that takes longer is cancelled and logged as an error naming ``what`` (the shutdown goes
    on)."""
    try:
        async with asyncio.timeout(limit):
            await step(*args)
    except TimeoutError:
        log.error("%s did not stop within %g s: abandoned", what, limit)


async def woken(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass (``None``: no limit); whether
    it was set. ``asyncio.wait_for(event.wait(), timeout)`` does the same with a new task
    for every wait (Python 3.11); a background loop woken on every turn waits here, in its
    own task, under ``asyncio.timeout``."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True


class Bounded(Generic[T]):
    """An async context manager whose exit takes at most ``limit`` seconds (see
    :func:`within`); entering is unchanged."""

    def __init__(
        self, inner: AbstractAsyncContextManager[T], what: str, limit: float = STOP_TIMEOUT_S
    ) -> None:
        self._inner = inner
        self._what = what
        self._limit = limit

    async def __aenter__(self) -> T:
        return await self._inner.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        try:
            async with asyncio.timeout(self._limit):
                return bool(await self._inner.__aexit__(exc_type, exc, tb))
        except TimeoutError:
            log.error("%s did not stop within %g s: abandoned", self._what, self._limit)
            return False


class TaskOwner:
    """An async context manager that owns long-running tasks (no fire-and-forget).

    Unlike ``asyncio.TaskGroup`` it cancels its (endless) tasks when the block ends instead of
    waiting for them to finish; a task that fails is logged and ``failed`` is set.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: set[asyncio.Task[Any]] = set()
        self.failed = asyncio.Event()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=f"{self.name}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s failed", task.get_name(), exc_info=task.exception())
            self.failed.set()

    async def __aenter__(self) -> TaskOwner:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self, limit: float = STOP_TIMEOUT_S) -> None:
        """Cancel every task and wait for them to end (see :func:`stop_tasks`)."""
        await stop_tasks(list(self._tasks), self.name, limit)


async def stop_tasks(
    tasks: list[asyncio.Task[Any]], owner: str, limit: float = STOP_TIMEOUT_S
) -> None:
    """Cancel ``tasks`` and wait for them to end, at most ``limit`` seconds in all. A task
    still running half-way is cancelled once more: a cancellation can be lost when it
    arrives just as an awaited call completes (``asyncio.wait_for`` before Python 3.12, as
    aiomqtt awaits a publish's acknowledgement), and a loop then goes on. One still running
    at the end is named in an error and left."""
    for attempt in range(2):
        for task in tasks:
            task.cancel()
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=limit / 2)
        if not pending:
            return
        names = ", ".join(sorted(t.get_name() for t in pending))
        if attempt == 0:
            log.warning("%s: cancelled again (still running): %s", owner, names)
        else:
            log.error("%s: tasks still running %g s after cancellation: %s", owner, limit, names)
        tasks = list(pending)
