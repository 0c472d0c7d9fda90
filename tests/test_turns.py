"""Turn bookkeeping on the hub, without a mesh: reply chunks and their ACKs, admitted turns
left unanswered, the scope of typed text, the context a scope may read, the address book."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hub.timeline import Admitted, Chunk, HubStore
from hub.turns.admission import Admission, AudioFacts, TurnMeta, VoiceFacts, typed_scope
from hub.turns.context import ContextSources, FileContacts
from hub.turns.delivery import reply_id_for
from protos import mesh_pb2, voice_pb2
from sync.envelope import Opened


@pytest.fixture
def store(tmp_path: Path) -> Iterator[HubStore]:
    s = HubStore(tmp_path / "hub.db")
    yield s
    s.close()


def admit(store: HubStore, uid: str, device: str = "dev-a", text: str = "hi") -> Any:
    return store.admit_utterance(
        utterance_id=uid,
        device=device,
        text=text,
        ts_ms=1000,
        received_ms=2000,
        trace_id=f"t-{uid}",
        meta={"scope": "owner", "admitted": True},
        replay_state=None,
    )


def chunk(uid: str, index: int, final: bool, device: str = "dev-a", seq: int = 1) -> Chunk:
    return Chunk(
        reply_id_for(uid),
        index,
        device,
        uid,
        uid,
        f"part {index}.",
        final,
        "rule-based",
        f"t-{uid}",
        seq,
    )


def test_admission_is_idempotent_and_unanswered_turns_are_found(store: HubStore) -> None:
    a = admit(store, "u1")
    assert (a.seq, a.duplicate, a.meta["scope"]) == (1, False, "owner")
    again = admit(store, "u1", text="changed")
    assert (again.seq, again.duplicate, again.text) == (1, True, "hi")
    admit(store, "u2")
    assert [x.utterance_id for x in store.unanswered(since_ms=0)] == ["u1", "u2"]
    store.finish_reply(
        reply_id=reply_id_for("u1"),
        utterance_id="u1",
        device="dev-a",
        text="done",
        trace_id="t-u1",
        utterance_seq=1,
        meta={},
    )
    assert [x.utterance_id for x in store.unanswered(since_ms=0)] == ["u2"]
    assert store.unanswered(since_ms=10_000) == []  # older than the window


def test_a_reply_is_delivered_once_every_chunk_is_acked(store: HubStore) -> None:
    admit(store, "u1")
    rid = reply_id_for("u1")
    store.add_chunk(chunk("u1", 0, False))
    store.add_chunk(chunk("u1", 0, False))  # made again after a restart: kept once
    store.add_chunk(chunk("u1", 1, True))
    assert [(c.index, c.final) for c in store.unacked_chunks("dev-a")] == [(0, False), (1, True)]
    # another device cannot ACK it
    assert not store.record_chunk_delivery(rid, "dev-b", "rendered", 5, None, 0).fresh
    got = store.record_chunk_delivery(rid, "dev-a", "rendered", 5, None, 1)
    assert (got.fresh, got.complete) == (True, False)  # chunk 0 still unACKed
    assert not store.record_chunk_delivery(rid, "dev-a", "rendered", 6, None, 1).fresh
    got = store.record_chunk_delivery(rid, "dev-a", "rendered", 7, None, 0)
    assert (got.fresh, got.complete, got.task_id, got.text) == (True, True, "u1", "part 0. part 1.")
    assert store.unacked_chunks("dev-a") == []
    # spoken after it was shown: the stronger state is kept and recorded as a delivery too
    got = store.record_chunk_delivery(rid, "dev-a", "played", 8, None, 0)
    assert (got.fresh, got.complete) == (True, True)
    assert not store.record_chunk_delivery(rid, "dev-a", "rendered", 9, None, 0).fresh
    rows = store.conn.execute("SELECT state FROM deliveries ORDER BY at_ms").fetchall()
    assert [r[0] for r in rows] == ["rendered", "played"]
    counters = store.counters()
    assert counters["accepted.ack"] == 2 and counters["rejected.ack_unknown_reply"] == 1


def test_one_ack_of_several_chunks_delivers_the_reply_in_one_transaction(
    store: HubStore,
) -> None:
    admit(store, "u1")
    rid = reply_id_for("u1")
    for i in range(3):
        store.add_chunk(chunk("u1", i, i == 2))
    commits: list[int] = []

    def committed() -> bool:
        commits.append(1)
        return False  # the commit goes ahead

    store.conn.set_commit_hook(committed)
    # another device's ACK of the same chunks changes nothing
    got = store.record_chunks_delivery(rid, "dev-b", "rendered", 5, ("dev-b", 7, b"w"), (2, 0))
    assert (got.fresh, got.complete) == (False, False)
    assert store.replay_windows() == [("dev-b", 7, b"w")], "its counter is kept all the same"
    got = store.record_chunks_delivery(rid, "dev-a", "rendered", 6, None, (2, 0))
    assert (got.fresh, got.complete, got.task_id) == (True, False, "u1"), "chunk 1 not ACKed"
    assert [c.index for c in store.unacked_chunks("dev-a")] == [1]
    # chunk 1 with copies of the others: delivered, once
    got = store.record_chunks_delivery(rid, "dev-a", "rendered", 7, None, (1, 0, 2))
    assert (got.fresh, got.complete, got.text) == (True, True, "part 0. part 1. part 2.")
    again = store.record_chunks_delivery(rid, "dev-a", "rendered", 8, None, (2, 1, 0))
    assert (again.fresh, again.complete, again.task_id) == (False, False, "u1")
    # all spoken now, in one ACK: the stronger state for every chunk, one more delivery
    got = store.record_chunks_delivery(rid, "dev-a", "played", 9, None, (2, 0, 1))
    assert (got.fresh, got.complete) == (True, True)
    acked = store.conn.execute("SELECT idx, acked, acked_ms FROM reply_chunks ORDER BY idx")
    assert [tuple(r) for r in acked] == [(0, "played", 6), (1, "played", 7), (2, "played", 6)]
    rows = store.conn.execute("SELECT state, at_ms FROM deliveries ORDER BY at_ms").fetchall()
    assert [tuple(r) for r in rows] == [("rendered", 7), ("played", 9)]
    counters = store.counters()
    assert counters["accepted.ack"] == 2
    # every chunk ACKed fresh but the one that completes it: 0 and 2, then 0 and 1 played
    assert counters["accepted.ack_chunk"] == 4
    assert counters["accepted.ack_duplicate"] == 5  # 0 and 2 with 1, then all three
    assert counters["rejected.ack_unknown_reply"] == 2  # dev-b's two
    assert len(commits) == 5, "one transaction per ACK"


ACKS = st.lists(
    st.tuples(
        st.sampled_from(["dev-a", "dev-b"]),
        st.sampled_from(["rendered", "played"]),
        st.lists(st.integers(0, 5), min_size=1, max_size=8),
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(acks=ACKS)
def test_any_acks_of_any_chunks_deliver_a_reply_exactly_when_its_device_acked_all(
    tmp_path_factory: pytest.TempPathFactory, acks: list[tuple[str, str, list[int]]]
) -> None:
    """ACKs of chunks in any order, any grouping, with copies, unknown chunks (3-5) and
    another device's: nothing raises, a chunk counts only from its own device, and the
    reply is delivered in a state once every one of its 3 chunks was ACKed in it (or
    spoken after it was shown)."""
    s = HubStore(tmp_path_factory.mktemp("acks") / "hub.db")
    try:
        admit(s, "u1")
        rid = reply_id_for("u1")
        for i in range(3):
            s.add_chunk(chunk("u1", i, i == 2))
        acked: dict[int, str] = {}
        for at, (device, state, chunks) in enumerate(acks):
            got = s.record_chunks_delivery(rid, device, state, at, None, chunks)
            if device != "dev-a" or not any(c < 3 for c in chunks):
                assert not got.fresh and not got.complete
                continue
            for c in chunks:
                if c < 3 and acked.get(c) != "played":
                    acked[c] = state
            assert got.task_id == "u1"
        assert {c.index for c in s.unacked_chunks("dev-a")} == {0, 1, 2} - set(acked)
        delivered = {str(r[0]) for r in s.conn.execute("SELECT state FROM deliveries")}
        assert ("rendered" in delivered or "played" in delivered) == (len(acked) == 3)
        rows = s.conn.execute("SELECT idx, acked FROM reply_chunks ORDER BY idx").fetchall()
        assert {r[0]: r[1] for r in rows if r[1]} == acked
    finally:
        s.close()


def test_a_reply_without_its_final_chunk_is_not_delivered(store: HubStore) -> None:
    admit(store, "u1")
    store.add_chunk(chunk("u1", 0, False))
    got = store.record_chunk_delivery(reply_id_for("u1"), "dev-a", "played", 5, None, 0)
    assert (got.fresh, got.complete) == (True, False)


def test_activity_entries_are_idempotent(store: HubStore) -> None:
    seq, fresh = store.append_entry(
        "act-1", device="hub", kind="activity", text="x — done", ts_ms=5, trace_id="t", meta={}
    )
    assert fresh and (seq, False) == store.append_entry(
        "act-1", device="hub", kind="activity", text="other", ts_ms=6, trace_id="t", meta={}
    )
    assert [e.kind for e in store.entries_since(0)] == ["activity"]


def test_typed_text_is_the_owners_only_from_a_device_that_may_utter() -> None:
    assert typed_scope(("utter", "ack")) == "owner"
    assert typed_scope(("timeline.read", "timeline.write", "notes.write")) is None


def test_only_the_owner_reads_context(tmp_path: Path) -> None:
    turns = ContextSources(tmp_path, None, list)
    assert [s.name for s in turns.sources("owner", "u1")] == [
        "profile",
        "notes",
        "timeline",
        "timezone",
        "health",
    ]  # recall ("assertions") comes with the memory store: tests/test_timeline_recall.py
    assert turns.sources("owner_uncertain", "u1") == []
    assert turns.sources("guest", "u1") == []


async def test_notes_are_found_by_what_names_them_not_by_the_word_note(tmp_path: Path) -> None:
    from sync.documents import Note

    notes = [
        Note("n1", "Meeting notes: ship on Friday", "note", False, False, 1, "mac"),
        Note("n2", "Shopping: milk", "note", False, False, 2, "mac"),
    ]
    turns = ContextSources(tmp_path, None, lambda: notes)
    source = next(s for s in turns.sources("owner", "u1") if s.name == "notes")
    for asked in ("the meeting notes", "the meeting notice", "the meeting minutes"):
        found = await source.fetch(asked)  # Whisper base hears "notes" as "notice"
        assert [x.text for x in found] == ["Meeting notes: ship on Friday"], asked
    assert await source.fetch("the budget notes") == []


def test_the_address_book_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "contacts.yaml"
    book = FileContacts(path)
    assert book.find("my colleague") is None  # no file yet
    path.write_text(
        yaml.safe_dump(
            [{"name": "Dana Lee", "email": "dana@example.org", "aliases": ["colleague"]}]
        )
    )
    found = book.find("my colleague")
    assert found is not None and found.email == "dana@example.org"
    path.write_text(yaml.safe_dump([{"name": "Ann Bo", "email": "ann@example.org"}]))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert book.find("my colleague") is None and book.find("Ann") is not None
    path.write_text("not: [a list")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000))
    assert book.find("Ann") is None  # a broken file is an empty book (and logged)
    assert book.all() == []


async def test_the_timeline_source_reads_today_yesterday_or_last_week(
    tmp_path: Path, store: HubStore
) -> None:
    import datetime as dt

    midnight = dt.datetime.combine(dt.date.today(), dt.time())
    for name, when in (
        ("today", midnight + dt.timedelta(minutes=1)),
        ("yesterday", midnight - dt.timedelta(hours=2)),
        ("three days ago", midnight - dt.timedelta(days=3)),
        ("a month ago", midnight - dt.timedelta(days=30)),
    ):
        ts = int(when.timestamp() * 1000)
        store.append_entry(
            f"e-{ts}", device="d", kind="utterance", text=name, ts_ms=ts, trace_id="t", meta={}
        )
    (timeline,) = [
        s
        for s in ContextSources(tmp_path, store, list).sources("owner", "u")
        if s.name == "timeline"
    ]

    async def texts(query: str) -> list[str]:
        return [
            x.text.split(" ", 1 if query != "last_week" else 2)[-1]
            for x in await timeline.fetch(query)
        ]

    assert await texts("today") == ["today"]
    assert await texts("what's on my timeline") == ["today"]  # anything else: today
    assert await texts("yesterday") == ["yesterday"]
    assert await texts("last_week") == ["yesterday", "three days ago"]


def test_turn_meta_is_stored_as_the_json_it_always_was() -> None:
    """The timeline's ``meta`` keys (read by the demo, benches, payments) stay as they were;
    a stored row reads back as the same record, and old rows read with defaults."""
    typed = TurnMeta(channel="mic", counter=7, scope="owner", scope_reason="typed_on_owner_device")
    assert typed.to_json() == {
        "channel": "mic",
        "source": "typed",
        "counter": 7,
        "scope": "owner",
        "scope_reason": "typed_on_owner_device",
    }
    voice = VoiceFacts("verified", 0.8, 900, None, -20.0, "wake", "w1", 0.7, "c1", "ecapa")
    audio = AudioFacts("ab" * 32, 1234, 900, {"stored": True, "id": "o1"}, 12.5, "Yimi, hi")
    heard = TurnMeta(
        channel="glasses",
        source="voice",
        counter=3,
        scope="owner",
        scope_reason="verified",
        scope_score=0.81,
        admitted=True,
        voice=voice,
        audio=audio,
        asr_model="faster-whisper:x",
    )
    raw = heard.to_json()
    assert raw["quality"] is None and raw["audio_sha256"] == "ab" * 32 and raw["admitted"] is True
    assert {"verdict", "wake_id", "call_id", "transcript", "asr_ms", "scope_score"} <= set(raw)
    assert TurnMeta.from_json(raw) == heard and TurnMeta.from_json(typed.to_json()) == typed
    failed = TurnMeta(source="voice", voice=voice, error="voice_audio.refused", error_text="no")
    assert TurnMeta.from_json(failed.to_json()) == failed
    assert TurnMeta.from_json({"scope": "owner", "admitted": True}).scope == "owner"
    assert TurnMeta.from_json({}) == TurnMeta()


@dataclass
class Queue:
    """Answering's side of admission, recorded."""

    queued: list[tuple[str, bool]] = field(default_factory=list)
    repeats: list[str] = field(default_factory=list)

    async def repeat(self, adm: Admitted, sender: str) -> None:
        self.repeats.append(adm.utterance_id)

    def enqueue(self, adm: Admitted, raw: bytes | None) -> None:
        self.queued.append((adm.utterance_id, raw is not None))


async def test_typed_and_unusable_voice_utterances_pass_the_one_admission(
    store: HubStore,
) -> None:
    queue, counts = Queue(), Counter[str]()
    published: list[str] = []
    committed: list[int] = []

    def hold(entries: list[Any]) -> None:
        published.extend(e.id for e in entries)

    def commit(o: Opened) -> tuple[str, int, bytes]:
        committed.append(o.counter)
        return (o.sender, o.counter, b"\x01")

    admission = Admission(
        store, turns=queue, hold=hold, commit=commit, count=lambda name: counts.update([name])
    )

    def opened(utt: mesh_pb2.Utterance, counter: int) -> Opened:
        return Opened("dev-a", counter, 5, mesh_pb2.UTTERANCE, "hub", "t", utt)

    typed = mesh_pb2.Utterance(id="u1", text="add milk", channel="mic")
    await admission.typed(opened(typed, 1), ("timeline.read",))  # no 'utter'
    assert counts == {"rejected.no_utter_scope": 1} and store.entries() == []
    await admission.typed(opened(typed, 2), ("utter",))
    await admission.typed(opened(typed, 3), ("utter",))  # the device's retry
    assert queue.queued == [("u1", True)] and queue.repeats == ["u1"] and published == ["u1"]
    meta = TurnMeta.from_json(store.admitted("u1").meta)  # type: ignore[union-attr]
    assert (meta.scope, meta.scope_reason, meta.admitted) == (
        "owner",
        "typed_on_owner_device",
        True,
    )

    heard = mesh_pb2.Utterance(id="u2", voice=voice_pb2.VoiceInfo(audio_chunks=1))
    failed = TurnMeta(source="voice", error="voice_audio.refused", error_text="no match")
    await admission.admit(admission.inbound(opened(heard, 4)), "", failed)
    assert queue.queued[-1] == ("u2", False)
    meta = TurnMeta.from_json(store.admitted("u2").meta)  # type: ignore[union-attr]
    assert (meta.error, meta.scope, meta.admitted) == ("voice_audio.refused", "guest", True)
    assert committed == [1, 2, 3, 4] and store.replay_windows() == [("dev-a", 4, b"\x01")]
