"""Bench: CRDT catch-up, live replication latency and compaction on a large timeline.

Run::

    .venv/bin/python bench/sync_catchup.py [--entries 100000] [--missed 1000] [--quick]

Everything runs on loopback, in a temporary folder that is removed afterwards.

Data: ``--entries`` flat timeline entries (id, device, ts, kind, ~60 characters of text)
spread over ``--periods`` ISO-week documents ending this week, written one change per entry
by five device peers, and their ``seq`` documents written by the hub peer (one change per
entry, numbers from a real ``hub.db``). Every change's loro update is kept, so the replicas
on disk are what the product writes: the hub's folder follows its own 4 MB compaction rule
(``hub.mesh.daemon.COMPACT_AT_BYTES``: shallow snapshot + the log after it); a device's folder
holds each document as one update with its whole history (as a catch-up from empty leaves
it; devices do not compact). The lagging device has everything but the last ``--missed``
entries (and their ``seq``).

1. **Catch-up** of the lagging device, each repetition from a fresh copy of its replicas
   (opened and read once, untimed, as a running device has them):

   * raw loro: per document ``oplog_vv.encode()`` → ``export(ExportMode.Updates(vv))`` →
     ``import_`` — the floor;
   * ours in process: :meth:`DeviceReplication.catch_up` with its request answered by
     :meth:`HubReplication.serve` (what the gRPC handler runs) and
     :meth:`ReplicaSet.apply` (import, log append, fsync) on the device;
   * the same, with the request and the answer sealed and opened as envelopes (protobuf,
     signature, encryption) exactly as ``Hub.Sync`` does;
   * end to end: a :class:`DeviceNode` against the real hub process over gRPC;
   * a device behind the hub's compaction point (a hub that compacted every document after
     the last entry): it gets snapshots instead of deltas.

   Variants alternate within each repetition; medians and ratios to raw are printed.
2. **Steady state**: the hub process (with its mosquitto) and four edge
   :class:`DeviceNode` s in this process, all holding the full timeline. One device at a
   time (in turn) writes an entry (``ReplicaSet.add_entry`` + live broadcast); the time
   until the entry is in each other device's replica (fsynced) is taken from a hook on
   their replication. The four devices share this process's event loop, so the last of
   them also waits for the others' applies. Before that, the hub's ingestion of one live
   entry is timed in process to show where the hub's part goes.
3. **Compaction**: a replica holding every update as a log record (how a device that never
   compacts keeps it): its size and load (replay) time; then :meth:`Replica.compact` on
   each document, the shallow snapshots' size and the load time of ``Replica(folder, doc)``
   (and of the first read, since loro decodes lazily).

The hub (and its mosquitto) is stopped on every exit path and the bench checks that no
mosquitto of its home is left; child processes get ``PR_SET_PDEATHSIG``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import math
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import loro
from loro import ID, ExportMode, LoroDoc, VersionVector

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script

import edge_agent.node as node_module
import sync.replica as replica_module
from bench.hubproc import HubProcess, cpu_seconds, finish
from bench.stats import median, percentile
from edge_agent.node import DeviceNode, NodeOptions
from hub.mesh.daemon import COMPACT_AT_BYTES, MAX_SYNC_BYTES
from hub.timeline import HubStore
from protos import mesh_pb2, sync_pb2
from provisioning.bundle import Bundle, flash
from provisioning.home import Home
from sync import documents as docs
from sync.envelope import HUB, Dropped, Opened, Opener, Peer, ReplayGuard, Sealer, random_id
from sync.hub_rpc import MAX_RPC_BYTES
from sync.replica import REC_HEADER, SNAP_HEADER, SNAP_MAGIC, Replica
from sync.replicas import ReplicaSet
from sync.replication import DeviceReplication, HubReplication
from sync.tls import ClientTls
from worlds import ports

SCRIPT = Path(__file__).resolve()
REPO = SCRIPT.parent.parent
WEEK_MS = 7 * 86_400_000
CONNECT_TIMEOUT_S = 60.0
VISIBLE_TIMEOUT_S = 15.0
"""seconds a live entry may take to reach a device before it counts as lost"""
KINDS = ("utterance", "reply", "memo", "utterance", "reply")
WORDS = (
    "the kitchen light is on again please remind me to call mum about weekend trip buy oat "
    "milk and coffee beans meeting moved to thursday at ten what is weather tomorrow in "
    "lisbon turn heating down a little parcel arrived garage door code changed battery low "
    "on glasses play something quiet dentist next week pick up kids from school at four"
).split()
T = TypeVar("T")


# ---------------------------------------------------------------------------- statistics
def kib(n: float) -> str:
    if n >= 10 * 1024 * 1024:
        return f"{n / 1024 / 1024:.1f} MiB"
    return f"{n / 1024:.1f} KiB"


# ---------------------------------------------------------------------------- processes
# ---------------------------------------------------------------------------- instrumentation
class FsyncMeter:
    """Counts the time spent in ``os.fsync`` by this process while installed."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._real = os.fsync

    def _timed(self, fd: Any) -> None:
        start = time.perf_counter()
        try:
            self._real(fd)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1

    @contextlib.contextmanager
    def installed(self) -> Iterator[FsyncMeter]:
        os.fsync = self._timed
        try:
            yield self
        finally:
            os.fsync = self._real

    def take(self) -> float:
        spent, self.seconds = self.seconds, 0.0
        return spent


class LoroMeter:
    """Counts the time spent in ``sync.replica``'s guarded loro calls (a replica's import)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._real = replica_module.guard

    def _timed(self, doc_id: str, fn: Callable[[], T]) -> T:
        start = time.perf_counter()
        try:
            return self._real(doc_id, fn)
        finally:
            self.seconds += time.perf_counter() - start

    @contextlib.contextmanager
    def installed(self) -> Iterator[LoroMeter]:
        replica_module.guard = self._timed
        try:
            yield self
        finally:
            replica_module.guard = self._real

    def take(self) -> float:
        spent, self.seconds = self.seconds, 0.0
        return spent


def timed(fn: Callable[..., T], into: list[float]) -> Callable[..., T]:
    """Wrap ``fn`` so that each call's duration (seconds) is appended to ``into``."""

    def wrapper(*args: Any, **kwargs: Any) -> T:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            into.append(time.perf_counter() - start)

    return wrapper


# ---------------------------------------------------------------------------- the data
@dataclass
class DocData:
    """One document's history: every change's loro update, and snapshots at key points."""

    doc_id: str
    records: list[bytes] = field(default_factory=list)
    cut: int = 0
    """records the lagging device has"""
    base: bytes = b""
    """full snapshot at ``cut`` (empty: the lagging device lacks the document)"""
    full: bytes = b""
    """full snapshot with every record"""
    hub_gen: int = 0
    hub_snapshot: bytes = b""
    """the hub's latest compaction (shallow snapshot), after ``hub_from`` records"""
    hub_from: int = 0
    log_bytes: int = 0
    """the hub's current update log, to apply its compaction rule"""

    def record(self, doc: LoroDoc, blob: bytes) -> None:
        self.records.append(blob)
        self.log_bytes += REC_HEADER.size + len(blob)
        if self.log_bytes > COMPACT_AT_BYTES:  # as Replica._append does with compact_at
            self.hub_snapshot = bytes(doc.export(ExportMode.ShallowSnapshot(doc.oplog_frontiers)))
            self.hub_gen += 1
            self.hub_from = len(self.records)
            self.log_bytes = 0


def _recorder(data: DocData, doc: LoroDoc) -> Callable[[bytes], bool]:
    """A local-update subscriber that records each update of ``doc`` into ``data``."""

    def on_update(blob: bytes) -> bool:
        data.record(doc, bytes(blob))
        return True

    return on_update


def make_text(rng: random.Random, chars: int = 60) -> str:
    words: list[str] = []
    length = -1
    while length < chars - 4:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)


def make_entries(count: int, periods: int, devices: Sequence[str], seed: int) -> list[docs.Entry]:
    """``count`` entries over ``periods`` ISO weeks ending now, in time order."""
    rng = random.Random(seed)
    now = int(time.time() * 1000)
    current = docs.period_start_ms(docs.period_of(now))
    starts = [current - WEEK_MS * (periods - 1 - j) for j in range(periods)]
    spans = [WEEK_MS] * (periods - 1) + [max(now - current - 1000, 1)]
    bounds = [count * j // periods for j in range(periods + 1)]
    out = []
    for j in range(periods):
        n = bounds[j + 1] - bounds[j]
        for p in range(n):
            out.append(
                docs.make_entry(
                    entry_id=f"e-{rng.getrandbits(96):024x}",
                    device=rng.choice(devices),
                    kind=rng.choice(KINDS),
                    text=make_text(rng),
                    ts_ms=starts[j] + int((p + 0.5) * spans[j] / n),
                )
            )
    return out


def build_docs(
    entries: Sequence[docs.Entry], seqs: dict[str, int], missed: int, seed: int
) -> list[DocData]:
    """Write the timeline and seq documents change by change, keeping every update."""
    rng = random.Random(seed)
    device_peers = {d: rng.getrandbits(62) + 1 for d in sorted({e.device for e in entries})}
    hub_peer = rng.getrandbits(62) + 1
    cut_at = len(entries) - missed
    by_period: dict[str, list[int]] = {}
    for i, e in enumerate(entries):
        by_period.setdefault(docs.period_of(e.ts), []).append(i)
    out: list[DocData] = []
    for period, indices in sorted(by_period.items()):
        timeline, seq = LoroDoc(), LoroDoc()
        seq.peer_id = hub_peer
        t_data = DocData(docs.timeline_doc(period))
        s_data = DocData(docs.seq_doc(period))
        pairs = ((timeline, t_data), (seq, s_data))
        subs = [doc.subscribe_local_update(_recorder(data, doc)) for doc, data in pairs]
        entries_list, seq_map = timeline.get_list("entries"), seq.get_map("seq")
        for i in indices:
            if i == cut_at:
                for doc, data in pairs:
                    data.cut, data.base = (
                        len(data.records),
                        bytes(doc.export(ExportMode.Snapshot())),
                    )
            e = entries[i]
            timeline.peer_id = device_peers[e.device]
            entries_list.push(e.as_value())
            timeline.commit()
            seq_map.insert(e.id, seqs[e.id])
            seq.commit()
        for doc, data in pairs:
            data.full = bytes(doc.export(ExportMode.Snapshot()))
            if indices[-1] < cut_at:
                data.cut, data.base = len(data.records), data.full
            if len(data.records) != len(indices):
                raise RuntimeError(f"{data.doc_id}: {len(data.records)} updates recorded")
        del subs
        out += [t_data, s_data]
    return out


def write_log(path: Path, blobs: Sequence[bytes]) -> None:
    """A replica update log (``sync.replica`` format: length, crc32, loro update)."""
    with path.open("wb") as fh:
        for blob in blobs:
            fh.write(REC_HEADER.pack(len(blob), zlib.crc32(blob) & 0xFFFFFFFF) + blob)


def write_snapshot(path: Path, snapshot: bytes) -> None:
    crc = (zlib.crc32(snapshot) & 0xFFFFFFFF).to_bytes(4, "big")
    path.write_bytes(SNAP_MAGIC + SNAP_HEADER.pack(crc, len(snapshot)) + snapshot)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


@dataclass
class Layout:
    """The replica folders the bench starts from."""

    hub: Path
    """the hub's replicas (its 4 MB compaction rule applied)"""
    lagging: Path
    """a device with all but the missed entries"""
    synced: Path
    """a device with everything"""
    full_log: Path
    """every update as a log record, no snapshot (part 3)"""


def write_layout(data: Sequence[DocData], hub: Path, root: Path) -> Layout:
    layout = Layout(hub, root / "tpl-lagging", root / "tpl-synced", root / "compaction")
    for folder in (layout.hub, layout.lagging, layout.synced, layout.full_log):
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    for d in data:
        if d.hub_gen:
            write_snapshot(hub / f"{d.doc_id}.g{d.hub_gen}.snap", d.hub_snapshot)
        write_log(hub / f"{d.doc_id}.g{d.hub_gen}.log", d.records[d.hub_from :])
        if d.base:
            write_log(layout.lagging / f"{d.doc_id}.g0.log", [d.base])
        write_log(layout.synced / f"{d.doc_id}.g0.log", [d.full])
        write_log(layout.full_log / f"{d.doc_id}.g0.log", d.records)
    return layout


def fresh_copy(template: Path, dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(template, dest)
    return dest


def read_all(replicas: ReplicaSet, *, parse: bool = True) -> int:
    """Open every document and decode its state (loro loads lazily); returns the entries
    (with ``parse=False`` only loro's decoding is done, not ``entries_of``: 0 is returned)."""
    replicas.states()
    count = 0
    for doc_id in replicas.doc_ids():
        doc = replicas.get(doc_id).doc
        if doc_id.startswith(docs.TIMELINE):
            if parse:
                count += len(docs.entries_of(doc))
            else:
                doc.get_list("entries").get_value()
        else:
            doc.get_map("seq").get_value()
    return count


# ---------------------------------------------------------------------------- 1. catch-up
@dataclass
class Sample:
    seconds: float
    nbytes: int
    parts: dict[str, float] = field(default_factory=dict)


@dataclass
class Variant:
    label: str
    samples: list[Sample] = field(default_factory=list)

    @property
    def ms(self) -> float:
        return median([s.seconds for s in self.samples]) * 1000

    @property
    def min_ms(self) -> float:
        return min((s.seconds for s in self.samples), default=math.nan) * 1000

    @property
    def nbytes(self) -> int:
        return int(median([s.nbytes for s in self.samples])) if self.samples else 0

    def part_ms(self, name: str) -> float:
        return median([s.parts.get(name, 0.0) for s in self.samples]) * 1000


async def _no_broadcast(update: sync_pb2.SyncUpdate) -> None:
    return None


def _no_sequence(entries: list[docs.Entry], sender: str) -> dict[str, int]:
    return {}


class Envelopes:
    """Seal and open catch-up messages in process with the real keys, as ``Hub.Sync`` does."""

    def __init__(self, home: Home, bundle: Bundle) -> None:
        self.device = bundle.device_id
        self.device_box_pk = bundle.keys.box_pk
        self.hub_box_pk = home.hub_keys.box_pk
        device_peer = Peer(bundle.device_id, bundle.keys.sign_pk, bundle.keys.box_pk)
        hub_peer = Peer(HUB, home.hub_keys.sign_pk, home.hub_keys.box_pk)
        self.device_sealer = Sealer.for_device(bundle, itertools.count(1).__next__)
        self.hub_opener = Opener(
            home_id=home.home_id,
            node_id=HUB,
            box_key=home.hub_keys.box,
            lookup={bundle.device_id: device_peer}.get,
            replay=ReplayGuard(),
            group_key=home.group_key,
            max_bytes=MAX_SYNC_BYTES,
        )
        self.hub_sealer = Sealer(
            home_id=home.home_id,
            node_id=HUB,
            sign_key=home.hub_keys.sign,
            box_key=home.hub_keys.box,
            next_counter=itertools.count(1).__next__,
            group_key=home.group_key,
        )
        self.device_opener = Opener(
            home_id=home.home_id,
            node_id=bundle.device_id,
            box_key=bundle.keys.box,
            lookup={HUB: hub_peer}.get,
            replay=ReplayGuard(),
            group_key=bundle.group_key,
            max_bytes=MAX_RPC_BYTES,
        )


def opened_payload(result: Opened | Dropped) -> Any:
    if isinstance(result, Dropped):
        raise RuntimeError(f"envelope dropped: {result.reason.value} {result.detail}")
    return result.payload


class InProcessHub:
    """The hub's catch-up handler in this process, on its own copy of the hub's replicas."""

    def __init__(self, folder: Path, envelopes: Envelopes) -> None:
        self.replicas = ReplicaSet(folder, compact_at=COMPACT_AT_BYTES)
        self.sync = HubReplication(self.replicas, broadcast=_no_broadcast, sequence=_no_sequence)
        self.env = envelopes
        self.serve_s = 0.0
        self.envelope_s = 0.0
        self.nbytes = 0
        read_all(self.replicas, parse=False)

    def reset(self) -> None:
        self.serve_s = self.envelope_s = 0.0
        self.nbytes = 0

    def _serve(self, request: sync_pb2.SyncRequest, sender: str) -> sync_pb2.SyncResponse:
        start = time.perf_counter()
        response, _ = self.sync.serve(request, sender)
        self.serve_s += time.perf_counter() - start
        return response

    async def plain(self, request: sync_pb2.SyncRequest) -> sync_pb2.SyncResponse:
        response = self._serve(request, self.env.device)
        self.nbytes += request.ByteSize() + response.ByteSize()
        return response

    async def sealed(self, request: sync_pb2.SyncRequest) -> sync_pb2.SyncResponse:
        env = self.env
        start = time.perf_counter()
        data = env.device_sealer.seal(
            mesh_pb2.SYNC_REQUEST, request, recipient=HUB, recipient_box_pk=env.hub_box_pk
        )
        opened = env.hub_opener.open(data)
        if isinstance(opened, Dropped):
            raise RuntimeError(f"request dropped: {opened.reason.value} {opened.detail}")
        self.envelope_s += time.perf_counter() - start
        response = self._serve(opened_payload(opened), opened.sender)
        start = time.perf_counter()
        answer = env.hub_sealer.seal(
            mesh_pb2.SYNC_RESPONSE,
            response,
            recipient=env.device,
            recipient_box_pk=env.device_box_pk,
            trace_id=opened.trace_id,
        )
        result = opened_payload(env.device_opener.open(answer))
        self.envelope_s += time.perf_counter() - start
        self.nbytes += len(data) + len(answer)
        return result  # type: ignore[no-any-return]


def same_versions(device: dict[str, LoroDoc], hub: ReplicaSet) -> bool:
    for doc_id in hub.doc_ids():
        mine = device.get(doc_id)
        if mine is None or mine.oplog_vv != hub.get(doc_id).doc.oplog_vv:
            return False
    return True


def replica_docs(replicas: ReplicaSet) -> dict[str, LoroDoc]:
    return {d: replicas.get(d).doc for d in replicas.doc_ids()}


@dataclass
class CatchupSetup:
    layout: Layout
    scratch: Path
    data: Sequence[DocData]
    hub: InProcessHub
    expected_entries: int
    fsync: FsyncMeter
    loro: LoroMeter


def raw_catchup(setup: CatchupSetup) -> Sample:
    """The floor: loro alone, same documents, same hub state, same device state."""
    device: dict[str, LoroDoc] = {}
    for d in setup.data:
        if d.base:
            doc = device[d.doc_id] = LoroDoc()
            doc.import_(d.base)
            # decode the state, as read_all does for the replica set
            if d.doc_id.startswith(docs.TIMELINE):
                doc.get_list("entries").get_value()
            else:
                doc.get_map("seq").get_value()
    hub = setup.hub.replicas
    export_s = import_s = 0.0
    nbytes = 0
    start = time.perf_counter()
    for doc_id in hub.doc_ids():
        mine = device.get(doc_id)
        if mine is None:
            mine = device[doc_id] = LoroDoc()
        vv = mine.oplog_vv.encode()
        source = hub.get(doc_id).doc
        t0 = time.perf_counter()
        peer = VersionVector.decode(vv)
        nbytes += len(vv)
        if peer.includes_vv(source.oplog_vv):
            continue
        blob = source.export(ExportMode.Updates(peer))
        t1 = time.perf_counter()
        mine.import_(blob)
        t2 = time.perf_counter()
        export_s += t1 - t0
        import_s += t2 - t1
        nbytes += len(blob)
    seconds = time.perf_counter() - start
    if not same_versions(device, hub):
        raise RuntimeError("raw catch-up did not converge")
    return Sample(seconds, nbytes, {"export": export_s, "import": import_s})


def lagging_device(setup: CatchupSetup, name: str) -> ReplicaSet:
    folder = fresh_copy(setup.layout.lagging, setup.scratch / name)
    replicas = ReplicaSet(folder)
    read_all(replicas, parse=False)
    return replicas


async def ours_catchup(
    setup: CatchupSetup, replicas: ReplicaSet, hub: InProcessHub, *, sealed: bool
) -> Sample:
    replication = DeviceReplication(
        replicas,
        broadcast=_no_broadcast,
        request=hub.sealed if sealed else hub.plain,
        is_connected=lambda: True,
    )
    hub.reset()
    setup.fsync.take()
    setup.loro.take()
    start = time.perf_counter()
    taken, pushed = await replication.catch_up()
    seconds = time.perf_counter() - start
    fsync_s = setup.fsync.take()
    import_s = setup.loro.take()
    if pushed or not same_versions(replica_docs(replicas), hub.replicas):
        raise RuntimeError(f"catch-up did not converge (taken {taken}, pushed {pushed})")
    return Sample(
        seconds,
        hub.nbytes,
        {
            "serve": hub.serve_s,
            "envelopes": hub.envelope_s,
            "device": seconds - hub.serve_s - hub.envelope_s,
            "fsync": fsync_s,
            "import": import_s,
        },
    )


@dataclass
class CatchupResults:
    raw: Variant = field(
        default_factory=lambda: Variant("raw loro: vv → export(Updates(vv)) → import_")
    )
    plain: Variant = field(
        default_factory=lambda: Variant("ours in process: catch_up ↔ serve, ReplicaSet.apply")
    )
    sealed: Variant = field(
        default_factory=lambda: Variant("ours in process + sealed envelopes (Hub.Sync's work)")
    )
    grpc: Variant = field(
        default_factory=lambda: Variant("ours end to end: DeviceNode → gRPC → hub process")
    )
    raw_grpc: Variant = field(default_factory=lambda: Variant("raw loro (interleaved with e2e)"))
    behind: Variant = field(
        default_factory=lambda: Variant("ours, device behind hub's compaction (snapshots)")
    )
    docs_sent: int = 0
    entries_after: int = 0


async def catchup_in_process(
    setup: CatchupSetup, reps: int, res: CatchupResults, behind_hub: InProcessHub | None
) -> None:
    """Raw and ours alternate, one warm-up round first; each from a fresh device copy."""
    variants = ("raw", "plain", "sealed")
    for rep in range(reps + 1):
        order = variants[rep % 3 :] + variants[: rep % 3]
        for name in order:
            if name == "raw":
                sample = raw_catchup(setup)
            else:
                replicas = lagging_device(setup, f"{name}-{rep}")
                sample = await ours_catchup(setup, replicas, setup.hub, sealed=name == "sealed")
                if rep == 0 and name == "plain":
                    res.entries_after = read_all(replicas)
                shutil.rmtree(replicas.folder)
            if rep > 0:
                getattr(res, name).samples.append(sample)
        if rep > 0:
            times = ", ".join(
                f"{n} {getattr(res, n).samples[-1].seconds * 1000:.1f} ms" for n in order
            )
            print(f"  catch-up rep {rep}/{reps}: {times}", flush=True)
    if behind_hub is not None:
        for rep in range(max(2, reps // 2) + 1):
            replicas = lagging_device(setup, f"behind-{rep}")
            sample = await ours_catchup(setup, replicas, behind_hub, sealed=False)
            shutil.rmtree(replicas.folder)
            if rep > 0:
                res.behind.samples.append(sample)


# ---------------------------------------------------------------------------- 1b. over gRPC
class ByteCounter:
    """Wraps ``sync_exchange`` as the device node calls it, counting the bytes each way."""

    def __init__(self) -> None:
        self.nbytes = 0
        self._real = node_module.sync_exchange

    async def exchange(
        self,
        host: str,
        port: int,
        envelope: bytes,
        sealer: Sealer,
        tls: ClientTls,
        timeout: float = 30.0,
    ) -> bytes:
        answer = await self._real(host, port, envelope, sealer, tls, timeout)
        self.nbytes += len(envelope) + len(answer)
        return answer

    @contextlib.contextmanager
    def installed(self) -> Iterator[ByteCounter]:
        node_module.sync_exchange = self.exchange
        try:
            yield self
        finally:
            node_module.sync_exchange = self._real


async def _no_reply(reply: mesh_pb2.Reply, opened: Opened, fresh: bool) -> None:
    return None


async def catchup_grpc(
    setup: CatchupSetup, bundle: Bundle, target: str, reps: int, res: CatchupResults
) -> None:
    counter = ByteCounter()
    async with DeviceNode(bundle, NodeOptions(mode="say", hub=target), _no_reply) as node:
        assert node.mqtt is not None
        await asyncio.wait_for(node.mqtt.connected.wait(), CONNECT_TIMEOUT_S)
        with counter.installed():
            for rep in range(reps + 1):
                replicas = lagging_device(setup, f"grpc-{rep}")
                node.replicas = node.replication.replicas = replicas
                counter.nbytes = 0
                setup.fsync.take()
                setup.loro.take()
                start = time.perf_counter()
                _taken, pushed = await node.replication.catch_up()
                seconds = time.perf_counter() - start
                fsync_s = setup.fsync.take()
                import_s = setup.loro.take()
                if pushed or not same_versions(replica_docs(replicas), setup.hub.replicas):
                    raise RuntimeError("catch-up over gRPC did not converge")
                shutil.rmtree(replicas.folder)
                raw = raw_catchup(setup)
                if rep > 0:
                    res.grpc.samples.append(
                        Sample(seconds, counter.nbytes, {"fsync": fsync_s, "import": import_s})
                    )
                    res.raw_grpc.samples.append(raw)
                    print(
                        f"  gRPC catch-up rep {rep}/{reps}: {seconds * 1000:.1f} ms "
                        f"(raw {raw.seconds * 1000:.1f} ms)",
                        flush=True,
                    )


# ---------------------------------------------------------------------------- 2. steady state
@dataclass
class Ingest:
    total: list[float] = field(default_factory=list)
    apply: list[float] = field(default_factory=list)
    sequence: list[float] = field(default_factory=list)
    fsync: list[float] = field(default_factory=list)
    entries_of: float = 0.0
    doc_entries: int = 0


def measure_ingest(
    layout: Layout, scratch: Path, home: Path, bundle: Bundle, count: int, fsync: FsyncMeter
) -> Ingest:
    """The hub's work for one live entry, in process on copies of its replicas and hub.db."""
    hub_folder = fresh_copy(layout.hub, scratch / "ingest-hub")
    for name in ("hub.db", "hub.db-wal", "hub.db-shm"):
        if (home / name).exists():
            shutil.copy2(home / name, scratch / name)
    store = HubStore(scratch / "hub.db")
    try:
        hub_replicas = ReplicaSet(hub_folder, compact_at=COMPACT_AT_BYTES)
        hub = HubReplication(hub_replicas, broadcast=_no_broadcast, sequence=store.sequence_entries)
        read_all(hub_replicas, parse=False)
        device = ReplicaSet(fresh_copy(layout.synced, scratch / "ingest-device"))
        read_all(device, parse=False)
        out = Ingest()
        apply_s: list[float] = []
        sequence_s: list[float] = []
        hub_replicas.apply = timed(hub_replicas.apply, apply_s)  # type: ignore[method-assign]
        hub.sequence_new = timed(hub.sequence_new, sequence_s)  # type: ignore[method-assign]
        warmup = 3
        for i in range(count + warmup):
            entry = docs.make_entry(
                entry_id=random_id("e-"),
                device=bundle.device_id,
                kind="memo",
                text=f"ingest {i}: " + make_text(random.Random(i)),
            )
            update = device.add_entry(entry)
            apply_s.clear()
            sequence_s.clear()
            fsync.take()
            start = time.perf_counter()
            changed, refused = hub.apply_from_device([update], bundle.device_id)
            seconds = time.perf_counter() - start
            if refused or len(changed) != 2:
                raise RuntimeError(f"hub ingest: {len(changed)} changes, refused {refused}")
            if i >= warmup:
                out.total.append(seconds)
                out.apply.append(sum(apply_s))
                out.sequence.append(sum(sequence_s))
                out.fsync.append(fsync.take())
        doc = hub_replicas.get(update.doc).doc
        start = time.perf_counter()
        out.doc_entries = len(docs.entries_of(doc))
        out.entries_of = time.perf_counter() - start
        return out
    finally:
        store.close()


@dataclass
class Steady:
    all3: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    each: list[float] = field(default_factory=list)
    add: list[float] = field(default_factory=list)
    send: list[float] = field(default_factory=list)
    apply: list[float] = field(default_factory=list)
    """each device's handling of one live update from the hub (open excluded)"""
    fsync_s: float = 0.0
    """seconds of fsync in this process (the four devices) over the measured entries"""
    lost: int = 0
    sequenced: int = 0
    received: int = 0
    seconds: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    ingest: Ingest | None = None


class Watch:
    """Resolves a future when a device's replica holds a given operation."""

    def __init__(self, doc_id: str, op: ID, future: asyncio.Future[float]) -> None:
        self.doc_id = doc_id
        self.op = op
        self.future = future


def hook_receiver(node: DeviceNode, watches: list[Watch], applies: list[float]) -> None:
    """Check ``watches`` right after each live update the node applied (fsynced)."""
    original = node.replication.on_hub_update

    def on_hub_update(update: sync_pb2.SyncUpdate) -> None:
        start = time.perf_counter()
        original(update)
        now = time.perf_counter()
        applies.append(now - start)
        for watch in list(watches):
            if watch.future.done():
                watches.remove(watch)
                continue
            doc = node.replicas.get(watch.doc_id).doc
            if doc.oplog_vv.includes_id(watch.op):
                watch.future.set_result(now)
                watches.remove(watch)

    node.replication.on_hub_update = on_hub_update  # type: ignore[method-assign]


async def steady_state(
    bundles: Sequence[Bundle],
    target: str,
    hub: HubProcess,
    warmup: int,
    count: int,
    fsync: FsyncMeter,
) -> Steady:
    res = Steady()
    loop = asyncio.get_running_loop()
    async with contextlib.AsyncExitStack() as stack:
        nodes = [
            await stack.enter_async_context(
                DeviceNode(b, NodeOptions(mode="edge", hub=target), _no_reply)
            )
            for b in bundles
        ]
        for n in nodes:
            assert n.mqtt is not None
            await asyncio.wait_for(n.mqtt.connected.wait(), CONNECT_TIMEOUT_S)
            await asyncio.wait_for(n.replication.caught_up.wait(), CONNECT_TIMEOUT_S)
        watches: dict[str, list[Watch]] = {n.bundle.device_id: [] for n in nodes}
        applies: list[float] = []
        for n in nodes:
            hook_receiver(n, watches[n.bundle.device_id], applies)
        rng = random.Random(7)
        cpu_before: dict[str, float] = {}
        started = 0.0
        for i in range(warmup + count):
            if i == warmup:
                applies.clear()
                fsync.take()
                cpu_before = {
                    "hub": cpu_seconds(hub.pid),
                    "mosquitto": cpu_seconds(hub.mosquitto_pid()),
                    "bench (4 devices)": time.process_time(),
                }
                started = time.monotonic()
            writer = nodes[i % len(nodes)]
            receivers = [n for n in nodes if n is not writer]
            entry = docs.make_entry(
                entry_id=random_id("e-"),
                device=writer.bundle.device_id,
                kind="memo",
                text=f"live {i}: " + make_text(rng),
            )
            t0 = time.perf_counter()
            update = writer.replicas.add_entry(entry)
            t1 = time.perf_counter()
            doc = writer.replicas.get(update.doc).doc
            last = doc.oplog_vv.get_last(doc.peer_id)
            assert last is not None  # the writer has just made this change
            op = ID(doc.peer_id, last)
            futures: list[asyncio.Future[float]] = []
            for r in receivers:
                fut: asyncio.Future[float] = loop.create_future()
                watches[r.bundle.device_id].append(Watch(update.doc, op, fut))
                futures.append(fut)
            await writer.replication.send([update])
            t2 = time.perf_counter()
            done, pending = await asyncio.wait(futures, timeout=VISIBLE_TIMEOUT_S)
            for fut in pending:
                fut.cancel()
            if i < warmup:
                continue
            seen = [f.result() - t0 for f in futures if f in done]
            res.lost += len(pending)
            res.add.append(t1 - t0)
            res.send.append(t2 - t1)
            res.each += seen
            if seen:
                res.first.append(min(seen))
            if not pending:
                res.all3.append(max(seen))
            seq_doc = docs.seq_doc(docs.period_of(entry.ts))
            for r in receivers:
                res.received += 1
                res.sequenced += (
                    r.replicas.get(seq_doc).doc.get_map("seq").get(entry.id) is not None
                )
            await asyncio.sleep(rng.uniform(0.0, 0.02))
        res.seconds = time.monotonic() - started
        res.apply = list(applies)
        res.fsync_s = fsync.take()
        res.cpu = {
            "hub": cpu_seconds(hub.pid) - cpu_before["hub"],
            "mosquitto": cpu_seconds(hub.mosquitto_pid()) - cpu_before["mosquitto"],
            "bench (4 devices)": time.process_time() - cpu_before["bench (4 devices)"],
        }
    return res


# ---------------------------------------------------------------------------- 3. compaction
@dataclass
class Compaction:
    log_bytes: int = 0
    log_records: int = 0
    log_load_s: float = 0.0
    full_snapshot_bytes: int = 0
    shallow_bytes: int = 0
    files_bytes: int = 0
    open_s: list[float] = field(default_factory=list)
    open_read_s: list[float] = field(default_factory=list)
    open_decode_s: list[float] = field(default_factory=list)
    entries: int = 0
    hub_folder_bytes: int = 0
    documents: int = 0


def compaction(layout: Layout, data: Sequence[DocData], reps: int) -> Compaction:
    out = Compaction()
    folder = layout.full_log
    out.log_bytes = folder_bytes(folder)
    out.log_records = sum(len(d.records) for d in data)
    out.full_snapshot_bytes = sum(len(d.full) for d in data)
    out.hub_folder_bytes = folder_bytes(layout.hub)
    out.documents = len(data)
    start = time.perf_counter()
    replicas = [Replica(folder, d.doc_id) for d in data]
    out.log_load_s = time.perf_counter() - start
    for r in replicas:
        if r.problems:
            raise RuntimeError(f"{r.doc_id}: {r.problems}")
        out.shallow_bytes += r.compact()
        out.files_bytes += r.size_on_disk
    del replicas
    for _ in range(reps):
        start = time.perf_counter()
        opened = [Replica(folder, d.doc_id) for d in data]
        out.open_s.append(time.perf_counter() - start)
        del opened
        start = time.perf_counter()
        for d in data:
            r = Replica(folder, d.doc_id)
            if d.doc_id.startswith(docs.TIMELINE):
                r.doc.get_list("entries").get_value()
            else:
                r.doc.get_map("seq").get_value()
        out.open_decode_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        entries = 0
        for d in data:
            r = Replica(folder, d.doc_id)
            if d.doc_id.startswith(docs.TIMELINE):
                entries += len(docs.entries_of(r.doc))
            else:
                docs.seqs_of(r.doc)
        out.open_read_s.append(time.perf_counter() - start)
        out.entries = entries
    return out


# ---------------------------------------------------------------------------- report
@dataclass(frozen=True)
class Config:
    entries: int
    missed: int
    periods: int
    reps: int
    live: int
    warmup: int


def report(
    cfg: Config,
    cu: CatchupResults,
    steady: Steady | None,
    comp: Compaction,
    setup_info: dict[str, str],
) -> None:
    print()
    print(
        f"== 1. catch-up: a device missing the last {cfg.missed:,} of {cfg.entries:,} entries "
        f"({cfg.periods} timeline + {cfg.periods} seq documents), median of {cfg.reps} "
        "(warm device replica)"
    )
    head = f"{'':<54} {'median':>9} {'min':>9} {'bytes':>10} {'×raw t':>7} {'×raw B':>7}"
    print(head)

    def row(v: Variant, raw: Variant) -> None:
        if not v.samples:
            print(f"{v.label:<54} {'-':>9}")
            return
        ratio_t = v.ms / raw.ms if raw.samples else math.nan
        ratio_b = v.nbytes / raw.nbytes if raw.samples and raw.nbytes else math.nan
        print(
            f"{v.label:<54} {v.ms:>6.1f} ms {v.min_ms:>6.1f} ms {v.nbytes:>10,} "
            f"{ratio_t:>6.2f}x {ratio_b:>6.2f}x"
        )

    row(cu.raw, cu.raw)
    print(
        f"{'  of which export / import':<54} {cu.raw.part_ms('export'):>6.1f} ms "
        f"{cu.raw.part_ms('import'):>6.1f} ms"
    )
    row(cu.plain, cu.raw)
    device, imp, fs = (cu.plain.part_ms(k) for k in ("device", "import", "fsync"))
    print(
        f"  hub serve {cu.plain.part_ms('serve'):.1f} ms; device {device:.1f} ms = loro import "
        f"{imp:.1f} + fsync {fs:.1f} + the rest {device - imp - fs:.1f} (medians of each part)"
    )
    row(cu.sealed, cu.raw)
    print(f"{'  of which seal + open, both ways':<54} {cu.sealed.part_ms('envelopes'):>6.1f} ms")
    row(cu.grpc, cu.raw_grpc)
    imp, fs = cu.grpc.part_ms("import"), cu.grpc.part_ms("fsync")
    print(
        f"  device loro import {imp:.1f} ms + fsync {fs:.1f} ms; hub process, gRPC, envelopes "
        f"and the rest {cu.grpc.ms - imp - fs:.1f} ms"
    )
    row(cu.raw_grpc, cu.raw_grpc)
    row(cu.behind, cu.raw)
    print(
        f"entries on the device after catch-up: {cu.entries_after:,} (expected {cfg.entries:,}); "
        "every variant checked: device versions == hub versions"
    )
    if steady is not None:
        print()
        print(
            f"== 2. steady state: one live entry written on one device (in turn) → the 3 others; "
            f"{len(steady.add)} entries after {cfg.warmup} warm-up, hub process + mosquitto"
        )
        print(f"{'':<54} {'n':>6} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8}   (ms)")

        def srow(label: str, values: Sequence[float]) -> None:
            ms = [v * 1000 for v in values]
            cells = [percentile(ms, q) for q in (0.5, 0.9, 0.99)] + [max(ms, default=math.nan)]
            print(f"{label:<54} {len(ms):>6}" + "".join(f" {c:>8.2f}" for c in cells))

        srow("all 3 devices have it (add_entry → last replica)", steady.all3)
        srow("first device has it", steady.first)
        srow("each device (pooled)", steady.each)
        srow("  writer: ReplicaSet.add_entry (change + fsync)", steady.add)
        srow("  writer: replication.send (seal + publish)", steady.send)
        srow("  a device applies one live update (on_hub_update)", steady.apply)
        if steady.ingest is not None:
            ing = steady.ingest
            srow("  hub ingest in process: apply_from_device", ing.total)
            srow("    of which ReplicaSet.apply", ing.apply)
            srow("    of which sequence_new (seq doc + hub.db)", ing.sequence)
            srow("    of which fsync", ing.fsync)
            print(
                f"    (entries_of on the hub's current-week document, {ing.doc_entries:,} entries: "
                f"{ing.entries_of * 1000:.1f} ms)"
            )
        n = max(len(steady.add), 1)
        rate = len(steady.add) / steady.seconds if steady.seconds else math.nan
        print(
            f"lost (not seen within {VISIBLE_TIMEOUT_S:g} s): {steady.lost}; "
            f"arrived already sequenced: {steady.sequenced}/{steady.received}; "
            f"{rate:.1f} entries/s one at a time"
        )
        print(
            "CPU ms per entry: "
            + ", ".join(f"{k} {v * 1000 / n:.1f}" for k, v in steady.cpu.items())
            + f"; fsync wait in the 4 devices {steady.fsync_s * 1000 / n:.1f} ms per entry"
        )
    print()
    print(f"== 3. compaction at {cfg.entries:,} entries ({comp.documents} documents)")
    print(
        f"update log, one record per change (a device that never compacts): "
        f"{comp.log_bytes:,} B ({kib(comp.log_bytes)}), {comp.log_records:,} records; "
        f"load (replay) {comp.log_load_s:.2f} s"
    )
    print(
        f"full snapshot (loro ExportMode.Snapshot, no compaction): {comp.full_snapshot_bytes:,} B "
        f"({kib(comp.full_snapshot_bytes)})"
    )
    print(
        f"after Replica.compact(): shallow snapshots {comp.shallow_bytes:,} B "
        f"({kib(comp.shallow_bytes)}), {comp.shallow_bytes / max(comp.log_bytes, 1):.2f}x the log; "
        f"files {comp.files_bytes:,} B"
    )
    print(
        f"load Replica(folder, doc) × {comp.documents}: median {median(comp.open_s) * 1000:.1f} ms "
        f"(loro decodes lazily); + decoding the state (get_value): "
        f"{median(comp.open_decode_s) * 1000:.1f} ms; + reading it (entries_of/seqs_of, "
        f"{comp.entries:,} entries): {median(comp.open_read_s) * 1000:.1f} ms  "
        f"(medians of {len(comp.open_s)})"
    )
    print(
        f"the hub's folder at start (its 4 MB compaction rule): {comp.hub_folder_bytes:,} B "
        f"({kib(comp.hub_folder_bytes)})"
    )
    print()
    for k, v in setup_info.items():
        print(f"{k}: {v}")


# ---------------------------------------------------------------------------- the run
def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


async def network_parts(
    cfg: Config,
    setup: CatchupSetup,
    catchup_bundle: Bundle,
    steady_bundles: Sequence[Bundle],
    hub: HubProcess,
    cu: CatchupResults,
) -> Steady:
    print(f"end-to-end catch-up over gRPC: {cfg.reps} reps (+1 warm-up)", flush=True)
    await catchup_grpc(setup, catchup_bundle, hub.target, cfg.reps, cu)
    print(
        f"steady state: 4 edge devices, {cfg.warmup} warm-up + {cfg.live} live entries", flush=True
    )
    return await steady_state(steady_bundles, hub.target, hub, cfg.warmup, cfg.live, setup.fsync)


def run(cfg: Config, root: Path, info: dict[str, str]) -> int:
    mqtt_port, grpc_port = ports.port(), ports.port()
    home = Home.init(root / "home", mqtt_port=mqtt_port, grpc_port=grpc_port, hub_host="127.0.0.1")
    profiles = ("phone", "mac", "phone", "mac")
    steady_bundles = [
        flash(home, profile_name=p, name=f"steady-{i}", out=root / f"bundle-steady-{i}")
        for i, p in enumerate(profiles)
    ]
    catchup_bundle = flash(home, profile_name="phone", name="lagging", out=root / "bundle-lagging")
    devices = [b.device_id for b in [*steady_bundles, catchup_bundle]]

    t = time.perf_counter()
    entries = make_entries(cfg.entries, cfg.periods, devices, seed=1)
    store = HubStore(home.path / "hub.db")
    try:
        seqs = store.sequence_entries(entries, HUB)
    finally:
        store.close()
    data = build_docs(entries, seqs, cfg.missed, seed=2)
    layout = write_layout(data, home.path / "replicas", root)
    for b in steady_bundles:
        fresh_copy(layout.synced, b.state_dir / "replicas")
    info["data"] = (
        f"{cfg.entries:,} entries ({sum(len(e.text) for e in entries) / len(entries):.0f} chars "
        f"of text on average) in {', '.join(d.doc_id for d in data if d.doc_id.startswith('t'))}; "
        f"built in {time.perf_counter() - t:.1f} s"
    )
    hub_gens = [f"{d.doc_id} g{d.hub_gen}" for d in data if d.hub_gen]
    info["hub compactions"] = ", ".join(hub_gens) or "none (logs below 4 MB)"
    print(f"data: {info['data']}", flush=True)

    print("compaction: loading the full update log, compacting, loading snapshots", flush=True)
    comp = compaction(layout, data, cfg.reps)

    scratch = root / "scratch"
    scratch.mkdir()
    fsync = FsyncMeter()
    loro_meter = LoroMeter()
    envelopes = Envelopes(home, catchup_bundle)
    cu = CatchupResults()
    hub = HubProcess(root, home.path, mqtt_port, grpc_port)
    status = 0
    with fsync.installed(), loro_meter.installed():
        in_hub = InProcessHub(fresh_copy(layout.hub, scratch / "hub-copy"), envelopes)
        behind = InProcessHub(fresh_copy(layout.full_log, scratch / "hub-behind"), envelopes)
        setup = CatchupSetup(layout, scratch, data, in_hub, cfg.entries, fsync, loro_meter)
        cu.docs_sent = len(in_hub.replicas.doc_ids())
        print(f"catch-up in process: {cfg.reps} reps (+1 warm-up)", flush=True)
        asyncio.run(catchup_in_process(setup, cfg.reps, cu, behind))
        del behind
        print("hub ingest in process", flush=True)
        ingest = measure_ingest(
            layout, scratch, home.path, steady_bundles[0], max(10, cfg.live // 10), fsync
        )
        try:
            up = hub.start()
            info["hub start"] = (
                f"{up:.1f} s to load and reconcile {cfg.entries:,} entries "
                f"(pid {hub.pid}, mosquitto {hub.mosquitto_pid()})"
            )
            print(f"hub up in {up:.1f} s", flush=True)
            steady = asyncio.run(network_parts(cfg, setup, catchup_bundle, steady_bundles, hub, cu))
            steady.ingest = ingest
        finally:
            for w in hub.stop():
                print(f"warning: {w}", file=sys.stderr)
                status = 1
    log_text = hub.log.read_text(errors="replace") if hub.log.exists() else ""
    problems = [ln for ln in log_text.splitlines() if " ERROR " in ln or "Traceback" in ln]
    info["hub log"] = f"{len(problems)} error lines" + (
        f": {problems[0][:160]}" if problems else ""
    )
    report(cfg, cu, steady, comp, info)
    return status


def bench(args: argparse.Namespace) -> int:
    if args.quick:
        cfg = Config(
            entries=args.entries or 10_000,
            missed=args.missed or 200,
            periods=args.periods,
            reps=args.reps or 3,
            live=args.live or 40,
            warmup=8,
        )
    else:
        cfg = Config(
            entries=args.entries or 100_000,
            missed=args.missed or 1000,
            periods=args.periods,
            reps=args.reps or 7,
            live=args.live or 300,
            warmup=12,
        )
    if not 0 < cfg.missed < cfg.entries or cfg.periods < 1:
        print("need 0 < --missed < --entries and --periods >= 1", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _raise_interrupt)
    root = Path(tempfile.mkdtemp(prefix="yimi-sync-bench-", dir=args.dir))
    started = time.monotonic()
    status = 0
    mosq = subprocess.run(
        ["/usr/sbin/mosquitto", "-h"], capture_output=True, text=True, check=False
    ).stdout.splitlines()[:1]
    print(
        f"Yimi Mesh sync catch-up bench: {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, loro {getattr(loro, '__version__', '1.x')}, "
        f"{(mosq or ['mosquitto ?'])[0]}; data in {root}",
        flush=True,
    )
    info: dict[str, str] = {}
    load_at_start = os.getloadavg()[0]
    try:
        status = run(cfg, root, info)
        print(
            f"load average (1 min): {load_at_start:.2f} at start, {os.getloadavg()[0]:.2f} at end"
            " (other work on the machine shows up in every figure)"
        )
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        status = 130
    except Exception as exc:
        print(f"bench failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        hub_log = root / "hub.log"
        if hub_log.exists():
            tail = "\n".join(hub_log.read_text(errors="replace").splitlines()[-15:])
            print(f"hub log (last lines):\n{tail}", file=sys.stderr)
        status = 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return finish(root, keep=args.keep, started=started, status=status)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--entries", type=int, default=0, help="timeline entries (default 100000)")
    p.add_argument("--missed", type=int, default=0, help="entries the device lacks (1000)")
    p.add_argument("--periods", type=int, default=4, help="ISO-week documents (default 4)")
    p.add_argument("--reps", type=int, default=0, help="catch-up repetitions (default 7)")
    p.add_argument("--live", type=int, default=0, help="steady-state live entries (300)")
    p.add_argument("--quick", action="store_true", help="smoke run: 10000 entries, 200 missed")
    p.add_argument("--dir", type=Path, default=None, help="where the temporary folder goes")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    return p


def main(argv: list[str] | None = None) -> int:
    return bench(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
