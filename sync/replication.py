"""Replication of CRDT documents between devices and the hub.

Live: a node broadcasts each change as a ``SYNC_UPDATE`` envelope, signed by it and sealed
with the mesh group key — a device on its own ``…/dev/<id>/sync`` topic, the hub on the
mesh topic. The hub applies a device's update only if the device is enrolled and unrevoked
(the envelope layer) and may write the document (:func:`refusal`), then re-broadcasts it:
devices take live updates from the hub only, so a device needs no other device's key.

Catch-up: on (re)connect, when an import is *pending* (it depends on operations the node
lacks), and every ``CATCHUP_INTERVAL_S`` (jittered; a failed one is tried again after a
backoff), a device sends the hub its version vectors over gRPC (``Hub.Sync``); the hub
answers with exactly what the device lacks (a snapshot where the device is behind the hub's
compaction point) and its own versions, and the device pushes what the hub lacks. Imports
are idempotent, so duplicates and reordering are harmless.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Awaitable, Callable, Collection
from functools import partial
from types import TracebackType

from loro import VersionVector

from protos import sync_pb2
from sync import documents as docs
from sync.backoff import Backoff
from sync.crdt import CrdtError, lacks, updates_since
from sync.env import positive_float
from sync.replica import Applied
from sync.replicas import ReplicaSet
from sync.scopes import doc_refusal
from sync.tasks import TaskOwner, woken

log = logging.getLogger(__name__)

CATCHUP_INTERVAL_S = 30.0
"""seconds between background catch-ups of a connected device (see :func:`catchup_interval`)"""
CATCHUP_ENV = "YIMI_CATCHUP_INTERVAL_S"
"""overrides :data:`CATCHUP_INTERVAL_S` (a positive number of seconds; tests use a short one)"""
LOCAL_POLL_S = 0.25
"""seconds between looks for changes other processes wrote to this node's replicas"""
HELLO_RETRY_CAP_S = 10.0
"""seconds: the longest wait between tries of an owed hello (:meth:`HubReplication.publish`)"""
HUB_SENDER = "hub"
"""who the hub's own sequencing is attributed to"""


CATCHUP_JITTER = 0.2
"""each wait between periodic catch-ups is the interval ± this share of it, drawn anew, so
devices that started together (the power comes back, a bench starts fifty) do not all ask
the hub at the same instant every interval: the hub caps the calls in progress per address
and refuses the rest"""


def jittered(interval: float) -> float:
    """``interval`` ± :data:`CATCHUP_JITTER` of it, uniformly."""
    return random.uniform(interval * (1 - CATCHUP_JITTER), interval * (1 + CATCHUP_JITTER))


def catchup_interval() -> float:
    """Seconds between background catch-ups: ``YIMI_CATCHUP_INTERVAL_S`` if set and positive,
    else :data:`CATCHUP_INTERVAL_S`."""
    return positive_float(CATCHUP_ENV, CATCHUP_INTERVAL_S)


DEVICE_COMPACT_AT = 4 * 1024 * 1024
"""bytes of a document's update log after which a device compacts it (once the hub has it all)"""
MAX_LIVE_BLOB = 192 * 1024
"""bytes: a change larger than this is left to catch-up instead of a live broadcast"""

Broadcast = Callable[[sync_pb2.SyncUpdate], Awaitable[None]]
Request = Callable[[sync_pb2.SyncRequest], Awaitable[sync_pb2.SyncResponse]]


def refusal(doc_id: str, *, from_hub: bool) -> str | None:
    """Why a node may not write ``doc_id`` (``None`` if it may)."""
    if not docs.is_known_doc(doc_id):
        return "unknown document"
    if doc_id.startswith(docs.SEQ) and not from_hub:
        return "seq documents are written by the hub only"
    return None


def too_large(update: sync_pb2.DocUpdate) -> bool:
    """Whether ``update`` is left out of live messages (:data:`MAX_LIVE_BLOB`)."""
    return len(update.blob) > MAX_LIVE_BLOB


def live(updates: list[sync_pb2.DocUpdate]) -> sync_pb2.SyncUpdate | None:
    small = [u for u in updates if u.blob and not too_large(u)]
    return sync_pb2.SyncUpdate(updates=small) if small else None


class DeviceReplication:
    """A device's side: broadcast local changes, apply the hub's, catch up on demand."""

    def __init__(
        self,
        replicas: ReplicaSet,
        *,
        broadcast: Broadcast,
        request: Request,
        is_connected: Callable[[], bool],
        scopes: Collection[str] | None = None,
        flush: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.replicas = replicas
        self._flush = flush
        """makes the replicas' appends durable (their :class:`~storage.group_commit.GroupCommit`'s
        flush, when they have one): awaited before anything about them is sent"""
        self._broadcast = broadcast
        self._request = request
        self._is_connected = is_connected
        self._scopes = scopes
        """the device certificate's scopes: documents it may not write are never sent (the
        hub would refuse them); ``None`` sends every document"""
        self._wanted = asyncio.Event()
        self._tasks = TaskOwner("device-sync")
        self.catchups = 0
        """completed catch-ups"""
        self.caught_up = asyncio.Event()

    async def __aenter__(self) -> DeviceReplication:
        self._tasks.spawn(self._poll_local(), "local-changes")
        self._tasks.spawn(self._catchup_loop(), "catch-up")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._tasks.close()

    def wake(self) -> None:
        """Catch up now (called on every (re)connection)."""
        self._wanted.set()

    async def send(self, updates: list[sync_pb2.DocUpdate]) -> None:
        """Broadcast local changes (best effort: a catch-up delivers whatever is missed; a
        change too large to go live, or one that could not be sent, wakes one at once,
        retried with backoff while it fails). Documents a device never writes (``seq``:
        another process of the bundle appended the hub's broadcast of one to the shared
        files) are not sent: the hub refuses them."""
        sendable = [u for u in updates if self._sendable(u.doc)]
        message = live(sendable)
        if any(map(too_large, sendable)):
            self._wanted.set()  # too large for a live message: a catch-up carries it now
        if message is None or not self._is_connected():
            return
        try:
            if self._flush is not None:
                await self._flush()
            await self._broadcast(message)
        except Exception as exc:  # a catch-up pushes it: now, not at the next interval
            log.info("live update not sent (%s); a catch-up will carry it", exc)
            self._wanted.set()

    def on_hub_update(self, update: sync_pb2.SyncUpdate) -> None:
        """Apply a live update the hub broadcast.

        An empty one is the hub's hello after it (re)started and subscribed: anything this
        device broadcast while the hub was not listening is pushed by a catch-up now.
        """
        if not update.updates:
            self._wanted.set()
            return
        for item in update.updates:
            if not self.replicas.wanted(item.doc) or refusal(item.doc, from_hub=True):
                continue
            try:
                result = self.replicas.apply(item)
            except CrdtError as exc:
                log.warning("%s", exc)
                continue
            if result.pending:
                self._wanted.set()

    def _may_write(self, doc_id: str) -> bool:
        return self._scopes is None or doc_refusal(doc_id, self._scopes) is None

    def _sendable(self, doc_id: str) -> bool:
        """A document this device may send the hub: one devices write, its certificate
        granting it (the hub refuses any other)."""
        return refusal(doc_id, from_hub=False) is None and self._may_write(doc_id)

    async def _poll_local(self) -> None:
        while True:
            await asyncio.sleep(LOCAL_POLL_S)
            try:
                changes = self.replicas.refresh()
            except CrdtError as exc:
                log.warning("%s", exc)
                continue
            if changes:
                await self.send(changes)

    async def _catchup_loop(self) -> None:
        """A catch-up when one is wanted, else every :func:`catchup_interval` (jittered); a
        failed one (the hub busy or out of reach) is tried again after a capped, jittered
        backoff, not only at the next interval."""
        interval = catchup_interval()
        retry = Backoff(cap=interval)
        again: float | None = None  # seconds to the retry of a failed one (None: none failed)
        while True:
            await woken(self._wanted, jittered(interval) if again is None else again)
            self._wanted.clear()
            if not self._is_connected():
                again = None  # no retries while offline: the reconnection wakes it
                continue
            try:
                await self.catch_up()
            except Exception as exc:
                again = retry.next_delay()
                log.info("catch-up failed (tried again in %.1f s): %s", again, exc)
            else:
                retry.reset()
                again = None

    async def catch_up(self) -> tuple[int, int]:
        """One exchange with the hub; returns (updates taken, updates pushed)."""
        response = await self._request(
            sync_pb2.SyncRequest(have=self.replicas.states(), list_docs=True)
        )
        taken = 0
        for item in response.updates:
            if self.replicas.wanted(item.doc) and not refusal(item.doc, from_hub=True):
                try:
                    taken += self.replicas.apply(item).changed
                except CrdtError as exc:
                    log.warning("%s", exc)
        hub_has = {s.doc: s.version for s in response.have}
        push = []
        for doc_id in self.replicas.doc_ids():
            if not self._sendable(doc_id):
                continue
            doc = self.replicas.get(doc_id).doc
            theirs = hub_has.get(doc_id, b"")
            if lacks(doc, theirs):
                blob, _ = updates_since(doc_id, doc, theirs)
                push.append(sync_pb2.DocUpdate(doc=doc_id, blob=blob))
        if push:
            if self._flush is not None:
                await self._flush()
            result = await self._request(sync_pb2.SyncRequest(push=push))
            for reason in result.refused:
                log.warning("hub refused a pushed update: %s", reason)
            after = {s.doc: s.version for s in result.have}
            stuck = [
                u.doc for u in push if lacks(self.replicas.get(u.doc).doc, after.get(u.doc, b""))
            ]
            if result.refused and stuck:
                # Our changes depend on history the hub compacted away: take its snapshot
                # (asked for by an empty version) and re-apply them on top, then push again.
                answer = await self._request(
                    sync_pb2.SyncRequest(have=[sync_pb2.DocState(doc=d) for d in stuck])
                )
                for item in answer.updates:
                    if item.snapshot and item.doc in stuck:
                        try:
                            if self.replicas.apply(item).changed:
                                self._wanted.set()
                        except CrdtError as exc:
                            log.warning("%s", exc)
            hub_has.update(after)
        self._compact_synced(hub_has)
        self.catchups += 1
        self.caught_up.set()
        return taken, len(push)

    def _compact_synced(self, hub_has: dict[str, bytes]) -> None:
        """Compact documents whose log grew large — only those the hub has all of.

        A device never compacts away history the hub lacks: its next push would then have
        to be a snapshot, which the hub does not take from devices.
        """
        for doc_id in self.replicas.doc_ids():
            replica = self.replicas.get(doc_id)
            if replica.log_bytes < DEVICE_COMPACT_AT or lacks(
                replica.doc, hub_has.get(doc_id, b"")
            ):
                continue
            try:
                replica.compact()
            except CrdtError as exc:
                log.warning("%s", exc)


class HubReplication:
    """The hub's side: apply devices' updates, re-broadcast, serve catch-ups, sequence entries.

    ``on_entries`` is called with the timeline entries that have no ``seq`` yet; it returns
    their seqs (from the hub's SQLite timeline — the source of truth for ``seq``), or
    ``docs.REFUSED`` for an entry the hub keeps out of the timeline.
    """

    def __init__(
        self,
        replicas: ReplicaSet,
        *,
        broadcast: Broadcast,
        sequence: Callable[[list[docs.Entry], str], dict[str, int]],
        scopes_of: Callable[[str], Collection[str]] | None = None,
        count: Callable[[str], None] | None = None,
    ) -> None:
        self.replicas = replicas
        self._broadcast = broadcast
        self._sequence = sequence
        self._scopes_of = scopes_of
        """device → its certificate's scopes; ``None`` checks no scopes (in-process tests)"""
        self._count = count
        """counts every refused update: ``rejected.scope`` or ``rejected.sync_update``"""
        self._tasks = TaskOwner("hub-sync")
        self.refused: dict[str, int] = {}
        self._sequenced_at: dict[str, tuple[VersionVector, VersionVector]] = {}
        """timeline document → (its version, its seq document's version) when every entry
        it had was found sequenced"""
        self._owed = asyncio.Event()
        """a change did not go live (a broadcast failed, or it was too large): the devices
        are owed a hello, which makes each catch up at once"""
        self.hellos = 0
        """hellos sent for changes that did not go live"""

    async def __aenter__(self) -> HubReplication:
        self._tasks.spawn(self._poll_local(), "local-changes")
        self._tasks.spawn(self._hello_when_owed(), "owed-hello")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._tasks.close()

    async def publish(self, updates: list[sync_pb2.DocUpdate]) -> None:
        """Broadcast ``updates`` to every device. What does not go live (a change too large,
        or a broadcast that failed) is carried by the devices' catch-ups, woken at once by
        a hello (:meth:`_hello_when_owed`), not at their next interval."""
        message = live(updates)
        if any(map(too_large, updates)):
            self._owed.set()
        if message is None:
            return
        try:
            await self._broadcast(message)
        except Exception as exc:
            log.info("live update not broadcast (%s); devices are told to catch up", exc)
            self._owed.set()

    async def _hello_when_owed(self) -> None:
        """The hub's hello (an empty update: every device catches up) after a change that did
        not go live, retried with a capped, jittered backoff while it cannot be sent."""
        retry = Backoff(cap=HELLO_RETRY_CAP_S)
        while True:
            await self._owed.wait()
            self._owed.clear()
            try:
                await self._broadcast(sync_pb2.SyncUpdate())
            except Exception as exc:
                delay = retry.next_delay()
                log.info("hello not broadcast (%s); tried again in %.1f s", exc, delay)
                self._owed.set()
                await asyncio.sleep(delay)
            else:
                retry.reset()
                self.hellos += 1

    def apply_from_device(
        self, updates: list[sync_pb2.DocUpdate], sender: str
    ) -> tuple[list[sync_pb2.DocUpdate], list[str]]:
        """Apply what a device sent; returns (updates to re-broadcast, refusals)."""
        changed: list[sync_pb2.DocUpdate] = []
        refused: list[str] = []
        introduced: set[str] = set()
        answers_for_all = False
        scopes = self._scopes_of(sender) if self._scopes_of is not None else None
        for item in updates:
            reason = refusal(item.doc, from_hub=False)
            counter = "rejected.sync_update"
            if reason is None and scopes is not None:
                # before anything is imported: the refused change reaches no document
                reason = doc_refusal(item.doc, scopes)
                counter = "rejected.scope" if reason is not None else counter
            if reason is None and item.snapshot:
                reason = "devices send updates, not snapshots"
            if reason is not None:
                refused.append(f"{item.doc[:64]}: {reason}")
                self.refused[reason] = self.refused.get(reason, 0) + 1
                if self._count is not None:
                    self._count(counter)
                log.warning("update from %s refused: %s: %s", sender, item.doc[:64], reason)
                continue
            timeline = item.doc.startswith(docs.TIMELINE)
            try:
                result = self.replicas.apply(item)
            except CrdtError as exc:
                refused.append(str(exc))
                self.refused["crdt"] = self.refused.get("crdt", 0) + 1
                if self._count is not None:
                    self._count("rejected.sync_update")
                log.warning("update from %s refused: %s", sender, exc)
                continue
            if result.changed:
                changed.append(sync_pb2.DocUpdate(doc=item.doc, blob=item.blob))
                if timeline:
                    added = self._introduced(item.doc, result)
                    answers_for_all |= added is None
                    introduced |= added or set()
        seqs = self.sequence_new(
            {u.doc for u in changed}, sender, introduced, answers_for_all=answers_for_all
        )
        return changed + seqs, refused

    def _introduced(self, doc_id: str, result: Applied) -> set[str] | None:
        """The ids of the entries a device's update brought into a timeline document: those
        after the version the import started from (not what another process wrote to the
        folder, read just before it: ``yimi memo --home``'s entries are the hub's); ``None``
        where the operations cannot be read so (the sender then answers for every entry not
        yet sequenced)."""
        if result.base is None:
            return None
        added = docs.entries_added(self.replicas.get(doc_id).doc, result.base)
        return None if added is None else {e.id for e in added}

    def sequence_new(
        self,
        doc_ids: set[str],
        sender: str,
        introduced: Collection[str] = (),
        *,
        answers_for_all: bool = False,
    ) -> list[sync_pb2.DocUpdate]:
        """Give every unsequenced entry of these timeline documents its ``seq``.

        ``sender`` is answerable for the entries in ``introduced`` (the ones its update
        brought), or for every unsequenced entry with ``answers_for_all`` (its update's
        entries could not be told apart); other unsequenced entries were already here (the
        hub's own, or ones written while it was down) and are sequenced as the hub's.

        The first time a document is looked at, all of it is read; after that only the
        entries added since it was last found fully sequenced (reading a whole document
        costs ~20 µs an entry: half a second per live update at 25,000 entries).
        """
        out = []
        for doc_id in sorted(doc_ids):
            period = docs.period_of_doc(doc_id)
            if period is None or not doc_id.startswith(docs.TIMELINE):
                continue
            seq_replica = self.replicas.get(docs.seq_doc(period))
            timeline = self.replicas.get(doc_id).doc
            added = None
            mark = self._sequenced_at.get(doc_id)
            if (
                mark is not None
                and timeline.oplog_vv.includes_vv(mark[0])
                and seq_replica.doc.oplog_vv.includes_vv(mark[1])
            ):
                added = docs.entries_added(timeline, mark[0])
            if added is None:
                known = docs.seqs_of(seq_replica.doc).keys() | docs.refused_of(seq_replica.doc)
                fresh = [e for e in docs.entries_of(timeline) if e.id not in known]
            else:
                fresh = [e for e in added if not docs.marked(seq_replica.doc, e.id)]
            seen = timeline.oplog_vv
            seqs: dict[str, int] = {}
            for who, run in itertools.groupby(  # in document order, as one sequence
                fresh, key=lambda e: sender if answers_for_all or e.id in introduced else HUB_SENDER
            ):
                seqs |= self._sequence(list(run), who)
            if seqs:
                blob = seq_replica.change(partial(docs.set_seqs, seqs=sorted(seqs.items())))
                out.append(sync_pb2.DocUpdate(doc=seq_replica.doc_id, blob=blob))
            if all(e.id in seqs for e in fresh):
                self._sequenced_at[doc_id] = (seen, seq_replica.doc.oplog_vv)
            else:
                self._sequenced_at.pop(doc_id, None)
        return out

    def add_sequenced(self, rows: list[docs.Entry]) -> list[sync_pb2.DocUpdate]:
        """Write entries the hub sequenced itself (conversation turns) into the documents."""
        by_period: dict[str, list[docs.Entry]] = {}
        for row in rows:
            by_period.setdefault(docs.period_of(row.ts), []).append(row)
        out = []
        for period, entries in sorted(by_period.items()):
            timeline = self.replicas.get(docs.timeline_doc(period))
            seq_replica = self.replicas.get(docs.seq_doc(period))
            present = self._present(timeline.doc_id, entries)
            missing = [e for e in entries if e.id not in present]
            if missing:
                blob = timeline.change(partial(docs.push_entries, entries=missing))
                out.append(sync_pb2.DocUpdate(doc=timeline.doc_id, blob=blob))
            wrong = [
                (e.id, e.seq)
                for e in entries
                if e.seq is not None and docs.seq_of(seq_replica.doc, e.id) != e.seq
            ]
            if wrong:
                blob = seq_replica.change(partial(docs.set_seqs, seqs=wrong))
                out.append(sync_pb2.DocUpdate(doc=seq_replica.doc_id, blob=blob))
            # moves the "fully sequenced" mark past what was just written (cheap)
            out += self.sequence_new({timeline.doc_id}, HUB_SENDER)
        return out

    def _present(self, doc_id: str, entries: list[docs.Entry]) -> set[str]:
        """Which of ``entries`` the timeline document already holds.

        Past the "fully sequenced" mark every entry has a ``seq`` (the hub writes one only for
        an entry it holds), so only the operations since the mark need reading.
        """
        timeline = self.replicas.get(doc_id).doc
        period = docs.period_of_doc(doc_id)
        mark = self._sequenced_at.get(doc_id)
        if period is not None and mark is not None:
            seq_doc = self.replicas.get(docs.seq_doc(period)).doc
            if timeline.oplog_vv.includes_vv(mark[0]) and seq_doc.oplog_vv.includes_vv(mark[1]):
                added = docs.entries_added(timeline, mark[0])
                if added is not None:
                    since = {e.id for e in added}
                    return {
                        e.id
                        for e in entries
                        if e.id in since or docs.seq_of(seq_doc, e.id) is not None
                    }
        return {e.id for e in docs.entries_of(timeline)}

    def serve(
        self, request: sync_pb2.SyncRequest, sender: str
    ) -> tuple[sync_pb2.SyncResponse, list[sync_pb2.DocUpdate]]:
        """Answer a device's catch-up; returns (response, updates to re-broadcast)."""
        changed, refused = (
            self.apply_from_device(list(request.push), sender) if request.push else ([], [])
        )
        response = sync_pb2.SyncResponse(applied=len(request.push) - len(refused), refused=refused)
        theirs = {s.doc: s.version for s in request.have}
        ours = set(self.replicas.doc_ids())  # once: it lists the folder (was: per document)
        wanted = set(theirs)
        if request.list_docs:
            wanted |= ours
        for doc_id in sorted(wanted):
            if not docs.is_known_doc(doc_id) or doc_id not in ours:
                continue
            doc = self.replicas.get(doc_id).doc
            if lacks(doc, theirs.get(doc_id, b"")):
                try:
                    blob, snapshot = updates_since(doc_id, doc, theirs.get(doc_id, b""))
                except CrdtError as exc:
                    log.warning("catch-up for %s: %s", sender, exc)
                    continue
                response.updates.append(
                    sync_pb2.DocUpdate(doc=doc_id, blob=blob, snapshot=snapshot)
                )
        response.have.extend(self.replicas.states())
        return response, changed

    async def _poll_local(self) -> None:
        """Changes written to the hub's replicas by another process (``yimi note --home``)."""
        while True:
            await asyncio.sleep(LOCAL_POLL_S)
            try:
                changes = self.replicas.refresh()
                if changes:
                    changes += self.sequence_new({c.doc for c in changes}, "hub")
            except CrdtError as exc:
                log.warning("%s", exc)
                continue
            if changes:
                await self.publish(changes)
