"""Device bundles: everything a device needs on first boot, in one folder.

Layout of ``BUNDLE``::

    bundle.yaml        home id, device id and name, profile name, the pinned hub
                       (fingerprint, public keys, address hints), broker user name
    device.key         the device's own keys                        0600
    secrets.json       broker password, mesh group key and its epoch 0600
    certificate.bin    the device certificate, signed by the home key
    profile.yaml       the device profile
    hub-ca.pem         the home TLS CA the device verifies the hub against (its SHA-256
                       and the home key's endorsement in bundle.yaml: ``hub.tls_ca_sha256``,
                       ``hub.tls_ca_endorsement``; :mod:`provisioning.tls`)
    state/             created at run time: counter, outbox, replicas, newer group keys
                       (``group-keys.json``, see :mod:`provisioning.epochs`)

``yimi device add`` (flash: the hub machine makes the device keys) and ``yimi device pair``
(the device makes its own keys and enrols with a one-time code) both end in :func:`write`.
A bundle written before TLS has no ``hub-ca.pem`` (``tls_ca_pem`` is ``None``): it loads, but
connecting refuses with ``bundle.no_tls_ca`` (:mod:`sync.tls`) — re-pair or re-flash it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from protos import mesh_pb2
from protos.clock import now_ms
from provisioning import certificate as certs
from provisioning.credentials import mosquitto_hash, new_password
from provisioning.epochs import home_keys
from provisioning.errors import ProvisioningError
from provisioning.home import Home
from provisioning.identity import NodeKeys, fingerprint, read_secret, write_secret
from provisioning.profiles import Profile, dump_profile, load_profile
from provisioning.registry import DeviceRecord, check_name
from provisioning.tls import UNREADABLE, ca_fingerprint, check_endorsement, endorse, ensure_ca
from storage.private import private_dir, write_private

BUNDLE_VERSION = 1
CA_FILE = "hub-ca.pem"


@dataclass
class Bundle:
    """A loaded device bundle."""

    path: Path
    config: dict[str, Any]
    keys: NodeKeys
    mqtt_password: str
    group_key: bytes
    certificate: mesh_pb2.DeviceCertificate
    profile: Profile
    group_epoch: int = 0
    """the epoch of ``group_key`` (0 for a bundle written before the home rotated it)"""
    tls_ca_pem: bytes | None = None
    """the pinned home TLS CA (``None``: a bundle written before TLS)"""

    @property
    def home_id(self) -> str:
        return str(self.config["home_id"])

    @property
    def device_id(self) -> str:
        return str(self.config["device_id"])

    @property
    def name(self) -> str:
        return str(self.config["name"])

    @property
    def hub(self) -> dict[str, Any]:
        return dict(self.config["hub"])

    @property
    def pinned_fingerprint(self) -> str:
        return str(self.config["hub"]["fingerprint"])

    @property
    def hub_sign_pk(self) -> bytes:
        return bytes.fromhex(self.config["hub"]["sign_pk"])

    @property
    def hub_box_pk(self) -> bytes:
        return bytes.fromhex(self.config["hub"]["box_pk"])

    @property
    def mqtt_username(self) -> str:
        return str(self.config["mqtt_username"])

    @property
    def state_dir(self) -> Path:
        d = self.path / "state"
        d.mkdir(mode=0o700, exist_ok=True)
        return d

    @classmethod
    def load(cls, path: Path) -> Bundle:
        cfg_file = path / "bundle.yaml"
        if not cfg_file.exists():
            raise ProvisioningError("bundle.missing", path=path)
        try:
            config = yaml.safe_load(cfg_file.read_text())
            if not isinstance(config, dict):
                raise ValueError("bundle.yaml is not a mapping")
            keys = NodeKeys.load(path / "device.key")
            secrets_ = json.loads(read_secret(path / "secrets.json"))
            cert = certs.verify(
                (path / "certificate.bin").read_bytes(),
                bytes.fromhex(config["home_sign_pk"]),
                home_id=config["home_id"],
            )
            profile = load_profile(path / "profile.yaml")
            if (
                cert.sign_pk != keys.sign_pk
                or fingerprint(bytes.fromhex(config["hub"]["sign_pk"]))
                != (config["hub"]["fingerprint"])
            ):
                raise ValueError("keys do not match the certificate or the pinned hub")
            return cls(
                path,
                config,
                keys,
                str(secrets_["mqtt_password"]),
                bytes.fromhex(secrets_["group_key"]),
                cert,
                profile,
                int(secrets_.get("group_epoch", 0)),
                _pinned_ca(path, config),
            )
        except (ValueError, KeyError, TypeError, OSError, yaml.YAMLError) as exc:
            raise ProvisioningError("bundle.corrupt", path=path, reason=exc) from None

    @property
    def tls_ca_fingerprint(self) -> str:
        """SHA-256 of the pinned TLS CA ("" for a bundle written before TLS)."""
        return str(self.config["hub"].get("tls_ca_sha256", ""))


def _pinned_ca(path: Path, config: dict[str, Any]) -> bytes | None:
    """The bundle's TLS CA, checked against its pinned SHA-256 and the home key's
    endorsement; ``None`` when the bundle pins none."""
    hub = config["hub"]
    if "tls_ca_sha256" not in hub:
        return None
    pem = (path / CA_FILE).read_bytes()
    try:
        pinned = ca_fingerprint(pem)
    except UNREADABLE as exc:
        raise ValueError(f"{CA_FILE} is not a certificate: {exc}") from None
    if pinned != hub["tls_ca_sha256"]:
        raise ValueError(f"{CA_FILE} is not the pinned TLS CA")
    try:
        check_endorsement(
            bytes.fromhex(config["home_sign_pk"]), pem, bytes.fromhex(hub["tls_ca_endorsement"])
        )
    except ProvisioningError as exc:
        raise ValueError(str(exc)) from None
    return pem


def device_id_of(sign_pk: bytes) -> str:
    """A device's id: 16 hex characters derived from its signing key."""
    return fingerprint(sign_pk)[:16]


def enrol(
    home: Home,
    *,
    name: str,
    profile: Profile,
    sign_pk: bytes,
    box_pk: bytes,
    enrolled_by: str,
) -> tuple[DeviceRecord, str]:
    """Make the registry record (certificate + broker credential); returns it and the password.

    The caller stores it (``Registry.add_device`` or ``consume_pair_code``).
    """
    check_name(name)
    device_id = device_id_of(sign_pk)
    signed = certs.issue(
        home.home_keys.sign,
        home_id=home.home_id,
        device_id=device_id,
        name=name,
        profile=profile.name,
        scopes=profile.scopes,
        sign_pk=sign_pk,
        box_pk=box_pk,
    )
    password = new_password()
    record = DeviceRecord(
        device_id=device_id,
        name=name,
        profile=profile.name,
        scopes=tuple(profile.scopes),
        sign_pk=sign_pk,
        box_pk=box_pk,
        certificate=signed.SerializeToString(),
        mqtt_hash=mosquitto_hash(password),
        enrolled_by=enrolled_by,
        created_ms=now_ms(),
        revoked_ms=None,
    )
    return record, password


def flash(
    home: Home, *, profile_name: str, name: str, out: Path, hub_host: str | None = None
) -> Bundle:
    """``yimi device add``: make device keys here, enrol them, write the bundle to ``out``."""
    profile = load_profile(profile_name)
    _check_out(out)
    keys = NodeKeys.generate()
    registry = home.registry()
    try:
        if registry.name_taken(check_name(name)):
            raise ProvisioningError("device.exists", name=name)
        record, password = enrol(
            home,
            name=name,
            profile=profile,
            sign_pk=keys.sign_pk,
            box_pk=keys.box_pk,
            enrolled_by="flash",
        )
        registry.add_device(record)
    finally:
        registry.close()
    current = home_keys(home.path, home.group_key).current
    ca_pem = ensure_ca(home.path, home.home_id)
    return write(
        out,
        home_id=home.home_id,
        home_sign_pk=home.home_keys.sign_pk,
        hub_sign_pk=home.hub_keys.sign_pk,
        hub_box_pk=home.hub_keys.box_pk,
        hub_host=hub_host if hub_host is not None else home.hub_host,
        grpc_port=home.grpc_port,
        mqtt_port=home.mqtt_port,
        keys=keys,
        certificate=record.certificate,
        mqtt_password=password,
        group_key=current.key,
        group_epoch=current.number,
        profile=profile,
        tls_ca_pem=ca_pem,
        tls_ca_endorsement=endorse(home.home_keys.sign, ca_pem),
    )


def write(
    out: Path,
    *,
    home_id: str,
    home_sign_pk: bytes,
    hub_sign_pk: bytes,
    hub_box_pk: bytes,
    hub_host: str,
    grpc_port: int,
    mqtt_port: int,
    keys: NodeKeys,
    certificate: bytes,
    mqtt_password: str,
    group_key: bytes,
    profile: Profile,
    tls_ca_pem: bytes,
    tls_ca_endorsement: bytes,
    group_epoch: int = 0,
) -> Bundle:
    """Write a bundle folder (mode 0700; secrets 0600) and load it back."""
    _check_out(out)
    cert = certs.verify(certificate, home_sign_pk, home_id=home_id)
    check_endorsement(home_sign_pk, tls_ca_pem, tls_ca_endorsement)
    private_dir(out)
    config = {
        "version": BUNDLE_VERSION,
        "home_id": home_id,
        "home_sign_pk": home_sign_pk.hex(),
        "device_id": cert.device_id,
        "name": cert.name,
        "profile": profile.name,
        "mqtt_username": cert.device_id,
        "hub": {
            "fingerprint": fingerprint(hub_sign_pk),
            "sign_pk": hub_sign_pk.hex(),
            "box_pk": hub_box_pk.hex(),
            "host": hub_host,
            "grpc_port": grpc_port,
            "mqtt_port": mqtt_port,
            "tls_ca_sha256": ca_fingerprint(tls_ca_pem),
            "tls_ca_endorsement": tls_ca_endorsement.hex(),
        },
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    keys.save(out / "device.key")
    write_secret(
        out / "secrets.json",
        json.dumps(
            {
                "mqtt_password": mqtt_password,
                "group_key": group_key.hex(),
                "group_epoch": group_epoch,
            }
        ).encode(),
    )
    write_private(out / "certificate.bin", certificate)
    write_private(out / "profile.yaml", dump_profile(profile))
    write_private(out / CA_FILE, tls_ca_pem)
    write_private(out / "bundle.yaml", yaml.safe_dump(config, sort_keys=False))
    return Bundle.load(out)


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ProvisioningError("bundle.exists", path=out)
