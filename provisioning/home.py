"""The home: the owner's root of trust and the hub's configuration, in one folder.

Layout of ``HOME``::

    home.yaml            home id, hub fingerprint and public keys, default ports
    keys/home.key        home signing key (signs device certificates)      0600
    keys/hub.key         hub node keys (signs and seals hub envelopes)     0600
    keys/group.key       mesh group key epoch 0 (sealed broadcasts)        0600
    keys/epochs.json     newer group key epochs, current + previous        0600
                         (:mod:`provisioning.epochs`; made by the hub)
    keys/broker.secret   the hub's own broker password                     0600
    keys/tls-ca.key      home TLS CA key, ECDSA P-256 (:mod:`provisioning.tls`) 0600
    keys/tls-ca.pem      home TLS CA certificate (pinned by every bundle)
    tls/                 the hub's leaf certificates and keys: mqtt, grpc, web (renewed
                         at hub start)
    registry.db          enrolled devices, revocations, pairing codes
    hub.db               timeline, deliveries, counters (the hub daemon's)
    voiceprints.db       voiceprint samples, centroids, lines (only rise), trust windows
    broker/              generated mosquitto config, passwords, ACL, data
    packages.yaml        capability packages the hub runs, with their settings (optional)
    keys/package-secrets.json  secrets resolved for packages that declare them   0600
    gateway/             ledger, cards, first-send memory (gateway.db); audit/ log
    package-state/       each package server's own state
    run/                 executor bridge socket
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from provisioning.errors import ProvisioningError
from provisioning.identity import NodeKeys, new_group_key, read_secret, write_secret
from provisioning.registry import Registry
from provisioning.tls import HubTls, ensure_ca, ensure_hub_tls
from storage.private import private_dir, write_private

HOME_VERSION = 1
DEFAULT_MQTT_PORT = 18883
DEFAULT_GRPC_PORT = 18884


def home_id_of(home_sign_pk: bytes) -> str:
    """A home's id: 16 hex characters derived from its signing key."""
    return hashlib.sha256(b"yimi.home.v1\x00" + home_sign_pk).hexdigest()[:16]


@dataclass
class Home:
    """A loaded home folder."""

    path: Path
    home_id: str
    home_keys: NodeKeys
    hub_keys: NodeKeys
    group_key: bytes
    broker_password: str
    config: dict[str, Any]

    @property
    def fingerprint(self) -> str:
        return self.hub_keys.fingerprint

    @property
    def mqtt_port(self) -> int:
        return int(self.config.get("mqtt_port", DEFAULT_MQTT_PORT))

    @property
    def grpc_port(self) -> int:
        return int(self.config.get("grpc_port", DEFAULT_GRPC_PORT))

    @property
    def hub_host(self) -> str:
        return str(self.config.get("hub_host", ""))

    def tls(self, extra_names: Iterable[str] = ()) -> HubTls:
        """The home CA and the hub's leaf certificates (MQTT, gRPC, web), made or renewed
        as needed, naming ``extra_names`` (advertised addresses) too — what the hub's
        listeners serve (:func:`provisioning.tls.ensure_hub_tls`)."""
        return ensure_hub_tls(
            self.path, self.home_id, hub_host=self.hub_host, extra_names=extra_names
        )

    def registry(self) -> Registry:
        return Registry(self.path / "registry.db")

    @classmethod
    def init(
        cls,
        path: Path,
        *,
        force: bool = False,
        mqtt_port: int = DEFAULT_MQTT_PORT,
        grpc_port: int = DEFAULT_GRPC_PORT,
        hub_host: str = "",
    ) -> Home:
        if (path / "home.yaml").exists() or (path / "keys").exists():
            if not force:
                raise ProvisioningError("home.exists", path=path)
            # gateway/ (ledger, cards, first-send memory, audit signed by the old hub key),
            # package-state/ and run/ belong to the old identity; packages.yaml is kept
            old = ("keys", "tls", "registry.db", "hub.db", "broker", "home.yaml", "gateway", "run")
            for child in (*old, "package-state"):
                target = path / child
                if target.is_dir():
                    shutil.rmtree(target)
                else:
                    target.unlink(missing_ok=True)
            for stale in path.glob("*.db-*"):
                stale.unlink()
        private_dir(path)
        home_keys, hub_keys = NodeKeys.generate(), NodeKeys.generate()
        keys = path / "keys"
        home_keys.save(keys / "home.key")
        hub_keys.save(keys / "hub.key")
        write_secret(keys / "group.key", new_group_key().hex().encode())
        from provisioning.credentials import new_password

        write_secret(keys / "broker.secret", new_password().encode())
        keys.chmod(0o700)
        ensure_ca(path, home_id_of(home_keys.sign_pk))
        config = {
            "version": HOME_VERSION,
            "home_id": home_id_of(home_keys.sign_pk),
            "home_sign_pk": home_keys.sign_pk.hex(),
            "hub_fingerprint": hub_keys.fingerprint,
            "hub_sign_pk": hub_keys.sign_pk.hex(),
            "hub_box_pk": hub_keys.box_pk.hex(),
            "mqtt_port": mqtt_port,
            "grpc_port": grpc_port,
            "hub_host": hub_host,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        write_private(path / "home.yaml", yaml.safe_dump(config, sort_keys=False))
        Registry(path / "registry.db").close()
        return cls.load(path)

    @classmethod
    def load(cls, path: Path) -> Home:
        cfg_file = path / "home.yaml"
        if not cfg_file.exists():
            raise ProvisioningError("home.missing", path=path)
        try:
            config = yaml.safe_load(cfg_file.read_text())
            if not isinstance(config, dict):
                raise ValueError("home.yaml is not a mapping")
            keys = path / "keys"
            home_keys = NodeKeys.load(keys / "home.key")
            hub_keys = NodeKeys.load(keys / "hub.key")
            group_key = bytes.fromhex(read_secret(keys / "group.key").decode())
            broker_password = read_secret(keys / "broker.secret").decode()
        except (ValueError, yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ProvisioningError("home.corrupt", path=path, reason=exc) from None
        home_id = home_id_of(home_keys.sign_pk)
        if (
            config.get("home_id") != home_id
            or config.get("hub_fingerprint") != hub_keys.fingerprint
        ):
            raise ProvisioningError("home.corrupt", path=path, reason="keys do not match home.yaml")
        return cls(path, home_id, home_keys, hub_keys, group_key, broker_password, config)
