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

An admitted utterance is not published on its own: :meth:`EntryBatch.hold` keeps its entry
for the flight of its reply, which a rule-based brain makes a few milliseconds later — one
change and one broadcast per turn instead of two, for the hub and for every device that
takes it — and the turn starts without waiting for a flush. An entry whose reply is slower
(a cloud model, a turn queued behind others) flies on its own at most :data:`HOLD_S` after
it was held (:meth:`EntryBatch.run`, the hub's task). Holding loses nothing: the utterance
is durable in ``hub.db`` before it is held, and a hub that stops with entries held writes
them into the documents when it starts again (``HubDaemon._reconcile``).

A finished reply is held too, to fly *soon* (:meth:`EntryBatch.hold` with ``soon``): at once
when no flight left in the last :data:`GATHER_S`, else when that much has passed since the
last one — its device already has the reply (it was sent before it was held), so the turn
ends without waiting for the documents or the broadcast, and turns that finish close
together (ten devices talking at once, or one talking fast) share one change and one
broadcast instead of one each: for the hub and for every device that takes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum

from protos import sync_pb2
from sync import documents as docs

log = logging.getLogger(__name__)

MAX_BATCH = 32
"""callers whose entries one flight carries at most (one broadcast stays small)"""
HOLD_S = 0.2
"""seconds a held entry waits for a flight to go with before it flies on its own (other
devices show the utterance at most this much later; the owner's own device shows it at once)"""
GATHER_S = 0.1
"""seconds between the starts of two flights of entries held ``soon``: other devices show a
reply at most this much later than with a flight of its own, and only when turns finish
closer together than this; each device then opens, checks and applies one broadcast per
100 ms instead of one per turn (measured: 50 devices at once, 109 -> 223 turns a second with
20 ms, p99 1.1 s -> 0.34 s; devices' CPU per turn 10.4 -> 4.0 ms)"""

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

    def __init__(
        self,
        write: WriteFn,
        send: SendFn,
        after: AfterFn,
        *,
        hold_s: float = HOLD_S,
        gather_s: float = GATHER_S,
    ) -> None:
        self._write = write
        self._send = send
        self._after = after
        self.hold_s = hold_s
        """seconds a held entry waits for a flight (:data:`HOLD_S`)"""
        self.gather_s = gather_s
        """seconds between two flights of entries held ``soon`` (:data:`GATHER_S`)"""
        self._queue: list[_Waiter] = []
        self._flying = False
        self._held: list[docs.Entry] = []
        self._due = 0.0
        """the loop's time when the held entries fly on their own"""
        self._flown_at = float("-inf")
        """the loop's time when the last flight left"""
        self._wake = asyncio.Event()
        self.flights = 0
        """batches written and broadcast so far"""
        self.entries = 0
        """entries in them"""

    @property
    def waiting(self) -> int:
        """callers queued behind the flight in the air"""
        return len(self._queue)

    @property
    def held(self) -> int:
        """entries held for the next flight"""
        return len(self._held)

    def hold(self, entries: list[docs.Entry], *, soon: bool = False) -> None:
        """Send ``entries`` with the next flight, or on their own :attr:`hold_s` from now if
        none comes — ``soon``: at once, or :attr:`gather_s` after the last flight left if
        that is later (returns at once; a failed flight holds them again)."""
        if not entries:
            return
        now = asyncio.get_running_loop().time()
        due = max(now, self._flown_at + self.gather_s) if soon else now + self.hold_s
        self._due = min(self._due, due) if self._held else due
        self._held.extend(entries)
        self._wake.set()

    async def run(self) -> None:
        """Fly held entries whose wait is over, until cancelled (the hub's task)."""
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._held:
                delay = self._due - loop.time()
                if delay > 0:  # a flight in the meantime takes them; a sooner hold wakes
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay):
                            await self._wake.wait()
                    self._wake.clear()
                    continue
                await self.drain()  # failed: held again, the next try hold_s from now

    async def drain(self) -> None:
        """Fly what is held, now (also a hub that stops: the other devices get its last
        replies at once, not when it starts again); a failure is logged and holds them
        again — they stay in ``hub.db`` whatever happens."""
        if not self._held:
            return
        try:
            await self.publish([])
        except Exception as exc:
            log.warning("held timeline entries not published: %s", exc)

    async def publish(self, entries: list[docs.Entry]) -> None:
        """Return once ``entries`` (and those held) are in the documents and broadcast
        (raises what the write raised for their batch)."""
        if not entries and not self._held:
            return
        me = _Waiter(list(entries))
        self._queue.append(me)
        if self._flying and await self._wait(me) is _Role.DONE:
            return
        self._flying = True
        batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
        try:
            failed = await self._fly(batch, me)
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

    async def _fly(self, batch: list[_Waiter], lead: _Waiter) -> Exception | None:
        """Write and send ``batch`` with the held entries; answers its callers but ``lead``
        (the one flying it), returns the write's error."""
        held, self._held = self._held, []
        entries = held + [e for w in batch for e in w.entries]
        if entries:
            self._flown_at = asyncio.get_running_loop().time()
        try:
            if entries:
                await self._send(self._write(entries))
        except Exception as exc:
            self._hold_again(held)
            for w in batch:
                if w is not lead and not w.answer.done():
                    w.answer.set_exception(exc)
            return exc
        except BaseException:  # this caller was cancelled: the others' entries fly next
            self._hold_again(held)
            self._queue[:0] = batch  # none was answered: every entry goes again
            raise
        if entries:  # (none: a wait ended by another flight taking the held entries)
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

    def _hold_again(self, held: list[docs.Entry]) -> None:
        """``held`` did not fly: first in line again, their wait starting afresh."""
        if held:
            self._held[:0] = held
            self._due = asyncio.get_running_loop().time() + self.hold_s
            self._wake.set()

    def _hand_over(self) -> None:
        """The next flight is the first waiting caller's (one whose wait was cancelled
        cannot fly: its entries go with the next flight, or the next ``publish``)."""
        for w in self._queue:
            if not w.answer.done():
                w.answer.set_result(_Role.LEAD)
                return
        self._flying = False
