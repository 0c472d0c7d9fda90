"""Group commit of the gateway's ledger and audit writes across concurrent calls.

A call's writes are staged first: its ledger rows join the ledger's open group transaction
(:meth:`Ledger.record_receipt` with ``sync=False``, visible at once to every later read) and
its audit records are queued (:meth:`AuditLog.stage`). :meth:`ReceiptBatches.durable` then
waits until a batch holding them is durable. One batch at a time is written: its audit
records are chained and encoded and its head signed once; the records' lines and the head
join the ledger's transaction, which is committed (one ``COMMIT``, without an fsync); the
records are written to the audit file without a sync; then one ``fdatasync`` of the
ledger's write-ahead log makes the batch durable (rows, audit records, signed head); then
the head file is rewritten, unsynced. One fsync per batch: the ledger's copy of the audit
records is the durable one (see :mod:`.audit`) until the file is synced, in the background
every :data:`CHECKPOINT_S` (:meth:`AuditLog.sync_file`, off the batches' path) and at
:meth:`ReceiptBatches.aclose`; the ledger then drops its copy with the next batch
(:meth:`Ledger.stage_audit_prune`). At open, the audit log re-appends what its file lost
from that copy (:meth:`AuditLog.recover`).

When a batch is written: while one is being written, the next one collects every call
that stages meanwhile and is written as soon as the first is durable (under load a batch
grows with the number of callers and the fsyncs per call fall). When none is, a batch
starts once the callers ready in the current turn of the event loop have joined it; a lone
caller's batch is written from the event loop (no thread hand-off at all: under load a
hand-off costs as much as the fsync), a larger one from a worker thread so the loop goes
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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from hub.gateway.audit import AuditLog, Prepared
from hub.gateway.errors import GatewayError
from hub.gateway.ledger import Ledger

log = logging.getLogger(__name__)

LATER_S = 0.05
"""longest a record staged with :meth:`ReceiptBatches.later` waits for a batch to join"""
CHECKPOINT_S = 1.0
"""the audit file is synced (and the ledger's copy of its records dropped) at most this
long after a batch wrote records to it"""


@dataclass
class _Batch:
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    """one future per caller waiting on the batch (a batch may also carry records nobody
    waits for)"""
    audited: bool = False
    """the batch wrote audit records (unsynced in the file: a checkpoint follows)"""


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
        self._sync = ThreadPoolExecutor(1, thread_name_prefix="audit-file-sync")
        self._checkpoint: Future[int] | None = None
        """the audit file's sync under way (:meth:`AuditLog.sync_file`: the seq it covers)"""
        self._checkpoint_at: asyncio.TimerHandle | None = None
        """the next checkpoint's start"""

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

    async def settled(self) -> None:
        """Return once everything staged so far is durable, at once when nothing is staged
        or being written (what runs before anything leaves the hub); raise
        :class:`GatewayError` ``gateway.commit_failed`` if a batch holding it failed."""
        if self._open is not None:
            await self.durable()
            return
        writing = self._writing
        if writing is None:
            return
        await asyncio.wait({writing})
        reason = _failure(writing)
        if reason is not None:
            raise GatewayError("gateway.commit_failed", calls=0, reason=reason)

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
        """Drain, sync the audit file and drop the ledger's copy of its records (durably),
        then stop the audit file's sync thread."""
        await self.drain()
        if self._checkpoint_at is not None:
            self._checkpoint_at.cancel()
            self._checkpoint_at = None
        try:
            if self._checkpoint is not None:
                await asyncio.wrap_future(self._checkpoint)
            self.ledger.prune_audit(self.audit.sync_file())
        except (OSError, GatewayError) as exc:  # the ledger keeps its copy: recovered at open
            log.error("audit log: not synced at close: %s", exc)
        finally:
            self._checkpoint = None
            self._sync.shutdown(wait=True)

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
            if prepared.records:  # the records and signed head, durable with the batch's rows
                batch.audited = True
                self.ledger.stage_audit(
                    prepared.records[0]["seq"],
                    prepared.records[-1]["seq"],
                    prepared.blob,
                    prepared.head,
                )
            self._prune()
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
        """The audit records are written (no sync), then the ledger's WAL (holding the
        batch's rows, its audit records and signed head) is synced: the batch's one fsync;
        then the head file is rewritten (no sync either). A batch with no audit record
        only syncs the WAL."""
        if records.records:
            self.audit.write_prepared(records, ready=self.ledger.sync)
        else:
            self.ledger.sync()

    def _plan_checkpoint(self) -> None:
        """After a durable batch: sync the audit file in :data:`CHECKPOINT_S`, unless a sync
        is planned or under way."""
        if self._checkpoint_at is None and self._checkpoint is None:
            loop = asyncio.get_running_loop()
            self._checkpoint_at = loop.call_later(CHECKPOINT_S, self._start_checkpoint)

    def _start_checkpoint(self) -> None:
        """Sync the audit file on its own thread (batches go on meanwhile); the next batch
        (or :meth:`aclose`) drops the ledger's copy of what it covers (:meth:`_prune`)."""
        self._checkpoint_at = None
        self._checkpoint = self._sync.submit(self.audit.sync_file)

    def _prune(self) -> None:
        """Join the finished checkpoint's prune to the batch being written (on the loop)."""
        done = self._checkpoint
        if done is None or not done.done():
            return
        self._checkpoint = None
        try:
            self.ledger.stage_audit_prune(done.result())
        except (OSError, GatewayError) as exc:  # the ledger keeps its copy: tried again
            log.error("audit log: the file's sync failed: %s", exc)
            self._plan_checkpoint()

    def _written(self, batch: _Batch, fut: asyncio.Future[None]) -> None:
        self._writing = None
        reason = _failure(fut)
        if reason is not None:
            self.stats.failed += 1
            log.error("group commit of %d call(s) failed: %s", len(batch.waiters), reason)
            for w in batch.waiters:
                if not w.done():  # each caller gets its own error, same key and fields
                    w.set_exception(
                        GatewayError(
                            "gateway.commit_failed", calls=len(batch.waiters), reason=reason
                        )
                    )
        else:
            if batch.audited:
                self._plan_checkpoint()
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


def _failure(written: asyncio.Future[None]) -> str | None:
    """Why a batch's write failed (``None``: it did not)."""
    if written.cancelled():
        return "the write was cancelled"
    exc = written.exception()
    return None if exc is None else str(exc)
