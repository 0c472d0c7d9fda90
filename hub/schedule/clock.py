"""The scheduler's clock: wall time in milliseconds, injectable.

:class:`SystemClock` is the real one. :class:`TestClock` is the real clock plus an offset
that a test moves forward (:meth:`TestClock.advance`); every scheduler listening to it wakes
at once, so a test checks a 20-second timer or tomorrow's reminder without waiting for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def listen(self, on_change: Callable[[], None]) -> Callable[[], None]:
        """Call ``on_change`` when the clock jumps; returns the function that stops it."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def listen(self, on_change: Callable[[], None]) -> Callable[[], None]:
        return lambda: None


class TestClock:
    """The system clock moved by ``offset_ms`` (tests only)."""

    __test__ = False  # not a pytest class

    def __init__(self, offset_ms: int = 0) -> None:
        self.offset_ms = offset_ms
        self._listeners: list[Callable[[], None]] = []

    def now_ms(self) -> int:
        return int(time.time() * 1000) + self.offset_ms

    def advance(self, seconds: float) -> None:
        self.offset_ms += int(seconds * 1000)
        for listener in list(self._listeners):
            listener()

    def listen(self, on_change: Callable[[], None]) -> Callable[[], None]:
        self._listeners.append(on_change)

        def stop() -> None:
            if on_change in self._listeners:
                self._listeners.remove(on_change)

        return stop
