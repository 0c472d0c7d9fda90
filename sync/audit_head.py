"""The hub's signed audit head, and the witnesses that keep it.

The hub's audit log (``hub/gateway/audit.py``) ends in a head ``{seq, hash}`` signed with the
hub's Ed25519 key. Signing stops anyone without the key from writing a new head, but a copy
of an *older* log and its older signed head still verifies on its own. So devices that see
the audit head — the phone (``approve`` scope) and the Mac (``executor`` role) — are
witnesses: the hub sends them its head (``AUDIT_HEAD``) when the log grows and when they come
online, each keeps the highest signed head it has seen (``state/audit-head.json``, 0600) and
answers with it when the hub asks (at the hub's start, as the devices come online). A head
older than a witness's — or one whose log does not hold the witness's record — is a
rollback: ``yimi audit verify --witness BUNDLE`` fails, and the hub logs and counts it
(``audit.rollback``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from protos import consent_pb2
from protos.codec import signing_input
from storage.private import write_private

HEAD_CONTEXT = b"yimi.audit-head.v1"
WITNESS_FILE = "audit-head.json"
"""the highest signed head a witness has seen, in its bundle's ``state/``"""
HASH_CHARS = 64

log = logging.getLogger(__name__)


def head_body(seq: int, digest: str) -> bytes:
    """What the hub signs: canonical JSON ``{"hash":…,"seq":…}``."""
    return json.dumps({"seq": seq, "hash": digest}, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class SignedHead:
    seq: int
    hash: str
    sig: bytes

    def valid(self, hub_sign_pk: bytes) -> bool:
        """signed by the hub whose public key is ``hub_sign_pk``"""
        if self.seq < 1 or len(self.hash) != HASH_CHARS:
            return False
        try:
            VerifyKey(hub_sign_pk).verify(
                signing_input(HEAD_CONTEXT, head_body(self.seq, self.hash)), self.sig
            )
        except (BadSignatureError, ValueError, TypeError):
            return False
        return True

    def to_proto(self, *, request: bool = False) -> consent_pb2.AuditHead:
        return consent_pb2.AuditHead(seq=self.seq, hash=self.hash, sig=self.sig, request=request)

    @classmethod
    def from_proto(cls, msg: consent_pb2.AuditHead) -> SignedHead:
        return cls(int(msg.seq), msg.hash[:HASH_CHARS], bytes(msg.sig[:64]))

    def to_json(self) -> dict[str, object]:
        return {"seq": self.seq, "hash": self.hash, "sig": self.sig.hex()}

    @classmethod
    def from_json(cls, data: object) -> SignedHead | None:
        if not isinstance(data, dict):
            return None
        try:
            return cls(int(data["seq"]), str(data["hash"]), bytes.fromhex(str(data["sig"])))
        except (KeyError, ValueError, TypeError):
            return None


class Witness:
    """A device's record of the highest signed audit head it has seen (``state_dir``)."""

    def __init__(self, state_dir: Path, hub_sign_pk: bytes) -> None:
        self.path = Path(state_dir) / WITNESS_FILE
        self.hub_sign_pk = hub_sign_pk

    def highest(self) -> SignedHead | None:
        """the kept head (``None``: none yet, or the file is not a head the hub signed)"""
        try:
            head = SignedHead.from_json(json.loads(self.path.read_text()))
        except (OSError, ValueError):
            return None
        return head if head is not None and head.valid(self.hub_sign_pk) else None

    def see(self, head: SignedHead) -> str:
        """Take a head the hub sent: ``kept`` (higher: now the witness's), ``same``,
        ``older`` (below the kept one: a rollback), ``fork`` (same seq, other hash) or
        ``invalid`` (not signed by the hub)."""
        if not head.valid(self.hub_sign_pk):
            return "invalid"
        kept = self.highest()
        if kept is not None:
            if head.seq < kept.seq:
                return "older"
            if head.seq == kept.seq:
                return "same" if head.hash == kept.hash else "fork"
        write_private(self.path, json.dumps(head.to_json(), sort_keys=True))
        return "kept"


def compare(head_seq: int, hash_at: str | None, witness: SignedHead) -> str:
    """Why a log whose head is ``head_seq`` is not consistent with ``witness`` (``""``: it
    is): ``hash_at`` is the log's record hash at the witness's seq (``None`` if absent)."""
    if head_seq < witness.seq:
        return (
            f"the log ends at seq {head_seq} but the witness holds a head signed by the hub"
            f" at seq {witness.seq}: the log and its head were rolled back"
        )
    if hash_at != witness.hash:
        return (
            f"record {witness.seq} is not the one the witness holds (hash "
            f"{(hash_at or '?')[:12]}… where {witness.hash[:12]}… was signed): the log forks"
        )
    return ""
