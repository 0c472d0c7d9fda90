"""Delivery's order: a reply's chunks go to the device that asked before the whole reply is
broadcast on the timeline, and nothing is sent before it is kept in ``hub.db``."""

from __future__ import annotations

from pathlib import Path

from hub.timeline import HubStore
from hub.turns.delivery import Delivery, Piece, reply_id_for
from protos.clock import now_ms
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

    async def publish(entries: list[docs.Entry]) -> None:
        order.append("timeline:" + ",".join(e.kind for e in entries))

    try:
        delivery = Delivery(
            store, send=send, publish=publish, commit=lambda o: None, gateway=lambda: None
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
