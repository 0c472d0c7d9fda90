"""The payment authority's own tasks, owned: the periodic sweep (every second: expire what
waited too long, pay auto-payments whose undo window passed, re-check unknown payments)
and each auto-payment's undo timer. An async context manager: its tasks run while the block
runs and are cancelled and awaited when it ends (no fire-and-forget).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from sync.tasks import TaskOwner

log = logging.getLogger(__name__)

SWEEP_S = 1.0


class PaymentSweeper:
    """``sweep`` is one pass; ``pay`` pays a payment (once) when its undo window ends."""

    def __init__(
        self,
        sweep: Callable[[], Awaitable[None]],
        pay: Callable[[str], Awaitable[Any]],
        clock: Callable[[], int],
        *,
        periodic: bool = True,
        every_s: float = SWEEP_S,
    ) -> None:
        self.sweep = sweep
        self.pay = pay
        self.clock = clock
        self.periodic = periodic
        self.every_s = every_s
        self._tasks: TaskOwner | None = None

    async def __aenter__(self) -> PaymentSweeper:
        self._tasks = TaskOwner("payments")
        if self.periodic:
            self._tasks.spawn(self._run(), "sweep")
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        tasks, self._tasks = self._tasks, None
        if tasks is not None:
            await tasks.close()

    def pay_at(self, payment_id: str, at_ms: int) -> None:
        """Pay ``payment_id`` at ``at_ms`` (the end of its undo window). Outside the block
        nothing is scheduled: the sweep pays it once the window has passed."""
        if self._tasks is None:
            return

        async def later() -> None:
            await asyncio.sleep(max(0.0, (at_ms - self.clock()) / 1000))
            await self.pay(payment_id)

        self._tasks.spawn(later(), f"auto-pay:{payment_id}")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            try:
                await self.sweep()
            except Exception:
                log.exception("payment sweep failed")
