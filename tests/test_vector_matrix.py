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
from hub.memory.vector_matrix import QueryVectors, VectorMatrix

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

    cache = QueryVectors(size=2)
    first = cache.get("m", "tea", embed)
    assert cache.get("m", "tea", embed) is first and calls == ["tea"]
    cache.get("other-model", "tea", embed)  # another model: its own vector
    cache.get("m", "coffee", embed)  # "tea" on m is now the oldest of two: dropped
    cache.get("m", "tea", embed)
    assert calls == ["tea", "tea", "coffee", "tea"]
    with pytest.raises(ValueError):
        first[0] = 1.0  # what the cache hands out is read-only
