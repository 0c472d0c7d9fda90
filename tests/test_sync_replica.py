"""CRDT replicas without daemons: one document on disk (snapshot + fsynced log with CRC
records, generations), damaged files, compaction, peers behind the compaction point,
hostile bytes (garbage, truncation, 10 MB, a real Rust panic), the document readers, and
the hub's ingestion rules (``refusal``, ``HubReplication.apply_from_device``, ``serve``).

Catch-up between nodes is exercised in-process: :class:`DeviceReplication` talks to
:class:`HubReplication` through a request function that calls ``serve`` directly.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import random
import secrets
import struct
import tempfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loro import ExportMode, LoroDoc, VersionVector

from hub.timeline import HubStore
from protos import sync_pb2
from storage.group_commit import GroupCommit
from sync import crdt
from sync import documents as docs
from sync.crdt import CrdtError, guard, updates_since, version
from sync.replica import REC_HEADER, Replica
from sync.replicas import ReplicaSet
from sync.replication import (
    CATCHUP_ENV,
    CATCHUP_JITTER,
    MAX_LIVE_BLOB,
    DeviceReplication,
    HubReplication,
    jittered,
    refusal,
)

PERIOD = "2026-W48"
T0 = docs.period_start_ms(PERIOD) + 3_600_000  # Monday 01:00 UTC of that week
TL = docs.timeline_doc(PERIOD)
REPO = Path(__file__).resolve().parent.parent
SEQ = docs.seq_doc(PERIOD)


# ---------------------------------------------------------------- helpers
def entry(eid: str, *, device: str = "dev-a", ts: int | None = None, text: str = "") -> docs.Entry:
    return docs.make_entry(
        entry_id=eid,
        device=device,
        kind="memo",
        text=text or f"text of {eid}",
        ts_ms=T0 if ts is None else ts,
    )


def ids(entries: list[docs.Entry]) -> list[str]:
    return [e.id for e in entries]


def push(replica: Replica, *eids: str, device: str = "dev-a") -> list[bytes]:
    """One change (one log record) per entry; returns the updates."""
    return [
        replica.change(partial(docs.push_entries, entries=[entry(e, device=device)])) for e in eids
    ]


def timeline_ids(replica: Replica) -> list[str]:
    return ids(docs.entries_of(replica.doc))


def snapshot_of(replica: Replica) -> object:
    """The document's content (an empty root container is no content: reading ``seq``
    on a document creates it)."""
    value = replica.doc.get_deep_value()
    assert isinstance(value, dict)
    return {k: v for k, v in value.items() if v not in ({}, [])}


def files(folder: Path, pattern: str) -> list[Path]:
    return sorted(folder.glob(pattern))


def other_doc_update(*eids: str, device: str = "dev-z") -> bytes:
    """A valid update from an unrelated peer (a fresh document)."""
    doc = LoroDoc()
    docs.push_entries(doc, [entry(e, device=device) for e in eids])
    doc.commit()
    return bytes(doc.export(ExportMode.Updates(VersionVector())))


# loro checks a blob with xxhash32 (seed b"LORO") over everything after byte 20; the fuzz and
# the panic test below re-seal mutated blobs so that they reach loro's decoder proper.
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def xxh32(data: bytes, seed: int) -> int:
    n, i = len(data), 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed & _M, (seed - _P1) & _M]
        while i + 16 <= n:
            for k, word in enumerate(struct.unpack_from("<4I", data, i)):
                v[k] = (_rotl((v[k] + word * _P2) & _M, 13) * _P1) & _M
            i += 16
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 4 <= n:
        (word,) = struct.unpack_from("<I", data, i)
        h = (_rotl((h + word * _P3) & _M, 17) * _P4) & _M
        i += 4
    while i < n:
        h = (_rotl((h + data[i] * _P5) & _M, 11) * _P1) & _M
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M
    h ^= h >> 13
    h = (h * _P3) & _M
    return h ^ (h >> 16)


def reseal(blob: bytes) -> bytes:
    """``blob`` with loro's checksum recomputed (so corruption passes the first check)."""
    if len(blob) < 20 or not blob.startswith(b"loro"):
        return blob
    seed = struct.unpack("<I", b"LORO")[0]
    return blob[:16] + struct.pack("<I", xxh32(blob[20:], seed)) + blob[20:]


def keep(doc: LoroDoc) -> None:
    """Never free ``doc``: dropping a document a panic poisoned panics again."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(doc))


def panicking_update() -> bytes:
    """A well-formed update creating a root map named ``a/b``: loro panics importing it
    (``pyo3_runtime.PanicException``, a ``BaseException``)."""
    doc = LoroDoc()
    doc.get_map("aQb").insert("k", 1)
    doc.commit()
    blob = bytes(doc.export(ExportMode.Updates(VersionVector())))
    return reseal(blob.replace(b"aQb", b"a/b"))


# ---------------------------------------------------------------- round trip, two processes
def test_replica_round_trip_and_reload(tmp_path: Path) -> None:
    r = Replica(tmp_path, TL)
    push(r, "e1", "e2")
    r.change(partial(docs.set_note_fields, note_id="n1", fields={"text": "milk"}, device="d"))
    again = Replica(tmp_path, TL)
    assert timeline_ids(again) == ["e1", "e2"]
    assert snapshot_of(again) == snapshot_of(r)
    assert version(again.doc) == version(r.doc)
    assert again.problems == [] and r.problems == []
    # the log holds one CRC'd record per change
    log = (tmp_path / f"{TL}.g0.log").read_bytes()
    records = 0
    pos = 0
    while pos < len(log):
        length, _ = REC_HEADER.unpack_from(log, pos)
        pos += REC_HEADER.size + length
        records += 1
    assert pos == len(log) and records == 3


def test_replica_set_round_trip_timeline_and_notes(tmp_path: Path) -> None:
    rs = ReplicaSet(tmp_path)
    upd = rs.add_entry(entry("e1", ts=T0 + 5))
    assert upd.doc == TL and upd.blob
    rs.add_entry(entry("e0", ts=T0))
    rs.set_note("n1", {"text": "buy milk", "kind": "todo", "done": False}, device="dev-a")
    rs.set_note("n1", {"done": True}, device="dev-b")
    fresh = ReplicaSet(tmp_path)
    assert ids(fresh.timeline()) == ["e0", "e1"]  # pending: by ts
    assert all(e.seq is None for e in fresh.timeline())
    (note,) = fresh.notes()
    assert (note.id, note.text, note.kind, note.done, note.updated_by) == (
        "n1",
        "buy milk",
        "todo",
        True,
        "dev-b",
    )
    assert note.updated_at > 0
    assert fresh.doc_ids() == ["notes", TL]


def test_two_replica_sets_in_one_folder_see_each_others_changes(tmp_path: Path) -> None:
    """``yimi edge run`` and ``yimi memo`` share a folder: separate objects, one lock."""
    edge, cli = ReplicaSet(tmp_path), ReplicaSet(tmp_path)
    assert edge.refresh() == []
    cli.add_entry(entry("from-cli"))
    cli.set_note("n1", {"text": "hello"}, device="cli")
    changes = edge.refresh()
    assert sorted(u.doc for u in changes) == ["notes", TL]  # a document it never opened too
    assert ids(edge.timeline()) == ["from-cli"] and edge.notes()[0].text == "hello"
    # the refreshed blobs are what a peer needs
    peer = LoroDoc()
    for u in changes:
        if u.doc == TL:
            peer.import_(u.blob)
    assert ids(docs.entries_of(peer)) == ["from-cli"]
    assert edge.refresh() == []  # nothing new: nothing returned

    # both write without refreshing first: a change picks up the other's appends
    edge.add_entry(entry("from-edge", ts=T0 + 1))
    cli.add_entry(entry("from-cli-2", ts=T0 + 2))
    edge.refresh()
    cli.refresh()
    want = ["from-cli", "from-edge", "from-cli-2"]
    assert ids(edge.timeline()) == want and ids(cli.timeline()) == want
    assert ids(ReplicaSet(tmp_path).timeline()) == want
    assert edge.problems() == [] and cli.problems() == []


def test_refresh_follows_a_compaction_by_another_process(tmp_path: Path) -> None:
    a, b = Replica(tmp_path, TL), Replica(tmp_path, TL)
    push(a, "e1", "e2")
    b.refresh()
    a.compact()
    push(a, "e3")
    assert b.refresh(), "b sees e3 written after a's compaction"
    assert timeline_ids(b) == ["e1", "e2", "e3"] and b.gen == a.gen == 1


def test_a_change_follows_generations_made_and_removed_while_it_did_not_look(
    tmp_path: Path,
) -> None:
    """b's own log is gone (two compactions keep only the last two generations; a purge
    keeps one): its next change loads the newest generation first, and nothing is lost."""
    a, b = Replica(tmp_path, TL), Replica(tmp_path, TL)
    push(a, "e1")
    b.refresh()
    a.compact()
    push(a, "e2")
    a.compact()
    assert not (tmp_path / f"{TL}.g0.log").exists()
    push(b, "e3")
    assert b.gen == 2 and timeline_ids(b) == ["e1", "e2", "e3"]
    a.purge_history()
    push(b, "e4")
    assert b.gen == a.gen == 3
    assert timeline_ids(Replica(tmp_path, TL)) == ["e1", "e2", "e3", "e4"]


FULL_DISK_APPEND = """
import resource, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from tests.test_sync_replica import TL, push
from sync.replica import Replica
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
replica = Replica(Path(sys.argv[1]), TL)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
try:
    push(replica, "big" + "x" * 4000)
except OSError as exc:
    print(exc.errno)
"""


def test_an_append_the_disk_cuts_short_leaves_no_half_record(tmp_path: Path) -> None:
    """A file-size limit makes the kernel write part of the record, then refuse the rest
    (as a full disk does): the log is cut back to its last whole record, so the appends
    after it are read back (a replay stops at the first damaged record)."""
    import errno
    import subprocess
    import sys

    first = Replica(tmp_path, TL)
    push(first, "e1")
    log_file = tmp_path / f"{TL}.g0.log"
    size = log_file.stat().st_size
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK_APPEND, str(tmp_path), str(size + 100), str(REPO)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == str(errno.EFBIG), done.stderr
    assert log_file.stat().st_size == size, "the half record was cut off"
    push(first, "e2")
    again = Replica(tmp_path, TL)
    assert timeline_ids(again) == ["e1", "e2"] and not again.problems


# ---------------------------------------------------------------- damaged logs
def _damage_truncate(data: bytes, last: int) -> bytes:
    return data[: len(data) - 3]


def _damage_flip_body(data: bytes, last: int) -> bytes:
    out = bytearray(data)
    out[last + REC_HEADER.size + 5] ^= 0x40
    return bytes(out)


def _damage_huge_length(data: bytes, last: int) -> bytes:
    out = bytearray(data)
    out[last : last + 4] = struct.pack(">I", 0xFFFFFFF0)
    return bytes(out)


def _damage_cut_header(data: bytes, last: int) -> bytes:
    return data[: last + 5]


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_damage_truncate, "truncated record"),
        (_damage_flip_body, "record checksum mismatch"),
        (_damage_huge_length, "truncated record"),
        (_damage_cut_header, "truncated record header"),
    ],
)
def test_damaged_last_log_record_recovers_the_rest_and_catch_up_refills_it(
    tmp_path: Path, damage: object, reason: str
) -> None:
    dev, hub_dir = tmp_path / "dev", tmp_path / "hub"
    r = Replica(dev, TL)
    hub = Replica(hub_dir, TL)
    for blob in push(r, "e1", "e2", "e3", "e4"):
        hub.apply(blob)  # the hub got every change live
    log = dev / f"{TL}.g0.log"
    data = log.read_bytes()
    last = len(data) - (REC_HEADER.size + REC_HEADER.unpack_from(data, _offsets(data)[-1])[0])
    assert last == _offsets(data)[-1]
    damaged = damage(data, last)  # type: ignore[operator]
    log.write_bytes(damaged)

    again = Replica(dev, TL)
    assert timeline_ids(again) == ["e1", "e2", "e3"], "every earlier record is recovered"
    assert len(again.problems) == 1 and reason in again.problems[0], again.problems
    aside = files(dev, f"{TL}.g0.log.damaged.*")
    assert len(aside) == 1 and aside[0].name in again.problems[0]
    assert aside[0].read_bytes() == damaged[last:], "the damaged bytes are kept, not lost"
    assert log.read_bytes() == data[:last], "the log is cut back to its last good record"

    # the next change appends after the good records, and a reload is clean
    push(again, "e5")
    assert timeline_ids(Replica(dev, TL)) == ["e1", "e2", "e3", "e5"]
    assert Replica(dev, TL).problems == []

    # catch-up from a peer that has everything restores the lost change (and the peer
    # learns the new one)
    blob, snapshot = updates_since(TL, hub.doc, version(again.doc))
    assert not snapshot
    assert again.apply(blob).changed
    hub.apply(updates_since(TL, again.doc, version(hub.doc))[0])
    assert sorted(timeline_ids(again)) == ["e1", "e2", "e3", "e4", "e5"]
    assert snapshot_of(again) == snapshot_of(hub)
    assert sorted(timeline_ids(Replica(dev, TL))) == ["e1", "e2", "e3", "e4", "e5"]


def _offsets(data: bytes) -> list[int]:
    out, pos = [], 0
    while pos + REC_HEADER.size <= len(data):
        out.append(pos)
        pos += REC_HEADER.size + REC_HEADER.unpack_from(data, pos)[0]
    return out


def test_a_damaged_record_mid_log_moves_every_later_byte_aside(tmp_path: Path) -> None:
    r = Replica(tmp_path, TL)
    push(r, "e1", "e2", "e3", "e4")
    log = tmp_path / f"{TL}.g0.log"
    data = bytearray(log.read_bytes())
    second = _offsets(bytes(data))[1]
    data[second + REC_HEADER.size + 2] ^= 0x01
    log.write_bytes(bytes(data))
    again = Replica(tmp_path, TL)
    assert timeline_ids(again) == ["e1"]
    (aside,) = files(tmp_path, f"{TL}.g0.log.damaged.*")
    assert aside.read_bytes() == bytes(data[second:]), "e2..e4 are kept aside, not dropped"
    assert "record checksum mismatch" in again.problems[0]


def test_a_record_loro_refuses_is_reported_and_skipped(tmp_path: Path) -> None:
    """A record whose CRC is right but whose bytes loro refuses: the later ones still load."""
    r = Replica(tmp_path, TL)
    push(r, "e1")
    garbage = b"not a loro update"
    with (tmp_path / f"{TL}.g0.log").open("ab") as fh:
        import zlib

        fh.write(REC_HEADER.pack(len(garbage), zlib.crc32(garbage)) + garbage)
    push(r, "e2")
    again = Replica(tmp_path, TL)
    assert timeline_ids(again) == ["e1", "e2"]
    assert len(again.problems) == 1 and "refused" in again.problems[0]


# ---------------------------------------------------------------- damaged snapshots
def _three_generations(folder: Path) -> Replica:
    """gen 1 snapshot + log, gen 2 snapshot + log (gen 0 already removed)."""
    r = Replica(folder, TL)
    push(r, "a1", "a2")
    r.change(partial(docs.set_note_fields, note_id="n", fields={"text": "v1"}, device="d"))
    r.compact()
    push(r, "b1")
    r.change(partial(docs.set_note_fields, note_id="n", fields={"text": "v2"}, device="d"))
    r.compact()
    push(r, "c1", "c2")
    assert r.gen == 2
    assert not (folder / f"{TL}.g0.log").exists(), "only one previous generation is kept"
    assert (folder / f"{TL}.g1.snap").exists() and (folder / f"{TL}.g1.log").stat().st_size
    return r


def _flip_snapshot_body(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))


def _cut_snapshot_header(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:6])


def _valid_crc_garbage_snapshot(path: Path) -> None:
    from sync.replica import SNAP_HEADER, SNAP_MAGIC

    body = os.urandom(300)
    crc = (zlib_crc(body)).to_bytes(4, "big")
    path.write_bytes(SNAP_MAGIC + SNAP_HEADER.pack(crc, len(body)) + body)


def zlib_crc(data: bytes) -> int:
    import zlib

    return zlib.crc32(data) & 0xFFFFFFFF


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_flip_snapshot_body, "snapshot checksum mismatch"),
        (_cut_snapshot_header, "snapshot header damaged"),
        (_valid_crc_garbage_snapshot, "snapshot unreadable"),
    ],
)
def test_damaged_newest_snapshot_falls_back_to_the_previous_generation(
    tmp_path: Path, damage: object, reason: str
) -> None:
    r = _three_generations(tmp_path)
    want, want_ids = snapshot_of(r), timeline_ids(r)
    snap = tmp_path / f"{TL}.g2.snap"
    damage(snap)  # type: ignore[operator]
    again = Replica(tmp_path, TL)
    assert timeline_ids(again) == want_ids == ["a1", "a2", "b1", "c1", "c2"]
    assert snapshot_of(again) == want, "nothing lost: gen 1 snapshot + gen 1 and 2 logs"
    assert len(again.problems) == 1 and reason in again.problems[0], again.problems
    (aside,) = files(tmp_path, f"{TL}.g2.snap.damaged.*")
    assert aside.name in again.problems[0] and not snap.exists()
    # it keeps working on generation 2: new changes, reload, compaction
    push(again, "d1")
    assert again.gen == 2
    third = Replica(tmp_path, TL)
    assert timeline_ids(third)[-1] == "d1" and third.problems == []
    third.compact()
    assert timeline_ids(Replica(tmp_path, TL)) == [*want_ids, "d1"]
    assert not (tmp_path / f"{TL}.g1.snap").exists()


def test_only_generation_snapshot_damaged_replays_generation_zero(tmp_path: Path) -> None:
    r = Replica(tmp_path, TL)
    push(r, "a1", "a2")
    r.compact()
    push(r, "b1")
    _flip_snapshot_body(tmp_path / f"{TL}.g1.snap")
    again = Replica(tmp_path, TL)
    assert timeline_ids(again) == ["a1", "a2", "b1"]
    assert "snapshot checksum mismatch" in again.problems[0]


# ---------------------------------------------------------------- compaction
def test_compaction_then_reload_is_identical_and_not_larger(tmp_path: Path) -> None:
    r = Replica(tmp_path, docs.NOTES)
    for i in range(150):
        r.change(
            partial(docs.set_note_fields, note_id=f"n{i % 5}", fields={"text": f"v{i}"}, device="d")
        )
    before_value, before_version = snapshot_of(r), version(r.doc)
    before_size = r.size_on_disk
    size = r.compact()
    assert r.gen == 1 and r.size_on_disk <= before_size
    assert size <= before_size
    again = Replica(tmp_path, docs.NOTES)
    assert snapshot_of(again) == before_value
    assert version(again.doc) == before_version
    assert again.doc.is_shallow() and again.problems == []
    print(f"\ncompaction: {before_size} bytes of log -> {again.size_on_disk} bytes")


def test_replica_compacts_itself_past_compact_at(tmp_path: Path) -> None:
    r = Replica(tmp_path, TL, compact_at=2_000)
    for i in range(60):
        push(r, f"e{i}")
    assert r.gen >= 1
    assert (tmp_path / f"{TL}.g{r.gen}.log").stat().st_size <= 2_000 + 1_000
    assert timeline_ids(Replica(tmp_path, TL)) == [f"e{i}" for i in range(60)]


def _sync(a: Replica, b: Replica) -> None:
    """Exchange deltas both ways (neither side compacted)."""
    b.apply(updates_since(a.doc_id, a.doc, version(b.doc))[0])
    a.apply(updates_since(b.doc_id, b.doc, version(a.doc))[0])


def test_a_peer_behind_the_compaction_point_takes_a_snapshot_and_keeps_its_own_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = iter(range(1_000, 10**9, 1_000))
    monkeypatch.setattr(docs, "now_ms", lambda: next(clock))
    hub = ReplicaSet(tmp_path / "hub")
    dev = ReplicaSet(tmp_path / "dev")
    for doc_id in (TL, docs.NOTES):
        hub.get(doc_id)
    hub.add_entry(entry("h0", device="hub"))
    hub.set_note("n1", {"text": "first", "kind": "todo"}, device="hub")
    hub.set_note("n2", {"text": "other"}, device="hub")
    for doc_id in (TL, docs.NOTES):
        _sync(hub.get(doc_id), dev.get(doc_id))
    assert dev.notes() == hub.notes()

    # offline: the device writes entries and edits; the hub writes, edits, compacts
    hub.add_entry(entry("h1", device="hub", ts=T0 + 10))
    hub.set_note("n2", {"text": "hub's n2"}, device="hub")
    dev.add_entry(entry("d1", device="dev", ts=T0 + 20))
    dev.add_entry(entry("d2", device="dev", ts=T0 + 30))
    dev.set_note("n1", {"text": "device's newer text"}, device="dev")  # newer than the hub's
    dev.set_note("n3", {"text": "new on the device"}, device="dev")
    hub.add_entry(entry("h2", device="hub", ts=T0 + 40))
    for doc_id in (TL, docs.NOTES):
        hub.get(doc_id).compact()
    # a running hub keeps the full history in memory; after a restart it holds only the
    # compacted (shallow) document, and a peer behind that point cannot take a delta
    hub = ReplicaSet(tmp_path / "hub")
    assert hub.get(TL).doc.is_shallow() and hub.get(docs.NOTES).doc.is_shallow()

    for doc_id in (TL, docs.NOTES):
        blob, snapshot = updates_since(doc_id, hub.get(doc_id).doc, version(dev.get(doc_id).doc))
        assert snapshot, f"{doc_id}: a peer behind the compaction point gets a snapshot"
        dev.apply(sync_pb2.DocUpdate(doc=doc_id, blob=blob, snapshot=True))
        # now the device is past the hub's compaction point: deltas both ways
        back, snap_back = updates_since(doc_id, dev.get(doc_id).doc, version(hub.get(doc_id).doc))
        assert not snap_back
        assert hub.get(doc_id).apply(back).changed
        blob, snapshot = updates_since(doc_id, hub.get(doc_id).doc, version(dev.get(doc_id).doc))
        assert not snapshot

    assert ids(dev.timeline()) == ["h0", "h1", "d1", "d2", "h2"]
    assert ids(hub.timeline()) == ids(dev.timeline())
    notes = {n.id: n for n in dev.notes()}
    assert notes["n1"].text == "device's newer text" and notes["n1"].kind == "todo"
    assert notes["n2"].text == "hub's n2"
    assert notes["n3"].text == "new on the device"
    assert hub.notes() == dev.notes()
    for doc_id in (TL, docs.NOTES):
        assert snapshot_of(hub.get(doc_id)) == snapshot_of(dev.get(doc_id))
    # the device's replica took a new generation on disk and reloads to the same content
    reloaded = ReplicaSet(tmp_path / "dev")
    assert ids(reloaded.timeline()) == ids(dev.timeline()) and reloaded.notes() == dev.notes()
    assert reloaded.problems() == []


@pytest.mark.parametrize("device_edits_last", [True, False])
def test_behind_the_compaction_point_concurrent_edits_of_different_note_fields_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device_edits_last: bool
) -> None:
    """The hub sets a note's kind, the offline device its text (either one later); the
    device then takes the hub's snapshot (it is behind the compaction point): both edits
    survive, on the device and — after the device pushes — on the hub."""
    clock = iter(range(1_000, 10**9, 1_000))
    monkeypatch.setattr(docs, "now_ms", lambda: next(clock))
    hub, dev = ReplicaSet(tmp_path / "hub"), ReplicaSet(tmp_path / "dev")
    hub.set_note("n1", {"text": "first", "kind": "note", "done": False}, device="hub")
    _sync(hub.get(docs.NOTES), dev.get(docs.NOTES))
    edits = [
        lambda: hub.set_note("n1", {"kind": "todo"}, device="hub"),
        lambda: dev.set_note("n1", {"text": "the device's text"}, device="dev"),
    ]
    for edit in edits if device_edits_last else reversed(edits):
        edit()
    hub.get(docs.NOTES).compact()
    hub = ReplicaSet(tmp_path / "hub")  # restarted: the shallow document only
    blob, snapshot = updates_since(
        docs.NOTES, hub.get(docs.NOTES).doc, version(dev.get(docs.NOTES).doc)
    )
    assert snapshot
    dev.apply(sync_pb2.DocUpdate(doc=docs.NOTES, blob=blob, snapshot=True))
    hub.get(docs.NOTES).apply(
        updates_since(docs.NOTES, dev.get(docs.NOTES).doc, version(hub.get(docs.NOTES).doc))[0]
    )
    for side in (dev, hub):
        (note,) = side.notes()
        assert (note.text, note.kind, note.done) == ("the device's text", "todo", False)
    assert dev.notes() == hub.notes()


# ---------------------------------------------------------------- in-process hub and devices
class Hub:
    """A hub's replication over a real HubStore (SQLite: the source of truth for seq)."""

    def __init__(
        self,
        root: Path,
        *,
        compact_at: int | None = None,
        scopes: dict[str, tuple[str, ...]] | None = None,
    ) -> None:
        self.store = HubStore(root / "hub.db")
        self.replicas = ReplicaSet(root / "hub-replicas", compact_at=compact_at)
        self.sent: list[sync_pb2.SyncUpdate] = []
        self.counts: dict[str, int] = {}

        async def broadcast(update: sync_pb2.SyncUpdate) -> None:
            self.sent.append(update)

        def count(name: str) -> None:
            self.counts[name] = self.counts.get(name, 0) + 1

        self.sync = HubReplication(
            self.replicas,
            broadcast=broadcast,
            sequence=self.store.sequence_entries,
            scopes_of=None if scopes is None else (lambda d: scopes.get(d, ())),
            count=count,
        )

    def device(
        self, root: Path, name: str, *, scopes: tuple[str, ...] | None = None
    ) -> DeviceReplication:
        replicas = ReplicaSet(root / f"{name}-replicas")

        async def request(req: sync_pb2.SyncRequest) -> sync_pb2.SyncResponse:
            response, _ = self.sync.serve(req, name)
            return response

        async def no_live(_: sync_pb2.SyncUpdate) -> None:
            return None

        return DeviceReplication(
            replicas, broadcast=no_live, request=request, is_connected=lambda: True, scopes=scopes
        )

    def sqlite(self) -> dict[str, int]:
        return {e.id: e.seq for e in self.store.entries(limit=10**9)}


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    h = Hub(tmp_path)
    yield h
    h.store.close()


def catch_up(*devices: DeviceReplication, rounds: int = 2) -> None:
    async def run() -> None:
        for _ in range(rounds):
            for d in devices:
                await d.catch_up()

    asyncio.run(run())


def view(rs: ReplicaSet) -> list[tuple[str, int | None]]:
    rs.refresh()
    return [(e.id, e.seq) for e in rs.timeline()]


def test_devices_catch_up_through_the_hub_and_get_seqs(hub: Hub, tmp_path: Path) -> None:
    a, b = hub.device(tmp_path, "a"), hub.device(tmp_path, "b")
    a.replicas.add_entry(entry("a1", device="a", ts=T0 + 1))
    b.replicas.add_entry(entry("b1", device="b", ts=T0 + 2))
    b.replicas.set_note("n", {"text": "from b"}, device="b")
    catch_up(a, b)
    expected = view(hub.replicas)
    assert sorted(expected) == sorted(hub.sqlite().items())
    assert all(seq is not None for _, seq in expected)
    assert view(a.replicas) == view(b.replicas) == expected
    assert a.replicas.notes() == b.replicas.notes() == hub.replicas.notes()
    # a second round changes nothing (duplicates are harmless)
    before = hub.sqlite()
    catch_up(a, b)
    assert hub.sqlite() == before and view(a.replicas) == expected


def test_a_device_with_a_group_commit_syncs_before_it_tells_the_hub(
    hub: Hub, tmp_path: Path
) -> None:
    """With a GroupCommit (a DeviceNode's), a received update is appended without a sync
    of its own; the group is flushed before a live broadcast and before a catch-up push."""
    group = GroupCommit()
    replicas = ReplicaSet(tmp_path / "g-replicas", group=group)
    pending_when_sent: list[int] = []

    async def request(req: sync_pb2.SyncRequest) -> sync_pb2.SyncResponse:
        if req.push:
            pending_when_sent.append(group.pending)
        response, _ = hub.sync.serve(req, "g")
        return response

    async def live(_: sync_pb2.SyncUpdate) -> None:
        pending_when_sent.append(group.pending)

    device = DeviceReplication(
        replicas, broadcast=live, request=request, is_connected=lambda: True, flush=group.flush
    )
    hub.replicas.add_entry(entry("h1", device="hub", ts=T0 + 1))
    update = sync_pb2.SyncUpdate(
        updates=[
            sync_pb2.DocUpdate(doc=d, blob=updates_since(d, hub.replicas.get(d).doc, b"")[0])
            for d in hub.replicas.doc_ids()
        ]
    )
    device.on_hub_update(update)
    assert group.pending > 0  # appended, not synced yet
    assert [e.id for e in replicas.timeline()] == ["h1"]
    other = ReplicaSet(tmp_path / "g-replicas")  # another process writes a note
    other.set_note("n", {"text": "mine"}, device="g")

    async def run() -> None:
        await device.catch_up()  # pushes the note
        replicas.get(docs.NOTES).change(
            partial(docs.set_note_fields, note_id="n", fields={"done": True}, device="g")
        )
        await device.send([sync_pb2.DocUpdate(doc=docs.NOTES, blob=b"x")])

    asyncio.run(run())
    assert pending_when_sent == [0, 0]
    assert hub.replicas.notes()[0].text == "mine"


def test_an_entry_in_another_devices_name_is_refused_everywhere(hub: Hub, tmp_path: Path) -> None:
    """Device a writes one entry as itself and one claiming to be b: the hub sequences the
    first, refuses the second (not in its timeline, remembered, marked -1 in the seq
    document) and every replica — a's own too — leaves it out; a restart's reconcile
    (sender "hub") does not let it in, and pushing it again changes nothing."""
    a, b = hub.device(tmp_path, "a"), hub.device(tmp_path, "b")
    a.replicas.add_entry(entry("a1", device="a", ts=T0 + 1))
    a.replicas.add_entry(entry("forged", device="b", ts=T0 + 2))
    catch_up(a, b)
    assert set(hub.sqlite()) == {"a1"}
    assert hub.store.refused_entries() == [("forged", "b", "a")]
    assert hub.store.counters()["rejected.entry_other_device"] == 1
    for rs in (hub.replicas, a.replicas, b.replicas):
        assert [i for i, _ in view(rs)] == ["a1"], rs
    # b relays what the hub sent it (its own entry and a's): nothing is refused
    b.replicas.add_entry(entry("b1", device="b", ts=T0 + 3))
    catch_up(b, a)
    assert set(hub.sqlite()) == {"a1", "b1"} and len(hub.store.refused_entries()) == 1
    # the reconcile of a hub start sequences as "hub": a refused entry stays refused
    timeline_docs = {d for d in hub.replicas.doc_ids() if d.startswith(docs.TIMELINE)}
    hub.sync.sequence_new(timeline_docs, "hub")
    assert set(hub.sqlite()) == {"a1", "b1"}
    assert hub.store.counters()["rejected.entry_other_device"] == 1


def test_a_hub_entry_another_process_wrote_stays_the_hubs_when_a_device_update_lands(
    hub: Hub, tmp_path: Path
) -> None:
    """``yimi memo --home`` appends a hub entry to the hub's replicas while the hub runs. A
    device's update applied before the hub's poll reads the folder imports that entry too
    (every write reads the log first): it is still the hub's entry, sequenced, not one the
    device sent in another's name (a CI run refused it so and every replica dropped it)."""
    a = hub.device(tmp_path, "a")
    a.replicas.add_entry(entry("a1", device="a", ts=T0 + 1))
    catch_up(a)
    ReplicaSet(hub.replicas.folder).add_entry(entry("h1", device="hub", ts=T0 + 2))
    update = a.replicas.add_entry(entry("a2", device="a", ts=T0 + 3))
    _, refused = hub.sync.apply_from_device([update], "a")
    assert refused == [] and hub.store.refused_entries() == []
    assert "rejected.entry_other_device" not in hub.store.counters()
    assert set(hub.sqlite()) == {"a1", "h1", "a2"}
    assert sorted(view(hub.replicas)) == sorted(hub.sqlite().items())  # each with its seq
    # the hub's poll still hands on what the other process wrote (the devices get it)
    catch_up(a)
    assert view(a.replicas) == view(hub.replicas)
    # a device's own entry in the hub's name is still refused, with one on disk beside it
    ReplicaSet(hub.replicas.folder).add_entry(entry("h2", device="hub", ts=T0 + 4))
    forged = a.replicas.add_entry(entry("forged", device="hub", ts=T0 + 5))
    hub.sync.apply_from_device([forged], "a")
    assert hub.store.refused_entries() == [("forged", "hub", "a")]
    assert set(hub.sqlite()) == {"a1", "h1", "a2", "h2"}


def test_an_update_whose_entries_cannot_be_listed_makes_its_sender_answer_for_them(
    hub: Hub, tmp_path: Path
) -> None:
    """A text that starts as loro's JSON names a container (``docs.LORO_JSON_CONTAINER``):
    the hub cannot list that update's entries from its operations, so the sender answers for
    every unsequenced entry of the document — one in another device's name is refused, not
    sequenced as the hub's."""
    a = hub.device(tmp_path, "a")
    a.replicas.add_entry(entry("a1", device="a", ts=T0 + 1))
    catch_up(a)
    odd = docs.make_entry(
        entry_id="forged",
        device="b",
        kind="memo",
        text=docs.LORO_JSON_CONTAINER + "hi",
        ts_ms=T0 + 2,
    )
    before = a.replicas.get(TL).doc.oplog_vv
    update = a.replicas.add_entry(odd)
    assert docs.entries_added(a.replicas.get(TL).doc, before) is None
    hub.sync.apply_from_device([update], "a")
    assert hub.store.refused_entries() == [("forged", "b", "a")]
    assert set(hub.sqlite()) == {"a1"}


def test_a_lost_log_record_comes_back_from_the_hubs_catch_up(hub: Hub, tmp_path: Path) -> None:
    dev = hub.device(tmp_path, "a")
    for i in range(3):
        dev.replicas.add_entry(entry(f"a{i}", device="a", ts=T0 + i))
    catch_up(dev)
    log = dev.replicas.folder / f"{TL}.g0.log"
    log.write_bytes(log.read_bytes()[:-4])  # the last record (the hub's seq import or ours)
    restarted = DeviceReplication(
        ReplicaSet(dev.replicas.folder),
        broadcast=dev._broadcast,
        request=dev._request,
        is_connected=lambda: True,
    )
    restarted.replicas.get(TL)
    assert restarted.replicas.problems(), "the damage is reported"
    catch_up(restarted, rounds=1)
    assert view(restarted.replicas) == view(hub.replicas)
    assert len(view(hub.replicas)) == 3


def test_an_offline_change_concurrent_with_the_hubs_compaction_point_reaches_the_hub(
    tmp_path: Path,
) -> None:
    """The device has everything before the hub's compaction point but not the point
    itself, and wrote offline on top of the older state: its change must still reach the
    hub (loro cannot import it into the hub's shallow document as a delta)."""
    hub = Hub(tmp_path)
    try:
        dev = hub.device(tmp_path, "a")
        hub.replicas.add_entry(entry("h0", device="hub"))
        hub.sync.sequence_new({TL}, "hub")
        catch_up(dev)
        dev.replicas.add_entry(entry("d1", device="a", ts=T0 + 5))  # offline
        hub.replicas.add_entry(entry("h1", device="hub", ts=T0 + 6))
        hub.replicas.get(TL).compact()  # the compaction point is h1
        hub.store.close()
        hub = Hub(tmp_path)  # restarted: the shallow document only
        assert hub.replicas.get(TL).doc.is_shallow()
        dev = hub.device(tmp_path, "a")
        catch_up(dev, rounds=3)
        assert ids(hub.replicas.timeline()) == ["h0", "h1", "d1"]  # seq order
        assert view(dev.replicas) == view(hub.replicas)
        assert "d1" in hub.sqlite()
    finally:
        hub.store.close()


def test_an_update_that_arrives_before_its_dependencies_waits_for_them(tmp_path: Path) -> None:
    """Reordering is harmless: B (depends on A) arrives first and is *pending*, then A
    makes both visible. A pending part is held in memory only: after a restart before A
    arrived, the next catch-up from the sender (by version vector) brings B again."""
    src = LoroDoc()
    docs.push_entries(src, [entry("A")])
    src.commit()
    blob_a = bytes(src.export(ExportMode.Updates(VersionVector())))
    vv = src.oplog_vv
    docs.push_entries(src, [entry("B")])
    src.commit()
    blob_b = bytes(src.export(ExportMode.Updates(vv)))
    r = Replica(tmp_path / "one", TL)
    first = r.apply(blob_b)
    assert first.pending and not first.changed and timeline_ids(r) == []
    second = r.apply(blob_a)
    assert second.changed and timeline_ids(r) == ["A", "B"]
    assert timeline_ids(Replica(tmp_path / "one", TL)) == ["A", "B"]
    assert r.apply(blob_b) == r.apply(blob_a) == type(second)(changed=False, pending=False)

    r2 = Replica(tmp_path / "two", TL)
    assert r2.apply(blob_b).pending
    restarted = Replica(tmp_path / "two", TL)
    assert restarted.apply(bytes(src.export(ExportMode.Updates(restarted.doc.oplog_vv)))).changed
    assert timeline_ids(restarted) == ["A", "B"]


# ---------------------------------------------------------------- hostile bytes
def _valid_update() -> bytes:
    return other_doc_update("x1", "x2")


BAD_BLOBS = {
    "empty": lambda: b"",
    "one byte": lambda: b"\x00",
    "magic only": lambda: b"loro",
    "garbage": lambda: bytes(range(256)) * 4,
    "truncated update (header)": lambda: _valid_update()[:20],
    "truncated update (half)": lambda: _valid_update()[: len(_valid_update()) // 2],
    "truncated update (last byte)": lambda: _valid_update()[:-1],
    "bit flip": lambda: bytes([b ^ (i == 40) for i, b in enumerate(_valid_update())]),
    "resealed truncation": lambda: reseal(_valid_update()[:-3]),
    "10 MB random": lambda: random.Random(7).randbytes(10 * 1024 * 1024),
    "1 MB resealed past loro's checksum": lambda: reseal(
        b"loro" + random.Random(8).randbytes(1024 * 1024)
    ),
    "rust panic (root name a/b)": panicking_update,
}


@pytest.mark.parametrize("name", list(BAD_BLOBS))
def test_hostile_update_is_refused_and_the_replica_is_unchanged(tmp_path: Path, name: str) -> None:
    r = Replica(tmp_path, TL)
    push(r, "e1", "e2")
    before, vv = snapshot_of(r), version(r.doc)
    log = tmp_path / f"{TL}.g0.log"
    size = log.stat().st_size
    with pytest.raises(CrdtError) as err:
        r.apply(BAD_BLOBS[name]())
    assert err.value.key == "crdt.refused" and TL in str(err.value)
    assert snapshot_of(r) == before and version(r.doc) == vv
    assert log.stat().st_size == size, "nothing refused is written"
    # the replica still works: a valid update applies, and the disk state reloads
    assert r.apply(_valid_update()).changed
    push(r, "e3")
    again = Replica(tmp_path, TL)
    assert sorted(timeline_ids(again)) == ["e1", "e2", "e3", "x1", "x2"]
    assert again.problems == []


def test_a_rust_panic_is_a_base_exception_and_guard_turns_it_into_crdt_error() -> None:
    blob = panicking_update()
    victim = LoroDoc()
    with pytest.raises(BaseException) as raw:  # the point: not an Exception
        victim.import_(blob)
    keep(victim)  # a poisoned loro document panics again when it is dropped
    assert type(raw.value).__name__ == "PanicException"
    assert not isinstance(raw.value, Exception)
    victim = LoroDoc()
    keep(victim)
    with pytest.raises(CrdtError, match="PanicException"):
        guard("x", partial(victim.import_, blob))


def test_guard_converts_any_base_exception_but_lets_interpreter_exits_through() -> None:
    class PanicException(BaseException):  # what pyo3 raises, by name
        pass

    def boom(exc: BaseException) -> None:
        raise exc

    with pytest.raises(CrdtError, match="PanicException: inside rust"):
        guard("d", partial(boom, PanicException("inside rust")))
    for passing in (KeyboardInterrupt(), SystemExit(3), asyncio.CancelledError()):
        with pytest.raises(type(passing)):
            guard("d", partial(boom, passing))


class PanicException(BaseException):
    """What pyo3 raises for a Rust panic, by name (it derives from BaseException)."""


class PanickyDoc:
    """A loro document whose ``import_`` panics; ``poisons`` makes later calls panic too,
    as a real panic does (loro's mutex is poisoned)."""

    def __init__(self, doc: LoroDoc, *, poisons: bool) -> None:
        self._doc, self._poisons, self._poisoned = doc, poisons, False

    def import_(self, blob: bytes) -> object:
        self._poisoned = self._poisons
        raise PanicException("index out of bounds: the len is 3 but the index is 7")

    def __getattr__(self, name: str) -> object:
        if self._poisoned:
            raise PanicException("poisoned LoroMutex")
        return getattr(self._doc, name)


@pytest.mark.parametrize("poisons", [False, True], ids=["panic", "panic-and-poison"])
def test_a_panic_inside_loro_during_apply_never_escapes(tmp_path: Path, poisons: bool) -> None:
    """A BaseException named PanicException out of ``LoroDoc.import_`` comes out of
    ``Replica.apply`` as CrdtError; a document it left poisoned is rebuilt from disk; the
    replica is unchanged and keeps working."""
    r = Replica(tmp_path, TL)
    push(r, "e1", "e2")
    before, vv = snapshot_of(r), version(r.doc)
    r.doc = PanickyDoc(r.doc, poisons=poisons)  # type: ignore[assignment]
    with pytest.raises(CrdtError, match="PanicException"):
        r.apply(_valid_update())
    assert isinstance(r.doc, LoroDoc) is poisons, "a poisoned document is replaced"
    r.doc = getattr(r.doc, "_doc", r.doc)
    assert snapshot_of(r) == before and version(r.doc) == vv
    assert r.apply(_valid_update()).changed
    assert sorted(timeline_ids(Replica(tmp_path, TL))) == ["e1", "e2", "x1", "x2"]


def test_versions_and_peer_states_never_raise_on_garbage() -> None:
    doc = LoroDoc()
    docs.push_entries(doc, [entry("e")])
    doc.commit()
    for junk in (b"\xff" * 7, b"garbage", b"\x05\x01"):
        with pytest.raises(CrdtError):
            updates_since(TL, doc, junk)
        assert crdt.lacks(doc, junk) is True
    assert crdt.lacks(doc, version(doc)) is False
    assert crdt.lacks(doc, b"") is True


def test_an_invalid_document_id_is_refused(tmp_path: Path) -> None:
    for bad in ("", "../etc", "a/b", "x" * 65, ".hidden"):
        with pytest.raises(CrdtError):
            Replica(tmp_path, bad)


_FUZZ_BASE = LoroDoc()
docs.push_entries(_FUZZ_BASE, [entry("f1"), entry("f2", ts=T0 + 1)])
docs.set_note_fields(_FUZZ_BASE, "n", {"text": "t", "done": True}, device="d")
_FUZZ_BASE.commit()
_FUZZ_UPDATE = bytes(_FUZZ_BASE.export(ExportMode.Updates(VersionVector())))
_FUZZ_SNAPSHOT = bytes(_FUZZ_BASE.export(ExportMode.Snapshot()))


def _mutated(draw: st.DrawFn) -> bytes:
    base = bytearray(draw(st.sampled_from([_FUZZ_UPDATE, _FUZZ_SNAPSHOT])))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(base) - 1))
        base[i] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        base = base[: draw(st.integers(0, len(base)))]
    return reseal(bytes(base)) if draw(st.booleans()) else bytes(base)


mutated_updates = st.composite(_mutated)


def _check_apply(blob: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rs = ReplicaSet(folder)
        rs.add_entry(entry("mine"))
        r = rs.get(TL)
        before = snapshot_of(r)
        try:
            r.apply(blob)
        except CrdtError:
            assert snapshot_of(r) == before
        # whatever happened, the replica and its readers keep working
        version(r.doc)
        rs.timeline()
        rs.notes()
        r.change(partial(docs.push_entries, entries=[entry("after")]))
        assert {"mine", "after"} <= set(timeline_ids(r))
        again = Replica(folder, TL)
        assert snapshot_of(again) == snapshot_of(r), "memory and disk agree"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2048))
def test_fuzz_apply_arbitrary_bytes(blob: bytes) -> None:
    _check_apply(blob)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_updates())
def test_fuzz_apply_mutated_valid_updates(blob: bytes) -> None:
    _check_apply(blob)


# ---------------------------------------------------------------- document readers
def test_entry_readers_skip_malformed_values() -> None:
    doc = LoroDoc()
    good = entry("ok").as_value()
    lst = doc.get_list("entries")
    for bad in [
        "a string",
        42,
        None,
        ["a", "list"],
        {"id": "no-text", "device": "d", "ts": 1, "kind": "memo"},
        {**good, "id": ""},
        {**good, "id": 7},
        {**good, "ts": "yesterday"},
        {**good, "ts": True},
        {**good, "ts": 1.5},
        {**good, "text": 99},
        {**good, "device": None},
        {**good, "kind": ["memo"]},
    ]:
        lst.push(bad)  # type: ignore[arg-type]
    lst.push(good)
    lst.push({**good, "text": "a duplicate id: the first one wins"})
    lst.push({**entry("long").as_value(), "text": "x" * 20_000, "extra": "ignored"})
    doc.commit()
    got = docs.entries_of(doc)
    assert ids(got) == ["ok", "long"]
    assert got[0].text == good["text"]
    assert len(got[1].text) == docs.MAX_TEXT_CHARS
    assert docs.parse_entry({"id": "x"}) is None and docs.parse_entry(object()) is None


def test_seq_and_note_readers_skip_malformed_values() -> None:
    doc = LoroDoc()
    m = doc.get_map("seq")
    values: list[tuple[str, int | str | bool | float]] = [
        ("a", 3),
        ("b", "4"),
        ("c", True),
        ("d", 0),
        ("e", -1),
        ("f", 2.0),
    ]
    for key, value in values:
        m.insert(key, value)
    doc.get_map("note:good").insert("text", "fine")
    doc.get_map("note:good").insert("updated_at", 5)
    odd = doc.get_map("note:odd")
    odd.insert("text", 12)
    odd.insert("done", "yes")
    odd.insert("deleted", 1)
    odd.insert("updated_at", "noon")
    doc.get_list("note:list").push("not a map")
    doc.get_map("something-else").insert("text", "not a note")
    doc.get_map("note:gone").insert("deleted", True)
    doc.commit()
    assert docs.seqs_of(doc) == {"a": 3}
    notes = {n.id: n for n in docs.notes_of(doc)}
    assert set(notes) == {"good", "odd"}
    assert (notes["odd"].text, notes["odd"].done, notes["odd"].deleted) == ("12", False, False)
    assert notes["odd"].updated_at == 0 and notes["odd"].kind == "note"
    assert {n.id for n in docs.notes_of(doc, include_deleted=True)} == {"good", "odd", "gone"}


def test_display_order_is_seq_then_ts_then_device_with_pending_last() -> None:
    rows = [
        entry("p-late", ts=T0 + 50, device="a"),
        entry("s3", ts=T0 + 1, device="z"),
        entry("p-early-b", ts=T0 + 10, device="b"),
        entry("s1", ts=T0 + 99, device="a"),
        entry("p-early-a", ts=T0 + 10, device="a"),
        entry("s2", ts=T0 + 5, device="m"),
    ]
    out = docs.display_order(rows, {"s1": 1, "s2": 2, "s3": 7})
    assert ids(out) == ["s1", "s2", "s3", "p-early-a", "p-early-b", "p-late"]
    assert [e.seq for e in out] == [1, 2, 7, None, None, None]


def test_timeline_spans_period_documents_in_display_order(tmp_path: Path) -> None:
    rs = ReplicaSet(tmp_path)
    week = 7 * 86_400_000
    rs.add_entry(entry("next-week", ts=T0 + week))
    rs.add_entry(entry("this-week", ts=T0))
    rs.add_entry(entry("pending", ts=T0 - week))
    rs.get(docs.seq_doc(docs.period_of(T0 + week))).change(
        partial(docs.set_seqs, seqs=[("next-week", 1)])
    )
    rs.get(SEQ).change(partial(docs.set_seqs, seqs=[("this-week", 2)]))
    assert [d for d in rs.doc_ids() if d.startswith("timeline.")] == sorted(
        docs.timeline_doc(docs.period_of(t)) for t in (T0 - week, T0, T0 + week)
    )
    assert view(rs) == [("next-week", 1), ("this-week", 2), ("pending", None)]


def test_a_small_device_keeps_only_its_window(tmp_path: Path) -> None:
    now = int(__import__("time").time() * 1000)
    rs = ReplicaSet(tmp_path, window_days=3)
    old = docs.timeline_doc(docs.period_of(now - 60 * 86_400_000))
    assert rs.wanted(docs.timeline_doc(docs.period_of(now))) and rs.wanted(docs.NOTES)
    assert not rs.wanted(old) and not rs.wanted("bogus")
    full = ReplicaSet(tmp_path)
    full.add_entry(entry("ancient", ts=now - 60 * 86_400_000))
    full.add_entry(entry("today", ts=now))
    assert ids(ReplicaSet(tmp_path, window_days=3).timeline()) == ["today"]
    assert old not in rs.doc_ids()


def test_reapply_keeps_missing_entries_seqs_and_newer_notes() -> None:
    old, new = LoroDoc(), LoroDoc()
    docs.push_entries(old, [entry("both"), entry("only-old")])
    docs.push_entries(new, [entry("both"), entry("only-new")])
    docs.set_seqs(old, [("both", 1), ("only-old", 5)])
    docs.set_seqs(new, [("both", 9)])
    for doc, text, at in ((old, "old newer", 200), (new, "new older", 100)):
        m = doc.get_map("note:n")
        m.insert("text", text)
        m.insert("updated_at", at)
    for doc, text, at in ((old, "old older", 100), (new, "new newer", 200)):
        m = doc.get_map("note:m")
        m.insert("text", text)
        m.insert("updated_at", at)
    old.commit()
    new.commit()
    docs.reapply(old, new)
    new.commit()
    assert ids(docs.entries_of(new)) == ["both", "only-new", "only-old"]
    assert docs.seqs_of(new) == {"both": 9, "only-old": 5}
    texts = {n.id: n.text for n in docs.notes_of(new)}
    assert texts == {"n": "old newer", "m": "new newer"}


# ---------------------------------------------------------------- authority
@pytest.mark.parametrize(
    ("doc_id", "from_hub", "refused"),
    [
        ("seq.2026-W48", False, "hub only"),
        ("seq.2026-W48", True, None),
        ("timeline.2026-W48", False, None),
        ("notes", False, None),
        ("timeline.2026-W99", False, "unknown"),
        ("seq.soon", True, "unknown"),
        ("bogus", False, "unknown"),
        ("", False, "unknown"),
        ("timeline.", False, "unknown"),
    ],
)
def test_refusal(doc_id: str, from_hub: bool, refused: str | None) -> None:
    reason = refusal(doc_id, from_hub=from_hub)
    if refused is None:
        assert reason is None
    else:
        assert reason is not None and refused in reason


def test_hub_applies_device_updates_refuses_the_rest_and_sequences_new_entries(
    hub: Hub, tmp_path: Path
) -> None:
    dev = ReplicaSet(tmp_path / "dev")
    forged_seq = dev.get(SEQ).change(partial(docs.set_seqs, seqs=[("forged", 1)]))
    timeline = sync_pb2.DocUpdate(
        doc=TL,
        blob=updates_since(TL, _with(dev, "d1", "d2").get(TL).doc, b"")[0],
    )
    note = dev.set_note("n1", {"text": "from the device"}, device="dev")
    updates = [
        sync_pb2.DocUpdate(doc=SEQ, blob=forged_seq),
        sync_pb2.DocUpdate(doc="secrets", blob=timeline.blob),
        sync_pb2.DocUpdate(doc="timeline.2026-W77", blob=timeline.blob),
        sync_pb2.DocUpdate(doc=TL, blob=timeline.blob, snapshot=True),
        sync_pb2.DocUpdate(doc=TL, blob=b"garbage"),
        sync_pb2.DocUpdate(doc=TL, blob=panicking_update()),
        timeline,
        note,
    ]
    changed, refused = hub.sync.apply_from_device(updates, "dev")
    assert len(refused) == 6, refused
    assert hub.sync.refused == {
        "seq documents are written by the hub only": 1,
        "unknown document": 2,
        "devices send updates, not snapshots": 1,
        "crdt": 2,
    }
    assert [u.doc for u in changed] == [TL, docs.NOTES, SEQ]
    seq_blob = changed[-1].blob
    check = LoroDoc()
    check.import_(seq_blob)
    assert docs.seqs_of(check) == hub.sqlite() == {"d1": 1, "d2": 2}
    assert "forged" not in docs.seqs_of(hub.replicas.get(SEQ).doc)
    assert not (hub.replicas.folder / "secrets.g0.log").exists()
    assert ids(hub.replicas.timeline()) == ["d1", "d2"] and hub.replicas.notes()[0].text == (
        "from the device"
    )
    # the same again: nothing new, nothing sequenced twice
    again, refused_again = hub.sync.apply_from_device([timeline, note], "dev")
    assert again == [] and refused_again == []
    # a later entry gets the next seq; the hub's own entries interleave by SQLite
    more = sync_pb2.DocUpdate(
        doc=TL,
        blob=updates_since(TL, _with(dev, "d3").get(TL).doc, version(hub.replicas.get(TL).doc))[0],
    )
    changed, _ = hub.sync.apply_from_device([more], "dev")
    assert hub.sqlite() == {"d1": 1, "d2": 2, "d3": 3}
    assert docs.seqs_of(hub.replicas.get(SEQ).doc) == hub.sqlite()
    assert [e.seq for e in hub.replicas.timeline()] == [1, 2, 3]


def _with(rs: ReplicaSet, *eids: str) -> ReplicaSet:
    for i, e in enumerate(eids):
        rs.add_entry(entry(e, device="dev", ts=T0 + len(rs.timeline()) + i))
    return rs


def test_serve_answers_with_what_the_device_lacks_and_never_takes_seq_pushes(
    hub: Hub, tmp_path: Path
) -> None:
    hub.sync.add_sequenced([docs.Entry("h1", "hub", T0, "memo", "x", 1)])
    dev = ReplicaSet(tmp_path / "dev")
    forger = ReplicaSet(tmp_path / "forger")
    forged = forger.get(SEQ).change(partial(docs.set_seqs, seqs=[("h1", 99)]))
    response, changed = hub.sync.serve(
        sync_pb2.SyncRequest(
            have=[sync_pb2.DocState(doc="bogus", version=b"junk")],
            list_docs=True,
            push=[sync_pb2.DocUpdate(doc=SEQ, blob=forged)],
        ),
        "dev",
    )
    assert response.applied == 0 and len(response.refused) == 1 and changed == []
    assert sorted(u.doc for u in response.updates) == [SEQ, TL]
    assert not any(u.snapshot for u in response.updates)
    assert sorted(s.doc for s in response.have) == [SEQ, TL]
    for u in response.updates:
        dev.apply(u)
    assert view(dev) == [("h1", 1)]
    assert docs.seqs_of(hub.replicas.get(SEQ).doc) == {"h1": 1}
    # up to date: nothing to send
    response, _ = hub.sync.serve(sync_pb2.SyncRequest(have=dev.states(), list_docs=True), "dev")
    assert list(response.updates) == []


def test_add_sequenced_makes_the_documents_agree_with_sqlite(hub: Hub) -> None:
    rows = [docs.Entry(f"t{i}", "hub", T0 + i, "reply", f"turn {i}", i + 1) for i in range(4)]
    hub.sync.add_sequenced(rows)
    assert hub.sync.add_sequenced(rows) == [], "idempotent"
    assert view(hub.replicas) == [(f"t{i}", i + 1) for i in range(4)]
    # a seq that differs from SQLite is rewritten from SQLite
    hub.replicas.get(SEQ).change(partial(docs.set_seqs, seqs=[("t0", 42)]))
    fixed = hub.sync.add_sequenced(rows)
    assert [u.doc for u in fixed] == [SEQ]
    assert view(hub.replicas)[0] == ("t0", 1)


def test_a_device_compacts_only_what_the_hub_has(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sync.replication as replication

    monkeypatch.setattr(replication, "DEVICE_COMPACT_AT", 1)
    dev = hub.device(tmp_path, "a")
    dev.replicas.add_entry(entry("a1", device="a", ts=T0 + 1))
    replica = dev.replicas.get(TL)

    async def deaf(req: sync_pb2.SyncRequest) -> sync_pb2.SyncResponse:
        return sync_pb2.SyncResponse()  # a hub that has nothing and takes nothing

    offline = DeviceReplication(
        dev.replicas, broadcast=dev._broadcast, request=deaf, is_connected=lambda: True
    )
    catch_up(offline, rounds=1)
    assert replica.gen == 0, "history the hub lacks is not compacted away"

    catch_up(dev, rounds=1)  # the real hub takes the entry
    assert replica.gen == 1 and replica.log_bytes == 0, "now it is compacted"
    dev.replicas.add_entry(entry("a2", device="a", ts=T0 + 2))
    catch_up(dev)
    assert view(dev.replicas) == view(hub.replicas)
    assert [e for e, _ in view(hub.replicas)] == ["a1", "a2"]


# ---------------------------------------------------------------- certificate scopes
WATCH = ("utter", "ack", "timeline.read")
GLASSES = ("utter", "ack", "timeline.read", "timeline.write")
PHONE = (*GLASSES, "notes.write", "approve", "relay")


def test_a_device_writes_only_the_documents_its_certificate_grants(tmp_path: Path) -> None:
    """The attack of issue 15: a watch without ``timeline.write`` pushes a memo and a
    ``reply``-kind entry (reads like the assistant) from its timeline replica, glasses
    without ``notes.write`` edit a note (a hostile device: it ignores its own certificate
    and pushes anyway). The hub refuses each before importing it, counts it as
    ``rejected.scope``: none reaches the hub's documents, its SQLite timeline or the phone.
    A phone (``timeline.write``) writing a ``reply``-kind entry is refused too."""
    h = Hub(tmp_path, scopes={"watch": WATCH, "glasses": GLASSES, "phone": PHONE})
    try:
        phone = h.device(tmp_path, "phone", scopes=PHONE)
        watch = h.device(tmp_path, "watch")  # hostile: pushes what it may not write
        glasses = h.device(tmp_path, "glasses")
        note = phone.replicas.add_note("buy milk", "todo", device="phone")
        phone.replicas.add_entry(entry("p1", device="phone", ts=T0 + 1))
        catch_up(phone, watch, glasses)
        before_docs = {d: h.replicas.get(d).doc.oplog_vv for d in h.replicas.doc_ids()}
        before_sent = len(h.sent)

        watch.replicas.add_entry(entry("w-memo", device="watch", ts=T0 + 2, text="memo"))
        reply = docs.make_entry(
            entry_id="w-reply",
            device="watch",
            kind="reply",
            text="I sent the e-mail to your bank",
            ts_ms=T0 + 3,
        )
        watch.replicas.add_entry(reply)
        glasses.replicas.edit_note(note, "text", "wire 5000 to mallory", device="glasses")
        catch_up(watch, glasses)
        assert h.counts == {"rejected.scope": 4}, h.counts  # 2 rounds x (watch, glasses)
        assert {d: h.replicas.get(d).doc.oplog_vv for d in h.replicas.doc_ids()} == before_docs
        assert set(h.sqlite()) == {"p1"}
        assert len(h.sent) == before_sent
        catch_up(phone)
        assert [e.id for e in phone.replicas.timeline()] == ["p1"]
        assert [n.text for n in phone.replicas.notes()] == ["buy milk"]
        assert [n.text for n in h.replicas.notes()] == ["buy milk"]

        # a device honouring its certificate does not push what it may not write
        honest = h.device(tmp_path, "watch2", scopes=WATCH)
        honest.replicas.add_entry(entry("w2", device="watch2", ts=T0 + 4))
        catch_up(honest)
        assert h.counts == {"rejected.scope": 4} and "w2" not in h.sqlite()

        # timeline.write lets a device write memos, never the assistant's own kinds
        phone.replicas.add_entry(
            docs.make_entry(entry_id="p-reply", device="phone", kind="reply", text="x")
        )
        phone.replicas.add_entry(entry("p2", device="phone", ts=T0 + 5))
        catch_up(phone)
        assert set(h.sqlite()) == {"p1", "p2"}
        assert h.store.counters()["rejected.entry_hub_kind"] == 1
        assert "p-reply" not in [e.id for e in h.replicas.timeline()]
    finally:
        h.store.close()


def test_periodic_catch_ups_are_jittered() -> None:
    """Devices started together do not all ask the hub at the same instant each interval."""
    waits = [jittered(30.0) for _ in range(200)]
    assert all(30.0 * (1 - CATCHUP_JITTER) <= w <= 30.0 * (1 + CATCHUP_JITTER) for w in waits)
    assert max(waits) - min(waits) > 30.0 * CATCHUP_JITTER  # spread, not one value


async def test_a_refused_catch_up_is_tried_again_after_a_backoff(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub refuses a call when a peer has too many in progress (``peer_busy``): the
    device tries again after a short backoff, not only at the next (minutes-long) interval."""
    monkeypatch.setenv(CATCHUP_ENV, "600")
    replicas = ReplicaSet(tmp_path / "busy-replicas")
    replicas.add_entry(entry("busy1", device="busy", ts=T0 + 1))
    calls: list[int] = []

    async def request(req: sync_pb2.SyncRequest) -> sync_pb2.SyncResponse:
        calls.append(len(req.push))
        if len(calls) == 1:
            raise RuntimeError("RESOURCE_EXHAUSTED: too many calls")
        response, _ = hub.sync.serve(req, "busy")
        return response

    async def no_live(_: sync_pb2.SyncUpdate) -> None:
        return None

    device = DeviceReplication(
        replicas, broadcast=no_live, request=request, is_connected=lambda: True
    )
    async with device:
        device.wake()
        await asyncio.wait_for(device.caught_up.wait(), 10)  # the interval is 600 s
    assert len(calls) >= 3 and device.catchups == 1  # refused, then asked and pushed
    assert "busy1" in dict(view(hub.replicas))


async def test_a_live_update_that_could_not_be_sent_is_pushed_by_a_catch_up_at_once(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live broadcast that fails while the device is connected (the publish refused) is
    carried by a catch-up started at once, not at the next (minutes-long) interval."""
    monkeypatch.setenv(CATCHUP_ENV, "600")
    replicas = ReplicaSet(tmp_path / "lost-replicas")
    pushed: list[int] = []

    async def request(req: sync_pb2.SyncRequest) -> sync_pb2.SyncResponse:
        pushed.append(len(req.push))
        response, _ = hub.sync.serve(req, "lost")
        return response

    async def failing(_: sync_pb2.SyncUpdate) -> None:
        raise RuntimeError("publish refused")

    device = DeviceReplication(
        replicas, broadcast=failing, request=request, is_connected=lambda: True
    )
    async with device:
        await device.send([replicas.add_entry(entry("lost1", device="lost", ts=T0 + 1))])
        await asyncio.wait_for(device.caught_up.wait(), 10)  # the interval is 600 s
    assert device.catchups == 1 and sum(pushed) == 1  # lost1, pushed by it
    assert "lost1" in dict(view(hub.replicas))


async def test_a_change_too_large_to_go_live_is_pushed_by_a_catch_up_at_once(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change larger than a live message may carry is left to a catch-up, started at once."""
    monkeypatch.setenv(CATCHUP_ENV, "600")
    replicas = ReplicaSet(tmp_path / "big-replicas")
    sent: list[sync_pb2.SyncUpdate] = []

    async def request(req: sync_pb2.SyncRequest) -> sync_pb2.SyncResponse:
        response, _ = hub.sync.serve(req, "big")
        return response

    async def broadcast(update: sync_pb2.SyncUpdate) -> None:
        sent.append(update)

    device = DeviceReplication(
        replicas, broadcast=broadcast, request=request, is_connected=lambda: True
    )
    many = [  # one change of random texts (an entry's text is capped), over the limit
        entry(f"big{i}", device="big", ts=T0 + 1 + i, text=secrets.token_urlsafe(20_000))
        for i in range(20)
    ]
    big = sync_pb2.DocUpdate(
        doc=TL, blob=replicas.get(TL).change(partial(docs.push_entries, entries=many))
    )
    assert len(big.blob) > MAX_LIVE_BLOB
    async with device:
        await device.send([big])
        await asyncio.wait_for(device.caught_up.wait(), 10)  # the interval is 600 s
    assert sent == []  # never live
    assert {f"big{i}" for i in range(20)} <= set(dict(view(hub.replicas)))


@pytest.mark.parametrize("made_by", ["the other process", "this node"])
def test_another_process_write_taken_in_by_an_apply_is_still_reported(
    tmp_path: Path, made_by: str
) -> None:
    """``yimi memo --bundle`` writes into the replicas of a bundle whose edge runs: the edge
    reports (broadcasts) it at its next :meth:`ReplicaSet.refresh`. A hub update for the same
    document applied before that refresh reads the other process's write first; it must
    not be taken in silently (it then reached the hub only at the next periodic catch-up,
    30 s later) — whether the other process made the document (a new week) or not."""
    folder = tmp_path / "bundle-replicas"
    edge = ReplicaSet(folder)
    hub = ReplicaSet(tmp_path / "hub-replicas")
    if made_by == "this node":
        hub.apply(edge.add_entry(entry("e0", device="dev-a", ts=T0)))  # broadcast live
        assert edge.refresh() == []  # its own write: nothing from elsewhere
    ReplicaSet(folder).add_entry(entry("memo1", device="dev-a", ts=T0 + 1))  # yimi memo
    edge.apply(hub.add_entry(entry("h1", device="hub", ts=T0 + 2)))  # the hub's broadcast
    reported = edge.refresh()
    assert reported and all(u.doc == TL for u in reported)
    for update in reported:
        hub.apply(update)
    assert "memo1" in {e.id for e in hub.timeline()}
    assert edge.refresh() == []  # reported once


async def test_a_device_never_sends_the_hubs_seq_documents(tmp_path: Path) -> None:
    """Another process of the bundle (``yimi say``) appends the hub's broadcasts to the shared
    replica files; the edge's refresh reports them like any other process's write, but a
    ``seq`` document is the hub's alone: the hub would refuse it (``rejected.sync_update``)."""
    sent: list[sync_pb2.SyncUpdate] = []

    async def broadcast(update: sync_pb2.SyncUpdate) -> None:
        sent.append(update)

    async def request(_: sync_pb2.SyncRequest) -> sync_pb2.SyncResponse:
        raise AssertionError("no catch-up here")

    device = DeviceReplication(
        ReplicaSet(tmp_path / "r"), broadcast=broadcast, request=request, is_connected=lambda: True
    )
    await device.send(
        [sync_pb2.DocUpdate(doc=SEQ, blob=b"seq"), sync_pb2.DocUpdate(doc=TL, blob=b"tl")]
    )
    assert [[u.doc for u in m.updates] for m in sent] == [[TL]]
    await device.send([sync_pb2.DocUpdate(doc=SEQ, blob=b"seq")])
    assert len(sent) == 1  # nothing left to send: no message at all


@pytest.mark.parametrize("how", ["failed", "too large"])
async def test_a_hub_change_that_did_not_go_live_is_followed_by_a_hello(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The hub's broadcast failed (twice: the hello is retried with backoff too), or its
    change was too large to go live: the hub then broadcasts its hello, and a device that
    takes it catches up at once, not at its next (here 600 s) interval."""
    monkeypatch.setenv(CATCHUP_ENV, "600")
    store = HubStore(tmp_path / "hub.db")
    replicas = ReplicaSet(tmp_path / "hub-replicas")
    fails = 2 if how == "failed" else 0
    sent: list[sync_pb2.SyncUpdate] = []
    devices: list[DeviceReplication] = []

    async def broadcast(update: sync_pb2.SyncUpdate) -> None:
        nonlocal fails
        if fails:
            fails -= 1
            raise RuntimeError("publish refused")
        sent.append(update)
        for d in devices:  # what goes out reaches the device
            d.on_hub_update(update)

    hub_sync = HubReplication(replicas, broadcast=broadcast, sequence=store.sequence_entries)

    async def request(req: sync_pb2.SyncRequest) -> sync_pb2.SyncResponse:
        return hub_sync.serve(req, "dev")[0]

    async def no_live(_: sync_pb2.SyncUpdate) -> None:
        return None

    dev = ReplicaSet(tmp_path / "dev-replicas")
    device = DeviceReplication(dev, broadcast=no_live, request=request, is_connected=lambda: True)
    devices.append(device)
    if how == "failed":
        update = replicas.add_entry(entry("h1", device="hub", ts=T0 + 1))
    else:
        many = [
            entry(f"h{i}", device="hub", ts=T0 + 1 + i, text=secrets.token_urlsafe(20_000))
            for i in range(20)
        ]
        update = sync_pb2.DocUpdate(
            doc=TL, blob=replicas.get(TL).change(partial(docs.push_entries, entries=many))
        )
        assert len(update.blob) > MAX_LIVE_BLOB
    try:
        async with hub_sync, device:
            await hub_sync.publish([update])
            await asyncio.wait_for(device.caught_up.wait(), 10)
            assert hub_sync.hellos == 1
        assert "h1" in dict(view(dev))
        assert sent == [sync_pb2.SyncUpdate()]  # only the hello went out
    finally:
        store.close()
