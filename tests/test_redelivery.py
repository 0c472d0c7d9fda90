"""Reply chunks an online device has not ACKed go again, with backoff
(:mod:`hub.turns.redelivery`)."""

from __future__ import annotations

import asyncio

from hub.timeline import Chunk
from hub.turns.redelivery import Redelivery


def chunk(reply: str, index: int = 0, device: str = "dev-a") -> Chunk:
    return Chunk(reply, index, device, f"u-{reply}", "", "Done.", True, "rules", "", 1)


class World:
    """Online devices, their unACKed chunks and what was sent, with a clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0
        self.online: list[str] = ["dev-a"]
        self.unacked: dict[str, list[Chunk]] = {"dev-a": [], "dev-b": []}
        self.sent: list[tuple[str, int, str]] = []

    async def send(self, c: Chunk) -> None:
        self.sent.append((c.reply_id, c.index, c.device))

    def redelivery(self) -> Redelivery:
        return Redelivery(
            online=lambda: self.online,
            unacked=lambda device: list(self.unacked[device]),
            send=self.send,
            clock=lambda: self.now,
            first_s=3.0,
            max_s=10.0,
        )


async def test_an_unacked_chunk_goes_again_with_growing_waits_until_acked() -> None:
    w = World()
    r = w.redelivery()
    w.unacked["dev-a"] = [chunk("r1")]
    assert await r.sweep() == 0  # just sent by its turn: first seen now
    w.now += 2.9
    assert await r.sweep() == 0
    w.now += 0.1
    assert await r.sweep() == 1 and w.sent == [("r1", 0, "dev-a")]
    w.now += 5.9  # the next wait is twice as long: 6 s
    assert await r.sweep() == 0
    w.now += 0.1
    assert await r.sweep() == 1
    for _ in range(3):  # then 10 s (the cap), and 10 s again
        w.now += 9.99
        assert await r.sweep() == 0
        w.now += 0.01
        assert await r.sweep() == 1
    assert len(w.sent) == 5 and r.sent == 5
    w.unacked["dev-a"] = []  # ACKed: forgotten
    w.now += 100
    assert await r.sweep() == 0 and len(w.sent) == 5


async def test_only_online_devices_get_chunks_and_a_return_starts_the_wait_afresh() -> None:
    w = World()
    r = w.redelivery()
    w.unacked["dev-a"] = [chunk("r1")]
    w.unacked["dev-b"] = [chunk("r2", device="dev-b")]  # offline: sent when it is back
    await r.sweep()
    w.now += 3
    await r.sweep()
    assert w.sent == [("r1", 0, "dev-a")]
    w.online = ["dev-b"]  # dev-a went offline: its backoff is dropped
    await r.sweep()
    w.now += 3
    await r.sweep()
    assert w.sent[1:] == [("r2", 0, "dev-b")]
    w.online = ["dev-a", "dev-b"]
    await r.sweep()  # dev-a is back (its online announcement resent everything)
    w.now += 2
    await r.sweep()
    assert len(w.sent) == 2  # dev-a waits its first 3 s again; dev-b's wait is 6 s
    w.now += 1
    await r.sweep()
    assert w.sent[2:] == [("r1", 0, "dev-a")]


async def test_each_chunk_of_a_reply_keeps_its_own_wait() -> None:
    w = World()
    r = w.redelivery()
    w.unacked["dev-a"] = [chunk("r1", 0)]
    await r.sweep()
    w.now += 1
    w.unacked["dev-a"].append(chunk("r1", 1))
    await r.sweep()
    w.now += 2
    await r.sweep()
    assert w.sent == [("r1", 0, "dev-a")]
    w.now += 1
    await r.sweep()
    assert w.sent == [("r1", 0, "dev-a"), ("r1", 1, "dev-a")]


async def test_the_task_sweeps_until_cancelled_and_survives_a_failing_sweep() -> None:
    w = World()
    calls = 0
    swept = asyncio.Event()

    def unacked(device: str) -> list[Chunk]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OSError(5, "I/O error")  # logged; the next sweep runs
        if calls >= 3:
            swept.set()
        return []

    r = Redelivery(online=lambda: ["dev-a"], unacked=unacked, send=w.send, sweep_s=0.01)
    async with asyncio.timeout(10), asyncio.TaskGroup() as tg:
        task = tg.create_task(r.run(), name="redelivery")
        await swept.wait()
        task.cancel()
    assert calls >= 3 and task.cancelled()
