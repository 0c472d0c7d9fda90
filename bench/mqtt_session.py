"""Bench: what one MQTT session costs per message — :class:`sync.mqtt.MqttSession` (every
node's session: the hub's, each device's) against aiomqtt's own client, same broker, same run.

Run::

    .venv/bin/python bench/mqtt_session.py [--trips 3000] [--blocks 5] [--quick]

One process, one throwaway mosquitto on loopback (plaintext: the crypto of TLS is not what
is measured). Each *trip* is a QoS 1 publish to a topic the same client subscribes to: it
returns when the broker's PUBACK came, then the copy the broker sends back is received (and
its PUBACK sent) — the packets a node handles for one message out and one in. Measured per
trip: the process's CPU time (``time.process_time``) and the wall time. The session and the
plain aiomqtt client (``publish`` and ``client.messages``, as aiomqtt's docs use it) run in
alternating blocks so the machine's drift hits both alike; medians of the blocks and their
ratio are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiomqtt

from sync.mqtt import MqttSession
from sync.tls import ClientTls
from worlds.fakes import Mosquitto

TOPIC = "bench/session"
WARMUP = 200
"""trips before each client's first block (not measured)"""
PAYLOAD = b"x" * 200
"""bytes of each message (about a sealed ACK's size)"""

Trip = Callable[[bytes], Awaitable[None]]


async def block(trip: Trip, count: int, tag: str) -> tuple[float, float]:
    """(CPU µs, wall µs) per trip over ``count`` trips."""
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(count):
        await trip(b"%s %d " % (tag.encode(), i) + PAYLOAD)
    return (
        (time.process_time() - cpu) / count * 1e6,
        (time.perf_counter() - wall) / count * 1e6,
    )


async def bench(trips: int, blocks: int) -> None:
    async with Mosquitto() as broker:
        received: asyncio.Queue[bytes] = asyncio.Queue()

        async def on_message(message: aiomqtt.Message) -> None:
            received.put_nowait(message.payload if isinstance(message.payload, bytes) else b"")

        async def target() -> tuple[str, int]:
            return broker.host, broker.port

        session = MqttSession(
            target=target,
            username="bench",
            password="x",
            identifier="bench-session",
            subscriptions=[TOPIC],
            on_message=on_message,
            tls=ClientTls.plaintext(""),
        )
        plain = aiomqtt.Client(broker.host, broker.port, identifier="bench-plain", timeout=5.0)
        async with session, plain:
            async with asyncio.timeout(20):
                await session.connected.wait()
            await plain.subscribe(TOPIC + "/plain", qos=1)
            plain_got: asyncio.Queue[bytes] = asyncio.Queue()

            async def read_plain() -> None:
                async for message in plain.messages:
                    payload = message.payload
                    plain_got.put_nowait(payload if isinstance(payload, bytes) else b"")

            reader = asyncio.create_task(read_plain(), name="plain-reader")

            async def session_trip(payload: bytes) -> None:
                await session.publish(TOPIC, payload)
                if await received.get() != payload:
                    raise RuntimeError("the session received another message than it sent")

            async def plain_trip(payload: bytes) -> None:
                await plain.publish(TOPIC + "/plain", payload, qos=1)
                if await plain_got.get() != payload:
                    raise RuntimeError("aiomqtt received another message than it sent")

            try:
                await block(session_trip, WARMUP, "warm")
                await block(plain_trip, WARMUP, "warm")
                per_block = max(1, trips // blocks)
                ours: list[tuple[float, float]] = []
                theirs: list[tuple[float, float]] = []
                for b in range(blocks):
                    ours.append(await block(session_trip, per_block, f"s{b}"))
                    theirs.append(await block(plain_trip, per_block, f"p{b}"))
            finally:
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)

    def med(xs: list[tuple[float, float]], k: int) -> float:
        return statistics.median(x[k] for x in xs)

    print(
        f"machine: {platform.machine()}, Python {platform.python_version()}, "
        f"aiomqtt {aiomqtt.__version__}; {blocks} blocks of {per_block} trips each, alternating"
    )
    print("per trip (QoS 1 publish, PUBACK, the copy received back): medians of the blocks")
    print(f"  {'':28s} {'CPU µs':>8s} {'wall µs':>8s}   CPU per block")
    for name, xs in (("MqttSession (sync.mqtt)", ours), ("aiomqtt Client, as documented", theirs)):
        blocks_cpu = " ".join(f"{x[0]:.0f}" for x in xs)
        print(f"  {name:28s} {med(xs, 0):8.1f} {med(xs, 1):8.1f}   {blocks_cpu}")
    print(
        f"  ratio session / aiomqtt     {med(ours, 0) / med(theirs, 0):8.2f}x"
        f" {med(ours, 1) / med(theirs, 1):8.2f}x"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--trips", type=int, default=3000, help="measured trips of each client")
    p.add_argument("--blocks", type=int, default=5, help="alternating blocks of each")
    p.add_argument("--quick", action="store_true", help="smoke run: 500 trips each")
    a = p.parse_args()
    asyncio.run(bench(500 if a.quick else a.trips, a.blocks))


if __name__ == "__main__":
    main()
