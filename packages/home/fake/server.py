"""home fake: the same tools and receipts, over an in-memory home (no MQTT, nothing moves).

Devices (the same as ``worlds.fakes.DEVICES``): ``light.kitchen`` (off, Kitchen),
``switch.kettle`` (off, Kitchen), ``sensor.living_temperature`` (21.5 °C, Living room),
``lock.front_door`` (locked, Hallway), ``light.living_room_lamp`` (dimmable, off at 60 %,
Living room), ``cover.bedroom_blinds`` (closed, position 0, Bedroom),
``number.living_room_speaker_volume`` (the living-room speaker's volume, 30 %). A command
is obeyed at once, as the device would: the state read back is the state asked for.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hub.capabilities.package_server import MCPServer

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout: packages.home
from packages.home.common import (
    Entity,
    Wanted,
    entity_from_config,
    listing,
    observation,
    receipt,
    set_receipt,
)
from packages.home.common import wanted as wanted_of


def _entity(component: str, object_id: str, cfg: dict[str, Any], **readings: str) -> Entity:
    e = entity_from_config(component, object_id, {"command_topic": "fake", **cfg}, {})
    for role, payload in readings.items():
        e.report(role, payload)
    return e


def _area(name: str) -> dict[str, Any]:
    return {"device": {"suggested_area": name}}


ENTITIES = {
    e.entity_id: e
    for e in (
        _entity("light", "kitchen", {"name": "Kitchen light", **_area("Kitchen")}, state="OFF"),
        _entity("switch", "kettle", {"name": "Kettle", **_area("Kitchen")}, state="OFF"),
        _entity(
            "sensor",
            "living_temperature",
            {
                "name": "Living room temperature",
                "unit_of_measurement": "°C",
                "command_topic": "",
                **_area("Living room"),
            },
            state="21.5",
        ),
        _entity(
            "lock",
            "front_door",
            {"name": "Front door", "command_topic": "", **_area("Hallway")},
            state="LOCKED",
        ),
        _entity(
            "light",
            "living_room_lamp",
            {
                "name": "Living room lamp",
                "brightness_command_topic": "fake",
                "brightness_state_topic": "fake/brightness",
                "brightness_scale": 255,
                **_area("Living room"),
            },
            state="OFF",
            brightness="153",
        ),
        _entity(
            "cover",
            "bedroom_blinds",
            {
                "name": "Bedroom blinds",
                "set_position_topic": "fake",
                "position_topic": "fake/position",
                **_area("Bedroom"),
            },
            state="closed",
            position="0",
        ),
        _entity(
            "number",
            "living_room_speaker_volume",
            {
                "name": "Living room speaker",
                "icon": "mdi:volume-high",
                "min": 0,
                "max": 100,
                "unit_of_measurement": "%",
                **_area("Living room"),
            },
            state="30",
        ),
    )
}
mcp = MCPServer("home-fake")


def _obey(e: Entity, w: Wanted) -> None:
    if e.component == "cover":
        if w.state is not None:
            e.report("state", w.state)
            e.report("position", "100" if w.state == "open" else "0")
        if w.position is not None:
            e.report("position", str(w.position))
            e.report("state", "closed" if w.position == 0 else "open")
        return
    if w.state is not None:
        e.report("state", e.payload_on if w.state == "on" else e.payload_off)
    if w.brightness is not None:
        e.report("brightness", str(max(1, round(w.brightness * e.brightness_scale / 100))))
    if w.volume is not None:
        e.report("state", str(w.volume))


@mcp.tool()
def list_devices() -> dict[str, Any]:
    """Every discovered device: one device.state effect each with name, domain, area, state
    ("unknown" until it reports one, "unavailable" when offline), brightness/position/volume
    (0-100 %) and a thermostat's temperatures where the device has them, and features;
    sensors and thermostats also as values with their units."""
    return listing(list(ENTITIES.values()))


@mcp.tool()
def get_state(entity: str) -> dict[str, Any]:
    """The state of one device (e.g. light.kitchen, sensor.living_temperature, lock.front),
    with its brightness, position or volume (0-100 %) where it has one."""
    e = ENTITIES.get(entity)
    if e is None:
        return receipt("failed", error=("NOT_FOUND", f"no device {entity}"))
    return observation(e)


@mcp.tool()
def set_state(
    entity: str,
    state: str = "",
    brightness: int | None = None,
    position: int | None = None,
    volume: int | None = None,
    temperature: float | None = None,
) -> dict[str, Any]:
    """Switch a light, switch or fan "on"/"off"; set a dimmable light's brightness (0-100 %,
    0 is off); open/close a cover ("open"/"closed") or set its position (0 closed .. 100
    open); set a speaker's volume (0-100 %); set a thermostat's temperature (its setpoint,
    in its unit). Locks and sensors are read-only."""
    e = ENTITIES.get(entity)
    if e is None:
        return receipt("failed", error=("NOT_FOUND", f"no device {entity}"))
    w = wanted_of(e, state, brightness, position, volume, temperature)
    if isinstance(w, tuple):
        return receipt("failed", error=w)
    _obey(e, w)
    return set_receipt(e, w, w.met_by(e), 0)


if __name__ == "__main__":
    mcp.run("stdio")
