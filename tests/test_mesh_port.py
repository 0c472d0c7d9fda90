"""The hub's mesh port without a broker: envelopes in (one replay window, drops counted),
gRPC "envelope in, envelope out", revocations seen as they happen."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from google.protobuf.message import Message

from hub.errors import HubError
from hub.mesh.port import MeshPort
from protos import mesh_pb2, sync_pb2, voice_pb2
from provisioning.bundle import Bundle, flash
from provisioning.home import Home
from sync import topics
from sync.envelope import HUB, Opened, Opener, Peer, ReplayGuard, Sealer


def loaded_port(home: Home, tmp_path: Path) -> MeshPort:
    """A mesh port of ``home`` holding its registry's devices as peers (no MQTT session)."""
    port = MeshPort(home, replay_windows=(), counter_path=tmp_path / "counter.db")
    registry = home.registry()
    try:
        port.load(registry.devices())
    finally:
        registry.close()
    return port


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Home, MeshPort, Bundle, Sealer]]:
    home = Home.init(tmp_path / "home")
    bundle = flash(home, profile_name="glasses", name="specs", out=tmp_path / "specs")
    port = loaded_port(home, tmp_path)
    counter = itertools.count(1)
    yield home, port, bundle, Sealer.for_device(bundle, lambda: next(counter))
    port.close()


def uplink(home: Home, bundle: Bundle) -> str:
    return topics.uplink(home.home_id, bundle.device_id)


def to_hub(sealer: Sealer, bundle: Bundle, kind: int, msg: Message) -> bytes:
    return sealer.seal(kind, msg, recipient=HUB, recipient_box_pk=bundle.hub_box_pk)


def test_an_envelope_in_is_opened_once_and_its_window_committed(
    world: tuple[Home, MeshPort, Bundle, Sealer],
) -> None:
    home, port, bundle, sealer = world
    data = to_hub(sealer, bundle, mesh_pb2.UTTERANCE, mesh_pb2.Utterance(id="u1", text="hi"))
    opened = port.receive(uplink(home, bundle), data)
    assert isinstance(opened, Opened) and opened.sender == bundle.device_id
    assert bundle.device_id in port.last_seen
    window = port.commit(opened)
    assert window is not None and window[:2] == (bundle.device_id, opened.counter)
    assert port.receive(uplink(home, bundle), data) is None  # the same envelope again
    assert port.drops["rejected.replayed"] == 1
    other = topics.uplink(home.home_id, "dev-someone-else")
    assert (
        port.receive(other, to_hub(sealer, bundle, mesh_pb2.UTTERANCE, mesh_pb2.Utterance(id="u2")))
        is None
    )
    assert port.drops["rejected.spoofed_topic"] == 1
    seen: list[tuple[str, int]] = []
    port.flush(lambda counts, last: seen.extend(counts))
    assert dict(seen)["rejected.replayed"] == 1 and not port.drops and not port.last_seen


def test_a_copy_opened_before_the_first_was_handled_is_repeated(
    world: tuple[Home, MeshPort, Bundle, Sealer],
) -> None:
    """Both copies open (nothing committed yet); once the first is handled, the lane finds
    the second repeated and counts it as replayed."""
    home, port, bundle, sealer = world
    data = to_hub(sealer, bundle, mesh_pb2.UTTERANCE, mesh_pb2.Utterance(id="u1", text="hi"))
    first = port.receive(uplink(home, bundle), data)
    second = port.receive(uplink(home, bundle), data)
    assert isinstance(first, Opened) and isinstance(second, Opened)
    assert not port.repeated(first)
    port.commit(first)
    assert port.repeated(second)
    assert port.drops["rejected.replayed"] == 1


async def test_grpc_envelope_in_envelope_out(world: tuple[Home, MeshPort, Bundle, Sealer]) -> None:
    home, port, bundle, sealer = world

    async def answer(opened: Opened, request: sync_pb2.SyncRequest) -> sync_pb2.SyncResponse:
        return sync_pb2.SyncResponse()

    async def serve(data: bytes) -> bytes:
        return await port.serve(
            data,
            request=sync_pb2.SyncRequest,
            kind=mesh_pb2.SYNC_RESPONSE,
            what="sync request",
            error="sync.refused",
            handle=answer,
            large=True,
        )

    reply = await serve(to_hub(sealer, bundle, mesh_pb2.SYNC_REQUEST, sync_pb2.SyncRequest()))
    hub = Peer(HUB, bundle.hub_sign_pk, bundle.hub_box_pk)
    device = Opener(
        home_id=home.home_id,
        node_id=bundle.device_id,
        box_key=bundle.keys.box,
        lookup=lambda s: hub if s == HUB else None,
        replay=ReplayGuard(),
        group_key=bundle.group_key,
    )
    got = device.open(reply)
    assert isinstance(got, Opened) and got.kind == mesh_pb2.SYNC_RESPONSE
    with pytest.raises(HubError) as refused:  # the wrong message kind
        await serve(to_hub(sealer, bundle, mesh_pb2.VOICE_ENROL, voice_pb2.VoiceEnrol()))
    assert refused.value.key == "sync.refused" and port.drops["rejected.malformed"] == 1
    with pytest.raises(HubError):  # not an envelope at all
        await serve(b"garbage")
    assert sum(port.drops.values()) == 2


async def test_revoked_devices_are_seen_once_and_get_nothing(
    world: tuple[Home, MeshPort, Bundle, Sealer],
) -> None:
    home, port, bundle, _ = world
    registry = home.registry()
    try:
        records = registry.devices()
    finally:
        registry.close()
    assert port.load(records) == set()
    gone = [replace(r, revoked_ms=1) for r in records]
    assert port.load(gone) == {bundle.device_id}
    assert port.load(gone) == set()
    assert not port.connected
    assert await port.send(bundle.device_id, mesh_pb2.REPLY, mesh_pb2.Reply()) is False


# ---------------------------------------------------------------- the scope table
def test_every_inbound_kind_is_checked_against_the_certificates_scopes(
    world: tuple[Home, MeshPort, Bundle, Sealer],
) -> None:
    """Glasses (utter, ack, timeline.*, approve.gesture; no approve, no execute): an
    executor result and hub-only kinds are refused as ``scope``, counted, and move no
    window; an utterance they may send is accepted afterwards. (Their approval passes this
    check with ``approve.gesture``; the hub's consent then takes it only for the effects
    allowed for a nod — tests/test_nod.py, tests/test_nod_mesh.py.)"""
    from protos import executor_pb2
    from sync.scopes import KIND_SCOPE

    home, port, bundle, sealer = world
    scopes = port.scopes_of(bundle.device_id)
    assert "approve" not in scopes and "approve.gesture" in scopes
    attacks = [
        (mesh_pb2.EXEC_RESULT, executor_pb2.ExecResult(request_id="r-1")),
        (mesh_pb2.REPLY, mesh_pb2.Reply(id="r", text="I sent the e-mail")),
        (mesh_pb2.REVOCATION, mesh_pb2.Revocation(device_id="dev-x")),
    ]
    for kind, msg in attacks:
        assert port.receive(uplink(home, bundle), to_hub(sealer, bundle, kind, msg)) is None
    assert port.drops["rejected.scope"] == len(attacks)
    assert port.replay.state(bundle.device_id) is None, "a refused envelope moved the window"
    ok = to_hub(sealer, bundle, mesh_pb2.UTTERANCE, mesh_pb2.Utterance(id="u1", text="hi"))
    assert isinstance(port.receive(uplink(home, bundle), ok), Opened)
    # the table covers every kind a payload type exists for
    from sync.envelope import PAYLOAD_TYPES

    assert set(KIND_SCOPE) == set(PAYLOAD_TYPES)


def test_a_point_to_point_kind_sealed_to_the_whole_mesh_is_refused(
    world: tuple[Home, MeshPort, Bundle, Sealer],
) -> None:
    home, port, bundle, sealer = world
    group = sealer.seal(mesh_pb2.UTTERANCE, mesh_pb2.Utterance(id="u1", text="hi"), recipient="*")
    assert port.receive(uplink(home, bundle), group) is None
    assert port.drops["rejected.not_boxed"] == 1
    assert port.replay.state(bundle.device_id) is None
    sync = sealer.seal(mesh_pb2.SYNC_UPDATE, sync_pb2.SyncUpdate(), recipient="*")
    assert isinstance(port.receive(topics.sync(home.home_id, bundle.device_id), sync), Opened)


def test_a_huge_counter_is_malformed_and_moves_no_window(
    world: tuple[Home, MeshPort, Bundle, Sealer],
) -> None:
    home, port, bundle, sealer = world
    first = to_hub(sealer, bundle, mesh_pb2.UTTERANCE, mesh_pb2.Utterance(id="u1", text="hi"))
    opened = port.receive(uplink(home, bundle), first)
    assert isinstance(opened, Opened)
    port.commit(opened)
    before = port.replay.state(bundle.device_id)
    huge = replace(sealer, next_counter=lambda: 2**63)
    data = to_hub(huge, bundle, mesh_pb2.UTTERANCE, mesh_pb2.Utterance(id="u2", text="boom"))
    assert port.receive(uplink(home, bundle), data) is None
    assert port.drops["rejected.malformed"] == 1
    assert port.replay.state(bundle.device_id) == before
    nxt = to_hub(sealer, bundle, mesh_pb2.UTTERANCE, mesh_pb2.Utterance(id="u3", text="hi"))
    assert isinstance(port.receive(uplink(home, bundle), nxt), Opened)


async def test_grpc_calls_are_checked_against_the_scopes_too(
    world: tuple[Home, MeshPort, Bundle, Sealer],
) -> None:
    _, port, bundle, sealer = world

    async def answer(opened: Opened, request: sync_pb2.SyncRequest) -> sync_pb2.SyncResponse:
        return sync_pb2.SyncResponse()

    port.scopes[bundle.device_id] = ("utter",)  # a certificate without timeline.read
    with pytest.raises(HubError) as refused:
        await port.serve(
            to_hub(sealer, bundle, mesh_pb2.SYNC_REQUEST, sync_pb2.SyncRequest()),
            request=sync_pb2.SyncRequest,
            kind=mesh_pb2.SYNC_RESPONSE,
            what="sync request",
            error="sync.refused",
            handle=answer,
        )
    assert refused.value.key == "sync.refused" and port.drops["rejected.scope"] == 1
    assert port.replay.state(bundle.device_id) is None
