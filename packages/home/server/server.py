"""home: smart-home devices over MQTT in the Home Assistant MQTT-discovery convention.

Devices announce themselves with retained JSON configs on
``<prefix>/<component>/[<node_id>/]<object_id>/config`` or, device-based, on
``<prefix>/device/<object_id>/config`` (abbreviated or not, with ``~``; ``hass.py``); an
empty retained config removes what its topic announced. What each component reads and
takes is in ``common.py``; states arrive on their state topics (one topic may feed several
entities: Zigbee2MQTT's and Tasmota's JSON states), availability on its topics.

``set_state`` publishes to the command topics and waits for the device to report the new
state and levels: only then is the effect ``verified`` (otherwise ``not_verified`` — the
gateway then reports ``unknown`` and asks for ``get_state`` first). A call the device
cannot take (a level out of 0..100, a brightness for a cover, a state for a lock, any
command to an unavailable device) fails before anything is published. Locks are
read-only: no command is ever published to a lock.

Environment: ``YIMI_MQTT_HOST``, ``YIMI_MQTT_PORT``, ``YIMI_MQTT_USER``, ``MQTT_PASSWORD``,
``YIMI_DISCOVERY_PREFIX`` (default ``homeassistant``), ``YIMI_CONFIRM_TIMEOUT`` (s),
``YIMI_AREAS`` (JSON object entity id → area, for devices whose config names none).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiomqtt

from hub.capabilities.package_server import MCPServer
from sync.tasks import TaskOwner

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout: packages.home
from packages.home.common import (
    Entity,
    commands,
    configured_areas,
    listing,
    observation,
    receipt,
    set_receipt,
    wanted,
)
from packages.home.registry import Registry

PREFIX = os.environ.get("YIMI_DISCOVERY_PREFIX", "homeassistant")
SETTLE_S = 1.0


class Home(Registry):
    """The registry (``registry.py``) fed from the broker."""

    def __init__(self) -> None:
        super().__init__(PREFIX, configured_areas())
        self.client: aiomqtt.Client | None = None
        self.changed = asyncio.Condition()
        self.connected = asyncio.Event()
        self.settled = asyncio.Event()
        """the broker has sent every retained message since connecting (our marker, an empty
        message on ``yimi/home-sync/<random>`` published after subscribing, came back after
        them)"""
        self.marker = f"yimi/home-sync/{uuid.uuid4().hex}"
        self.unreachable = False
        """the last try to reach the broker failed: nothing will settle until one succeeds,
        so a listing answers at once with what is known rather than waiting ``SETTLE_S``"""

    async def wait_settled(self) -> None:
        """Until the retained messages are in: at most ``SETTLE_S``, and not at all while
        the broker is out of reach (nor past the moment a try to reach it fails)."""
        if self.unreachable:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(SETTLE_S):
                await self.settled.wait()

    # ---------------------------------------------------------------- the broker
    async def run(self) -> None:
        host = os.environ.get("YIMI_MQTT_HOST", "127.0.0.1")
        port = int(os.environ.get("YIMI_MQTT_PORT", "1883"))
        fallback: asyncio.TimerHandle | None = None
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
                    self.unreachable = False
                    self.settled.clear()
                    await client.subscribe(f"{PREFIX}/#", qos=1)
                    await client.subscribe("#", qos=1)
                    self.connected.set()
                    await client.publish(self.marker, b"", qos=1)
                    # a broker whose ACL drops the marker: settled after SETTLE_S anyway
                    fallback = asyncio.get_running_loop().call_later(SETTLE_S, self.settled.set)
                    async for msg in client.messages:
                        await self.on_message(msg.topic.value, bytes(msg.payload or b""))
            except aiomqtt.MqttError:
                self.client = None
                self.connected.clear()
                self.unreachable = True
                # nothing more comes until a try succeeds (which clears ``settled``): a
                # listing or lookup already waiting answers now with what is known, not
                # after SETTLE_S (the hub's slot-list read at its start waited for that)
                self.settled.set()
                async with self.changed:
                    self.changed.notify_all()
                await asyncio.sleep(1.0)
            finally:
                if fallback is not None:
                    fallback.cancel()

    async def on_message(self, topic: str, payload: bytes) -> None:
        if topic == self.marker:
            self.settled.set()
            return
        if self.take(topic, payload):
            async with self.changed:
                self.changed.notify_all()

    async def entity(self, entity_id: str) -> Entity | None:
        """The entity, once the retained messages are in (a config arriving later is waited
        for: up to ``SETTLE_S`` in all)."""
        if self.unreachable:
            return self.entities.get(entity_id)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(SETTLE_S):
                await self.settled.wait()
                async with self.changed:
                    await self.changed.wait_for(
                        lambda: entity_id in self.entities or self.unreachable
                    )
        return self.entities.get(entity_id)


HOME = Home()
STOP_S = 2.0
"""seconds the broker connection has to end when the server stops (cancelled once more
half-way: :func:`sync.tasks.stop_tasks`)"""


@contextlib.asynccontextmanager
async def lifespan(_: Any) -> AsyncIterator[None]:
    # an owned task, stopped as the hub stops its own: Python 3.11's asyncio.wait_for (in
    # aiomqtt's subscribe and publish) drops a cancellation that lands as the broker
    # answers, and a connection cancelled only once would then run on, the server never end
    owner = TaskOwner("home")
    owner.spawn(HOME.run(), "broker")
    try:
        yield None
    finally:
        await owner.close(STOP_S)


mcp = MCPServer("home", lifespan=lifespan)


@mcp.tool()
async def list_devices() -> dict[str, Any]:
    """Every discovered device: one device.state effect each with name, domain, area, state
    ("unknown" until it reports one, "unavailable" when offline), brightness/position/volume
    (0-100 %) and a thermostat's temperatures where the device has them, and features;
    sensors and thermostats also as values with their units."""
    await HOME.wait_settled()  # the retained configs and states first
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
    temperature: float | None = None,
) -> dict[str, Any]:
    """Switch a light, switch or fan "on"/"off"; set a dimmable light's brightness (0-100 %,
    0 is off); open/close a cover ("open"/"closed") or set its position (0 closed .. 100
    open); set a speaker's volume (0-100 %); set a thermostat's temperature (its setpoint,
    in its unit). Locks and sensors are read-only."""
    e = await HOME.entity(entity)
    if e is None:
        return receipt("failed", error=("NOT_FOUND", f"no device {entity}"))
    w = wanted(e, state, brightness, position, volume, temperature)
    if isinstance(w, tuple):
        return receipt("failed", error=w)
    messages = commands(e, w)
    if any(payload is None for _, payload in messages):
        why = f"{entity}: its command template gives no payload: nothing was sent"
        return receipt("failed", error=("BAD_TEMPLATE", why))
    if HOME.client is None:
        return receipt("failed", error=("DISCONNECTED", "no connection to the MQTT broker"))
    for topic, payload in messages:
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
