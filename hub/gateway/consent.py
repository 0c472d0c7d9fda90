"""The consent authority: first-send memory, confirmation cards, approvals, execution tokens.

Rules (ARCHITECTURE F3):
- ``required = sending or not owner_requested``: a ``send`` needs a card unless the owner
  asked *and* (owner, recipient, task type) was already confirmed once (first-send
  memory); ``owner_data``, ``account``, ``delete`` and ``physical`` need one unless the owner
  asked. Scheduled runs never show a card: such calls are blocked by the gateway.
- A card carries effect, target, title, a bounded content preview, expiry, a nonce and the
  canonical action hash. A new card for the same (task, package, tool) voids older pending
  ones: the action changed.
- An answer is an ``ApprovalBody`` signed by the phone's device key over
  ``"yimi.approval.v1" || 0x00 || body``. It is refused unless the device holds the
  ``approve`` scope, the signature verifies, and card id, action hash, expiry and nonce all
  match a *pending*, unexpired card. Approving consumes the nonce atomically (one UPDATE
  guarded by ``state='pending'``) and mints a single-use execution token in the same
  transaction; a replayed or second approval finds the card no longer pending.
- Denied or expired → the call's receipt becomes ``cancelled``.
- Glasses hold the narrow ``approve.gesture`` scope, not ``approve``: their answer (a nod or
  a shake on the HUD, signed with the glasses' key over the same body) is accepted only for a
  card whose effect the owner allowed for glasses (``home.yaml`` →
  ``glasses: {nod_effects: [send]}``, the default), a ``send`` only to a named recipient, and
  never for a payment (``spend``: the phone's lock path only) — the device is not trusted
  with that choice: :meth:`ConsentAuthority.gesture_refusal`.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from hub.gateway.ledger import Ledger
from protos import consent_pb2, signed
from protos.clock import now_ms
from sync.scopes import GESTURE_SCOPE

CARD_TTL_S = 15 * 60
"""seconds a card waits for the owner before it expires"""
PREVIEW_CHARS = 600
EXPIRED_NOW = "card expired"
"""the refusal reason of the answer that found its card just expired (the call is cancelled)"""
GESTURE_EFFECTS = frozenset({"send"})
"""the effects a nod on the glasses may answer unless home.yaml says otherwise"""
NEVER_BY_GESTURE = frozenset({"spend"})
"""effects no gesture answers, whatever home.yaml says"""
CARD_EFFECTS_IF_UNASKED = frozenset({"owner_data", "account", "delete", "physical", "self_change"})

_CARD_COLS = (
    "card_id, task_id, call_id, owner, package, tool, args, effect, target, task_type, title, "
    "preview, action_hash, nonce, created_ms, expires_ms, state, answered_by, answered_ms, "
    "reason, context"
)


@dataclass(frozen=True)
class Card:
    card_id: str
    task_id: str
    call_id: str
    owner: str
    package: str
    tool: str
    args: dict[str, Any]
    effect: str
    target: str
    task_type: str
    title: str
    preview: str
    action_hash: bytes
    nonce: bytes
    created_ms: int
    expires_ms: int
    state: str
    answered_by: str | None
    answered_ms: int | None
    reason: str
    context: dict[str, Any]

    def to_proto(self, *, short: bool = False) -> consent_pb2.ConfirmCard:
        return consent_pb2.ConfirmCard(
            card_id=self.card_id,
            effect=self.effect,
            target=self.target,
            title=self.title,
            preview="" if short else self.preview,
            expires_ms=self.expires_ms,
            nonce=b"" if short else self.nonce,
            action_hash=b"" if short else self.action_hash,
            package=self.package,
            tool=self.tool,
            created_ms=self.created_ms,
            short_form=short,
        )


@dataclass(frozen=True)
class Answer:
    outcome: str
    """``approved`` / ``denied`` / ``refused``"""
    reason: str
    card: Card | None = None
    token: str | None = None


def gesture_effects(config: Mapping[str, Any]) -> frozenset[str]:
    """``glasses: {nod_effects: [...]}`` of home.yaml (default ``[send]``); ``spend`` never
    (:class:`ValueError` if listed, or if the value is not a list of effect names)."""
    section = config.get("glasses")
    if section is None:
        return GESTURE_EFFECTS
    if not isinstance(section, Mapping) or set(section) - {"nod_effects"}:
        raise ValueError("glasses: only 'nod_effects' may be set")
    effects = section.get("nod_effects", sorted(GESTURE_EFFECTS))
    if not isinstance(effects, list) or not all(isinstance(e, str) for e in effects):
        raise ValueError("glasses.nod_effects: a list of effect names")
    if NEVER_BY_GESTURE & set(effects):
        raise ValueError("glasses.nod_effects: payments are approved only on the phone")
    return frozenset(effects)


class ConsentAuthority:
    def __init__(
        self,
        ledger: Ledger,
        *,
        card_ttl_s: float = CARD_TTL_S,
        gesture_effects: Collection[str] = GESTURE_EFFECTS,
    ) -> None:
        self.ledger = ledger
        self.db = ledger.db
        self.card_ttl_s = card_ttl_s
        self.gesture_effects = frozenset(gesture_effects) - NEVER_BY_GESTURE
        """the effects glasses (``approve.gesture``) may answer"""
        self._sends: set[tuple[str, str, str]] | None = None
        """first-send memory held in memory (read once from the ledger, changed only here:
        :meth:`remember_send` / :meth:`forget_send` update it with their commit)"""

    def gesture_refusal(self, card: Card) -> str:
        """Why a nod or shake on the glasses may not answer ``card`` ("" if it may)."""
        if card.effect in NEVER_BY_GESTURE:
            return "payments are approved only on the owner's phone, never by a nod"
        if card.effect not in self.gesture_effects:
            return f"the owner did not allow glasses to answer {card.effect!r} cards"
        if card.effect == "send" and not card.target:
            return "glasses answer a send only to a named recipient"
        return ""

    # ------------------------------------------------------------------ rules
    def _memory(self) -> set[tuple[str, str, str]]:
        if self._sends is None:
            self._sends = {
                (str(o), str(r), str(t))
                for o, r, t in self.db.execute(
                    "SELECT owner, recipient, task_type FROM first_sends"
                )
            }
        return self._sends

    def remembered(self, owner: str, recipient: str, task_type: str) -> bool:
        """Whether (owner, recipient, task type) was confirmed once (memory: no I/O)."""
        return (owner, recipient.lower(), task_type) in self._memory()

    def remember_send(self, owner: str, recipient: str, task_type: str) -> None:
        key = (owner, recipient.lower(), task_type)
        memory = self._memory()
        with self.ledger.transaction():
            self.db.execute("INSERT OR IGNORE INTO first_sends VALUES (?,?,?,?)", (*key, now_ms()))
        memory.add(key)

    def forget_send(self, owner: str, recipient: str, task_type: str) -> bool:
        """Revoke a remembered first send: the very next send of this kind to this
        recipient asks the owner again. ``False`` if it was not remembered."""
        key = (owner, recipient.lower(), task_type)
        memory = self._memory()
        memory.discard(key)  # before the commit: a decide never sees a revoked consent
        with self.ledger.transaction():
            self.db.execute(
                "DELETE FROM first_sends WHERE owner=? AND recipient=? AND task_type=?", key
            )
            return bool(self.db.changes() == 1)

    def required(
        self, effect: str, *, owner_requested: bool, owner: str, target: str, task_type: str
    ) -> bool:
        """Whether this call needs the owner's card (``required = sending or not asked``)."""
        if effect == "send":
            return not (owner_requested and self.remembered(owner, target, task_type))
        if effect in CARD_EFFECTS_IF_UNASKED:
            return not owner_requested
        return False

    # ------------------------------------------------------------------ cards
    def _card(self, r: Any) -> Card:
        return Card(
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            json.loads(r[6]),
            r[7],
            r[8],
            r[9],
            r[10],
            r[11],
            bytes(r[12]),
            bytes(r[13]),
            r[14],
            r[15],
            r[16],
            r[17],
            r[18],
            r[19],
            json.loads(r[20]),
        )

    def card(self, card_id: str) -> Card | None:
        for r in self.db.execute(f"SELECT {_CARD_COLS} FROM cards WHERE card_id=?", (card_id,)):
            return self._card(r)
        return None

    def pending(self) -> list[Card]:
        return [
            self._card(r)
            for r in self.db.execute(
                f"SELECT {_CARD_COLS} FROM cards WHERE state='pending' ORDER BY created_ms"
            )
        ]

    def issue(
        self,
        *,
        task_id: str,
        call_id: str,
        owner: str,
        package: str,
        tool: str,
        args: dict[str, Any],
        effect: str,
        target: str,
        task_type: str,
        title: str,
        preview: str,
        action_hash: bytes,
        context: dict[str, Any],
        expires_ms: int | None = None,
    ) -> tuple[Card, list[Card]]:
        """A new pending card (expiring after the card TTL unless ``expires_ms`` is given:
        payment cards live 60 s); returns it and the older cards it voided."""
        t = now_ms()
        card_id = "c-" + secrets.token_hex(8)
        with self.ledger.transaction():
            voided = [
                self._card(r)
                for r in self.db.execute(
                    f"SELECT {_CARD_COLS} FROM cards WHERE state='pending' AND task_id=? "
                    "AND package=? AND tool=? AND action_hash<>?",
                    (task_id, package, tool, action_hash),
                )
            ]
            for old in voided:
                self.db.execute(
                    "UPDATE cards SET state='voided', reason='the action changed', answered_ms=? "
                    "WHERE card_id=?",
                    (t, old.card_id),
                )
            self.db.execute(
                f"INSERT INTO cards ({_CARD_COLS}) VALUES "
                "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,'pending',NULL,NULL,'',?)",
                (
                    card_id,
                    task_id,
                    call_id,
                    owner,
                    package,
                    tool,
                    json.dumps(args),
                    effect,
                    target,
                    task_type,
                    title[:200],
                    preview[:PREVIEW_CHARS],
                    action_hash,
                    secrets.token_bytes(16),
                    t,
                    expires_ms if expires_ms is not None else t + int(self.card_ttl_s * 1000),
                    json.dumps(context),
                ),
            )
        card = self.card(card_id)
        assert card is not None
        return card, voided

    def expire_due(self, now: int | None = None) -> list[Card]:
        """Pending cards past their expiry become ``expired``; returns them."""
        t = now if now is not None else now_ms()
        with self.ledger.transaction():
            due = [
                self._card(r)
                for r in self.db.execute(
                    f"SELECT {_CARD_COLS} FROM cards WHERE state='pending' AND expires_ms<?", (t,)
                )
            ]
            for c in due:
                self.db.execute(
                    "UPDATE cards SET state='expired', reason='expired', answered_ms=? "
                    "WHERE card_id=? AND state='pending'",
                    (t, c.card_id),
                )
        return due

    def set_state(self, card_id: str, state: str, reason: str = "") -> None:
        with self.ledger.transaction():
            self.db.execute(
                "UPDATE cards SET state=?, reason=? WHERE card_id=?", (state, reason, card_id)
            )

    # ------------------------------------------------------------------ answers
    def answer(
        self,
        approval: consent_pb2.Approval,
        *,
        device_id: str,
        sign_pk: bytes,
        scopes: tuple[str, ...] | list[str],
        now: int | None = None,
    ) -> Answer:
        """Check a signed answer; on approval consume the nonce and mint an execution token.

        Never raises on hostile input: refusals come back as ``Answer("refused", reason)``."""
        t = now if now is not None else now_ms()
        gesture = "approve" not in scopes
        if gesture and GESTURE_SCOPE not in scopes:
            return Answer("refused", "this device may not answer cards")
        body = signed.read_approval(approval)
        if body is None or len(approval.signature) != 64:
            return Answer("refused", "malformed approval")
        if not signed.verify(sign_pk, signed.APPROVAL_CONTEXT, approval.body, approval.signature):
            return Answer("refused", "bad signature")
        if body.device_id != device_id:
            return Answer("refused", "signed by another device")
        card = self.card(body.card_id[:64])
        if card is None:
            return Answer("refused", "unknown card")
        if gesture and (why := self.gesture_refusal(card)):
            return Answer("refused", why, card)
        if card.state != "pending":
            return Answer("refused", f"card already {card.state}", card)
        if t > card.expires_ms:
            with self.ledger.transaction():
                self.db.execute(
                    "UPDATE cards SET state='expired', reason='expired', answered_ms=? "
                    "WHERE card_id=? AND state='pending'",
                    (t, card.card_id),
                )
                expired_now = self.db.changes() == 1
            reason = EXPIRED_NOW if expired_now else "card already expired"
            return Answer("refused", reason, self.card(card.card_id))
        if body.action_hash != card.action_hash:
            return Answer("refused", "the approval is for another action (changed content)", card)
        if body.expires_ms != card.expires_ms or body.nonce != card.nonce:
            return Answer("refused", "expiry or nonce does not match the card", card)
        if body.decision not in (consent_pb2.APPROVE, consent_pb2.DENY):
            return Answer("refused", "no decision", card)
        approve = body.decision == consent_pb2.APPROVE
        token = secrets.token_hex(16) if approve else None
        with self.ledger.transaction():
            self.db.execute(
                "UPDATE cards SET state=?, answered_by=?, answered_ms=?, reason=? "
                "WHERE card_id=? AND state='pending' AND nonce=?",
                (
                    "approved" if approve else "denied",
                    device_id,
                    t,
                    "" if approve else "denied by the owner",
                    card.card_id,
                    card.nonce,
                ),
            )
            if self.db.changes() != 1:
                return Answer("refused", "card already answered", card)
            if token is not None:
                self.db.execute(
                    "INSERT INTO tokens VALUES (?,?,?,?,NULL)",
                    (token, card.card_id, card.action_hash, t),
                )
        return Answer("approved" if approve else "denied", "", self.card(card.card_id), token)

    def consume_token(self, token: str, card: Card) -> bool:
        """Spend an execution token once; ``False`` if unknown, spent, or for another action."""
        with self.ledger.transaction():
            self.db.execute(
                "UPDATE tokens SET consumed_ms=? WHERE token=? AND card_id=? AND action_hash=? "
                "AND consumed_ms IS NULL",
                (now_ms(), token, card.card_id, card.action_hash),
            )
            return bool(self.db.changes() == 1)
