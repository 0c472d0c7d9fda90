"""Shared by the home server and its fake: entities, receipts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hub.capabilities.package_sdk import receipt

SWITCHABLE = ("light", "switch", "fan")
READ_ONLY = ("lock", "sensor", "binary_sensor")


@dataclass
class Entity:
    component: str
    object_id: str
    name: str
    state_topic: str = ""
    command_topic: str = ""
    unit: str | None = None
    payload_on: str = "ON"
    payload_off: str = "OFF"
    state: str | None = None
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def entity_id(self) -> str:
        return f"{self.component}.{self.object_id}"

    def readable_state(self) -> str | None:
        if self.state is None:
            return None
        if self.component in SWITCHABLE or self.component == "binary_sensor":
            return {self.payload_on: "on", self.payload_off: "off"}.get(self.state, self.state)
        if self.component == "lock":
            return self.state.lower()
        return self.state


def observation(e: Entity) -> dict[str, Any]:
    """A receipt for reading one entity: a value for sensors, a state for the rest."""
    state = e.readable_state()
    if state is None:
        return receipt("succeeded", unknowns=[f"{e.entity_id} has not reported a state yet"])
    if e.component == "sensor":
        try:
            value: float | str = float(state)
        except ValueError:
            value = state
        return receipt(
            "succeeded",
            values=[
                {
                    "name": e.name,
                    "value": value,
                    "unit": e.unit,
                    "source": e.state_topic or e.entity_id,
                }
            ],
        )
    return receipt(
        "succeeded",
        effects=[
            {
                "kind": "device.state",
                "state": "verified",
                "target": e.entity_id,
                "fields": {"name": e.name, "state": state},
            }
        ],
    )


def listing(entities: list[Entity]) -> dict[str, Any]:
    effects, values = [], []
    for e in sorted(entities, key=lambda x: x.entity_id):
        r = observation(e)
        effects += r["effects"]
        values += r["values"]
    return receipt(
        "succeeded",
        effects=effects,
        values=[
            *values,
            {"name": "devices", "value": len(entities), "unit": "items", "source": "discovery"},
        ],
    )
