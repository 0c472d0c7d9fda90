"""Group commit (storage/group_commit.py): commits and appends are marked, not synced; one
flush syncs each written file once (the files of one flush at the same time), shared by
every caller waiting at the same time; a sync that fails fails its callers and keeps the
files marked; a flush after a write always syncs it. Real SQLite files and real fdatasync
calls."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

import storage.checkpoint as checkpoint
import storage.group_commit as gc
from storage.checkpoint import Checkpointer
from storage.errors import StorageError
from storage.group_commit import GroupCommit
from storage.sqlite import joined, open_db, transaction
from sync.replica import Replica
from tests.checkpoint_kit import held_checkpoints
from tests.mesh_harness import Mesh
from tests.waiting import poll

SCHEMA = "CREATE TABLE IF NOT EXISTS t (x BLOB)"


def _insert(conn: object, n: int = 1, size: int = 100) -> None:
    for _ in range(n):
        with transaction(conn) as c:  # type: ignore[arg-type]
            c.execute("INSERT INTO t VALUES (?)", (b"x" * size,))


def test_a_grouped_database_commits_without_sync_and_is_marked(tmp_path: Path) -> None:
    group = GroupCommit()
    conn = open_db(tmp_path / "a.db", SCHEMA, group=group)
    plain = open_db(tmp_path / "b.db", SCHEMA)
    assert conn.execute("PRAGMA synchronous").fetchall()[0][0] == 1  # NORMAL
    assert plain.execute("PRAGMA synchronous").fetchall()[0][0] == 2  # FULL, unchanged
    group.sync_now()
    base = group.files_synced
    _insert(conn, 5)
    _insert(plain, 5)
    assert group.pending == 1  # a.db's WAL only
    group.sync_now()
    assert group.files_synced == base + 1 and group.pending == 0
    group.sync_now()  # nothing written since: nothing synced
    assert group.files_synced == base + 1
    conn.close()
    plain.close()


async def test_callers_waiting_together_share_one_flush(tmp_path: Path) -> None:
    async with GroupCommit() as group:
        conn = open_db(tmp_path / "a.db", SCHEMA, group=group)
        await group.flush()
        flushes = group.flushes
        _insert(conn, 3)
        await asyncio.gather(*(group.flush() for _ in range(8)))
        assert group.flushes == flushes + 1
        assert group.pending == 0
        await group.flush()  # nothing new
        assert group.flushes == flushes + 1
        conn.close()


async def test_a_write_made_during_a_flush_is_synced_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()
    synced: list[list[str]] = []
    real = gc._sync_files

    def held(paths: list[str]) -> int:  # the first sync waits until the test lets it go
        synced.append(paths)
        if len(synced) == 1:
            entered.set()
            release.wait(10)
        return real(paths)

    monkeypatch.setattr(gc, "_sync_files", held)
    async with GroupCommit() as group:
        replica = Replica(tmp_path / "replica", "notes", group=group)
        replica.change(lambda doc: doc.get_text("t").insert(0, "one"))
        first = asyncio.create_task(group.flush())
        assert await asyncio.to_thread(entered.wait, 10)  # the first flush is syncing
        replica.change(lambda doc: doc.get_text("t").insert(0, "two"))  # marked meanwhile
        second = asyncio.create_task(group.flush())
        release.set()
        await asyncio.gather(first, second)
        assert len(synced) == 2 and synced[1] == synced[0]  # the log synced again
        assert group.flushes == 2 and group.pending == 0


async def test_a_failed_sync_fails_its_callers_and_keeps_the_file_marked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with GroupCommit() as group:
        conn = open_db(tmp_path / "a.db", SCHEMA, group=group)
        _insert(conn)
        real = os.fdatasync

        def broken(fd: int) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(gc.os, "fdatasync", broken)
        results = await asyncio.gather(group.flush(), group.flush(), return_exceptions=True)
        assert all(isinstance(r, StorageError) for r in results), results
        assert results[0].key == "storage.sync_failed"  # type: ignore[union-attr]
        assert "Input/output error" in str(results[0])
        assert group.pending == 1  # still to sync
        monkeypatch.setattr(gc.os, "fdatasync", real)
        await group.flush()
        assert group.pending == 0
        assert conn.execute("SELECT count(*) FROM t").fetchall()[0][0] == 1  # nothing lost
        conn.close()


def test_a_file_gone_before_its_flush_needs_no_sync(tmp_path: Path) -> None:
    group = GroupCommit()
    gone = tmp_path / "gone.log"
    gone.write_bytes(b"x")
    group.wrote(gone)
    gone.unlink()
    group.sync_now()
    assert group.pending == 0 and group.files_synced == 0


def test_the_wal_hook_checkpoints_as_sqlite_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkpoint, "CHECKPOINT_PAGES", 8)
    group = GroupCommit()
    path = tmp_path / "a.db"
    conn = open_db(path, SCHEMA, group=group)
    before = path.stat().st_size
    _insert(conn, 40, size=3000)
    # copied into the database file by the hook's checkpoints, and the WAL reused
    assert path.stat().st_size > before + 40 * 3000 // 2
    assert os.stat(conn.filename_wal).st_size < 40 * 3000
    conn.close()


async def test_an_entered_group_checkpoints_on_its_own_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entered, the group checkpoints on its checkpoint thread: a commit over the threshold
    does not wait for the copy and its syncs, a database has one checkpoint at a time, and
    the WAL is copied into the database file and then reused, as SQLite's own would be."""
    path = tmp_path / "a.db"
    async with GroupCommit() as group:
        with held_checkpoints(group.checkpointer, monkeypatch) as ran:
            conn = open_db(path, SCHEMA, group=group)
            before = path.stat().st_size
            _insert(conn, 40, size=3000)  # the checkpoint it asked for is held: no wait here
            await poll(lambda: ran)
            assert len(ran) == 1 and ran[0].startswith("checkpoint")  # one at a time
            assert path.stat().st_size == before  # nothing copied while it is held
        await poll(lambda: group.checkpointer.checkpoints == 1)
        assert path.stat().st_size > before + 40 * 3000 // 2
        wal = os.stat(conn.filename_wal).st_size
        _insert(conn, 40, size=3000)  # written from the WAL's start again, not after it
        assert os.stat(conn.filename_wal).st_size < 1.5 * wal
        await poll(lambda: group.checkpointer.checkpoints >= 2 and group.checkpointer.idle)
        assert conn.execute("SELECT count(*) FROM t").fetchall()[0][0] == 80
        conn.close()


def test_a_checkpoint_of_a_database_gone_meanwhile_creates_nothing(tmp_path: Path) -> None:
    group = GroupCommit()
    gone = tmp_path / "gone.db"
    group.checkpointer._checkpoint_apart(str(gone))
    assert not gone.exists() and group.checkpointer.checkpoints == 0


async def test_leaving_the_group_syncs_what_is_left(tmp_path: Path) -> None:
    group = GroupCommit()
    async with group:
        conn = open_db(tmp_path / "a.db", SCHEMA, group=group)
        _insert(conn)
        assert group.pending == 1
    assert group.pending == 0
    conn.close()


async def test_a_web_response_starts_only_after_the_flush() -> None:
    from hub.web.server import durable_responses

    order: list[str] = []

    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        order.append("handled")
        await send({"type": "http.response.start", "status": 200, "headers": []})  # type: ignore[operator]
        await send({"type": "http.response.body", "body": b"ok"})  # type: ignore[operator]

    async def flush() -> None:
        order.append("flushed")

    async def send(message: dict[str, object]) -> None:
        order.append(str(message["type"]))

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b""}

    wrapped = durable_responses(app, flush)  # type: ignore[arg-type]
    await wrapped({"type": "http"}, receive, send)  # type: ignore[arg-type]
    assert order == ["handled", "flushed", "http.response.start", "http.response.body"]
    order.clear()
    await wrapped({"type": "lifespan"}, receive, send)  # type: ignore[arg-type]
    assert "flushed" not in order


@pytest.mark.slow
async def test_the_hub_sends_a_reply_only_after_its_writes_are_synced(mesh: Mesh) -> None:
    mac = mesh.add_device("mac1", "mac")
    mesh.use_packages({})
    async with mesh.hub_in_process() as hub:
        assert hub.store.conn.execute("PRAGMA synchronous").fetchall()[0][0] == 1  # NORMAL
        covered: list[tuple[int, int]] = []
        flush = hub.group.flush

        async def durable() -> None:  # what every envelope out awaits
            # what was committed before this envelope (the utterance, for the first one) is
            # synced when it leaves; commits made while the flush ran (other tasks, worker
            # threads) belong to the next envelope's flush
            marked = hub.group.marked
            await flush()
            covered.append((marked, hub.group.synced))

        hub.port._durable = durable
        synced = hub.group.files_synced
        out = await mesh.say_answered(mac, "Yimi, what time is it")
        assert "It's" in out or "现在" in out, out
        assert covered and all(synced >= marked for marked, synced in covered), covered
        assert covered[0][0] > 0, covered  # the utterance was committed, and synced, first
        assert hub.group.files_synced > synced
        rows = mesh.hub_query("SELECT count(*) FROM timeline WHERE kind='utterance'")
        assert rows[0][0] == 1


@pytest.mark.slow
async def test_the_hubs_flush_also_makes_the_gateways_staged_writes_durable(mesh: Mesh) -> None:
    """The hub's gateway leaves an observe receipt's fsync to the hub's group commit
    (``settled_by_caller``): the flush before every message out waits for its batch."""
    from hub.gateway import commit as commit_module

    mesh.use_packages({})
    async with mesh.hub_in_process() as hub:
        gw = hub.consent.gateway
        assert gw is not None and gw.settled_by_caller
        before = gw.commits.stats.batches
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(commit_module, "LATER_S", 60.0)  # only a flush writes it
            gw.audit.stage("note", {"what": "staged by the test"}, trace_id="t-flush")
            gw.commits.later()
            assert gw.commits.stats.batches == before
            await hub.port.durable()  # what every envelope out awaits
        assert gw.commits.stats.batches == before + 1
        assert gw.commits._open is None and gw.commits._writing is None


def test_joined_opens_its_own_transaction_or_joins_the_callers(tmp_path: Path) -> None:
    conn = open_db(tmp_path / "t.db", "CREATE TABLE IF NOT EXISTS t (v INTEGER)")
    with joined(conn):  # alone: a transaction of its own, committed
        assert conn.in_transaction
        conn.execute("INSERT INTO t VALUES (1)")
    assert not conn.in_transaction
    with pytest.raises(RuntimeError), joined(conn):
        conn.execute("INSERT INTO t VALUES (2)")
        raise RuntimeError("rolled back")
    with pytest.raises(RuntimeError), transaction(conn):
        with joined(conn):  # a step of the caller's: its fate is the caller's
            conn.execute("INSERT INTO t VALUES (3)")
        assert conn.in_transaction
        raise RuntimeError("the caller's failure undoes the step too")
    assert [r[0] for r in conn.execute("SELECT v FROM t")] == [1]
    conn.close()


async def test_the_files_of_one_flush_are_synced_at_the_same_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two databases written before one flush: their syncs run together (each waits at a
    barrier only the other can pass, so one after the other could not finish)."""
    together = threading.Barrier(2, timeout=10)
    real = os.fdatasync

    def meeting(fd: int) -> None:
        together.wait()
        real(fd)

    async with GroupCommit() as group:
        a = open_db(tmp_path / "a.db", SCHEMA, group=group)
        b = open_db(tmp_path / "b.db", SCHEMA, group=group)
        await group.flush()
        synced = group.files_synced
        _insert(a)
        _insert(b)
        monkeypatch.setattr(gc.os, "fdatasync", meeting)
        await group.flush()
        assert group.files_synced == synced + 2 and group.pending == 0
        assert not together.broken
        a.close()
        b.close()


async def test_one_failed_sync_among_several_fails_the_flush_and_keeps_every_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Of three files synced together one fails: the flush raises once all have ended and
    the three stay marked; the next flush syncs them."""
    real = os.fdatasync
    calls: list[str] = []

    def one_breaks(fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[-1]
        calls.append(name)
        if name == "b.db-wal":
            raise OSError(5, "Input/output error")
        real(fd)

    async with GroupCommit() as group:
        conns = [open_db(tmp_path / f"{n}.db", SCHEMA, group=group) for n in "abc"]
        await group.flush()
        for c in conns:
            _insert(c)
        monkeypatch.setattr(gc.os, "fdatasync", one_breaks)
        with pytest.raises(StorageError) as err:
            await group.flush()
        assert err.value.key == "storage.sync_failed" and "b.db-wal" in str(err.value)
        assert sorted(calls) == ["a.db-wal", "b.db-wal", "c.db-wal"]  # every one was tried
        assert group.pending == 3
        monkeypatch.setattr(gc.os, "fdatasync", real)
        await group.flush()
        assert group.pending == 0
        for c in conns:
            assert c.execute("SELECT count(*) FROM t").fetchall()[0][0] == 1
            c.close()


async def test_a_checkpoint_dropped_at_close_does_not_block_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing drops the checkpoints asked for and not begun; started again, the
    checkpointer checkpoints that database again (it is not left marked as under way)."""
    monkeypatch.setattr(checkpoint, "CHECKPOINT_PAGES", 8)
    conn = open_db(tmp_path / "a.db", SCHEMA)
    checkpointer = Checkpointer()
    checkpointer.watch(conn)
    checkpointer.start()
    checkpointer._running.add(conn.filename)  # asked for, then dropped by close unbegun
    checkpointer.close()
    assert checkpointer.idle
    checkpointer.start()
    try:
        _insert(conn, 40, size=3000)
        await poll(lambda: checkpointer.checkpoints >= 1)
    finally:
        checkpointer.close()
        conn.close()
