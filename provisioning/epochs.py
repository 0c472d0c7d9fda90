"""Mesh group key epochs: the keys that seal broadcasts, rotated so a revoked bundle goes deaf.

Epoch 0 is the group key every bundle was written with (``keys/group.key`` on the hub,
``secrets.json`` in a bundle). A revocation, ``yimi home rotate-key`` and a periodic rotation
(``mesh.group_key_days`` in ``home.yaml``, default 30) make epoch n+1: a fresh random
SecretBox key that the hub boxes to every remaining device (kind ``GROUP_KEY``). Broadcasts
name their epoch and are sealed with the current one; a node opens the current epoch and the
one before it (a grace while the new key reaches everyone) and drops older keys.

:class:`GroupKeys` is that ring, persisted (0600) at ``HOME/keys/epochs.json`` on the hub and
``BUNDLE/state/group-keys.json`` on a device. It is the ``group_keys`` that
:class:`sync.envelope.Sealer` and :class:`sync.envelope.Opener` take.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from protos.clock import now_ms
from provisioning.errors import ProvisioningError
from provisioning.identity import new_group_key, read_secret, write_secret

log = logging.getLogger(__name__)

KEPT_EPOCHS = 2
"""epochs a node holds: the current one and the previous one (a grace)"""
DEFAULT_ROTATION_DAYS = 30.0
"""days after which the hub makes a new epoch by itself (``mesh.group_key_days``)"""
HOME_FILE = "keys/epochs.json"
BUNDLE_FILE = "state/group-keys.json"
KEY_BYTES = 32


@dataclass(frozen=True)
class Epoch:
    number: int
    key: bytes
    made_ms: int


@dataclass
class GroupKeys:
    """The group key epochs one node holds (newest last); saved to ``path`` when it changes."""

    path: Path | None
    epochs: list[Epoch] = field(default_factory=list)
    _stamp: tuple[int, int, int] | None = field(default=None, repr=False)
    """(inode, size, mtime) of the file as last read or written"""

    @classmethod
    def load(cls, path: Path, *, legacy: bytes, legacy_epoch: int = 0) -> GroupKeys:
        """The ring saved at ``path``, or (no file yet) only ``legacy`` as ``legacy_epoch``
        (the bundle's or the home's key, made at an unknown time: ``made_ms`` 0)."""
        ring = cls(path, [Epoch(legacy_epoch, legacy, 0)])
        if not path.exists():
            return ring
        ring._stamp = _stamp(path)
        try:
            data = json.loads(read_secret(path))
            saved = [
                Epoch(int(e["epoch"]), bytes.fromhex(e["key"]), int(e["made_ms"]))
                for e in data["epochs"]
            ]
        except (ValueError, KeyError, TypeError) as exc:
            raise ProvisioningError("key.unreadable", path=path, reason=exc) from None
        for epoch in saved:
            ring._take(epoch)
        return ring

    @property
    def current(self) -> Epoch:
        return self.epochs[-1]

    def key(self, epoch: int) -> bytes | None:
        """The key of ``epoch`` if this node holds it."""
        for e in self.epochs:
            if e.number == epoch:
                return e.key
        return None

    def add(self, epoch: int, key: bytes, made_ms: int) -> bool:
        """Take an epoch received from the hub; ``True`` if it was new (then saved)."""
        if len(key) != KEY_BYTES or epoch < 0 or self.key(epoch) is not None:
            return False
        if epoch < self.epochs[0].number and len(self.epochs) >= KEPT_EPOCHS:
            return False  # older than everything kept
        self._take(Epoch(epoch, key, made_ms))
        self.save()
        return True

    def rotate(self) -> Epoch:
        """Make (and save) epoch current+1 with a fresh random key."""
        made = Epoch(self.current.number + 1, new_group_key(), now_ms())
        self._take(made)
        self.save()
        log.info("mesh group key epoch %d made", made.number)
        return made

    def due(self, now: int, rotation_days: float) -> bool:
        """The current epoch is older than ``rotation_days`` (0 or less: never)."""
        if rotation_days <= 0:
            return False
        return now - self.current.made_ms >= rotation_days * 86_400_000

    def reload(self) -> bool:
        """Re-read the file (another process rotated); ``True`` if the current epoch moved."""
        if self.path is None or not self.path.exists() or _stamp(self.path) == self._stamp:
            return False
        before = self.current.number
        fresh = GroupKeys.load(self.path, legacy=self.current.key, legacy_epoch=before)
        for epoch in fresh.epochs:
            if self.key(epoch.number) is None:
                self._take(epoch)
        self._stamp = fresh._stamp
        return self.current.number != before

    def save(self) -> None:
        if self.path is None:
            return
        data = {
            "epochs": [
                {"epoch": e.number, "key": e.key.hex(), "made_ms": e.made_ms} for e in self.epochs
            ]
        }
        write_secret(self.path, json.dumps(data).encode())
        self._stamp = _stamp(self.path)

    def _take(self, epoch: Epoch) -> None:
        kept = {e.number: e for e in self.epochs}
        kept[epoch.number] = epoch
        self.epochs = [kept[n] for n in sorted(kept)][-KEPT_EPOCHS:]


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def home_keys(home_path: Path, legacy: bytes) -> GroupKeys:
    """The hub's ring: ``HOME/keys/epochs.json``, epoch 0 being ``keys/group.key``."""
    path = home_path / HOME_FILE
    ring = GroupKeys.load(path, legacy=legacy)
    if ring.current.number == 0 and ring.current.made_ms == 0:
        try:  # epoch 0 was made with the home: its key file's age
            ring.epochs[-1] = Epoch(
                0, legacy, int((home_path / "keys" / "group.key").stat().st_mtime * 1000)
            )
        except OSError:
            pass
    return ring


def bundle_keys(bundle_path: Path, legacy: bytes, legacy_epoch: int) -> GroupKeys:
    """A device's ring: ``BUNDLE/state/group-keys.json``, else the bundle's own key."""
    (bundle_path / "state").mkdir(mode=0o700, exist_ok=True)
    return GroupKeys.load(bundle_path / BUNDLE_FILE, legacy=legacy, legacy_epoch=legacy_epoch)


def rotation_days(config: dict[str, object]) -> float:
    """``mesh.group_key_days`` of ``home.yaml`` (days; 0 turns periodic rotation off)."""
    mesh = config.get("mesh")
    value = mesh.get("group_key_days", DEFAULT_ROTATION_DAYS) if isinstance(mesh, dict) else None
    try:
        return float(value) if value is not None else DEFAULT_ROTATION_DAYS
    except (TypeError, ValueError):
        return DEFAULT_ROTATION_DAYS
