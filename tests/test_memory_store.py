"""L3 assertions: compare-and-swap, idempotent retries, re-evaluation, forgetting for real,
sensitivity inheritance and deletion re-applied after a restore from backup."""

from __future__ import annotations

import multiprocessing
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hub.memory.assertions import AssertionStore
from hub.memory.derived import DerivedStore
from hub.memory.errors import Conflict, MemoryStoreError
from hub.memory.forget import deletion_log_path, reapply_deletions
from hub.memory.index_api import IndexHook
from hub.memory.sensitivity import Source, cloud_eligible, highest


class RecordingIndex:
    """An in-test recall index: remembers what was upserted, removes on request."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[str, object]] = {}
        self.removed_calls: list[list[str]] = []

    def upsert(
        self,
        item_id: str,
        text: str,
        *,
        sensitivity: str,
        sources: list[tuple[str, str]],
        importance: float,
        created_ms: int,
    ) -> None:
        self.entries[item_id] = {"text": text, "sensitivity": sensitivity, "sources": sources}

    def remove(self, item_ids: list[str]) -> list[str]:
        self.removed_calls.append(list(item_ids))
        return [i for i in item_ids if self.entries.pop(i, None) is not None]


def _typed(index: RecordingIndex) -> IndexHook:
    return index  # the Protocol is satisfied structurally


@pytest.fixture
def index() -> RecordingIndex:
    return RecordingIndex()


@pytest.fixture
def store(tmp_path: Path, index: RecordingIndex) -> Iterator[AssertionStore]:
    s = AssertionStore.open(tmp_path / "memory.db", index=_typed(index))
    yield s
    s.close()


def fact(store: AssertionStore, aid: str, value: str, expected: int = 0, **kw: object) -> int:
    kw.setdefault("subject", "owner")
    kw.setdefault("predicate", "food.preference")
    kw.setdefault("sensitivity", "low")
    return store.commit(aid, expected, value=value, **kw).version  # type: ignore[arg-type]


# ---------------------------------------------------------------- compare-and-swap
def test_concurrent_commits_on_same_version_one_wins(store: AssertionStore, tmp_path: Path) -> None:
    fact(store, "pref.tea", "green tea", predicate="drinks")
    for _ in range(5):
        head = store.get("pref.tea").version
        # both writers read the same head and race to write head + 1
        barrier = threading.Barrier(2)
        out: dict[str, object] = {}
        threads = [
            threading.Thread(
                target=_commit_in_thread_at,
                args=(tmp_path / "memory.db", barrier, f"{v} #{head}", head, out),
            )
            for v in ("oolong", "black tea")
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wins = [r for r in out.values() if not isinstance(r, Exception)]
        conflicts = [r for r in out.values() if isinstance(r, Conflict)]
        assert len(wins) == 1 and len(conflicts) == 1, out
        assert conflicts[0].current == head + 1 and conflicts[0].expected == head
        assert "expected version" in str(conflicts[0])
        assert store.get("pref.tea").version == head + 1
    assert [v.version for v in store.history("pref.tea")] == [1, 2, 3, 4, 5, 6]


def _commit_in_thread_at(
    db: Path, barrier: threading.Barrier, value: str, expected: int, out: dict[str, object]
) -> None:
    s = AssertionStore.open(db)
    try:
        barrier.wait()
        try:
            out[value] = s.commit(
                "pref.tea",
                expected,
                subject="owner",
                predicate="drinks",
                value=value,
                sensitivity="low",
            )
        except Conflict as exc:
            out[value] = exc
    finally:
        s.close()


def _process_commit(db: str, value: str, start: object, results: object) -> None:
    s = AssertionStore.open(Path(db))
    start.wait()  # type: ignore[attr-defined]
    try:
        r = s.commit("pref.coffee", 1, subject="owner", predicate="drinks", value=value)
        results.put(("won", r.version))  # type: ignore[attr-defined]
    except Conflict as exc:
        results.put(("conflict", exc.current))  # type: ignore[attr-defined]
    finally:
        s.close()


def test_concurrent_commits_from_two_processes(store: AssertionStore, tmp_path: Path) -> None:
    fact(store, "pref.coffee", "espresso", predicate="drinks")
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_process_commit, args=(str(tmp_path / "memory.db"), v, start, results))
        for v in ("latte", "flat white")
    ]
    for p in procs:
        p.start()
    start.set()
    outcomes = sorted(results.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert outcomes == [("conflict", 2), ("won", 2)]
    assert store.get("pref.coffee").version == 2


def test_conflict_on_create_and_on_stale_version(store: AssertionStore) -> None:
    fact(store, "a", "x")
    with pytest.raises(Conflict) as exc:
        fact(store, "a", "y", expected=0)
    assert exc.value.current == 1
    with pytest.raises(Conflict) as exc2:
        fact(store, "b", "y", expected=3)
    assert exc2.value.current == 0 and exc2.value.status == "absent"


def test_retried_commit_writes_one_version(store: AssertionStore, index: RecordingIndex) -> None:
    first = store.commit(
        "pref.tea", 0, subject="owner", predicate="drinks", value="tea", request_id="req-1"
    )
    again = store.commit(
        "pref.tea", 0, subject="owner", predicate="drinks", value="tea", request_id="req-1"
    )
    assert again == first
    assert [v.version for v in store.history("pref.tea")] == [1]
    # the same request id with other content is refused, not silently merged
    with pytest.raises(MemoryStoreError) as exc:
        store.commit(
            "pref.tea", 0, subject="owner", predicate="drinks", value="coffee", request_id="req-1"
        )
    assert exc.value.key == "memory.request_reused"
    # a new request on the new head works
    assert (
        store.commit(
            "pref.tea", 1, subject="owner", predicate="drinks", value="coffee", request_id="req-2"
        ).version
        == 2
    )
    assert index.entries["assertion:pref.tea"]["text"] == "owner drinks coffee"


# ---------------------------------------------------------------- re-evaluation
def test_upstream_change_marks_dependents_needs_reevaluation(store: AssertionStore) -> None:
    fact(store, "pref.cilantro", "no cilantro")
    store.commit(
        "order.note",
        0,
        subject="order note",
        predicate="note",
        value="no cilantro",
        depends_on=[("pref.cilantro", 1)],
    )
    store.commit(
        "order.summary",
        0,
        subject="order summary",
        predicate="note",
        value="noodles, no cilantro",
        depends_on=[("order.note", 1)],
    )
    unrelated = fact(store, "pref.tea", "green tea")
    assert store.get("order.note").status == "current"

    receipt = store.commit(
        "pref.cilantro",
        1,
        subject="owner",
        predicate="food.preference",
        value="cilantro is fine now",
        sensitivity="low",
    )
    assert set(receipt.marked) == {"order.note", "order.summary"}
    note = store.get("order.note")
    assert note.status == "needs_reevaluation"
    # never negated: the conclusion keeps its value, version and dependency
    assert note.head.value == "no cilantro" and note.version == 1
    assert note.head.depends_on == (("pref.cilantro", 1),)
    assert store.get("order.summary").status == "needs_reevaluation"
    assert store.get("pref.tea").status == "current" and unrelated == 1
    assert store.get("pref.cilantro").status == "current"
    assert [v.status for v in store.history("pref.cilantro")] == ["superseded", "current"]

    # re-evaluating the note on the new version makes it current again
    store.commit(
        "order.note",
        1,
        subject="order note",
        predicate="note",
        value="cilantro ok",
        depends_on=[("pref.cilantro", 2)],
    )
    assert store.get("order.note").status == "current"
    # …and a new commit on top of a stale dependency starts as needs_reevaluation
    r = store.commit(
        "order.late",
        0,
        subject="late",
        predicate="note",
        value="x",
        depends_on=[("pref.cilantro", 1)],
    )
    assert r.status == "needs_reevaluation"


def test_bad_dependencies_are_refused(store: AssertionStore) -> None:
    fact(store, "a", "x")
    for deps, reason in (
        ([("nope", 1)], "no such assertion"),
        ([("a", 2)], "its head is v1"),
        ([("b", 1)], "itself"),
    ):
        with pytest.raises(MemoryStoreError, match=reason):
            fact(store, "b", "y", depends_on=deps)


# ---------------------------------------------------------------- forgetting
def test_forget_erases_all_versions_and_dependents_and_blocks_recommit(
    store: AssertionStore, index: RecordingIndex, tmp_path: Path
) -> None:
    fact(store, "pref.cilantro", "hates quixotic-coriander")
    fact(store, "pref.cilantro", "still hates quixotic-coriander", expected=1)
    store.commit(
        "order.note",
        0,
        subject="order note",
        predicate="note",
        value="no quixotic-coriander",
        depends_on=[("pref.cilantro", 2)],
    )
    store.commit(
        "order.note2",
        0,
        subject="order note 2",
        predicate="note",
        value="see note",
        depends_on=[("order.note", 1)],
    )
    fact(store, "pref.tea", "green tea")
    store.commit(
        "tea.summary",
        0,
        subject="owner",
        predicate="summary",
        value="tea and food",
        depends_on=[("pref.tea", 1)],
        sources=[("assertion", "pref.cilantro")],
    )

    report = store.forget("pref.cilantro")

    assert report.assertions == {
        "pref.cilantro": [1, 2],
        "order.note": [1],
        "order.note2": [1],
        "tea.summary": [1],
    }
    assert sorted(report.index_entries) == [
        "assertion:order.note",
        "assertion:order.note2",
        "assertion:pref.cilantro",
        "assertion:tea.summary",
    ]
    assert set(index.entries) == {"assertion:pref.tea"}
    for aid in ("pref.cilantro", "order.note", "order.note2", "tea.summary"):
        a = store.get(aid)
        assert a.status == "forgotten"  # the tombstone
        assert all(v.erased and v.value is None and v.subject is None for v in store.history(aid))
        with pytest.raises(MemoryStoreError) as exc:
            fact(store, aid, "again", expected=a.version)
        assert exc.value.key == "memory.forgotten"
    assert store.get("pref.tea").status == "current"
    # the payload is gone from the database file and its WAL, not just unlinked
    blob = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("memory.db"))
    assert b"quixotic-coriander" not in blob
    assert b"green tea" in blob
    # forgetting again claims nothing
    again = store.forget("pref.cilantro")
    assert again.empty and again.lines() == []


def test_forget_reports_only_what_the_index_confirms(tmp_path: Path) -> None:
    class Broken:
        def upsert(self, item_id: str, text: str, **kw: object) -> None:
            pass

        def remove(self, item_ids: list[str]) -> list[str]:
            raise ConnectionError("index offline")

    s = AssertionStore.open(tmp_path / "memory.db", index=Broken())  # type: ignore[arg-type]
    fact(s, "a", "x")
    report = s.forget("a")
    assert report.assertions == {"a": [1]}
    assert report.index_entries == [] and "index offline" in report.index_error
    assert any("NOT confirmed" in line for line in report.lines())
    # without an index nothing about an index is claimed at all
    s2 = AssertionStore.open(tmp_path / "other.db")
    fact(s2, "b", "y")
    r2 = s2.forget("b")
    assert r2.index_entries == [] and r2.index_error == ""
    assert all("index" not in line for line in r2.lines())


def test_forget_unknown_id_is_an_error(store: AssertionStore) -> None:
    with pytest.raises(MemoryStoreError) as exc:
        store.forget("never.was")
    assert exc.value.key == "memory.unknown"


def test_correction_with_erase_previous(store: AssertionStore, index: RecordingIndex) -> None:
    fact(store, "pref.x", "wrong thing")
    store.commit(
        "dep.x", 0, subject="d", predicate="note", value="from wrong", depends_on=[("pref.x", 1)]
    )
    r = store.commit(
        "pref.x",
        1,
        subject="owner",
        predicate="food.preference",
        value="right thing",
        erase_previous=True,
    )
    assert r.erased_versions == (1,) and r.forgotten == ("dep.x",)
    hist = store.history("pref.x")
    assert hist[0].erased and hist[0].value is None and hist[1].value == "right thing"
    assert store.get("dep.x").status == "forgotten"
    assert "assertion:dep.x" not in index.entries
    assert index.entries["assertion:pref.x"]["text"] == "owner food preference right thing"


# ---------------------------------------------------------------- derived items, sensitivity
def test_derived_items_inherit_the_highest_sensitivity(store: AssertionStore) -> None:
    derived = DerivedStore(store)
    store.register_source(("mail", "m-1"), "high")
    store.register_source(("rss", "public-news"), "low")
    store.register_source(("docs", "public-reference"), "low")
    fact(store, "pub.fact", "public", sources=[("rss", "public-news")])
    assert store.get("pub.fact").sensitivity == "low"

    # an assertion from a high source is high whatever its committer said
    r = store.commit(
        "mail.fact",
        0,
        subject="s",
        predicate="p",
        value="v",
        sensitivity="low",
        sources=[("mail", "m-1")],
    )
    assert r.sensitivity == "high"
    # …and so is whatever depends on it
    r2 = store.commit(
        "dep.fact",
        0,
        subject="s",
        predicate="p",
        value="v",
        sensitivity="low",
        depends_on=[("mail.fact", 1)],
    )
    assert r2.sensitivity == "high"

    low = derived.record("summary", "news", [("rss", "public-news"), ("docs", "public-reference")])
    assert low.sensitivity == "low"
    assert derived.record("summary", "n", [("rss", "public-news")], floor="medium").sensitivity == (
        "medium"
    )
    mixed = derived.record("summary", "short and vague", [("rss", "public-news"), ("mail", "m-1")])
    assert mixed.sensitivity == "high"  # shorter is not less sensitive
    unknown = derived.record("snippet", "s", [("rss", "never-registered")])
    assert unknown.sensitivity == "high"
    assert derived.record("context", "c", []).sensitivity == "high"
    # derived from derived: the chain keeps the level
    chained = derived.record("context", "ctx", [("derived", mixed.id)])
    assert chained.sensitivity == "high"
    assert derived.record("context", "ctx", [("derived", "missing")]).sensitivity == "high"
    with pytest.raises(MemoryStoreError):
        derived.record("summary", "x", ["not a source"])

    allowed: set[Source] = {("rss", "public-news"), ("docs", "public-reference")}
    assert cloud_eligible(low, allowed)
    assert not cloud_eligible(low)  # the default allow-list is empty
    assert not cloud_eligible(mixed, allowed)
    assert not cloud_eligible(derived.record("summary", "x", [("rss", "Public-News")]), allowed)
    pub = store.get("pub.fact")
    assert cloud_eligible(pub, allowed)
    assert not cloud_eligible(store.get("dep.fact"), allowed)
    assert highest(["low", "bogus"]) == "high" and highest([None]) == "high"


def test_a_source_raised_later_raises_what_came_from_it(
    store: AssertionStore, index: RecordingIndex
) -> None:
    derived = DerivedStore(store)
    store.register_source(("mail", "m-3"), "low")
    fact(store, "m.fact", "meeting at noon", sources=[("mail", "m-3")])
    store.commit(
        "m.dep",
        0,
        subject="s",
        predicate="p",
        value="v",
        sensitivity="low",
        depends_on=[("m.fact", 1)],
    )
    summary = derived.record("summary", "noon meeting", [("assertion", "m.dep")])
    unrelated = derived.record("summary", "x", [("mail", "m-4")], floor="high")
    assert store.get("m.dep").sensitivity == "low" and summary.sensitivity == "low"

    raised = store.register_source(("mail", "m-3"), "high")

    assert raised == (["m.fact", "m.dep"], [summary.id])
    assert store.get("m.fact").sensitivity == "high" and store.get("m.dep").sensitivity == "high"
    assert derived.get(summary.id).sensitivity == "high"
    assert index.entries["assertion:m.dep"]["sensitivity"] == "high"
    assert index.entries[f"derived:{summary.id}"]["sensitivity"] == "high"
    # lowering the source lowers nothing that was derived
    assert store.register_source(("mail", "m-3"), "low") == ([], [])
    assert store.get("m.fact").sensitivity == "high"
    assert derived.get(unrelated.id).sensitivity == "high"


def test_deleting_a_source_deletes_or_rederives_what_came_from_it(
    store: AssertionStore, index: RecordingIndex
) -> None:
    derived = DerivedStore(store)
    store.register_source(("mail", "m-1"), "medium")
    store.register_source(("mail", "m-2"), "low")
    fact(store, "from.mail", "dentist on friday", sources=[("mail", "m-1")])
    only = derived.record("summary", "dentist friday", [("mail", "m-1")])
    both = derived.record("summary", "dentist; lunch", [("mail", "m-1"), ("mail", "m-2")])
    emb = derived.record("embedding", "dentist friday", [("derived", only.id)])
    ctx = derived.record("context", "ctx", [("derived", both.id), ("assertion", "from.mail")])
    kept = derived.record("summary", "lunch", [("mail", "m-2")])
    assert {f"derived:{d.id}" for d in (only, both, emb, ctx, kept)} <= set(index.entries)

    report = store.forget_source(("mail", "m-1"))

    assert report.assertions == {"from.mail": [1]}
    assert sorted(report.derived) == sorted([only.id, emb.id])
    assert sorted(report.rederive) == sorted([both.id, ctx.id])
    assert report.sources == [("mail", "m-1")]
    assert set(report.index_entries) == {
        "assertion:from.mail",
        *(f"derived:{d.id}" for d in (only, both, emb, ctx)),
    }
    assert derived.get(only.id).status == "deleted" and derived.get(only.id).text is None
    waiting = {d.id: d for d in derived.waiting()}
    assert set(waiting) == {both.id, ctx.id}
    assert waiting[both.id].text is None and waiting[both.id].sources == (("mail", "m-2"),)
    assert derived.get(kept.id).text == "lunch"
    assert set(index.entries) == {f"derived:{kept.id}"}
    # re-deriving from what is left works
    redone = derived.record("summary", "lunch", [("mail", "m-2")], item_id=both.id)
    assert redone.status == "current" and redone.sensitivity == "low"


def test_deleted_embedding_leaves_the_index(store: AssertionStore, index: RecordingIndex) -> None:
    derived = DerivedStore(store)
    fact(store, "pref.spicy", "likes spicy food")
    emb = derived.record("embedding", "likes spicy food", [("assertion", "pref.spicy")])
    assert f"derived:{emb.id}" in index.entries
    report = derived.delete(emb.id)
    assert report.derived == [emb.id] and report.index_entries == [f"derived:{emb.id}"]
    assert f"derived:{emb.id}" not in index.entries
    assert store.get("pref.spicy").status == "current"


# ---------------------------------------------------------------- restore from backup
def test_deletions_are_reapplied_after_restore(tmp_path: Path, index: RecordingIndex) -> None:
    db = tmp_path / "memory.db"
    s = AssertionStore.open(db, index=_typed(index))
    derived = DerivedStore(s)
    fact(s, "secret.fact", "zanzibar-passphrase")
    s.commit(
        "dep",
        0,
        subject="d",
        predicate="note",
        value="zanzibar-dep",
        depends_on=[("secret.fact", 1)],
    )
    d = derived.record("summary", "zanzibar-summary", [("assertion", "secret.fact")])
    fact(s, "kept", "harmless")
    s.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    backup = tmp_path / "backup.db"
    shutil.copyfile(db, backup)  # the backup, taken before forgetting

    report = s.forget("secret.fact")
    assert set(report.assertions) == {"secret.fact", "dep"} and report.derived == [d.id]
    fact(s, "late.secret", "zanzibar-late")  # made after the backup, then forgotten
    s.forget("late.secret")
    s.close()

    # restore: the old file comes back over the database (the log beside it stays)
    for stale in tmp_path.glob("memory.db-*"):
        stale.unlink()
    shutil.copyfile(backup, db)
    restored = AssertionStore.open(db)
    assert restored.get("secret.fact").head.value == "zanzibar-passphrase"  # it came back
    restored.close()
    index.upsert(
        "assertion:secret.fact", "stale", sensitivity="low", sources=[], importance=0, created_ms=0
    )

    again = reapply_deletions(db, index=_typed(index))

    assert set(again.assertions) == {"secret.fact", "dep"}
    assert again.derived == [d.id]
    assert "assertion:secret.fact" in again.index_entries
    s2 = AssertionStore.open(db)
    assert s2.get("secret.fact").status == "forgotten"
    with pytest.raises(MemoryStoreError):
        fact(s2, "secret.fact", "again", expected=1)
    assert s2.get("kept").head.value == "harmless"
    # an id the backup never knew gets a tombstone, so it cannot come back either
    assert s2.get("late.secret").status == "forgotten"
    with pytest.raises(MemoryStoreError):
        fact(s2, "late.secret", "again", expected=0)
    s2.close()
    blob = b"".join(p.read_bytes() for p in tmp_path.glob("memory.db*"))
    assert b"zanzibar" not in blob
    # re-applying twice deletes nothing more
    assert reapply_deletions(db).empty
    assert deletion_log_path(db).exists()


def test_correction_is_reapplied_after_restore(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    s = AssertionStore.open(db)
    fact(s, "addr", "lives at 12 wrongful-street")
    fact(s, "other", "unrelated")
    s.close()
    shutil.copyfile(db, tmp_path / "backup.db")
    s = AssertionStore.open(db)
    r = s.commit(
        "addr", 1, subject="owner", predicate="address", value="moved", erase_previous=True
    )
    assert r.erased_versions == (1,)
    s.close()
    shutil.copyfile(tmp_path / "backup.db", db)
    for stale in tmp_path.glob("memory.db-*"):
        stale.unlink()
    report = reapply_deletions(db)
    # the restored copy's head is the erased version: the whole assertion goes
    assert report.assertions == {"addr": [1]}
    s = AssertionStore.open(db)
    assert s.get("addr").status == "forgotten" and s.get("other").status == "current"
    s.close()
    assert b"wrongful-street" not in b"".join(p.read_bytes() for p in tmp_path.glob("memory.db*"))


def test_real_index_loses_a_deleted_sources_embedding(tmp_path: Path) -> None:
    from hub.memory.index import MemoryIndex

    index = MemoryIndex(tmp_path / "memory_index.db")
    store = AssertionStore.open(tmp_path / "memory.db", index=index)
    index.is_live = store.live
    try:
        store.register_source(("mail", "m-7"), "medium")
        store.commit(
            "appt",
            0,
            subject="owner",
            predicate="has_appointment",
            value="dentist at 3pm on friday",
            sources=[("mail", "m-7")],
        )
        emb = DerivedStore(store).record(
            "embedding", "dentist appointment on friday afternoon", [("mail", "m-7")]
        )
        fact(store, "tea", "green tea every morning")
        before = {h.item_id for h in index.search_vec("dentist appointment", k=5)}
        assert {"assertion:appt", f"derived:{emb.id}"} <= before
        assert index.get(f"derived:{emb.id}").sensitivity == "medium"  # type: ignore[union-attr]

        report = store.forget_source(("mail", "m-7"))

        assert sorted(report.index_entries) == sorted(["assertion:appt", f"derived:{emb.id}"])
        after = {h.item_id for h in index.search_vec("dentist appointment", k=5)}
        assert not after & {"assertion:appt", f"derived:{emb.id}"}
        assert index.get("assertion:appt") is None and index.get(f"derived:{emb.id}") is None
        assert index.search_fts("dentist") == [] and index.count() == 1
        blob = b"".join(p.read_bytes() for p in tmp_path.glob("memory*"))
        assert b"dentist" not in blob
    finally:
        store.close()
        index.close()


def test_the_same_fact_committed_twice_is_one_assertion(
    store: AssertionStore, index: RecordingIndex
) -> None:
    store.register_source(("timeline", "u-1"), "low")
    first = store.commit(
        None,
        0,
        subject="owner",
        predicate="food.dislike",
        value="cilantro",
        sources=[("timeline", "u-1")],
        sensitivity="low",
    )
    store.register_source(("timeline", "u-2"), "medium")
    again = store.commit(
        None,
        0,
        subject="owner",
        predicate="food.dislike",
        value="cilantro",
        sources=[("timeline", "u-2")],
        sensitivity="low",
        request_id="r-2",
    )
    assert again.merged and again.id == first.id and again.version == first.version == 1
    assert [a.id for a in store.current("food.dislike")] == [first.id]
    head = store.get(first.id).head
    assert head.sources == (("timeline", "u-1"), ("timeline", "u-2"))
    assert head.sensitivity == "medium"  # the merged source's level joins
    assert list(index.entries) == [f"assertion:{first.id}"]
    assert index.entries[f"assertion:{first.id}"]["sensitivity"] == "medium"
    # a retry of the merging request gets the same receipt; another value is another fact
    assert (
        store.commit(
            None,
            0,
            subject="owner",
            predicate="food.dislike",
            value="cilantro",
            sources=[("timeline", "u-2")],
            sensitivity="low",
            request_id="r-2",
        )
        == again
    )
    other = store.commit(None, 0, subject="owner", predicate="food.dislike", value="olives")
    assert not other.merged and other.id != first.id
    # forgetting the one assertion forgets the fact from both sources
    store.forget_source(("timeline", "u-2"))
    assert store.current("food.dislike") == [store.get(other.id)]
