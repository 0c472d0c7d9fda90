"""Waiting in tests: poll a condition until it holds, failing the test at a deadline.

The one way a test waits for something another task or process does; never a sleep standing
in for synchronisation. :func:`poll` is for async tests (the predicate may be sync or async;
the loop keeps running between checks), :func:`poll_sync` for sync tests and harnesses.
Both return the predicate's first truthy value.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

TIMEOUT = 20.0
"""Seconds a condition has by default."""


def _timed_out(timeout: float, what: str, predicate: object) -> AssertionError:
    return AssertionError(f"timed out after {timeout:g} s waiting for {what or predicate}")


async def poll(
    predicate: Callable[[], object],
    timeout: float = TIMEOUT,
    what: str = "",
    interval: float = 0.02,
) -> Any:
    """Call ``predicate`` every ``interval`` s until it returns something truthy; an
    :class:`AssertionError` naming ``what`` after ``timeout`` s."""
    deadline = asyncio.timeout(timeout)
    try:
        async with deadline:
            while True:
                value = predicate()
                if inspect.isawaitable(value):
                    value = await value
                if value:
                    return value
                await asyncio.sleep(interval)
    except TimeoutError:
        if deadline.expired():
            raise _timed_out(timeout, what, predicate) from None
        raise


def poll_sync(
    predicate: Callable[[], T], timeout: float = TIMEOUT, what: str = "", interval: float = 0.05
) -> T:
    """:func:`poll` for synchronous code: blocks the calling thread between checks."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(timeout, what, predicate)
        time.sleep(interval)
