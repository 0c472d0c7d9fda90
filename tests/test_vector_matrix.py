"""The recall index's in-memory vectors (hub/memory/vector_matrix.py) answer what sqlite-vec's
k-NN answers, and stay in step with every write, removal, touch, failed transaction and
another connection's commit."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from hub.memory.index import DAY_MS, LIST_LIMIT, STALE_DAYS, Entry, MemoryIndex
from hub.memory.vector_matrix import RecentVectors, VectorMatrix

T0 = 1_780_000_000_000
DIM = 32


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def vec0_knn(ix: MemoryIndex, q: np.ndarray, cutoff: int | None) -> list[tuple[int, float]]:
    """What the index answered before the matrix: sqlite-vec's own k-NN."""
    sql = "SELECT rowid, distance FROM items_vec WHERE embedding MATCH ? AND k = ?"
    args: tuple[object, ...] = (q.astype(np.float32).tobytes(), LIST_LIMIT)
    if cutoff is not None:
        sql += " AND last_access_ms >= ?"
        args = (*args, cutoff)
    rows = ix._conn.execute(sql + " ORDER BY distance", args).fetchall()
    return [(int(str(r)), float(str(d))) for r, d in rows]


def matrix_knn(ix: MemoryIndex, q: np.ndarray, cutoff: int | None) -> list[tuple[int, float]]:
    ix._vec_list(q.astype(np.float32), cutoff, 1)
    return ix._matrix.nearest(q, LIST_LIMIT, cutoff)


def same(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> None:
    assert [r for r, _ in a] == [r for r, _ in b]
    assert np.allclose([d for _, d in a], [d for _, d in b], atol=1e-5)


def entries(start: int, n: int, last_access: int) -> list[Entry]:
    return [
        Entry(f"m{i}", f"note {i}", "low", [], 0.5, T0, last_access)
        for i in range(start, start + n)
    ]


def test_the_matrix_answers_what_sqlite_vec_answers_through_every_change(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(7)
    now = T0 + 40 * DAY_MS
    cutoff = now - STALE_DAYS * DAY_MS
    with MemoryIndex(tmp_path / "ix.db", clock=lambda: now, dim=DIM) as ix:
        ix.upsert_many(entries(0, 300, now), vectors=unit(rng, 300))
        ix.upsert_many(entries(300, 200, T0), vectors=unit(rng, 200))  # stale
        queries = unit(rng, 5)
        for q in queries:
            same(matrix_knn(ix, q, cutoff), vec0_knn(ix, q, cutoff))
            same(matrix_knn(ix, q, None), vec0_knn(ix, q, None))
        # after it was loaded: a replaced vector, removals, new rows past its capacity, touches
        ix.upsert_many(entries(10, 5, now), vectors=unit(rng, 5))
        ix.remove([f"m{i}" for i in range(0, 400, 3)])
        ix.upsert_many(entries(1000, 1500, now), vectors=unit(rng, 1500))
        ix.search("note", k=10, query_vector=queries[0])  # touches what it returns
        for q in queries:
            same(matrix_knn(ix, q, cutoff), vec0_knn(ix, q, cutoff))
            same(matrix_knn(ix, q, None), vec0_knn(ix, q, None))
        assert len(ix._matrix) == ix.count()


def test_another_connections_commit_reloads_the_matrix(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    path = tmp_path / "ix.db"
    with MemoryIndex(path, clock=lambda: T0, dim=DIM) as ix:
        ix.upsert_many(entries(0, 50, T0), vectors=unit(rng, 50))
        target = unit(rng, 1)
        assert ix.search_vec("x", k=1, query_vector=target[0])[0].item_id != "new"
        with MemoryIndex(path, clock=lambda: T0, dim=DIM) as other:
            other.upsert_many([Entry("new", "new note", "low", [], 0.5, T0)], vectors=target)
        assert ix.search_vec("x", k=1, query_vector=target[0])[0].item_id == "new"
        with MemoryIndex(path, clock=lambda: T0, dim=DIM) as other:
            other.remove(["new"])
        assert ix.search_vec("x", k=1, query_vector=target[0])[0].item_id != "new"


def test_a_failed_transaction_leaves_no_row_in_the_matrix(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    with MemoryIndex(tmp_path / "ix.db", clock=lambda: T0, dim=DIM) as ix:
        ix.upsert_many(entries(0, 20, T0), vectors=unit(rng, 20))
        target = unit(rng, 1)
        ix.search_vec("x", k=1, query_vector=target[0])
        bad = [Entry("new", "new note", "low", [], 0.5, T0), Entry("m1", "x", "low", [], 0.5, T0)]
        real_write = ix._write

        def failing(es: Sequence[Entry], vs: npt.NDArray[np.float32]) -> bool:
            real_write(es, vs)
            raise RuntimeError("disk gone")

        ix._write = failing  # type: ignore[method-assign,assignment]
        with pytest.raises(RuntimeError):
            ix.upsert_many(bad, vectors=np.vstack([target, target]))
        assert ix.search_vec("x", k=1, query_vector=target[0])[0].item_id != "new"
        assert len(ix._matrix) == 20


def test_an_empty_or_all_stale_matrix_answers_nothing() -> None:
    m = VectorMatrix(DIM)
    m.load([])
    q = np.ones(DIM, dtype=np.float32)
    assert m.nearest(q, 10, None) == []
    m.upsert(5, q, T0)
    assert m.nearest(q, 10, T0 + 1) == [] and m.nearest(q, 10, T0)[0][0] == 5


def test_a_query_is_embedded_once_while_it_is_among_the_recent_ones() -> None:
    calls: list[str] = []

    def embed(text: str) -> npt.NDArray[np.float32]:
        calls.append(text)
        return np.full(DIM, float(len(text)), dtype=np.float32)

    cache = RecentVectors(size=2)
    first = cache.get("m", "tea", embed)
    assert cache.get("m", "tea", embed) is first and calls == ["tea"]
    cache.get("other-model", "tea", embed)  # another model: its own vector
    cache.get("m", "coffee", embed)  # "tea" on m is now the oldest of two: dropped
    cache.get("m", "tea", embed)
    assert calls == ["tea", "tea", "coffee", "tea"]
    with pytest.raises(ValueError):
        first[0] = 1.0  # what the cache hands out is read-only


def test_texts_held_are_not_embedded_again_and_rows_keep_their_order() -> None:
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> npt.NDArray[np.float32]:
        calls.append(list(texts))
        return np.stack([np.full(DIM, float(len(t)), dtype=np.float32) for t in texts])

    cache = RecentVectors(size=3)
    rows = cache.many("m", ["Done.", "tea", "Done."], embed)
    assert calls == [["Done.", "tea"]]  # each distinct text once
    assert [r[0] for r in rows] == [5.0, 3.0, 5.0]
    rows = cache.many("m", ["coffee", "Done."], embed)
    assert calls[1:] == [["coffee"]]  # "Done." was held
    assert [r[0] for r in rows] == [6.0, 5.0]
    cache.many("m", ["milk"], embed)  # size 3: "tea" (the oldest) is dropped
    cache.many("m", ["tea", "Done."], embed)
    assert calls[-1] == ["tea"]
    cache.many("other-model", ["Done."], embed)  # another model: its own vector
    assert calls[-1] == ["Done."]
    assert cache.get("m", "tea", lambda t: pytest.fail("held")).tolist() == [3.0] * DIM
    wrong = np.zeros((1, DIM), dtype=np.float32)  # one row for two texts: handed back, unkept
    assert cache.many("m", ["x", "y"], lambda texts: wrong) is wrong
    assert cache.many("m", ["x"], embed)[0][0] == 1.0


def test_nearest_is_the_brute_force_ranking_with_ties_by_rowid() -> None:
    rng = np.random.default_rng(11)
    m = VectorMatrix(DIM)
    vecs = unit(rng, 400)
    vecs[50] = vecs[7]  # equal scores: the smaller rowid first
    access = [T0 + (i % 4) * DAY_MS for i in range(400)]
    m.load((i + 1, vecs[i].tobytes(), access[i]) for i in range(400))
    for q in [*unit(rng, 3).tolist(), vecs[7].tolist()]:
        qv = np.asarray(q, dtype=np.float32)
        for cutoff in (None, T0 + 2 * DAY_MS, T0 + 3 * DAY_MS):
            eligible = [i for i in range(400) if cutoff is None or access[i] >= cutoff]
            scores = vecs @ (qv / np.linalg.norm(qv))
            truth = sorted(eligible, key=lambda i: (-scores[i], i))
            for limit in (1, 10, LIST_LIMIT, len(eligible), 400, 1000):
                got = m.nearest(qv, limit, cutoff)
                assert [r for r, _ in got] == [i + 1 for i in truth[:limit]]
                assert np.allclose([d for _, d in got], [1 - scores[i] for i in truth[:limit]])
    assert [r for r, _ in m.nearest(vecs[7], 2, None)] == [8, 51]


def test_the_keyword_list_reads_the_narrow_index_and_keeps_its_order(tmp_path: Path) -> None:
    """The keyword list filters by last access and creation through ``items_times`` and
    reads only the kept candidates' texts; the list is the one the plain join gave."""
    rng = np.random.default_rng(12)
    now = T0 + 40 * DAY_MS
    words = ["tea", "teapot", "green", "steam", "garden", "tennis", "great", "eaten"]
    texts = [" ".join(rng.choice(words, size=4)) + f" note {i}" for i in range(900)]
    with MemoryIndex(tmp_path / "ix.db", clock=lambda: now, dim=DIM) as ix:
        ix.upsert_many(
            [
                Entry(f"m{i}", t, "low", [], 0.5, T0 + (i % 40) * DAY_MS, T0 + (i % 45) * DAY_MS)
                for i, t in enumerate(texts)
            ],
            vectors=unit(rng, len(texts)),
        )
        plan = ix._conn.execute(
            "EXPLAIN QUERY PLAN SELECT rid FROM items INDEXED BY items_times WHERE rid = 1"
        ).fetchall()
        assert "items_times" in str(plan)

        def joined(expr: str, floor: int, since: int, until: int) -> list[int]:
            rows = ix._conn.execute(
                "SELECT items_fts.rowid FROM items_fts JOIN items ON items.rid = items_fts.rowid"
                " WHERE items_fts MATCH ? AND items.last_access_ms >= ?"
                " AND items.created_ms >= ? AND items.created_ms < ?"
                " ORDER BY bm25(items_fts), items_fts.rowid DESC LIMIT 400",
                (expr, floor, since, until),
            ).fetchall()
            return [int(str(r)) for (r,) in rows]

        cutoff = now - STALE_DAYS * DAY_MS
        for query in ("tea", "green tea", "steam garden", "tennis"):
            for floor, window in (
                (cutoff, None),
                (-(2**62), None),
                (cutoff, (T0 + 5 * DAY_MS, T0 + 20 * DAY_MS)),
            ):
                got = ix._fts_list(query, None if floor < 0 else floor, window)
                since, until = window or (-(2**62), 2**62)
                expr = " OR ".join(f'"{t}"' for t in query.split())
                plain = joined(expr, floor, since, until)
                # the join's order, re-ranked by terms matched at a word start (as before)
                assert set(got) <= set(plain) and got
                assert [r for r in got if r in plain] == got
                texts_of = {r: texts[r - 1] for r in plain}
                matched = {
                    r: sum(any(w.startswith(t) for w in texts_of[r].split()) for t in query.split())
                    for r in plain
                }
                expect = sorted(
                    (r for r in plain if matched[r]), key=lambda r: (-matched[r], plain.index(r))
                )
                assert got == expect[:LIST_LIMIT]


def test_an_index_made_before_the_narrow_index_gets_it_on_open(tmp_path: Path) -> None:
    rng = np.random.default_rng(13)
    path = tmp_path / "ix.db"
    with MemoryIndex(path, clock=lambda: T0, dim=DIM) as ix:
        ix.upsert_many(entries(0, 20, T0), vectors=unit(rng, 20))
        ix._conn.execute("DROP INDEX items_times")
    with MemoryIndex(path, clock=lambda: T0, dim=DIM) as ix:
        assert ix._scalar("SELECT count(*) FROM sqlite_master WHERE name = 'items_times'") == 1
        assert len(ix.search_fts("note", k=LIST_LIMIT)) == 20


def test_rows_moved_into_the_stale_prefix_or_freshened_there_are_found() -> None:
    """The matrix is loaded least recently used first and a search reads from its first
    eligible row: a stale row touched again, or a fresh row moved into a removed row's place
    near the front, must still be found (against brute force over what is held)."""
    rng = np.random.default_rng(14)
    cutoff = T0 + 10 * DAY_MS
    held: dict[int, tuple[np.ndarray, int]] = {}
    vecs = unit(rng, 600)
    for i in range(300):
        held[i + 1] = (vecs[i], T0 + (i % 20) * DAY_MS)  # about half stale
    m = VectorMatrix(DIM)
    m.load((rid, v.tobytes(), a) for rid, (v, a) in held.items())
    assert m._access[0] < cutoff  # the stale ones first

    def check() -> None:
        rids = sorted(held)
        for q in unit(rng, 3):
            scores = {rid: float(held[rid][0] @ q) for rid in rids}
            truth = sorted((r for r in rids if held[r][1] >= cutoff), key=lambda r: (-scores[r], r))
            assert [r for r, _ in m.nearest(q, 10, cutoff)] == truth[:10]
            assert [r for r, _ in m.nearest(q, 400, cutoff)] == truth
            alls = sorted(rids, key=lambda r: (-scores[r], r))
            assert [r for r, _ in m.nearest(q, 10, None)] == alls[:10]

    check()
    first = int(m._rids[0])
    m.touch(first, T0 + 30 * DAY_MS)  # the least recently used one, used again
    held[first] = (held[first][0], T0 + 30 * DAY_MS)
    check()
    for rid in [int(r) for r in m._rids[1:6]]:  # the last (fresh) rows take their places
        m.remove(rid)
        del held[rid]
    for i in range(300, 600):  # appended past the capacity: stale and fresh mixed
        access = T0 + (i % 20) * DAY_MS
        m.upsert(i + 1, vecs[i], access)
        held[i + 1] = (vecs[i], access)
    check()
    # the best match of a query is a row in the prefix made fresh
    stale = next(int(r) for r, a in zip(m._rids, m._access, strict=False) if a < cutoff)
    assert m.nearest(held[stale][0], 1, cutoff)[0][0] != stale
    m.touch(stale, cutoff)
    held[stale] = (held[stale][0], cutoff)
    assert m.nearest(held[stale][0], 1, cutoff)[0][0] == stale
    check()
