"""Envelopes: sign and seal on the way out; verify, check and open on the way in.

Wire form: :class:`protos.mesh_pb2.SignedEnvelope`. The receiver's :meth:`Opener.open`
never raises on hostile bytes: it returns :class:`Opened` or :class:`Dropped` with a
:class:`DropReason`, and the caller counts and logs the drop.
"""

from __future__ import annotations

import enum
import secrets
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from nacl.exceptions import BadSignatureError, CryptoError
from nacl.public import Box, PrivateKey, PublicKey
from nacl.secret import SecretBox
from nacl.signing import SigningKey, VerifyKey

from protos import consent_pb2, executor_pb2, mesh_pb2, sync_pb2, vision_pb2, voice_pb2
from protos.clock import now_ms
from protos.codec import ENVELOPE_CONTEXT, parse, signing_input

ENVELOPE_VERSION = 1
MAX_ENVELOPE_BYTES = 256 * 1024
"""bytes: larger envelopes are dropped unread"""
MAX_ID_CHARS = 128
"""characters allowed in sender, recipient and trace id"""
REPLAY_WINDOW = 1024
"""counters: how far below the highest seen counter a not-yet-seen one is still accepted"""
HUB = "hub"
BROADCAST = "*"
MAX_INT = 2**63 - 1
"""the largest counter, timestamp or other number an envelope may carry (SQLite's INTEGER)"""

PAYLOAD_TYPES: dict[int, type[Message]] = {
    mesh_pb2.UTTERANCE: mesh_pb2.Utterance,
    mesh_pb2.REPLY: mesh_pb2.Reply,
    mesh_pb2.DELIVERY_ACK: mesh_pb2.DeliveryAck,
    mesh_pb2.PRESENCE: mesh_pb2.Presence,
    mesh_pb2.REVOCATION: mesh_pb2.Revocation,
    mesh_pb2.CARD: consent_pb2.ConfirmCard,
    mesh_pb2.APPROVAL: consent_pb2.Approval,
    mesh_pb2.CARD_UPDATE: consent_pb2.CardUpdate,
    mesh_pb2.EXEC_REQUEST: executor_pb2.ExecRequest,
    mesh_pb2.EXEC_RESULT: executor_pb2.ExecResult,
    mesh_pb2.SYNC_UPDATE: sync_pb2.SyncUpdate,
    mesh_pb2.SYNC_REQUEST: sync_pb2.SyncRequest,
    mesh_pb2.SYNC_RESPONSE: sync_pb2.SyncResponse,
    mesh_pb2.AUDIO_CHUNK: voice_pb2.AudioChunk,
    mesh_pb2.AUDIO_PREVIEW: voice_pb2.AudioPreview,
    mesh_pb2.WAKE_CLAIM: voice_pb2.WakeClaim,
    mesh_pb2.WAKE_DECISION: voice_pb2.WakeDecision,
    mesh_pb2.VOICE_ENROL: voice_pb2.VoiceEnrol,
    mesh_pb2.VOICE_ENROL_RESULT: voice_pb2.VoiceEnrolResult,
    mesh_pb2.VOICEPRINT: voice_pb2.Voiceprint,
    mesh_pb2.TRUST_WINDOW: voice_pb2.TrustWindow,
    mesh_pb2.GROUP_KEY: mesh_pb2.GroupKey,
    mesh_pb2.AUDIT_HEAD: consent_pb2.AuditHead,
    mesh_pb2.CAPTURE_REQUEST: vision_pb2.CaptureRequest,
    mesh_pb2.PHOTO_CHUNK: vision_pb2.PhotoChunk,
    mesh_pb2.PHOTO: vision_pb2.Photo,
}
"""Kind → payload message class; a kind not here is malformed."""


class DropReason(enum.StrEnum):
    """Why an incoming envelope was dropped (the hub counts drops by these)."""

    OVERSIZE = "oversize"
    MALFORMED = "malformed"
    WRONG_HOME = "wrong_home"
    WRONG_RECIPIENT = "wrong_recipient"
    UNKNOWN_SENDER = "unknown_sender"
    REVOKED = "revoked"
    BAD_SIGNATURE = "bad_signature"
    REPLAYED = "replayed"
    STALE = "stale"
    UNDECRYPTABLE = "undecryptable"
    SPOOFED_TOPIC = "spoofed_topic"
    SCOPE = "scope"
    """the sender's certificate lacks the scope the kind (or document) needs"""
    NOT_BOXED = "not_boxed"
    """a point-to-point kind sealed with the group key to the whole mesh"""


@dataclass(frozen=True)
class Peer:
    """What a receiver knows of a sender: its keys and whether it was revoked."""

    node_id: str
    sign_pk: bytes
    box_pk: bytes
    revoked: bool = False


@dataclass(frozen=True)
class Opened:
    """A verified, decrypted envelope."""

    sender: str
    counter: int
    time_ms: int
    kind: int
    recipient: str
    trace_id: str
    payload: Message


@dataclass(frozen=True)
class Dropped:
    """A refused envelope and why; ``sender`` is whatever it claimed (may be empty)."""

    reason: DropReason
    sender: str = ""
    detail: str = ""


def new_trace_id() -> str:
    return uuid.uuid4().hex


class ReplayGuard:
    """Per-sender sliding window of counters (as in IPsec's anti-replay window).

    ``check`` is pure; ``commit`` records a counter once the message was accepted.
    ``state``/``restore`` let the owner persist the window next to what it ingested.
    """

    def __init__(self, window: int = REPLAY_WINDOW) -> None:
        self.window = window
        self._highest: dict[str, int] = {}
        self._seen: dict[str, int] = {}  # bit i set: counter (highest - i) was seen

    def check(self, sender: str, counter: int) -> DropReason | None:
        highest = self._highest.get(sender)
        if not 0 < counter <= MAX_INT:
            return DropReason.MALFORMED
        if highest is None or counter > highest:
            return None
        offset = highest - counter
        if offset >= self.window:
            return DropReason.STALE
        if (self._seen[sender] >> offset) & 1:
            return DropReason.REPLAYED
        return None

    def commit(self, sender: str, counter: int) -> None:
        highest = self._highest.get(sender)
        mask = (1 << self.window) - 1
        if highest is None:
            self._highest[sender], self._seen[sender] = counter, 1
        elif counter > highest:
            # a jump past the whole window forgets it (never shift by a 64-bit gap)
            shift = counter - highest
            seen = (self._seen[sender] << shift) | 1 if shift < self.window else 1
            self._seen[sender] = seen & mask
            self._highest[sender] = counter
        elif highest - counter < self.window:
            self._seen[sender] |= 1 << (highest - counter)

    def state(self, sender: str) -> tuple[int, bytes] | None:
        if sender not in self._highest:
            return None
        return self._highest[sender], self._seen[sender].to_bytes(self.window // 8, "big")

    def restore(self, sender: str, highest: int, seen: bytes) -> None:
        self._highest[sender] = highest
        self._seen[sender] = int.from_bytes(seen, "big")


class _Keys(Protocol):
    @property
    def sign(self) -> SigningKey: ...
    @property
    def box(self) -> PrivateKey: ...


class GroupEpoch(Protocol):
    @property
    def number(self) -> int: ...
    @property
    def key(self) -> bytes: ...


class GroupKeyRing(Protocol):
    """The mesh group key epochs a node holds (``provisioning.epochs.GroupKeys``): the
    current one seals broadcasts; any held one (current and previous) opens them."""

    @property
    def current(self) -> GroupEpoch: ...
    def key(self, epoch: int) -> bytes | None: ...


class DeviceIdentity(Protocol):
    """What a device's bundle (``provisioning.bundle.Bundle``) gives a Sealer."""

    @property
    def home_id(self) -> str: ...
    @property
    def device_id(self) -> str: ...
    @property
    def keys(self) -> _Keys: ...
    @property
    def group_key(self) -> bytes: ...


@dataclass
class Sealer:
    """Signs and seals envelopes from one node."""

    home_id: str
    node_id: str
    sign_key: SigningKey
    box_key: PrivateKey
    next_counter: Callable[[], int]
    group_key: bytes | None = None
    """epoch 0's key, used when there is no ``group_keys``"""
    group_keys: GroupKeyRing | None = None
    """the epochs held: broadcasts are sealed with the current one and name it"""
    _boxes: dict[bytes, Box] = field(default_factory=dict, repr=False)

    @classmethod
    def for_device(
        cls,
        bundle: DeviceIdentity,
        next_counter: Callable[[], int],
        group_keys: GroupKeyRing | None = None,
    ) -> Sealer:
        """The Sealer of a device: its bundle's ids and keys, counting with ``next_counter``."""
        return cls(
            home_id=bundle.home_id,
            node_id=bundle.device_id,
            sign_key=bundle.keys.sign,
            box_key=bundle.keys.box,
            next_counter=next_counter,
            group_key=bundle.group_key,
            group_keys=group_keys,
        )

    def seal(
        self,
        kind: int,
        payload: Message,
        *,
        recipient: str,
        recipient_box_pk: bytes | None = None,
        trace_id: str | None = None,
    ) -> bytes:
        """Return the wire bytes. ``recipient_box_pk=None`` seals with the group key."""
        plain = payload.SerializeToString()
        epoch = 0
        if recipient_box_pk is None:
            key = self.group_key
            if self.group_keys is not None:
                epoch, key = self.group_keys.current.number, self.group_keys.current.key
            if key is None:
                raise ValueError("no group key to seal a broadcast with")
            seal, sealed = mesh_pb2.GROUP, bytes(SecretBox(key).encrypt(plain))
        else:
            box = self._boxes.get(recipient_box_pk)
            if box is None:
                box = self._boxes[recipient_box_pk] = Box(self.box_key, PublicKey(recipient_box_pk))
            seal, sealed = mesh_pb2.BOX, bytes(box.encrypt(plain))
        body = mesh_pb2.EnvelopeBody(
            version=ENVELOPE_VERSION,
            home_id=self.home_id,
            sender=self.node_id,
            counter=self.next_counter(),
            time_ms=now_ms(),
            kind=kind,  # type: ignore[arg-type]
            recipient=recipient,
            trace_id=trace_id or new_trace_id(),
            seal=seal,
            sealed=sealed,
            epoch=epoch,
        ).SerializeToString()
        sig = self.sign_key.sign(signing_input(ENVELOPE_CONTEXT, body)).signature
        return mesh_pb2.SignedEnvelope(body=body, signature=sig).SerializeToString()


@dataclass
class Opener:
    """Verifies and opens envelopes addressed to one node (or broadcast to the mesh)."""

    home_id: str
    node_id: str
    box_key: PrivateKey
    lookup: Callable[[str], Peer | None]
    replay: ReplayGuard
    group_key: bytes | None = None
    """epoch 0's key, used when there is no ``group_keys``"""
    group_keys: GroupKeyRing | None = None
    """the epochs held: a broadcast of another epoch is undecryptable"""
    max_bytes: int = MAX_ENVELOPE_BYTES
    _boxes: dict[bytes, Box] = field(default_factory=dict, repr=False)

    def open(self, data: bytes, *, commit: bool = True) -> Opened | Dropped:
        """Verify ``data``; with ``commit=False`` the caller records the counter itself."""
        if len(data) > self.max_bytes:
            return Dropped(DropReason.OVERSIZE, detail=f"{len(data)} bytes")
        outer = parse(mesh_pb2.SignedEnvelope, data, self.max_bytes)
        if outer is None:
            return Dropped(DropReason.MALFORMED, detail="not an envelope")
        # one wire form per envelope: no unknown, repeated or reordered outer fields
        canonical = mesh_pb2.SignedEnvelope(body=outer.body, signature=outer.signature)
        if canonical.SerializeToString() != data:
            return Dropped(DropReason.MALFORMED, detail="not in canonical form")
        body = parse(mesh_pb2.EnvelopeBody, outer.body, self.max_bytes)
        if body is None or len(outer.signature) != 64:
            return Dropped(DropReason.MALFORMED, detail="bad body or signature length")
        sender = body.sender[:MAX_ID_CHARS]
        if (
            body.version != ENVELOPE_VERSION
            or not body.sender
            or max(len(body.sender), len(body.recipient), len(body.trace_id)) > MAX_ID_CHARS
            or (body.epoch != 0 and body.seal != mesh_pb2.GROUP)
        ):
            return Dropped(DropReason.MALFORMED, sender, "header fields")
        if body.home_id != self.home_id:
            return Dropped(DropReason.WRONG_HOME, sender, body.home_id[:MAX_ID_CHARS])
        if body.recipient not in (self.node_id, BROADCAST):
            return Dropped(DropReason.WRONG_RECIPIENT, sender, body.recipient)
        peer = self.lookup(body.sender)
        if peer is None:
            return Dropped(DropReason.UNKNOWN_SENDER, sender)
        try:
            VerifyKey(peer.sign_pk).verify(
                signing_input(ENVELOPE_CONTEXT, outer.body), outer.signature
            )
        except (BadSignatureError, ValueError):
            return Dropped(DropReason.BAD_SIGNATURE, sender)
        if peer.revoked:
            return Dropped(DropReason.REVOKED, sender)
        if not 0 <= body.time_ms <= MAX_INT:
            return Dropped(DropReason.MALFORMED, sender, f"time {body.time_ms}")
        verdict = self.replay.check(body.sender, body.counter)
        if verdict is not None:
            return Dropped(verdict, sender, f"counter {body.counter}")
        plain = self._unseal(body, peer)
        if plain is None:
            return Dropped(DropReason.UNDECRYPTABLE, sender)
        cls = PAYLOAD_TYPES.get(body.kind)
        payload = parse(cls, plain, self.max_bytes) if cls is not None else None
        if payload is None:
            return Dropped(DropReason.MALFORMED, sender, f"payload of kind {body.kind}")
        if (bad := out_of_range(payload)) is not None:
            return Dropped(DropReason.MALFORMED, sender, f"kind {body.kind}: {bad} out of range")
        if commit:
            self.replay.commit(body.sender, body.counter)
        return Opened(
            sender=body.sender,
            counter=body.counter,
            time_ms=body.time_ms,
            kind=body.kind,
            recipient=body.recipient,
            trace_id=body.trace_id,
            payload=payload,
        )

    def _unseal(self, body: mesh_pb2.EnvelopeBody, peer: Peer) -> bytes | None:
        try:
            if body.seal == mesh_pb2.GROUP and body.recipient == BROADCAST:
                if self.group_keys is not None:
                    key = self.group_keys.key(body.epoch)
                else:
                    key = self.group_key if body.epoch == 0 else None
                if key is None:
                    return None
                return bytes(SecretBox(key).decrypt(body.sealed))
            if body.seal == mesh_pb2.BOX and body.recipient == self.node_id:
                box = self._boxes.get(peer.box_pk)
                if box is None:
                    box = self._boxes[peer.box_pk] = Box(self.box_key, PublicKey(peer.box_pk))
                return bytes(box.decrypt(body.sealed))
        except (CryptoError, ValueError, TypeError):
            return None
        return None


_UNSIGNED_64 = frozenset({FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64})
_SIGNED_64 = frozenset(
    {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64}
)


def out_of_range(msg: Message, depth: int = 0) -> str | None:
    """The name of the first number in ``msg`` an envelope may not carry: an unsigned 64-bit
    one above :data:`MAX_INT` (SQLite stores signed 64-bit integers), or a negative time
    (a signed field named ``…_ms``); ``None`` when every number is in range."""
    if depth > 32:
        return "nesting"
    for fd, value in msg.ListFields():
        values: Iterable[Any]
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            values = list(value.values())  # a map: its values (no map carries numbers today)
            if fd.message_type.fields_by_name["value"].type != FieldDescriptor.TYPE_MESSAGE:
                continue
        else:
            values = value if fd.is_repeated else (value,)
        for v in values:
            if fd.type == FieldDescriptor.TYPE_MESSAGE:
                if (inner := out_of_range(v, depth + 1)) is not None:
                    return f"{fd.name}.{inner}"
            elif fd.type in _UNSIGNED_64 and v > MAX_INT:
                return fd.name
            elif fd.type in _SIGNED_64 and fd.name.endswith("_ms") and v < 0:
                return fd.name
    return None


def random_id(prefix: str = "") -> str:
    return prefix + secrets.token_hex(12)
