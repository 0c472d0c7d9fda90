"""The phone's lock state: is it unlocked by its owner right now?

A real phone asks its operating system's keyguard. This machine has no phone: a phone
bundle reads :class:`FakeLockSensor`, a FAKE sensor — it says so in its name, and that name
travels (signed) with every payment approval and unlock lease it backs. Its state is a
file in the bundle (``state/fake-lock-sensor.json``) that ``yimi pay lock-sensor`` sets;
missing or unreadable means locked.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class LockState:
    unlocked: bool
    since_ms: int
    """when the sensor last changed state"""
    sensor: str


class LockSensor(Protocol):
    name: str

    def read(self) -> LockState: ...


class FakeLockSensor:
    """A FAKE lock sensor for phone bundles on machines without a phone."""

    name = "fake-lock-sensor"

    def __init__(self, state_dir: Path) -> None:
        self.path = Path(state_dir) / "fake-lock-sensor.json"

    def read(self) -> LockState:
        try:
            data = json.loads(self.path.read_text())
            return LockState(data["unlocked"] is True, int(data["since_ms"]), self.name)
        except (OSError, ValueError, KeyError, TypeError):
            return LockState(False, 0, self.name)

    def set(self, unlocked: bool) -> LockState:
        state = LockState(unlocked, int(time.time() * 1000), self.name)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump({"unlocked": unlocked, "since_ms": state.since_ms}, fh)
        os.replace(tmp, self.path)
        return state
