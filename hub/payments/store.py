"""``payments.db``: payments, one-time authorisations, their history, unlock leases and the
options. Every state change is a compare-and-set inside one ``BEGIN IMMEDIATE``
transaction, so any number of connections (threads, processes) agree on who won, and only
along the lifecycle's tables (:mod:`hub.payments.lifecycle`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import apsw

from hub.payments import lifecycle
from hub.payments.model import (
    AUTHORISED,
    AWAITING,
    INTENT,
    LIVE,
    PAID,
    PAYING,
    Authorisation,
    Payment,
    PaymentRequest,
)
from hub.payments.options import PayOptions
from protos.clock import now_ms
from storage.sqlite import joined, open_db, transaction

SCHEMA = """
CREATE TABLE IF NOT EXISTS payments (
    payment_id    TEXT PRIMARY KEY,
    task_id       TEXT NOT NULL,
    owner         TEXT NOT NULL,
    trace_id      TEXT NOT NULL,
    request       TEXT NOT NULL,
    description   TEXT NOT NULL,
    budget_minor  INTEGER,
    currency      TEXT NOT NULL,
    state         TEXT NOT NULL,
    package       TEXT NOT NULL DEFAULT '',
    checkout_call TEXT NOT NULL DEFAULT '',
    checkout_id   TEXT NOT NULL DEFAULT '',
    payee         TEXT NOT NULL DEFAULT '',
    amount_minor  INTEGER,
    mode          TEXT NOT NULL DEFAULT '',
    reissues      INTEGER NOT NULL DEFAULT 0,
    revision      INTEGER NOT NULL DEFAULT 0,
    reason        TEXT NOT NULL DEFAULT '',
    undo_until_ms INTEGER,
    provider_ref  TEXT NOT NULL DEFAULT '',
    context       TEXT NOT NULL DEFAULT '{}',
    authorised_ms INTEGER,
    created_ms    INTEGER NOT NULL,
    updated_ms    INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS payments_task ON payments (task_id, state);
CREATE INDEX IF NOT EXISTS payments_payee ON payments (payee, state);
CREATE TABLE IF NOT EXISTS authorisations (
    auth_id      TEXT PRIMARY KEY,
    payment_id   TEXT NOT NULL,
    card_id      TEXT NOT NULL DEFAULT '',
    payee        TEXT NOT NULL,
    amount_minor INTEGER NOT NULL,
    currency     TEXT NOT NULL,
    checkout_id  TEXT NOT NULL,
    nonce        BLOB NOT NULL,
    binding      BLOB NOT NULL,
    method       TEXT NOT NULL,
    state        TEXT NOT NULL,
    issued_ms    INTEGER NOT NULL,
    expires_ms   INTEGER NOT NULL,
    approved_ms  INTEGER,
    approved_by  TEXT NOT NULL DEFAULT '',
    used_ms      INTEGER,
    reason       TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS auth_payment ON authorisations (payment_id);
CREATE INDEX IF NOT EXISTS auth_card ON authorisations (card_id);
CREATE TABLE IF NOT EXISTS history (
    payment_id TEXT NOT NULL,
    at_ms      INTEGER NOT NULL,
    from_state TEXT NOT NULL,
    to_state   TEXT NOT NULL,
    reason     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS history_payment ON history (payment_id, at_ms);
CREATE TABLE IF NOT EXISTS leases (
    device_id   TEXT PRIMARY KEY,
    unlocked_ms INTEGER NOT NULL,
    expires_ms  INTEGER NOT NULL,
    sensor      TEXT NOT NULL,
    signed_ms   INTEGER NOT NULL,
    received_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS options (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    value      TEXT NOT NULL,
    changed_ms INTEGER NOT NULL,
    changed_by TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS used_nonces (
    nonce TEXT PRIMARY KEY,
    at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS voice_uses (
    utterance_id TEXT PRIMARY KEY,
    payment_id   TEXT NOT NULL,
    at_ms        INTEGER NOT NULL
);
"""


_PAY_COLS = (
    "payment_id, task_id, owner, trace_id, request, description, budget_minor, currency, "
    "state, package, checkout_call, checkout_id, payee, amount_minor, mode, reissues, "
    "revision, reason, undo_until_ms, provider_ref, context, created_ms, updated_ms"
)
_AUTH_COLS = (
    "auth_id, payment_id, card_id, payee, amount_minor, currency, checkout_id, nonce, "
    "binding, method, state, issued_ms, expires_ms, approved_ms, approved_by, used_ms, reason"
)
_UPDATABLE = frozenset(
    {
        "package",
        "checkout_call",
        "checkout_id",
        "payee",
        "amount_minor",
        "mode",
        "reissues",
        "revision",
        "reason",
        "undo_until_ms",
        "provider_ref",
        "authorised_ms",
    }
)


@dataclass(frozen=True)
class Lease:
    device_id: str
    unlocked_ms: int
    expires_ms: int
    sensor: str


def _payment(r: Any) -> Payment:
    return Payment(
        payment_id=r[0],
        task_id=r[1],
        owner=r[2],
        trace_id=r[3],
        request=PaymentRequest.from_dict(json.loads(r[4])),
        description=r[5],
        budget_minor=r[6],
        currency=r[7],
        state=r[8],
        package=r[9],
        checkout_call=r[10],
        checkout_id=r[11],
        payee=r[12],
        amount_minor=r[13],
        mode=r[14],
        reissues=r[15],
        revision=r[16],
        reason=r[17],
        undo_until_ms=r[18],
        provider_ref=r[19],
        context=json.loads(r[20]),
        created_ms=r[21],
        updated_ms=r[22],
    )


def _auth(r: Any) -> Authorisation:
    return Authorisation(
        auth_id=r[0],
        payment_id=r[1],
        card_id=r[2],
        payee=r[3],
        amount_minor=r[4],
        currency=r[5],
        checkout_id=r[6],
        nonce=bytes(r[7]),
        binding=bytes(r[8]),
        method=r[9],
        state=r[10],
        issued_ms=r[11],
        expires_ms=r[12],
        approved_ms=r[13],
        approved_by=r[14],
        used_ms=r[15],
        reason=r[16],
    )


class PaymentStore:
    """One connection to ``payments.db``. Not shared between threads: open one per thread."""

    def __init__(self, path: Path, *, synchronous: str = "FULL") -> None:
        self.path = path
        self.db: apsw.Connection = open_db(path, SCHEMA, synchronous=synchronous)

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ payments
    def insert(self, p: Payment) -> None:
        with transaction(self.db):
            self.db.execute(
                f"INSERT INTO payments ({_PAY_COLS}) VALUES "
                "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    p.payment_id,
                    p.task_id,
                    p.owner,
                    p.trace_id,
                    json.dumps(p.request.to_dict()),
                    p.description,
                    p.budget_minor,
                    p.currency,
                    p.state,
                    p.package,
                    p.checkout_call,
                    p.checkout_id,
                    p.payee,
                    p.amount_minor,
                    p.mode,
                    p.reissues,
                    p.revision,
                    p.reason,
                    p.undo_until_ms,
                    p.provider_ref,
                    json.dumps(p.context),
                    p.created_ms,
                    p.updated_ms,
                ),
            )
            self._history(p.payment_id, "", p.state, "intent opened", p.created_ms)

    def get(self, payment_id: str) -> Payment | None:
        for r in self.db.execute(
            f"SELECT {_PAY_COLS} FROM payments WHERE payment_id=?", (payment_id,)
        ):
            return _payment(r)
        return None

    def for_task(self, task_id: str, states: Iterable[str] | None = None) -> list[Payment]:
        rows = [
            _payment(r)
            for r in self.db.execute(
                f"SELECT {_PAY_COLS} FROM payments WHERE task_id=? ORDER BY created_ms", (task_id,)
            )
        ]
        wanted = set(states) if states is not None else None
        return [p for p in rows if wanted is None or p.state in wanted]

    def in_states(self, states: Iterable[str]) -> list[Payment]:
        s = list(states)
        marks = ",".join("?" * len(s))
        return [
            _payment(r)
            for r in self.db.execute(
                f"SELECT {_PAY_COLS} FROM payments WHERE state IN ({marks}) ORDER BY created_ms",
                s,
            )
        ]

    def recent(self, limit: int = 50) -> list[Payment]:
        rows = [
            _payment(r)
            for r in self.db.execute(
                f"SELECT {_PAY_COLS} FROM payments ORDER BY created_ms DESC, rowid DESC LIMIT ?",
                (limit,),
            )
        ]
        return list(reversed(rows))

    def history(self, payment_id: str) -> list[tuple[int, str, str, str]]:
        return [
            (int(a), str(b), str(c), str(d))
            for a, b, c, d in self.db.execute(
                "SELECT at_ms, from_state, to_state, reason FROM history WHERE payment_id=? "
                "ORDER BY at_ms, rowid",
                (payment_id,),
            )
        ]

    def _history(self, payment_id: str, old: str, new: str, reason: str, t: int) -> None:
        self.db.execute(
            "INSERT INTO history VALUES (?,?,?,?,?)", (payment_id, t, old, new, reason[:500])
        )

    def move(
        self, payment_id: str, old: str | Iterable[str], new: str, reason: str = "", **set_: Any
    ) -> bool:
        """Compare-and-set the state (and fields); ``False`` if it was not in ``old``.
        Call inside a transaction (or it opens its own)."""
        with joined(self.db):
            return self._move(payment_id, old, new, reason, set_)

    def _move(
        self, payment_id: str, old: str | Iterable[str], new: str, reason: str, set_: dict[str, Any]
    ) -> bool:
        olds = [old] if isinstance(old, str) else list(old)
        lifecycle.check(olds, new)
        if reason and "reason" not in set_:
            set_ = {**set_, "reason": reason[:500]}
        bad = set(set_) - _UPDATABLE
        if bad:
            raise ValueError(f"not updatable: {bad}")
        t = now_ms()
        assigns = "".join(f", {k}=?" for k in set_)
        marks = ",".join("?" * len(olds))
        current = None
        for (s,) in self.db.execute("SELECT state FROM payments WHERE payment_id=?", (payment_id,)):
            current = str(s)
        self.db.execute(
            f"UPDATE payments SET state=?, updated_ms=?{assigns} "
            f"WHERE payment_id=? AND state IN ({marks})",
            (new, t, *set_.values(), payment_id, *olds),
        )
        if self.db.changes() != 1:
            return False
        if reason or current != new:
            self._history(payment_id, current or "", new, reason or "", t)
        return True

    def set_fields(self, payment_id: str, **set_: Any) -> None:
        bad = set(set_) - _UPDATABLE
        if bad:
            raise ValueError(f"not updatable: {bad}")
        assigns = ", ".join(f"{k}=?" for k in set_)
        with transaction(self.db):
            self.db.execute(
                f"UPDATE payments SET {assigns}, updated_ms=? WHERE payment_id=?",
                (*set_.values(), now_ms(), payment_id),
            )

    def set_context(self, payment_id: str, context: dict[str, Any]) -> None:
        with transaction(self.db):
            self.db.execute(
                "UPDATE payments SET context=? WHERE payment_id=?",
                (json.dumps(context), payment_id),
            )

    def rekey(self, payment_id: str, old_task: str, new_task: str) -> bool:
        """Move an open intent (state ``intent``) from ``old_task`` to ``new_task``, once."""
        with transaction(self.db):
            self.db.execute(
                "UPDATE payments SET task_id=?, updated_ms=? WHERE payment_id=? AND task_id=? "
                "AND state=?",
                (new_task, now_ms(), payment_id, old_task, INTENT),
            )
            if self.db.changes() != 1:
                return False
            self._history(payment_id, INTENT, INTENT, f"handed to task {new_task}"[:500], now_ms())
        return True

    def next_revision(self, payment_id: str) -> int:
        """The next receipt revision of this payment's checkout call (strictly increasing)."""
        with transaction(self.db):
            self.db.execute(
                "UPDATE payments SET revision=revision+1 WHERE payment_id=?", (payment_id,)
            )
            for (rev,) in self.db.execute(
                "SELECT revision FROM payments WHERE payment_id=?", (payment_id,)
            ):
                return int(rev)
        raise KeyError(payment_id)

    # ------------------------------------------------------------------ authorisations
    def insert_auth(self, a: Authorisation) -> None:
        self.db.execute(
            f"INSERT INTO authorisations ({_AUTH_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                a.auth_id,
                a.payment_id,
                a.card_id,
                a.payee,
                a.amount_minor,
                a.currency,
                a.checkout_id,
                a.nonce,
                a.binding,
                a.method,
                a.state,
                a.issued_ms,
                a.expires_ms,
                a.approved_ms,
                a.approved_by,
                a.used_ms,
                a.reason,
            ),
        )

    def auth(self, auth_id: str) -> Authorisation | None:
        for r in self.db.execute(
            f"SELECT {_AUTH_COLS} FROM authorisations WHERE auth_id=?", (auth_id,)
        ):
            return _auth(r)
        return None

    def auth_by_card(self, card_id: str) -> Authorisation | None:
        for r in self.db.execute(
            f"SELECT {_AUTH_COLS} FROM authorisations WHERE card_id=?", (card_id,)
        ):
            return _auth(r)
        return None

    def auths(self, payment_id: str) -> list[Authorisation]:
        return [
            _auth(r)
            for r in self.db.execute(
                f"SELECT {_AUTH_COLS} FROM authorisations WHERE payment_id=? ORDER BY issued_ms, "
                "rowid",
                (payment_id,),
            )
        ]

    def current_auth(self, payment_id: str) -> Authorisation | None:
        rows = self.auths(payment_id)
        return rows[-1] if rows else None

    def set_card(self, auth_id: str, card_id: str) -> None:
        with transaction(self.db):
            self.db.execute(
                "UPDATE authorisations SET card_id=? WHERE auth_id=?", (card_id, auth_id)
            )

    def end_auth(self, auth_id: str, old: Iterable[str], new: str, reason: str) -> bool:
        """CAS an authorisation into ``voided`` / ``expired`` / ``denied``."""
        olds = list(old)
        lifecycle.check(olds, new, lifecycle.AUTH_TRANSITIONS)
        marks = ",".join("?" * len(olds))
        sql = f"UPDATE authorisations SET state=?, reason=? WHERE auth_id=? AND state IN ({marks})"
        with joined(self.db):
            self.db.execute(sql, (new, reason[:300], auth_id, *olds))
            return bool(self.db.changes() == 1)

    def approve(self, auth_id: str, *, by: str, method: str, at_ms: int) -> bool:
        """issued → approved and the payment awaiting_approval → authorised, atomically;
        ``False`` (nothing changed) if either was not in its expected state or the
        authorisation has expired."""
        with transaction(self.db):
            a = self.auth(auth_id)
            p = self.get(a.payment_id) if a is not None else None
            if a is None or p is None or p.state != AWAITING:
                return False
            self.db.execute(
                "UPDATE authorisations SET state='approved', approved_ms=?, approved_by=?, "
                "method=? WHERE auth_id=? AND state='issued' AND expires_ms>=?",
                (at_ms, by[:200], method, auth_id, at_ms),
            )
            if self.db.changes() != 1:
                return False
            moved = self._move(
                a.payment_id,
                AWAITING,
                AUTHORISED,
                f"approved ({method}) by {by}",
                {"mode": method, "authorised_ms": at_ms},
            )
            assert moved, "checked in this transaction"
        return True

    def claim(self, payment_id: str, *, at_ms: int) -> Authorisation | None:
        """Use the payment's approved authorisation, once: approved → used and the payment
        authorised → paying in one transaction. ``None`` for every attempt but the first,
        for an expired authorisation, and before an auto-payment's undo window ends."""
        with transaction(self.db):
            p = self.get(payment_id)
            if p is None or p.state != AUTHORISED:
                return None
            if p.undo_until_ms is not None and at_ms < p.undo_until_ms:
                return None
            a = next((x for x in reversed(self.auths(payment_id)) if x.state == "approved"), None)
            if a is None or a.expires_ms < at_ms:
                return None
            self.db.execute(
                "UPDATE authorisations SET state='used', used_ms=? WHERE auth_id=? "
                "AND state='approved'",
                (at_ms, a.auth_id),
            )
            if self.db.changes() != 1:
                return None
            moved = self._move(payment_id, AUTHORISED, PAYING, "paying", {})
            assert moved, "checked in this transaction"
            return replace(a, state="used", used_ms=at_ms)

    # ------------------------------------------------------------------ rules' queries
    def auto_spent(self, since_ms: int, currency: str) -> int:
        """Sum of auto-payments authorised since ``since_ms`` that count against the cap."""
        live = sorted(LIVE)
        marks = ",".join("?" * len(live))
        for (total,) in self.db.execute(
            f"SELECT COALESCE(SUM(amount_minor), 0) FROM payments WHERE mode='auto' AND "
            f"currency=? AND authorised_ms>=? AND state IN ({marks})",
            (currency, since_ms, *live),
        ):
            return int(total)
        return 0

    def recent_to_payee(self, payee: str, since_ms: int, exclude: str) -> list[str]:
        live = sorted(LIVE)
        marks = ",".join("?" * len(live))
        return [
            str(pid)
            for (pid,) in self.db.execute(
                f"SELECT payment_id FROM payments WHERE lower(payee)=lower(?) AND "
                f"state IN ({marks}) AND updated_ms>=? AND payment_id<>?",
                (payee, *live, since_ms, exclude),
            )
        ]

    def paid_before(self, payee: str) -> bool:
        for _ in self.db.execute(
            "SELECT 1 FROM payments WHERE lower(payee)=lower(?) AND state=? LIMIT 1",
            (payee, PAID),
        ):
            return True
        return False

    def claim_voice(self, utterance_id: str, payment_id: str) -> bool:
        """An utterance authorises at most one payment, once."""
        with transaction(self.db):
            self.db.execute(
                "INSERT OR IGNORE INTO voice_uses VALUES (?,?,?)",
                (utterance_id, payment_id, now_ms()),
            )
            return bool(self.db.changes() == 1)

    # ------------------------------------------------------------------ leases
    def put_lease(self, lease: Lease, signed_ms: int) -> None:
        with transaction(self.db):
            self.db.execute(
                "INSERT OR REPLACE INTO leases VALUES (?,?,?,?,?,?)",
                (
                    lease.device_id,
                    lease.unlocked_ms,
                    lease.expires_ms,
                    lease.sensor,
                    signed_ms,
                    now_ms(),
                ),
            )

    def end_lease(self, device_id: str, signed_ms: int) -> None:
        """The phone locked: its lease (signed before ``signed_ms``) ends now."""
        with transaction(self.db):
            self.db.execute(
                "DELETE FROM leases WHERE device_id=? AND signed_ms<=?", (device_id, signed_ms)
            )

    def leases(self) -> list[Lease]:
        return [
            Lease(str(a), int(b), int(c), str(d))
            for a, b, c, d in self.db.execute(
                "SELECT device_id, unlocked_ms, expires_ms, sensor FROM leases"
            )
        ]

    # ------------------------------------------------------------------ options
    def options(self) -> PayOptions:
        for (value,) in self.db.execute("SELECT value FROM options WHERE id=1"):
            return PayOptions.from_dict(json.loads(value))
        return PayOptions()

    def set_options(self, options: PayOptions, *, by: str, nonce: str) -> bool:
        """Store new options; ``False`` if ``nonce`` was used before (a replayed change)."""
        with transaction(self.db):
            self.db.execute("INSERT OR IGNORE INTO used_nonces VALUES (?,?)", (nonce, now_ms()))
            if self.db.changes() != 1:
                return False
            self.db.execute(
                "INSERT OR REPLACE INTO options VALUES (1,?,?,?)",
                (json.dumps(options.to_dict()), now_ms(), by),
            )
        return True

    def options_changed(self) -> tuple[int, str] | None:
        for a, b in self.db.execute("SELECT changed_ms, changed_by FROM options WHERE id=1"):
            return int(a), str(b)
        return None
