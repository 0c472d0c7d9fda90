"""home: smart-home devices over MQTT in the Home Assistant MQTT-discovery convention.

Devices announce themselves with retained JSON configs on
``<prefix>/<component>/<object_id>/config`` (``name``, ``state_topic``, ``command_topic``,
``unit_of_measurement``, ``payload_on``/``payload_off``); states arrive on their state
topics. ``set_state`` publishes to the command topic and waits for the device to report the
new state: only then is the effect ``verified`` (otherwise ``not_verified`` — the gateway
then reports ``unknown`` and asks for ``get_state`` first). Locks are read-only: no command
is ever published to a lock.

Environment: ``YIMI_MQTT_HOST``, ``YIMI_MQTT_PORT``, ``YIMI_MQTT_USER``, ``MQTT_PASSWORD``,
``YIMI_DISCOVERY_PREFIX`` (default ``homeassistant``), ``YIMI_CONFIRM_TIMEOUT`` (s).
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
from common import READ_ONLY, SWITCHABLE, Entity, listing, observation, receipt

PREFIX = os.environ.get("YIMI_DISCOVERY_PREFIX", "homeassistant")
SETTLE_S = 1.0
MAX_CONFIG = 16 * 1024
MAX_TOPICS = 10_000


class Home:
    def __init__(self) -> None:
        self.entities: dict[str, Entity] = {}
        self.by_state_topic: dict[str, Entity] = {}
        self.last_payload: dict[str, str] = {}
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
        old = self.entities.get(key)
        if old is not None:
            e.state = old.state
        if e.state is None and e.state_topic in self.last_payload:
            e.state = self.last_payload[e.state_topic]
        self.entities[key] = e
        if e.state_topic:
            self.by_state_topic[e.state_topic] = e

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
            if topic in self.last_payload or len(self.last_payload) < MAX_TOPICS:
                self.last_payload[topic] = text  # a state may arrive before its config
            e = self.by_state_topic.get(topic)
            if e is None:
                return
            e.state = text
        async with self.changed:
            self.changed.notify_all()

    async def entity(self, entity_id: str) -> Entity | None:
        """The entity, once discovered and reporting (waits up to ``SETTLE_S`` after start)."""

        def known() -> bool:
            e = self.entities.get(entity_id)
            return e is not None and (e.state is not None or not e.state_topic)

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
    """Every discovered device with its state (sensors with their values and units)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(SETTLE_S):
            await HOME.connected.wait()
    await asyncio.sleep(0.2)  # let retained discovery configs arrive after connecting
    return listing(list(HOME.entities.values()))


@mcp.tool()
async def get_state(entity: str) -> dict[str, Any]:
    """The state of one device (e.g. light.kitchen, sensor.living_temperature, lock.front)."""
    e = await HOME.entity(entity)
    if e is None:
        return receipt("failed", error=("NOT_FOUND", f"no device {entity}"))
    return observation(e)


@mcp.tool()
async def set_state(entity: str, state: str) -> dict[str, Any]:
    """Switch a light, switch or fan "on" or "off". Locks are read-only."""
    e = await HOME.entity(entity)
    if e is None:
        return receipt("failed", error=("NOT_FOUND", f"no device {entity}"))
    if e.component in READ_ONLY or e.component not in SWITCHABLE or not e.command_topic:
        return receipt("failed", error=("READ_ONLY", f"{entity} is read-only"))
    if state not in ("on", "off"):
        return receipt("failed", error=("BAD_STATE", "state must be on or off"))
    if HOME.client is None:
        return receipt("failed", error=("DISCONNECTED", "no connection to the MQTT broker"))
    payload = e.payload_on if state == "on" else e.payload_off
    await HOME.client.publish(e.command_topic, payload, qos=1)
    timeout = float(os.environ.get("YIMI_CONFIRM_TIMEOUT", "3"))
    confirmed = False
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            async with HOME.changed:
                await HOME.changed.wait_for(lambda: e.readable_state() == state)
                confirmed = True
    return receipt(
        "succeeded",
        effects=[
            {
                "kind": "device.set",
                "state": "verified" if confirmed else "not_verified",
                "target": e.entity_id,
                "fields": {"name": e.name, "state": state},
            }
        ],
        unknowns=[] if confirmed else [f"{e.name} did not report {state} in {timeout:g} s"],
    )


if __name__ == "__main__":
    mcp.run("stdio")
