"""What a device's certificate must grant for each thing it sends: the one table.

Every envelope kind a device may send the hub is in :data:`KIND_SCOPE` with the scope its
certificate must carry (``None``: any enrolled device; :data:`HUB_ONLY`: no device, the hub
sends that kind). Replicated documents have their own scope (:func:`doc_scope`): a
``SYNC_UPDATE`` (or a catch-up push) is checked document by document, so a watch without
``timeline.write`` cannot write timeline entries and glasses without ``notes.write`` cannot
edit notes. Point-to-point kinds must be boxed to their recipient: only the kinds in
:data:`BROADCAST_KINDS` may be sealed with the group key to ``*``.

The scopes are the ones of :data:`provisioning.profiles.SCOPES`.
"""

from __future__ import annotations

from collections.abc import Collection

from protos import mesh_pb2
from sync import documents as docs
from sync.envelope import BROADCAST, DropReason, Opened

HUB_ONLY = "hub"
"""the "scope" of kinds and documents only the hub writes (no certificate carries it)"""

GESTURE_SCOPE = "approve.gesture"
"""glasses' narrow scope: a nod or shake answers the cards the hub lets glasses answer (the
hub checks the card's effect: :mod:`hub.gateway.consent`); never the phone's ``approve``"""

KIND_SCOPE: dict[int, str | None] = {
    mesh_pb2.PRESENCE: None,
    mesh_pb2.UTTERANCE: "utter",
    mesh_pb2.AUDIO_CHUNK: "utter",
    mesh_pb2.AUDIO_PREVIEW: "utter",
    mesh_pb2.WAKE_CLAIM: "utter",
    mesh_pb2.VOICE_ENROL: "utter",
    mesh_pb2.TRUST_WINDOW: "utter",
    # a snapshot answers the hub's CAPTURE_REQUEST for the owner's request (the hub takes a
    # photo only from the device it asked)
    mesh_pb2.PHOTO_CHUNK: "utter",
    mesh_pb2.PHOTO: "utter",
    mesh_pb2.DELIVERY_ACK: "ack",
    mesh_pb2.APPROVAL: "approve",  # or GESTURE_SCOPE: ALTERNATIVE_SCOPES
    mesh_pb2.EXEC_RESULT: "execute",
    mesh_pb2.SYNC_REQUEST: "timeline.read",
    mesh_pb2.SYNC_UPDATE: None,  # checked per document: doc_scope
    mesh_pb2.REPLY: HUB_ONLY,
    mesh_pb2.REVOCATION: HUB_ONLY,
    mesh_pb2.CARD: HUB_ONLY,
    mesh_pb2.CARD_UPDATE: HUB_ONLY,
    mesh_pb2.EXEC_REQUEST: HUB_ONLY,
    mesh_pb2.SYNC_RESPONSE: HUB_ONLY,
    mesh_pb2.WAKE_DECISION: HUB_ONLY,
    mesh_pb2.VOICE_ENROL_RESULT: HUB_ONLY,
    mesh_pb2.VOICEPRINT: HUB_ONLY,
    mesh_pb2.GROUP_KEY: HUB_ONLY,
    mesh_pb2.CAPTURE_REQUEST: HUB_ONLY,
    mesh_pb2.AUDIT_HEAD: None,  # a witness's highest head: the hub only compares it with its log
}
"""envelope kind → the scope the sender's certificate must carry (a kind not here: refused)"""

ALTERNATIVE_SCOPES: dict[int, frozenset[str]] = {mesh_pb2.APPROVAL: frozenset({GESTURE_SCOPE})}
"""kinds a narrower scope may also send: the answer of a nod on the glasses is an
``APPROVAL`` too, checked card by card by the hub"""

BROADCAST_KINDS: frozenset[int] = frozenset({mesh_pb2.SYNC_UPDATE})
"""the kinds a device may seal with the group key to ``*``; every other kind is boxed"""

HUB_ENTRY_KINDS: frozenset[str] = frozenset({"reply", "utterance", "reminder", "photo"})
"""timeline entry kinds only the hub writes (the assistant's words, admitted utterances,
reminders that came due, the snapshots it stored): a
device's replicated entry of one of these kinds is refused even with ``timeline.write``"""


def doc_scope(doc_id: str) -> str:
    """The scope a device needs to write replicated document ``doc_id``."""
    if doc_id.startswith(docs.TIMELINE):
        return "timeline.write"
    if doc_id == docs.NOTES:
        return "notes.write"
    return HUB_ONLY  # seq documents, and anything unknown


def kind_refusal(opened: Opened, scopes: Collection[str]) -> tuple[DropReason, str] | None:
    """Why the hub refuses ``opened`` from a device holding ``scopes`` (``None``: it may send
    it): the kind's scope missing, or a point-to-point kind sealed to the whole mesh."""
    if opened.kind not in KIND_SCOPE:
        return DropReason.SCOPE, f"kind {opened.kind} is not sent by devices"
    needed = KIND_SCOPE[opened.kind]
    if (
        needed is not None
        and needed not in scopes
        and not ALTERNATIVE_SCOPES.get(opened.kind, frozenset()) & set(scopes)
    ):
        return DropReason.SCOPE, f"kind {opened.kind} needs the {needed!r} scope"
    if opened.recipient == BROADCAST and opened.kind not in BROADCAST_KINDS:
        return DropReason.NOT_BOXED, f"kind {opened.kind} sealed to the whole mesh"
    return None


def doc_refusal(doc_id: str, scopes: Collection[str]) -> str | None:
    """Why a device holding ``scopes`` may not write ``doc_id`` (``None``: it may)."""
    needed = doc_scope(doc_id)
    if needed == HUB_ONLY or needed in scopes:
        return None  # hub-only documents are refused by sync.replication.refusal
    return f"writing {doc_id[:64]} needs the {needed!r} scope"
