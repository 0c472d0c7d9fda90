"""Calls to the hub's gRPC service that carry envelopes (``Hub.Sync``)."""

from __future__ import annotations

import grpc

from protos import mesh_pb2, mesh_pb2_grpc
from sync.errors import SyncError

MAX_RPC_BYTES = 64 * 1024 * 1024
"""bytes: catch-up answers can be large (a snapshot for a device behind compaction)"""
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_RPC_BYTES),
    ("grpc.max_send_message_length", MAX_RPC_BYTES),
]


async def sync_exchange(host: str, port: int, envelope: bytes, timeout: float = 30.0) -> bytes:
    """Send a SYNC_REQUEST envelope; return the hub's SYNC_RESPONSE envelope bytes."""
    target = f"{host}:{port}"
    try:
        async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
            response = await mesh_pb2_grpc.HubStub(channel).Sync(
                mesh_pb2.EnvelopeBytes(data=envelope), timeout=timeout
            )
    except grpc.aio.AioRpcError as exc:
        reason = (exc.details() or exc.code().name).partition("|")[2] or exc.code().name.lower()
        raise SyncError("hub.unreachable", target=target, reason=reason) from None
    return bytes(response.data)
