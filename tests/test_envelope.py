"""Envelopes: sealing and opening, every drop reason, the replay window, and fuzzing.

An :class:`Opener` faces bytes from an untrusted broker: whatever arrives, it returns
``Opened`` only for an envelope a known, unrevoked peer signed for this node in this home,
once per counter, and otherwise ``Dropped`` with a reason. It never raises.
"""

from __future__ import annotations

import itertools
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nacl.public import Box, PrivateKey
from nacl.secret import SecretBox
from nacl.signing import SigningKey

from protos import consent_pb2, mesh_pb2, sync_pb2
from protos.codec import CERTIFICATE_CONTEXT, ENVELOPE_CONTEXT, parse, signing_input
from provisioning.epochs import DEFAULT_ROTATION_DAYS, Epoch, GroupKeys, rotation_days
from sync.envelope import (
    BROADCAST,
    HUB,
    MAX_ENVELOPE_BYTES,
    MAX_ID_CHARS,
    MAX_INT,
    PAYLOAD_TYPES,
    REPLAY_WINDOW,
    Dropped,
    DropReason,
    Opened,
    Opener,
    Peer,
    ReplayGuard,
    Sealer,
    out_of_range,
)

HOME = "0123456789abcdef"
DEV = "d000000000000001"
DEV2 = "d000000000000002"
REVOKED = "d00000000000dead"

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Node:
    node_id: str
    sign: SigningKey = field(default_factory=SigningKey.generate)
    box: PrivateKey = field(default_factory=PrivateKey.generate)

    @property
    def peer(self) -> Peer:
        return Peer(self.node_id, bytes(self.sign.verify_key), bytes(self.box.public_key))


@dataclass
class World:
    """A hub, two devices and a revoked one, sharing a group key."""

    hub: Node = field(default_factory=lambda: Node(HUB))
    dev: Node = field(default_factory=lambda: Node(DEV))
    dev2: Node = field(default_factory=lambda: Node(DEV2))
    gone: Node = field(default_factory=lambda: Node(REVOKED))
    group_key: bytes = field(default_factory=lambda: bytes(range(32)))

    def lookup(self, node_id: str) -> Peer | None:
        for node in (self.hub, self.dev, self.dev2):
            if node.node_id == node_id:
                return node.peer
        if node_id == REVOKED:
            p = self.gone.peer
            return Peer(p.node_id, p.sign_pk, p.box_pk, revoked=True)
        return None

    def sealer(self, node: Node, start: int = 1, *, home_id: str = HOME) -> Sealer:
        return Sealer(
            home_id=home_id,
            node_id=node.node_id,
            sign_key=node.sign,
            box_key=node.box,
            next_counter=itertools.count(start).__next__,
            group_key=self.group_key,
        )

    def opener(self, node: Node | None = None, *, guard: ReplayGuard | None = None) -> Opener:
        node = node or self.hub
        return Opener(
            home_id=HOME,
            node_id=node.node_id,
            box_key=node.box,
            lookup=self.lookup,
            replay=guard or ReplayGuard(),
            group_key=self.group_key,
        )

    def to_hub(self, counter: int = 1, text: str = "hello", sender: Node | None = None) -> bytes:
        """A valid utterance envelope from ``sender`` (default: dev) to the hub."""
        return self.sealer(sender or self.dev, counter).seal(
            mesh_pb2.UTTERANCE,
            mesh_pb2.Utterance(id=f"u-{counter}", text=text),
            recipient=HUB,
            recipient_box_pk=bytes(self.hub.box.public_key),
        )


def forge(
    w: World,
    *,
    sign_key: SigningKey | None = None,
    signature: bytes | None = None,
    plain: bytes | None = None,
    **fields: object,
) -> bytes:
    """Build and sign an envelope by hand; every field defaults to a valid dev → hub one."""
    body_fields: dict[str, object] = {
        "version": 1,
        "home_id": HOME,
        "sender": DEV,
        "counter": 1,
        "time_ms": int(time.time() * 1000),
        "kind": mesh_pb2.UTTERANCE,
        "recipient": HUB,
        "trace_id": "t-1",
        "seal": mesh_pb2.BOX,
    }
    body_fields.update(fields)
    if "sealed" not in body_fields:
        if plain is None:
            plain = mesh_pb2.Utterance(id="u-1", text="hi").SerializeToString()
        body_fields["sealed"] = bytes(Box(w.dev.box, w.hub.box.public_key).encrypt(plain))
    body = mesh_pb2.EnvelopeBody(**body_fields).SerializeToString()  # type: ignore[arg-type]
    if signature is None:
        key = sign_key or w.dev.sign
        signature = key.sign(signing_input(ENVELOPE_CONTEXT, body)).signature
    return mesh_pb2.SignedEnvelope(body=body, signature=signature).SerializeToString()


def dropped(result: Opened | Dropped, reason: DropReason) -> Dropped:
    assert isinstance(result, Dropped), f"expected a drop ({reason}), got {result}"
    assert result.reason == reason, result
    return result


def opened(result: Opened | Dropped) -> Opened:
    assert isinstance(result, Opened), f"expected Opened, got {result}"
    return result


@pytest.fixture
def w() -> World:
    return World()


# --------------------------------------------------------------------------- round trips
def test_box_round_trip(w: World) -> None:
    utt = mesh_pb2.Utterance(id="u-7", text="turn on the lights", channel="mic", source="voice")
    data = w.sealer(w.dev, 7).seal(
        mesh_pb2.UTTERANCE,
        utt,
        recipient=HUB,
        recipient_box_pk=bytes(w.hub.box.public_key),
        trace_id="trace-7",
    )
    got = opened(w.opener().open(data))
    assert (got.sender, got.counter, got.kind, got.recipient, got.trace_id) == (
        DEV,
        7,
        mesh_pb2.UTTERANCE,
        HUB,
        "trace-7",
    )
    assert abs(got.time_ms - time.time() * 1000) < 60_000
    assert got.payload == utt
    # the broker sees only ciphertext
    assert b"turn on the lights" not in data


def test_box_round_trip_hub_to_device(w: World) -> None:
    reply = mesh_pb2.Reply(id="r-1", utterance_id="u-1", text="ok", seq=1, reply_seq=2)
    data = w.sealer(w.hub).seal(
        mesh_pb2.REPLY, reply, recipient=DEV, recipient_box_pk=bytes(w.dev.box.public_key)
    )
    got = opened(w.opener(w.dev).open(data))
    assert got.sender == HUB and got.payload == reply
    # the other device is not the recipient, and could not decrypt it anyway
    dropped(w.opener(w.dev2).open(data), DropReason.WRONG_RECIPIENT)


def test_group_round_trip(w: World) -> None:
    rev = mesh_pb2.Revocation(device_id=REVOKED, revoked_ms=123)
    data = w.sealer(w.hub).seal(mesh_pb2.REVOCATION, rev, recipient=BROADCAST)
    for node in (w.dev, w.dev2):
        got = opened(w.opener(node).open(data))
        assert got.recipient == BROADCAST and got.payload == rev
    assert b"d00000000000dead" not in data
    no_group = w.opener(w.dev)
    no_group.group_key = None
    dropped(no_group.open(data), DropReason.UNDECRYPTABLE)


def test_group_seal_needs_a_group_key(w: World) -> None:
    s = w.sealer(w.hub)
    s.group_key = None
    with pytest.raises(ValueError):
        s.seal(mesh_pb2.REVOCATION, mesh_pb2.Revocation(), recipient=BROADCAST)


# --------------------------------------------------------------------------- group key epochs
def ring(*epochs: int, path: Path | None = None) -> GroupKeys:
    """A key ring holding ``epochs`` (keys derived from the number, made at time 0)."""
    return GroupKeys(path, [Epoch(n, bytes([n % 256]) * 32, 0) for n in epochs])


def test_a_broadcast_names_its_epoch_and_opens_only_with_that_epochs_key(w: World) -> None:
    hub = w.sealer(w.hub)
    hub.group_keys = ring(1, 2)
    rev = mesh_pb2.Revocation(device_id=REVOKED, revoked_ms=1)
    data = hub.seal(mesh_pb2.REVOCATION, rev, recipient=BROADCAST)
    body = mesh_pb2.EnvelopeBody.FromString(mesh_pb2.SignedEnvelope.FromString(data).body)
    assert (body.seal, body.epoch) == (mesh_pb2.GROUP, 2)
    for keys in (ring(2), ring(1, 2), ring(2, 3)):  # current, or kept as the previous one
        node = w.opener(w.dev)
        node.group_keys = keys
        assert opened(node.open(data)).payload == rev
    for keys in (ring(0, 1), ring(3, 4)):  # before the epoch, or after it was dropped
        node = w.opener(w.dev)
        node.group_keys = keys
        dropped(node.open(data), DropReason.UNDECRYPTABLE)
    # a node without a ring (an old bundle's code path) holds epoch 0 only
    dropped(w.opener(w.dev).open(data), DropReason.UNDECRYPTABLE)


def test_epoch_zero_is_the_group_key_old_bundles_hold(w: World) -> None:
    rev = mesh_pb2.Revocation(device_id=REVOKED)
    old = w.sealer(w.hub).seal(mesh_pb2.REVOCATION, rev, recipient=BROADCAST)  # no ring
    body = mesh_pb2.EnvelopeBody.FromString(mesh_pb2.SignedEnvelope.FromString(old).body)
    assert body.epoch == 0
    node = w.opener(w.dev)
    node.group_keys = GroupKeys(None, [Epoch(0, w.group_key, 0)])
    assert opened(node.open(old)).payload == rev
    hub = w.sealer(w.hub, 10)
    hub.group_keys = GroupKeys(None, [Epoch(0, w.group_key, 0)])
    assert opened(w.opener(w.dev2).open(hub.seal(mesh_pb2.REVOCATION, rev, recipient=BROADCAST)))


def test_a_rewritten_epoch_breaks_the_signature_and_a_boxed_epoch_is_malformed(w: World) -> None:
    hub = w.sealer(w.hub)
    hub.group_keys = ring(1, 2)
    data = hub.seal(mesh_pb2.REVOCATION, mesh_pb2.Revocation(), recipient=BROADCAST)
    outer = mesh_pb2.SignedEnvelope.FromString(data)
    body = mesh_pb2.EnvelopeBody.FromString(outer.body)
    body.epoch = 1
    outer.body = body.SerializeToString()
    node = w.opener(w.dev)
    node.group_keys = ring(1, 2)
    dropped(node.open(outer.SerializeToString()), DropReason.BAD_SIGNATURE)
    dropped(w.opener().open(forge(w, epoch=3)), DropReason.MALFORMED)


def test_the_ring_keeps_the_current_and_the_previous_epoch(tmp_path: Path) -> None:
    path = tmp_path / "state" / "group-keys.json"
    keys = GroupKeys.load(path, legacy=b"\x00" * 32)
    assert (keys.current.number, keys.key(0)) == (0, b"\x00" * 32)
    first = keys.rotate()
    second = keys.rotate()
    assert [e.number for e in keys.epochs] == [1, 2] and keys.key(0) is None
    assert first.key != second.key and len(second.key) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = GroupKeys.load(path, legacy=b"\x00" * 32)
    assert again.epochs == keys.epochs
    # what a device is sent: a repeat, a too-old one, a bad key are refused; a jump is taken
    assert not again.add(2, second.key, 0)
    assert not again.add(0, b"\x01" * 32, 0)
    assert not again.add(7, b"short", 0)
    assert again.add(5, b"\x05" * 32, 9)
    assert [e.number for e in again.epochs] == [2, 5]
    assert keys.reload() and keys.current.number == 5  # another process took it


def test_periodic_rotation_is_due_after_the_configured_days() -> None:
    keys = GroupKeys(None, [Epoch(3, b"\x03" * 32, 1_000)])
    day = 86_400_000
    assert not keys.due(1_000 + 29 * day, 30) and keys.due(1_000 + 30 * day, 30)
    assert not keys.due(10**15, 0)  # 0 turns it off
    assert rotation_days({}) == DEFAULT_ROTATION_DAYS == 30
    assert rotation_days({"mesh": {"group_key_days": 7}}) == 7
    assert rotation_days({"mesh": {"group_key_days": "x"}}) == 30


def test_every_payload_kind_round_trips(w: World) -> None:
    samples: dict[int, Message] = {
        mesh_pb2.UTTERANCE: mesh_pb2.Utterance(id="u", text="x"),
        mesh_pb2.REPLY: mesh_pb2.Reply(id="r", text="y"),
        mesh_pb2.DELIVERY_ACK: mesh_pb2.DeliveryAck(reply_id="r", state=mesh_pb2.PLAYED),
        mesh_pb2.PRESENCE: mesh_pb2.Presence(state=mesh_pb2.ONLINE, session="s"),
        mesh_pb2.REVOCATION: mesh_pb2.Revocation(device_id="d"),
        mesh_pb2.CARD: consent_pb2.ConfirmCard(card_id="c", title="t"),
        mesh_pb2.APPROVAL: consent_pb2.Approval(body=b"x", signature=b"y"),
        mesh_pb2.CARD_UPDATE: consent_pb2.CardUpdate(card_id="c", state=consent_pb2.EXECUTED),
        mesh_pb2.SYNC_UPDATE: sync_pb2.SyncUpdate(
            updates=[sync_pb2.DocUpdate(doc="notes", blob=b"x")]
        ),
        mesh_pb2.SYNC_REQUEST: sync_pb2.SyncRequest(list_docs=True),
        mesh_pb2.SYNC_RESPONSE: sync_pb2.SyncResponse(applied=2),
    }
    for kind, cls in PAYLOAD_TYPES.items():  # kinds other work adds: at least an empty one
        samples.setdefault(kind, cls())
    sealer, opener = w.sealer(w.dev), w.opener()
    for kind, payload in samples.items():
        data = sealer.seal(kind, payload, recipient=HUB, recipient_box_pk=w.hub.peer.box_pk)
        got = opened(opener.open(data))
        assert got.kind == kind and got.payload == payload


# --------------------------------------------------------------------------- drop reasons
def test_oversize(w: World) -> None:
    dropped(w.opener().open(b"\x00" * (MAX_ENVELOPE_BYTES + 1)), DropReason.OVERSIZE)
    data = w.to_hub(text="x" * 2000)
    small = w.opener()
    small.max_bytes = len(data) - 1
    dropped(small.open(data), DropReason.OVERSIZE)
    small.max_bytes = len(data)
    opened(small.open(data))


def test_ten_megabytes_are_refused_unread(w: World) -> None:
    blob = b"\x0a" + b"\xff" * (10 * 1024 * 1024)
    start = time.monotonic()
    dropped(w.opener().open(blob), DropReason.OVERSIZE)
    assert parse(mesh_pb2.SignedEnvelope, blob, MAX_ENVELOPE_BYTES) is None
    assert time.monotonic() - start < 1.0


@pytest.mark.parametrize(
    "data",
    [b"\xff", b"\xff\xff\xff\xff", b"garbage that is not protobuf \x00\x01", b"\x0a\x05ab"],
    ids=["byte", "bytes", "text", "short-length"],
)
def test_malformed_garbage(w: World, data: bytes) -> None:
    dropped(w.opener().open(data), DropReason.MALFORMED)


def test_malformed_every_truncation(w: World) -> None:
    data = w.to_hub()
    opener = w.opener()
    for n in range(len(data)):
        dropped(opener.open(data[:n]), DropReason.MALFORMED)
    opened(opener.open(data))


@pytest.mark.parametrize("length", [0, 1, 63, 65, 128])
def test_malformed_signature_length(w: World, length: int) -> None:
    dropped(w.opener().open(forge(w, signature=b"\x01" * length)), DropReason.MALFORMED)


def test_malformed_body_not_an_envelope_body(w: World) -> None:
    body = b"\xff\xff\xff"
    sig = w.dev.sign.sign(signing_input(ENVELOPE_CONTEXT, body)).signature
    data = mesh_pb2.SignedEnvelope(body=body, signature=sig).SerializeToString()
    dropped(w.opener().open(data), DropReason.MALFORMED)


@pytest.mark.parametrize("kind", [mesh_pb2.KIND_UNSPECIFIED, 6, 99, -1])
def test_malformed_unknown_kind(w: World, kind: int) -> None:
    dropped(w.opener().open(forge(w, kind=kind)), DropReason.MALFORMED)


@pytest.mark.parametrize(
    "plain", [b"\xff", b"\x0a\x10short", b"\x0a\x02\xc3\x28"], ids=["varint", "length", "utf8"]
)
def test_malformed_payload_not_parseable(w: World, plain: bytes) -> None:
    dropped(w.opener().open(forge(w, plain=plain)), DropReason.MALFORMED)


@pytest.mark.parametrize(
    "fields",
    [
        {"version": 0},
        {"version": 2},
        {"sender": ""},
        {"sender": DEV + "x" * MAX_ID_CHARS},
        {"recipient": "x" * (MAX_ID_CHARS + 1)},
        {"trace_id": "t" * (MAX_ID_CHARS + 1)},
        {"counter": 0},
    ],
    ids=lambda f: next(iter(f)),
)
def test_malformed_header(w: World, fields: dict[str, Any]) -> None:
    dropped(w.opener().open(forge(w, **fields)), DropReason.MALFORMED)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, value: bytes) -> bytes:
    """A length-delimited protobuf field, encoded by hand."""
    return _varint(number << 3 | 2) + _varint(len(value)) + value


@pytest.mark.parametrize(
    "rewrite",
    [
        lambda body, sig: _field(1, body) + _field(2, sig) + b"\x18\x01",  # unknown varint
        lambda body, sig: _field(1, body) + _field(2, sig) + _field(4, b""),  # unknown bytes
        lambda body, sig: _field(2, b"x" * 64) + _field(1, body) + _field(2, sig),  # repeated
        lambda body, sig: _field(1, b"junk") + _field(1, body) + _field(2, sig),  # repeated
        lambda body, sig: _field(2, sig) + _field(1, body),  # reordered
    ],
    ids=["unknown-varint", "unknown-bytes", "repeated-signature", "repeated-body", "reordered"],
)
def test_malformed_non_canonical_wire_form(
    w: World, rewrite: Callable[[bytes, bytes], bytes]
) -> None:
    """Only the one canonical encoding opens: the broker cannot mint look-alike copies."""
    data = w.to_hub()
    outer = mesh_pb2.SignedEnvelope.FromString(data)
    assert _field(1, outer.body) + _field(2, outer.signature) == data
    variant = rewrite(outer.body, outer.signature)
    reparsed = mesh_pb2.SignedEnvelope.FromString(variant)
    assert (reparsed.body, reparsed.signature) == (outer.body, outer.signature)
    opener = w.opener()
    dropped(opener.open(variant), DropReason.MALFORMED)
    opened(opener.open(data))


def test_wrong_home(w: World) -> None:
    data = w.sealer(w.dev, home_id="fedcba9876543210").seal(
        mesh_pb2.UTTERANCE,
        mesh_pb2.Utterance(id="u"),
        recipient=HUB,
        recipient_box_pk=w.hub.peer.box_pk,
    )
    dropped(w.opener().open(data), DropReason.WRONG_HOME)


def test_wrong_recipient(w: World) -> None:
    data = w.sealer(w.dev).seal(
        mesh_pb2.UTTERANCE,
        mesh_pb2.Utterance(id="u"),
        recipient=DEV2,
        recipient_box_pk=w.dev2.peer.box_pk,
    )
    dropped(w.opener().open(data), DropReason.WRONG_RECIPIENT)
    opened(w.opener(w.dev2).open(data))


def test_unknown_sender(w: World) -> None:
    stranger = Node("d0000000000000ff")
    r = dropped(w.opener().open(w.to_hub(sender=stranger)), DropReason.UNKNOWN_SENDER)
    assert r.sender == "d0000000000000ff"


def test_revoked(w: World) -> None:
    dropped(w.opener().open(w.to_hub(sender=w.gone)), DropReason.REVOKED)


def test_bad_signature_any_flipped_signature_byte(w: World) -> None:
    data = w.to_hub()
    outer = mesh_pb2.SignedEnvelope.FromString(data)
    opener = w.opener()
    for i in range(64):
        sig = bytearray(outer.signature)
        sig[i] ^= 0x01
        bad = mesh_pb2.SignedEnvelope(body=outer.body, signature=bytes(sig)).SerializeToString()
        dropped(opener.open(bad), DropReason.BAD_SIGNATURE)
    opened(opener.open(data))


def test_bad_signature_any_flipped_body_byte(w: World) -> None:
    data = w.to_hub()
    outer = mesh_pb2.SignedEnvelope.FromString(data)
    sealed = mesh_pb2.EnvelopeBody.FromString(outer.body).sealed
    start = outer.body.index(sealed)
    opener = w.opener()
    for i in range(len(outer.body)):
        for mask in (0x01, 0x80):
            body = bytearray(outer.body)
            body[i] ^= mask
            bad = mesh_pb2.SignedEnvelope(body=bytes(body), signature=outer.signature)
            result = opener.open(bad.SerializeToString())
            # a flip in the header may fail an earlier check; it never opens
            assert isinstance(result, Dropped), (i, mask)
            if start <= i < start + len(sealed):
                assert result.reason == DropReason.BAD_SIGNATURE, (i, mask, result)
    opened(opener.open(data))


def test_bad_signature_impersonation_and_domain_separation(w: World) -> None:
    opener = w.opener()
    # another device's key signing in dev's name
    dropped(opener.open(forge(w, sign_key=w.dev2.sign)), DropReason.BAD_SIGNATURE)
    # dev's key over the body without the envelope context, or under another context
    body = mesh_pb2.SignedEnvelope.FromString(forge(w)).body
    for signed_input in (body, signing_input(CERTIFICATE_CONTEXT, body)):
        sig = w.dev.sign.sign(signed_input).signature
        data = mesh_pb2.SignedEnvelope(body=body, signature=sig).SerializeToString()
        dropped(opener.open(data), DropReason.BAD_SIGNATURE)
    opened(opener.open(forge(w)))


def test_replayed_same_bytes_twice(w: World) -> None:
    data = w.to_hub(counter=5)
    opener = w.opener()
    opened(opener.open(data))
    dropped(opener.open(data), DropReason.REPLAYED)
    # a re-seal with the same counter is a replay too, whatever else changed
    dropped(opener.open(w.to_hub(counter=5, text="different")), DropReason.REPLAYED)


def test_commit_false_leaves_recording_to_the_caller(w: World) -> None:
    data = w.to_hub(counter=3)
    opener = w.opener()
    opened(opener.open(data, commit=False))
    opened(opener.open(data, commit=False))
    opener.replay.commit(DEV, 3)
    dropped(opener.open(data), DropReason.REPLAYED)


def test_stale_below_the_window(w: World) -> None:
    top = 5000
    opener = w.opener()
    opened(opener.open(w.to_hub(counter=top)))
    dropped(opener.open(w.to_hub(counter=top - REPLAY_WINDOW)), DropReason.STALE)
    dropped(opener.open(w.to_hub(counter=1)), DropReason.STALE)
    opened(opener.open(w.to_hub(counter=top - REPLAY_WINDOW + 1)))


def test_undecryptable(w: World) -> None:
    opener = w.opener()
    # boxed to somebody else's key but addressed to the hub
    other = PrivateKey.generate()
    data = w.sealer(w.dev).seal(
        mesh_pb2.UTTERANCE,
        mesh_pb2.Utterance(id="u"),
        recipient=HUB,
        recipient_box_pk=bytes(other.public_key),
    )
    dropped(opener.open(data), DropReason.UNDECRYPTABLE)
    # group-sealed with another group key
    wrong_group = bytes(SecretBox(bytes(32)).encrypt(mesh_pb2.Revocation().SerializeToString()))
    data = forge(
        w,
        counter=2,
        recipient=BROADCAST,
        seal=mesh_pb2.GROUP,
        sealed=wrong_group,
        kind=mesh_pb2.REVOCATION,
    )
    dropped(opener.open(data), DropReason.UNDECRYPTABLE)
    # a seal that does not fit the recipient, or no seal at all
    dropped(opener.open(forge(w, counter=3, seal=mesh_pb2.GROUP)), DropReason.UNDECRYPTABLE)
    dropped(opener.open(forge(w, counter=4, seal=0)), DropReason.UNDECRYPTABLE)
    dropped(opener.open(forge(w, counter=5, sealed=b"")), DropReason.UNDECRYPTABLE)
    # none of these used up its counter
    opened(opener.open(w.to_hub(counter=1)))


def test_out_of_order_inside_the_window_accepted_once_each(w: World) -> None:
    order = [10, 5, 7, 3, 9, 6, 1, 12, 2, 11]
    envelopes = {c: w.to_hub(counter=c) for c in order}
    opener = w.opener()
    for c in order:
        assert opened(opener.open(envelopes[c])).counter == c
    for c in order:
        dropped(opener.open(envelopes[c]), DropReason.REPLAYED)
    for c in (4, 8):  # never seen: still welcome
        opened(opener.open(w.to_hub(counter=c)))


def test_huge_counter_jumps_are_handled(w: World) -> None:
    # a peer's counter may jump far ahead; the window must not try to shift by the gap
    opener = w.opener()
    opened(opener.open(w.to_hub(counter=1)))
    start = time.monotonic()
    opened(opener.open(w.to_hub(counter=2**62)))
    opened(opener.open(w.to_hub(counter=MAX_INT)))
    assert time.monotonic() - start < 1.0
    opened(opener.open(w.to_hub(counter=MAX_INT - 1)))
    dropped(opener.open(w.to_hub(counter=MAX_INT)), DropReason.REPLAYED)
    dropped(opener.open(w.to_hub(counter=2**62)), DropReason.STALE)
    dropped(opener.open(w.to_hub(counter=1)), DropReason.STALE)


def test_counters_past_the_signed_64_bit_range_are_malformed_and_move_no_window(
    w: World,
) -> None:
    """A counter ≥ 2^63 cannot be stored (SQLite INTEGER): malformed, before the window."""
    opener = w.opener()
    opened(opener.open(w.to_hub(counter=5)))
    before = opener.replay.state(DEV)
    for counter in (2**63, 2**63 + 1, 2**64 - 1):
        dropped(opener.open(w.to_hub(counter=counter)), DropReason.MALFORMED)
    assert opener.replay.state(DEV) == before
    assert opener.replay.check(DEV, 2**63) is DropReason.MALFORMED
    opened(opener.open(w.to_hub(counter=6)))  # the sender goes on where it was


@pytest.mark.parametrize("time_ms", [-1, -(2**63)])
def test_a_negative_envelope_time_is_malformed(w: World, time_ms: int) -> None:
    opener = w.opener()
    dropped(opener.open(forge(w, time_ms=time_ms)), DropReason.MALFORMED)
    assert opener.replay.state(DEV) is None


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (mesh_pb2.Utterance(id="u-1", text="hi", started_ms=-5), "started_ms"),
        (mesh_pb2.Reply(id="r-1", seq=2**63), "seq"),
        (mesh_pb2.Presence(state=mesh_pb2.ONLINE, since_ms=-1), "since_ms"),
    ],
)
def test_numbers_out_of_range_in_a_payload_are_malformed(
    w: World, payload: Message, field: str
) -> None:
    kind = {
        mesh_pb2.Utterance: mesh_pb2.UTTERANCE,
        mesh_pb2.Reply: mesh_pb2.REPLY,
        mesh_pb2.Presence: mesh_pb2.PRESENCE,
    }[type(payload)]
    data = w.sealer(w.dev, 1).seal(
        kind, payload, recipient=HUB, recipient_box_pk=bytes(w.hub.box.public_key)
    )
    opener = w.opener()
    result = opener.open(data)
    assert isinstance(result, Dropped) and result.reason is DropReason.MALFORMED
    assert field in result.detail
    assert opener.replay.state(DEV) is None
    assert out_of_range(payload) == field
    assert out_of_range(mesh_pb2.Utterance(id="u", started_ms=MAX_INT)) is None


def test_senders_have_separate_windows(w: World) -> None:
    opener = w.opener()
    opened(opener.open(w.to_hub(counter=4000)))
    opened(opener.open(w.to_hub(counter=1, sender=w.dev2)))
    dropped(opener.open(w.to_hub(counter=1, sender=w.dev2)), DropReason.REPLAYED)


# --------------------------------------------------------------------------- ReplayGuard
def test_replay_guard_state_restore_round_trip(w: World) -> None:
    guard = ReplayGuard()
    assert guard.state(DEV) is None
    seen = [2000, 1990, 1500, 1999, 1100]
    envelopes = {c: w.to_hub(counter=c) for c in [*seen, 1991, 1800, 900]}
    first = w.opener(guard=guard)
    for c in seen:
        opened(first.open(envelopes[c]))
    state = guard.state(DEV)
    assert state is not None and state[0] == 2000

    restored = ReplayGuard()
    restored.restore(DEV, *state)
    assert restored.state(DEV) == state
    again = w.opener(guard=restored)
    for c in seen:
        dropped(again.open(envelopes[c]), DropReason.REPLAYED)
    dropped(again.open(envelopes[900]), DropReason.STALE)
    opened(again.open(envelopes[1991]))
    opened(again.open(envelopes[1800]))
    dropped(again.open(envelopes[1800]), DropReason.REPLAYED)


def test_replay_guard_check_is_pure() -> None:
    guard = ReplayGuard()
    assert guard.check(DEV, 5) is None
    assert guard.check(DEV, 5) is None
    guard.commit(DEV, 5)
    assert guard.check(DEV, 5) == DropReason.REPLAYED
    assert guard.check(DEV, 0) == DropReason.MALFORMED


@given(st.lists(st.integers(1, 3 * REPLAY_WINDOW), max_size=60))
@settings(max_examples=200, deadline=None)
def test_replay_guard_matches_a_model(counters: list[int]) -> None:
    """Accepted iff never accepted before and above (highest accepted - window)."""
    guard = ReplayGuard()
    accepted: set[int] = set()
    for c in counters:
        verdict = guard.check(DEV, c)
        highest = max(accepted, default=0)
        if accepted and c <= highest - REPLAY_WINDOW:
            assert verdict == DropReason.STALE
        elif c in accepted:
            assert verdict == DropReason.REPLAYED
        else:
            assert verdict is None
            guard.commit(DEV, c)
            accepted.add(c)
        state = guard.state(DEV)
        if state is not None:  # and the persisted form says the same
            clone = ReplayGuard()
            clone.restore(DEV, *state)
            assert clone.check(DEV, c) == guard.check(DEV, c)


# --------------------------------------------------------------------------- fuzzing
FUZZ_WORLD = World()
ORIGINAL = FUZZ_WORLD.to_hub(counter=42)


def fresh_opener() -> Opener:
    return FUZZ_WORLD.opener()


def assert_never_opens(data: bytes) -> None:
    result = fresh_opener().open(data)
    assert isinstance(result, Dropped)
    assert isinstance(result.reason, DropReason)


@given(st.binary(max_size=4096))
@FUZZ
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    assert_never_opens(data)


@given(st.binary(max_size=512), st.binary(max_size=128))
@FUZZ
def test_fuzz_arbitrary_signed_envelope_fields(body: bytes, signature: bytes) -> None:
    assert_never_opens(mesh_pb2.SignedEnvelope(body=body, signature=signature).SerializeToString())


Mutation = Callable[[bytes], bytes]


@st.composite
def mutation(draw: st.DrawFn) -> Mutation:
    op = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
    pos = draw(st.integers(0, len(ORIGINAL)))
    if op == "flip":
        mask = draw(st.integers(1, 255))
        return lambda b: b[:pos] + bytes([b[pos] ^ mask]) + b[pos + 1 :] if pos < len(b) else b
    if op == "insert":
        extra = draw(st.binary(min_size=1, max_size=8))
        return lambda b: b[:pos] + extra + b[pos:]
    if op == "delete":
        n = draw(st.integers(1, 8))
        return lambda b: b[:pos] + b[pos + n :]
    return lambda b: b[:pos]


@given(st.lists(mutation(), min_size=1, max_size=4))
@FUZZ
def test_fuzz_mutated_envelope(mutations: list[Mutation]) -> None:
    data = ORIGINAL
    for m in mutations:
        data = m(data)
    result = fresh_opener().open(data)
    if data == ORIGINAL:
        opened(result)
    else:
        assert isinstance(result, Dropped), f"mutated bytes opened: {data.hex()}"


def test_fuzz_original_opens() -> None:
    opened(fresh_opener().open(ORIGINAL))


# Arbitrary EnvelopeBody fields: each drawn valid or invalid; the envelope opens iff all are
# valid. The receiver has already accepted counter SEEN from DEV.
SEEN = 5000
_texts = st.text(max_size=140)


@st.composite
def body_case(draw: st.DrawFn) -> tuple[bytes, bool, dict[str, object]]:
    w = FUZZ_WORLD
    valid = True

    def pick(good: st.SearchStrategy[object], bad: st.SearchStrategy[object]) -> object:
        nonlocal valid
        if draw(st.integers(0, 7)) == 0:
            valid = False
            return draw(bad)
        return draw(good)

    kind = pick(
        st.sampled_from(sorted(PAYLOAD_TYPES)),
        st.integers(-(2**31), 2**31 - 1).filter(lambda k: k not in PAYLOAD_TYPES),
    )
    payload_cls = PAYLOAD_TYPES.get(kind, mesh_pb2.Utterance)  # type: ignore[call-overload]
    plain = payload_cls().SerializeToString()
    if payload_cls is mesh_pb2.Utterance:
        plain = mesh_pb2.Utterance(id=draw(_texts), text=draw(_texts)).SerializeToString()
    box = Box(w.dev.box, w.hub.box.public_key)
    fields: dict[str, object] = {
        "version": pick(st.just(1), st.integers(0, 2**32 - 1).filter(lambda v: v != 1)),
        "home_id": pick(st.just(HOME), _texts.filter(lambda t: t != HOME)),
        "sender": pick(
            st.just(DEV),
            st.sampled_from(["", REVOKED, DEV2, HUB]) | _texts.filter(lambda t: t != DEV),
        ),
        "counter": pick(
            st.integers(SEEN - REPLAY_WINDOW + 1, SEEN - 1) | st.integers(SEEN + 1, MAX_INT),
            st.sampled_from([0, SEEN])
            | st.integers(1, SEEN - REPLAY_WINDOW)
            | st.integers(MAX_INT + 1, 2**64 - 1),  # past SQLite's INTEGER: malformed
        ),
        "time_ms": pick(st.integers(0, MAX_INT), st.integers(-(2**63), -1)),
        "kind": kind,
        "recipient": pick(st.just(HUB), _texts.filter(lambda t: t != HUB)),
        "trace_id": pick(
            st.text(max_size=MAX_ID_CHARS), st.text(min_size=MAX_ID_CHARS + 1, max_size=200)
        ),
        "epoch": pick(st.just(0), st.integers(1, 2**32 - 1)),
        "seal": pick(
            st.just(mesh_pb2.BOX),
            st.integers(-(2**31), 2**31 - 1).filter(lambda s: s != mesh_pb2.BOX),
        ),
        "sealed": pick(
            st.just(bytes(box.encrypt(plain))),
            st.binary(max_size=100)
            | st.just(bytes(Box(w.dev.box, w.dev2.box.public_key).encrypt(plain)))
            | st.just(bytes(box.encrypt(b"\xff\xff")))
            | st.just(bytes(SecretBox(w.group_key).encrypt(plain))),
        ),
    }
    body = mesh_pb2.EnvelopeBody(**fields).SerializeToString()  # type: ignore[arg-type]
    good_sig = w.dev.sign.sign(signing_input(ENVELOPE_CONTEXT, body)).signature
    signature = pick(
        st.just(good_sig),
        st.binary(min_size=64, max_size=64)
        | st.binary(max_size=80).filter(lambda b: len(b) != 64)
        | st.just(w.dev2.sign.sign(signing_input(ENVELOPE_CONTEXT, body)).signature)
        | st.just(w.dev.sign.sign(body).signature),
    )
    data = mesh_pb2.SignedEnvelope(body=body, signature=signature).SerializeToString()  # type: ignore[arg-type]
    return data, valid, fields


@given(body_case())
@FUZZ
def test_fuzz_arbitrary_body_fields(case: tuple[bytes, bool, dict[str, object]]) -> None:
    data, valid, fields = case
    guard = ReplayGuard()
    guard.commit(DEV, SEEN)
    result = FUZZ_WORLD.opener(guard=guard).open(data)
    if not valid:
        assert isinstance(result, Dropped), f"invalid fields opened: {fields}"
        return
    got = opened(result)
    assert (got.sender, got.counter, got.kind, got.trace_id, got.time_ms) == (
        fields["sender"],
        fields["counter"],
        fields["kind"],
        fields["trace_id"],
        fields["time_ms"],
    )
    # and the window moved on: the same envelope is now a replay
    dropped(FUZZ_WORLD.opener(guard=guard).open(data), DropReason.REPLAYED)


MESSAGE_CLASSES = [
    getattr(mesh_pb2, name) for name in sorted(mesh_pb2.DESCRIPTOR.message_types_by_name)
]


@pytest.mark.parametrize("cls", MESSAGE_CLASSES, ids=lambda c: c.__name__)
@given(data=st.binary(max_size=1024))
@settings(max_examples=150, deadline=None)
def test_fuzz_codec_parse(cls: type[Message], data: bytes) -> None:
    msg = parse(cls, data, 4096)
    if msg is not None:
        assert isinstance(msg, cls)
        assert parse(cls, msg.SerializeToString(), 4096) == msg
    if data:
        assert parse(cls, data, len(data) - 1) is None


@pytest.mark.parametrize("cls", MESSAGE_CLASSES, ids=lambda c: c.__name__)
def test_codec_parse_bounds_and_types(cls: type[Message]) -> None:
    assert parse(cls, b"", 0) == cls()
    assert parse(cls, b"\x00" * 11, 10) is None
    assert parse(cls, "not bytes", 4096) is None  # type: ignore[arg-type]
    assert parse(cls, None, 4096) is None  # type: ignore[arg-type]
    start = time.monotonic()
    assert parse(cls, b"\x0a" * (10 * 1024 * 1024), 4096) is None
    assert time.monotonic() - start < 1.0
