"""The hub's sequencing of replicated entries reads only what is new after the first look.

``HubReplication.sequence_new`` used to decode the whole timeline document on every live
update (~20 µs an entry); it now reads the operations added since the document was last
found fully sequenced. These tests hold it to the same result as a full scan.
"""

from __future__ import annotations

import itertools
import random
from functools import partial
from pathlib import Path

import pytest
from loro import ExportMode, LoroDoc, VersionVector

from protos import sync_pb2
from sync import documents as docs
from sync.replicas import ReplicaSet
from sync.replication import HubReplication

PERIOD = "2026-W48"
T0 = docs.period_start_ms(PERIOD) + 3_600_000
TL = docs.timeline_doc(PERIOD)
SEQ = docs.seq_doc(PERIOD)


async def _no_broadcast(update: sync_pb2.SyncUpdate) -> None:
    return None


def entry(eid: str, device: str, ts: int = T0) -> docs.Entry:
    return docs.make_entry(entry_id=eid, device=device, kind="memo", text=f"t {eid}", ts_ms=ts)


class Counter:
    def __init__(self) -> None:
        self.next = itertools.count(1)
        self.given: dict[str, int] = {}

    def __call__(self, entries: list[docs.Entry], sender: str) -> dict[str, int]:
        for e in entries:
            self.given.setdefault(e.id, next(self.next))
        return {e.id: self.given[e.id] for e in entries}


def hub(tmp_path: Path) -> tuple[HubReplication, ReplicaSet]:
    replicas = ReplicaSet(tmp_path / "hub")
    return HubReplication(replicas, broadcast=_no_broadcast, sequence=Counter()), replicas


def all_sequenced(replicas: ReplicaSet) -> bool:
    seqs = docs.seqs_of(replicas.get(SEQ).doc)
    return all(e.id in seqs for e in docs.entries_of(replicas.get(TL).doc))


def test_live_updates_are_sequenced_without_reading_the_whole_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync, replicas = hub(tmp_path)
    rng = random.Random(5)
    devices = [LoroDoc() for _ in range(3)]
    scans = 0
    real_entries_of = docs.entries_of

    def counting(doc: LoroDoc) -> list[docs.Entry]:
        nonlocal scans
        scans += 1
        return real_entries_of(doc)

    monkeypatch.setattr(docs, "entries_of", counting)
    for i in range(60):
        dev = rng.choice(devices)
        if rng.random() < 0.7:  # online: up to date before writing; else offline, concurrent
            dev.import_(replicas.get(TL).doc.export(ExportMode.Updates(dev.oplog_vv)))
        before = dev.oplog_vv
        for _ in range(rng.randint(1, 3)):
            eid = f"e{rng.randint(0, 80)}"  # duplicates on purpose
            dev.get_list("entries").push(entry(eid, f"d{devices.index(dev)}", T0 + i).as_value())
        dev.commit()
        blob = bytes(dev.export(ExportMode.Updates(before)))
        _, refused = sync.apply_from_device([sync_pb2.DocUpdate(doc=TL, blob=blob)], "d")
        assert not refused
        assert all_sequenced(replicas)
        if i == 30:  # the hub writes an entry itself without sequencing it
            replicas.get(TL).change(partial(docs.push_entries, entries=[entry("hub-1", "hub")]))
    seqs = docs.seqs_of(replicas.get(SEQ).doc)
    assert len(set(seqs.values())) == len(seqs)  # one number per id
    # one scan per update by all_sequenced (the check itself), one by the first sequencing
    assert scans == 60 + 1


def test_text_that_looks_like_a_container_reference_is_still_sequenced(tmp_path: Path) -> None:
    """loro's JSON writes a container as ``🦜:cid:…``: such a text makes the hub read the
    whole document instead of trusting the JSON."""
    sync, replicas = hub(tmp_path)
    dev = LoroDoc()
    for eid, text in (("a", "plain"), ("b", docs.LORO_JSON_CONTAINER + "cid:root-x:Map")):
        before = dev.oplog_vv
        value = entry(eid, "d").as_value() | {"text": text}
        dev.get_list("entries").push(value)
        dev.commit()
        blob = bytes(dev.export(ExportMode.Updates(before)))
        sync.apply_from_device([sync_pb2.DocUpdate(doc=TL, blob=blob)], "d")
    assert docs.entries_added(replicas.get(TL).doc, VersionVector()) is None
    assert set(docs.seqs_of(replicas.get(SEQ).doc)) == {"a", "b"}


def test_entries_added_reads_exactly_the_new_entries() -> None:
    doc = LoroDoc()
    lst = doc.get_list("entries")
    lst.push(entry("old", "d").as_value())
    doc.commit()
    since = doc.oplog_vv
    lst.push(entry("new1", "d").as_value())
    lst.push({"id": "bad", "ts": 1.5})  # malformed: skipped, as entries_of skips it
    lst.insert(0, entry("new2", "d").as_value())
    doc.get_map("other").insert("x", 1)
    doc.commit()
    added = docs.entries_added(doc, since)
    assert added is not None
    assert sorted(e.id for e in added) == ["new1", "new2"]
    assert {e.id: e for e in added} == {
        e.id: e for e in docs.entries_of(doc) if e.id in ("new1", "new2")
    }
