"""home: smart-home devices over MQTT in the Home Assistant MQTT-discovery convention.

Devices announce themselves with retained JSON configs on
``<prefix>/<component>/<object_id>/config`` (``name``, ``state_topic``, ``command_topic``,
``unit_of_measurement``, ``payload_on``/``payload_off``, ``device.suggested_area``; for
lights ``brightness_command_topic``/``brightness_state_topic``/``brightness_scale``, for
covers ``set_position_topic``/``position_topic``, for a speaker's volume a ``number``; see
``common.py``); states arrive on their state topics. ``set_state`` publishes to the
command topics and waits for the device to report the new state and levels: only then is
the effect ``verified`` (otherwise ``not_verified`` — the gateway then reports ``unknown``
and asks for ``get_state`` first). A call the device cannot take (a level out of 0..100,
a brightness for a cover, a state for a lock) fails before anything is published. Locks
are read-only: no command is ever published to a lock.

Environment: ``YIMI_MQTT_HOST``, ``YIMI_MQTT_PORT``, ``YIMI_MQTT_USER``, ``MQTT_PASSWORD``,
``YIMI_DISCOVERY_PREFIX`` (default ``homeassistant``), ``YIMI_CONFIRM_TIMEOUT`` (s),
``YIMI_AREAS`` (JSON object entity id → area, for devices whose config names none).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiomqtt
from mcp.server.mcpserver import MCPServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import (
    Entity,
    commands,
    configured_areas,
    entity_from_config,
    listing,
    observation,
    receipt,
    set_receipt,
    wanted,
)

PREFIX = os.environ.get("YIMI_DISCOVERY_PREFIX", "homeassistant")
SETTLE_S = 1.0
MAX_CONFIG = 16 * 1024
MAX_TOPICS = 10_000


class Home:
    def __init__(self) -> None:
        self.entities: dict[str, Entity] = {}
        self.by_topic: dict[str, tuple[Entity, str]] = {}
        """reading topic → (entity, role)"""
        self.last_payload: dict[str, str] = {}
        self.areas = configured_areas()
        self.client: aiomqtt.Client | None = None
        self.changed = asyncio.Condition()
        self.connected = asyncio.Event()

    def discovered(self, topic: str, payload: bytes) -> None:
        parts = topic.split("/")
        if len(parts) != 4 or len(payload) > MAX_CONFIG:
            return
        try:
            cfg = json.loads(payload) if payload else None
        except ValueError:
            return
        _, component, object_id, _ = parts
        key = f"{component}.{object_id}"
        if not isinstance(cfg, dict):
            self.entities.pop(key, None)
            return
        e = entity_from_config(component, object_id, cfg, self.areas)
        for t, role in e.reading_topics.items():
            # the last reading on the topic (a state may arrive before its config; a config
            # seen again keeps what the device said meanwhile)
            if t in self.last_payload:
                e.report(role, self.last_payload[t])
            self.by_topic[t] = (e, role)
        self.entities[key] = e

    async def run(self) -> None:
        host = os.environ.get("YIMI_MQTT_HOST", "127.0.0.1")
        port = int(os.environ.get("YIMI_MQTT_PORT", "1883"))
        while True:
            try:
                async with aiomqtt.Client(
                    host,
                    port,
                    username=os.environ.get("YIMI_MQTT_USER") or None,
                    password=os.environ.get("MQTT_PASSWORD") or None,
                    timeout=5,
                ) as client:
                    self.client = client
                    await client.subscribe(f"{PREFIX}/+/+/config", qos=1)
                    await client.subscribe("#", qos=1)
                    self.connected.set()
                    async for msg in client.messages:
                        await self.on_message(msg.topic.value, bytes(msg.payload or b""))
            except aiomqtt.MqttError:
                self.client = None
                self.connected.clear()
                await asyncio.sleep(1.0)

    async def on_message(self, topic: str, payload: bytes) -> None:
        if topic.startswith(PREFIX + "/") and topic.endswith("/config"):
            self.discovered(topic, payload)
        else:
            if len(payload) > 1024:
                return
            text = payload.decode(errors="replace").strip()
            found = self.by_topic.get(topic)
            if found or topic in self.last_payload or len(self.last_payload) < MAX_TOPICS:
                self.last_payload[topic] = text
            if found is None:
                return
            reporter, role = found
            current = self.entities.get(reporter.entity_id)
            if current is None or id(current) != id(reporter):
                return  # the config changed since: a stale mapping
            current.report(role, text)
        async with self.changed:
            self.changed.notify_all()

    async def entity(self, entity_id: str) -> Entity | None:
        """The entity, once discovered and reporting (waits up to ``SETTLE_S`` after start)."""

        def known() -> bool:
            e = self.entities.get(entity_id)
            return e is not None and e.reported

        if not known():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SETTLE_S):
                    await self.connected.wait()
                    async with self.changed:
                        await self.changed.wait_for(known)
        return self.entities.get(entity_id)


HOME = Home()


@contextlib.asynccontextmanager
async def lifespan(_: Any) -> AsyncIterator[None]:
    task = asyncio.create_task(HOME.run())
    try:
        yield None
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


mcp = MCPServer("home", lifespan=lifespan)


@mcp.tool()
async def list_devices() -> dict[str, Any]:
    """Every discovered device: one device.state effect each with name, domain, area, state,
    brightness/position/volume (0-100 %) where the device has them, and features; sensors
    also as values with their units."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(SETTLE_S):
            await HOME.connected.wait()
    await asyncio.sleep(0.2)  # let retained discovery configs arrive after connecting
    return listing(list(HOME.entities.values()))


@mcp.tool()
async def get_state(entity: str) -> dict[str, Any]:
    """The state of one device (e.g. light.kitchen, sensor.living_temperature, lock.front),
    with its brightness, position or volume (0-100 %) where it has one."""
    e = await HOME.entity(entity)
    if e is None:
        return receipt("failed", error=("NOT_FOUND", f"no device {entity}"))
    return observation(e)


@mcp.tool()
async def set_state(
    entity: str,
    state: str = "",
    brightness: int | None = None,
    position: int | None = None,
    volume: int | None = None,
) -> dict[str, Any]:
    """Switch a light, switch or fan "on"/"off"; set a dimmable light's brightness (0-100 %,
    0 is off); open/close a cover ("open"/"closed") or set its position (0 closed .. 100
    open); set a speaker's volume (0-100 %). Locks and sensors are read-only."""
    e = await HOME.entity(entity)
    if e is None:
        return receipt("failed", error=("NOT_FOUND", f"no device {entity}"))
    w = wanted(e, state, brightness, position, volume)
    if isinstance(w, tuple):
        return receipt("failed", error=w)
    if HOME.client is None:
        return receipt("failed", error=("DISCONNECTED", "no connection to the MQTT broker"))
    for topic, payload in commands(e, w):
        await HOME.client.publish(topic, payload, qos=1)
    timeout = float(os.environ.get("YIMI_CONFIRM_TIMEOUT", "3"))
    confirmed = False
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            async with HOME.changed:
                await HOME.changed.wait_for(lambda: w.met_by(e))
                confirmed = True
    return set_receipt(e, w, confirmed, timeout)


if __name__ == "__main__":
    mcp.run("stdio")
