"""The hub's gRPC service: ``Identify`` (prove the hub key), ``Pair`` (enrol with a code),
``Sync`` (catch-up) and ``Enrol`` (voiceprint enrolment)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import grpc

from hub.errors import HubError
from protos import mesh_pb2, mesh_pb2_grpc
from protos.codec import IDENTIFY_CONTEXT, signing_input
from provisioning.errors import ProvisioningError
from provisioning.home import Home
from provisioning.pairing import PairingAuthority, encode_refusal

log = logging.getLogger(__name__)

PAIR_STATUS = {
    "pair.rate_limited": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "pair.code_invalid": grpc.StatusCode.PERMISSION_DENIED,
}
"""error key → gRPC status; anything else is INVALID_ARGUMENT"""
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""bytes: catch-up requests carry CRDT updates (pairing requests are checked far lower)"""


class HubService(mesh_pb2_grpc.HubServicer):
    def __init__(
        self,
        home: Home,
        *,
        mqtt_port: int,
        grpc_port: int,
        version: str,
        on_enrolled: Callable[[], Awaitable[None]],
        on_sync: Callable[[bytes], Awaitable[bytes]],
        on_enrol: Callable[[bytes], Awaitable[bytes]] | None = None,
    ) -> None:
        self._home = home
        self._mqtt_port = mqtt_port
        self._grpc_port = grpc_port
        self._version = version
        self._on_enrolled = on_enrolled
        self._on_sync = on_sync
        self._on_enrol = on_enrol
        self._pairing = PairingAuthority(home, mqtt_port=mqtt_port, grpc_port=grpc_port)
        self._pair_lock = asyncio.Lock()

    async def Identify(
        self, request: mesh_pb2.IdentifyRequest, context: grpc.aio.ServicerContext
    ) -> mesh_pb2.IdentifyResponse:
        if not 16 <= len(request.nonce) <= 64:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "nonce must be 16..64 bytes")
        identity = mesh_pb2.HubIdentity(
            home_id=self._home.home_id,
            hub_sign_pk=self._home.hub_keys.sign_pk,
            hub_box_pk=self._home.hub_keys.box_pk,
            mqtt_port=self._mqtt_port,
            grpc_port=self._grpc_port,
            version=self._version,
            nonce=request.nonce,
        ).SerializeToString()
        sig = self._home.hub_keys.sign.sign(signing_input(IDENTIFY_CONTEXT, identity)).signature
        return mesh_pb2.IdentifyResponse(identity=identity, signature=sig)

    async def Pair(
        self, request: mesh_pb2.PairRequest, context: grpc.aio.ServicerContext
    ) -> mesh_pb2.PairResponse:
        peer = context.peer().rsplit(":", 1)[0]
        async with self._pair_lock:
            try:
                response = await asyncio.to_thread(self._pairing.handle, request, peer)
            except ProvisioningError as exc:
                log.warning("pairing from %s refused: %s", peer, exc)
                status = PAIR_STATUS.get(exc.key, grpc.StatusCode.INVALID_ARGUMENT)
                await context.abort(status, encode_refusal(exc))
        log.info("device paired from %s", peer)
        await self._on_enrolled()
        return response

    async def Sync(
        self, request: mesh_pb2.EnvelopeBytes, context: grpc.aio.ServicerContext
    ) -> mesh_pb2.EnvelopeBytes:
        try:
            data = await self._on_sync(request.data)
        except HubError as exc:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"{exc.key}|{exc}")
        return mesh_pb2.EnvelopeBytes(data=data)

    async def Enrol(
        self, request: mesh_pb2.EnvelopeBytes, context: grpc.aio.ServicerContext
    ) -> mesh_pb2.EnvelopeBytes:
        if self._on_enrol is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "voice enrolment is not served")
        assert self._on_enrol is not None
        try:
            data = await self._on_enrol(request.data)
        except HubError as exc:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"{exc.key}|{exc}")
        return mesh_pb2.EnvelopeBytes(data=data)


async def start_server(service: HubService, host: str, port: int) -> grpc.aio.Server:
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ]
    )
    mesh_pb2_grpc.add_HubServicer_to_server(service, server)
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError:
        bound = 0
    if bound == 0:
        raise HubError("port.in_use", host=host, port=port)
    await server.start()
    return server
