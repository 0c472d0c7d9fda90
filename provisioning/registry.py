"""The home's device registry (``registry.db``): enrolled devices, revocations, pairing codes.

The CLI on the hub machine writes it; the hub daemon watches it (``data_version``) and
applies new devices and revocations within a fraction of a second.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import apsw

from protos.clock import now_ms
from provisioning.errors import ProvisioningError
from storage.sqlite import open_db, transaction

SCHEMA = """
CREATE TABLE IF NOT EXISTS devices (
    device_id   TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    profile     TEXT NOT NULL,
    scopes      TEXT NOT NULL,
    sign_pk     BLOB NOT NULL,
    box_pk      BLOB NOT NULL,
    certificate BLOB NOT NULL,
    mqtt_hash   TEXT NOT NULL,
    enrolled_by TEXT NOT NULL,
    created_ms  INTEGER NOT NULL,
    revoked_ms  INTEGER
);
CREATE TABLE IF NOT EXISTS pair_codes (
    code_id     TEXT PRIMARY KEY,
    secret      TEXT NOT NULL,
    created_ms  INTEGER NOT NULL,
    expires_ms  INTEGER NOT NULL,
    used_ms     INTEGER,
    failures    INTEGER NOT NULL DEFAULT 0
);
"""

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class DeviceRecord:
    device_id: str
    name: str
    profile: str
    scopes: tuple[str, ...]
    sign_pk: bytes
    box_pk: bytes
    certificate: bytes
    mqtt_hash: str
    enrolled_by: str
    created_ms: int
    revoked_ms: int | None

    @property
    def revoked(self) -> bool:
        return self.revoked_ms is not None


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise ProvisioningError(
            "device.name_invalid",
            name=name,
            reason="use 1-32 of a-z, 0-9, '-', '_', starting with a letter or digit",
        )
    return name


class Registry:
    """Access to ``registry.db``; one short transaction per call, safe across processes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn: apsw.Connection = open_db(path, SCHEMA)

    def close(self) -> None:
        self.conn.close()

    def data_version(self) -> int:
        """Changes when another connection commits (cheap to poll)."""
        row = self.conn.execute("PRAGMA data_version").fetchone()
        return int(row[0]) if row else 0

    # ------------------------------------------------------------------ devices
    def add_device(self, rec: DeviceRecord) -> None:
        try:
            with transaction(self.conn):
                self._insert(rec)
        except apsw.ConstraintError:
            raise ProvisioningError("device.exists", name=rec.name) from None

    def _insert(self, rec: DeviceRecord) -> None:
        self.conn.execute(
            "INSERT INTO devices VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                rec.device_id,
                rec.name,
                rec.profile,
                json.dumps(list(rec.scopes)),
                rec.sign_pk,
                rec.box_pk,
                rec.certificate,
                rec.mqtt_hash,
                rec.enrolled_by,
                rec.created_ms,
                rec.revoked_ms,
            ),
        )

    def name_taken(self, name: str) -> bool:
        return (
            self.conn.execute("SELECT 1 FROM devices WHERE name=?", (name,)).fetchone() is not None
        )

    def devices(self) -> list[DeviceRecord]:
        rows = self.conn.execute("SELECT * FROM devices ORDER BY created_ms, name")
        return [_record(r) for r in rows]

    def by_name(self, name: str) -> DeviceRecord:
        row = self.conn.execute("SELECT * FROM devices WHERE name=?", (name,)).fetchone()
        if row is None:
            raise ProvisioningError("device.unknown", name=name)
        return _record(row)

    def revoke(self, name: str) -> DeviceRecord:
        with transaction(self.conn):
            rec = self.by_name(name)
            if rec.revoked_ms is None:
                self.conn.execute(
                    "UPDATE devices SET revoked_ms=? WHERE device_id=?", (now_ms(), rec.device_id)
                )
        return self.by_name(name)

    # ------------------------------------------------------------------ pairing codes
    def add_pair_code(self, code_id: str, secret: str, ttl_ms: int) -> int:
        created = now_ms()
        with transaction(self.conn):
            self.conn.execute(
                "DELETE FROM pair_codes WHERE expires_ms < ? OR used_ms IS NOT NULL", (created,)
            )
            self.conn.execute(
                "INSERT INTO pair_codes (code_id, secret, created_ms, expires_ms) VALUES (?,?,?,?)",
                (code_id, secret, created, created + ttl_ms),
            )
        return created + ttl_ms

    def pair_code(self, code_id: str) -> tuple[str, int, int | None, int] | None:
        """(secret, expires_ms, used_ms, failures) of a code, or ``None``."""
        row = self.conn.execute(
            "SELECT secret, expires_ms, used_ms, failures FROM pair_codes WHERE code_id=?",
            (code_id,),
        ).fetchone()
        return None if row is None else (row[0], row[1], row[2], row[3])

    def pair_failure(self, code_id: str) -> None:
        with transaction(self.conn):
            self.conn.execute(
                "UPDATE pair_codes SET failures = failures + 1 WHERE code_id=?", (code_id,)
            )

    def consume_pair_code(self, code_id: str, rec: DeviceRecord) -> bool:
        """Atomically mark the code used and enrol ``rec``; ``False`` if it was not usable."""
        with transaction(self.conn):
            changed = self.conn.execute(
                "UPDATE pair_codes SET used_ms=? WHERE code_id=? AND used_ms IS NULL "
                "AND expires_ms > ? RETURNING code_id",
                (now_ms(), code_id, now_ms()),
            ).fetchone()
            if changed is None:
                return False
            if self.name_taken(rec.name):
                raise ProvisioningError("device.exists", name=rec.name)
            self._insert(rec)
        return True


def _record(row: tuple) -> DeviceRecord:  # type: ignore[type-arg]
    return DeviceRecord(
        device_id=row[0],
        name=row[1],
        profile=row[2],
        scopes=tuple(json.loads(row[3])),
        sign_pk=bytes(row[4]),
        box_pk=bytes(row[5]),
        certificate=bytes(row[6]),
        mqtt_hash=row[7],
        enrolled_by=row[8],
        created_ms=row[9],
        revoked_ms=row[10],
    )
