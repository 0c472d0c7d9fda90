"""What the brain asks of the hub's eyes (:class:`hub.vision.service.Vision`), and only that:
take a snapshot on the asking device, and what recent snapshots showed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class SeenPhoto(Protocol):
    @property
    def taken_ms(self) -> int: ...
    @property
    def device(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def people(self) -> Sequence[str]: ...


class VisionDesk(Protocol):
    async def capture(self, device: str, turn_id: str, trace_id: str) -> bool: ...

    async def name_last(self, name: str) -> tuple[int, int]:
        """Name the one face on the latest snapshot: (samples of ``name`` now, needed);
        a ``YimiError`` saying why not."""
        ...

    def last_text(self, since_ms: int = 0) -> SeenPhoto | None: ...

    def people_seen(self, since_ms: int = 0) -> Sequence[SeenPhoto]: ...
