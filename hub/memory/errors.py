"""The memory package's exceptions: one root, texts in ``protos.errors.MESSAGES``."""

from __future__ import annotations

from typing import Any

from protos.errors import YimiError


class MemoryStoreError(YimiError):
    """An assertion, profile or deletion problem in the hub's memory."""


class Conflict(MemoryStoreError):
    """A compare-and-swap commit whose expected version is not the head.

    ``current`` is the head version (0: the id does not exist); ``status`` its status.
    """

    def __init__(self, id: str, expected: int, current: int, status: str, **extra: Any) -> None:
        super().__init__(
            "memory.conflict", id=id, expected=expected, current=current, status=status, **extra
        )
        self.id = id
        self.expected = expected
        self.current = current
        self.status = status
