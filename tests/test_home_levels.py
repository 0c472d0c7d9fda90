"""The home package's levels and areas: through the gateway against the real server, a real
mosquitto and Home Assistant-style MQTT-discovery devices (worlds.fakes) — list devices
with domain, area, state and levels; dim a lamp, position the blinds, set the speaker's
volume, each verified by the device's own read-back; values the device cannot take fail
before anything is sent. Plus the pure rules of ``packages/home/common.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hub.gateway import ToolCall
from hub.gateway.facts import facts_of
from hub.gateway.receipts import Receipt
from packages.home.common import Entity, Wanted, commands, entity_from_config, wanted
from tests.gateway_kit import OWNER, RecordingCourier, call, gateway
from worlds.fakes import DEVICES, MqttHomeWorld

LAMP = "light.living_room_lamp"
BLINDS = "cover.bedroom_blinds"
SPEAKER = "number.living_room_speaker_volume"


def by_target(r: Receipt) -> dict[str, dict[str, Any]]:
    return {e.target: e.fields for e in r.effects}


def asked(entity: str, **args: Any) -> dict[str, Any]:
    return {"entity": entity, **args, "owner_requested": True}


def setting(args: dict[str, Any], call_id: str, task: str = "t1") -> ToolCall:
    return call("home", "set_state", args, call_id, task)


async def test_levels_areas_and_bad_values_against_mqtt_devices(tmp_path: Path) -> None:
    unplaced = {
        "component": "switch",
        "object_id": "fan_plug",
        "name": "Fan plug",
        "state": "OFF",
        "command": True,
    }
    desk = {  # Home Assistant's JSON light schema
        "component": "light",
        "object_id": "desk",
        "name": "Desk lamp",
        "state": "OFF",
        "command": True,
        "schema": "json",
        "brightness": 0,
        "area": "Study",
    }
    devices = [dict(d) for d in DEVICES] + [unplaced, desk]
    areas = json.dumps({"switch.fan_plug": "Study"})
    courier = RecordingCourier()
    async with (
        MqttHomeWorld(devices=devices, deaf={"switch.fan_plug"}) as world,
        gateway(
            tmp_path,
            "home",
            env={**world.env(), "YIMI_CONFIRM_TIMEOUT": "1", "YIMI_AREAS": areas},
            courier=courier,
        ) as gw,
    ):
        assert world.devices is not None
        sent = world.devices.commands
        listed = await gw.call(call("home", "list_devices", {}, "c1"), OWNER)
        assert listed.status == "succeeded", listed
        seen = by_target(listed)
        assert seen[LAMP] == {
            "name": "Living room lamp",
            "domain": "light",
            "area": "Living room",
            "state": "off",
            "brightness": 60,
            "features": ["on_off", "brightness"],
        }
        assert seen[BLINDS]["state"] == "closed" and seen[BLINDS]["position"] == 0
        assert seen[BLINDS]["features"] == ["open_close", "position"]
        assert (seen[SPEAKER]["domain"], seen[SPEAKER]["volume"]) == ("media_player", 30)
        assert seen["light.kitchen"]["area"] == "Kitchen"
        assert seen["lock.front_door"] | {"features": []} == {
            "name": "Front door",
            "domain": "lock",
            "area": "Hallway",
            "state": "locked",
            "features": [],
        }
        assert seen["sensor.living_temperature"]["state"] == "21.5 °C"
        assert seen["switch.fan_plug"]["area"] == "Study"  # configured, not discovered

        # an unrequested dimming is a card whose preview names the level
        card = await gw.call(setting({"entity": LAMP, "brightness": 40}, "c2"), OWNER)
        assert card.status == "waiting" and sent == []
        assert "brightness: 40" in courier.shown[0].preview

        dim = await gw.call(setting(asked(LAMP, brightness=40), "c3", "t2"), OWNER)
        assert dim.status == "succeeded" and dim.effects[0].state == "verified", dim
        assert dim.effects[0].fields["brightness"] == 40 and dim.effects[0].fields["state"] == "on"
        assert sent == [(LAMP, "ON"), (LAMP, "brightness=102")]  # 40 % of 255
        assert any(f.text == "Set Living room lamp to brightness 40 %." for f in facts_of(dim))
        back = await gw.call(call("home", "get_state", {"entity": LAMP}, "c4", "t2"), OWNER)
        assert by_target(back)[LAMP]["brightness"] == 40

        half = await gw.call(setting(asked(BLINDS, position=50), "c5", "t3"), OWNER)
        assert half.status == "succeeded" and half.effects[0].fields["state"] == "open", half
        shut = await gw.call(setting(asked(BLINDS, state="closed"), "c6", "t4"), OWNER)
        assert shut.status == "succeeded" and shut.effects[0].fields["position"] == 0, shut
        assert sent[-2:] == [(BLINDS, "position=50"), (BLINDS, "CLOSE")]

        loud = await gw.call(setting(asked(SPEAKER, volume=25), "c7", "t5"), OWNER)
        assert loud.status == "succeeded" and loud.effects[0].state == "verified", loud
        assert sent[-1] == (SPEAKER, "25")
        back = await gw.call(call("home", "get_state", {"entity": SPEAKER}, "c8", "t5"), OWNER)
        assert by_target(back)[SPEAKER]["volume"] == 25

        json_dim = await gw.call(setting(asked("light.desk", brightness=50), "c10", "t7"), OWNER)
        assert json_dim.status == "succeeded" and json_dim.effects[0].state == "verified"
        assert sent[-1] == ("light.desk", 'json={"state": "ON", "brightness": 128}')
        back = await gw.call(
            call("home", "get_state", {"entity": "light.desk"}, "c11", "t7"), OWNER
        )
        assert by_target(back)["light.desk"] | {"features": []} == {
            "name": "Desk lamp",
            "domain": "light",
            "area": "Study",
            "state": "on",
            "brightness": 50,
            "features": [],
        }

        # what a device cannot take fails with a clear code, and nothing is sent
        before = len(sent)
        bad = [
            (asked(LAMP, brightness=150), "BAD_VALUE", "0 to 100"),
            (asked(LAMP, position=50), "BAD_VALUE", "has no position"),
            (asked("light.kitchen", brightness=50), "BAD_VALUE", "not dimmable"),
            (asked(LAMP, volume=10), "BAD_VALUE", "has no volume"),
            (asked(BLINDS, position=101), "BAD_VALUE", "0 to 100"),
            (asked(SPEAKER, volume=-1), "BAD_VALUE", "0 to 100"),
            (asked(BLINDS, state="on"), "BAD_STATE", "open or closed"),
            (asked(LAMP, state="off", brightness=30), "BAD_VALUE", "contradicts"),
            (asked(LAMP), "BAD_VALUE", "give a state or a level"),
            (asked("sensor.living_temperature", state="on"), "READ_ONLY", "read-only"),
        ]
        for i, (args, code, why) in enumerate(bad):
            r = await gw.call(setting(args, f"b{i}", f"tb{i}"), OWNER)
            assert (r.status, r.error_code) == ("failed", code), (args, r)
            assert why in r.error, (args, r.error)
        assert len(sent) == before

        # a device that does not confirm: not verified → unknown, check with get_state
        deaf = await gw.call(setting(asked("switch.fan_plug", state="on"), "c9", "t6"), OWNER)
        assert deaf.status == "unknown" and deaf.next.check_with == "get_state", deaf


def lamp(scale: int = 255) -> Entity:
    cfg = {
        "name": "Lamp",
        "command_topic": "l/set",
        "state_topic": "l/state",
        "brightness_command_topic": "l/b/set",
        "brightness_state_topic": "l/b",
        "brightness_scale": scale,
        "device": {"suggested_area": "Den"},
    }
    return entity_from_config("light", "lamp", cfg, {})


def test_levels_convert_to_each_devices_scale() -> None:
    e = lamp(scale=100)
    w = wanted(e, "", brightness=40)
    # Home Assistant's default on_command_type (last): the level, then on
    assert w == Wanted("on", 40) and commands(e, w) == [("l/b/set", "40"), ("l/set", "ON")]
    e.report("state", "ON")
    e.report("brightness", "39")  # within a point of rounding
    assert w.met_by(e) and e.area == "Den"
    # brightness 0 is off, as in Home Assistant
    assert wanted(e, "", brightness=0) == Wanted("off")
    # an inverted cover (100 closed, 0 open) and a 0..30 volume
    cover = entity_from_config(
        "cover",
        "shade",
        {
            "command_topic": "s/set",
            "set_position_topic": "s/p/set",
            "position_topic": "s/p",
            "position_open": 0,
            "position_closed": 100,
        },
        {"cover.shade": "Office"},
    )
    w = wanted(cover, "", position=25)
    assert isinstance(w, Wanted) and commands(cover, w) == [("s/p/set", "75")]
    cover.report("position", "75")
    assert cover.position == 25 and cover.readable_state() == "open" and w.met_by(cover)
    assert cover.area == "Office"
    speaker = entity_from_config(
        "number",
        "tv_volume",
        {"command_topic": "v/set", "state_topic": "v", "min": 0, "max": 30},
        {},
    )
    assert speaker.domain == "media_player"
    w = wanted(speaker, "", volume=50)
    assert isinstance(w, Wanted) and commands(speaker, w) == [("v/set", "15")]
    # a plain number is not a volume
    other = entity_from_config("number", "threshold", {"command_topic": "t/set"}, {})
    assert other.domain == "number" and wanted(other, "", volume=5)[0] == "BAD_VALUE"  # type: ignore[index]


def test_levels_must_be_whole_numbers_from_0_to_100() -> None:
    e = lamp()
    for value in (150, -1, 40.5, True, "40"):
        got = wanted(e, "", brightness=value)
        assert isinstance(got, tuple) and got[0] == "BAD_VALUE", value
    assert wanted(e, "", brightness=40.0) == Wanted("on", 40)
