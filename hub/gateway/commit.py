"""Group commit of the gateway's ledger and audit writes across concurrent calls.

A call's writes are staged first: its ledger rows join the ledger's open group transaction
(:meth:`Ledger.record_receipt` with ``sync=False``, visible at once to every later read) and
its audit records are queued (:meth:`AuditLog.stage`). :meth:`GroupCommit.durable` then
waits until a batch holding them is durable. One batch at a time is written: its ledger
transaction is committed (one ``COMMIT``, without an fsync), then, in a worker thread so
the event loop goes on, one ``fdatasync`` of the ledger's write-ahead log and, at the same
time, one write and ``fdatasync`` of the audit records, then one signed head. The calls
that staged while a batch was being written form the next batch, so under load a batch
grows with the number of callers and the fsyncs per call fall; a lone caller pays one
batch.

Guarantees: nobody waiting on a batch is answered before the whole batch is durable; if
writing a batch fails, every caller of that batch gets :class:`GatewayError`
``gateway.commit_failed`` (the audit log is cut back to where it was, its head untouched),
and what earlier batches committed stays as it was.
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


@dataclass
class _Batch:
    done: asyncio.Future[None]
    callers: int = 0
    """callers waiting on it (a batch may also carry records nobody waits for)"""


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


class GroupCommit:
    """Makes staged ledger and audit writes durable in shared batches (see the module doc)."""

    def __init__(self, ledger: Ledger, audit: AuditLog) -> None:
        self.ledger = ledger
        self.audit = audit
        self.stats = CommitStats()
        self._open: _Batch | None = None
        self._writing: asyncio.Future[None] | None = None
        self._wal = ThreadPoolExecutor(1, thread_name_prefix="ledger-wal-sync")

    async def durable(self) -> None:
        """Return once everything staged so far is durable; raise :class:`GatewayError`
        ``gateway.commit_failed`` if the batch holding it could not be written."""
        batch = self._join()
        batch.callers += 1
        self._start()
        try:
            await asyncio.shield(batch.done)
        except GatewayError as exc:  # each caller gets its own error, same key and fields
            raise GatewayError(exc.key, **exc.fields) from exc

    def soon(self) -> None:
        """Make what was staged durable in the background (nobody waits for it): with the
        batch being written now, else at once."""
        self._join()
        self._start()

    async def drain(self) -> None:
        """Wait until nothing is staged or being written (at close)."""
        while self._writing is not None or self._open is not None:
            self._start()
            if self._writing is not None:
                await asyncio.wait({self._writing})

    async def aclose(self) -> None:
        """Drain, then stop the WAL-sync thread."""
        await self.drain()
        self._wal.shutdown(wait=True)

    def _join(self) -> _Batch:
        if self._open is None:
            self._open = _Batch(asyncio.get_running_loop().create_future())
        return self._open

    def _start(self) -> None:
        """Write the open batch if no batch is being written (else it follows that one)."""
        if self._writing is not None or self._open is None:
            return
        batch, self._open = self._open, None
        records = self.audit.take_staged()  # taken here: later records go to the next batch
        loop = asyncio.get_running_loop()
        try:
            self.ledger.commit_group()  # on this thread (the connection's); no fsync yet
            prepared = self.audit.prepare(records)  # the CPU part here: the thread only syncs
        except GatewayError as exc:
            failed: asyncio.Future[None] = loop.create_future()
            failed.set_exception(exc)
            self._writing = failed
        else:
            self._writing = loop.run_in_executor(None, self._write, prepared)
        self._writing.add_done_callback(functools.partial(self._written, batch))

    def _write(self, records: Prepared) -> None:
        """In the worker thread: the ledger's WAL is synced (on a second thread) while the
        audit records are written and synced, then the head; both must succeed."""
        wal = self._wal.submit(self.ledger.sync)
        try:
            self.audit.write_prepared(records)
        finally:
            wal.result()  # raises the ledger's failure, if any (after the audit's own)

    def _written(self, batch: _Batch, fut: asyncio.Future[None]) -> None:
        self._writing = None
        exc = None if fut.cancelled() else fut.exception()
        if fut.cancelled() or exc is not None:
            self.stats.failed += 1
            reason = str(exc) if exc is not None else "the write was cancelled"
            log.error("group commit of %d call(s) failed: %s", batch.callers, reason)
            batch.done.set_exception(
                GatewayError("gateway.commit_failed", calls=batch.callers, reason=reason)
            )
            if batch.callers == 0:
                batch.done.exception()  # nobody waits: retrieved here, logged above
        else:
            self.stats.batches += 1
            self.stats.callers += batch.callers
            self.stats.sizes = [*self.stats.sizes[-999:], batch.callers]
            batch.done.set_result(None)
        self._start()
