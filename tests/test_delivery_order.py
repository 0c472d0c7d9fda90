"""Delivery's order: a reply's chunks go to the device that asked before the whole reply is
broadcast on the timeline, and nothing is sent before it is kept in ``hub.db``."""

from __future__ import annotations

from pathlib import Path

from hub.brain.base import Outbox
from hub.timeline import HubStore
from hub.turns.delivery import Delivery, Piece, reply_id_for
from protos.clock import now_ms
from storage.group_commit import GroupCommit
from sync import documents as docs


async def test_the_final_chunk_leaves_before_the_timeline_broadcast(tmp_path: Path) -> None:
    store = HubStore(tmp_path / "hub.db")
    order: list[str] = []

    async def send(device: str, kind: int, msg: object, trace: str | None) -> None:
        chunk = getattr(msg, "chunk", -1)
        kept = [c.index for c in store.chunks(getattr(msg, "id", ""))]
        assert chunk in kept  # kept before it is sent
        if getattr(msg, "final", False):  # the whole reply is in hub.db when it leaves
            replies = store.conn.execute("SELECT id FROM timeline WHERE kind='reply'").fetchall()
            assert len(replies) == 1
        order.append(f"{device}:chunk{chunk}")

    def hold(entries: list[docs.Entry]) -> None:
        order.append("timeline:" + ",".join(e.kind for e in entries))

    try:
        delivery = Delivery(
            store, send=send, hold=hold, commit=lambda o: None, gateway=lambda: None
        )
        t = now_ms()
        adm = store.admit_utterance(
            utterance_id="u1",
            device="mac1",
            text="what can you do",
            ts_ms=t,
            received_ms=t,
            trace_id="t1",
            meta={},
            replay_state=None,
        )
        rid = reply_id_for("u1")
        await delivery.deliver(adm, rid, [Piece("I can help.", False, "", "rules")])
        await delivery.deliver(adm, rid, [Piece("Ask me anything.", True, "", "rules")], start=1)
        assert order == ["mac1:chunk0", "mac1:chunk1", "timeline:reply"]
    finally:
        store.close()


async def test_chunks_made_together_are_kept_in_one_commit_and_synced_once(
    tmp_path: Path,
) -> None:
    """A reply made whole and split (a rule-based brain's: ``ReplyChunk.more``) is kept in
    one transaction and goes out after one sync: the flush before the second chunk has
    nothing left to sync."""
    parts = Outbox("task-1", "t1", "mac1", "rule-based", intent="?").make(
        "I heard: bench trip 7. " + "x " * 200 + "And that is all."
    )
    assert len(parts) >= 2
    assert [c.more for c in parts] == [True] * (len(parts) - 1) + [False]
    assert [c.final for c in parts] == [False] * (len(parts) - 1) + [True]
    async with GroupCommit() as group:
        store = HubStore(tmp_path / "hub.db", group=group)
        commits: list[int] = []
        synced_at_send: list[tuple[int, list[int]]] = []

        async def send(device: str, kind: int, msg: object, trace: str | None) -> None:
            await group.flush()  # what every envelope out awaits (hub.mesh.port)
            kept = [c.index for c in store.chunks(getattr(msg, "id", ""))]
            synced_at_send.append((group.flushes, kept))

        def hold(entries: list[docs.Entry]) -> None:
            return None

        try:
            delivery = Delivery(
                store, send=send, hold=hold, commit=lambda o: None, gateway=lambda: None
            )
            t = now_ms()
            adm = store.admit_utterance(
                utterance_id="u1", device="mac1", text="bench trip 7", ts_ms=t, received_ms=t,
                trace_id="t1", meta={}, replay_state=None,
            )  # fmt: skip
            await group.flush()

            def committed() -> bool:
                commits.append(1)
                return False  # go on with the commit

            store.conn.set_commit_hook(committed)
            pieces = [Piece(c.text, c.final, c.task_id, c.brain, c.intent) for c in parts]
            await delivery.deliver(adm, reply_id_for("u1"), pieces)
            store.conn.set_commit_hook(None)
            everything = list(range(len(parts)))
            assert commits == [1]  # every chunk and the whole reply: one transaction
            assert [kept for _, kept in synced_at_send] == [everything] * len(parts)
            flushes = {n for n, _ in synced_at_send}
            assert len(flushes) == 1, synced_at_send  # one sync before the first chunk only
            reply = store.reply_for("u1")
            assert reply is not None and reply.text == " ".join(c.text for c in parts)
        finally:
            store.close()
