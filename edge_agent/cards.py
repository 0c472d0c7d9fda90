"""Confirmation cards on a device: kept until answered or expired, answered with the
device key.

A phone (profile role ``confirm_cards``, certificate scope ``approve``) stores every
``CARD`` it receives in ``state/cards.db`` and follows its ``CARD_UPDATE``\\ s; the edge
daemon prints new cards. Glasses (role ``hud``) get a short form: a notice only, they
cannot answer — unless they hold ``approve.gesture`` and the hub lets glasses answer the
card's effect: then the full card is shown, and a nod or a shake answers it
(:mod:`edge_agent.gesture`). ``yimi approve`` / ``yimi deny`` (:mod:`edge_agent.approve`) sign an
``ApprovalBody`` — card id, action hash, expiry, nonce, decision — with the device's
Ed25519 key over ``"yimi.approval.v1" || 0x00 || body``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import apsw

from edge_agent.port import Handlers
from protos import consent_pb2, mesh_pb2, signed
from protos.clock import now_ms
from provisioning.bundle import Bundle
from storage.sqlite import open_db, transaction
from sync.envelope import Opened

log = logging.getLogger(__name__)

MAX_ID = 64
MAX_TEXT = 2000
SCHEMA = """
CREATE TABLE IF NOT EXISTS cards (
    card_id     TEXT PRIMARY KEY,
    card        BLOB NOT NULL,
    state       TEXT NOT NULL,
    reason      TEXT NOT NULL DEFAULT '',
    status      TEXT NOT NULL DEFAULT '',
    summary     TEXT NOT NULL DEFAULT '',
    received_ms INTEGER NOT NULL,
    updated_ms  INTEGER NOT NULL
);
"""
STATE_NAMES = {v: k.lower() for k, v in consent_pb2.CardState.items()}
FINAL = frozenset({"executed", "denied", "expired", "voided"})


@dataclass(frozen=True)
class StoredCard:
    card: consent_pb2.ConfirmCard
    state: str
    reason: str
    status: str
    summary: str


class CardStore:
    def __init__(self, path: Path) -> None:
        self.db: apsw.Connection = open_db(path, SCHEMA)

    def close(self) -> None:
        self.db.close()

    def put(self, card: consent_pb2.ConfirmCard) -> bool:
        """Keep a card; ``True`` if it is new here."""
        t = now_ms()
        with transaction(self.db):
            self.db.execute(
                "INSERT OR IGNORE INTO cards (card_id, card, state, received_ms, updated_ms) "
                "VALUES (?,?,'pending',?,?)",
                (card.card_id, card.SerializeToString(), t, t),
            )
            return bool(self.db.changes())

    def update(self, u: consent_pb2.CardUpdate) -> None:
        state = STATE_NAMES.get(u.state, "")
        if not u.card_id or state in ("", "refused", "sync_done", "pending"):
            return
        with transaction(self.db):
            self.db.execute(
                "UPDATE cards SET state=?, reason=?, status=?, summary=?, updated_ms=? "
                "WHERE card_id=?",
                (
                    state,
                    u.reason[:MAX_TEXT],
                    u.status[:64],
                    u.summary[:MAX_TEXT],
                    now_ms(),
                    u.card_id,
                ),
            )

    def get(self, card_id: str) -> StoredCard | None:
        for row in self.db.execute(
            "SELECT card, state, reason, status, summary FROM cards WHERE card_id=?", (card_id,)
        ):
            return StoredCard(consent_pb2.ConfirmCard.FromString(row[0]), *row[1:])
        return None

    def all(self) -> list[StoredCard]:
        return [
            StoredCard(consent_pb2.ConfirmCard.FromString(r[0]), *r[1:])
            for r in self.db.execute(
                "SELECT card, state, reason, status, summary FROM cards ORDER BY received_ms"
            )
        ]

    def pending(self, at_ms: int | None = None) -> list[StoredCard]:
        """Cards still open: not answered, not expired, and answerable here."""
        t = at_ms if at_ms is not None else now_ms()
        return [
            c
            for c in self.all()
            if c.state == "pending" and c.card.expires_ms > t and not c.card.short_form
        ]


def valid_card(card: consent_pb2.ConfirmCard) -> bool:
    return (
        0 < len(card.card_id) <= MAX_ID
        and len(card.title) <= 200
        and len(card.preview) <= MAX_TEXT
        and (card.short_form or (len(card.action_hash) == 32 and len(card.nonce) == 16))
    )


def describe(card: consent_pb2.ConfirmCard) -> str:
    left = max(0, (card.expires_ms - now_ms()) // 1000)
    return f"{card.card_id}  {card.title}  (expires in {left // 60} min {left % 60} s)"


Show = Callable[[str], None]


class CardInbox:
    """Receives cards and updates for one device; ``show`` renders them (stdout stands in
    for the phone's screen or the glasses' HUD)."""

    def __init__(self, bundle: Bundle, *, show: Show | None = None) -> None:
        self.bundle = bundle
        self.store = CardStore(bundle.state_dir / "cards.db")
        self.show = show
        self.updates: asyncio.Queue[consent_pb2.CardUpdate] = asyncio.Queue()
        self.synced = asyncio.Event()

    def handlers(self) -> Handlers:
        return {mesh_pb2.CARD: self.on_card, mesh_pb2.CARD_UPDATE: self.on_update}

    async def on_card(self, opened: Opened) -> None:
        card = opened.payload
        assert isinstance(card, consent_pb2.ConfirmCard)
        if not valid_card(card):
            log.warning("malformed card from the hub dropped")
            return
        fresh = self.store.put(card)
        if fresh and self.show is not None:
            if card.short_form:
                self.show(f"waiting for you on the phone: {card.title}")
            else:
                self.show(
                    f"card {describe(card)}\n{card.preview}\n{_how_to_answer(self.bundle, card)}"
                )

    async def on_update(self, opened: Opened) -> None:
        u = opened.payload
        assert isinstance(u, consent_pb2.CardUpdate)
        if u.state == consent_pb2.SYNC_DONE:
            self.synced.set()
            return
        self.store.update(u)
        await self.updates.put(u)
        state = STATE_NAMES.get(u.state, "?")
        if self.show is not None and state in FINAL:
            self.show(f"card {u.card_id} {state}: {u.summary or u.reason}")


def _how_to_answer(bundle: Bundle, card: consent_pb2.ConfirmCard) -> str:
    b = bundle.path
    if "approve" not in bundle.certificate.scopes:  # glasses: the hub sent it for a nod
        return "answer: nod to approve, shake to dismiss"
    if card.effect != "spend":
        return f"answer: yimi approve|deny --bundle {b} {card.card_id}"
    if card.title.startswith(signed.AUTO_PAY_TITLE):  # an auto-payment's notice: deny = undo
        pid = next(
            (x.split(": ", 1)[1] for x in card.preview.splitlines() if x.startswith("payment: ")),
            "",
        )
        return f"undo: yimi pay undo --bundle {b} {pid}".rstrip()
    return f"answer: yimi pay approve|deny --bundle {b} {card.card_id}"


def card_handlers(bundle: Bundle, *, show: bool) -> Handlers:
    """The handlers a device's node gets: cards for a phone or a HUD, none otherwise;
    ``show``: print each card as it arrives."""
    roles = bundle.profile.roles
    if not ({"confirm_cards", "hud"} & roles):
        return {}

    def print_card(text: str) -> None:
        print(f"[{bundle.name}] {text}", flush=True)

    return CardInbox(bundle, show=print_card if show else None).handlers()


def sign_answer(
    bundle: Bundle, card: consent_pb2.ConfirmCard, decision: int
) -> consent_pb2.Approval:
    """The device-signed answer to ``card``."""
    return signed.approval(
        bundle.keys.sign, card, decision, device_id=bundle.device_id, signed_ms=now_ms()
    )
