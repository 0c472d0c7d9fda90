"""A device's gathered ACKs (``edge_agent.acks.DelayedAcks``): the chunks of a reply that
come together go in one ``DeliveryAck``, a chunk with no final one after it goes alone
after the delay, only chunks the device was given are listed, and nothing held is lost at
exit. The send is the component's narrow injected function; here it records the ACKs."""

from __future__ import annotations

import asyncio
import logging

import pytest

from edge_agent.acks import DelayedAcks
from protos import mesh_pb2
from sync.errors import SyncError
from tests.waiting import poll

LONG_S = 60.0
"""a delay no test waits out: an ACK sent before it was sent by something else"""


def chunk(reply_id: str, index: int, final: bool) -> mesh_pb2.Reply:
    return mesh_pb2.Reply(id=reply_id, chunk=index, final=final, text=f"part {index}.")


class Sent:
    """The ACKs handed to the send function, as (reply, state, chunks listed)."""

    def __init__(self, fail: bool = False) -> None:
        self.acks: list[mesh_pb2.DeliveryAck] = []
        self.fail = fail

    async def __call__(self, ack: mesh_pb2.DeliveryAck) -> None:
        if self.fail:
            raise SyncError("hub.unreachable", target="broker", reason="not connected")
        self.acks.append(ack)

    def listed(self) -> list[tuple[str, int, list[int]]]:
        return [(a.reply_id, a.state, [a.chunk, *a.more_chunks]) for a in self.acks]


async def test_the_chunks_of_a_reply_that_come_together_go_in_one_ack() -> None:
    sent = Sent()
    async with DelayedAcks(sent, delay_s=LONG_S) as acks:
        await acks.ack(chunk("r1", 0, False), mesh_pb2.RENDERED)
        await acks.ack(chunk("r1", 1, False), mesh_pb2.RENDERED)
        assert sent.acks == [], "held until the final chunk"
        await acks.ack(chunk("r1", 2, True), mesh_pb2.RENDERED)
        assert sent.listed() == [("r1", mesh_pb2.RENDERED, [2, 0, 1])]
        assert sent.acks[0].at_ms > 0
        assert acks.held == 0
        # a one-chunk reply: its ACK at once, alone
        await acks.ack(chunk("r2", 0, True), mesh_pb2.PLAYED)
        assert sent.listed()[1:] == [("r2", mesh_pb2.PLAYED, [0])]


async def test_a_lost_chunk_is_never_covered_by_a_later_ones_ack() -> None:
    sent = Sent()
    async with DelayedAcks(sent, delay_s=LONG_S) as acks:
        await acks.ack(chunk("r1", 0, False), mesh_pb2.RENDERED)
        await acks.ack(chunk("r1", 2, True), mesh_pb2.RENDERED)  # chunk 1 never came
        await acks.ack(chunk("r1", 2, True), mesh_pb2.RENDERED)  # sent again: ACKed again
    assert sent.listed() == [("r1", mesh_pb2.RENDERED, [2, 0]), ("r1", mesh_pb2.RENDERED, [2])]


async def test_a_chunk_with_no_final_one_after_it_is_acked_after_the_delay() -> None:
    sent = Sent()
    async with DelayedAcks(sent, delay_s=0.05) as acks:
        await acks.ack(chunk("r1", 0, False), mesh_pb2.RENDERED)
        await acks.ack(chunk("r1", 0, False), mesh_pb2.RENDERED)  # a copy: listed once
        await poll(lambda: sent.acks, 10, "the held ACK")
        assert sent.listed() == [("r1", mesh_pb2.RENDERED, [0])]
        assert acks.held == 0
        # the next chunk, once its delay is over: an ACK of its own
        await acks.ack(chunk("r1", 1, True), mesh_pb2.RENDERED)
        assert sent.listed()[1:] == [("r1", mesh_pb2.RENDERED, [1])]


async def test_states_and_replies_are_acked_apart() -> None:
    sent = Sent()
    async with DelayedAcks(sent, delay_s=LONG_S) as acks:
        await acks.ack(chunk("r1", 0, False), mesh_pb2.RENDERED)
        await acks.ack(chunk("r2", 0, False), mesh_pb2.RENDERED)
        await acks.ack(chunk("r1", 0, False), mesh_pb2.PLAYED)
        await acks.ack(chunk("r1", 1, True), mesh_pb2.PLAYED)
        assert sent.listed() == [("r1", mesh_pb2.PLAYED, [1, 0])]
        assert acks.held == 2
    # the exit sends what is still held, without waiting for the delay
    assert sorted(sent.listed()[1:]) == [
        ("r1", mesh_pb2.RENDERED, [0]),
        ("r2", mesh_pb2.RENDERED, [0]),
    ]


async def test_an_ack_that_cannot_be_sent_is_reported_or_logged_never_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sent = Sent(fail=True)
    async with DelayedAcks(sent, delay_s=0.05) as acks:
        await acks.ack(chunk("r1", 0, False), mesh_pb2.RENDERED)
        with pytest.raises(SyncError):  # sent at once: the caller hears it failed
            await acks.ack(chunk("r1", 1, True), mesh_pb2.RENDERED)
        assert acks.held == 0, "the hub sends the chunks again; they are ACKed again"
        with caplog.at_level(logging.INFO, logger="edge_agent.acks"):
            await acks.ack(chunk("r2", 0, False), mesh_pb2.RENDERED)  # sent by its timer
            await poll(lambda: acks.held == 0, 10, "the timer's try")
            await poll(lambda: "ACK of r2 not sent" in caplog.text, 10, "its log line")


async def test_no_timer_outlives_the_component() -> None:
    sent = Sent()
    before = asyncio.all_tasks()
    async with DelayedAcks(sent, delay_s=LONG_S, name="acks-test") as acks:
        for i in range(5):
            await acks.ack(chunk(f"r{i}", 0, False), mesh_pb2.RENDERED)
        assert len(asyncio.all_tasks() - before) == 5, "one timer per held reply"
    assert asyncio.all_tasks() - before == set()
    assert len(sent.acks) == 5, "each sent at exit"
    # an ACK asked for once it is closing (a reply handled while the node stops): at once
    await acks.ack(chunk("late", 0, False), mesh_pb2.RENDERED)
    assert sent.listed()[-1] == ("late", mesh_pb2.RENDERED, [0])
    assert asyncio.all_tasks() - before == set(), "no timer started after the exit"
