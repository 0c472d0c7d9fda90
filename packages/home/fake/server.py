"""home fake: the same tools and receipts, over an in-memory home (no MQTT, nothing moves).

Devices: ``light.kitchen`` (off), ``switch.kettle`` (off), ``sensor.living_temperature``
(21.5 °C), ``lock.front_door`` (locked).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import READ_ONLY, SWITCHABLE, Entity, listing, observation, receipt

ENTITIES = {
    e.entity_id: e
    for e in (
        Entity("light", "kitchen", "Kitchen light", command_topic="fake", state="OFF"),
        Entity("switch", "kettle", "Kettle", command_topic="fake", state="OFF"),
        Entity("sensor", "living_temperature", "Living room temperature", unit="°C", state="21.5"),
        Entity("lock", "front_door", "Front door", state="LOCKED"),
    )
}
mcp = MCPServer("home-fake")


@mcp.tool()
def list_devices() -> dict[str, Any]:
    """Every discovered device with its state (sensors with their values and units)."""
    return listing(list(ENTITIES.values()))


@mcp.tool()
def get_state(entity: str) -> dict[str, Any]:
    """The state of one device (e.g. light.kitchen, sensor.living_temperature, lock.front)."""
    e = ENTITIES.get(entity)
    if e is None:
        return receipt("failed", error=("NOT_FOUND", f"no device {entity}"))
    return observation(e)


@mcp.tool()
def set_state(entity: str, state: str) -> dict[str, Any]:
    """Switch a light, switch or fan "on" or "off". Locks are read-only."""
    e = ENTITIES.get(entity)
    if e is None:
        return receipt("failed", error=("NOT_FOUND", f"no device {entity}"))
    if e.component in READ_ONLY or e.component not in SWITCHABLE:
        return receipt("failed", error=("READ_ONLY", f"{entity} is read-only"))
    if state not in ("on", "off"):
        return receipt("failed", error=("BAD_STATE", "state must be on or off"))
    e.state = e.payload_on if state == "on" else e.payload_off
    return receipt(
        "succeeded",
        effects=[
            {
                "kind": "device.set",
                "state": "verified",
                "target": e.entity_id,
                "fields": {"name": e.name, "state": state},
            }
        ],
    )


if __name__ == "__main__":
    mcp.run("stdio")
