"""The persisted task state machine: legal transitions only, trace ids, steps, histories
and the run budget survive reopening the database."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub.brain.base import split_chunks
from hub.brain.errors import BrainError
from hub.brain.tasks import STATES, TRANSITIONS, TaskStore


def make(store: TaskStore, task_id: str = "t1") -> None:
    store.create(
        task_id, trace_id="trace-1", run_id="run-1", owner="owner", scope="owner", kind="turn"
    )


def test_transitions_follow_the_machine(tmp_path: Path) -> None:
    store = TaskStore(tmp_path / "tasks.db")
    make(store)
    rec, fresh = store.create(
        "t1", trace_id="other", run_id="r", owner="o", scope="guest", kind="turn"
    )
    assert not fresh and rec.trace_id == "trace-1"  # idempotent on the id
    with pytest.raises(BrainError) as err:
        store.move("t1", "acting")  # received → acting skips admission
    assert err.value.key == "task.transition"
    store.walk("t1", "admitted", "thinking", "acting")
    store.move("t1", "waiting_for_consent", waiting_for="send")
    store.walk("t1", "admitted", "thinking")  # never backwards
    assert store.require("t1").state == "waiting_for_consent"
    store.move("t1", "acting")
    store.move("t1", "verifying")
    store.move("t1", "done", result={"report": "ok"})
    for s in STATES:
        if s != "done":
            with pytest.raises(BrainError):
                store.move("t1", s)
    assert store.history_of_states("t1") == [
        "received",
        "admitted",
        "thinking",
        "acting",
        "waiting_for_consent",
        "acting",
        "verifying",
        "done",
    ]
    assert all(not TRANSITIONS[f] for f in ("done", "failed"))
    with pytest.raises(BrainError) as err:
        store.move("nope", "admitted")
    assert err.value.key == "task.unknown"
    store.close()


def test_a_task_is_created_and_moved_on_in_one_step(tmp_path: Path) -> None:
    """What a rule-based turn does first: received → admitted → thinking, one transaction,
    the same transitions as a create and a walk; an existing id is returned as it is."""
    store = TaskStore(tmp_path / "tasks.db")
    rec, fresh = store.create(
        "t1", trace_id="tr", run_id="r", owner="o", scope="owner", kind="turn",
        then=("admitted", "thinking"),
    )  # fmt: skip
    assert fresh and rec.state == "thinking" and store.require("t1").state == "thinking"
    assert store.history_of_states("t1") == ["received", "admitted", "thinking"]
    again, fresh = store.create(
        "t1", trace_id="tr", run_id="r", owner="o", scope="owner", kind="turn",
        then=("admitted", "thinking", "acting"),
    )  # fmt: skip
    assert not fresh and again.state == "thinking"
    with pytest.raises(BrainError):
        store.create(
            "t2", trace_id="tr", run_id="r", owner="o", scope="owner", kind="turn",
            then=("acting",),
        )  # fmt: skip
    assert store.get("t2") is None  # the illegal move undid the whole creation
    store.close()


def test_everything_survives_reopening(tmp_path: Path) -> None:
    store = TaskStore(tmp_path / "tasks.db")
    make(store, "t1")
    make(store, "t2")
    store.walk("t1", "admitted", "thinking", "acting")
    store.start_step("t1", "send", "t1.send", {"to": "a@b.org"})
    store.finish_step("t1", "send", {"status": "waiting", "card_id": "c1"})
    store.start_step("t1", "check", "t1.check", {})
    store.save_history("t1", b'[{"kind":"request"}]')
    assert [store.take_budget("run-1", 3) for _ in range(4)] == [1, 2, 3, None]
    store.move("t2", "failed", "test")
    store.close()

    again = TaskStore(tmp_path / "tasks.db")
    assert [t.task_id for t in again.unfinished()] == ["t1"]
    t1 = again.require("t1")
    assert (t1.state, t1.trace_id) == ("acting", "trace-1")
    send, check = again.step("t1", "send"), again.step("t1", "check")
    assert send is not None and send.status == "waiting" and send.args == {"to": "a@b.org"}
    assert check is not None and check.receipt is None and check.call_id == "t1.check"
    assert again.start_step("t1", "send", "other-id").call_id == "t1.send"  # call id kept
    assert again.step_for_call("t1", "t1.send") == send
    assert again.history("t1") == b'[{"kind":"request"}]'
    assert again.budget_used("run-1") == 3 and again.take_budget("run-1", 3) is None
    again.close()


def test_reply_chunks_are_whole_sentences() -> None:
    text = "OK. I'll switch on the kitchen light! Then? " + "word " * 80
    chunks = split_chunks(text, limit=60)
    assert chunks[0] == "OK. I'll switch on the kitchen light! Then?"
    assert all(len(c) <= 60 for c in chunks)
    assert " ".join(chunks).split() == text.split()
    assert split_chunks("你好。我在。") == ["你好。我在。"]
    assert split_chunks("") == []


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab c.!?…。！？\n\t中文", max_size=400), st.integers(20, 240))
def test_reply_chunks_keep_every_word_in_order_and_within_the_limit(text: str, limit: int) -> None:
    chunks = split_chunks(text, limit=limit)
    assert all(c and c == c.strip() and len(c) <= limit for c in chunks)
    assert "".join("".join(chunks).split()) == "".join(text.split())


def test_finish_closes_a_task_through_verifying_in_one_transaction(tmp_path: Path) -> None:
    store = TaskStore(tmp_path / "tasks.db")
    make(store)
    store.walk("t1", "admitted", "thinking")
    commits: list[int] = []

    def committed() -> bool:
        commits.append(1)
        return False  # go on with the commit

    store.db.set_commit_hook(committed)
    done = store.finish("t1", "done", result={"report": "It is noon."})
    assert commits == [1]  # verifying and done together
    assert (done.state, done.result) == ("done", {"report": "It is noon."})
    assert store.require("t1") == done
    assert store.history_of_states("t1")[-2:] == ["verifying", "done"]
    again = store.finish("t1", "failed", "too late")  # finished: left as it is
    assert again == done and store.history_of_states("t1")[-1] == "done"
    store.db.set_commit_hook(None)

    make(store, "t2")
    store.walk("t2", "admitted", "thinking", "acting", "verifying")
    failed = store.finish("t2", "failed", "no shop")  # past verifying already: one move
    assert failed.state == "failed"
    assert store.history_of_states("t2")[-2:] == ["verifying", "failed"]
    with pytest.raises(BrainError):
        store.finish("t2", "thinking")  # only a final state closes a task
    store.close()


def test_a_turns_transitions_are_numbered_in_order_with_one_write_each(tmp_path: Path) -> None:
    """A rule-based turn's two writes — create (received → admitted → thinking) and finish
    (→ verifying → done) — each number their transitions after the task's last one, with
    one update of the task and one insert of its transitions (statements counted)."""
    store = TaskStore(tmp_path / "tasks.db")
    writes: list[str] = []

    def traced(_cursor: object, sql: str, _bindings: object) -> bool:
        words = sql.replace("OR IGNORE ", "").split()
        if words[0] in ("INSERT", "UPDATE"):
            writes.append(f"{words[0]} {words[2] if words[0] == 'INSERT' else words[1]}")
        return True

    store.db.exec_trace = traced
    store.create(
        "t1", trace_id="tr", run_id="r", owner="o", scope="owner", kind="turn",
        then=("admitted", "thinking"),
    )  # fmt: skip
    assert writes == ["INSERT tasks", "INSERT transitions"]
    writes.clear()
    store.move("t1", "thinking", "noted")  # the same state: no transition
    store.finish("t1", "done", "all said", result={"report": "It is noon."})
    assert writes == ["UPDATE tasks", "UPDATE tasks", "INSERT transitions"]
    store.db.exec_trace = None
    rows = store.db.execute(
        "SELECT seq, src, dst, note FROM transitions WHERE task_id='t1' ORDER BY seq"
    ).fetchall()
    assert rows == [
        (0, "", "received", ""),
        (1, "received", "admitted", ""),
        (2, "admitted", "thinking", ""),
        (3, "thinking", "verifying", ""),
        (4, "verifying", "done", "all said"),
    ]
    rec = store.require("t1")
    assert (rec.state, rec.result) == ("done", {"report": "It is noon."})
    store.close()


def test_a_tasks_steps_are_read_in_one_query(tmp_path: Path) -> None:
    store = TaskStore(tmp_path / "tasks.db")
    make(store)
    store.start_step("t1", "send", "t1.send", {"to": "a@b.org"})
    store.start_step("t1", "check", "t1.check")
    store.finish_step("t1", "send", {"status": "succeeded"})
    queries: list[str] = []

    def traced(_cursor: object, sql: str, _bindings: object) -> bool:
        queries.append(sql)
        return True

    store.db.exec_trace = traced
    steps = store.steps("t1")
    store.db.exec_trace = None
    assert len(queries) == 1
    assert steps == [store.step("t1", "check"), store.step("t1", "send")]  # last updated last
    assert [(s.step, s.status, s.receipt, s.args) for s in steps] == [
        ("check", None, None, {}),
        ("send", "succeeded", {"status": "succeeded"}, {"to": "a@b.org"}),
    ]
    assert store.steps("unknown") == []
    store.close()
