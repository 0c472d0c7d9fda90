"""The hub's gRPC service: ``Identify`` (prove the hub key), ``Pair`` (enrol with a code),
``Sync`` (catch-up) and ``Enrol`` (voiceprint enrolment).

What a call may cost the hub is bounded before it is read (:class:`RpcLimits`):

- every message is at most :data:`MAX_MESSAGE_BYTES` (the transport refuses a larger one
  from its length prefix, without buffering it); ``Identify`` and ``Pair`` at most
  :attr:`RpcLimits.small_bytes`. Every method is served as a stream (a unary call is one
  message on the wire), so a call takes its slot before anything of it is read;
- ``Sync`` and ``Enrol`` stream one envelope in chunks, after the call's metadata proved its
  sender (:func:`sync.hub_rpc.rpc_auth`: an enrolled, unrevoked device's signature over the
  method, the size and SHA-256 of the envelope, and a recent time). The hub checks it before
  it reads any chunk, reserves the announced size in a budget shared by every call, then
  says so in its initial metadata (the device sends its chunks only then);
- calls in progress are capped overall and per peer address;
- the transport does not grow its receive windows (no BDP probing), so what it buffers of
  a call nobody has read yet stays at 64 KiB a stream.

Every refusal is counted (``rejected.grpc.<reason>``) and logged on one line.

The server speaks TLS (:func:`tls_credentials`: the gRPC leaf of :mod:`provisioning.tls`,
chained to the home CA); plaintext only on a loopback address.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from hub.errors import HubError
from hub.mesh.port import MAX_SYNC_BYTES
from protos import mesh_pb2
from protos.clock import now_ms
from protos.codec import IDENTIFY_CONTEXT, RPC_AUTH_CONTEXT, parse, signing_input
from provisioning.errors import ProvisioningError
from provisioning.home import Home
from provisioning.pairing import PairingAuthority, encode_refusal
from provisioning.tls import is_loopback
from sync.envelope import Peer
from sync.hub_rpc import ACCEPTED_METADATA, AUTH_METADATA, CHUNK_BYTES

log = logging.getLogger(__name__)

PAIR_STATUS = {
    "pair.rate_limited": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "pair.code_invalid": grpc.StatusCode.PERMISSION_DENIED,
}
"""error key → gRPC status; anything else is INVALID_ARGUMENT"""
MAX_MESSAGE_BYTES = CHUNK_BYTES + 64 * 1024
"""bytes: the largest gRPC message the hub receives (one chunk of a streamed envelope)"""
SERVICE = "yimi.mesh.v1.Hub"
MAX_AUTH_BYTES = 1024
"""bytes: the largest SignedRpcAuth accepted (one is ~200)"""


@dataclass(frozen=True)
class RpcLimits:
    small_bytes: int = 4 * 1024
    """bytes: the largest ``Identify`` or ``Pair`` request"""
    sync_bytes: int = MAX_SYNC_BYTES
    """bytes: the largest envelope streamed to ``Sync`` (what the port opens)"""
    enrol_bytes: int = 4 * 1024 * 1024
    """bytes: the largest envelope streamed to ``Enrol`` (a segment is ~1 KiB)"""
    budget_bytes: int = 64 * 1024 * 1024
    """bytes: what every streamed envelope being received may announce together"""
    calls: int = 32
    """calls in progress at once, overall"""
    calls_per_peer: int = 4
    """calls in progress at once from one peer address"""
    clock_skew_ms: int = 5 * 60 * 1000
    """how far an authentication's time may be from the hub's clock"""
    read_timeout_s: float = 60.0
    """seconds a streamed envelope may take to arrive"""


class Refused(Exception):
    """A call refused before (or while) its body is read; ``reason`` is counted."""

    def __init__(self, reason: str, status: grpc.StatusCode, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.status = status


@dataclass(frozen=True)
class _Oversize:
    """What the bounded deserializer gives for a request over its method's limit."""

    size: int


def _bounded(cls: type[Any], limit: int) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        return _Oversize(len(data)) if len(data) > limit else cls.FromString(data)

    return deserialize


class _Slots:
    """Calls in progress, overall and per peer address."""

    def __init__(self, limits: RpcLimits) -> None:
        self._limits = limits
        self._per_peer: Counter[str] = Counter()
        self._total = 0

    def take(self, peer: str) -> None:
        if self._total >= self._limits.calls:
            raise Refused("busy", grpc.StatusCode.RESOURCE_EXHAUSTED, "too many calls")
        if self._per_peer[peer] >= self._limits.calls_per_peer:
            raise Refused("peer_busy", grpc.StatusCode.RESOURCE_EXHAUSTED, "too many calls")
        self._total += 1
        self._per_peer[peer] += 1

    def give(self, peer: str) -> None:
        self._total -= 1
        self._per_peer[peer] -= 1
        if self._per_peer[peer] <= 0:
            del self._per_peer[peer]


class HubService:
    """The ``Hub`` service; :meth:`handler` registers it on a server."""

    def __init__(
        self,
        home: Home,
        *,
        mqtt_port: int,
        grpc_port: int,
        version: str,
        on_enrolled: Callable[[], Awaitable[None]],
        on_sync: Callable[[bytes], Awaitable[bytes]],
        lookup: Callable[[str], Peer | None],
        count: Callable[[str], None],
        on_enrol: Callable[[bytes], Awaitable[bytes]] | None = None,
        limits: RpcLimits | None = None,
    ) -> None:
        self._home = home
        self._mqtt_port = mqtt_port
        self._grpc_port = grpc_port
        self._version = version
        self._on_enrolled = on_enrolled
        self._on_sync = on_sync
        self._on_enrol = on_enrol
        self._lookup = lookup
        self._count = count
        self.limits = limits or RpcLimits()
        self._slots = _Slots(self.limits)
        self._reserved = 0
        """bytes announced by the streamed envelopes being received"""
        self._pairing = PairingAuthority(home, mqtt_port=mqtt_port, grpc_port=grpc_port)
        self._pair_lock = asyncio.Lock()

    # ------------------------------------------------------------------ handlers
    def handler(self) -> grpc.GenericRpcHandler:
        """The service's handlers, with the per-method size limits."""
        small = self.limits.small_bytes
        encode = mesh_pb2.EnvelopeBytes.SerializeToString
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                # served as streams (a unary call is one message on the wire): the call slot
                # is taken before its request is read, and an oversize one is counted
                "Identify": grpc.stream_unary_rpc_method_handler(
                    self.Identify,
                    request_deserializer=_bounded(mesh_pb2.IdentifyRequest, small),
                    response_serializer=mesh_pb2.IdentifyResponse.SerializeToString,
                ),
                "Pair": grpc.stream_unary_rpc_method_handler(
                    self.Pair,
                    request_deserializer=_bounded(mesh_pb2.PairRequest, small),
                    response_serializer=mesh_pb2.PairResponse.SerializeToString,
                ),
                "Sync": grpc.stream_unary_rpc_method_handler(
                    self.Sync,
                    request_deserializer=_bounded(mesh_pb2.EnvelopeBytes, MAX_MESSAGE_BYTES),
                    response_serializer=encode,
                ),
                "Enrol": grpc.stream_unary_rpc_method_handler(
                    self.Enrol,
                    request_deserializer=_bounded(mesh_pb2.EnvelopeBytes, MAX_MESSAGE_BYTES),
                    response_serializer=encode,
                ),
            },
        )

    async def _refuse(
        self, context: grpc.aio.ServicerContext, method: str, peer: str, exc: Refused
    ) -> None:
        self._count(f"rejected.grpc.{exc.reason}")
        log.warning("gRPC %s from %s refused: %s %s", method, peer, exc.reason, exc)
        await context.abort(exc.status, f"grpc.{exc.reason}|{exc}")

    async def _one(
        self,
        method: str,
        requests: AsyncIterator[Any],
        context: grpc.aio.ServicerContext,
    ) -> tuple[str, Any]:
        """Take a call slot, then read a small call's one request; the peer address (give
        the slot back) and the request. The transport ends the stream without a message
        when the request was over :data:`MAX_MESSAGE_BYTES`."""
        peer = context.peer().rsplit(":", 1)[0]
        try:
            self._slots.take(peer)
        except Refused as exc:
            await self._refuse(context, method, peer, exc)
        try:
            request = await anext(aiter(requests), None)
            if request is None or isinstance(request, _Oversize):
                size = f"{request.size} bytes" if request else "no request"
                raise Refused(
                    "oversize",
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{size} (limit {self.limits.small_bytes})",
                )
        except Refused as exc:
            self._slots.give(peer)
            await self._refuse(context, method, peer, exc)
        except BaseException:
            self._slots.give(peer)
            raise
        return peer, request

    async def Identify(
        self, requests: AsyncIterator[mesh_pb2.IdentifyRequest], context: grpc.aio.ServicerContext
    ) -> mesh_pb2.IdentifyResponse:
        peer, request = await self._one("Identify", requests, context)
        try:
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
            sig = self._home.hub_keys.sign.sign(signing_input(IDENTIFY_CONTEXT, identity))
            return mesh_pb2.IdentifyResponse(identity=identity, signature=sig.signature)
        finally:
            self._slots.give(peer)

    async def Pair(
        self, requests: AsyncIterator[mesh_pb2.PairRequest], context: grpc.aio.ServicerContext
    ) -> mesh_pb2.PairResponse:
        peer, request = await self._one("Pair", requests, context)
        try:
            async with self._pair_lock:
                try:
                    response = await asyncio.to_thread(self._pairing.handle, request, peer)
                except ProvisioningError as exc:
                    log.warning("pairing from %s refused: %s", peer, exc)
                    status = PAIR_STATUS.get(exc.key, grpc.StatusCode.INVALID_ARGUMENT)
                    await context.abort(status, encode_refusal(exc))
        finally:
            self._slots.give(peer)
        log.info("device paired from %s", peer)
        await self._on_enrolled()
        return response

    async def Sync(
        self, requests: AsyncIterator[mesh_pb2.EnvelopeBytes], context: grpc.aio.ServicerContext
    ) -> mesh_pb2.EnvelopeBytes:
        return await self._streamed(
            "Sync", self.limits.sync_bytes, self._on_sync, requests, context
        )

    async def Enrol(
        self, requests: AsyncIterator[mesh_pb2.EnvelopeBytes], context: grpc.aio.ServicerContext
    ) -> mesh_pb2.EnvelopeBytes:
        if self._on_enrol is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "voice enrolment is not served")
        assert self._on_enrol is not None
        return await self._streamed(
            "Enrol", self.limits.enrol_bytes, self._on_enrol, requests, context
        )

    # ------------------------------------------------------------------ streamed envelopes
    async def _streamed(
        self,
        method: str,
        limit: int,
        serve: Callable[[bytes], Awaitable[bytes]],
        requests: AsyncIterator[mesh_pb2.EnvelopeBytes],
        context: grpc.aio.ServicerContext,
    ) -> mesh_pb2.EnvelopeBytes:
        """Authenticate, reserve, then read the chunks of one envelope and serve it."""
        peer = context.peer().rsplit(":", 1)[0]
        try:
            self._slots.take(peer)
        except Refused as exc:
            await self._refuse(context, method, peer, exc)
        reserved = 0
        try:
            auth = self._authenticate(method, limit, context)
            if self._reserved + auth.size > self.limits.budget_bytes:
                raise Refused("busy", grpc.StatusCode.RESOURCE_EXHAUSTED, "hub busy, try later")
            reserved = auth.size
            self._reserved += reserved
            await context.send_initial_metadata(((ACCEPTED_METADATA, "1"),))
            data = await self._read(auth, requests)
            try:  # reserved and in its slot until served: its bytes are held till then
                answer = await serve(data)
            except HubError as exc:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"{exc.key}|{exc}")
        except Refused as exc:
            await self._refuse(context, method, peer, exc)
        finally:
            self._reserved -= reserved
            self._slots.give(peer)
        return mesh_pb2.EnvelopeBytes(data=answer)

    def _authenticate(
        self, method: str, limit: int, context: grpc.aio.ServicerContext
    ) -> mesh_pb2.RpcAuth:
        """The call's verified :class:`RpcAuth`, from its metadata alone (no body read)."""
        raw = next(
            (v for k, v in (context.invocation_metadata() or ()) if k == AUTH_METADATA), None
        )
        denied = grpc.StatusCode.UNAUTHENTICATED
        if not isinstance(raw, bytes):
            raise Refused("unauthenticated", denied, "no authentication")
        signed = parse(mesh_pb2.SignedRpcAuth, raw, MAX_AUTH_BYTES)
        auth = parse(mesh_pb2.RpcAuth, signed.body, MAX_AUTH_BYTES) if signed else None
        if signed is None or auth is None:
            raise Refused("unauthenticated", denied, "unreadable authentication")
        peer = self._lookup(auth.sender)
        if auth.home_id != self._home.home_id or peer is None or peer.revoked:
            raise Refused("unauthenticated", denied, f"not a device of this home: {auth.sender!r}")
        try:
            VerifyKey(peer.sign_pk).verify(
                signing_input(RPC_AUTH_CONTEXT, signed.body), signed.signature
            )
        except (BadSignatureError, ValueError):
            raise Refused("unauthenticated", denied, f"bad signature for {auth.sender}") from None
        if auth.method != method or abs(auth.time_ms - now_ms()) > self.limits.clock_skew_ms:
            raise Refused("unauthenticated", denied, f"stale or for {auth.method!r}")
        if auth.size > limit:
            raise Refused(
                "oversize", grpc.StatusCode.RESOURCE_EXHAUSTED, f"{auth.size} bytes over {limit}"
            )
        return auth

    async def _read(
        self, auth: mesh_pb2.RpcAuth, requests: AsyncIterator[mesh_pb2.EnvelopeBytes]
    ) -> bytes:
        """The envelope ``auth`` announced: its chunks, no more than its size, its hash."""
        parts: list[bytes] = []
        got = 0
        try:
            async with asyncio.timeout(self.limits.read_timeout_s):
                async for chunk in requests:
                    if isinstance(chunk, _Oversize):
                        raise Refused(
                            "oversize", grpc.StatusCode.RESOURCE_EXHAUSTED, "chunk too large"
                        )
                    got += len(chunk.data)
                    if got > auth.size:
                        raise Refused(
                            "mismatch", grpc.StatusCode.INVALID_ARGUMENT, "more than announced"
                        )
                    parts.append(chunk.data)
        except TimeoutError:
            raise Refused("slow", grpc.StatusCode.DEADLINE_EXCEEDED, "too slow") from None
        data = b"".join(parts)
        if len(data) != auth.size or hashlib.sha256(data).digest() != auth.sha256:
            raise Refused("mismatch", grpc.StatusCode.INVALID_ARGUMENT, "not what was announced")
        return data


def tls_credentials(cert: bytes, key: bytes, ca: bytes) -> grpc.ServerCredentials:
    """The hub's gRPC TLS: its leaf ``cert`` and ``key``, sent with the CA ``ca`` as the
    chain (PEM)."""
    return grpc.ssl_server_credentials([(key, cert + ca)])


def make_server(service: HubService) -> grpc.aio.Server:
    """A server with the service and the transport's limits (not bound, not started)."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            # No BDP probing: the receive window stays 64 KiB a stream instead of growing
            # to megabytes the transport buffers before a handler has looked at the call
            # (measured: rounds of 8 x 60 MiB refused calls, RSS +104 MB with it, +2 without).
            ("grpc.http2.bdp_probe", 0),
            ("grpc.so_reuseport", 0),
        ],
        # a backstop behind the service's own (counted) caps
        maximum_concurrent_rpcs=2 * service.limits.calls,
    )
    server.add_generic_rpc_handlers([service.handler()])
    return server


async def start_server(
    service: HubService, host: str, port: int, credentials: grpc.ServerCredentials | None
) -> grpc.aio.Server:
    """The server, bound and started: TLS with ``credentials`` (see :func:`tls_credentials`);
    ``None`` (plaintext) only on a loopback ``host``."""
    if credentials is None and not is_loopback(host):
        raise HubError("tls.plaintext_not_loopback", host=host)
    server = make_server(service)
    try:
        address = f"{host}:{port}"
        if credentials is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, credentials)
    except RuntimeError:
        bound = 0
    if bound == 0:
        raise HubError("port.in_use", host=host, port=port)
    await server.start()
    return server
