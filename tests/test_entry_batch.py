"""Hub-written entries published together: one document change and one broadcast
(:mod:`hub.mesh.entry_batch`), each caller answered once its own entries are out."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from hub.mesh.entry_batch import MAX_BATCH, EntryBatch
from protos import sync_pb2
from sync import documents as docs

DEADLINE_S = 10.0


async def queued(batch: EntryBatch, n: int) -> None:
    """Let the loop run until ``n`` callers wait behind the flight (at most 1000 turns)."""
    for _ in range(1000):
        if batch.waiting >= n:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{batch.waiting} callers queued, not {n}")


def entry(i: int) -> docs.Entry:
    return docs.Entry(f"e{i}", "hub", 1_700_000_000_000 + i, "reply", f"text {i}", i)


class Flights:
    """What the batch wrote and sent; ``gate`` holds a send until it is set."""

    def __init__(self) -> None:
        self.written: list[list[str]] = []
        self.sent = 0
        self.after: list[list[str]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.in_send = asyncio.Event()
        self.fail: Exception | None = None
        self.on_after: Callable[[], object] = lambda: None
        """run when a flight's entries are told to ``after``"""
        self.permits: asyncio.Semaphore | None = None
        """when set: each send takes one permit (instead of waiting for ``gate``)"""

    def write(self, entries: list[docs.Entry]) -> list[sync_pb2.DocUpdate]:
        if self.fail is not None:
            raise self.fail
        self.written.append([e.id for e in entries])
        return [sync_pb2.DocUpdate(doc="t", blob=b"x")]

    async def send(self, updates: list[sync_pb2.DocUpdate]) -> None:
        self.in_send.set()
        if self.permits is not None:
            await self.permits.acquire()
        else:
            await self.gate.wait()
        self.sent += 1

    def done(self, entries: list[docs.Entry]) -> None:
        self.after.append([e.id for e in entries])
        self.on_after()

    def batch(self) -> EntryBatch:
        return EntryBatch(self.write, self.send, self.done)


def held() -> tuple[Flights, EntryBatch]:
    """A batch whose sends wait for ``gate`` (closed)."""
    f = Flights()
    f.gate.clear()
    return f, f.batch()


async def flying(f: Flights, batch: EntryBatch) -> asyncio.Task[None]:
    """e1's publish, started and waiting in its send."""
    first = asyncio.create_task(batch.publish([entry(1)]))
    await f.in_send.wait()
    return first


async def test_a_lone_publish_is_written_and_sent_at_once() -> None:
    f = Flights()
    batch = f.batch()
    async with asyncio.timeout(DEADLINE_S):
        await batch.publish([entry(1)])
        await batch.publish([])
    assert f.written == [["e1"]] and f.sent == 1 and f.after == [["e1"]]
    assert (batch.flights, batch.entries) == (1, 1)


async def test_publishes_made_while_one_is_in_flight_share_the_next_flight() -> None:
    f, batch = held()
    async with asyncio.timeout(DEADLINE_S), asyncio.TaskGroup() as tg:
        first = tg.create_task(batch.publish([entry(1)]))
        await f.in_send.wait()
        rest = [tg.create_task(batch.publish([entry(i)])) for i in range(2, 6)]
        await queued(batch, 4)  # the four are queued behind the first flight
        assert not any(t.done() for t in [first, *rest])
        f.gate.set()
    assert f.written == [["e1"], ["e2", "e3", "e4", "e5"]] and f.sent == 2
    assert f.after == f.written


async def test_a_failed_write_reaches_every_caller_of_its_batch_and_the_next_flies() -> None:
    f, batch = held()
    async with asyncio.timeout(DEADLINE_S):
        first = await flying(f, batch)
        doomed = [asyncio.create_task(batch.publish([entry(i)])) for i in (2, 3)]
        await queued(batch, 2)
        f.fail = OSError(28, "No space left on device")
        f.gate.set()
        await first
        for t in doomed:
            with pytest.raises(OSError, match="No space"):
                await t
        f.fail = None
        await batch.publish([entry(4)])
    assert f.written == [["e1"], ["e4"]] and f.after == [["e1"], ["e4"]]


async def test_a_caller_cancelled_while_waiting_still_has_its_entries_published() -> None:
    f, batch = held()
    async with asyncio.timeout(DEADLINE_S):
        first = await flying(f, batch)
        gone = asyncio.create_task(batch.publish([entry(2)]))
        kept = asyncio.create_task(batch.publish([entry(3)]))
        await queued(batch, 2)
        gone.cancel()
        f.gate.set()
        await asyncio.gather(first, kept)
        assert gone.cancelled()
    assert f.written == [["e1"], ["e2", "e3"]]


async def test_a_leader_cancelled_in_flight_hands_its_batch_mates_to_the_next_flight() -> None:
    f, batch = held()
    async with asyncio.timeout(DEADLINE_S):
        first = await flying(f, batch)
        second = asyncio.create_task(batch.publish([entry(2)]))
        await queued(batch, 1)
        f.in_send.clear()
        f.gate.clear()
        first.cancel()  # in its send: e1 was written, not sent
        await f.in_send.wait()  # e2's caller leads the next flight
        f.gate.set()
        await second
        assert first.cancelled()
    assert f.written == [["e1"], ["e1", "e2"]] and f.after == [["e1", "e2"]]


async def test_one_flight_carries_at_most_max_batch_callers() -> None:
    f, batch = held()
    n = MAX_BATCH + 5
    async with asyncio.timeout(DEADLINE_S), asyncio.TaskGroup() as tg:
        tg.create_task(batch.publish([entry(0)]))
        await f.in_send.wait()
        for i in range(1, n + 1):
            tg.create_task(batch.publish([entry(i)]))
        await queued(batch, n)
        f.gate.set()
    assert [len(w) for w in f.written] == [1, MAX_BATCH, 5]
    assert sorted(e for w in f.written for e in w) == sorted(f"e{i}" for i in range(n + 1))


async def test_a_handed_over_leader_cancelled_in_flight_loses_no_entry() -> None:
    f = Flights()
    f.permits = asyncio.Semaphore(0)
    batch = f.batch()
    async with asyncio.timeout(DEADLINE_S):
        first = await flying(f, batch)
        leader = asyncio.create_task(batch.publish([entry(2)]))
        await queued(batch, 1)
        f.in_send.clear()
        f.permits.release()  # e1's send ends: e2's caller flies, and waits in its send
        await first
        await f.in_send.wait()
        follower = asyncio.create_task(batch.publish([entry(3)]))
        await queued(batch, 1)
        f.in_send.clear()
        leader.cancel()
        await f.in_send.wait()  # the follower flies e2 again, with e3
        f.permits.release()
        await follower
        assert leader.cancelled()
    assert f.written == [["e1"], ["e2"], ["e2", "e3"]] and f.sent == 2


async def test_a_caller_cancelled_as_it_is_handed_the_next_flight_hands_it_on() -> None:
    """Cancelled after the flight before landed and made it the next leader, but before it
    ran: the flight is handed on (nothing stalls), and its entries still go."""
    f, batch = held()
    async with asyncio.timeout(DEADLINE_S):
        first = await flying(f, batch)
        doomed = asyncio.create_task(batch.publish([entry(2)]))
        await queued(batch, 1)
        loop = asyncio.get_running_loop()
        # scheduled while e1's flight is still in the air: runs after the flight handed
        # itself to e2's caller, before that caller resumes
        f.on_after = lambda: loop.call_soon(doomed.cancel)
        f.gate.set()
        await first
        with pytest.raises(asyncio.CancelledError):
            await doomed
        await batch.publish([entry(3)])
    assert f.written == [["e1"], ["e2", "e3"]]


async def test_a_held_entry_goes_with_the_next_flight() -> None:
    f = Flights()
    batch = f.batch()
    async with asyncio.timeout(DEADLINE_S):
        batch.hold([entry(1)])  # the utterance: the turn goes on at once
        assert f.written == [] and batch.held == 1
        await batch.publish([entry(2)])  # its reply
    assert f.written == [["e1", "e2"]] and f.sent == 1 and f.after == [["e1", "e2"]]
    assert batch.held == 0 and (batch.flights, batch.entries) == (1, 2)


async def test_a_held_entry_flies_on_its_own_when_no_flight_comes() -> None:
    f = Flights()
    batch = EntryBatch(f.write, f.send, f.done, hold_s=0.05)
    loop = asyncio.get_running_loop()
    flew = asyncio.Event()
    f.on_after = flew.set
    async with asyncio.timeout(DEADLINE_S), asyncio.TaskGroup() as tg:
        runner = tg.create_task(batch.run(), name="held")
        batch.hold([entry(1)])
        held_at = loop.time()
        await flew.wait()
        flew_at = loop.time()
        runner.cancel()
    assert f.written == [["e1"]] and f.sent == 1 and batch.held == 0
    assert flew_at - held_at >= 0.05  # it waited for a reply to go with first


async def test_held_entries_of_a_failed_flight_are_held_again() -> None:
    f = Flights()
    batch = f.batch()
    async with asyncio.timeout(DEADLINE_S):
        batch.hold([entry(1)])
        f.fail = OSError(28, "No space left on device")
        with pytest.raises(OSError, match="No space"):
            await batch.publish([entry(2)])
        assert batch.held == 1  # e2's caller was told; e1 has nobody waiting: kept
        f.fail = None
        await batch.publish([entry(3)])
    assert f.written == [["e1", "e3"]] and batch.held == 0


async def test_a_reply_held_soon_flies_at_once_and_takes_the_held_utterance() -> None:
    """A finished reply (``soon``) does not wait :attr:`hold_s`: with no flight in the last
    ``gather_s`` it flies at once — and wakes the task that waits for the utterance held
    before it, which goes with it."""
    f = Flights()
    batch = EntryBatch(f.write, f.send, f.done, hold_s=30.0, gather_s=30.0)
    loop = asyncio.get_running_loop()
    flew = asyncio.Event()
    f.on_after = flew.set
    async with asyncio.timeout(DEADLINE_S), asyncio.TaskGroup() as tg:
        runner = tg.create_task(batch.run(), name="held")
        batch.hold([entry(1)])  # the utterance: 30 s
        await asyncio.sleep(0)  # the task now waits for it
        held_at = loop.time()
        batch.hold([entry(2)], soon=True)  # its reply
        await flew.wait()
        runner.cancel()
    assert f.written == [["e1", "e2"]] and f.sent == 1 and batch.held == 0
    assert loop.time() - held_at < 5.0  # not the utterance's 30 s, nor gather_s


async def test_replies_held_soon_after_a_flight_share_the_next_one() -> None:
    """Replies finished within ``gather_s`` of the last flight wait for it to pass and then
    fly together: one change and one broadcast for several turns."""
    f = Flights()
    gather = 0.5
    loop = asyncio.get_running_loop()
    starts: list[float] = []

    def write(entries: list[docs.Entry]) -> list[sync_pb2.DocUpdate]:
        starts.append(loop.time())
        return f.write(entries)

    batch = EntryBatch(write, f.send, f.done, hold_s=30.0, gather_s=gather)
    landed = asyncio.Event()
    f.on_after = landed.set
    async with asyncio.timeout(DEADLINE_S), asyncio.TaskGroup() as tg:
        runner = tg.create_task(batch.run(), name="held")
        batch.hold([entry(1)], soon=True)  # none flew lately: at once
        await landed.wait()
        landed.clear()
        batch.hold([entry(2)], soon=True)
        await asyncio.sleep(0)  # the task waits for gather_s to pass
        batch.hold([entry(3)], soon=True)
        batch.hold([entry(4)], soon=True)
        await landed.wait()
        runner.cancel()
    assert f.written == [["e1"], ["e2", "e3", "e4"]] and f.sent == 2
    assert starts[1] - starts[0] >= gather * 0.99  # spaced by gather_s


async def test_a_drain_flies_what_is_held_at_once() -> None:
    """A hub that stops flies the replies it holds (not at its next start)."""
    f = Flights()
    batch = EntryBatch(f.write, f.send, f.done, hold_s=30.0, gather_s=30.0)
    async with asyncio.timeout(DEADLINE_S):
        await batch.drain()  # nothing held: nothing flies
        batch.hold([entry(1)], soon=True)
        batch.hold([entry(2)])
        await batch.drain()
        f.fail = OSError(28, "No space left on device")
        batch.hold([entry(3)], soon=True)
        await batch.drain()  # logged, not raised: still held
    assert f.written == [["e1", "e2"]] and f.sent == 1 and batch.held == 1
