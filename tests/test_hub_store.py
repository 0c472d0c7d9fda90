"""The hub's store: one timeline seq, idempotent admission and ACKs, atomic transactions."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from hub.timeline import Chunk, HubStore, ReplayState, StoredReply
from hub.turns.delivery import reply_id_for
from sync.envelope import DropReason, ReplayGuard


@pytest.fixture
def store(tmp_path: Path) -> Iterator[HubStore]:
    s = HubStore(tmp_path / "hub.db")
    yield s
    s.close()


def ingest(
    store: HubStore,
    utterance_id: str,
    device: str = "dev-a",
    text: str = "hello",
    *,
    replay_state: ReplayState | None = None,
) -> tuple[StoredReply, bool]:
    """What admission and delivery write for one utterance answered at once: the utterance
    (with the sender's replay window), then its one-chunk reply."""
    adm = store.admit_utterance(
        utterance_id=utterance_id,
        device=device,
        text=text,
        ts_ms=1000,
        received_ms=2000,
        trace_id=f"trace-{utterance_id}",
        meta={"channel": "mic"},
        replay_state=replay_state,
    )
    if adm.duplicate:
        known = store.reply_for(utterance_id)
        assert known is not None
        return known, True
    rid, words = reply_id_for(utterance_id), f"heard: {text}"
    store.add_chunk(
        Chunk(rid, 0, device, utterance_id, "", words, True, "hub", adm.trace_id, adm.seq)
    )
    reply = store.finish_reply(
        reply_id=rid,
        utterance_id=utterance_id,
        device=device,
        text=words,
        trace_id=adm.trace_id,
        utterance_seq=adm.seq,
        meta={"utterance": utterance_id},
    )
    return reply, False


def test_ingest_assigns_consecutive_seqs(store: HubStore) -> None:
    r1, dup1 = ingest(store, "u1", text="one")
    r2, dup2 = ingest(store, "u2", device="dev-b", text="two")
    assert not dup1 and not dup2
    assert (r1.utterance_seq, r1.reply_seq) == (1, 2)
    assert (r2.utterance_seq, r2.reply_seq) == (3, 4)
    assert (r1.utterance_id, r1.device, r1.text, r1.placeholder, r1.trace_id) == (
        "u1",
        "dev-a",
        "heard: one",
        False,
        "trace-u1",
    )
    entries = store.entries()
    assert [(e.seq, e.kind, e.id) for e in entries] == [
        (1, "utterance", "u1"),
        (2, "reply", r1.id),
        (3, "utterance", "u2"),
        (4, "reply", r2.id),
    ]
    assert entries[0].device == "dev-a" and entries[1].device == "hub"
    assert entries[0].trace_id == entries[1].trace_id == "trace-u1"
    assert [e.seq for e in store.entries(after=2)] == [3, 4]
    assert store.counters()["accepted.utterance"] == 2


def test_same_utterance_twice_returns_the_same_reply(tmp_path: Path) -> None:
    store = HubStore(tmp_path / "hub.db")
    first, dup = ingest(store, "u1")
    again, dup2 = ingest(store, "u1", text="a retry")
    assert not dup and dup2
    assert again == first
    assert len(store.entries()) == 2  # no second reply was made
    assert store.counters()["accepted.duplicate"] == 1
    # and it survives a restart
    store.close()
    reopened = HubStore(tmp_path / "hub.db")
    try:
        third, dup3 = ingest(reopened, "u1")
        assert dup3 and third == first
        assert len(reopened.entries()) == 2
    finally:
        reopened.close()


def test_record_delivery_idempotent(store: HubStore) -> None:
    reply, _ = ingest(store, "u1")
    assert [r.id for r in store.unacked_replies("dev-a")] == [reply.id]
    assert store.record_delivery(reply.id, "dev-a", "rendered", 3000, None) is True
    assert store.record_delivery(reply.id, "dev-a", "rendered", 3001, None) is False
    assert store.unacked_replies("dev-a") == []
    assert store.record_delivery(reply.id, "dev-a", "played", 3002, None) is True
    counters = store.counters()
    assert counters["accepted.ack"] == 2 and counters["accepted.ack_duplicate"] == 1


def test_record_delivery_refuses_another_devices_reply(store: HubStore) -> None:
    reply_a, _ = ingest(store, "u1", device="dev-a")
    assert store.record_delivery(reply_a.id, "dev-b", "rendered", 3000, None) is False
    assert store.record_delivery("no-such-reply", "dev-b", "rendered", 3000, None) is False
    # the owner's own ACK still counts: the refused one left no trace
    assert [r.id for r in store.unacked_replies("dev-a")] == [reply_a.id]
    assert store.record_delivery(reply_a.id, "dev-a", "rendered", 3000, None) is True
    assert store.counters()["rejected.ack_unknown_reply"] == 2


def test_replay_windows_persist(tmp_path: Path) -> None:
    guard = ReplayGuard()
    for c in (7, 3, 9):
        guard.commit("dev-a", c)
    state = guard.state("dev-a")
    assert state is not None
    store = HubStore(tmp_path / "hub.db")
    reply, _ = ingest(store, "u1", replay_state=("dev-a", *state))
    guard.commit("dev-a", 10)
    state10 = guard.state("dev-a")
    assert state10 is not None
    store.record_delivery(reply.id, "dev-a", "rendered", 1, ("dev-a", *state10))
    guard.commit("dev-b", 1)
    state_b = guard.state("dev-b")
    assert state_b is not None
    # a refused ACK still moves the sender's window: its counter was used
    store.record_delivery("unknown", "dev-b", "rendered", 1, ("dev-b", *state_b))
    store.close()

    reopened = HubStore(tmp_path / "hub.db")
    try:
        windows = {w[0]: w for w in reopened.replay_windows()}
    finally:
        reopened.close()
    assert set(windows) == {"dev-a", "dev-b"}
    assert windows["dev-a"] == ("dev-a", *state10)
    restored = ReplayGuard()
    for sender, highest, seen in windows.values():
        restored.restore(sender, highest, seen)
    for c in (3, 7, 9, 10):
        assert restored.check("dev-a", c) == DropReason.REPLAYED
    assert restored.check("dev-a", 8) is None
    assert restored.check("dev-b", 1) == DropReason.REPLAYED


def test_duplicate_still_saves_the_replay_window(store: HubStore) -> None:
    ingest(store, "u1", replay_state=("dev-a", 1, b"\x01"))
    _, dup = ingest(store, "u1", replay_state=("dev-a", 2, b"\x03"))
    assert dup
    assert store.replay_windows() == [("dev-a", 2, b"\x03")]


class Crash(Exception):
    pass


def crash_at_the_end(store: HubStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The power goes after the utterance row was written, before the transaction ends."""

    def crashing(name: str, by: int = 1) -> None:
        raise Crash("power cut inside the transaction")

    monkeypatch.setattr(store, "_bump", crashing)


def test_crash_inside_ingestion_leaves_nothing_half_written(
    store: HubStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest(store, "u0")
    before = (store.entries(), store.counters(), store.replay_windows())
    with monkeypatch.context() as m:
        crash_at_the_end(store, m)
        with pytest.raises(Crash):
            ingest(store, "u1", replay_state=("dev-a", 5, b"\x01"))
    assert (store.entries(), store.counters(), store.replay_windows()) == before
    assert len(store.unacked_replies("dev-a")) == 1
    # the retry goes through as if the crash never happened, with the next seqs
    reply, dup = ingest(store, "u1", replay_state=("dev-a", 5, b"\x01"))
    assert not dup
    assert (reply.utterance_seq, reply.reply_seq) == (3, 4)
    assert store.replay_windows() == [("dev-a", 5, b"\x01")]


def test_crash_is_not_visible_to_another_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, reader = HubStore(tmp_path / "hub.db"), HubStore(tmp_path / "hub.db")
    try:
        with monkeypatch.context() as m:
            crash_at_the_end(writer, m)
            with pytest.raises(Crash):
                ingest(writer, "u1")
        assert reader.entries() == [] and reader.counters() == {}
        # the writer is still usable afterwards
        ingest(writer, "u1")
        assert [e.kind for e in reader.entries()] == ["utterance", "reply"]
    finally:
        writer.close()
        reader.close()


def test_a_final_chunk_and_its_reply_are_kept_in_one_transaction(store: HubStore) -> None:
    """keep_chunk: a chunk, and with the final one the whole reply (one commit for both:
    no moment where the final chunk is kept but its reply is not on the timeline)."""
    adm = store.admit_utterance(
        utterance_id="u1", device="dev-a", text="tell me", ts_ms=1000, received_ms=2000,
        trace_id="trace-u1", meta={"channel": "mic"}, replay_state=None,
    )  # fmt: skip
    rid = reply_id_for("u1")

    def chunk(i: int, text: str, final: bool) -> Chunk:
        return Chunk(rid, i, "dev-a", "u1", "task-1", text, final, "llm", "trace-u1", adm.seq)

    commits: list[int] = []

    def committed() -> bool:
        commits.append(1)
        return False  # go on with the commit

    store.conn.set_commit_hook(committed)
    first, none = store.keep_chunk(chunk(0, "It is", False), [])
    assert none is None and first.text == "It is" and first.reply_seq == 0
    again, _ = store.keep_chunk(chunk(0, "It was", False), [])  # made again: kept once
    assert again.text == "It is"
    last, reply = store.keep_chunk(chunk(1, "sunny.", True), None, intent="YimiWeather")
    store.conn.set_commit_hook(None)
    assert commits == [1, 1, 1]
    assert reply is not None and reply.text == "It is sunny." and reply.reply_seq > adm.seq
    assert last.final and last.reply_seq == reply.reply_seq
    assert [c.text for c in store.chunks(rid)] == ["It is", "sunny."]
    assert store.reply_for("u1") == reply
    entry = next(e for e in store.entries() if e.id == rid)
    assert (entry.kind, entry.text) == ("reply", "It is sunny.")
    # the reply again (a restart): the same reply, nothing added
    _, twice = store.keep_chunk(chunk(1, "rainy.", True), ["It is"])
    assert twice is not None and twice.reply_seq == reply.reply_seq
    assert [e.id for e in store.entries()].count(rid) == 1


def test_a_turns_writes_read_back_only_what_they_do_not_know(store: HubStore) -> None:
    """The hub's part of a typed turn in ``hub.db`` — admit, two chunks made together, their
    two ACKs — reads no row it has just written: the admitted utterance is the row it
    inserted, a chunk new to the store is the chunk given, and a chunk's first ACK from its
    device is one update (statements counted; every answer checked against a read)."""
    statements: list[str] = []

    def traced(_cursor: object, sql: str, _bindings: object) -> bool:
        statements.append(" ".join(sql.split()[:3]))
        return True

    store.conn.exec_trace = traced
    adm = store.admit_utterance(
        utterance_id="u1", device="dev-a", text="bench trip 1", ts_ms=1000, received_ms=2000,
        trace_id="t-u1", meta={"channel": ("typed",)}, replay_state=None,
    )  # fmt: skip
    rid = reply_id_for("u1")
    made = [
        Chunk(rid, i, "dev-a", "u1", "task-1", f"part {i}.", i == 1, "rules", "t-u1", adm.seq)
        for i in range(2)
    ]
    kept, reply = store.keep_chunks(made, [])
    acks = [store.record_chunk_delivery(rid, "dev-a", "rendered", 3000, None, i) for i in (0, 1)]
    store.conn.exec_trace = None
    assert not [s for s in statements if s.startswith("SELECT") and "timeline" in s], statements
    assert not any(s.startswith("SELECT device, task_id, acked") for s in statements)
    assert sum(s.startswith("SELECT c.reply_id") for s in statements) == 0
    # what was handed back is what a read gives
    again = store.admitted("u1")
    assert again is not None and (adm.seq, adm.meta) == (again.seq, again.meta)
    assert adm.meta == {"channel": ["typed"]}
    read = store.chunks(rid)
    unacked = [
        dataclasses.replace(c, acked=None, reply_seq=k.reply_seq)
        for c, k in zip(read, kept, strict=True)
    ]
    assert unacked == kept and len(kept) == 2
    assert reply is not None and kept[-1].reply_seq == reply.reply_seq == read[-1].reply_seq
    assert [(a.fresh, a.complete) for a in acks] == [(True, False), (True, True)]
    assert acks[1].text == "part 0. part 1."
