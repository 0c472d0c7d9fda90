"""Numeric settings read from the environment (tests shorten the mesh's timers with them)."""

from __future__ import annotations

import os


def positive_float(name: str, default: float) -> float:
    """``$name`` as a positive float; ``default`` when it is unset, empty, malformed or not > 0."""
    raw = os.environ.get(name, "")
    try:
        value = float(raw) if raw else default
    except ValueError:
        return default
    return value if value > 0 else default
