"""MQTT topic names. Device ids and home ids are hex, so they never hold ``/``, ``+`` or ``#``.

``yimi/<home>/dev/<device>/up``        device → hub envelopes
``yimi/<home>/dev/<device>/in``        hub → device envelopes
``yimi/<home>/dev/<device>/presence``  presence (last will: offline; not retained)
``yimi/<home>/dev/<device>/sync``      the device's live CRDT updates (group-sealed)
``yimi/<home>/mesh``                   hub → every device (sealed with the group key):
                                       revocations, live CRDT updates

The broker ACL lets a device publish and subscribe only under ``yimi/<home>/dev/<own id>/``
and read ``yimi/<home>/mesh``; the hub's account reads and writes ``yimi/<home>/#``.
"""

from __future__ import annotations

ROOT = "yimi"


def device_root(home_id: str, device_id: str) -> str:
    return f"{ROOT}/{home_id}/dev/{device_id}"


def uplink(home_id: str, device_id: str) -> str:
    return f"{device_root(home_id, device_id)}/up"


def inbox(home_id: str, device_id: str) -> str:
    return f"{device_root(home_id, device_id)}/in"


def presence(home_id: str, device_id: str) -> str:
    return f"{device_root(home_id, device_id)}/presence"


def mesh(home_id: str) -> str:
    return f"{ROOT}/{home_id}/mesh"


def all_uplinks(home_id: str) -> str:
    return f"{ROOT}/{home_id}/dev/+/up"


def all_presence(home_id: str) -> str:
    return f"{ROOT}/{home_id}/dev/+/presence"


def sync(home_id: str, device_id: str) -> str:
    return f"{device_root(home_id, device_id)}/sync"


def all_sync(home_id: str) -> str:
    return f"{ROOT}/{home_id}/dev/+/sync"


def device_of(topic: str) -> str | None:
    """The device id in ``yimi/<home>/dev/<device>/...``, or ``None``."""
    parts = topic.split("/")
    if len(parts) >= 5 and parts[0] == ROOT and parts[2] == "dev":
        return parts[3]
    return None
