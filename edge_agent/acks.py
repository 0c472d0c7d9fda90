"""A device's ACKs of reply chunks, gathered: a delayed ACK, as TCP's.

The hub sends the chunks of a reply made whole at once (a rule-based answer, say) back to
back. ACKed one by one, each chunk costs the device a sealed, signed message and a broker
round trip, and the hub an open, a signature check and a ``hub.db`` transaction. So the
ACK of a chunk that is not its reply's last is held for up to :data:`ACK_DELAY_S`, and the
ACK of the next chunk, usually a millisecond later, carries it too
(``DeliveryAck.more_chunks``). The final chunk's ACK goes at once, with every chunk of its
reply still held.

Only the chunks the device was given are listed: the ACK of a later chunk never covers one
that was lost, and the hub sends that one again when the device is back online. An ACK
that cannot be sent is not kept either (the hub sends its chunks again, and they are
ACKed again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType

from protos import mesh_pb2
from protos.clock import now_ms
from sync.errors import SyncError
from sync.tasks import TaskOwner, within

log = logging.getLogger(__name__)

ACK_DELAY_S = 0.2
"""seconds the ACK of a chunk that is not its reply's last waits for the next chunks (the
chunks of a reply made at once come milliseconds apart; a streamed one's, as the words come)"""

EXIT_SEND_S = 5.0
"""seconds the ACKs still held at exit may take to send (past that they are left: the hub
sends their chunks again)"""

SendAck = Callable[[mesh_pb2.DeliveryAck], Awaitable[None]]
"""seal and publish one ACK to the hub (raises :class:`~sync.errors.SyncError` if it fails)"""


@dataclass
class _Held:
    """The chunks of one reply whose ACK (in one state) waits."""

    chunks: list[int] = field(default_factory=list)
    at_ms: int = 0
    """when the last of them was shown or spoken (ms since the epoch)"""
    timer: asyncio.Task[None] | None = None
    """sends them when :data:`ACK_DELAY_S` has passed with no final chunk"""


class DelayedAcks:
    """Gathers a device's ACKs (see the module); an async context manager that owns the
    timers, and at its exit sends what it still holds."""

    def __init__(self, send: SendAck, *, delay_s: float = ACK_DELAY_S, name: str = "acks") -> None:
        self._send = send
        self._delay_s = delay_s
        self._held: dict[tuple[str, int], _Held] = {}
        self._timers = TaskOwner(name)
        self._closing = False
        """set at exit: from then on every ACK goes at once (no timer is left behind)"""

    @property
    def held(self) -> int:
        """replies (by state) with an ACK waiting"""
        return len(self._held)

    async def __aenter__(self) -> DelayedAcks:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._closing = True
        await self._timers.close()
        await within(f"{self._timers.name}: the last ACKs", self._send_all, limit=EXIT_SEND_S)

    async def _send_all(self) -> None:
        for key in list(self._held):
            await self._send_quietly(key)

    async def ack(self, reply: mesh_pb2.Reply, state: int) -> None:
        """ACK ``reply`` (one chunk) in ``state``: at once if it is its reply's final chunk
        (with the chunks held before it) or the component is closing, else held (see the
        module). Raises :class:`~sync.errors.SyncError` when an ACK sent at once cannot be
        sent."""
        key = (reply.id, state)
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = _Held()
        if reply.chunk not in held.chunks:
            held.chunks.append(reply.chunk)
        held.at_ms = now_ms()
        if reply.final or self._closing:
            await self._send_held(key)
        elif held.timer is None:
            held.timer = self._timers.spawn(self._later(key), f"ack:{reply.id}")

    async def _later(self, key: tuple[str, int]) -> None:
        await asyncio.sleep(self._delay_s)
        await self._send_quietly(key)

    async def _send_quietly(self, key: tuple[str, int]) -> None:
        try:
            await self._send_held(key)
        except SyncError as exc:  # the hub sends the chunks again when we are back
            log.info("ACK of %s not sent: %s", key[0], exc)

    async def _send_held(self, key: tuple[str, int]) -> None:
        held = self._held.pop(key, None)
        if held is None:
            return
        if held.timer is not None and held.timer is not asyncio.current_task():
            held.timer.cancel()
        *more, last = held.chunks
        await self._send(
            mesh_pb2.DeliveryAck(
                reply_id=key[0],
                state=key[1],  # type: ignore[arg-type]
                at_ms=held.at_ms,
                chunk=last,
                more_chunks=more,
            )
        )
