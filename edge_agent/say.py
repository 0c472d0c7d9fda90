"""``yimi say``: send one typed utterance from a device and print the hub's reply.

The reply is printed as its chunks come (one line per reply; each chunk ACKed ``RENDERED``)
until its final chunk.

The utterance is committed to the outbox first. If the hub cannot be reached it stays
there ("queued"), exit status 3, and the running edge daemon or the next ``yimi say``
delivers it. Older queued items are delivered first, in order.

If the reply does not come in time but the hub has *admitted* the utterance — its timeline
entry (the hub publishes it as it admits, before the brain answers) reached this device, or
a first chunk of the reply did — the utterance is not queued again: it is taken out of the
outbox (the hub has it, durably) and ``yimi say`` says the reply is late and where it will
appear (the timeline, ``yimi timeline --bundle …``), exit status 4. A slow model is not an
unreachable hub.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from edge_agent.node import DeviceNode, NodeOptions
from protos import mesh_pb2
from protos.errors import render
from provisioning.bundle import Bundle
from sync.envelope import Opened
from sync.errors import SyncError
from sync.mqtt import HANDSHAKE_TIMEOUT_S

log = logging.getLogger(__name__)

EXIT_OK, EXIT_QUEUED, EXIT_LATE = 0, 3, 4


CONNECT_TIMEOUT_S = 8.0
"""seconds to find and connect to the hub before queueing"""
CATCHUP_TIMEOUT_S = 5.0
"""seconds spent bringing the replicas up to date after the reply"""


async def say(bundle: Bundle, text: str, *, hub: str | None, timeout: float) -> int:
    mine = ""
    answered = asyncio.Event()
    """set by the final chunk of the reply to our utterance"""
    shown: set[int] = set()
    seq = 0
    """the timeline seq the hub gave our utterance (from a reply chunk)"""

    async def on_reply(reply: mesh_pb2.Reply, opened: Opened, fresh: bool) -> None:
        # a reply comes in chunks (whole sentences); each is printed once and ACKed
        nonlocal seq
        ours = reply.utterance_id == mine
        if not fresh and not (ours and reply.chunk not in shown):
            if ours or reply.utterance_id == "":
                await node.ack(reply, mesh_pb2.RENDERED)  # a copy: ACK again, no reprint
            return  # another process's, already shown there
        if ours:
            shown.add(reply.chunk)
            seq = seq or reply.seq
            prefix = ""
        else:
            prefix = "(update) " if reply.utterance_id == "" else "(queued earlier) "
        # one line per reply: its chunks are printed as they come, the final one ends it
        print(f"{prefix if reply.chunk == 0 else ''}{reply.text}", end=_end(reply), flush=True)
        await node.ack(reply, mesh_pb2.RENDERED)
        if ours and reply.final:
            answered.set()

    def queue() -> None:
        nonlocal mine
        mine, _ = node.queue_utterance(text)

    # a hung broker must not hold this process past --timeout (HANDSHAKE_TIMEOUT_S)
    handshake = min(timeout, HANDSHAKE_TIMEOUT_S)
    node = DeviceNode(bundle, NodeOptions(mode="say", hub=hub, connect_timeout=handshake), on_reply)
    loop = asyncio.get_running_loop()
    async with node:
        assert node.mqtt is not None
        try:
            # Subscribe before queueing: a running edge daemon may deliver the item.
            async with asyncio.timeout(min(timeout, CONNECT_TIMEOUT_S)):
                await first_of(node.mqtt.connected, node.mqtt.refused)
        except TimeoutError:
            queue()
            return _queued(node, mine, node.mqtt.last_error or "not connected")
        if node.mqtt.refusal is not None and not node.mqtt.connected.is_set():
            # not our hub (another home's TLS CA): kept for the real one, said at once
            queue()
            return _queued(node, mine, str(node.mqtt.refusal))
        queue()
        deadline = loop.time() + timeout
        try:
            async with asyncio.timeout(timeout):
                await node.flush(stop_after=mine)
                await answered.wait()
        except (TimeoutError, SyncError) as exc:
            entry = await _admitted(node, mine, seq)
            if entry is None:
                return _queued(node, mine, str(exc) or "timed out")
            node.outbox.done(mine)  # the hub has it: never sent again as a new turn
            try:  # it is being answered: wait out what is left of --timeout
                async with asyncio.timeout(max(0.0, deadline - loop.time())):
                    await answered.wait()
            except TimeoutError:
                if shown:
                    print(flush=True)  # end the line of the chunks shown so far
                return _late(bundle, mine, entry, timeout)
        # Bring this device's replicas up to date, so `yimi timeline --bundle` shows the turn.
        try:
            async with asyncio.timeout(CATCHUP_TIMEOUT_S):
                await node.replication.catch_up()
        except (TimeoutError, SyncError) as exc:
            log.info("replicas not brought up to date: %s", exc)
    return EXIT_OK


async def first_of(*events: asyncio.Event) -> None:
    """Return once any of ``events`` is set."""
    waits = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


def _end(reply: mesh_pb2.Reply) -> str:
    return "\n" if reply.final else " "


async def _admitted(node: DeviceNode, item_id: str, seq: int) -> int | None:
    """The timeline seq of our utterance if the hub admitted it (0 if not known yet), else
    ``None``: a reply chunk came, or its timeline entry is in this device's replicas (live
    from the hub, or after a short catch-up)."""
    if seq:
        return seq

    def entry() -> int | None:
        for e in node.replicas.timeline():
            if e.id == item_id:
                return e.seq or 0
        return None

    found = entry()
    if found is not None or node.mqtt is None or not node.mqtt.connected.is_set():
        return found
    try:
        async with asyncio.timeout(CATCHUP_TIMEOUT_S):
            await node.replication.catch_up()
    except (TimeoutError, SyncError) as exc:
        log.info("could not check the timeline for %s: %s", item_id, exc)
    return entry()


def _late(bundle: Bundle, item_id: str, seq: int, seconds: float) -> int:
    fields = {
        "id": item_id,
        "seconds": seconds,
        "at": f" at timeline seq {seq}" if seq else "",
        "bundle": bundle.path,
    }
    print(render("say.late", fields), file=sys.stderr)
    return EXIT_LATE


def _queued(node: DeviceNode, item_id: str, reason: str) -> int:
    fields = {"id": item_id, "count": node.outbox.count(), "reason": reason}
    print(render("say.queued", fields), file=sys.stderr)
    return EXIT_QUEUED
