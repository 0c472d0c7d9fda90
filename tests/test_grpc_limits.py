"""The hub's gRPC limits, in-process on a real grpc.aio server on loopback: a streamed
envelope is authenticated before a byte of it is read, sizes are capped per method, calls
are capped overall and per peer, and every refusal is counted by reason."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import pytest
from nacl.signing import SigningKey

from hub.mesh.grpc_server import (
    MAX_MESSAGE_BYTES,
    HubService,
    RpcLimits,
    make_server,
    tls_credentials,
)
from hub.mesh.port import MeshPort
from protos import mesh_pb2, mesh_pb2_grpc, sync_pb2
from provisioning.bundle import Bundle, flash
from provisioning.home import Home
from sync.envelope import HUB, Opened, Opener, Peer, ReplayGuard, Sealer
from sync.hub_rpc import (
    CHANNEL_OPTIONS,
    CHUNK_BYTES,
    chunks,
    envelope_call,
    rpc_auth,
    sync_exchange,
)
from sync.tls import ChannelOptions, ClientTls
from tests.test_mesh_port import loaded_port
from tests.waiting import poll

BIG_SEND = [("grpc.max_send_message_length", 80 * 1024 * 1024)]


@dataclass
class World:
    home: Home
    port: MeshPort
    bundle: Bundle
    sealer: Sealer
    counts: Counter[str]
    target: str
    service: HubService
    tls: ClientTls
    """the bundle's TLS, pinned to the home CA (the server speaks TLS as the hub's does)"""

    def channel(self, options: ChannelOptions = ()) -> grpc.aio.Channel:
        return self.tls.channel("127.0.0.1", int(self.target.rsplit(":", 1)[1]), options)


async def serve(
    tmp_path: Path, limits: RpcLimits, body: Callable[[World], Awaitable[None]]
) -> World:
    home = Home.init(tmp_path / "home")
    bundle = flash(home, profile_name="phone", name="fone", out=tmp_path / "fone")
    port = loaded_port(home, tmp_path)
    counts: Counter[str] = Counter()

    async def on_sync(data: bytes) -> bytes:
        async def answer(opened: Opened, request: sync_pb2.SyncRequest) -> sync_pb2.SyncResponse:
            return sync_pb2.SyncResponse(applied=len(request.push))

        return await port.serve(
            data,
            request=sync_pb2.SyncRequest,
            kind=mesh_pb2.SYNC_RESPONSE,
            what="sync request",
            error="sync.refused",
            handle=answer,
            large=True,
        )

    async def nothing() -> None:
        return None

    service = HubService(
        home,
        mqtt_port=1,
        grpc_port=0,
        version="test",
        on_enrolled=nothing,
        on_sync=on_sync,
        lookup=port.peers.get,
        count=lambda name: counts.update([name]),
        limits=limits,
    )
    server = make_server(service)
    tls = home.tls()
    credentials = tls_credentials(tls.grpc.cert.read_bytes(), tls.grpc.key.read_bytes(), tls.ca_pem)
    bound = server.add_secure_port("127.0.0.1:0", credentials)
    await server.start()
    counter = itertools.count(1)
    world = World(
        home,
        port,
        bundle,
        Sealer.for_device(bundle, lambda: next(counter)),
        counts,
        f"127.0.0.1:{bound}",
        service,
        ClientTls.for_bundle(bundle),
    )
    try:
        await body(world)
    finally:
        await server.stop(0)
        port.close()
    return world


def sync_request(w: World, blob: bytes) -> bytes:
    request = sync_pb2.SyncRequest(push=[sync_pb2.DocUpdate(doc="notes", blob=blob)])
    return w.sealer.seal(
        mesh_pb2.SYNC_REQUEST, request, recipient=HUB, recipient_box_pk=w.bundle.hub_box_pk
    )


def open_answer(w: World, data: bytes) -> sync_pb2.SyncResponse:
    hub = Peer(HUB, w.bundle.hub_sign_pk, w.bundle.hub_box_pk)
    opened = Opener(
        home_id=w.home.home_id,
        node_id=w.bundle.device_id,
        box_key=w.bundle.keys.box,
        lookup=lambda s: hub if s == HUB else None,
        replay=ReplayGuard(),
        group_key=w.bundle.group_key,
        max_bytes=64 * 1024 * 1024,
    ).open(data)
    assert isinstance(opened, Opened) and isinstance(opened.payload, sync_pb2.SyncResponse)
    return opened.payload


async def exchange(w: World, data: bytes) -> bytes:
    host, port = w.target.split(":")
    return await sync_exchange(host, int(port), data, w.sealer, w.tls)


async def code_of(call: Awaitable[object]) -> grpc.StatusCode:
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


Runner = Callable[..., World]


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Runner]:
    def go(body: Callable[[World], Awaitable[None]], **limits: object) -> World:
        return asyncio.run(serve(tmp_path, replace(RpcLimits(), **limits), body))  # type: ignore[arg-type]

    yield go


def test_a_large_envelope_streams_in_chunks_after_its_sender_is_proved(run: Runner) -> None:
    async def body(w: World) -> None:
        data = sync_request(w, os.urandom(3 * 1024 * 1024))
        assert len(data) > 10 * CHUNK_BYTES > MAX_MESSAGE_BYTES
        answer = await exchange(w, data)
        assert open_answer(w, answer).applied == 1

    w = run(body)
    assert w.counts == Counter() and w.service._reserved == 0


def test_unauthenticated_forged_and_oversize_calls_are_refused_and_counted(run: Runner) -> None:
    async def body(w: World) -> None:
        data = sync_request(w, b"x" * 1000)
        stranger = replace(w.sealer, sign_key=SigningKey.generate())
        async with w.channel(BIG_SEND) as ch:
            hub = mesh_pb2_grpc.HubStub(ch)
            unary = ch.unary_unary("/yimi.mesh.v1.Hub/Sync", None, None)
            calls = {
                "no auth": hub.Sync(chunks(data)),
                "one 20 MiB message, no auth": unary(b"\x0a" + bytes(20 << 20)),
                "forged": hub.Sync(chunks(data), metadata=rpc_auth(stranger, "Sync", data)),
                "for Enrol": hub.Sync(chunks(data), metadata=rpc_auth(w.sealer, "Enrol", data)),
                "garbage auth": hub.Sync(chunks(data), metadata=(("yimi-auth-bin", b"\xff"),)),
                "65 MiB": envelope_call(ch, "Sync", bytes(65 << 20), w.sealer, 10),
                "not what it announced": hub.Sync(
                    chunks(data + b"!"), metadata=rpc_auth(w.sealer, "Sync", data + b"?")
                ),
                "identify 5 KiB": hub.Identify(mesh_pb2.IdentifyRequest(nonce=bytes(5000))),
                "identify 20 MiB": hub.Identify(mesh_pb2.IdentifyRequest(nonce=bytes(20 << 20))),
                "pair 100 KiB": hub.Pair(mesh_pb2.PairRequest(details=bytes(100_000))),
            }
            codes = dict(
                zip(calls, await asyncio.gather(*map(code_of, calls.values())), strict=True)
            )
            unauth, exhausted = grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.RESOURCE_EXHAUSTED
            assert codes == {
                "no auth": unauth,
                "one 20 MiB message, no auth": unauth,
                "forged": unauth,
                "for Enrol": unauth,
                "garbage auth": unauth,
                "65 MiB": exhausted,
                "not what it announced": grpc.StatusCode.INVALID_ARGUMENT,
                "identify 5 KiB": exhausted,
                "identify 20 MiB": exhausted,
                "pair 100 KiB": exhausted,
            }
            # still served: a legitimate Identify and Sync
            ok = await hub.Identify(mesh_pb2.IdentifyRequest(nonce=bytes(32)))
            assert ok.signature
        assert open_answer(w, await exchange(w, data)).applied

    # the ten calls go at once from one address: room for all of them, so each is refused for
    # what it is and not for the per-peer cap (its own test is below), however slowly the two
    # big uploads arrive on a loaded machine
    w = run(body, calls_per_peer=16)
    assert w.counts == {
        "rejected.grpc.unauthenticated": 5,
        "rejected.grpc.oversize": 4,
        "rejected.grpc.mismatch": 1,
    }
    assert w.service._reserved == 0


def test_calls_are_capped_per_peer_and_the_budget_bounds_what_is_announced(run: Runner) -> None:
    async def body(w: World) -> None:
        release = asyncio.Event()
        data = sync_request(w, b"y" * 1000)

        async def held(envelope: bytes) -> AsyncIterator[mesh_pb2.EnvelopeBytes]:
            async for c in chunks(envelope):
                await release.wait()  # a slow sender: holds its slot
                yield c

        async with w.channel(CHANNEL_OPTIONS) as ch:
            hub = mesh_pb2_grpc.HubStub(ch)
            slow = [
                asyncio.ensure_future(
                    code_of(hub.Sync(held(e), metadata=rpc_auth(w.sealer, "Sync", e)))
                )
                for e in (data, sync_request(w, b"z" * 1000))
            ]
            # both authenticated, their sizes reserved, their slots held
            await poll(lambda: w.service._reserved >= 2 * len(data) - 16, 10, "two held calls")
            # a third call from the same address: refused before its request is read
            assert (
                await code_of(hub.Identify(mesh_pb2.IdentifyRequest(nonce=bytes(32))))
                == grpc.StatusCode.RESOURCE_EXHAUSTED
            )
            release.set()
            assert await asyncio.gather(*slow) == [grpc.StatusCode.OK] * 2
            # over the budget: refused from what it announces, before reading
            big = sync_request(w, os.urandom(2 * 1024 * 1024))
            code = await code_of(envelope_call(ch, "Sync", big, w.sealer, 10))
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED

    w = run(body, calls_per_peer=2, budget_bytes=1024 * 1024)
    assert w.counts == {"rejected.grpc.peer_busy": 1, "rejected.grpc.busy": 1}
    assert w.service._reserved == 0 and not w.service._slots._per_peer


def test_a_revoked_sender_and_a_stale_authentication_are_refused_before_reading(
    run: Runner,
) -> None:
    async def body(w: World) -> None:
        data = sync_request(w, b"r" * 1000)
        async with w.channel(CHANNEL_OPTIONS) as ch:
            auth = rpc_auth(w.sealer, "Sync", data)  # valid, used after the revocation
            w.service.limits = replace(w.service.limits, clock_skew_ms=-1)  # every time is stale
            assert await code_of(envelope_call(ch, "Sync", data, w.sealer, 10)) == (
                grpc.StatusCode.UNAUTHENTICATED
            )
            w.service.limits = RpcLimits()
            device = w.bundle.device_id
            w.port.peers[device] = replace(w.port.peers[device], revoked=True)
            hub = mesh_pb2_grpc.HubStub(ch)
            assert await code_of(hub.Sync(chunks(data), metadata=auth)) == (
                grpc.StatusCode.UNAUTHENTICATED
            )

    w = run(body)
    assert w.counts == {"rejected.grpc.unauthenticated": 2}
