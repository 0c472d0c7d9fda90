"""``yimi say``: send one typed utterance from a device and print the hub's reply.

The utterance is committed to the outbox first. If the hub cannot be reached it stays
there ("queued"), exit status 3, and the running edge daemon or the next ``yimi say``
delivers it. Older queued items are delivered first, in order.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time

from edge_agent.daemon import record_reply
from edge_agent.local_timeline import LocalEntry, LocalTimeline
from edge_agent.node import DeviceNode, NodeOptions
from protos import mesh_pb2
from protos.errors import render
from provisioning.bundle import Bundle
from sync.envelope import Opened
from sync.errors import SyncError

log = logging.getLogger(__name__)

EXIT_OK, EXIT_QUEUED = 0, 3


CONNECT_TIMEOUT_S = 8.0
"""seconds to find and connect to the hub before queueing"""


async def say(bundle: Bundle, text: str, *, hub: str | None, timeout: float) -> int:
    timeline = LocalTimeline(bundle.state_dir / "timeline.db")
    node: DeviceNode | None = None
    mine = ""
    answered = asyncio.Event()

    async def on_reply(reply: mesh_pb2.Reply, opened: Opened) -> None:
        record_reply(timeline, bundle, reply, opened)
        prefix = "" if reply.utterance_id == mine else "(queued earlier) "
        print(f"{prefix}{reply.text}", flush=True)
        assert node is not None
        await node.ack(reply, mesh_pb2.RENDERED)
        if reply.utterance_id == mine:
            answered.set()

    def queue() -> None:
        nonlocal mine
        assert node is not None
        mine, _ = node.queue_utterance(text)
        timeline.add(
            LocalEntry(None, mine, bundle.name, "utterance", text, int(time.time() * 1000))
        )

    try:
        async with DeviceNode(bundle, NodeOptions(mode="say", hub=hub), on_reply) as node:
            assert node.mqtt is not None
            try:
                # Subscribe before queueing: a running edge daemon may deliver the item.
                async with asyncio.timeout(min(timeout, CONNECT_TIMEOUT_S)):
                    await node.mqtt.connected.wait()
            except TimeoutError:
                queue()
                return _queued(node, mine, node.mqtt.last_error or "not connected")
            queue()
            try:
                async with asyncio.timeout(timeout):
                    await node.flush(stop_after=mine)
                    await answered.wait()
            except (TimeoutError, SyncError) as exc:
                return _queued(node, mine, str(exc) or "timed out")
    finally:
        timeline.close()
    return EXIT_OK


def _queued(node: DeviceNode, item_id: str, reason: str) -> int:
    fields = {"id": item_id, "count": node.outbox.count(), "reason": reason}
    print(render("say.queued", fields), file=sys.stderr)
    return EXIT_QUEUED
