"""Recall over the timeline (issue 22): L4 entries in the recall index beside L3 assertions,
time phrases in English and Chinese narrowing the search."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from hub.memory.assertions import AssertionStore
from hub.memory.index import Entry, MemoryIndex
from hub.memory.period import past_period
from hub.memory.timeline_recall import (
    TimelineIndexer,
    TimelineText,
    cursor_path,
    dated,
    read_timeline,
    recall,
    timeline_item,
    untold,
)
from hub.timeline import NOT_UNDERSTOOD, HubStore
from models.embed import Embedder, shared_embedder

TZ = dt.timezone(dt.timedelta(hours=8))
NOW = dt.datetime(2026, 12, 3, 15, 0, tzinfo=TZ)
"""a Thursday afternoon"""
NOW_MS = int(NOW.timestamp() * 1000)


def at(days_back: int, hour: int) -> int:
    day = NOW.date() - dt.timedelta(days=days_back)
    return int(dt.datetime.combine(day, dt.time(hour), tzinfo=TZ).timestamp() * 1000)


SAID = [
    # (id, days back, hour, scope, text)
    ("u-mon", 3, 9, "owner", "I booked the dentist for Friday at three, the left molar hurts"),
    ("u-tue", 2, 20, "owner", "我跟牙医约了下周一补牙，记得提醒我别吃太硬的东西"),
    ("u-wed", 1, 8, "owner", "the plumber is coming on Saturday to fix the kitchen sink"),
    ("u-lastwk", 9, 10, "owner", "my sister's flight lands at terminal two next month"),
    ("u-lastwk-zh", 8, 19, "owner", "上周我把护照放在书房抽屉里了"),
    ("u-guest", 1, 12, "guest", "the dentist said the door code is 4321"),
    ("u-q", 0, 14, "owner", "what did I say about the dentist?"),
]


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return shared_embedder()


@pytest.fixture
def home(tmp_path: Path, embedder: Embedder) -> Iterator[tuple[HubStore, MemoryIndex, Path]]:
    store = HubStore(tmp_path / "hub.db")
    for eid, back, hour, scope, text in SAID:
        store.admit_utterance(
            utterance_id=eid,
            device="phone",
            text=text,
            ts_ms=at(back, hour),
            received_ms=at(back, hour),
            trace_id="t",
            meta={"scope": scope},
            replay_state=None,
        )
    store.append_entry(
        "r-mon",
        device="phone",
        kind="reply",
        text="Noted: dentist on Friday at 3 pm.",
        ts_ms=at(3, 9) + 2000,
        trace_id="t",
        meta={},
    )
    index = MemoryIndex.for_home(tmp_path, embedder=embedder, clock=lambda: NOW_MS)
    yield store, index, tmp_path
    index.close()
    store.close()


def indexer_for(store: HubStore, index: MemoryIndex, home: Path) -> TimelineIndexer:
    return TimelineIndexer(read_timeline(store), index, cursor_path(home), batch=3)


def ids(hits: list) -> list[str]:  # type: ignore[type-arg]
    return [h.item_id for h in hits]


def test_indexer_follows_its_cursor_and_leaves_guests_out(
    home: tuple[HubStore, MemoryIndex, Path],
) -> None:
    store, index, path = home
    indexer = indexer_for(store, index, path)
    assert indexer.catch_up() == len(SAID)  # 7 utterances + 1 reply − 1 guest
    assert timeline_item("u-guest") not in set(index.ids())
    assert indexer.catch_up() == 0  # nothing twice
    store.append_entry(
        "a-1",
        device="hub",
        kind="activity",
        text="Paid the electricity bill",
        ts_ms=NOW_MS,
        trace_id="t",
        meta={},
    )
    store.append_entry(  # a snapshot's reference: vision indexes it as photo:<id> itself
        "photo-ph-1",
        device="hub",
        kind="photo",
        text="photo · 照片 (specs)",
        ts_ms=NOW_MS,
        trace_id="t",
        meta={},
    )
    again = indexer_for(store, index, path)  # a restart reads the cursor back
    assert again.catch_up() == 1
    assert timeline_item("photo-ph-1") not in set(index.ids())
    hit = index.get(timeline_item("a-1"))
    assert hit is not None and hit.sensitivity == "medium"
    assert hit.sources == (("timeline", "a-1"),)
    question = index.get(timeline_item("u-q"))
    assert question is not None and question.importance < 0.2


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("what did I say about the dentist on Monday", "u-mon"),
        ("what did I tell you about the dentist three days ago", "u-mon"),
        ("我周二说的牙医的事", "u-tue"),
        ("前天我跟你说过补牙的什么", "u-tue"),
        ("what did I say yesterday about the sink", "u-wed"),
        ("昨天说的水管工", "u-wed"),
        ("where did I say I put my passport last week", "u-lastwk-zh"),
        ("what did I say about my sister's flight last week", "u-lastwk"),
        ("上周我说护照放哪了", "u-lastwk-zh"),
    ],
)
def test_a_question_about_days_ago_finds_the_timeline_entry(
    home: tuple[HubStore, MemoryIndex, Path], question: str, expected: str
) -> None:
    store, index, path = home
    indexer_for(store, index, path).catch_up()
    found = recall(index, question, 5, now=NOW)
    assert found.period is not None
    assert ids(found.hits)[0] == timeline_item(expected), [h.text for h in found.hits]


def test_time_phrases_narrow_and_l3_fuses_with_l4(
    home: tuple[HubStore, MemoryIndex, Path], tmp_path: Path
) -> None:
    store, index, path = home
    indexer_for(store, index, path).catch_up()
    memory = AssertionStore.open(tmp_path / "memory.db", index=index, clock=lambda: at(20, 9))
    fact = memory.commit(None, 0, subject="owner", predicate="health.dentist", value="Dr. Lin")
    # no time phrase: the fact and what was said about the dentist, fused by rank
    both = ids(recall(index, "the dentist", 5, now=NOW).hits)
    assert f"assertion:{fact.id}" in both and timeline_item("u-mon") in both
    # "yesterday" holds nothing about the dentist from the owner: Monday's entry is out
    yesterday = recall(index, "what did I say about the dentist yesterday", 5, now=NOW)
    assert timeline_item("u-mon") not in ids(yesterday.hits)
    assert f"assertion:{fact.id}" not in ids(yesterday.hits)  # made 20 days ago
    assert all(at(1, 0) <= h.created_ms < at(0, 0) for h in yesterday.hits)
    # today: the question itself can be hidden by the caller
    today = recall(
        index, "what did I say today about the dentist", 5, now=NOW, hide={timeline_item("u-q")}
    )
    assert timeline_item("u-q") not in ids(today.hits)
    monday = recall(index, "what did I say on Monday about the dentist", 5, now=NOW).hits
    assert dated(monday[0], TZ).startswith("2026-11-30 Mon 09:00 I booked the dentist")
    memory.close()


@pytest.mark.parametrize(
    ("phrase", "start", "end", "rest"),
    [
        ("what did I say yesterday", (12, 2), (12, 3), "what did I say"),
        ("the day before yesterday", (12, 1), (12, 2), ""),
        (
            "what did I say on Tuesday about the dentist",
            (12, 1),
            (12, 2),
            "what did I say about the dentist",
        ),
        ("what did I say on Thursday", (11, 26), (11, 27), "what did I say"),
        ("last week", (11, 23), (11, 30), ""),
        ("2 days ago", (12, 1), (12, 2), ""),
        ("last month", (11, 1), (12, 1), ""),
        ("last weekend", (11, 28), (11, 30), ""),
        ("昨天的牙医", (12, 2), (12, 3), "的牙医"),
        ("上周", (11, 23), (11, 30), ""),
        ("周二我说了什么", (12, 1), (12, 2), "我说了什么"),
        ("上周二", (11, 24), (11, 25), ""),
        ("星期四说的", (11, 26), (11, 27), "说的"),
        ("三天前", (11, 30), (12, 1), ""),
        ("上个月", (11, 1), (12, 1), ""),
    ],
)
def test_time_phrases_in_both_languages(
    phrase: str, start: tuple[int, int], end: tuple[int, int], rest: str
) -> None:
    p = past_period(phrase, NOW)
    assert p is not None
    assert (p.start.month, p.start.day) == start and p.start.hour == 0
    assert (p.end.month, p.end.day) == end
    assert p.rest == rest


def test_no_time_phrase_no_narrowing() -> None:
    assert past_period("what did I say about the dentist", NOW) is None
    assert past_period("我说过牙医的什么", NOW) is None
    today = past_period("what did I say today", NOW)
    assert today is not None and today.end == NOW
    # a weekday or "this week" without a past verb is a habit or a plan, not a memory
    assert past_period("what class is on Tuesday", NOW) is None
    assert past_period("孩子周末有什么课？", NOW) is None
    assert past_period("这周购物要带什么？", NOW) is None
    assert past_period("上周末", NOW) is not None


async def test_call_time_context_wires_all_six_sources(tmp_path: Path, embedder: Embedder) -> None:
    """Profile, notes, recall (L3 + timeline), today's timeline, time zone, health: each
    answered within its 1,200 ms, the block within 2,400 characters; a question about
    yesterday gets what was said yesterday."""
    from hub.memory.context import BUDGET_CHARS, short_context
    from hub.memory.home import open_memory
    from hub.turns.context import ContextSources
    from sync.documents import Note

    store = HubStore(tmp_path / "hub.db")
    index = MemoryIndex.for_home(tmp_path, embedder=embedder)
    memory = open_memory(tmp_path, index=index)
    memory.commit(None, 0, subject="owner", predicate="health.allergy", value="penicillin")
    memory.commit(
        None, 0, subject="owner", predicate="core_profile.entry", value="I live in Hangzhou"
    )
    now = dt.datetime.now().astimezone()
    yesterday = now - dt.timedelta(days=1)
    for eid, when, text in (
        ("u-y", yesterday.replace(hour=10), "the dentist moved my filling to next Wednesday"),
        ("u-now", now, "what did I say yesterday about the dentist?"),
    ):
        store.admit_utterance(
            utterance_id=eid,
            device="phone",
            text=text,
            ts_ms=int(when.timestamp() * 1000),
            received_ms=int(when.timestamp() * 1000),
            trace_id="t",
            meta={"scope": "owner"},
            replay_state=None,
        )
    indexer_for(store, index, tmp_path).catch_up()
    notes = [Note("n-1", "buy floss", "shopping", False, False, 0, "phone")]
    sources = ContextSources(tmp_path, store, lambda: notes, memory).sources("owner", "u-now")
    assert [s.name for s in sources] == [
        "profile",
        "notes",
        "assertions",
        "timeline",
        "timezone",
        "health",
    ]
    ctx = await short_context("what did I say yesterday about the dentist?", sources)
    assert not ctx.dropped, ctx.dropped
    assert set(ctx.included) >= {"profile", "assertions", "timezone", "health"}
    assert len(ctx.text) <= BUDGET_CHARS
    recalled = [line for line in ctx.lines if line.startswith("[assertions]")]
    assert "filling to next Wednesday" in recalled[0]
    assert not any("what did I say" in line for line in recalled)  # the question itself
    assert any("penicillin" in line for line in ctx.lines if line.startswith("[health]"))
    assert ("timeline", "u-y") in ctx.sources
    # the local time as the context is read (the source is listed per turn, read only here)
    (local,) = [line for line in ctx.lines if line.startswith("[timezone]")]
    assert re.search(r"Local time \d{4}-\d\d-\d\d \d\d:\d\d \(", local), local
    memory.close()
    store.close()


def test_untold_leaves_questions_and_replies_out_and_they_crowd_nothing_out(
    home: tuple[HubStore, MemoryIndex, Path],
) -> None:
    """The dentist's Monday entry is found by what the owner told; the question about it
    ("what did I say about the dentist?"), the hub's reply and any utterance the brain
    understood as a recall question are left out of a ``told_only`` search, and being
    left out they take no place in the k found (an item further down comes up instead)."""
    store, index, path = home
    store.admit_utterance(
        utterance_id="u-ask",
        device="phone",
        text="Yimi tell me everything about the dentist",  # not phrased as a question
        ts_ms=at(0, 13),
        received_ms=at(0, 13),
        trace_id="t2",
        meta={"scope": "owner"},
        replay_state=None,
    )
    store.finish_reply(
        reply_id="r-ask",
        utterance_id="u-ask",
        device="phone",
        text="About the dentist I remember: the left molar hurts.",
        trace_id="t2",
        utterance_seq=0,
        meta={},
        intent="YimiRecall",
    )
    assert store.admitted("u-ask").meta["intent"] == "YimiRecall"  # type: ignore[union-attr]
    indexer_for(store, index, path).catch_up()
    asked = {timeline_item(x) for x in ("u-q", "u-ask", "r-ask", "r-mon")}
    everything = ids(recall(index, "the dentist", 3, now=NOW, include_stale=True).hits)
    assert asked & set(everything)  # without the filter they crowd the answer
    skip = untold(path / "hub.db")
    found = ids(recall(index, "the dentist", 3, now=NOW, include_stale=True, skip=skip).hits)
    assert not asked & set(found), found
    assert found[0] == timeline_item("u-mon") and len(found) == 3
    hidden = ids(
        recall(
            index, "the dentist", 3, now=NOW, include_stale=True, skip=skip, hide=[found[0]]
        ).hits
    )
    assert found[0] not in hidden and not asked & set(hidden) and len(hidden) == 3
    assert untold(path / "missing.db")([timeline_item("u-q")]) == set()


def test_the_answer_to_a_request_not_understood_stays_out_of_the_index(
    home: tuple[HubStore, MemoryIndex, Path],
) -> None:
    """The rule brain's "I heard: …. I can't do that yet — here is what I can do: …" is the
    request heard back and the same list every time: the request is indexed, its answer
    not (and the utterance records no intent); an understood answer is indexed."""
    store, index, path = home
    for rid, uid, text, intent in (
        (
            "r-wed",
            "u-wed",
            "I heard: the plumber is coming. I can't do that yet — here is "
            "what I can do: remember and recall things, e-mail a contact.",
            NOT_UNDERSTOOD,
        ),
        (
            "r-tue",
            "u-tue",
            "这个我还做不到。我能做的有：记住和回想事情、给联系人发邮件。",
            NOT_UNDERSTOOD,
        ),
        ("r-q", "u-q", "About the dentist I remember: Friday at three.", "YimiRecall"),
    ):
        store.finish_reply(
            reply_id=rid,
            utterance_id=uid,
            device="phone",
            text=text,
            trace_id="t",
            utterance_seq=0,
            meta={},
            intent=intent,
        )
    indexer_for(store, index, path).catch_up()
    indexed = set(index.ids())
    assert {timeline_item(u) for u in ("u-wed", "u-tue", "u-q", "r-q")} <= indexed
    assert not {timeline_item("r-wed"), timeline_item("r-tue")} & indexed
    for uid in ("u-wed", "u-tue"):
        assert "intent" not in store.admitted(uid).meta  # type: ignore[union-attr]
    assert store.admitted("u-q").meta["intent"] == "YimiRecall"  # type: ignore[union-attr]
    replies = {m.entry.id: m.intent for m in store.entries_with_meta() if m.entry.kind == "reply"}
    assert replies == {
        "r-mon": "",
        "r-wed": NOT_UNDERSTOOD,
        "r-tue": NOT_UNDERSTOOD,
        "r-q": "YimiRecall",
    }


async def test_the_running_indexer_embeds_each_entry_once(tmp_path: Path) -> None:
    """The indexer the hub runs (``run``, passes on wake) hands each entry to the index once:
    a later pass starts after its cursor, and a pass with nothing new writes nothing (the
    embedding is what the hub's worker threads spend their CPU on)."""
    loop = asyncio.get_running_loop()
    timeline = [TimelineText(s, f"u{s}", "utterance", f"entry {s}", NOW_MS + s) for s in (1, 2, 3)]
    written: list[str] = []
    caught_up: asyncio.Queue[int] = asyncio.Queue()

    class Recorder:
        def upsert_many(self, entries: Sequence[Entry]) -> None:  # runs in a worker thread
            written.extend(e.item_id for e in entries)

    def read(after: int, limit: int) -> list[TimelineText]:
        rows = [t for t in timeline if t.seq > after][:limit]
        if len(rows) < limit:  # the pass's last read (on the loop)
            caught_up.put_nowait(rows[-1].seq if rows else after)
        return rows

    indexer = TimelineIndexer(read, Recorder(), cursor_path(tmp_path), batch=2)
    wake = asyncio.Event()
    task = loop.create_task(indexer.run(wake, interval_s=3600.0, settle_s=0.0))
    try:
        assert await asyncio.wait_for(caught_up.get(), 30) == 3
        timeline.extend(
            TimelineText(s, f"u{s}", "utterance", f"entry {s}", NOW_MS + s) for s in (4, 5)
        )
        wake.set()
        assert await asyncio.wait_for(caught_up.get(), 30) == 5
        wake.set()  # a pass with nothing new
        assert await asyncio.wait_for(caught_up.get(), 30) == 5
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert written == [timeline_item(f"u{s}") for s in (1, 2, 3, 4, 5)]
    assert indexer.position == 5
