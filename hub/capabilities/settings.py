"""``HOME/packages.yaml``: which capability packages the hub runs, and their settings.

Every built-in package (``packages/*``) runs unless the file disables it; the file adds
packages and configures any of them::

    messaging:                       # a built-in: configured
      config: {SMTP_HOST: mail.example.org, SMTP_PORT: "587"}   # → YIMI_SMTP_HOST ...
    mac:
      enabled: false                 # a built-in switched off: only ever explicitly
    time:                            # an added package (yimi package add): its folder
      path: packages/time            # relative to HOME, or absolute

An entry holds only ``path``, ``config`` and ``enabled``; anything else (a typo such as
``enable: false``) is refused naming it, so nothing is switched off or on by accident. A
package that is not built in needs its ``path``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hub.capabilities.errors import CapabilityError
from hub.capabilities.manifest import Manifest, load
from storage.private import write_private

log = logging.getLogger(__name__)

BUILTIN_PACKAGES = Path(__file__).resolve().parent.parent.parent / "packages"
SETTINGS_FILE = "packages.yaml"
ENTRY_FIELDS = frozenset({"path", "config", "enabled"})


@dataclass(frozen=True)
class PackageSetting:
    """One package as ``packages.yaml`` (and the built-in set) make it."""

    name: str
    root: Path
    builtin: bool
    enabled: bool = True
    config: dict[str, str] = field(default_factory=dict)
    path: str = ""
    """the entry's ``path`` as written (empty: the built-in folder)"""

    def as_dict(self) -> dict[str, Any]:
        """The entry's settings as a mapping (``path``, ``config``) — what the daemon reads."""
        out: dict[str, Any] = {"config": dict(self.config)}
        if self.path:
            out["path"] = self.path
        return out


def builtin_packages() -> list[Path]:
    return sorted(p.parent for p in BUILTIN_PACKAGES.glob("*/plugin.json"))


def _refuse(path: Path, reason: str) -> CapabilityError:
    return CapabilityError("packages.invalid", path=path, reason=reason)


def _entry(file: Path, home: Path, name: str, raw: Any, builtin: bool) -> PackageSetting:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise _refuse(file, f"{name}: not a mapping")
    unknown = sorted(str(k) for k in raw if k not in ENTRY_FIELDS)
    if unknown:
        raise _refuse(
            file, f"{name}.{unknown[0]}: unknown field (fields: {', '.join(sorted(ENTRY_FIELDS))})"
        )
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        raise _refuse(file, f"{name}.enabled: {enabled!r} is not true or false")
    config = raw.get("config") or {}
    if not isinstance(config, dict):
        raise _refuse(file, f"{name}.config: not a mapping")
    path = raw.get("path") or ""
    if not isinstance(path, str):
        raise _refuse(file, f"{name}.path: not a folder name")
    if path:
        root = Path(path).expanduser()
        root = root if root.is_absolute() else home / root
    elif builtin:
        root = BUILTIN_PACKAGES / name
    else:
        raise _refuse(file, f"{name}: not a built-in package: give its path")
    return PackageSetting(
        name=name,
        root=root,
        builtin=builtin,
        enabled=enabled,
        config={str(k): str(v) for k, v in config.items()},
        path=path,
    )


def read_settings(home: Path) -> dict[str, PackageSetting]:
    """Every package: the built-ins, then what ``packages.yaml`` adds; disabled ones too."""
    builtins = {p.name for p in builtin_packages()}
    out = {n: PackageSetting(n, BUILTIN_PACKAGES / n, builtin=True) for n in sorted(builtins)}
    file = Path(home) / SETTINGS_FILE
    if not file.exists():
        return out
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise _refuse(file, f"unreadable: {exc}") from None
    if not isinstance(data, dict):
        raise _refuse(file, "not a mapping of package names")
    for name, raw in data.items():
        out[str(name)] = _entry(file, Path(home), str(name), raw, str(name) in builtins)
    return out


def package_settings(home: Path) -> dict[str, dict[str, Any]]:
    """The enabled packages' settings (``path``, ``config``), by name."""
    return {n: s.as_dict() for n, s in read_settings(home).items() if s.enabled}


def _written(file: Path) -> dict[str, Any]:
    if not file.exists():
        return {}
    loaded = yaml.safe_load(file.read_text()) or {}
    if not isinstance(loaded, dict):
        raise _refuse(file, "not a mapping of package names")
    return loaded


def ensure_new(home: Path, name: str) -> None:
    """Refuse (``package.exists``) a name ``packages.yaml`` or the built-ins already use."""
    file = Path(home) / SETTINGS_FILE
    if name in _written(file) or (BUILTIN_PACKAGES / name / "plugin.json").exists():
        raise CapabilityError("package.exists", name=name, path=file)


def add_package(home: Path, name: str, entry: dict[str, Any]) -> Path:
    """Write ``entry`` for ``name`` into ``packages.yaml`` (other entries kept); returns the
    file. Refuses a name already configured."""
    file = Path(home) / SETTINGS_FILE
    ensure_new(home, name)
    data = _written(file)
    data[name] = entry
    old = file.read_text() if file.exists() else ""
    # appended, so the owner's comments and layout stay; a flow-style file (JSON) is rewritten
    added = yaml.safe_dump({name: entry}, sort_keys=False, allow_unicode=True)
    text = (old.rstrip("\n") + "\n" if old.strip() else "") + added
    try:
        appended_ok = yaml.safe_load(text) == data
    except yaml.YAMLError:
        appended_ok = False
    if not appended_ok:
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    write_private(file, text)
    return file


def only(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` (a ``packages.yaml`` mapping) with ``enabled: false`` added for every
    built-in it does not name: a hub that runs exactly these packages."""
    out = dict(settings)
    for root in builtin_packages():
        out.setdefault(root.name, {"enabled": False})
    return out


def load_enabled(
    home: Path, failed: dict[str, str] | None = None
) -> tuple[dict[str, Manifest], dict[str, dict[str, Any]]]:
    """(manifests, settings) of every enabled package — what the hub's gateway runs. A
    package whose manifest does not load is left out and logged (and put in ``failed``,
    name → why, if given): one broken package must not stop the hub."""
    catalog: dict[str, Manifest] = {}
    every = read_settings(home)
    for name, s in every.items():
        if not s.enabled:
            log.info("package %s disabled in %s", name, SETTINGS_FILE)
            continue
        try:
            m = load(s.root)
        except Exception as exc:
            log.error("package %s not loaded: %s", name, exc)
            if failed is not None:
                failed[name] = f"not loaded: {exc}"
            continue
        catalog[m.name] = m
    return catalog, {n: s.as_dict() for n, s in every.items() if s.enabled}
