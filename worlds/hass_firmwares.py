"""Device firmwares that announce themselves with Home Assistant MQTT discovery, shaped exactly
as each project publishes (topics, abbreviated or full keys, templates, availability), and
that answer commands as the firmware does.

- :class:`Zigbee2Mqtt` — Zigbee2MQTT 2.x: ``homeassistant/<component>/<ieee>/<object>/config``
  (a node id), full keys, ``name: null``, ``object_id``, ``origin``, an availability list
  (the bridge and the device, ``availability_mode: all``, ``{{ value_json.state }}``), one
  JSON state topic per device read by several entities through ``value_template``s, the
  JSON light schema (``brightness_scale: 254``), a thermostat, a cover, a lock, a contact
  sensor whose payloads are JSON booleans; a command is a JSON ``/set`` message (or
  ``/set/<attribute>``) and the device answers with its whole state.
- :class:`EspHome` — ESPHome's MQTT component: ``homeassistant/<component>/<node>/<object>/
  config``, abbreviated keys (``stat_t``, ``cmd_t``, ``avty_t``, ``uniq_id``, ``dev`` with
  ``ids``/``sa``/``cns``), ``name: ""`` for an entity without a name of its own, the JSON
  light schema, ``<node>/status`` online/offline.
- :class:`Tasmota` — Tasmota's Home Assistant discovery (``SetOption19 1``):
  ``homeassistant/<component>/<chip id>_<kind>_<n>/config`` (no node id), abbreviated keys,
  ``{{value_json.POWER}}`` over ``tele/<topic>/STATE``, ``tele/<topic>/LWT`` Online/Offline,
  a dimmer with ``on_cmd_type: brightness`` and ``bri_scl: 100``, an energy sensor over
  ``tele/<topic>/SENSOR``. Its ``tele`` messages are not retained: until it next reports,
  a listener that joined later has no state for it.
- :class:`MqttDiscoverable` — the ``ha-mqtt-discoverable`` library: full keys plus its own
  ``component`` key, ``hmd/<component>/[<device>/]<name>/state|command|attributes``,
  ``homeassistant/<component>/[<device>/]<name>/config`` (names cleaned to
  ``[A-Za-z0-9_-]``), with and without a device; its states go out unretained (the
  library's default).
- :class:`DeviceDiscovery` — Home Assistant's device-based discovery
  (``homeassistant/device/<id>/config``, ``dev``, ``o``, ``cmps`` with ``p``, options shared
  from the root, ``~``).

:class:`Firmwares` runs them on a broker (an async context manager owning its task):
retained configs and states, commands answered, every command recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import aiomqtt

log = logging.getLogger(__name__)

Message = tuple[str, str, bool]
"""(topic, payload, retained)"""


def _j(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


@dataclass
class Firmware:
    """A publisher: its discovery configs, its state messages, and what it does with a
    command (command topic → handler taking the payload)."""

    name: str = ""
    answers: dict[str, Callable[[str], None]] = field(default_factory=dict)

    def configs(self) -> list[tuple[str, str]]:
        raise NotImplementedError

    def states(self) -> list[Message]:
        raise NotImplementedError


# ---------------------------------------------------------------- Zigbee2MQTT
Z2M_ORIGIN = {"name": "Zigbee2MQTT", "sw": "2.1.3", "url": "https://www.zigbee2mqtt.io"}
Z2M_BRIDGE = "zigbee2mqtt_bridge_0x00124b00120144ae"


@dataclass
class Zigbee2Mqtt(Firmware):
    name: str = "Zigbee2MQTT"
    base: str = "zigbee2mqtt"
    devices: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            "Kitchen bulb": {
                "state": "OFF",
                "brightness": 100,
                "color_mode": "color_temp",
                "color_temp": 370,
                "linkquality": 87,
            },
            "Kettle plug": {"state": "OFF", "power": 0, "energy": 12.4, "linkquality": 120},
            "Front door": {"battery": 100, "contact": True, "linkquality": 102},
            "TS0601_thermostat": {
                "local_temperature": 19.5,
                "current_heating_setpoint": 18,
                "system_mode": "heat",
                "running_state": "idle",
                "preset": "manual",
            },
            "smart vent": {"state": "CLOSE", "position": 0, "linkquality": 90},
            "weather_sensor": {"temperature": 21.3, "humidity": 48.2, "battery": 90},
            "front_lock": {"state": "LOCK", "lock_state": "locked", "battery": 80},
        }
    )
    ieee: dict[str, str] = field(
        default_factory=lambda: {
            "Kitchen bulb": "0x00158d0001a2b3c4",
            "Kettle plug": "0x0017880104e45517",
            "Front door": "0x00158d0007e78871",
            "TS0601_thermostat": "0x0017882104a44559",
            "smart vent": "0x0017880104e45551",
            "weather_sensor": "0x0017880104e45522",
            "front_lock": "0x0017880104e45560",
        }
    )
    online: dict[str, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for dev in self.devices:
            self.answers[f"{self.base}/{dev}/set"] = functools.partial(self._set, dev)
            self.answers[f"{self.base}/{dev}/set/state"] = functools.partial(self._set, dev)
        thermostat = f"{self.base}/TS0601_thermostat/set/current_heating_setpoint"
        self.answers[thermostat] = self._setpoint

    def _set(self, dev: str, payload: str) -> None:
        try:
            body = json.loads(payload)
        except ValueError:
            body = {"state": payload}  # a plain payload on /set or /set/state is the state
        if not isinstance(body, dict):
            raise ValueError("not a JSON object")
        d = self.devices[dev]
        if dev == "front_lock":
            return  # the tests never move a lock; it would answer LOCK/UNLOCK
        if "position" in body:
            d["position"] = int(body["position"])
            d["state"] = "OPEN" if d["position"] > 0 else "CLOSE"
        for key in ("state", "brightness"):
            if key in body:
                d[key] = body[key]
        if dev == "smart vent" and body.get("state") in ("OPEN", "CLOSE"):
            d["position"] = 100 if body["state"] == "OPEN" else 0
        if dev == "Kettle plug":
            d["power"] = 1850 if d["state"] == "ON" else 0

    def _setpoint(self, payload: str) -> None:
        self.devices["TS0601_thermostat"]["current_heating_setpoint"] = float(payload)

    def _availability(self, dev: str) -> list[dict[str, str]]:
        return [
            {"topic": f"{self.base}/bridge/state", "value_template": "{{ value_json.state }}"},
            {
                "topic": f"{self.base}/{dev}/availability",
                "value_template": "{{ value_json.state }}",
            },
        ]

    def _device(self, dev: str, model: str, maker: str) -> dict[str, Any]:
        return {
            "identifiers": [f"zigbee2mqtt_{self.ieee[dev]}"],
            "manufacturer": maker,
            "model": model,
            "name": dev,
            "sw_version": None,
            "via_device": Z2M_BRIDGE,
        }

    def _common(self, dev: str, model: str, maker: str) -> dict[str, Any]:
        return {
            "availability": self._availability(dev),
            "availability_mode": "all",
            "device": self._device(dev, model, maker),
            "json_attributes_topic": f"{self.base}/{dev}",
            "origin": Z2M_ORIGIN,
        }

    def configs(self) -> list[tuple[str, str]]:
        b = self.base
        ieee = self.ieee
        bulb = "Kitchen bulb"
        plug = "Kettle plug"
        out: list[tuple[str, dict[str, Any]]] = [
            (
                f"homeassistant/light/{ieee[bulb]}/light/config",
                {
                    **self._common(bulb, "TRADFRI bulb E27 WW 806lm (LED1836G9)", "IKEA"),
                    "brightness": True,
                    "brightness_scale": 254,
                    "command_topic": f"{b}/{bulb}/set",
                    "effect": True,
                    "effect_list": ["blink", "breathe", "okay", "channel_change"],
                    "max_mireds": 454,
                    "min_mireds": 250,
                    "name": None,
                    "object_id": "kitchen_bulb",
                    "schema": "json",
                    "state_topic": f"{b}/{bulb}",
                    "supported_color_modes": ["color_temp"],
                    "unique_id": f"{ieee[bulb]}_light_zigbee2mqtt",
                },
            ),
            (
                f"homeassistant/switch/{ieee[plug]}/switch/config",
                {
                    **self._common(plug, "Smart plug (SP 120)", "innr"),
                    "command_topic": f"{b}/{plug}/set/state",
                    "name": None,
                    "object_id": "kettle_plug",
                    "payload_off": "OFF",
                    "payload_on": "ON",
                    "state_topic": f"{b}/{plug}",
                    "unique_id": f"{ieee[plug]}_switch_zigbee2mqtt",
                    "value_template": "{{ value_json.state }}",
                },
            ),
            (
                f"homeassistant/sensor/{ieee[plug]}/power/config",
                {
                    **self._common(plug, "Smart plug (SP 120)", "innr"),
                    "device_class": "power",
                    "enabled_by_default": True,
                    "name": "Power",
                    "object_id": "kettle_plug_power",
                    "state_class": "measurement",
                    "state_topic": f"{b}/{plug}",
                    "unique_id": f"{ieee[plug]}_power_zigbee2mqtt",
                    "unit_of_measurement": "W",
                    "value_template": "{{ value_json.power }}",
                },
            ),
            (
                f"homeassistant/binary_sensor/{ieee['Front door']}/contact/config",
                {
                    **self._common("Front door", "Door and window sensor (MCCGQ11LM)", "Aqara"),
                    "device_class": "door",
                    "name": None,
                    "object_id": "front_door_contact",
                    "payload_off": True,
                    "payload_on": False,
                    "state_topic": f"{b}/Front door",
                    "unique_id": f"{ieee['Front door']}_contact_zigbee2mqtt",
                    "value_template": '{{ value_json["contact"] }}',
                },
            ),
            (
                f"homeassistant/climate/{ieee['TS0601_thermostat']}/climate/config",
                {
                    **self._common(
                        "TS0601_thermostat",
                        "Radiator valve with thermostat (TS0601_thermostat)",
                        "Tuya",
                    ),
                    "action_template": "{% set values = {None:None,'idle':'idle','heat':"
                    "'heating','cool':'cooling','fan_only':'fan'} %}"
                    "{{ values[value_json.running_state] }}",
                    "action_topic": f"{b}/TS0601_thermostat",
                    "current_temperature_template": "{{ value_json.local_temperature }}",
                    "current_temperature_topic": f"{b}/TS0601_thermostat",
                    "max_temp": "35",
                    "min_temp": "5",
                    "mode_command_topic": f"{b}/TS0601_thermostat/set/system_mode",
                    "mode_state_template": "{{ value_json.system_mode }}",
                    "mode_state_topic": f"{b}/TS0601_thermostat",
                    "modes": ["heat", "auto", "off"],
                    "name": None,
                    "preset_mode_command_topic": f"{b}/TS0601_thermostat/set/preset",
                    "preset_mode_state_topic": f"{b}/TS0601_thermostat",
                    "preset_mode_value_template": "{{ value_json.preset }}",
                    "preset_modes": ["schedule", "manual", "boost", "eco", "away"],
                    "temp_step": 0.5,
                    "temperature_command_topic": f"{b}/TS0601_thermostat/set/"
                    "current_heating_setpoint",
                    "temperature_state_template": "{{ value_json.current_heating_setpoint }}",
                    "temperature_state_topic": f"{b}/TS0601_thermostat",
                    "temperature_unit": "C",
                    "object_id": "ts0601_thermostat",
                    "unique_id": f"{ieee['TS0601_thermostat']}_climate_zigbee2mqtt",
                },
            ),
            (
                f"homeassistant/cover/{ieee['smart vent']}/cover/config",
                {
                    **self._common("smart vent", "Smart vent (SV01)", "Keen Home"),
                    "command_topic": f"{b}/smart vent/set",
                    "position_topic": f"{b}/smart vent",
                    "set_position_topic": f"{b}/smart vent/set",
                    "set_position_template": '{ "position": {{ position }} }',
                    "position_template": "{{ value_json.position }}",
                    "state_topic": f"{b}/smart vent",
                    "value_template": "{{ value_json.state }}",
                    "state_open": "OPEN",
                    "state_closed": "CLOSE",
                    "state_stopped": "STOP",
                    "name": None,
                    "object_id": "smart_vent",
                    "unique_id": f"{ieee['smart vent']}_cover_zigbee2mqtt",
                },
            ),
            (
                f"homeassistant/sensor/{ieee['weather_sensor']}/temperature/config",
                {
                    **self._common(
                        "weather_sensor", "Temperature and humidity sensor (WSDCGQ11LM)", "Aqara"
                    ),
                    "device_class": "temperature",
                    "enabled_by_default": True,
                    "name": "Temperature",
                    "object_id": "weather_sensor_temperature",
                    "state_class": "measurement",
                    "state_topic": f"{b}/weather_sensor",
                    "unique_id": f"{ieee['weather_sensor']}_temperature_zigbee2mqtt",
                    "unit_of_measurement": "°C",
                    "value_template": "{{ value_json.temperature }}",
                },
            ),
            (
                f"homeassistant/lock/{ieee['front_lock']}/lock/config",
                {
                    **self._common("front_lock", "Smart lock (YRD226HA2619)", "Yale"),
                    "command_topic": f"{b}/front_lock/set/state",
                    "name": None,
                    "object_id": "front_lock",
                    "payload_lock": "LOCK",
                    "payload_unlock": "UNLOCK",
                    "state_locked": "LOCK",
                    "state_topic": f"{b}/front_lock",
                    "state_unlocked": "UNLOCK",
                    "unique_id": f"{ieee['front_lock']}_lock_zigbee2mqtt",
                    "value_template": "{{ value_json.state }}",
                },
            ),
        ]
        return [(t, _j(c)) for t, c in out]

    def states(self) -> list[Message]:
        out: list[Message] = [(f"{self.base}/bridge/state", _j({"state": "online"}), True)]
        for dev, state in self.devices.items():
            up = self.online.get(dev, True)
            out.append(
                (
                    f"{self.base}/{dev}/availability",
                    _j({"state": "online" if up else "offline"}),
                    True,
                )
            )
            out.append((f"{self.base}/{dev}", _j(state), True))
        return out


# ---------------------------------------------------------------- ESPHome
@dataclass
class EspHome(Firmware):
    """One ESPHome node (``mqtt:`` with discovery on, abbreviations on)."""

    name: str = "ESPHome"
    node: str = "livingroom"
    friendly: str = "Living Room Node"
    area: str = "Living room"
    mac: str = "a4cf12b3c4d5"
    state: dict[str, Any] = field(
        default_factory=lambda: {
            "relay": "OFF",
            "ceiling_light": {"state": "OFF", "color_mode": "brightness", "brightness": 255},
            "ceiling_fan": "OFF",
            "temperature": "22.4",
        }
    )

    def __post_init__(self) -> None:
        n = self.node
        self.answers[f"{n}/switch/relay/command"] = lambda p: self._plain("relay", p)
        self.answers[f"{n}/fan/ceiling_fan/command"] = lambda p: self._plain("ceiling_fan", p)
        self.answers[f"{n}/light/ceiling_light/command"] = self._light

    def _plain(self, key: str, payload: str) -> None:
        if payload == "TOGGLE":
            payload = "OFF" if self.state[key] == "ON" else "ON"
        if payload not in ("ON", "OFF"):
            raise ValueError(payload)
        self.state[key] = payload

    def _light(self, payload: str) -> None:
        body = json.loads(payload)
        light = self.state["ceiling_light"]
        light["state"] = body.get("state", light["state"])
        if "brightness" in body:
            light["brightness"] = int(body["brightness"])

    def _dev(self) -> dict[str, Any]:
        dev: dict[str, Any] = {
            "ids": self.mac,
            "name": self.friendly,
            "sw": "2025.10.3 (config hash 0x9d1a2f3c)",
            "mdl": "esp32dev",
            "mf": "Espressif",
        }
        if self.area:
            dev["sa"] = self.area
        dev["cns"] = [["mac", self.mac]]
        return dev

    def _base(self, component: str, obj: str, name: str) -> dict[str, Any]:
        n = self.node
        return {
            "name": name,
            "stat_t": f"{n}/{component}/{obj}/state",
            "avty_t": f"{n}/status",
            "uniq_id": f"ESP{component}{obj}",
            "dev": self._dev(),
        }

    def configs(self) -> list[tuple[str, str]]:
        n = self.node
        relay = {**self._base("switch", "relay", ""), "cmd_t": f"{n}/switch/relay/command"}
        light = {
            "schema": "json",
            "clrm": True,
            "sup_clrm": ["brightness"],
            "brightness": True,
            **self._base("light", "ceiling_light", "Ceiling light"),
            "cmd_t": f"{n}/light/ceiling_light/command",
        }
        fan = {
            **self._base("fan", "ceiling_fan", "Ceiling fan"),
            "cmd_t": f"{n}/fan/ceiling_fan/command",
        }
        temp = {
            "dev_cla": "temperature",
            "unit_of_meas": "°C",
            "stat_cla": "measurement",
            **self._base("sensor", "temperature", "Temperature"),
        }
        return [
            (f"homeassistant/switch/{n}/relay/config", _j(relay)),
            (f"homeassistant/light/{n}/ceiling_light/config", _j(light)),
            (f"homeassistant/fan/{n}/ceiling_fan/config", _j(fan)),
            (f"homeassistant/sensor/{n}/temperature/config", _j(temp)),
        ]

    def states(self) -> list[Message]:
        n = self.node
        s = self.state
        return [
            (f"{n}/status", "online", True),
            (f"{n}/switch/relay/state", s["relay"], True),
            (f"{n}/light/ceiling_light/state", _j(s["ceiling_light"]), True),
            (f"{n}/fan/ceiling_fan/state", s["ceiling_fan"], True),
            (f"{n}/sensor/temperature/state", s["temperature"], True),
        ]


# ---------------------------------------------------------------- Tasmota
@dataclass
class Tasmota(Firmware):
    """Two Tasmota devices: a dimmer (``Desk lamp``) and a plug with energy monitoring
    (``Coffee maker``). ``tele`` states go out unretained (Tasmota's default)."""

    name: str = "Tasmota"
    power: dict[str, str] = field(default_factory=lambda: {"B3C4D5": "OFF", "E1F2A3": "OFF"})
    dimmer: int = 30
    watts: int = 0

    def __post_init__(self) -> None:
        self.answers["cmnd/tasmota_B3C4D5/POWER"] = lambda p: self._power("B3C4D5", p)
        self.answers["cmnd/tasmota_B3C4D5/Dimmer"] = self._dim
        self.answers["cmnd/tasmota_E1F2A3/POWER"] = lambda p: self._power("E1F2A3", p)

    def _power(self, chip: str, payload: str) -> None:
        p = payload.upper()
        if p == "TOGGLE":
            p = "OFF" if self.power[chip] == "ON" else "ON"
        if p not in ("ON", "OFF", "1", "0"):
            raise ValueError(payload)
        self.power[chip] = {"1": "ON", "0": "OFF"}.get(p, p)
        if chip == "E1F2A3":
            self.watts = 1420 if self.power[chip] == "ON" else 0

    def _dim(self, payload: str) -> None:
        self.dimmer = max(0, min(100, int(payload)))
        self.power["B3C4D5"] = "ON" if self.dimmer > 0 else "OFF"

    def configs(self) -> list[tuple[str, str]]:
        lamp = {
            "name": "Desk lamp",
            "stat_t": "tele/tasmota_B3C4D5/STATE",
            "avty_t": "tele/tasmota_B3C4D5/LWT",
            "pl_avail": "Online",
            "pl_not_avail": "Offline",
            "cmd_t": "cmnd/tasmota_B3C4D5/POWER",
            "pl_off": "OFF",
            "pl_on": "ON",
            "stat_val_tpl": "{{value_json.POWER}}",
            "uniq_id": "B3C4D5_LI_1",
            "dev": {"ids": ["B3C4D5"]},
            "bri_cmd_t": "cmnd/tasmota_B3C4D5/Dimmer",
            "bri_stat_t": "tele/tasmota_B3C4D5/STATE",
            "bri_scl": 100,
            "on_cmd_type": "brightness",
            "bri_val_tpl": "{{value_json.Dimmer}}",
        }
        plug = {
            "name": "Coffee maker",
            "stat_t": "tele/tasmota_E1F2A3/STATE",
            "avty_t": "tele/tasmota_E1F2A3/LWT",
            "pl_avail": "Online",
            "pl_not_avail": "Offline",
            "cmd_t": "cmnd/tasmota_E1F2A3/POWER",
            "pl_off": "OFF",
            "pl_on": "ON",
            "val_tpl": "{{value_json.POWER}}",
            "uniq_id": "E1F2A3_RL_1",
            "dev": {"ids": ["E1F2A3"]},
        }
        energy = {
            "name": "Coffee maker ENERGY Power",
            "stat_t": "tele/tasmota_E1F2A3/SENSOR",
            "avty_t": "tele/tasmota_E1F2A3/LWT",
            "pl_avail": "Online",
            "pl_not_avail": "Offline",
            "uniq_id": "E1F2A3_ENERGY_Power",
            "dev": {"ids": ["E1F2A3"]},
            "unit_of_meas": "W",
            "dev_cla": "power",
            "frc_upd": True,
            "val_tpl": "{{value_json['ENERGY']['Power']}}",
        }
        return [
            ("homeassistant/light/B3C4D5_LI_1/config", _j(lamp)),
            ("homeassistant/switch/E1F2A3_RL_1/config", _j(plug)),
            ("homeassistant/sensor/E1F2A3_ENERGY_Power/config", _j(energy)),
        ]

    def states(self) -> list[Message]:
        out: list[Message] = [
            ("tele/tasmota_B3C4D5/LWT", "Online", True),
            ("tele/tasmota_E1F2A3/LWT", "Online", True),
        ]
        lamp = {
            "Time": "2026-12-01T12:00:00",
            "Uptime": "0T01:00:00",
            "POWER": self.power["B3C4D5"],
            "Dimmer": self.dimmer,
            "Fade": "OFF",
            "Speed": 1,
        }
        plug = {
            "Time": "2026-12-01T12:00:00",
            "Uptime": "0T01:00:00",
            "POWER": self.power["E1F2A3"],
            "Wifi": {"RSSI": 76},
        }
        sensor = {
            "Time": "2026-12-01T12:00:00",
            "ENERGY": {
                "Total": 3.21,
                "Yesterday": 0.4,
                "Today": 0.12,
                "Power": self.watts,
                "Voltage": 231,
                "Current": 0.0,
            },
        }
        out += [
            (
                "stat/tasmota_B3C4D5/RESULT",
                _j({"POWER": self.power["B3C4D5"], "Dimmer": self.dimmer}),
                False,
            ),
            ("tele/tasmota_B3C4D5/STATE", _j(lamp), False),
            ("stat/tasmota_E1F2A3/RESULT", _j({"POWER": self.power["E1F2A3"]}), False),
            ("tele/tasmota_E1F2A3/STATE", _j(plug), False),
            ("tele/tasmota_E1F2A3/SENSOR", _j(sensor), False),
        ]
        return out


# ---------------------------------------------------------------- ha-mqtt-discoverable
def _clean(raw: str) -> str:
    """ha-mqtt-discoverable's ``clean_string``"""
    return "".join(c if c.isascii() and (c.isalnum() or c in "_-") else "-" for c in raw)


@dataclass
class MqttDiscoverable(Firmware):
    """Entities made with ``ha-mqtt-discoverable`` 0.26: a ``Switch`` without a device
    (``Garden pump``) and, on the device ``Greenhouse``, a ``Switch`` (``Heater``), a
    ``BinarySensor`` (``Door``) and a ``Sensor`` (``Humidity``); their callbacks answer a
    command by calling ``on()``/``off()``."""

    name: str = "ha-mqtt-discoverable"
    switches: dict[str, str] = field(
        default_factory=lambda: {"Garden pump": "OFF", "Heater": "OFF"}
    )
    door: str = "off"
    humidity: str = "81.5"
    retain: bool = False

    def _topic(self, component: str, name: str, device: str | None) -> str:
        dev = f"/{_clean(device)}" if device else ""
        return f"{component}{dev}/{_clean(name)}"

    def __post_init__(self) -> None:
        for name, dev in (("Garden pump", None), ("Heater", "Greenhouse")):
            topic = f"hmd/{self._topic('switch', name, dev)}/command"
            self.answers[topic] = functools.partial(self._switch, name)

    def _switch(self, name: str, payload: str) -> None:
        if payload not in ("ON", "OFF"):
            raise ValueError(payload)
        self.switches[name] = payload

    def _entity(
        self, component: str, name: str, device: dict[str, Any] | None, **info: Any
    ) -> tuple[str, str]:
        t = self._topic(component, name, device["name"] if device else None)
        cfg: dict[str, Any] = {"component": component, "name": name, **info}
        if device:
            cfg["device"] = device
        cfg["state_topic"] = f"hmd/{t}/state"
        cfg["json_attributes_topic"] = f"hmd/{t}/attributes"
        if component == "switch":
            cfg["command_topic"] = f"hmd/{t}/command"
        return f"homeassistant/{t}/config", _j(cfg)

    def configs(self) -> list[tuple[str, str]]:
        greenhouse = {
            "name": "Greenhouse",
            "identifiers": "greenhouse-01",
            "manufacturer": "Home made",
            "model": "Pi Zero W",
        }
        return [
            self._entity("switch", "Garden pump", None, payload_off="OFF", payload_on="ON"),
            self._entity(
                "switch",
                "Heater",
                greenhouse,
                unique_id="greenhouse_heater",
                payload_off="OFF",
                payload_on="ON",
            ),
            self._entity(
                "binary_sensor",
                "Door",
                greenhouse,
                unique_id="greenhouse_door",
                payload_on="on",
                payload_off="off",
                device_class="door",
            ),
            self._entity(
                "sensor",
                "Humidity",
                greenhouse,
                unique_id="greenhouse_humidity",
                unit_of_measurement="%",
                device_class="humidity",
            ),
        ]

    def states(self) -> list[Message]:
        """its states, unretained: ``Discoverable(retain=False)`` is the library's default"""
        r = self.retain
        return [
            (
                f"hmd/{self._topic('switch', 'Garden pump', None)}/state",
                self.switches["Garden pump"],
                r,
            ),
            (
                f"hmd/{self._topic('switch', 'Heater', 'Greenhouse')}/state",
                self.switches["Heater"],
                r,
            ),
            (f"hmd/{self._topic('binary_sensor', 'Door', 'Greenhouse')}/state", self.door, r),
            (f"hmd/{self._topic('sensor', 'Humidity', 'Greenhouse')}/state", self.humidity, r),
        ]


# ---------------------------------------------------------------- device-based discovery
@dataclass
class DeviceDiscovery(Firmware):
    """One device announced with Home Assistant's device-based discovery (the shape of HA's
    own documentation: shared ``state_topic`` and ``qos`` at the root, two sensors reading
    it through templates, and a switch with its own ``~``)."""

    name: str = "device-based discovery"
    switch: str = "OFF"
    with_switch: bool = True
    reading: dict[str, float] = field(
        default_factory=lambda: {"temperature": 23.1, "humidity": 43.7}
    )

    def __post_init__(self) -> None:
        self.answers["bedroom/plug/set"] = self._set

    def _set(self, payload: str) -> None:
        if payload not in ("ON", "OFF"):
            raise ValueError(payload)
        self.switch = payload

    def configs(self) -> list[tuple[str, str]]:
        cmps: dict[str, Any] = {
            "some_unique_component_id1": {
                "p": "sensor",
                "device_class": "temperature",
                "unit_of_measurement": "°C",
                "value_template": "{{ value_json.temperature}}",
                "unique_id": "temp01ae_t",
            },
            "some_unique_id2": {
                "p": "sensor",
                "device_class": "humidity",
                "unit_of_measurement": "%",
                "value_template": "{{ value_json.humidity}}",
                "unique_id": "temp01ae_h",
            },
            "bedroom_plug": {
                "p": "switch",
                "~": "bedroom/plug",
                "name": "Plug",
                "cmd_t": "~/set",
                "stat_t": "~/state",
                "uniq_id": "temp01ae_plug",
            },
        }
        if not self.with_switch:
            cmps["bedroom_plug"] = {"p": "switch"}  # removed: its platform only
        cfg = {
            "dev": {
                "ids": "ea334450945afc",
                "name": "Bedroom",
                "mf": "Bla electronics",
                "mdl": "xya",
                "sw": "1.0",
                "sn": "ea334450945afc",
                "hw": "1.0rev2",
                "sa": "Bedroom",
            },
            "o": {"name": "bla2mqtt", "sw": "2.1", "url": "https://bla2mqtt.example.com/support"},
            "cmps": cmps,
            "state_topic": "sensorBedroom/state",
            "qos": 2,
        }
        return [("homeassistant/device/0AFFD2/config", _j(cfg))]

    def states(self) -> list[Message]:
        return [
            ("sensorBedroom/state", _j(self.reading), True),
            ("bedroom/plug/state", self.switch, True),
        ]


# ---------------------------------------------------------------- the runner
@dataclass
class Firmwares:
    """Runs firmwares on a broker: publishes their retained configs and their states, answers
    commands (then publishes their states again). ``commands`` records (topic, payload)."""

    host: str
    port: int
    firmwares: list[Firmware]
    commands: list[tuple[str, str]] = field(default_factory=list)
    _client: aiomqtt.Client | None = None
    _task: asyncio.Task[None] | None = None
    _stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    async def publish(self, topic: str, payload: str, retain: bool = True) -> None:
        assert self._client is not None
        await self._client.publish(topic, payload, qos=1, retain=retain)

    async def announce(self, fw: Firmware) -> None:
        """(Re)publish a firmware's configs (retained)."""
        for topic, payload in fw.configs():
            await self.publish(topic, payload)

    async def report(self, fw: Firmware) -> None:
        """Publish a firmware's state messages."""
        for topic, payload, retain in fw.states():
            await self.publish(topic, payload, retain)

    async def _answer(self) -> None:
        assert self._client is not None
        by_topic = {t: (fw, h) for fw in self.firmwares for t, h in fw.answers.items()}
        async for msg in self._client.messages:
            found = by_topic.get(msg.topic.value)
            if found is None:
                continue
            fw, handler = found
            payload = bytes(msg.payload or b"").decode()
            self.commands.append((msg.topic.value, payload))
            try:
                handler(payload)
            except (ValueError, KeyError, TypeError):
                log.info("%s ignores %r on %s", fw.name, payload, msg.topic.value)
                continue
            await self.report(fw)

    async def __aenter__(self) -> Firmwares:
        try:
            self._client = await self._stack.enter_async_context(
                aiomqtt.Client(self.host, self.port, identifier="hass-firmwares")
            )
            for fw in self.firmwares:
                for topic in fw.answers:
                    await self._client.subscribe(topic, qos=1)
                await self.announce(fw)
                await self.report(fw)
            self._task = asyncio.create_task(self._answer(), name="hass-firmwares")
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
                await self._task
        await self._stack.aclose()
