"""``HOME/hub-status.json``: what a running hub says about itself, for ``yimi hub status``.

The daemon writes it when it is up (the moment of its "hub … up" line and of systemd's
``READY=1``) and again whenever what it says changes (a package server that failed or came
back; checked with the stats flush), and removes it on its way out. It holds what only the
running process knows: its ports, whether it is serving, and its packages — loaded (the
manifests of the enabled packages that loaded), running (a live server process) and failed
(a manifest that did not load, a server that could not start or died) with the reason.

:func:`read_status` never raises: a missing, partial or foreign file reads as ``None``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from storage.private import write_private

STATUS_FILE = "hub-status.json"


@dataclass(frozen=True)
class HubStatus:
    pid: int
    ready: bool
    bind: str
    mqtt_port: int
    grpc_port: int
    web_port: int | None = None
    web_https: bool = False
    plaintext: bool = False
    wyoming_port: int | None = None
    packages_loaded: tuple[str, ...] = ()
    packages_running: tuple[str, ...] = ()
    packages_failed: dict[str, str] = field(default_factory=dict)
    """package → why (its manifest did not load, its server could not start or died)"""
    since_ms: int = 0
    """when the hub got up"""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, ensure_ascii=False)


def status_path(home: Path) -> Path:
    return home / STATUS_FILE


def write_status(home: Path, status: HubStatus) -> None:
    write_private(status_path(home), status.to_json())


def remove_status(home: Path) -> None:
    status_path(home).unlink(missing_ok=True)


def read_status(home: Path) -> HubStatus | None:
    """The status the hub of ``home`` last wrote, or ``None`` (none, or not readable)."""
    try:
        return parse_status(status_path(home).read_bytes())
    except OSError:
        return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _names(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(value)


def parse_status(data: bytes) -> HubStatus | None:
    """A :class:`HubStatus` from the file's bytes; ``None`` for anything else (never raises)."""
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(raw, dict):
        return None
    pid, mqtt, grpc = _int(raw.get("pid")), _int(raw.get("mqtt_port")), _int(raw.get("grpc_port"))
    loaded, running = (
        _names(raw.get("packages_loaded", [])),
        _names(raw.get("packages_running", [])),
    )
    failed = raw.get("packages_failed", {})
    bind, ready = raw.get("bind"), raw.get("ready")
    web, wyoming = raw.get("web_port"), raw.get("wyoming_port")
    if (
        pid is None
        or mqtt is None
        or grpc is None
        or loaded is None
        or running is None
        or not isinstance(bind, str)
        or not isinstance(ready, bool)
        or not isinstance(failed, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in failed.items())
        or (web is not None and _int(web) is None)
        or (wyoming is not None and _int(wyoming) is None)
    ):
        return None
    return HubStatus(
        pid=pid,
        ready=ready,
        bind=bind,
        mqtt_port=mqtt,
        grpc_port=grpc,
        web_port=web,
        web_https=raw.get("web_https") is True,
        plaintext=raw.get("plaintext") is True,
        wyoming_port=wyoming,
        packages_loaded=loaded,
        packages_running=running,
        packages_failed=dict(failed),
        since_ms=_int(raw.get("since_ms")) or 0,
    )
