"""Capped, jittered exponential backoff ("full jitter")."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass
class Backoff:
    initial: float = 0.2
    """seconds before the first retry (upper bound of its jitter)"""
    cap: float = 10.0
    """seconds: no delay exceeds this"""
    attempt: int = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.initial * (2**self.attempt))
        self.attempt += 1
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempt = 0
