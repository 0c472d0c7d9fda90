"""Broker credentials: random passwords and mosquitto 2.0 password-file hashes.

Mosquitto 2.0 stores ``username:$7$<iterations>$<salt>$<hash>`` where salt is 12 random
bytes and hash is PBKDF2-HMAC-SHA512 (64 bytes) of the UTF-8 password, both in standard
base64 with padding. This matches what ``mosquitto_passwd`` (2.0.11) writes, so the broker
verifies these hashes without the tool being installed on the machine that provisions.
"""

from __future__ import annotations

import base64
import hashlib
import secrets

SALT_LEN = 12
HASH_LEN = 64
DEFAULT_ITERATIONS = 101


def new_password() -> str:
    """A fresh broker password: 32 random bytes, url-safe base64 without padding."""
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode("ascii")


def mosquitto_hash(
    password: str, *, salt: bytes | None = None, iterations: int = DEFAULT_ITERATIONS
) -> str:
    """The mosquitto 2.0 password-file hash ``$7$<iterations>$<salt b64>$<hash b64>``."""
    if salt is None:
        salt = secrets.token_bytes(SALT_LEN)
    if len(salt) != SALT_LEN:
        raise ValueError(f"mosquitto expects a {SALT_LEN}-byte salt, got {len(salt)}")
    if iterations < 1:
        raise ValueError("iterations must be positive")
    digest = hashlib.pbkdf2_hmac("sha512", password.encode("utf-8"), salt, iterations, HASH_LEN)
    salt_b64 = base64.b64encode(salt).decode("ascii")
    hash_b64 = base64.b64encode(digest).decode("ascii")
    return f"$7${iterations}${salt_b64}${hash_b64}"
