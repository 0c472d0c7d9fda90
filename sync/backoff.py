"""Capped, jittered exponential backoff ("full jitter").

``YIMI_BACKOFF_SCALE`` (a positive float, default 1) multiplies every delay, cap included: the
fault tests run their daemons with a short backoff so that a reconnect is seconds, not tens of
seconds, while the shape (doubling, capped, full jitter) stays the same.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from sync.env import positive_float

SCALE_ENV = "YIMI_BACKOFF_SCALE"


def scale() -> float:
    """The factor every backoff delay is multiplied by (``YIMI_BACKOFF_SCALE``, default 1)."""
    return positive_float(SCALE_ENV, 1.0)


@dataclass
class Backoff:
    initial: float = 0.2
    """seconds before the first retry (upper bound of its jitter), before :func:`scale`"""
    cap: float = 10.0
    """seconds: no delay exceeds this (times :func:`scale`)"""
    attempt: int = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.initial * (2**self.attempt)) * scale()
        self.attempt += 1
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempt = 0
