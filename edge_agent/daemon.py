"""``yimi edge run``: the long-lived device daemon.

It keeps the device on the mesh (presence with a last will, reconnecting with backoff when
the hub or the network goes away), empties the outbox whenever the hub is reachable, and
renders every reply it receives (stdout stands in for a HUD or speaker here), ACKing it.
"""

from __future__ import annotations

import asyncio
import logging

from edge_agent.local_timeline import LocalEntry, LocalTimeline
from edge_agent.node import DeviceNode, NodeOptions
from protos import mesh_pb2
from provisioning.bundle import Bundle
from sync.envelope import Opened

log = logging.getLogger(__name__)


def record_reply(
    timeline: LocalTimeline, bundle: Bundle, reply: mesh_pb2.Reply, opened: Opened
) -> None:
    """Note a reply (and its utterance's seq) in the device's own timeline view."""
    timeline.sequenced(reply.utterance_id, reply.seq)
    timeline.add(
        LocalEntry(reply.reply_seq or None, reply.id, "hub", "reply", reply.text, opened.time_ms)
    )


async def run_edge(bundle: Bundle, *, hub: str | None) -> int:
    timeline = LocalTimeline(bundle.state_dir / "timeline.db")
    node: DeviceNode | None = None

    async def on_reply(reply: mesh_pb2.Reply, opened: Opened) -> None:
        # A reply the hub re-sends (it never saw our ACK) is ACKed again, not shown twice.
        if not timeline.has(reply.id):
            record_reply(timeline, bundle, reply, opened)
            print(f"[{bundle.name}] hub: {reply.text}", flush=True)
        assert node is not None
        await node.ack(reply, mesh_pb2.RENDERED)

    try:
        async with DeviceNode(bundle, NodeOptions(mode="edge", hub=hub), on_reply) as node:
            log.info("edge agent %s (%s) running", bundle.name, bundle.device_id)
            await asyncio.Event().wait()
    finally:
        timeline.close()
    return 0
