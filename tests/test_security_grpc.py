"""The attack on the hub's gRPC port (issue 15, failure 1): oversize bodies in parallel,
without valid authentication, against a real hub on loopback. Each call is refused and
counted by reason, the hub's resident memory stays bounded, a legitimate catch-up still
goes through, and the hub still answers a ``yimi say`` afterwards."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from nacl.signing import SigningKey

from hub.memory.timeline_recall import cursor_path
from protos import mesh_pb2, sync_pb2
from provisioning.bundle import Bundle
from sync.envelope import HUB, Dropped, Opener, Peer, ReplayGuard, Sealer
from sync.hub_rpc import AUTH_METADATA, CHUNK_BYTES, rpc_auth, sync_exchange
from sync.tls import ClientTls
from tests.mesh_harness import Mesh
from tests.test_security import hub_log_is_clean, rejected, shared_counter, wait_counts
from tests.waiting import poll_sync

pytestmark = pytest.mark.slow

BODY_MIB = 60
GROWTH_LIMIT_MB = 64


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


class PeakRss:
    """The highest RSS of ``pid`` seen while in the ``with`` block (sampled every 20 ms)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.peak = max(self.peak, rss_mb(self.pid))
            if self._stop.wait(0.02):
                return

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def timeline_indexed(mesh: Mesh) -> bool:
    """Whether the hub's recall indexer has passed every timeline entry there is (its
    cursor, ``HOME/recall/timeline.seq``, at the timeline's last seq)."""
    cursor = cursor_path(mesh.home)
    last = mesh.hub_query("SELECT MAX(seq) FROM timeline")[0][0]
    done = cursor.read_text().strip() if cursor.exists() else ""
    return isinstance(last, int) and done.isdigit() and int(done) >= last


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


async def chunked(body: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(body), CHUNK_BYTES):
        yield mesh_pb2.EnvelopeBytes(data=body[start : start + CHUNK_BYTES]).SerializeToString()


def attack(
    channels: list[grpc.aio.Channel], body: bytes, forger: Sealer
) -> list[Callable[[], Awaitable[object]]]:
    """8 calls (each starts when it is made), each with ``body`` (field 1: bytes — it parses
    as every request type) and no valid authentication, each on its own channel."""
    free = iter(channels)

    def channel() -> grpc.aio.Channel:
        return next(free)

    def unary(method: str) -> Callable[[], Awaitable[object]]:
        return lambda: channel().unary_unary(f"/yimi.mesh.v1.Hub/{method}", None, None)(
            body, timeout=60
        )

    def streamed(method: str, *auth: tuple[str, bytes]) -> Callable[[], Awaitable[object]]:
        return lambda: channel().stream_unary(f"/yimi.mesh.v1.Hub/{method}", None, None)(
            chunked(body), timeout=60, metadata=auth
        )

    return [
        unary("Identify"),
        unary("Pair"),
        unary("Sync"),
        unary("Enrol"),
        streamed("Sync"),
        streamed("Sync", *rpc_auth(forger, "Sync", body)),  # signed with another key
        streamed("Enrol", (AUTH_METADATA, os.urandom(200))),
        streamed("Enrol"),
    ]


async def refused(call: Callable[[], Awaitable[object]]) -> grpc.StatusCode:
    try:
        await call()
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def catch_up(bundle: Bundle, target: str, blob: bytes) -> sync_pb2.SyncResponse:
    """A legitimate catch-up pushing ``blob`` (several chunks), as a device's node sends it."""
    sealer = Sealer.for_device(bundle, shared_counter(bundle))
    request = sync_pb2.SyncRequest(push=[sync_pb2.DocUpdate(doc="attack-probe", blob=blob)])
    data = sealer.seal(
        mesh_pb2.SYNC_REQUEST, request, recipient=HUB, recipient_box_pk=bundle.hub_box_pk
    )
    host, port = target.split(":")
    answer = asyncio.run(sync_exchange(host, int(port), data, sealer, ClientTls.for_bundle(bundle)))
    hub = Peer(HUB, bundle.hub_sign_pk, bundle.hub_box_pk)
    opened = Opener(
        home_id=bundle.home_id,
        node_id=bundle.device_id,
        box_key=bundle.keys.box,
        lookup=lambda s: hub if s == HUB else None,
        replay=ReplayGuard(),
        group_key=bundle.group_key,
        max_bytes=64 * 1024 * 1024,
    ).open(answer)
    assert not isinstance(opened, Dropped), opened
    assert isinstance(opened.payload, sync_pb2.SyncResponse)
    return opened.payload


def test_oversize_unauthenticated_grpc_calls_in_parallel_leave_the_hub_bounded(
    mesh: Mesh,
) -> None:
    phone = mesh.add_device("phone", "phone")
    bundle = Bundle.load(phone)
    hub = mesh.start_hub()
    # the legitimate turn this test makes after the flood, made once before the baseline:
    # what its first run allocates is not the flood's growth. Nor is the recall model: the
    # hub loads it (~90 MB resident, the USE table alone 62.5 MB) on its first indexing pass,
    # 1.5 s after the timeline goes quiet, in a worker — during the flood or the turn after
    # it if the baseline is taken as soon as the warm-up turn is answered.
    for text in ("hello", "what time is it"):
        first = mesh.say(phone, text)
        assert first.returncode == 0, first.stderr
    poll_sync(lambda: timeline_indexed(mesh), 60, "the warm-up turns in the recall index")
    baseline = rss_mb(hub.popen.pid)

    size = BODY_MIB * 1024 * 1024 - 16
    body = b"\x0a" + varint(size) + bytes(size)
    forger = replace(
        Sealer.for_device(bundle, itertools.count(1).__next__), sign_key=SigningKey.generate()
    )

    async def flood() -> list[grpc.StatusCode]:
        options = [("grpc.max_send_message_length", -1)]
        channels = [mesh.channel(options) for _ in range(8)]
        try:
            return await asyncio.gather(*map(refused, attack(channels, body, forger)))
        finally:
            for ch in channels:
                await ch.close(None)

    with PeakRss(hub.popen.pid) as peak:
        codes = asyncio.run(flood())
    assert grpc.StatusCode.OK not in codes, codes
    growth = peak.peak - baseline
    assert growth <= GROWTH_LIMIT_MB, f"hub RSS {baseline:.0f} -> {peak.peak:.0f} MB"
    expected = {"rejected.grpc.oversize": 2, "rejected.grpc.unauthenticated": 6}
    wait_counts(mesh, expected)
    assert rejected(mesh) == expected

    # the legitimate paths still work: a multi-chunk catch-up, then a say
    answer = catch_up(bundle, mesh.hub_target, os.urandom(3 * CHUNK_BYTES))
    assert answer.applied + len(answer.refused) == 1
    after = mesh.say(phone, "what time is it")
    assert after.returncode == 0 and after.stdout.strip(), after.stderr
    # the random catch-up body is refused as a document update, and counted as one
    wait_counts(mesh, {**expected, "rejected.sync_update": 1})
    assert rejected(mesh) == {**expected, "rejected.sync_update": 1}
    assert rss_mb(hub.popen.pid) - baseline <= GROWTH_LIMIT_MB
    status = mesh.yimi("hub", "status", "--home", str(mesh.home), check=True).stdout
    for name, value in expected.items():
        assert re.search(rf"^\s+{re.escape(name)}\s+{value}$", status, re.M), status
    log = hub_log_is_clean(hub)
    assert log.count("refused: unauthenticated") == 6 and log.count("refused: oversize") == 2
