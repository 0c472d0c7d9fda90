"""Fakes of the outside world for contract runs and tests, speaking the real protocols.

- :class:`SmtpWorld` — a real local SMTP server (aiosmtpd) on a loopback port that keeps
  what it receives; ``delay`` makes it slow to accept a message (timeouts).
- :class:`MqttHomeWorld` — a mosquitto on a loopback port (generated config, anonymous,
  loopback only) and :class:`FakeHomeDevices`, a Home Assistant MQTT-discovery device set
  (kitchen light, kettle switch, temperature sensor, front-door lock, dimmable living-room
  lamp, bedroom blinds cover, living-room speaker volume) that answers commands by
  reporting its new state.

Both are async context managers that own what they start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from types import TracebackType
from typing import Any

import aiomqtt

from hub.capabilities.errors import CapabilityError
from hub.mesh.broker import accepts, die_with_parent, find_mosquitto
from worlds import ports

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- SMTP
def smtp_controller(handler: Any, host: str = "127.0.0.1") -> Any:
    """An aiosmtpd ``Controller`` serving ``handler`` on port 0 of ``host``; once started, its
    ``port`` is the port the server got (no port is chosen before the server binds)."""
    from aiosmtpd.controller import Controller

    class PortZeroController(Controller):  # type: ignore[misc]
        def _trigger_server(self) -> None:
            # The hook start() calls once the server is bound: learn the port, then let it
            # make its first connection (which creates the SMTP protocol) to that port.
            server = self.server
            assert isinstance(server, asyncio.Server)
            self.port = int(server.sockets[0].getsockname()[1])
            super()._trigger_server()

    return PortZeroController(handler, hostname=host, port=0)


@dataclass
class Received:
    sender: str
    recipients: list[str]
    message: Message


class _Handler:
    def __init__(self, world: SmtpWorld) -> None:
        self.world = world

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.world.delay:
            await asyncio.sleep(self.world.delay)
        msg = message_from_bytes(envelope.content)
        with self.world.lock:
            self.world.received.append(Received(envelope.mail_from, list(envelope.rcpt_tos), msg))
        self.world.arrived.set()
        return "250 OK message accepted"


class SmtpWorld:
    """A local SMTP server (aiosmtpd in its own thread) on 127.0.0.1."""

    def __init__(self, *, delay: float = 0.0) -> None:
        self.delay = delay
        self.host = "127.0.0.1"
        self.port = 0
        """The server's port, known once entered."""
        self.received: list[Received] = []
        self.lock = threading.Lock()
        self.arrived = threading.Event()
        self._controller: Any = None

    def env(self) -> dict[str, str]:
        return {
            "YIMI_SMTP_HOST": self.host,
            "YIMI_SMTP_PORT": str(self.port),
            "YIMI_SMTP_FROM": "assistant@home.test",
        }

    def messages(self) -> list[Received]:
        with self.lock:
            return list(self.received)

    async def __aenter__(self) -> SmtpWorld:
        self._controller = smtp_controller(_Handler(self), self.host)
        await asyncio.to_thread(self._controller.start)
        self.port = self._controller.port
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._controller is not None:
            await asyncio.to_thread(self._controller.stop)


# ---------------------------------------------------------------- MQTT home
DEVICES: list[dict[str, Any]] = [
    {
        "component": "light",
        "object_id": "kitchen",
        "name": "Kitchen light",
        "state": "OFF",
        "command": True,
        "area": "Kitchen",
    },
    {
        "component": "switch",
        "object_id": "kettle",
        "name": "Kettle",
        "state": "OFF",
        "command": True,
        "area": "Kitchen",
    },
    {
        "component": "sensor",
        "object_id": "living_temperature",
        "name": "Living room temperature",
        "state": "21.5",
        "unit": "°C",
        "area": "Living room",
    },
    {
        "component": "lock",
        "object_id": "front_door",
        "name": "Front door",
        "state": "LOCKED",
        "command": True,
        "area": "Hallway",
    },
    {
        "component": "light",
        "object_id": "living_room_lamp",
        "name": "Living room lamp",
        "state": "OFF",
        "command": True,
        "brightness": 153,
        "brightness_scale": 255,
        "area": "Living room",
    },
    {
        "component": "cover",
        "object_id": "bedroom_blinds",
        "name": "Bedroom blinds",
        "state": "closed",
        "command": True,
        "position": 0,
        "area": "Bedroom",
    },
    {
        "component": "number",
        "object_id": "living_room_speaker_volume",
        "name": "Living room speaker",
        "state": "30",
        "command": True,
        "icon": "mdi:volume-high",
        "min": 0,
        "max": 100,
        "unit": "%",
        "area": "Living room",
    },
]
"""Home Assistant MQTT-discovery devices (default schemas): a device dict has
``component``, ``object_id``, ``name``, ``state`` (its state-topic payload), optionally
``command`` (it takes commands), ``unit``, ``area`` (``device.suggested_area``), a light's
``brightness`` + ``brightness_scale`` (dimmable), a cover's ``position`` (0 closed .. 100
open; ``set_position_topic``), a number's ``min``/``max``/``icon`` (a speaker volume is a
``number`` with ``icon: mdi:volume-high``: HA's MQTT discovery has no media player);
``schema: "json"`` makes a light speak HA's JSON light schema."""


def _cover_state(position: int) -> str:
    return "closed" if position <= 0 else "open"


@dataclass
class FakeHomeDevices:
    """Home Assistant-style devices on MQTT: retained discovery configs and states; they
    obey commands by reporting the new state (unless ``deaf``): a light its state and
    brightness (a brightness command turns it on), a cover its state and position, a
    number its value (clamped to its range). Locks never obey."""

    host: str
    port: int
    prefix: str = "homeassistant"
    devices: list[dict[str, Any]] = field(default_factory=lambda: [dict(d) for d in DEVICES])
    deaf: set[str] = field(default_factory=set)
    """entity ids that ignore commands (their state never confirms)"""
    commands: list[tuple[str, str]] = field(default_factory=list)
    """(entity id, payload) of every command received; a level command's payload is
    ``brightness=N`` / ``position=N`` (device scale)"""
    _task: asyncio.Task[None] | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def _base(self, d: dict[str, Any]) -> str:
        return f"yimi-fake/{d['component']}/{d['object_id']}"

    def _topics(self, d: dict[str, Any]) -> tuple[str, str, str]:
        base = self._base(d)
        return (
            f"{self.prefix}/{d['component']}/{d['object_id']}/config",
            f"{base}/state",
            f"{base}/set",
        )

    def _config(self, d: dict[str, Any]) -> tuple[dict[str, Any], dict[str, tuple[str, str]]]:
        """(discovery config, command topic → (role, topic it reports on))"""
        _, state_t, command_t = self._topics(d)
        base = self._base(d)
        cfg: dict[str, Any] = {
            "name": d["name"],
            "unique_id": d["object_id"],
            "state_topic": state_t,
        }
        listens: dict[str, tuple[str, str]] = {}
        if d.get("unit"):
            cfg["unit_of_measurement"] = d["unit"]
        if d.get("area"):
            cfg["device"] = {
                "identifiers": [f"yimi-fake-{d['object_id']}"],
                "name": d["name"],
                "suggested_area": d["area"],
            }
        if d.get("command"):
            cfg["command_topic"] = command_t
            listens[command_t] = ("state", state_t)
        if d.get("schema") == "json":  # HA's JSON light schema: one JSON message each way
            cfg.update(schema="json", brightness="brightness" in d)
            cfg["brightness_scale"] = d.get("brightness_scale", 255)
            listens[command_t] = ("json", state_t)
        elif d["component"] == "light" and "brightness" in d:
            cfg["brightness_command_topic"] = f"{base}/brightness/set"
            cfg["brightness_state_topic"] = f"{base}/brightness"
            cfg["brightness_scale"] = d.get("brightness_scale", 255)
            cfg["on_command_type"] = "first"  # on, then the level (HA's default is last)
            listens[cfg["brightness_command_topic"]] = ("brightness", cfg["brightness_state_topic"])
        if d["component"] == "cover" and "position" in d:
            cfg["set_position_topic"] = f"{base}/position/set"
            cfg["position_topic"] = f"{base}/position"
            listens[cfg["set_position_topic"]] = ("position", cfg["position_topic"])
        if d["component"] == "number":
            cfg.update({k: d[k] for k in ("min", "max", "icon") if k in d})
        return cfg, listens

    async def _report(self, c: aiomqtt.Client, d: dict[str, Any]) -> None:
        """levels first, then the state (a state change is the last thing a device says)"""
        base = self._base(d)
        if d.get("schema") == "json":
            body = {
                "state": d["state"],
                **({"brightness": d["brightness"]} if "brightness" in d else {}),
            }
            await c.publish(f"{base}/state", json.dumps(body), qos=1, retain=True)
            return
        if d["component"] == "light" and "brightness" in d:
            await c.publish(f"{base}/brightness", str(d["brightness"]), qos=1, retain=True)
        if d["component"] == "cover" and "position" in d:
            await c.publish(f"{base}/position", str(d["position"]), qos=1, retain=True)
        await c.publish(f"{base}/state", str(d["state"]), qos=1, retain=True)

    @staticmethod
    def _obey(d: dict[str, Any], role: str, payload: str) -> None:
        kind = d["component"]
        if role == "json":
            body = json.loads(payload)
            if not isinstance(body, dict):
                raise ValueError("not a JSON object")
            if "brightness" in body and "brightness" in d:
                d["brightness"] = int(body["brightness"])
            d["state"] = str(body.get("state", d["state"]))
        elif role == "brightness":
            d["brightness"] = max(0, min(int(d.get("brightness_scale", 255)), int(payload)))
            d["state"] = "ON" if d["brightness"] > 0 else "OFF"
        elif role == "position":
            d["position"] = max(0, min(100, int(payload)))
            d["state"] = _cover_state(d["position"])
        elif kind == "cover":
            if payload in ("OPEN", "CLOSE"):
                d["position"] = 100 if payload == "OPEN" else 0
                d["state"] = "open" if payload == "OPEN" else "closed"
        elif kind == "number":
            value = float(payload)
            d["state"] = str(round(max(d.get("min", 1), min(d.get("max", 100), value))))
        else:
            d["state"] = payload

    async def _run(self) -> None:
        async with aiomqtt.Client(self.host, self.port, identifier="fake-home-devices") as c:
            by_command: dict[str, tuple[dict[str, Any], str]] = {}
            for d in self.devices:
                cfg, listens = self._config(d)
                for topic, (role, _) in listens.items():
                    by_command[topic] = (d, role)
                await c.publish(self._topics(d)[0], json.dumps(cfg), qos=1, retain=True)
                await self._report(c, d)
            for topic in by_command:
                await c.subscribe(topic, qos=1)
            self.ready.set()
            async for msg in c.messages:
                found = by_command.get(msg.topic.value)
                if found is None:
                    continue
                d, role = found
                payload = bytes(msg.payload or b"").decode()
                entity = f"{d['component']}.{d['object_id']}"
                self.commands.append((entity, payload if role == "state" else f"{role}={payload}"))
                if entity in self.deaf or d["component"] == "lock":
                    continue
                try:
                    self._obey(d, role, payload)
                except ValueError:
                    log.info("fake %s ignores %r on %s", entity, payload, msg.topic.value)
                    continue
                await self._report(c, d)

    async def __aenter__(self) -> FakeHomeDevices:
        self._task = asyncio.create_task(self._run(), name="fake-home-devices")
        done, _ = await asyncio.wait(
            {self._task, asyncio.ensure_future(self.ready.wait())},
            timeout=10,
            return_when=asyncio.FIRST_COMPLETED,
        )
        if self._task in done:
            self._task.result()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
                await self._task


class Mosquitto:
    """A throwaway mosquitto on 127.0.0.1 (anonymous, no persistence) for tests."""

    def __init__(self, workdir: Path | None = None) -> None:
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="yimi-mosq-")
        self.workdir = Path(workdir or self._tmp.name)  # type: ignore[union-attr]
        self.host, self.port = "127.0.0.1", ports.port()
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int:
        """the broker's process id (to stop and continue it)"""
        assert self._proc is not None, "not started"
        return self._proc.pid

    async def __aenter__(self) -> Mosquitto:
        conf = self.workdir / "mosquitto.conf"
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf.write_text(
            f"listener {self.port} {self.host}\nallow_anonymous true\npersistence false\n"
            f"log_dest file {self.workdir / 'mosquitto.log'}\n"
        )
        self._proc = await asyncio.create_subprocess_exec(
            find_mosquitto(),
            "-c",
            str(conf),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            preexec_fn=die_with_parent(os.getpid()),
        )
        for _ in range(200):
            if await accepts(self.host, self.port):
                return self
            if self._proc.returncode is not None:
                break
            await asyncio.sleep(0.025)
        await self.__aexit__(None, None, None)
        raise CapabilityError("world.failed", what="mosquitto", reason="did not accept connections")

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.terminate()
            try:
                async with asyncio.timeout(5):
                    await self._proc.wait()
            except TimeoutError:
                self._proc.kill()
                await self._proc.wait()
        if self._tmp is not None:
            self._tmp.cleanup()


class MqttHomeWorld:
    """mosquitto + :class:`FakeHomeDevices`."""

    def __init__(self, **devices: Any) -> None:
        self.broker = Mosquitto()
        self._kw = devices
        self.devices: FakeHomeDevices | None = None
        self._stack = contextlib.AsyncExitStack()

    def env(self) -> dict[str, str]:
        return {
            "YIMI_MQTT_HOST": self.broker.host,
            "YIMI_MQTT_PORT": str(self.broker.port),
            "YIMI_CONFIRM_TIMEOUT": "3",
        }

    async def __aenter__(self) -> MqttHomeWorld:
        try:
            await self._stack.enter_async_context(self.broker)
            self.devices = await self._stack.enter_async_context(
                FakeHomeDevices(self.broker.host, self.broker.port, **self._kw)
            )
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stack.aclose()


WORLDS: dict[str, Any] = {
    "smtp": SmtpWorld,
    "mqtt_home": MqttHomeWorld,
}
"""what a contract's ``needs:`` may name"""


# ---------------------------------------------------------------- the Mac, locally
class LocalExecutorWorld:
    """The Mac's own executor (``edge_agent.executor``) behind a local socket that speaks
    the hub's executor-bridge protocol, with a temporary allowed folder (``notes.txt``)."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="yimi-mac-")
        base = Path(self._tmp.name)
        self.root = base / "Documents"
        self.state = base / "state"
        self.socket = base / "bridge.sock"
        self._server: asyncio.AbstractServer | None = None

    def env(self) -> dict[str, str]:
        return {
            "YIMI_EXECUTOR_SOCKET": str(self.socket),
            "YIMI_DEVICE": "local",
            "YIMI_MAC_ROOT": str(self.root),
        }

    async def __aenter__(self) -> LocalExecutorWorld:
        from edge_agent.executor import Executor
        from hub.gateway.executor_bridge import result_dict
        from protos import executor_pb2

        self.root.mkdir(parents=True)
        self.state.mkdir()
        (self.root / "notes.txt").write_text("hello from the mac\n")
        policy = self.state.parent / "executor.yaml"
        policy.write_text(json.dumps({"roots": [str(self.root)]}))
        executor = Executor(self.state, policy)

        async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            body = json.loads(await reader.readline())
            req = executor_pb2.ExecRequest(
                request_id="local",
                op=body.get("op", ""),
                command=body.get("command", ""),
                args=body.get("args", []),
                path=body.get("path", ""),
                worldline_id=body.get("worldline_id", ""),
            )
            res = await executor.handle(req)
            writer.write(json.dumps(result_dict(res)).encode() + b"\n")
            await writer.drain()
            writer.close()

        self._server = await asyncio.start_unix_server(client, path=str(self.socket))
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self._tmp.cleanup()


WORLDS["mac_local"] = LocalExecutorWorld


# ---------------------------------------------------------------- the sandbox shop
def sandbox_shop() -> Any:
    """The sandbox payment provider (``packages.errands.sandbox``): a local HTTP shop, no
    money. The errands package lives in the checkout, beside this one (as its servers do,
    the checkout goes on ``sys.path`` when it is not there yet)."""
    checkout = str(Path(__file__).resolve().parent.parent)
    if checkout not in sys.path:
        sys.path.append(checkout)
    from packages.errands.sandbox import SandboxShop

    return SandboxShop()


WORLDS["sandbox_shop"] = sandbox_shop


# ---------------------------------------------------------------- a workspace folder
class WorkspaceWorld:
    """A temporary owner's workspace (``notes.txt`` in it) for the worldlines package."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="yimi-workspace-")
        self.root = Path(self._tmp.name) / "ws"

    def env(self) -> dict[str, str]:
        return {"YIMI_WORKSPACE": str(self.root)}

    async def __aenter__(self) -> WorkspaceWorld:
        self.root.mkdir()
        (self.root / "notes.txt").write_text("buy milk\n")
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._tmp.cleanup()


WORLDS["workspace"] = WorkspaceWorld
