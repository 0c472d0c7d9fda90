"""``yimi edge run``: the long-lived device daemon.

It keeps the device on the mesh (presence with a last will, reconnecting with backoff when
the hub or the network goes away), keeps its timeline and notes replicas in sync, empties
the outbox whenever the hub is reachable, and renders every reply it receives (stdout
stands in for a HUD or speaker here), ACKing it.
"""

from __future__ import annotations

import asyncio
import logging

from edge_agent.node import DeviceNode, NodeOptions
from protos import mesh_pb2
from provisioning.bundle import Bundle
from sync.envelope import Opened

log = logging.getLogger(__name__)


async def run_edge(bundle: Bundle, *, hub: str | None) -> int:

    async def on_reply(reply: mesh_pb2.Reply, opened: Opened, fresh: bool) -> None:
        # A reply the hub re-sends (it never saw our ACK) is ACKed again, not shown twice.
        if fresh:
            print(f"[{bundle.name}] hub: {reply.text}", flush=True)
        await node.ack(reply, mesh_pb2.RENDERED)

    node = DeviceNode(bundle, NodeOptions(mode="edge", hub=hub), on_reply)
    async with node:
        log.info("edge agent %s (%s) running", bundle.name, bundle.device_id)
        await asyncio.Event().wait()
    return 0
