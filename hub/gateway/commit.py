"""Group commit of the gateway's ledger and audit writes across concurrent calls.

A call's writes are staged first: its ledger rows join the ledger's open group transaction
(:meth:`Ledger.record_receipt` with ``sync=False``, visible at once to every later read) and
its audit records are queued (:meth:`AuditLog.stage`). :meth:`ReceiptBatches.durable` then
waits until a batch holding them is durable. One batch at a time is written: its audit
records are chained and its head signed once, the head joins the ledger's transaction,
which is committed (one ``COMMIT``, without an fsync); then one ``fdatasync`` of the
ledger's write-ahead log (rows and signed head) on its own thread alongside one write and
``fdatasync`` of the audit records; once both are done the head file is rewritten (its
durable copy being the ledger's, see :mod:`.audit`). Two fsyncs side by side per batch.

When a batch is written: while one is being written, the next one collects every call
that stages meanwhile and is written as soon as the first is durable (under load a batch
grows with the number of callers and the fsyncs per call fall). When none is, a batch
starts once the callers ready in the current turn of the event loop have joined it; a lone
caller's batch is written from the event loop (one thread hand-off fewer: under load
hand-offs cost as much as the fsyncs), a larger one from a worker thread so the loop goes
on. Records nobody waits for (:meth:`ReceiptBatches.later`: an allowed ``observe``
decision) ride with the next batch, or are written :data:`LATER_S` after they were staged
if no batch came.

Guarantees: nobody waiting on a batch is answered before the whole batch is durable; if
writing a batch fails, every caller of that batch gets :class:`GatewayError`
``gateway.commit_failed`` (the audit log is cut back to where it was, its head untouched),
and what earlier batches committed stays as it was. A caller that gives up waiting (its
task cancelled) leaves the batch and its other callers as they were.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from hub.gateway.audit import AuditLog, Prepared
from hub.gateway.errors import GatewayError
from hub.gateway.ledger import Ledger

log = logging.getLogger(__name__)

LATER_S = 0.05
"""longest a record staged with :meth:`ReceiptBatches.later` waits for a batch to join"""


@dataclass
class _Batch:
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    """one future per caller waiting on the batch (a batch may also carry records nobody
    waits for)"""


@dataclass
class CommitStats:
    batches: int = 0
    """batches made durable"""
    callers: int = 0
    """callers answered by them"""
    failed: int = 0
    """batches whose write failed"""
    sizes: list[int] = field(default_factory=list)
    """callers per durable batch, in order (the last 1000)"""


class ReceiptBatches:
    """Makes staged ledger and audit writes durable in shared batches (see the module doc)."""

    def __init__(self, ledger: Ledger, audit: AuditLog) -> None:
        self.ledger = ledger
        self.audit = audit
        self.stats = CommitStats()
        self._open: _Batch | None = None
        self._writing: asyncio.Future[None] | None = None
        self._scheduled: asyncio.Handle | None = None
        """the open batch's start after this turn of the loop"""
        self._deadline: asyncio.TimerHandle | None = None
        """the open batch's start at the latest (records staged with :meth:`later`)"""
        self._wal = ThreadPoolExecutor(1, thread_name_prefix="ledger-wal-sync")

    async def durable(self) -> None:
        """Return once everything staged so far is durable; raise :class:`GatewayError`
        ``gateway.commit_failed`` if the batch holding it could not be written."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._join().waiters.append(waiter)
        self._start()
        await waiter  # cancelled: only this caller's future is

    def soon(self) -> None:
        """Make what was staged durable in the background (nobody waits for it): with the
        batch being written now, else at once."""
        self._join()
        self._start()

    def later(self) -> None:
        """Make what was staged durable with the next batch (nobody waits for it), or in
        :data:`LATER_S` at the latest."""
        self._join()
        if self._writing is None and self._scheduled is None and self._deadline is None:
            self._deadline = asyncio.get_running_loop().call_later(LATER_S, self._begin)

    async def drain(self) -> None:
        """Wait until nothing is staged or being written (at close)."""
        while self._writing is not None or self._open is not None:
            writing = self._writing
            if writing is None:
                self._begin()
            elif writing.done():
                await asyncio.sleep(0)  # its callback runs next
            else:
                await asyncio.wait({writing})

    async def aclose(self) -> None:
        """Drain, then stop the WAL-sync thread."""
        await self.drain()
        self._wal.shutdown(wait=True)

    def _join(self) -> _Batch:
        if self._open is None:
            self._open = _Batch()
        return self._open

    def _start(self) -> None:
        """Write the open batch once the callers that are ready now have joined it (after
        this turn of the event loop), unless a batch is being written: then it follows."""
        if self._writing is not None or self._open is None or self._scheduled is not None:
            return
        self._scheduled = asyncio.get_running_loop().call_soon(self._begin)

    def _begin(self) -> None:
        for handle in (self._scheduled, self._deadline):
            if handle is not None:
                handle.cancel()
        self._scheduled = self._deadline = None
        if self._writing is not None or self._open is None:
            return
        batch, self._open = self._open, None
        records = self.audit.take_staged()  # taken here: later records go to the next batch
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None]
        try:
            prepared = self.audit.prepare(records)  # the CPU part here: the thread only syncs
            if prepared.head:  # the signed head, durable with the batch's rows
                self.ledger.stage_audit_head(prepared.head)
            self.ledger.commit_group()  # on this thread (the connection's); no fsync yet
            if len(batch.waiters) == 1:
                # one caller waits, none is being written: write it from here (what a lone
                # call costs); calls arriving meanwhile form the next batch, written from
                # the worker thread while the loop goes on
                self._write(prepared)
                fut = loop.create_future()
                fut.set_result(None)
            else:
                fut = loop.run_in_executor(None, self._write, prepared)
        except GatewayError as exc:
            fut = loop.create_future()
            fut.set_exception(exc)
        self._writing = fut
        fut.add_done_callback(functools.partial(self._written, batch))

    def _write(self, records: Prepared) -> None:
        """The ledger's WAL (holding the batch's rows and its signed head) is synced on a
        second thread while the audit records are written and synced; then the head file
        is rewritten (no sync of its own: its copy in the ledger is durable). Both syncs
        must succeed."""
        wal = self._wal.submit(self.ledger.sync)
        try:
            self.audit.write_prepared(records, ready=wal.result)
        finally:
            wal.result()  # raises the ledger's failure, if any (after the audit's own)

    def _written(self, batch: _Batch, fut: asyncio.Future[None]) -> None:
        self._writing = None
        exc = None if fut.cancelled() else fut.exception()
        if fut.cancelled() or exc is not None:
            self.stats.failed += 1
            reason = str(exc) if exc is not None else "the write was cancelled"
            log.error("group commit of %d call(s) failed: %s", len(batch.waiters), reason)
            for w in batch.waiters:
                if not w.done():  # each caller gets its own error, same key and fields
                    w.set_exception(
                        GatewayError(
                            "gateway.commit_failed", calls=len(batch.waiters), reason=reason
                        )
                    )
        else:
            self.stats.batches += 1
            self.stats.callers += len(batch.waiters)
            self.stats.sizes = [*self.stats.sizes[-999:], len(batch.waiters)]
            for w in batch.waiters:
                if not w.done():
                    w.set_result(None)
        if self._open is not None:
            if self._open.waiters:
                self._start()
            else:  # only records nobody waits for were staged meanwhile
                self.later()
