"""The scheduler's clock: wall time in milliseconds, injectable.

:class:`SystemClock` is the real one. :class:`TestClock` is the real clock plus an offset
that a test moves forward (:meth:`TestClock.advance`); every scheduler listening to it wakes
at once, so a test checks a 20-second timer or tomorrow's reminder without waiting for it.
:class:`FileClock` is the same for hub *processes*: the offset is read from a file
(``YIMI_TEST_CLOCK``, :func:`clock_from_env`) that a test moves with
:func:`advance_file`, so a hub restarted in between keeps the test's time.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

CLOCK_ENV = "YIMI_TEST_CLOCK"
"""a file holding a clock offset in ms (tests only): the hub's scheduler runs on it"""


class Clock(Protocol):
    max_sleep_s: float
    """the scheduler looks at this clock at least this often"""

    def now_ms(self) -> int: ...

    def listen(self, on_change: Callable[[], None]) -> Callable[[], None]:
        """Call ``on_change`` when the clock jumps; returns the function that stops it."""
        ...


class SystemClock:
    max_sleep_s = 30.0

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def listen(self, on_change: Callable[[], None]) -> Callable[[], None]:
        return lambda: None


class TestClock:
    """The system clock moved by ``offset_ms`` (tests only)."""

    __test__ = False  # not a pytest class
    max_sleep_s = 30.0

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


class FileClock:
    """The system clock moved by the offset (ms, an integer) in ``path`` (tests only): a
    test moves it with :func:`advance_file`; the scheduler looks every ``max_sleep_s``."""

    max_sleep_s = 0.2

    def __init__(self, path: Path) -> None:
        self.path = path

    def offset_ms(self) -> int:
        try:
            return int(self.path.read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    def now_ms(self) -> int:
        return int(time.time() * 1000) + self.offset_ms()

    def listen(self, on_change: Callable[[], None]) -> Callable[[], None]:
        return lambda: None


def advance_file(path: Path, seconds: float) -> None:
    """Move the :class:`FileClock` of ``path`` ``seconds`` forward (atomically)."""
    offset = FileClock(path).offset_ms() + int(seconds * 1000)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(str(offset))
    os.replace(tmp, path)


def clock_from_env() -> Clock | None:
    """A :class:`FileClock` when ``YIMI_TEST_CLOCK`` names a file, else ``None`` (the
    system's clock)."""
    name = os.environ.get(CLOCK_ENV, "").strip()
    if not name:
        return None
    log.warning("the scheduler runs on the test clock in %s (%s)", name, CLOCK_ENV)
    return FileClock(Path(name))
