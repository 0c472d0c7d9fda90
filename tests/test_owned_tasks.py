"""Owned tasks stop, even when a cancellation is lost: ``TaskOwner.close`` cancels a task
that goes on once more, and gives up on one that never ends (named in an error) instead of
hanging the process's shutdown; ``Bounded`` and ``within`` bound one component's exit."""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType

import pytest

from sync.tasks import Bounded, TaskOwner, within, woken


async def _loses_one_cancel(started: asyncio.Event, lost: list[int]) -> None:
    """A loop that swallows its first cancellation, as a lost one looks from outside."""
    started.set()
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if lost:
                raise
            lost.append(1)


async def _never_ends(started: asyncio.Event) -> None:
    started.set()
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue


async def test_a_task_that_lost_its_cancellation_is_cancelled_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started, lost = asyncio.Event(), list[int]()
    owner = TaskOwner("t")
    task = owner.spawn(_loses_one_cancel(started, lost), "loop")
    await started.wait()
    with caplog.at_level(logging.WARNING, logger="sync.tasks"):
        await owner.close(limit=2)
    assert task.cancelled() and lost == [1]
    assert "cancelled again" in caplog.text and "t:loop" in caplog.text


async def test_a_task_that_never_ends_is_named_and_left(caplog: pytest.LogCaptureFixture) -> None:
    started = asyncio.Event()
    owner = TaskOwner("t")
    task = owner.spawn(_never_ends(started), "stubborn")
    await started.wait()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with caplog.at_level(logging.ERROR, logger="sync.tasks"):
        await owner.close(limit=0.4)
    assert loop.time() - t0 < 5
    assert not task.done()
    assert "still running" in caplog.text and "t:stubborn" in caplog.text
    # the test's own clean-up: the task ends when its coroutine is closed
    task.get_coro().close()  # type: ignore[union-attr]
    await asyncio.sleep(0)


class _HangsOnExit:
    def __init__(self) -> None:
        self.exited = False

    async def __aenter__(self) -> str:
        return "inside"

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.Event().wait()  # never set


async def test_a_component_whose_exit_hangs_is_abandoned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="sync.tasks"):
        async with Bounded(_HangsOnExit(), "the stuck part", limit=0.2) as value:
            assert value == "inside"
        await asyncio.wait_for(within("a stuck step", asyncio.Event().wait, limit=0.2), 20)
    assert "the stuck part did not stop within 0.2 s" in caplog.text
    assert "a stuck step did not stop" in caplog.text


async def test_woken_says_whether_the_event_came_and_waits_in_the_callers_task() -> None:
    event = asyncio.Event()
    assert await woken(event, 0.01) is False  # nothing came: the timeout passed
    tasks = len(asyncio.all_tasks())
    seen: list[int] = []

    async def setter() -> None:
        seen.append(len(asyncio.all_tasks()))  # the waiter made no task of its own
        event.set()

    setting = asyncio.create_task(setter())
    assert await woken(event, 30) is True
    await setting
    assert seen == [tasks + 1]  # this task and the setter's, nothing else
    assert await woken(event, 0) is True  # already set: at once, even with no time left


async def test_woken_leaves_a_cancellation_a_cancellation() -> None:
    event = asyncio.Event()
    started = asyncio.Event()

    async def wait() -> bool:
        started.set()  # no yield before woken's own wait: the test resumes once it waits
        return await woken(event, 30)

    waiting = asyncio.create_task(wait())
    await started.wait()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
