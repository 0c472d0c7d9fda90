"""User-facing errors: one root class, stable keys, and every text kept here.

Each package derives its own root from :class:`YimiError` (``ProvisioningError``,
``SyncError``, ``HubError``, ``EdgeError``). An error carries a stable ``key`` and the
structured ``fields`` its text is formatted from; the CLI prints ``str(error)`` as one line.
"""

from __future__ import annotations

from typing import Any

MESSAGES: dict[str, str] = {
    # provisioning
    "home.exists": "a home already exists in {path}; use --force to overwrite it",
    "home.missing": "no home in {path}: run 'yimi home init --home {path}' first",
    "home.corrupt": "the home in {path} is unreadable: {reason}",
    "key.permissions": "key file {path} has mode {mode:o}; it must be 0600",
    "key.unreadable": "key file {path} is unreadable: {reason}",
    "profile.unknown": "unknown profile {name!r}; known profiles: {known}",
    "profile.invalid": "profile {file}: field {field}: {reason}",
    "device.exists": "a device named {name!r} already exists in this home",
    "device.unknown": "no device named {name!r} in this home",
    "device.name_invalid": "device name {name!r} is invalid: {reason}",
    "bundle.exists": "{path} already exists and is not empty; choose another --out",
    "bundle.missing": "no device bundle in {path}",
    "bundle.corrupt": "the bundle in {path} is unreadable: {reason}",
    "certificate.invalid": "device certificate rejected: {reason}",
    "pair.code_invalid": "pairing refused: the code is wrong, expired or already used",
    "pair.rate_limited": "pairing refused: too many attempts; try again in {seconds} s",
    "pair.hub_unproven": "pairing refused: the hub could not prove it knows the code",
    "pair.refused": "pairing refused by the hub: {reason}",
    "pair.unreachable": "pairing failed: no hub answered at {target}: {reason}",
    "pair.code_format": "pairing code {code!r} is malformed; it looks like ABCD-EFGH-JKMN-PQRS",
    # sync / mesh
    "hub.not_found": "no hub with the pinned fingerprint {fingerprint} was found{where}",
    "hub.fingerprint_mismatch": (
        "refusing hub at {target}: its key fingerprint {got} is not the pinned {pinned}"
    ),
    "hub.unreachable": "hub at {target} is unreachable: {reason}",
    "outbox.full": "the outbox in {path} is full ({count} items); not queued",
    # hub
    "broker.missing": "mosquitto is not installed: run 'sudo apt-get install -y mosquitto'",
    "broker.failed": "mosquitto failed to start on port {port}: {reason}",
    "port.in_use": "port {port} on {host} is already in use",
    # edge
    "say.timeout": "no reply from the hub within {seconds} s; the utterance stays queued",
    "say.queued": (
        "hub unreachable ({reason}): queued as {id} ({count} waiting); "
        "it will be sent when the hub is back"
    ),
}


class YimiError(Exception):
    """Root of every user-facing error; ``key`` is stable, ``fields`` are structured."""

    def __init__(self, key: str, **fields: Any) -> None:
        self.key = key
        self.fields = fields
        super().__init__(render(key, fields))


def render(key: str, fields: dict[str, Any]) -> str:
    """The one-line text of ``key`` with ``fields``; unknown keys still render."""
    template = MESSAGES.get(key)
    if template is None:
        return f"{key}: {fields}"
    try:
        text = template.format(**fields)
    except (KeyError, IndexError, ValueError):
        return f"{template} ({fields})"
    # a field may span lines (a YAML parser's message): the text stays one line
    return " ".join(line.strip() for line in text.splitlines() if line.strip())
