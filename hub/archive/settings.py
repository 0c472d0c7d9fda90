"""Archive settings from ``HOME/archive.yaml`` (all optional) and opening the home's archive.

::

    cold_target: /mnt/nas/yimi-packs        # a folder, or http(s)://… for WebDAV
    webdav_user: yimi                       # password in HOME/keys/archive-webdav.secret (0600)
    hot_retention_days: 2
    pack_after_s: 600
    pack_target_mib: 8
    reserve_bytes: 4294967296
    reserve_inodes: 500000
    emergency_reclaim: true
    upload_bytes_per_s: 0                   # cold-pack upload pace; 0: unpaced
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hub.archive.admission import DEFAULT_RESERVE_BYTES, DEFAULT_RESERVE_INODES, AdmissionPolicy
from hub.archive.archive import DAY_S, DEFAULT_PACK_AFTER_S, Archive
from hub.archive.errors import ArchiveError
from hub.archive.pacing import UploadPacer
from hub.archive.targets import ColdTarget, DirectoryTarget, target_from

SETTINGS_FILE = "archive.yaml"
WEBDAV_SECRET = "keys/archive-webdav.secret"


@dataclass(frozen=True)
class ArchiveSettings:
    cold_target: str | None = None
    webdav_user: str | None = None
    hot_retention_days: float = 2.0
    pack_after_s: float = DEFAULT_PACK_AFTER_S
    pack_target_mib: float = 8.0
    reserve_bytes: int = DEFAULT_RESERVE_BYTES
    reserve_inodes: int = DEFAULT_RESERVE_INODES
    emergency_reclaim: bool = True
    upload_bytes_per_s: float = 0.0

    @classmethod
    def load(cls, home: Path) -> ArchiveSettings:
        path = home / SETTINGS_FILE
        if not path.exists():
            return cls()
        try:
            data = yaml.safe_load(path.read_text()) or {}
            if not isinstance(data, dict):
                raise ValueError("not a mapping")
            unknown = sorted(set(data) - set(_CONVERT))
            if unknown:
                raise ValueError(f"unknown keys {', '.join(map(str, unknown))}")
            values: dict[str, Any] = {k: _CONVERT[k](v) for k, v in data.items() if v is not None}
            return cls(**values)
        except (OSError, ValueError, TypeError, yaml.YAMLError) as exc:
            raise ArchiveError("archive.config", path=path, reason=str(exc)) from exc


def _as_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    raise ValueError(f"{v!r} is not true or false")


def _as_number(kind: type[int] | type[float]) -> Any:
    def convert(v: Any) -> int | float:
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
            raise ValueError(f"{v!r} is not a non-negative number")
        return kind(v)

    return convert


_CONVERT: dict[str, Any] = {
    "cold_target": str,
    "webdav_user": str,
    "hot_retention_days": _as_number(float),
    "pack_after_s": _as_number(float),
    "pack_target_mib": _as_number(float),
    "reserve_bytes": _as_number(int),
    "reserve_inodes": _as_number(int),
    "emergency_reclaim": _as_bool,
    "upload_bytes_per_s": _as_number(float),
}


def home_target(home: Path, settings: ArchiveSettings, override: str | None = None) -> ColdTarget:
    spec = override or settings.cold_target
    if not spec:
        return DirectoryTarget(home / "archive" / "cold")
    password = None
    secret = home / WEBDAV_SECRET
    if settings.webdav_user and secret.exists():
        from provisioning.identity import read_secret

        password = read_secret(secret).decode().strip()
    return target_from(spec, username=settings.webdav_user, password=password)


def open_archive(home: Path, *, target: str | None = None, **overrides: Any) -> Archive:
    """The archive of ``home`` (``HOME/archive``) with its settings; ``overrides`` go to
    :class:`Archive` as keyword arguments (tests pass ``disk=`` and ``now=``)."""
    s = ArchiveSettings.load(home)
    kwargs: dict[str, Any] = {
        "target": home_target(home, s, target),
        "policy": AdmissionPolicy(s.reserve_bytes, s.reserve_inodes),
        "retention_s": s.hot_retention_days * DAY_S,
        "pack_after_s": s.pack_after_s,
        "pack_target_bytes": int(s.pack_target_mib * (1 << 20)),
        "emergency_reclaim": s.emergency_reclaim,
        "pacer": UploadPacer(s.upload_bytes_per_s) if s.upload_bytes_per_s > 0 else None,
    }
    kwargs.update(overrides)
    return Archive(home / "archive", **kwargs)
