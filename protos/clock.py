"""The one wall clock: milliseconds since the epoch, the time base of envelopes, stores,
timeline entries and audio frames. Components that decide by time take it as an argument
(``now_ms``) or a callable, so tests can set it; this is the default they fall back to."""

from __future__ import annotations

import time


def now_ms() -> int:
    """Wall clock in whole milliseconds since the epoch (``time.time``: a test that sets
    ``time.time`` sets this too)."""
    return int(time.time() * 1000)
