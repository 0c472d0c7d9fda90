"""Recall quality on a labelled set: recall@5 for keywords alone, vectors alone, and fused.

``tests/data/recall_set.yaml`` holds 220 memories of one owner's life and 68 questions
(English paraphrases, Chinese, and cross-language), each naming the memories that answer
it. recall@5 of a question is the share of its relevant memories in the top five; the
figures are averaged over the questions and printed (``pytest -s``) per question kind.
The index uses the default (multilingual) embedding model.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from hub.memory.index import Entry, Hit, MemoryIndex
from models.embed import Embedder, shared_embedder

SET = Path(__file__).parent / "data" / "recall_set.yaml"
K = 5
NOW_MS = 1_780_000_000_000


def load_set() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(SET.read_text(encoding="utf-8"))
    return data


def test_the_set_is_big_enough_and_consistent() -> None:
    data = load_set()
    ids = [m["id"] for m in data["memories"]]
    assert len(ids) >= 200 and len(set(ids)) == len(ids)
    assert len(data["questions"]) >= 50
    kinds = {q["kind"] for q in data["questions"]}
    assert kinds == {"en", "zh", "cross"}
    for q in data["questions"]:
        assert q["relevant"] and set(q["relevant"]) <= set(ids), q
    chinese = [m for m in data["memories"] if any("\u4e00" <= c <= "\u9fff" for c in m["text"])]
    assert len(chinese) >= 30


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return shared_embedder()


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> MemoryIndex:
    data = load_set()
    ix = MemoryIndex(
        tmp_path_factory.mktemp("recall") / "memory_index.db",
        embedder=embedder,
        clock=lambda: NOW_MS,
    )
    ix.upsert_many(
        [
            Entry(m["id"], m["text"], "low", [("note", m["id"])], 0.5, NOW_MS)
            for m in data["memories"]
        ]
    )
    return ix


def recall_at_k(
    search: Callable[[str], list[Hit]], questions: list[dict[str, Any]]
) -> dict[str, float]:
    per_kind: dict[str, list[float]] = defaultdict(list)
    for q in questions:
        found = {h.item_id for h in search(q["q"])[:K]}
        relevant = set(q["relevant"])
        score = len(found & relevant) / len(relevant)
        per_kind[q["kind"]].append(score)
        per_kind["all"].append(score)
    return {kind: sum(v) / len(v) for kind, v in per_kind.items()}


def test_fused_recall_beats_keywords_and_vectors_alone(index: MemoryIndex) -> None:
    questions = load_set()["questions"]
    results = {
        "fts": recall_at_k(lambda q: index.search_fts(q, K), questions),
        "vec": recall_at_k(lambda q: index.search_vec(q, K), questions),
        "fused": recall_at_k(lambda q: index.search(q, K, touch=False), questions),
    }
    kinds = ["all", "en", "zh", "cross"]
    counts = {kind: sum(1 for q in questions if q["kind"] == kind) for kind in kinds[1:]}
    counts["all"] = len(questions)
    print(f"\nrecall@{K} over {len(questions)} questions, {index.count()} memories")
    print(f"{'':8}" + "".join(f"{f'{kind} ({counts[kind]})':>12}" for kind in kinds))
    for name, figures in results.items():
        print(f"{name:8}" + "".join(f"{figures.get(kind, 0.0):12.3f}" for kind in kinds))
    assert results["fused"]["all"] > results["fts"]["all"]
    # with the multilingual default the vector list alone already reaches the fused figure
    # on this set (0.907 both; under MiniLM fused 0.789 beat vectors 0.775): fusing must
    # not lose anything, and cross-language questions are answered (MiniLM: 0.0)
    assert results["fused"]["all"] >= results["vec"]["all"]
    assert results["fused"]["cross"] >= 0.8
