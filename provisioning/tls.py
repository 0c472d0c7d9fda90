"""The home's TLS certificates: a home CA on ECDSA P-256 and the hub's leaf certificates.

Every mesh listener of the hub speaks TLS (MQTT, gRPC, and the web server's HTTPS). Ed25519
certificates fail the handshake in grpcio and Chromium, so TLS has its own root: a **home
TLS CA** on P-256 (``HOME/keys/tls-ca.key`` 0600, ``HOME/keys/tls-ca.pem``), made with the
home and endorsed by the Ed25519 home key (:func:`endorse`: one root of trust — a bundle
checks the endorsement with the home key it already pins). The CA issues one P-256 leaf per
listener (``HOME/tls/<listener>.pem`` and ``.key``, 0600), with the hub's stable TLS name
(:func:`tls_name`), ``localhost``, this machine's host name, the home's ``hub_host``, the
addresses the hub advertises, 127.0.0.1 and ::1 as subject alternative names.

:func:`ensure_hub_tls` runs at every hub start: it makes what is missing and renews a leaf
that expires within :data:`RENEW_BEFORE_DAYS`, was issued by another CA, or lacks a name
the hub now advertises; it returns a :class:`HubTls` (the CA, its fingerprint, the leaf
paths). Bundles pin the CA certificate and its SHA-256 fingerprint
(:mod:`provisioning.bundle`); devices verify the hub against it alone (:mod:`sync.tls`).

Devices check the chain, not the address they dialled: a hub found by mDNS or on a new DHCP
lease is the same hub. gRPC clients ask for :func:`tls_name` (always in the leaf), MQTT
clients verify the chain without a host name; the CA belongs to this home alone, so a
certificate it issued is this hub's.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import os
import socket
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from provisioning.errors import ProvisioningError
from storage.private import private_dir, write_private

CA_CERT_FILE = "keys/tls-ca.pem"
CA_KEY_FILE = "keys/tls-ca.key"
LEAF_DIR = "tls"
LISTENERS = ("mqtt", "grpc", "web")
CA_DAYS = 20 * 365
"""days the home CA is valid (it is pinned in every bundle: renewing it means re-pairing)"""
LEAF_DAYS = 397
"""days a leaf certificate is valid"""
RENEW_BEFORE_DAYS = 30
"""a leaf expiring within this many days is renewed when the hub starts"""
ENDORSE_CONTEXT = b"yimi.tls-ca.v1\x00"
"""what the home key signs: this, then the CA certificate's DER"""


PLAINTEXT_ENV = "YIMI_PLAINTEXT"
"""``1``: a device talks plaintext to a hub run with ``--plaintext`` (loopback only)"""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``)."""
    bare = host.strip("[]").lower()
    if bare == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


def plaintext_requested() -> bool:
    """Whether this process was asked to talk plaintext (:data:`PLAINTEXT_ENV`)."""
    return os.environ.get(PLAINTEXT_ENV, "") == "1"


UNREADABLE = (ValueError, TypeError, UnsupportedAlgorithm, x509.InvalidVersion)
"""what reading a certificate raises when it is not one we can read (``InvalidVersion``, a
version field that is not 1-3, is none of the others)"""


def tls_name(home_id: str) -> str:
    """The hub's stable TLS name (in every leaf; gRPC clients ask for it)."""
    return f"hub-{home_id}.yimi"


def ca_fingerprint(ca_pem: bytes) -> str:
    """SHA-256 (hex) of the CA certificate's DER: what a bundle pins."""
    cert = x509.load_pem_x509_certificate(ca_pem)
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def endorse(home_sign: SigningKey, ca_pem: bytes) -> bytes:
    """The home key's signature over the CA certificate (64 bytes)."""
    der = x509.load_pem_x509_certificate(ca_pem).public_bytes(serialization.Encoding.DER)
    return bytes(home_sign.sign(ENDORSE_CONTEXT + der).signature)


def check_endorsement(home_sign_pk: bytes, ca_pem: bytes, signature: bytes) -> None:
    """Raise :class:`ProvisioningError` ``tls.ca_invalid`` unless the home key endorsed
    ``ca_pem`` (and it is a P-256 CA certificate)."""
    try:
        cert = x509.load_pem_x509_certificate(ca_pem)
        der = cert.public_bytes(serialization.Encoding.DER)
        VerifyKey(home_sign_pk).verify(ENDORSE_CONTEXT + der, signature)
        key = cert.public_key()
        if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
            raise ValueError("not a P-256 key")
        if not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
            raise ValueError("not a CA certificate")
    except (*UNREADABLE, BadSignatureError, x509.ExtensionNotFound) as exc:
        reason = "not endorsed by the home key" if isinstance(exc, BadSignatureError) else exc
        raise ProvisioningError("tls.ca_invalid", reason=reason) from None


@dataclass(frozen=True)
class Leaf:
    """One listener's certificate and key files (PEM; the key 0600)."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class HubTls:
    """What the hub's listeners serve; see :func:`ensure_hub_tls`."""

    ca_pem: bytes
    fingerprint: str
    """SHA-256 of the CA certificate (what bundles pin)"""
    ca_path: Path
    mqtt: Leaf
    grpc: Leaf
    web: Leaf
    """the HTTPS listener's (the web server's) certificate and key"""
    names: tuple[str, ...]
    """the leaves' subject alternative names"""

    def server_context(self, leaf: Leaf | None = None) -> ssl.SSLContext:
        """A server :class:`ssl.SSLContext` serving ``leaf`` (default: the web listener's),
        TLS 1.2 or later — what an HTTPS server (aiohttp, uvicorn) takes. Clients trust the
        home CA (:attr:`ca_pem`): a browser has it installed, a device pins it."""
        leaf = leaf or self.web
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(leaf.cert, leaf.key)
        return context


def _utc(now: dt.datetime | None) -> dt.datetime:
    return now or dt.datetime.now(dt.UTC)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def ensure_ca(home_path: Path, home_id: str, *, now: dt.datetime | None = None) -> bytes:
    """The home CA certificate (PEM), made (with its key) if the home has none yet — a home
    made before TLS gets one at its first use."""
    cert_path, key_path = home_path / CA_CERT_FILE, home_path / CA_KEY_FILE
    if cert_path.exists() and key_path.exists():
        return cert_path.read_bytes()
    start = _utc(now) - dt.timedelta(minutes=5)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Yimi home"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"Yimi home {home_id} TLS CA"),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    private_dir(key_path.parent)
    write_private(key_path, _key_pem(key))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    write_private(cert_path, pem)
    return pem


def leaf_names(home_id: str, hub_host: str = "", extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The leaves' names: the stable TLS name, localhost, this machine's name, the home's
    ``hub_host``, ``extra`` (the advertised addresses), 127.0.0.1 and ::1 — each once."""
    found = [tls_name(home_id), "localhost", socket.gethostname(), hub_host, *extra]
    found += ["127.0.0.1", "::1"]
    out: list[str] = []
    for name in found:
        name = name.strip().lower()
        if name and name not in out and name not in ("0.0.0.0", "::"):
            out.append(name)
    return tuple(out)


def _san(names: Iterable[str]) -> x509.SubjectAlternativeName:
    general: list[x509.GeneralName] = []
    for name in names:
        try:
            general.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            general.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(general)


def _names_of(cert: x509.Certificate) -> set[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(n) for n in san.get_values_for_type(x509.DNSName)} | {
        str(ip) for ip in san.get_values_for_type(x509.IPAddress)
    }


def issue_leaf(
    ca_pem: bytes,
    ca_key_pem: bytes,
    names: Iterable[str],
    *,
    now: dt.datetime | None = None,
    days: int = LEAF_DAYS,
) -> tuple[bytes, bytes]:
    """A P-256 server certificate for ``names`` issued by the CA; (cert PEM, key PEM)."""
    names = tuple(names)
    ca = x509.load_pem_x509_certificate(ca_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ProvisioningError("tls.ca_invalid", reason="the CA key is not an EC key")
    key = ec.generate_private_key(ec.SECP256R1())
    start = _utc(now) - dt.timedelta(minutes=5)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_san(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def leaf_is_current(
    cert_pem: bytes, ca_pem: bytes, names: Iterable[str], *, now: dt.datetime | None = None
) -> bool:
    """Whether a leaf may be served as it is: issued by this CA, valid for more than
    :data:`RENEW_BEFORE_DAYS`, and naming every one of ``names``."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        ca = x509.load_pem_x509_certificate(ca_pem)
        cert.verify_directly_issued_by(ca)
    except (*UNREADABLE, InvalidSignature):
        return False
    renew_at = cert.not_valid_after_utc - dt.timedelta(days=RENEW_BEFORE_DAYS)
    return _utc(now) < renew_at and set(names) <= _names_of(cert)


def ensure_hub_tls(
    home_path: Path,
    home_id: str,
    *,
    hub_host: str = "",
    extra_names: Iterable[str] = (),
    now: dt.datetime | None = None,
) -> HubTls:
    """The CA and a current leaf per listener (:data:`LISTENERS`), made or renewed as
    needed (see the module doc); the hub runs this at every start."""
    ca_pem = ensure_ca(home_path, home_id, now=now)
    ca_key_pem = (home_path / CA_KEY_FILE).read_bytes()
    names = leaf_names(home_id, hub_host, extra_names)
    folder = private_dir(home_path / LEAF_DIR)
    leaves: dict[str, Leaf] = {}
    for listener in LISTENERS:
        leaf = Leaf(folder / f"{listener}.pem", folder / f"{listener}.key")
        current = leaf.cert.exists() and leaf.key.exists()
        if not current or not leaf_is_current(leaf.cert.read_bytes(), ca_pem, names, now=now):
            cert_pem, key_pem = issue_leaf(ca_pem, ca_key_pem, names, now=now)
            write_private(leaf.key, key_pem)
            write_private(leaf.cert, cert_pem)
        leaves[listener] = leaf
    return HubTls(
        ca_pem=ca_pem,
        fingerprint=ca_fingerprint(ca_pem),
        ca_path=home_path / CA_CERT_FILE,
        mqtt=leaves["mqtt"],
        grpc=leaves["grpc"],
        web=leaves["web"],
        names=names,
    )


def status(home_path: Path) -> tuple[str, dt.datetime | None]:
    """(CA fingerprint, earliest expiry of the leaves) of a home, without making anything:
    ("", None) before the CA exists."""
    cert_path = home_path / CA_CERT_FILE
    if not cert_path.exists():
        return "", None
    ends = []
    for listener in LISTENERS:
        leaf = home_path / LEAF_DIR / f"{listener}.pem"
        try:
            ends.append(x509.load_pem_x509_certificate(leaf.read_bytes()).not_valid_after_utc)
        except (OSError, ValueError):
            continue
    return ca_fingerprint(cert_path.read_bytes()), min(ends, default=None)


def server_leaf(host: str, port: int, timeout: float = 5.0) -> bytes:
    """The certificate (PEM) a TLS server at ``host:port`` presents, *not verified*: what a
    pairing device connects under before it has the CA (the grant then has to name the CA
    that issued it, see :func:`issued_by`). Blocking; raises :class:`OSError`."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection((host.strip("[]"), port), timeout=timeout) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    if not der:
        raise OSError("the server presented no certificate")
    try:
        return x509.load_der_x509_certificate(der).public_bytes(serialization.Encoding.PEM)
    except ValueError:
        raise OSError("the server's certificate is unreadable") from None


def leaf_name(leaf_pem: bytes) -> str:
    """A leaf's first name (the hub's stable TLS name for a leaf :func:`issue_leaf` made)."""
    cert = x509.load_pem_x509_certificate(leaf_pem)
    names = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    return str(names[0]) if names else ""


def issued_by(leaf_pem: bytes, ca_pem: bytes) -> bool:
    """Whether the CA ``ca_pem`` signed the certificate ``leaf_pem``."""
    try:
        x509.load_pem_x509_certificate(leaf_pem).verify_directly_issued_by(
            x509.load_pem_x509_certificate(ca_pem)
        )
    except (*UNREADABLE, InvalidSignature):
        return False
    return True
