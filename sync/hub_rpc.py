"""Calls to the hub's gRPC service that carry envelopes (``Hub.Sync``, ``Hub.Enrol``).

An envelope goes up as a stream of chunks of at most :data:`CHUNK_BYTES`, after the call's
metadata proved who sends it (:func:`rpc_auth`: the sender's signature over the method, the
envelope's size and SHA-256): the hub refuses an unauthenticated call before it reads any
of the body, so no single large message is ever buffered on its side. The device sends the
chunks only once the hub's initial metadata said it accepted the call
(:data:`ACCEPTED_METADATA`), so a refusal (busy, unauthenticated) arrives as itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import grpc

from protos import mesh_pb2, mesh_pb2_grpc
from protos.clock import now_ms
from protos.codec import RPC_AUTH_CONTEXT, signing_input
from sync.envelope import Sealer
from sync.errors import SyncError
from sync.tls import ClientTls, rpc_error

MAX_RPC_BYTES = 64 * 1024 * 1024
"""bytes: catch-up answers can be large (a snapshot for a device behind compaction)"""
CHUNK_BYTES = 256 * 1024
"""bytes: the largest chunk of an envelope streamed to the hub"""
AUTH_METADATA = "yimi-auth-bin"
"""the metadata key of a streamed call's :class:`~protos.mesh_pb2.SignedRpcAuth`"""
ACCEPTED_METADATA = "yimi-accepted"
"""the initial metadata key by which the hub tells it will read the envelope"""
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_RPC_BYTES),
    ("grpc.max_send_message_length", CHUNK_BYTES + 1024),
]


def rpc_auth(sealer: Sealer, method: str, envelope: bytes) -> tuple[tuple[str, bytes]]:
    """The metadata that proves ``sealer``'s node sends ``envelope`` to ``Hub.<method>``."""
    body = mesh_pb2.RpcAuth(
        home_id=sealer.home_id,
        sender=sealer.node_id,
        method=method,
        size=len(envelope),
        sha256=hashlib.sha256(envelope).digest(),
        time_ms=now_ms(),
    ).SerializeToString()
    signature = sealer.sign_key.sign(signing_input(RPC_AUTH_CONTEXT, body)).signature
    signed = mesh_pb2.SignedRpcAuth(body=body, signature=signature).SerializeToString()
    return ((AUTH_METADATA, signed),)


async def chunks(envelope: bytes) -> AsyncIterator[mesh_pb2.EnvelopeBytes]:
    """``envelope`` as the messages of a streamed call (at least one, even when empty)."""
    for start in range(0, max(len(envelope), 1), CHUNK_BYTES):
        yield mesh_pb2.EnvelopeBytes(data=envelope[start : start + CHUNK_BYTES])


async def envelope_call(
    channel: grpc.aio.Channel, method: str, envelope: bytes, sealer: Sealer, timeout: float
) -> bytes:
    """Stream ``envelope`` to ``Hub.<method>`` (``Sync`` or ``Enrol``) on ``channel``,
    authenticated as ``sealer``'s node; the answer's envelope bytes. Raises
    :class:`grpc.aio.AioRpcError` as the call does."""
    stub = mesh_pb2_grpc.HubStub(channel)
    start = stub.Sync if method == "Sync" else stub.Enrol
    call = start(timeout=timeout, metadata=rpc_auth(sealer, method, envelope))
    # nothing of the envelope goes before the hub accepted the call (a refusal comes alone)
    if any(key == ACCEPTED_METADATA for key, _ in await call.initial_metadata()):
        async for chunk in chunks(envelope):
            await call.write(chunk)
        await call.done_writing()
    response = await call
    return bytes(response.data)


async def sync_exchange(
    host: str,
    port: int,
    envelope: bytes,
    sealer: Sealer,
    tls: ClientTls,
    timeout: float = 30.0,
) -> bytes:
    """Send a SYNC_REQUEST envelope (sealed by ``sealer``); return the hub's SYNC_RESPONSE
    envelope bytes."""
    target = f"{host}:{port}"
    try:
        async with tls.channel(host, port, CHANNEL_OPTIONS) as channel:
            return await envelope_call(channel, "Sync", envelope, sealer, timeout)
    except grpc.aio.AioRpcError as exc:
        reason = (exc.details() or exc.code().name).partition("|")[2]
        if reason:
            raise SyncError("hub.unreachable", target=target, reason=reason) from None
        raise rpc_error(exc, target) from None
