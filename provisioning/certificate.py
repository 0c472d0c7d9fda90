"""Device certificates: issued and signed by the home key, verified against it."""

from __future__ import annotations

from collections.abc import Sequence

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from protos import clock, mesh_pb2
from protos.codec import CERTIFICATE_CONTEXT, parse, signing_input
from provisioning.errors import ProvisioningError

CERTIFICATE_VERSION = 1
DEFAULT_VALIDITY_DAYS = 365 * 2
"""days a certificate is valid for by default"""
MAX_CERTIFICATE_BYTES = 4096


def issue(
    home_key: SigningKey,
    *,
    home_id: str,
    device_id: str,
    name: str,
    profile: str,
    scopes: Sequence[str],
    sign_pk: bytes,
    box_pk: bytes,
    validity_days: int = DEFAULT_VALIDITY_DAYS,
    now_ms: int | None = None,
) -> mesh_pb2.SignedCertificate:
    """Sign a certificate binding a device's id, profile, scopes and public keys."""
    now_ms = clock.now_ms() if now_ms is None else now_ms
    cert = mesh_pb2.DeviceCertificate(
        version=CERTIFICATE_VERSION,
        home_id=home_id,
        device_id=device_id,
        name=name,
        profile=profile,
        scopes=list(scopes),
        sign_pk=sign_pk,
        box_pk=box_pk,
        issued_ms=now_ms,
        expires_ms=now_ms + validity_days * 86_400_000,
    )
    body = cert.SerializeToString(deterministic=True)
    sig = home_key.sign(signing_input(CERTIFICATE_CONTEXT, body)).signature
    return mesh_pb2.SignedCertificate(body=body, signature=sig)


def verify(
    signed: mesh_pb2.SignedCertificate | bytes,
    home_pk: bytes,
    *,
    home_id: str,
    now_ms: int | None = None,
) -> mesh_pb2.DeviceCertificate:
    """Check the home key's signature, the home id and expiry; return the certificate."""
    if isinstance(signed, bytes):
        parsed = parse(mesh_pb2.SignedCertificate, signed, MAX_CERTIFICATE_BYTES)
        if parsed is None:
            raise ProvisioningError("certificate.invalid", reason="malformed")
        signed = parsed
    try:
        VerifyKey(home_pk).verify(signing_input(CERTIFICATE_CONTEXT, signed.body), signed.signature)
    except (BadSignatureError, ValueError):
        raise ProvisioningError("certificate.invalid", reason="bad signature") from None
    cert = parse(mesh_pb2.DeviceCertificate, signed.body, MAX_CERTIFICATE_BYTES)
    if cert is None:
        raise ProvisioningError("certificate.invalid", reason="malformed body")
    if cert.home_id != home_id:
        raise ProvisioningError("certificate.invalid", reason=f"issued for home {cert.home_id}")
    now_ms = clock.now_ms() if now_ms is None else now_ms
    if cert.expires_ms <= now_ms:
        raise ProvisioningError("certificate.invalid", reason="expired")
    return cert
