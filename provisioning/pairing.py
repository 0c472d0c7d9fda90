"""Pairing with a one-time code, for devices that make their own keys.

A code looks like ``ABCD-EFGH-JKMN-PQRS`` (Crockford base32): the first group names the
code, the other three (60 bits) are its secret and never cross the network. The device
sends ``mac = BLAKE2b(key, "request" || details)`` with ``key = argon2id(secret, salt)``;
the hub answers with the grant and ``BLAKE2b(key, "grant" || grant)``, so each side proves
knowledge of the code to the other, and a passive listener learns nothing it could test
offline cheaply. Codes expire after 10 minutes and work once; the hub rate-limits failures.

The call runs over TLS before the device knows the home's CA: it takes the certificate the
hub presents, and the grant (authenticated by the code) names the CA — endorsed by the home
key — that must have issued it (``pair.tls_mismatch`` otherwise); the bundle pins that CA.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import nacl.pwhash
from nacl.exceptions import CryptoError
from nacl.public import Box, PublicKey

from protos import mesh_pb2
from protos.clock import now_ms
from protos.codec import parse
from provisioning import certificate as certs
from provisioning.bundle import Bundle, enrol, write
from provisioning.epochs import home_keys
from provisioning.errors import ProvisioningError
from provisioning.home import Home, home_id_of
from provisioning.identity import NodeKeys
from provisioning.profiles import load_profile
from provisioning.registry import DeviceRecord, check_name
from provisioning.tls import (
    check_endorsement,
    endorse,
    ensure_ca,
    is_loopback,
    issued_by,
    leaf_name,
    plaintext_requested,
    server_leaf,
)

T = TypeVar("T")
CODE_TTL_S = 600
"""seconds a pairing code stays valid"""
MAX_CODE_FAILURES = 5
"""wrong proofs after which a code is burnt"""
RATE_WINDOW_S = 60.0
"""seconds over which failed attempts are counted"""
MAX_FAILURES_PER_PEER = 5
MAX_FAILURES_TOTAL = 20
MAX_REQUEST_BYTES = 4096
ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32
PAIRABLE_PROFILES = ("glasses", "mac", "phone", "watch")
WEB_PROFILE = "phone"
"""the profile of a browser paired from the hub's page (the phone companion)"""
REFUSALS = (
    "pair.code_invalid",
    "pair.rate_limited",
    "profile.unknown",
    "device.exists",
    "device.name_invalid",
    "certificate.invalid",
)
"""error keys the hub sends back that explain a refusal (re-rendered on the device)"""


def new_code() -> tuple[str, str, str]:
    """Return (code as shown, code id, secret)."""
    chars = "".join(secrets.choice(ALPHABET) for _ in range(16))
    groups = [chars[i : i + 4] for i in range(0, 16, 4)]
    return "-".join(groups), groups[0], "".join(groups[1:])


def split_code(code: str) -> tuple[str, str]:
    """(code id, secret) from user input; tolerant of case, spaces and I/L/O look-alikes."""
    norm = code.strip().upper().replace(" ", "").replace("I", "1").replace("L", "1")
    norm = norm.replace("O", "0")
    groups = norm.split("-")
    if len(groups) != 4 or any(len(g) != 4 or set(g) - set(ALPHABET) for g in groups):
        raise ProvisioningError("pair.code_format", code=code)
    return groups[0], "".join(groups[1:])


def issue_code(home: Home, ttl_s: int = CODE_TTL_S) -> tuple[str, int]:
    """``yimi hub pair-code``: store a new code; return it and its expiry (ms)."""
    shown, code_id, secret = new_code()
    registry = home.registry()
    try:
        expires = registry.add_pair_code(code_id, secret, ttl_s * 1000)
    finally:
        registry.close()
    return shown, expires


def _key(secret: str, salt: bytes) -> bytes:
    return bytes(
        nacl.pwhash.argon2id.kdf(
            32,
            secret.encode(),
            salt,
            opslimit=nacl.pwhash.argon2id.OPSLIMIT_INTERACTIVE,
            memlimit=nacl.pwhash.argon2id.MEMLIMIT_INTERACTIVE,
        )
    )


def _mac(key: bytes, label: bytes, data: bytes) -> bytes:
    return hashlib.blake2b(label + b"\x00" + data, key=key, digest_size=32).digest()


# ---------------------------------------------------------------- device side
@dataclass
class PairAttempt:
    """A device's half of pairing: its new keys and the request to send."""

    keys: NodeKeys
    request: mesh_pb2.PairRequest
    key: bytes

    @classmethod
    def make(cls, code: str, *, profile: str, name: str) -> PairAttempt:
        code_id, secret = split_code(code)
        load_profile(profile)
        check_name(name)
        keys = NodeKeys.generate()
        details = mesh_pb2.PairDetails(
            name=name, profile=profile, sign_pk=keys.sign_pk, box_pk=keys.box_pk, time_ms=now_ms()
        ).SerializeToString()
        salt = secrets.token_bytes(nacl.pwhash.argon2id.SALTBYTES)
        key = _key(secret, salt)
        req = mesh_pb2.PairRequest(
            code_id=code_id, salt=salt, details=details, mac=_mac(key, b"request", details)
        )
        return cls(keys, req, key)

    def finish(
        self,
        response: mesh_pb2.PairResponse,
        *,
        out: Path,
        hub_host: str,
        seen_leaf: bytes | None = None,
    ) -> Bundle:
        """Check the hub's proof, open the grant, write the bundle. ``seen_leaf``: the TLS
        certificate the pairing call was made under (:func:`pair_over_grpc`), which the CA
        the grant names must have issued (``None``: a plaintext call on loopback)."""
        if not hmac.compare_digest(response.mac, _mac(self.key, b"grant", response.grant)):
            raise ProvisioningError("pair.hub_unproven")
        grant = parse(mesh_pb2.PairGrant, response.grant, MAX_REQUEST_BYTES * 4)
        if grant is None or home_id_of(grant.home_sign_pk) != grant.home_id:
            raise ProvisioningError("pair.hub_unproven")
        cert_bytes = grant.certificate.SerializeToString()
        cert = certs.verify(cert_bytes, grant.home_sign_pk, home_id=grant.home_id)
        if cert.sign_pk != self.keys.sign_pk:
            raise ProvisioningError("certificate.invalid", reason="issued for other keys")
        check_endorsement(grant.home_sign_pk, grant.tls_ca_pem, grant.tls_ca_endorsement)
        if seen_leaf is not None and not issued_by(seen_leaf, grant.tls_ca_pem):
            raise ProvisioningError("pair.tls_mismatch")
        try:
            box = Box(self.keys.box, PublicKey(grant.hub_box_pk))
            secrets_ = parse(mesh_pb2.PairSecrets, bytes(box.decrypt(grant.sealed_secrets)), 4096)
        except (CryptoError, ValueError):
            secrets_ = None
        if secrets_ is None:
            raise ProvisioningError("pair.hub_unproven")
        return write(
            out,
            tls_ca_pem=grant.tls_ca_pem,
            tls_ca_endorsement=grant.tls_ca_endorsement,
            home_id=grant.home_id,
            home_sign_pk=grant.home_sign_pk,
            hub_sign_pk=grant.hub_sign_pk,
            hub_box_pk=grant.hub_box_pk,
            hub_host=hub_host,
            grpc_port=grant.grpc_port,
            mqtt_port=grant.mqtt_port,
            keys=self.keys,
            certificate=cert_bytes,
            mqtt_password=secrets_.mqtt_password,
            group_key=secrets_.group_key,
            group_epoch=secrets_.group_epoch,
            profile=load_profile(cert.profile),
        )


# ---------------------------------------------------------------- hub side
@dataclass
class PairingAuthority:
    """The hub's side: checks codes and proofs, rate-limits, enrols exactly once per code."""

    home: Home
    mqtt_port: int
    grpc_port: int
    _failures: dict[str, deque[float]] = field(default_factory=dict)
    _all_failures: deque[float] = field(default_factory=deque)

    def handle(self, request: mesh_pb2.PairRequest, peer: str) -> mesh_pb2.PairResponse:
        return self._limited(peer, lambda: self._grant(request))

    def handle_web(
        self, code: str, *, name: str, sign_pk: bytes, box_pk: bytes, peer: str
    ) -> DeviceRecord:
        """A browser's pairing, over the hub's own HTTPS page (the code's secret travels
        inside TLS, or on loopback): the same code, rate limits and enrolment as
        :meth:`handle`, as a ``phone``; returns the enrolled device."""
        return self._limited(peer, lambda: self._grant_web(code, name, sign_pk, box_pk))

    def _limited(self, peer: str, attempt: Callable[[], T]) -> T:
        now = time.monotonic()
        self._expire(now)
        per_peer = self._failures.setdefault(peer, deque())
        if len(per_peer) >= MAX_FAILURES_PER_PEER or len(self._all_failures) >= MAX_FAILURES_TOTAL:
            oldest = (
                per_peer[0] if len(per_peer) >= MAX_FAILURES_PER_PEER else self._all_failures[0]
            )
            raise ProvisioningError(
                "pair.rate_limited", seconds=max(1, int(RATE_WINDOW_S - (now - oldest)) + 1)
            )
        try:
            return attempt()
        except ProvisioningError as exc:
            if exc.key == "pair.code_invalid":
                per_peer.append(now)
                self._all_failures.append(now)
            raise

    def _expire(self, now: float) -> None:
        for q in (*self._failures.values(), self._all_failures):
            while q and now - q[0] > RATE_WINDOW_S:
                q.popleft()
        for peer in [p for p, q in self._failures.items() if not q]:
            del self._failures[peer]

    def _grant_web(self, code: str, name: str, sign_pk: bytes, box_pk: bytes) -> DeviceRecord:
        try:
            code_id, secret = split_code(code)
        except ProvisioningError:
            raise ProvisioningError("pair.code_invalid") from None
        check_name(name)
        if len(sign_pk) != 32 or len(box_pk) != 32:
            raise ProvisioningError("certificate.invalid", reason="public keys must be 32 bytes")
        registry = self.home.registry()
        try:
            found = registry.pair_code(code_id)
            if found is None:
                raise ProvisioningError("pair.code_invalid")
            stored, expires_ms, used_ms, failures = found
            if used_ms is not None or expires_ms <= now_ms() or failures >= MAX_CODE_FAILURES:
                raise ProvisioningError("pair.code_invalid")
            if not hmac.compare_digest(stored.encode(), secret.encode()):
                registry.pair_failure(code_id)
                raise ProvisioningError("pair.code_invalid")
            if registry.name_taken(name):
                raise ProvisioningError("device.exists", name=name)
            record, _password = enrol(  # no broker login: the browser speaks HTTPS only
                self.home,
                name=name,
                profile=load_profile(WEB_PROFILE),
                sign_pk=sign_pk,
                box_pk=box_pk,
                enrolled_by="pair-web",
            )
            if not registry.consume_pair_code(code_id, record):
                raise ProvisioningError("pair.code_invalid")
        finally:
            registry.close()
        return record

    def _grant(self, request: mesh_pb2.PairRequest) -> mesh_pb2.PairResponse:
        registry = self.home.registry()
        try:
            found = registry.pair_code(request.code_id[:8])
            if found is None:
                raise ProvisioningError("pair.code_invalid")
            secret, expires_ms, used_ms, failures = found
            if used_ms is not None or expires_ms <= now_ms() or failures >= MAX_CODE_FAILURES:
                raise ProvisioningError("pair.code_invalid")
            if len(request.salt) != nacl.pwhash.argon2id.SALTBYTES or len(request.details) > (
                MAX_REQUEST_BYTES
            ):
                raise ProvisioningError("pair.code_invalid")
            key = _key(secret, request.salt)
            if not hmac.compare_digest(request.mac, _mac(key, b"request", request.details)):
                registry.pair_failure(request.code_id)
                raise ProvisioningError("pair.code_invalid")
            details = parse(mesh_pb2.PairDetails, request.details, MAX_REQUEST_BYTES)
            if details is None or details.profile not in PAIRABLE_PROFILES:
                raise ProvisioningError(
                    "profile.unknown",
                    name=details.profile if details else "?",
                    known=", ".join(PAIRABLE_PROFILES),
                )
            if len(details.sign_pk) != 32 or len(details.box_pk) != 32:
                raise ProvisioningError(
                    "certificate.invalid", reason="public keys must be 32 bytes"
                )
            record, password = enrol(
                self.home,
                name=details.name,
                profile=load_profile(details.profile),
                sign_pk=details.sign_pk,
                box_pk=details.box_pk,
                enrolled_by="pair",
            )
            if not registry.consume_pair_code(request.code_id, record):
                raise ProvisioningError("pair.code_invalid")
        finally:
            registry.close()
        current = home_keys(self.home.path, self.home.group_key).current
        sealed = Box(self.home.hub_keys.box, PublicKey(details.box_pk)).encrypt(
            mesh_pb2.PairSecrets(
                mqtt_username=record.device_id,
                mqtt_password=password,
                group_key=current.key,
                group_epoch=current.number,
            ).SerializeToString()
        )
        ca_pem = ensure_ca(self.home.path, self.home.home_id)
        grant = mesh_pb2.PairGrant(
            tls_ca_pem=ca_pem,
            tls_ca_endorsement=endorse(self.home.home_keys.sign, ca_pem),
            certificate=mesh_pb2.SignedCertificate.FromString(record.certificate),
            home_id=self.home.home_id,
            hub_sign_pk=self.home.hub_keys.sign_pk,
            hub_box_pk=self.home.hub_keys.box_pk,
            mqtt_port=self.mqtt_port,
            grpc_port=self.grpc_port,
            sealed_secrets=bytes(sealed),
            home_sign_pk=self.home.home_keys.sign_pk,
        ).SerializeToString()
        return mesh_pb2.PairResponse(grant=grant, mac=_mac(key, b"grant", grant))


def encode_refusal(exc: ProvisioningError) -> str:
    """A refusal as gRPC status details: ``key|{json fields}`` (the device re-renders it)."""
    return f"{exc.key}|{json.dumps(exc.fields, default=str)}"


def decode_refusal(details: str) -> ProvisioningError | None:
    """The hub's refusal from status details, if it is one this side knows how to say."""
    key, _, fields = details.partition("|")
    if key not in REFUSALS:
        return None
    try:
        parsed = json.loads(fields)
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    return ProvisioningError(key, **{str(k): v for k, v in parsed.items()})


async def pair_over_grpc(
    host: str, port: int, request: mesh_pb2.PairRequest, *, timeout: float = 15.0
) -> tuple[mesh_pb2.PairResponse, bytes | None]:
    """The enrolment call: send the pairing request to the hub's gRPC at ``host:port``; the
    answer and the TLS certificate the call ran under (``None``: plaintext, on loopback
    only, when :data:`provisioning.tls.PLAINTEXT_ENV` asks for it).

    The device has no CA yet: it takes the certificate the hub presents (not verified) and
    makes the call under it; :meth:`PairAttempt.finish` then checks that the CA the
    code-authenticated grant names issued it (``pair.tls_mismatch`` otherwise)."""
    import asyncio

    import grpc

    from protos import mesh_pb2_grpc

    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    leaf: bytes | None = None
    try:
        if plaintext_requested():
            if not is_loopback(host):
                raise ProvisioningError("tls.plaintext_not_loopback", host=host)
            channel = grpc.aio.insecure_channel(target)
        else:
            leaf = await asyncio.wait_for(asyncio.to_thread(server_leaf, host, port), timeout)
            # the CA is not known yet: the leaf is the root for this one call, asked for by
            # its own stable name (whatever address the device dialled)
            credentials = grpc.ssl_channel_credentials(root_certificates=leaf)
            name = ("grpc.ssl_target_name_override", leaf_name(leaf))
            channel = grpc.aio.secure_channel(target, credentials, options=[name])
    except (OSError, TimeoutError) as exc:
        raise ProvisioningError("pair.unreachable", target=target, reason=exc) from None
    try:
        async with channel:
            response = await mesh_pb2_grpc.HubStub(channel).Pair(request, timeout=timeout)
            return response, leaf
    except grpc.aio.AioRpcError as exc:
        refusal = decode_refusal(exc.details() or "")
        if refusal is not None:
            raise refusal from None
        reason = exc.code().name.lower()
        raise ProvisioningError("pair.unreachable", target=target, reason=reason) from None
