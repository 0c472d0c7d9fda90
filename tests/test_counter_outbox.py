"""The persistent envelope counter and the device outbox, including across processes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from protos import mesh_pb2
from storage.sqlite import read_rows
from sync import outbox as outbox_module
from sync.counter import PersistentCounter
from sync.errors import SyncError
from sync.outbox import Outbox

REPO = Path(__file__).resolve().parent.parent


def run_python(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 30) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return out


# --------------------------------------------------------------------------- counter
def test_counter_strictly_increasing_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "counter.db"
    values: list[int] = []
    for _ in range(3):
        c = PersistentCounter(path)
        values += [c.next() for _ in range(5)]
        c.close()
    assert values == sorted(set(values)), values
    assert values[0] >= 1
    assert (path.stat().st_mode & 0o777) == 0o600


DRAW = """
import json, sys
from pathlib import Path
from sync.counter import PersistentCounter
from tests.waiting import poll_sync

path, go, n, block = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
counter = PersistentCounter(path, block=block, max_age_s=2.0)
print("ready", flush=True)
poll_sync(go.exists, 20, "the go signal", interval=0.005)
print(json.dumps([counter.next() for _ in range(n)]))
counter.close()
"""


@pytest.mark.parametrize("block", [1, 32])
def test_counter_two_processes_never_share_a_value(tmp_path: Path, block: int) -> None:
    path, go = tmp_path / "counter.db", tmp_path / "go"
    PersistentCounter(path).close()  # schema in place before they race
    procs = [run_python(DRAW, str(path), str(go), "500", str(block)) for _ in range(2)]
    for p in procs:  # both have the database open before either draws
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    go.touch()
    drawn = [json.loads(finish(p)) for p in procs]
    for values in drawn:
        assert len(values) == 500
        assert values == sorted(values) and len(set(values)) == 500  # increasing per process
    everything = drawn[0] + drawn[1]
    assert len(set(everything)) == 1000
    # a restart continues above every value handed out
    c = PersistentCounter(path)
    assert c.next() > max(everything)
    c.close()


def test_a_counter_block_is_one_write_and_an_old_block_is_left(tmp_path: Path) -> None:
    path = tmp_path / "counter.db"
    now = [100.0]
    c = PersistentCounter(path, block=32, max_age_s=2.0, clock=lambda: now[0])

    def stored() -> int:
        return int(read_rows(path, "SELECT value FROM counter")[0][0])

    assert [c.next() for _ in range(3)] == [1, 2, 3]
    assert stored() == 32  # one write reserved the block
    now[0] += 1.9
    assert c.next() == 4 and stored() == 32
    now[0] += 0.2  # the block is older than 2 s: the rest is skipped
    assert c.next() == 33 and stored() == 64
    assert [c.next() for _ in range(31)] == list(range(34, 65))
    assert c.next() == 65 and stored() == 96  # used up: the next block
    c.close()
    again = PersistentCounter(path, block=32)
    assert again.next() == 97  # a restart continues above every value reserved
    again.close()
    with pytest.raises(ValueError):
        PersistentCounter(path, block=0)


# --------------------------------------------------------------------------- outbox
def put(box: Outbox, item_id: str, payload: bytes = b"p") -> int:
    return box.put(item_id, mesh_pb2.UTTERANCE, payload, f"t-{item_id}", 1000)


def test_outbox_put_is_idempotent_and_ordered(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "outbox.db")
    assert not box.has_items() and box.count() == 0
    ids = ["c", "a", "e", "b", "d"]
    for n, item_id in enumerate(ids, 1):
        assert put(box, item_id, item_id.encode()) == n
    assert put(box, "a", b"other payload") == 5  # same id: nothing new
    assert box.count() == 5
    items = box.pending()
    assert [i.id for i in items] == ids
    assert items[1].payload == b"a"  # the first put wins
    assert (items[0].kind, items[0].trace_id, items[0].created_ms) == (
        mesh_pb2.UTTERANCE,
        "t-c",
        1000,
    )
    assert [i.id for i in box.pending(limit=2)] == ["c", "a"]
    box.close()
    # and it is all still there after a reopen
    again = Outbox(tmp_path / "outbox.db")
    assert [i.id for i in again.pending()] == ids
    again.close()


def test_outbox_done_removes(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "outbox.db")
    for item_id in ("a", "b", "c"):
        put(box, item_id)
    assert box.done("b") is True
    assert box.done("b") is False
    assert box.done("never") is False
    assert box.count() == 2 and not box.contains("b") and box.contains("a")
    assert [i.id for i in box.pending()] == ["a", "c"]
    # a re-put after delivery queues it again, at the end
    assert put(box, "b") == 3
    assert [i.id for i in box.pending()] == ["a", "c", "b"]
    box.attempted("a")
    box.attempted("a")
    assert box.pending()[0].attempts == 2
    for item_id in ("a", "c"):
        assert box.has_items()
        box.done(item_id, answered=True)
    assert box.has_items()  # "b" still waits
    box.done("b")
    assert not box.has_items() and box.count() == 0
    box.close()


def test_only_the_bookkeeping_of_sending_commits_without_waiting_for_the_disk(
    tmp_path: Path,
) -> None:
    """A put and a withdrawal commit with ``synchronous=FULL``; an attempt counted and an
    answered item removed commit with ``NORMAL`` (the next synced commit covers them), and
    the connection is back to ``FULL`` after each."""
    box = Outbox(tmp_path / "outbox.db")
    statements: list[str] = []

    def trace(cursor: object, sql: str, bindings: object) -> bool:
        statements.append(sql.strip().upper())
        return True

    box._conn.exec_trace = trace

    def syncs_of(op: Callable[[], object]) -> list[str]:
        statements.clear()
        op()
        return [s for s in statements if s.startswith(("PRAGMA SYNCHRONOUS", "COMMIT"))]

    assert syncs_of(lambda: put(box, "a")) == ["COMMIT"]
    assert syncs_of(lambda: put(box, "b")) == ["COMMIT"]
    relaxed = ["PRAGMA SYNCHRONOUS=NORMAL", "COMMIT", "PRAGMA SYNCHRONOUS=FULL"]
    assert syncs_of(lambda: box.attempted("a")) == relaxed
    assert syncs_of(lambda: box.done("a", answered=True)) == relaxed
    # the reply's next chunk answers it again: one read, no write transaction
    statements.clear()
    assert box.done("a", answered=True) is False
    assert not [s for s in statements if not s.startswith("SELECT")], statements
    assert syncs_of(lambda: box.done("b")) == ["COMMIT"]  # a withdrawal waits for the disk
    assert box._conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
    assert box.count() == 0
    box.close()


def test_outbox_full_refuses_and_keeps_what_is_queued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox_module, "MAX_ITEMS", 3)
    box = Outbox(tmp_path / "outbox.db")
    for item_id in ("a", "b", "c"):
        put(box, item_id)
    with pytest.raises(SyncError) as info:
        put(box, "d")
    assert info.value.key == "outbox.full"
    assert info.value.fields["count"] == 3
    assert "full" in str(info.value) and len(str(info.value).splitlines()) == 1
    assert [i.id for i in box.pending()] == ["a", "b", "c"]
    assert not box.contains("d")
    # the refused put left the database usable
    assert box.done("a")
    assert put(box, "d") == 3
    assert [i.id for i in box.pending()] == ["b", "c", "d"]
    box.close()


def test_outbox_flush_lock_excludes_a_second_holder(tmp_path: Path) -> None:
    first, second = Outbox(tmp_path / "outbox.db"), Outbox(tmp_path / "outbox.db")
    with first.flushing() as held:
        assert held is True
        with second.flushing(block=False) as other:
            assert other is False
        with first.flushing(block=False) as again:  # not re-entrant either
            assert again is False
    with second.flushing(block=False) as other:
        assert other is True
    first.close()
    second.close()


TRY_LOCK = """
import sys
from pathlib import Path
from storage.sqlite import read_rows
from sync.outbox import Outbox

box = Outbox(Path(sys.argv[1]))
with box.flushing(block=False) as held:
    print("held" if held else "busy")
box.close()
"""


def test_outbox_flush_lock_excludes_another_process(tmp_path: Path) -> None:
    path = tmp_path / "outbox.db"
    box = Outbox(path)
    with box.flushing() as held:
        assert held
        assert finish(run_python(TRY_LOCK, str(path))).strip() == "busy"
    assert finish(run_python(TRY_LOCK, str(path))).strip() == "held"
    box.close()
