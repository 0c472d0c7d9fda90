"""Per-sender lanes (hub/mesh/lanes.py): one sender's messages in order, a sender whose
handler waits holds up no other sender, a full lane refuses, a failing message does not
stop its lane, and leaving cancels every lane's task."""

from __future__ import annotations

import asyncio

from hub.mesh.lanes import LANE_DEPTH, Lanes


async def test_a_senders_messages_keep_their_order_and_others_are_not_held_up() -> None:
    handled: list[tuple[str, int]] = []
    gate = asyncio.Event()
    b_done = asyncio.Event()
    all_done = asyncio.Event()

    async def handle(item: tuple[str, int]) -> None:
        sender, n = item
        if sender == "a" and n == 0:
            await gate.wait()  # a's first message waits (the disk, a PUBACK)
        handled.append(item)
        if item == ("b", 2):
            b_done.set()
        if len(handled) == 6:
            all_done.set()

    async with Lanes(handle) as lanes:
        for n in range(3):
            assert lanes.put("a", ("a", n))
            assert lanes.put("b", ("b", n))
        await asyncio.wait_for(b_done.wait(), 5)
        assert handled == [("b", 0), ("b", 1), ("b", 2)]  # b ran while a waited
        assert lanes.waiting() == 2
        gate.set()
        await asyncio.wait_for(all_done.wait(), 5)
        assert [n for s, n in handled if s == "a"] == [0, 1, 2]


async def test_a_full_lane_refuses_and_a_failure_does_not_stop_the_lane() -> None:
    gate = asyncio.Event()
    seen: list[int] = []
    done = asyncio.Event()
    taken = asyncio.Event()

    async def handle(n: int) -> None:
        taken.set()
        await gate.wait()
        if n == 0:
            raise ValueError("a handler bug")
        seen.append(n)
        if len(seen) == LANE_DEPTH + 1:  # 1..LANE_DEPTH and b's -1
            done.set()

    async with Lanes(handle) as lanes:
        assert all(lanes.put("a", n) for n in range(LANE_DEPTH))
        await asyncio.wait_for(taken.wait(), 5)  # the lane's task took the first one
        assert lanes.put("a", LANE_DEPTH)
        assert not lanes.put("a", LANE_DEPTH + 1)  # full
        assert lanes.put("b", -1)  # another sender's lane is not
        gate.set()
        await asyncio.wait_for(done.wait(), 5)
        a = [n for n in seen if n != -1]
        assert -1 in seen and a == list(range(1, LANE_DEPTH + 1))


async def test_leaving_cancels_every_lane_and_refuses_more() -> None:
    started = asyncio.Event()

    async def handle(_: int) -> None:
        started.set()
        await asyncio.Event().wait()  # never ends by itself

    lanes: Lanes[int] = Lanes(handle, "test-lanes")
    async with lanes:
        lanes.put("a", 1)
        await asyncio.wait_for(started.wait(), 5)
    assert not lanes.put("a", 2)
    left = [t for t in asyncio.all_tasks() if t.get_name().startswith("test-lanes:")]
    assert left == []
