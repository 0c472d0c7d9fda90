"""Upload pacing for cold packs: at most ``bytes_per_s`` on average to the cold target.

Before a pack of ``n`` bytes is uploaded, :meth:`UploadPacer.wait` blocks until the
previous uploads' share of the budget has passed (``n / bytes_per_s`` seconds after the
previous one started); the first upload goes at once. The clock and the sleep are
injectable, so tests check the pacing without waiting; :meth:`stop` ends a wait at once
(the hub is stopping: the upload is not made, the objects stay hot for the next round).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from hub.archive.errors import ArchiveError


class UploadPacer:
    def __init__(
        self,
        bytes_per_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] | None = None,
    ) -> None:
        if bytes_per_s <= 0:
            raise ValueError("bytes_per_s must be positive")
        self.bytes_per_s = bytes_per_s
        self._clock = clock
        self._stopped = threading.Event()
        self._sleep = sleep or self._stopped.wait
        self._free_at: float | None = None
        self.waited_s = 0.0
        """seconds waited so far (status and tests)"""

    def stop(self) -> None:
        self._stopped.set()

    def wait(self, n: int) -> float:
        """Block until ``n`` bytes may go; returns the seconds waited."""
        waited = 0.0
        while True:
            if self._stopped.is_set():
                raise ArchiveError("archive.stopping")
            now = self._clock()
            if self._free_at is None or now >= self._free_at:
                break
            delay = self._free_at - now
            self._sleep(delay)
            waited += delay
        self._free_at = now + n / self.bytes_per_s
        self.waited_s += waited
        return waited
