"""Hub-written timeline entries that arrive together: one document change, one broadcast.

Every admitted utterance and every finished reply is an entry the hub writes into the
timeline documents (a CRDT change, appended to the replica's log) and broadcasts to the
devices (sealed once, published once, after the group commit made it durable). Ten devices
talking at once made ten changes and ten broadcasts, each waiting for its own flush.

:class:`EntryBatch` lets them share: the first caller writes and broadcasts at once (a lone
turn waits for nothing more than before); callers that come while that is in flight — it
waits for the disk and the broker — queue up, and the first of them, when the flight lands,
writes and broadcasts everything queued as one batch. There is no task of its own: a
caller is answered when its batch is durable and broadcast, exactly as when it wrote alone,
and a failure reaches every caller of the failed batch (the next batch tries afresh).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum

from protos import sync_pb2
from sync import documents as docs

log = logging.getLogger(__name__)

MAX_BATCH = 32
"""callers whose entries one flight carries at most (one broadcast stays small)"""

WriteFn = Callable[[list[docs.Entry]], list[sync_pb2.DocUpdate]]
SendFn = Callable[[list[sync_pb2.DocUpdate]], Awaitable[None]]
AfterFn = Callable[[list[docs.Entry]], None]


class _Role(Enum):
    DONE = "done"
    """the caller's entries were written and broadcast by another caller's flight"""
    LEAD = "lead"
    """the flight before landed: this caller writes and broadcasts what is queued"""


@dataclass
class _Waiter:
    entries: list[docs.Entry]
    answer: asyncio.Future[_Role] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class EntryBatch:
    """``publish(entries)``: written by ``write``, sent by ``send``, then told to ``after``."""

    def __init__(self, write: WriteFn, send: SendFn, after: AfterFn) -> None:
        self._write = write
        self._send = send
        self._after = after
        self._queue: list[_Waiter] = []
        self._flying = False
        self.flights = 0
        """batches written and broadcast so far"""
        self.entries = 0
        """entries in them"""

    @property
    def waiting(self) -> int:
        """callers queued behind the flight in the air"""
        return len(self._queue)

    async def publish(self, entries: list[docs.Entry]) -> None:
        """Return once ``entries`` are in the documents and broadcast (raises what the write
        raised for their batch)."""
        if not entries:
            return
        me = _Waiter(list(entries))
        self._queue.append(me)
        if self._flying and await self._wait(me) is _Role.DONE:
            return
        self._flying = True
        batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
        try:
            failed = await self._fly(batch)
        except BaseException:
            if not me.answer.done():
                me.answer.cancel()  # cancelled in flight: never handed the next one
            raise
        finally:
            self._hand_over()
        if failed is not None:
            raise failed

    async def _wait(self, me: _Waiter) -> _Role:
        try:
            return await me.answer
        except asyncio.CancelledError:
            answer = me.answer
            answered = answer.done() and not answer.cancelled() and answer.exception() is None
            if answered and answer.result() is _Role.LEAD:
                # handed the next flight, then cancelled before it could take it: the next
                # waiter takes it (this caller's entries are still queued and go with it)
                self._hand_over()
            raise

    async def _fly(self, batch: list[_Waiter]) -> Exception | None:
        """Write and send ``batch``; answers its other callers, returns the write's error."""
        entries = [e for w in batch for e in w.entries]
        try:
            await self._send(self._write(entries))
        except Exception as exc:
            for w in batch:
                if not w.answer.done():
                    w.answer.set_exception(exc)
            return exc
        except BaseException:  # this caller was cancelled: the others' entries fly next
            self._queue[:0] = batch  # none was answered: every entry goes again
            raise
        self.flights += 1
        self.entries += len(entries)
        try:
            self._after(entries)
        except Exception:  # a watcher's failure is not the entries' failure
            log.exception("after publishing %d entries", len(entries))
        for w in batch:
            if not w.answer.done():
                w.answer.set_result(_Role.DONE)
        return None

    def _hand_over(self) -> None:
        """The next flight is the first waiting caller's (one whose wait was cancelled
        cannot fly: its entries go with the next flight, or the next ``publish``)."""
        for w in self._queue:
            if not w.answer.done():
                w.answer.set_result(_Role.LEAD)
                return
        self._flying = False
