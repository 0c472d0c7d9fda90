"""Node identities: an Ed25519 signing key and an X25519 box key, and their files.

Private key files are written atomically with mode 0600 and refused on load if any other
permission bit is set. A fingerprint is the SHA-256 of the Ed25519 public key, in hex.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from nacl.public import PrivateKey, PublicKey
from nacl.signing import SigningKey, VerifyKey

from provisioning.errors import ProvisioningError

KEY_FILE_MODE = 0o600


def fingerprint(sign_pk: bytes) -> str:
    """The fingerprint of an Ed25519 public key: SHA-256, 64 hex characters."""
    return hashlib.sha256(b"yimi.key.v1\x00" + sign_pk).hexdigest()


def short_fingerprint(fp: str) -> str:
    """A readable prefix of a fingerprint, in groups of four: ``ab12:cd34:…`` (80 bits)."""
    return ":".join(fp[i : i + 4] for i in range(0, 20, 4))


@dataclass(frozen=True)
class NodeKeys:
    """One node's key pair set: Ed25519 for signatures, X25519 for sealing."""

    sign: SigningKey
    box: PrivateKey

    @classmethod
    def generate(cls) -> NodeKeys:
        return cls(SigningKey.generate(), PrivateKey.generate())

    @property
    def sign_pk(self) -> bytes:
        return bytes(self.sign.verify_key)

    @property
    def box_pk(self) -> bytes:
        return bytes(self.box.public_key)

    @property
    def verify_key(self) -> VerifyKey:
        return self.sign.verify_key

    @property
    def public_box(self) -> PublicKey:
        return self.box.public_key

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.sign_pk)

    def to_json(self) -> dict[str, str]:
        return {"sign_seed": bytes(self.sign).hex(), "box_sk": bytes(self.box).hex()}

    @classmethod
    def from_json(cls, data: dict[str, str]) -> NodeKeys:
        return cls(
            SigningKey(bytes.fromhex(data["sign_seed"])), PrivateKey(bytes.fromhex(data["box_sk"]))
        )

    def save(self, path: Path) -> None:
        write_secret(path, json.dumps(self.to_json()).encode())

    @classmethod
    def load(cls, path: Path) -> NodeKeys:
        raw = read_secret(path)
        try:
            return cls.from_json(json.loads(raw))
        except (ValueError, KeyError, TypeError) as exc:
            raise ProvisioningError("key.unreadable", path=path, reason=exc) from None


def new_group_key() -> bytes:
    """A fresh 32-byte mesh group key (XSalsa20-Poly1305)."""
    return secrets.token_bytes(32)


def write_secret(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, mode 0600 from the first byte, fsynced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, KEY_FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_secret(path: Path) -> bytes:
    """Read a secret file, refusing one that anybody but its owner may read or write."""
    try:
        st = path.stat()
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            raise ProvisioningError("key.permissions", path=path, mode=mode)
        return path.read_bytes()
    except OSError as exc:
        raise ProvisioningError("key.unreadable", path=path, reason=exc.strerror) from None
