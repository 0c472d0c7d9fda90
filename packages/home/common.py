"""Shared by the home server and its fake: entities, what ``set_state`` may ask of each, and
receipts.

Entities follow Home Assistant's MQTT-discovery configs (default schema):

* ``light`` — ``command_topic`` (``payload_on``/``payload_off``), ``state_topic``; dimmable
  when it has ``brightness_command_topic`` (device scale ``brightness_scale``, default 255;
  the level is read on ``brightness_state_topic``). With ``schema: json`` one JSON message
  each way (``{"state": "ON", "brightness": 102}``), dimmable when ``brightness: true`` or
  a ``supported_color_modes`` other than ``onoff``;
* ``switch``, ``fan`` — on/off;
* ``cover`` — ``command_topic`` (``payload_open`` ``OPEN`` / ``payload_close`` ``CLOSE``),
  ``state_topic`` (``state_open`` ``open``, ``state_closed`` ``closed``, ``state_opening``,
  ``state_closing``, ``state_stopped``), ``set_position_topic`` / ``position_topic`` on the
  device's scale ``position_closed`` (0) .. ``position_open`` (100);
* ``number`` — ``command_topic`` / ``state_topic`` between ``min`` (1) and ``max`` (100).
  HA's MQTT discovery has no media player, so a speaker's **volume** is a ``number``
  whose ``icon`` is ``mdi:volume-*`` or whose object id or name says "volume" (音量); it is
  listed with domain ``media_player`` (the domain HA's volume intent names);
* ``lock``, ``sensor``, ``binary_sensor`` — read-only.

Levels the tools take and report (brightness, position, volume) are percentages 0..100,
converted to and from each device's own scale. A device's area is its discovery config's
``device.suggested_area``, or the one configured for it (``YIMI_AREAS``: a JSON object of
entity id → area); none → ``null``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from hub.capabilities.package_sdk import receipt

SWITCHABLE = ("light", "switch", "fan")
READ_ONLY = ("lock", "sensor", "binary_sensor")
SETTABLE = (*SWITCHABLE, "cover", "number")
COVER_STATES = ("open", "closed")
LEVEL_TOLERANCE = 1
"""percentage points a read-back level may differ from the one asked for (scale rounding)"""


def _int(cfg: dict[str, Any], key: str, default: int) -> int:
    try:
        return int(float(cfg.get(key, default)))
    except (TypeError, ValueError):
        return default


def _percent(raw: str | None, low: int, high: int) -> int | None:
    """A device reading on ``low..high`` as 0..100 (``None`` if absent or not a number)."""
    if raw is None or high == low:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return max(0, min(100, round((value - low) * 100 / (high - low))))


def _device_value(percent: int, low: int, high: int) -> int:
    return round(low + percent * (high - low) / 100)


def configured_areas() -> dict[str, str]:
    """``YIMI_AREAS`` (JSON object entity id → area); empty when unset or unusable."""
    try:
        data = json.loads(os.environ.get("YIMI_AREAS") or "{}")
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items() if isinstance(v, str) and v}


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
    """the last payload on ``state_topic``"""
    config: dict[str, Any] = field(default_factory=dict)
    area: str | None = None
    brightness_raw: str | None = None
    """the last payload on ``brightness_state_topic`` (device scale)"""
    position_raw: str | None = None
    """the last payload on ``position_topic`` (device scale)"""

    @property
    def entity_id(self) -> str:
        return f"{self.component}.{self.object_id}"

    # ---------------------------------------------------------------- what it can do
    @property
    def json_schema(self) -> bool:
        """a light on HA's JSON schema: one JSON command and one JSON state"""
        return self.component == "light" and self.config.get("schema") == "json"

    @property
    def dimmable(self) -> bool:
        if self.component != "light":
            return False
        if self.json_schema:
            modes = self.config.get("supported_color_modes")
            dims = isinstance(modes, list) and any(m != "onoff" for m in modes)
            return self.config.get("brightness") is True or dims
        return bool(self.config.get("brightness_command_topic"))

    @property
    def positionable(self) -> bool:
        return self.component == "cover" and bool(self.config.get("set_position_topic"))

    @property
    def is_volume(self) -> bool:
        if self.component != "number":
            return False
        icon = str(self.config.get("icon", ""))
        said = f"{self.object_id} {self.name}".lower()
        return icon.startswith("mdi:volume") or "volume" in said or "音量" in said

    @property
    def domain(self) -> str:
        """the Home Assistant domain the hub's intents name (a volume number: media_player)"""
        return "media_player" if self.is_volume else self.component

    @property
    def features(self) -> list[str]:
        out = []
        if self.component in SWITCHABLE and self.command_topic:
            out.append("on_off")
        if self.component == "cover" and self.command_topic:
            out.append("open_close")
        if self.dimmable:
            out.append("brightness")
        if self.positionable:
            out.append("position")
        if self.is_volume and self.command_topic:
            out.append("volume")
        return out

    @property
    def brightness_scale(self) -> int:
        return max(1, _int(self.config, "brightness_scale", 255))

    @property
    def position_range(self) -> tuple[int, int]:
        return _int(self.config, "position_closed", 0), _int(self.config, "position_open", 100)

    @property
    def number_range(self) -> tuple[int, int]:
        return _int(self.config, "min", 1), _int(self.config, "max", 100)

    @property
    def reading_topics(self) -> dict[str, str]:
        """topic → role (``state``, ``brightness``, ``position``) this entity reports on"""
        out = {}
        if self.state_topic:
            out[self.state_topic] = "state"
        if self.dimmable and self.config.get("brightness_state_topic"):
            out[str(self.config["brightness_state_topic"])] = "brightness"
        if self.component == "cover" and self.config.get("position_topic"):
            out[str(self.config["position_topic"])] = "position"
        return out

    def report(self, role: str, payload: str) -> None:
        if role == "state" and self.json_schema:
            try:
                data = json.loads(payload)
            except ValueError:
                return
            if not isinstance(data, dict):
                return
            if isinstance(data.get("state"), str):
                self.state = data["state"]
            if isinstance(data.get("brightness"), int | float):
                self.brightness_raw = str(data["brightness"])
            return
        if role == "brightness":
            self.brightness_raw = payload
        elif role == "position":
            self.position_raw = payload
        else:
            self.state = payload

    @property
    def reported(self) -> bool:
        """it has reported something, or it has nothing to report on"""
        return self.state is not None or self.position_raw is not None or not self.reading_topics

    # ---------------------------------------------------------------- what it says
    @property
    def brightness(self) -> int | None:
        return _percent(self.brightness_raw, 0, self.brightness_scale) if self.dimmable else None

    @property
    def position(self) -> int | None:
        if self.component != "cover":
            return None
        return _percent(self.position_raw, *self.position_range)

    @property
    def volume(self) -> int | None:
        return _percent(self.state, *self.number_range) if self.is_volume else None

    def readable_state(self) -> str | None:
        if self.component == "cover":
            return self._cover_state()
        if self.state is None:
            return None
        if self.component in SWITCHABLE or self.component == "binary_sensor":
            return {self.payload_on: "on", self.payload_off: "off"}.get(self.state, self.state)
        if self.component == "lock":
            return self.state.lower()
        return self.state

    def _cover_state(self) -> str | None:
        if self.state is not None:
            names = {
                str(self.config.get(f"state_{s}", s)): s
                for s in ("open", "closed", "opening", "closing", "stopped")
            }
            state = names.get(self.state, self.state.lower())
            if state != "stopped":
                return state
        position = self.position
        if position is None:
            return None
        return "closed" if position == 0 else "open"

    def attributes(self) -> dict[str, int]:
        out = {}
        for key in ("brightness", "position", "volume"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out

    def fields(self) -> dict[str, Any]:
        """what an effect says about this entity: name, domain, area, state, attributes"""
        return {
            "name": self.name,
            "domain": self.domain,
            "area": self.area,
            "state": self.readable_state(),
            **self.attributes(),
            "features": self.features,
        }


def entity_from_config(
    component: str, object_id: str, cfg: dict[str, Any], areas: dict[str, str]
) -> Entity:
    """An :class:`Entity` from a discovery config (its readings not yet known)."""
    device = cfg.get("device")
    suggested = device.get("suggested_area") if isinstance(device, dict) else None
    e = Entity(
        component,
        object_id,
        str(cfg.get("name") or object_id),
        str(cfg.get("state_topic", "")),
        str(cfg.get("command_topic", "")),
        cfg.get("unit_of_measurement"),
        str(cfg.get("payload_on", "ON")),
        str(cfg.get("payload_off", "OFF")),
        None,
        cfg,
    )
    e.area = areas.get(e.entity_id) or (str(suggested) if suggested else None)
    return e


# ---------------------------------------------------------------- set_state
@dataclass(frozen=True)
class Wanted:
    """What one ``set_state`` call asks of one entity, checked against what it can do."""

    state: str | None = None
    brightness: int | None = None
    position: int | None = None
    volume: int | None = None
    settles_at: str | None = None
    """the state the device ends in without being commanded one (a cover sent to a
    position: ``open``, or ``closed`` at 0)"""

    def met_by(self, e: Entity) -> bool:
        """the entity's read-back state shows it"""
        expect = self.state or self.settles_at
        if expect is not None and e.readable_state() != expect:
            return False
        for key in ("brightness", "position", "volume"):
            want = getattr(self, key)
            if want is None:
                continue
            have = getattr(e, key)
            if have is None or abs(have - want) > LEVEL_TOLERANCE:
                return False
        return True

    def fields(self, e: Entity) -> dict[str, Any]:
        out: dict[str, Any] = {"name": e.name, "domain": e.domain, "area": e.area}
        if self.state or self.settles_at:
            out["state"] = self.state or self.settles_at
        for key in ("brightness", "position", "volume"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    def describe(self) -> str:
        parts = [self.state] if self.state else []
        parts += [
            f"{k} {getattr(self, k)} %"
            for k in ("brightness", "position", "volume")
            if getattr(self, k) is not None
        ]
        return ", ".join(parts)


def _level(name: str, value: object) -> int | str:
    """``value`` as a 0..100 integer, or what is wrong with it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{name} must be a whole number from 0 to 100, got {value!r}"
    if value != int(value) or not 0 <= value <= 100:
        return f"{name} must be a whole number from 0 to 100, got {value!r}"
    return int(value)


def wanted(
    e: Entity,
    state: str,
    brightness: object = None,
    position: object = None,
    volume: object = None,
) -> Wanted | tuple[str, str]:
    """What the call asks of ``e``, or an error ``(code, message)``: ``READ_ONLY``,
    ``BAD_STATE`` (a state this kind of device does not have), ``BAD_VALUE`` (a level out
    of 0..100, a level this device does not have, or asks that contradict each other)."""
    entity = e.entity_id
    if e.component not in SETTABLE or not (e.command_topic or e.positionable):
        return "READ_ONLY", f"{entity} is read-only"
    levels: dict[str, int] = {}
    for name, value, has in (
        ("brightness", brightness, e.dimmable),
        ("position", position, e.positionable),
        ("volume", volume, e.is_volume),
    ):
        if value is None:
            continue
        if not has:
            what = {"brightness": "dimmable", "position": "a cover that takes a position"}
            kind = what.get(name, "a volume control")
            return "BAD_VALUE", f"{entity} has no {name}: it is not {kind}"
        level = _level(name, value)
        if isinstance(level, str):
            return "BAD_VALUE", f"{entity}: {level}"
        levels[name] = level
    state = (state or "").strip().lower()
    if state:
        if e.component == "cover":
            state = {"close": "closed", "opened": "open"}.get(state, state)
            if state not in COVER_STATES:
                return "BAD_STATE", f"{entity}: state must be open or closed"
            if not e.command_topic:
                return "BAD_STATE", f"{entity} only takes a position"
        elif e.component in SWITCHABLE:
            if state not in ("on", "off"):
                return "BAD_STATE", "state must be on or off"
        else:
            return "BAD_STATE", f"{entity} has no on/off state: give its volume"
    if not state and not levels:
        return "BAD_VALUE", f"{entity}: give a state or a level (brightness, position, volume)"
    b = levels.get("brightness")
    if b is not None:
        if state == "off" and b > 0:
            return "BAD_VALUE", f"{entity}: off with brightness {b} % contradicts itself"
        state = "off" if b == 0 else "on"
        if b == 0:
            b = None  # brightness 0 is "off" (as in Home Assistant)
    p = levels.get("position")
    settles_at = None
    if p is not None:
        settles_at = "closed" if p == 0 else "open"
        if state and state != settles_at:
            return "BAD_VALUE", f"{entity}: {state} with position {p} % contradicts itself"
        state = ""
    return Wanted(state or None, b, p, levels.get("volume"), settles_at)


def commands(e: Entity, w: Wanted) -> list[tuple[str, str]]:
    """The (topic, payload) messages that ask the device for ``w`` (Home Assistant's
    default light schema: the on/off command first, then the brightness)."""
    out: list[tuple[str, str]] = []
    if e.json_schema:
        body: dict[str, Any] = {"state": "ON" if w.state != "off" else "OFF"}
        if w.brightness is not None:
            body["brightness"] = max(1, _device_value(w.brightness, 0, e.brightness_scale))
        return [(e.command_topic, json.dumps(body))]
    if w.state is not None:
        if e.component == "cover":
            key, default = (
                ("payload_open", "OPEN") if w.state == "open" else ("payload_close", "CLOSE")
            )
            out.append((e.command_topic, str(e.config.get(key, default))))
        else:
            out.append((e.command_topic, e.payload_on if w.state == "on" else e.payload_off))
    if w.brightness is not None:
        raw = max(1, _device_value(w.brightness, 0, e.brightness_scale))
        out.append((str(e.config["brightness_command_topic"]), str(raw)))
    if w.position is not None:
        raw = _device_value(w.position, *e.position_range)
        out.append((str(e.config["set_position_topic"]), str(raw)))
    if w.volume is not None:
        raw = _device_value(w.volume, *e.number_range)
        out.append((e.command_topic, str(raw)))
    return out


def set_receipt(e: Entity, w: Wanted, confirmed: bool, timeout: float) -> dict[str, Any]:
    fields = w.fields(e)
    if confirmed:
        fields.update(e.attributes())
        fields["state"] = e.readable_state()
    return receipt(
        "succeeded",
        effects=[
            {
                "kind": "device.set",
                "state": "verified" if confirmed else "not_verified",
                "target": e.entity_id,
                "fields": fields,
            }
        ],
        unknowns=[] if confirmed else [f"{e.name} did not report {w.describe()} in {timeout:g} s"],
    )


# ---------------------------------------------------------------- reading
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
                "fields": e.fields(),
            }
        ],
    )


def listing(entities: list[Entity]) -> dict[str, Any]:
    """Every entity: a ``device.state`` effect each (sensors too: state ``21.5 °C``, with
    ``value`` and ``unit``), sensor values, and the count."""
    effects, values = [], []
    for e in sorted(entities, key=lambda x: x.entity_id):
        r = observation(e)
        effects += r["effects"]
        values += r["values"]
        if e.component == "sensor" and r["values"]:
            effects.append(
                {
                    "kind": "device.state",
                    "state": "verified",
                    "target": e.entity_id,
                    "fields": {
                        **e.fields(),
                        "state": f"{e.readable_state()} {e.unit}" if e.unit else e.readable_state(),
                        "value": r["values"][0]["value"],
                        "unit": e.unit,
                    },
                }
            )
    return receipt(
        "succeeded",
        effects=effects,
        values=[
            *values,
            {"name": "devices", "value": len(entities), "unit": "items", "source": "discovery"},
        ],
    )
