"""Browser sessions and passkeys.

- **Sessions**: ``GET /api/challenge`` gives a random challenge (once, for
  :data:`CHALLENGE_TTL_S`); the browser signs ``"yimi.web-session.v1" || 0x00 || challenge``
  with its non-extractable WebCrypto Ed25519 key; a signature from an enrolled, unrevoked
  device opens a session: a random token in an HttpOnly, SameSite=Strict cookie (Secure over
  HTTPS) for :data:`SESSION_TTL_S`. Every request checks the device again, and
  :meth:`Sessions.end_device` drops a revoked device's sessions at once.
- **Passkeys** (``web.db``): one WebAuthn credential per browser device, registered right
  after pairing with user verification; a payment card is approved only with an assertion
  of that credential whose user-verified flag is set.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from protos import signed
from provisioning.registry import DeviceRecord
from storage.sqlite import open_db, transaction

SESSION_CONTEXT = b"yimi.web-session.v1"
"""what a browser's device key signs to open a session"""
CHALLENGE_TTL_S = 60.0
SESSION_TTL_S = 15 * 60.0
"""seconds a session cookie lives (a new challenge signature opens the next one)"""
COOKIE = "yimi_session"
MAX_CHALLENGES = 1024


@dataclass(frozen=True)
class Session:
    token: str
    device_id: str
    expires: float
    """monotonic seconds"""


@dataclass
class Sessions:
    """Challenges and open sessions, in memory (a hub restart signs the browser in again)."""

    _challenges: dict[str, float] = field(default_factory=dict)
    _sessions: dict[str, Session] = field(default_factory=dict)
    last_seen_ms: dict[str, int] = field(default_factory=dict)
    """device id → when a request of one of its sessions last came (the dashboard's presence
    of a browser device)"""

    def challenge(self) -> str:
        now = time.monotonic()
        self._challenges = {c: t for c, t in self._challenges.items() if t > now}
        if len(self._challenges) >= MAX_CHALLENGES:  # a flood: the oldest go first
            for c in sorted(self._challenges, key=self._challenges.__getitem__)[:64]:
                del self._challenges[c]
        c = secrets.token_hex(32)
        self._challenges[c] = now + CHALLENGE_TTL_S
        return c

    def open(self, challenge: str, signature: bytes, rec: DeviceRecord | None) -> Session | None:
        """A session for ``rec`` if ``signature`` is its key's over a live challenge (the
        challenge is spent either way)."""
        expires = self._challenges.pop(challenge, 0.0)
        if expires <= time.monotonic() or rec is None or rec.revoked:
            return None
        if not signed.verify(rec.sign_pk, SESSION_CONTEXT, bytes.fromhex(challenge), signature):
            return None
        s = Session(secrets.token_urlsafe(32), rec.device_id, time.monotonic() + SESSION_TTL_S)
        self._sessions[s.token] = s
        return s

    def get(self, token: str) -> Session | None:
        s = self._sessions.get(token)
        if s is not None and s.expires <= time.monotonic():
            del self._sessions[token]
            return None
        return s

    def seen(self, device_id: str) -> None:
        self.last_seen_ms[device_id] = int(time.time() * 1000)

    def online(self) -> set[str]:
        """Devices with an open session."""
        now = time.monotonic()
        return {s.device_id for s in self._sessions.values() if s.expires > now}

    def end_device(self, device_id: str) -> list[str]:
        """End every session of ``device_id``; returns their tokens."""
        ended = [t for t, s in self._sessions.items() if s.device_id == device_id]
        for t in ended:
            del self._sessions[t]
        return ended

    def live(self, token: str) -> bool:
        return self.get(token) is not None

    def end(self, token: str) -> None:
        self._sessions.pop(token, None)


# ---------------------------------------------------------------- passkeys
SCHEMA = """
CREATE TABLE IF NOT EXISTS passkeys (
    device_id     TEXT PRIMARY KEY,
    credential_id BLOB NOT NULL,
    public_key    BLOB NOT NULL,
    sign_count    INTEGER NOT NULL,
    created_ms    INTEGER NOT NULL
);
"""


@dataclass(frozen=True)
class Passkey:
    device_id: str
    credential_id: bytes
    public_key: bytes
    sign_count: int


class Passkeys:
    """``web.db``: the WebAuthn credential of each browser device."""

    def __init__(self, path: Path) -> None:
        self.conn: apsw.Connection = open_db(path, SCHEMA)

    def close(self) -> None:
        self.conn.close()

    def put(self, key: Passkey) -> None:
        with transaction(self.conn):
            self.conn.execute(
                "INSERT OR REPLACE INTO passkeys VALUES (?,?,?,?,?)",
                (
                    key.device_id,
                    key.credential_id,
                    key.public_key,
                    key.sign_count,
                    int(time.time() * 1000),
                ),
            )

    def get(self, device_id: str) -> Passkey | None:
        row = self.conn.execute(
            "SELECT device_id, credential_id, public_key, sign_count FROM passkeys "
            "WHERE device_id=?",
            (device_id,),
        ).fetchone()
        return None if row is None else Passkey(row[0], bytes(row[1]), bytes(row[2]), row[3])

    def used(self, device_id: str, sign_count: int) -> None:
        with transaction(self.conn):
            self.conn.execute(
                "UPDATE passkeys SET sign_count=? WHERE device_id=?", (sign_count, device_id)
            )
