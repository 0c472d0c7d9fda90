"""Typed originals (hub/turns/originals.py): kept in the real L5 archive, in batches, never
waited on by the turn; what is pending at the hub's stop is written before it closes."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from hub.archive.archive import INLINE, ObjectInfo
from hub.archive.settings import open_archive
from hub.timeline import Admitted
from hub.turns.originals import DELAY_S, FORMAT, TypedOriginals
from tests.waiting import poll


def admitted(n: int) -> Admitted:
    return Admitted(f"u-{n}", "mac", n, f"hello {n}", f"t-{n}", {}, 1_000 + n, False)


def read(home: Path, object_id: str) -> bytes:
    archive = open_archive(home)
    try:
        return archive.read(object_id)
    finally:
        archive.close()


def stored(home: Path) -> list[ObjectInfo]:
    archive = open_archive(home)
    try:
        return archive.objects(source="mac")
    finally:
        archive.close()


async def test_a_turn_never_waits_and_originals_of_a_burst_share_one_write(
    tmp_path: Path,
) -> None:
    counts: Counter[str] = Counter()
    async with TypedOriginals(tmp_path, lambda key: counts.update([key])) as originals:
        await originals.keep(admitted(0), b"raw-0")  # opens the archive
        assert stored(tmp_path) == []  # queued: the turn goes on at once
        for n in range(1, 6):
            await originals.keep(admitted(n), b"raw-%d" % n)
        await poll(lambda: counts["turn.archived"] == 6, 10 + DELAY_S, "six originals archived")
        assert counts == {"turn.archived": 6}
        objects = stored(tmp_path)
    by_uid = {o.meta["utterance_id"]: o for o in objects}
    assert sorted(by_uid) == [f"u-{n}" for n in range(6)]
    for n in range(6):
        o = by_uid[f"u-{n}"]
        assert (o.kind, o.trace_id, o.ts_ms, o.size) == ("event", f"t-{n}", 1_000 + n, 5)
        assert o.meta == {"utterance_id": f"u-{n}", "format": FORMAT, "source": "typed"}
        assert o.hot_path == INLINE  # a small event: its hot copy is in the index, no file
        assert read(tmp_path, o.id) == b"raw-%d" % n
    assert not (tmp_path / "archive" / "hot").exists() or not any(
        p.is_file() for p in (tmp_path / "archive" / "hot").rglob("*")
    )
    assert len({o.stored_ms for o in objects}) == 1  # one write for the burst


async def test_originals_pending_at_the_stop_are_written_before_it_ends(tmp_path: Path) -> None:
    counts: Counter[str] = Counter()
    async with TypedOriginals(tmp_path, lambda key: counts.update([key])) as originals:
        for n in range(3):
            await originals.keep(admitted(n), b"x" * 100)
        assert stored(tmp_path) == []
    assert sorted(o.meta["utterance_id"] for o in stored(tmp_path)) == ["u-0", "u-1", "u-2"]
    assert counts == {"turn.archived": 3}


async def test_an_archive_that_cannot_open_is_reported_once_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "archive").write_text("not a folder")
    counts: Counter[str] = Counter()
    async with TypedOriginals(tmp_path, lambda key: counts.update([key])) as originals:
        for n in range(3):
            await originals.keep(admitted(n), b"raw")
    assert counts == {"turn.not_archived": 3}
    errors = [r for r in caplog.records if "will not be archived" in r.getMessage()]
    assert len(errors) == 1, errors
    assert (tmp_path / "archive").read_text() == "not a folder"  # nothing overwritten


async def test_concurrent_first_turns_open_the_archive_once(tmp_path: Path) -> None:
    counts: Counter[str] = Counter()
    async with TypedOriginals(tmp_path, lambda key: counts.update([key])) as originals:
        await asyncio.gather(*(originals.keep(admitted(n), b"r") for n in range(4)))
    assert len(stored(tmp_path)) == 4
    assert counts == {"turn.archived": 4}
