"""A voice utterance's audio in the outbox: committed with the item, sent before it in
index order as AUDIO_CHUNK envelopes on every attempt, removed with it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from edge_agent.node import DeviceNode, NodeOptions
from protos import mesh_pb2, voice_pb2
from provisioning.bundle import Bundle, flash
from provisioning.home import Home
from sync.envelope import HUB, Opened, Opener, Peer, ReplayGuard
from sync.outbox import MAX_CHUNKS, Outbox
from tests.checkpoint_kit import held_checkpoints
from tests.waiting import poll


def test_chunks_are_committed_with_the_item_in_order(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "outbox.db")
    assert box.put("u-1", mesh_pb2.UTTERANCE, b"p1", "t", 1, chunks=[b"a", b"b", b"c"]) == 1
    assert box.put("u-2", mesh_pb2.UTTERANCE, b"p2", "t", 2) == 2
    assert box.chunks("u-1") == [b"a", b"b", b"c"] and box.chunks("u-2") == []
    # idempotent: the same id again changes neither the item nor its audio
    assert box.put("u-1", mesh_pb2.UTTERANCE, b"other", "t", 3, chunks=[b"x"]) == 2
    assert box.chunks("u-1") == [b"a", b"b", b"c"] and box.pending()[0].payload == b"p1"
    box.close()
    again = Outbox(tmp_path / "outbox.db")  # survives a restart
    assert again.chunks("u-1") == [b"a", b"b", b"c"]
    assert again.done("u-1") and again.chunks("u-1") == [] and not again.done("u-1")
    again.close()


def test_chunk_limits(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "outbox.db")
    with pytest.raises(ValueError):
        box.put("u-1", 1, b"p", "t", 1, chunks=[b"x"] * (MAX_CHUNKS + 1))
    with pytest.raises(ValueError):
        box.put("u-1", 1, b"p", "t", 1, chunks=[b"x" * (192 * 1024 + 1)])
    assert box.count() == 0
    box.close()


class FakeMqtt:
    """Fake MQTT session: records what the node publishes; the fake hub answers an
    utterance (or, once, drops the link while it is in flight)."""

    def __init__(self, node: DeviceNode, opener: Opener, drop_first: bool) -> None:
        self.node = node
        self.opener = opener
        self.drop_first = drop_first
        self.connections = 1
        self.connected = asyncio.Event()
        self.connected.set()
        self.seen: list[Opened] = []

    async def publish(self, topic: str, payload: bytes, *, qos: int = 1) -> None:
        opened = self.opener.open(payload)
        assert isinstance(opened, Opened), opened
        self.seen.append(opened)
        if opened.kind != mesh_pb2.UTTERANCE:
            return
        utt = opened.payload
        assert isinstance(utt, mesh_pb2.Utterance)
        if self.drop_first and utt.source == "voice":
            self.drop_first = False
            self.connections += 1
            self.node._relinked.set()
            return
        self.node._waiters[utt.id].set_result(mesh_pb2.Reply(id="r", utterance_id=utt.id))


@pytest.mark.parametrize("drop_first", [False, True])
async def test_flush_sends_the_audio_before_its_utterance(tmp_path: Path, drop_first: bool) -> None:
    home = Home.init(tmp_path / "home")
    flash(home, profile_name="glasses", name="g1", out=tmp_path / "bundle")
    bundle = Bundle.load(tmp_path / "bundle")

    async def on_reply(reply: mesh_pb2.Reply, opened: Opened, fresh: bool) -> None:
        pass

    node = DeviceNode(bundle, NodeOptions(mode="say"), on_reply)
    device = Peer(bundle.device_id, bundle.keys.sign_pk, bundle.keys.box_pk)
    hub_opener = Opener(
        home_id=home.home_id,
        node_id=HUB,
        box_key=home.hub_keys.box,
        lookup=lambda sender: device if sender == bundle.device_id else None,
        replay=ReplayGuard(),
    )
    fake = FakeMqtt(node, hub_opener, drop_first)
    node.mqtt = fake  # type: ignore[assignment]
    try:
        typed, _ = node.queue_utterance("typed first")
        utt = mesh_pb2.Utterance(id="u-voice", channel="glasses", source="voice")
        node.queue_voice(utt, [b"one", b"two", b"three"], "trace-v")
        assert await node.flush()
    finally:
        node._close_files()
    kinds = [
        (o.kind, o.payload.id if o.kind == mesh_pb2.UTTERANCE else o.payload.index)  # type: ignore[attr-defined]
        for o in fake.seen
    ]
    voice_attempt = [
        (mesh_pb2.AUDIO_CHUNK, 0),
        (mesh_pb2.AUDIO_CHUNK, 1),
        (mesh_pb2.AUDIO_CHUNK, 2),
        (mesh_pb2.UTTERANCE, "u-voice"),
    ]
    attempts = 2 if drop_first else 1  # a retry sends the whole audio again, first
    assert kinds == [(mesh_pb2.UTTERANCE, typed), *voice_attempt * attempts]
    chunks = [o for o in fake.seen if o.kind == mesh_pb2.AUDIO_CHUNK]
    datas = [c.payload.data for c in chunks]  # type: ignore[attr-defined]
    assert datas == [b"one", b"two", b"three"] * attempts
    assert all(
        isinstance(c.payload, voice_pb2.AudioChunk)
        and c.payload.utterance_id == "u-voice"
        and c.payload.total == 3
        and c.trace_id == "trace-v"
        for c in chunks
    )


async def test_the_outbox_is_checkpointed_on_its_own_thread_not_in_a_put(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Audio fills the outbox's WAL: the put whose commit passes the threshold does not
    copy it into the database (on the device's loop, two syncs on its flash); one
    checkpoint runs on the outbox's checkpoint thread while puts go on, then the WAL is
    written from its beginning again; every item and its audio are still there, in order."""
    path = tmp_path / "outbox.db"
    box = Outbox(path)
    audio = [bytes([i]) * 20_000 for i in range(3)]
    try:
        with held_checkpoints(box.checkpointer, monkeypatch) as ran:
            before = path.stat().st_size
            for i in range(6):  # about 15 pages each: the threshold is passed at once
                box.put(f"u-{i}", mesh_pb2.UTTERANCE, b"p", "t", i, chunks=audio)
            await poll(lambda: ran)
            assert len(ran) == 1 and ran[0].startswith("checkpoint")
            assert path.stat().st_size == before  # nothing copied by the puts meanwhile
        await poll(lambda: box.checkpointer.checkpoints == 1)
        assert path.stat().st_size > before + 6 * 60_000 // 2
        wal = os.stat(f"{path}-wal").st_size
        for i in range(6, 12):
            box.put(f"u-{i}", mesh_pb2.UTTERANCE, b"p", "t", i, chunks=audio)
        assert os.stat(f"{path}-wal").st_size < 1.5 * wal  # from the WAL's start again
        await poll(lambda: box.checkpointer.idle)
    finally:
        box.close()  # its checkpoint thread too, whatever failed
    again = Outbox(path)
    try:
        assert [item.id for item in again.pending()] == [f"u-{i}" for i in range(12)]
        assert all(again.chunks(f"u-{i}") == audio for i in range(12))
    finally:
        again.close()
