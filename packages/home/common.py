"""Shared by the home server and its fake: entities, what ``set_state`` may ask of each, and
receipts.

Entities follow Home Assistant's MQTT-discovery configs (``hass.py`` reads the topics,
abbreviations, ``~``, device-based discovery and names; keys here are the full ones):

* ``switch`` — ``command_topic`` (``payload_on`` ``ON`` / ``payload_off`` ``OFF``, through
  ``command_template``), ``state_topic`` (``value_template``; ``state_on`` / ``state_off``,
  by default the payloads);
* ``light`` — default schema: ``command_topic`` (``payload_on``/``payload_off``),
  ``state_topic`` (``state_value_template``); dimmable when it has
  ``brightness_command_topic`` (``brightness_command_template``; device scale
  ``brightness_scale``, default 255; the level read on ``brightness_state_topic`` through
  ``brightness_value_template``); ``on_command_type`` ``last`` (default: brightness, then
  on), ``first`` or ``brightness`` (the brightness only). With ``schema: json`` one JSON
  message each way (``{"state": "ON", "brightness": 102}``), dimmable when ``brightness:
  true`` or a ``supported_color_modes`` other than ``onoff``;
* ``fan`` — on/off like a switch (``state_value_template``, ``command_template``);
* ``cover`` — ``command_topic`` (``payload_open`` ``OPEN`` / ``payload_close`` ``CLOSE``),
  ``state_topic`` (``value_template``; ``state_open`` ``open``, ``state_closed`` ``closed``,
  ``state_opening``, ``state_closing``, ``state_stopped``), ``set_position_topic``
  (``set_position_template``) / ``position_topic`` (``position_template``) on the device's
  scale ``position_closed`` (0) .. ``position_open`` (100);
* ``climate`` — read: ``current_temperature_topic``, ``temperature_state_topic`` (the
  setpoint) and ``mode_state_topic`` (its state: heat, cool, off …), each with its
  template; set: the setpoint on ``temperature_command_topic``
  (``temperature_command_template``) between ``min_temp`` (7) and ``max_temp`` (35);
* ``number`` — ``command_topic`` / ``state_topic`` between ``min`` (1) and ``max`` (100).
  HA's MQTT discovery has no media player, so a speaker's **volume** is a ``number``
  whose ``icon`` is ``mdi:volume-*`` or whose object id or name says "volume" (音量); it is
  listed with domain ``media_player`` (the domain HA's volume intent names);
* ``lock`` (``state_locked`` …), ``sensor``, ``binary_sensor`` (``payload_on`` /
  ``payload_off``) — read-only: no command is ever published to them.

**Availability** (``availability_topic`` or an ``availability`` list, each with its
``value_template`` and ``payload_available`` ``online`` / ``payload_not_available``
``offline``; ``availability_mode`` ``latest`` (default), ``all`` or ``any``): an entity
with availability topics is ``unavailable`` until one says it is available, and then
takes no command. A reading whose template gives nothing, or a state that is none of the
entity's payloads, is ignored (as Home Assistant ignores it).

Levels the tools take and report (brightness, position, volume) are percentages 0..100,
converted to and from each device's own scale. A device's area is its discovery config's
``device.suggested_area``, or the one configured for it (``YIMI_AREAS``: a JSON object of
entity id → area); none → ``null``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hub.capabilities.package_sdk import receipt
from packages.home.templates import render, render_value

SWITCHABLE = ("light", "switch", "fan")
READ_ONLY = ("lock", "sensor", "binary_sensor")
SETTABLE = (*SWITCHABLE, "cover", "number", "climate")
COVER_STATES = ("open", "closed")
LEVEL_TOLERANCE = 1
"""percentage points a read-back level may differ from the one asked for (scale rounding)"""
UNKNOWN = "unknown"
"""the state listed for a device that has not reported one yet"""
UNAVAILABLE = "unavailable"
"""the state of a device whose availability topics say it is offline"""
MAX_READING = 16 * 1024
"""bytes of one state message read"""
LOCK_STATES = ("locked", "unlocked", "locking", "unlocking", "jammed", "open", "opening")
COVER_NAMES = ("open", "closed", "opening", "closing", "stopped")


def _int(cfg: dict[str, Any], key: str, default: int) -> int:
    try:
        return int(float(cfg.get(key, default)))
    except (TypeError, ValueError, OverflowError):
        return default


def _float(cfg: dict[str, Any], key: str, default: float) -> float:
    try:
        f = float(cfg.get(key, default))
    except (TypeError, ValueError, OverflowError):
        return default
    return f if math.isfinite(f) else default


def _text(value: Any, default: str) -> str:
    """a payload option as Home Assistant compares it (``false`` → ``False``)"""
    if value is None or isinstance(value, dict | list):
        return default
    return str(value)


def _percent(raw: str | None, low: int, high: int) -> int | None:
    """A device reading on ``low..high`` as 0..100 (``None`` if absent or not a number)."""
    if raw is None or high == low:
        return None
    try:
        value = float(raw)
    except (ValueError, OverflowError):
        return None
    if not math.isfinite(value):
        return None
    return max(0, min(100, round((value - low) * 100 / (high - low))))


def _number(raw: str | None) -> float | None:
    if raw is None or len(raw) > 64:
        return None
    try:
        f = float(raw)
    except (ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


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


@dataclass(frozen=True)
class Availability:
    """One availability topic of an entity."""

    topic: str
    template: str | None = None
    online: str = "online"
    offline: str = "offline"


READINGS: dict[str, tuple[str, str]] = {
    "brightness": ("brightness_state_topic", "brightness_value_template"),
    "position": ("position_topic", "position_template"),
    "current_temperature": ("current_temperature_topic", "current_temperature_template"),
    "temperature": ("temperature_state_topic", "temperature_state_template"),
    "mode": ("mode_state_topic", "mode_state_template"),
}
"""role → (topic key, template key) of the readings besides the state"""
ROLE_COMPONENTS: dict[str, tuple[str, ...]] = {
    "brightness": ("light",),
    "position": ("cover",),
    "current_temperature": ("climate",),
    "temperature": ("climate",),
    "mode": ("climate",),
}


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
    """the last state read (``on``/``off``, ``locked``, ``open`` …, a sensor's or number's
    value, a thermostat's mode)"""
    config: dict[str, Any] = field(default_factory=dict)
    area: str | None = None
    brightness_raw: str | None = None
    """the last brightness read (device scale)"""
    position_raw: str | None = None
    """the last position read (device scale)"""
    current_temperature_raw: str | None = None
    target_temperature_raw: str | None = None
    available_on: dict[str, bool] = field(default_factory=dict)
    """availability topic → what it last said"""
    available_latest: bool | None = None
    unique_id: str | None = None
    key: str = ""
    """the discovery key it was announced under"""

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
    def thermostat(self) -> bool:
        """a climate entity that takes a setpoint"""
        return self.component == "climate" and bool(self.config.get("temperature_command_topic"))

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
        if self.thermostat:
            out.append("temperature")
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
    def temperature_range(self) -> tuple[float, float]:
        return _float(self.config, "min_temp", 7.0), _float(self.config, "max_temp", 35.0)

    @property
    def temperature_unit(self) -> str:
        unit = str(self.config.get("temperature_unit") or self.unit or "C").strip("°")
        return "°F" if unit.upper() == "F" else "°C"

    # ---------------------------------------------------------------- what it reads
    @property
    def availability(self) -> list[Availability]:
        out = []
        cfg = self.config
        if isinstance(cfg.get("availability_topic"), str) and cfg["availability_topic"]:
            template = cfg.get("availability_template")
            out.append(self._availability(cfg["availability_topic"], cfg, template))
        listed = cfg.get("availability")
        for a in listed if isinstance(listed, list) else []:
            if isinstance(a, dict) and isinstance(a.get("topic"), str) and a["topic"]:
                out.append(self._availability(a["topic"], a, a.get("value_template")))
        return out

    @staticmethod
    def _availability(topic: str, cfg: dict[str, Any], tpl: Any) -> Availability:
        return Availability(
            topic,
            tpl if isinstance(tpl, str) and tpl else None,
            _text(cfg.get("payload_available"), "online"),
            _text(cfg.get("payload_not_available"), "offline"),
        )

    @property
    def available(self) -> bool:
        topics = [a.topic for a in self.availability]
        if not topics:
            return True
        mode = self.config.get("availability_mode", "latest")
        said = [self.available_on.get(t) is True for t in topics]
        if mode == "all":
            return all(said)
        if mode == "any":
            return any(said)
        return self.available_latest is True

    def readings(self) -> list[tuple[str, str]]:
        """(topic, role) of everything this entity reads (a topic may carry several)"""
        out = []
        if self.state_topic and self.component != "climate":
            out.append((self.state_topic, "state"))
        for role, (topic_key, _) in READINGS.items():
            topic = self.config.get(topic_key)
            if self.component in ROLE_COMPONENTS[role] and isinstance(topic, str) and topic:
                if role != "brightness" or self.dimmable:
                    out.append((topic, role))
        out += [(a.topic, "availability") for a in self.availability]
        return out

    def _template(self, role: str) -> str | None:
        if role == "state":
            key = "state_value_template" if self.component in ("light", "fan") else "value_template"
        else:
            key = READINGS[role][1]
        tpl = self.config.get(key)
        return tpl if isinstance(tpl, str) and tpl else None

    def report(self, role: str, payload: str, topic: str = "") -> None:
        """Take one message for ``role`` (from ``topic``); what cannot be read is ignored."""
        if len(payload) > MAX_READING:
            return
        try:
            if role == "availability":
                self._report_availability(topic, payload)
                return
            tpl = None if self.json_schema and role == "state" else self._template(role)
            value = payload.strip() if tpl is None else render(tpl, payload)
            if value:
                _REPORTS.get(role, Entity._report_state)(self, value)
        except Exception:  # an untrusted payload never breaks the entity
            return

    def _report_availability(self, topic: str, payload: str) -> None:
        for a in self.availability:
            if a.topic != topic:
                continue
            value = payload.strip() if a.template is None else render(a.template, payload)
            if value == a.online:
                self.available_on[topic] = self.available_latest = True
            elif value == a.offline:
                self.available_on[topic] = self.available_latest = False

    def _report_state(self, value: str) -> None:
        if self.json_schema:
            data = json.loads(value)
            if not isinstance(data, dict):
                return
            on = {"ON": "on", "OFF": "off"}.get(str(data.get("state")))
            if on is not None:
                self.state = on
            b = data.get("brightness")
            if isinstance(b, int | float) and not isinstance(b, bool) and math.isfinite(b):
                self.brightness_raw = str(b)
            return
        state = self._state_of(value)
        if state is not None:
            self.state = state

    def _state_of(self, value: str) -> str | None:
        """the state ``value`` says, or ``None`` (not one of the entity's payloads)"""
        cfg = self.config
        if self.component in SWITCHABLE or self.component == "binary_sensor":
            on = _text(cfg.get("state_on"), self.payload_on)
            off = _text(cfg.get("state_off"), self.payload_off)
            return {on: "on", off: "off"}.get(value)
        if self.component == "lock":
            named = {_text(cfg.get(f"state_{s}"), s.upper()): s for s in LOCK_STATES}
            return named.get(value)
        if self.component == "cover":
            named = {_text(cfg.get(f"state_{s}"), s): s for s in COVER_NAMES}
            return named.get(value) or (value.lower() if value.lower() in COVER_NAMES else None)
        return value

    def _report_brightness(self, value: str) -> None:
        if _number(value) is not None:
            self.brightness_raw = value

    def _report_position(self, value: str) -> None:
        if _number(value) is not None:
            self.position_raw = value

    def _report_current(self, value: str) -> None:
        if _number(value) is not None:
            self.current_temperature_raw = value

    def _report_target(self, value: str) -> None:
        if _number(value) is not None:
            self.target_temperature_raw = value

    def _report_mode(self, value: str) -> None:
        self.state = value.lower()

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

    @property
    def current_temperature(self) -> float | None:
        return _number(self.current_temperature_raw) if self.component == "climate" else None

    @property
    def target_temperature(self) -> float | None:
        return _number(self.target_temperature_raw) if self.component == "climate" else None

    def readable_state(self) -> str | None:
        if not self.available:
            return UNAVAILABLE
        if self.component == "cover":
            return self._cover_state()
        return self.state

    def _cover_state(self) -> str | None:
        if self.state is not None and self.state != "stopped":
            return self.state
        position = self.position
        if position is None:
            return None
        return "closed" if position == 0 else "open"

    def attributes(self) -> dict[str, Any]:
        if not self.available:
            return {}
        out: dict[str, Any] = {}
        for key in ("brightness", "position", "volume"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        for key in ("current_temperature", "target_temperature"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.component == "climate":
            out["unit"] = self.temperature_unit
        return out

    def fields(self) -> dict[str, Any]:
        """what an effect says about this entity: name, domain, area, state, attributes"""
        return {
            "name": self.name,
            "domain": self.domain,
            "area": self.area,
            "state": self.readable_state() or UNKNOWN,
            **self.attributes(),
            "features": self.features,
        }


_REPORTS: dict[str, Callable[[Entity, str], None]] = {
    "state": Entity._report_state,
    "brightness": Entity._report_brightness,
    "position": Entity._report_position,
    "current_temperature": Entity._report_current,
    "temperature": Entity._report_target,
    "mode": Entity._report_mode,
}
"""role → how a rendered reading is taken"""


def entity_from_config(
    component: str,
    object_id: str,
    cfg: dict[str, Any],
    areas: dict[str, str],
    *,
    name: str | None = None,
    key: str = "",
) -> Entity:
    """An :class:`Entity` from a discovery config with full keys (its readings not yet
    known); ``name`` as :func:`hass.friendly_name` gives it (default: the config's)."""
    device = cfg.get("device")
    suggested = device.get("suggested_area") if isinstance(device, dict) else None
    unit = cfg.get("unit_of_measurement")
    uid = cfg.get("unique_id")
    e = Entity(
        component,
        object_id,
        name if name is not None else str(cfg.get("name") or object_id),
        _text(cfg.get("state_topic"), ""),
        _text(cfg.get("command_topic"), ""),
        str(unit) if isinstance(unit, str | int | float) and unit != "" else None,
        _text(cfg.get("payload_on"), "ON"),
        _text(cfg.get("payload_off"), "OFF"),
        None,
        cfg,
        unique_id=str(uid) if isinstance(uid, str | int) and uid != "" else None,
        key=key,
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
    temperature: float | None = None
    """a thermostat's setpoint (the device's unit)"""

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
        if self.temperature is not None:
            have_t = e.target_temperature
            step = _float(e.config, "temp_step", 0.1)
            if have_t is None or abs(have_t - self.temperature) > max(0.05, step / 2):
                return False
        return True

    def fields(self, e: Entity) -> dict[str, Any]:
        out: dict[str, Any] = {"name": e.name, "domain": e.domain, "area": e.area}
        if self.state or self.settles_at:
            out["state"] = self.state or self.settles_at
        for key in ("brightness", "position", "volume"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.temperature is not None:
            out["target_temperature"] = self.temperature
            out["unit"] = e.temperature_unit
        return out

    def describe(self, unit: str = "°C") -> str:
        parts = [self.state] if self.state else []
        parts += [
            f"{k} {getattr(self, k)} %"
            for k in ("brightness", "position", "volume")
            if getattr(self, k) is not None
        ]
        if self.temperature is not None:
            parts.append(f"a setpoint of {self.temperature:g} {unit}")
        return ", ".join(parts)


def _level(name: str, value: object) -> int | str:
    """``value`` as a 0..100 integer, or what is wrong with it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{name} must be a whole number from 0 to 100, got {value!r}"
    if value != int(value) or not 0 <= value <= 100:
        return f"{name} must be a whole number from 0 to 100, got {value!r}"
    return int(value)


def _wanted_setpoint(
    e: Entity, state: str, temperature: object, levels: bool
) -> Wanted | tuple[str, str]:
    entity = e.entity_id
    if state.strip():
        return "BAD_STATE", f"{entity}: give its temperature (a setpoint), not a state"
    if levels:
        return "BAD_VALUE", f"{entity} is a thermostat: give its temperature only"
    low, high = e.temperature_range
    unit = e.temperature_unit
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        return "BAD_VALUE", f"{entity}: give a temperature from {low:g} to {high:g} {unit}"
    t = float(temperature)
    if not math.isfinite(t) or not low <= t <= high:
        return (
            "BAD_VALUE",
            f"{entity}: temperature must be from {low:g} to {high:g} {unit}, got {temperature!r}",
        )
    return Wanted(temperature=t)


def wanted(
    e: Entity,
    state: str,
    brightness: object = None,
    position: object = None,
    volume: object = None,
    temperature: object = None,
) -> Wanted | tuple[str, str]:
    """What the call asks of ``e``, or an error ``(code, message)``: ``READ_ONLY``,
    ``UNAVAILABLE`` (its availability says it is offline), ``BAD_STATE`` (a state this kind
    of device does not have), ``BAD_VALUE`` (a level out of 0..100, a level this device
    does not have, a setpoint out of its range, or asks that contradict each other)."""
    entity = e.entity_id
    if e.component not in SETTABLE or not (e.command_topic or e.positionable or e.thermostat):
        return "READ_ONLY", f"{entity} is read-only"
    if not e.available:
        return "UNAVAILABLE", f"{e.name} is offline (unavailable): nothing was sent"
    if e.component == "climate":
        other = any(v is not None for v in (brightness, position, volume))
        return _wanted_setpoint(e, state or "", temperature, other)
    if temperature is not None:
        return "BAD_VALUE", f"{entity} has no temperature: it is not a thermostat"
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


def _templated(e: Entity, key: str, value: Any, **variables: Any) -> str | None:
    """``value`` through the entity's ``key`` template (none: the value itself); ``None``
    when the template gives nothing"""
    tpl = e.config.get(key)
    if not isinstance(tpl, str) or not tpl:
        return f"{value:g}" if isinstance(value, float) else str(value)
    return render_value(tpl, value, **variables) or None


def commands(e: Entity, w: Wanted) -> list[tuple[str, str | None]]:
    """The (topic, payload) messages that ask the device for ``w``, in the order Home
    Assistant sends them (``on_command_type``); a payload is ``None`` when the device's
    command template gives nothing (then nothing may be sent)."""
    if w.temperature is not None:
        topic = str(e.config["temperature_command_topic"])
        return [(topic, _templated(e, "temperature_command_template", w.temperature))]
    if e.json_schema:
        body: dict[str, Any] = {"state": "ON" if w.state != "off" else "OFF"}
        if w.brightness is not None:
            body["brightness"] = max(1, _device_value(w.brightness, 0, e.brightness_scale))
        return [(e.command_topic, json.dumps(body))]
    out: list[tuple[str, str | None]] = []
    switch: list[tuple[str, str | None]] = []
    if w.state is not None:
        if e.component == "cover":
            key, default = (
                ("payload_open", "OPEN") if w.state == "open" else ("payload_close", "CLOSE")
            )
            switch.append((e.command_topic, _text(e.config.get(key), default)))
        else:
            payload = e.payload_on if w.state == "on" else e.payload_off
            switch.append((e.command_topic, _templated(e, "command_template", payload)))
    level: list[tuple[str, str | None]] = []
    raw_b = None
    if w.brightness is not None:
        raw_b = max(1, _device_value(w.brightness, 0, e.brightness_scale))
    on_type = e.config.get("on_command_type", "last")
    if w.state == "on" and e.dimmable and on_type == "brightness" and raw_b is None:
        raw_b = round(_number(e.brightness_raw) or e.brightness_scale)  # on = its last level
    if raw_b is not None:
        level.append(
            (
                str(e.config["brightness_command_topic"]),
                _templated(e, "brightness_command_template", raw_b),
            )
        )
    if w.state == "on" and level:
        out = {"first": switch + level, "brightness": level}.get(str(on_type), level + switch)
    else:
        out = switch + level
    if w.position is not None:
        raw = _device_value(w.position, *e.position_range)
        out.append(
            (
                str(e.config["set_position_topic"]),
                _templated(e, "set_position_template", raw, position=raw),
            )
        )
    if w.volume is not None:
        raw = _device_value(w.volume, *e.number_range)
        out.append((e.command_topic, _templated(e, "command_template", raw)))
    return out


def set_receipt(e: Entity, w: Wanted, confirmed: bool, timeout: float) -> dict[str, Any]:
    fields = w.fields(e)
    if confirmed:
        fields.update(e.attributes())
        fields["state"] = e.readable_state() or UNKNOWN
        if w.temperature is None:
            fields.pop("target_temperature", None)
            fields.pop("current_temperature", None)
            fields.pop("unit", None)
    what = w.describe(e.temperature_unit)
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
        unknowns=[] if confirmed else [f"{e.name} did not report {what} in {timeout:g} s"],
    )


# ---------------------------------------------------------------- reading
def _climate_values(e: Entity) -> list[dict[str, Any]]:
    out = []
    for key, label in (("current_temperature", "temperature"), ("target_temperature", "setpoint")):
        value = getattr(e, key)
        if value is not None and e.available:
            out.append(
                {
                    "name": f"{e.name} {label}",
                    "value": value,
                    "unit": e.temperature_unit,
                    "source": e.entity_id,
                }
            )
    return out


def observation(e: Entity) -> dict[str, Any]:
    """A receipt for reading one entity: a value for sensors, a state for the rest."""
    state = e.readable_state()
    values = _climate_values(e)
    if state is None and not values:
        return receipt("succeeded", unknowns=[f"{e.entity_id} has not reported a state yet"])
    if e.component == "sensor" and state != UNAVAILABLE:
        try:
            value: float | str = float(str(state))
        except ValueError:
            value = str(state)
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
        values=values,
    )


def listing(entities: list[Entity]) -> dict[str, Any]:
    """Every entity: a ``device.state`` effect each (sensors too: state ``21.5 °C``, with
    ``value`` and ``unit``; one that has not reported: state ``unknown``), sensor and
    thermostat values, and the count."""
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
        elif not r["effects"] and not r["values"]:
            effects.append(
                {
                    "kind": "device.state",
                    "state": "verified",
                    "target": e.entity_id,
                    "fields": {**e.fields(), "state": UNKNOWN},
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
