"""An MQTT session's packets are written by the loop itself (:class:`sync.mqtt.WriteSoon`),
against a real mosquitto: packets queued together go out in one write, and a socket that
cannot take everything (the broker stopped) leaves the rest to aiomqtt's writer — nothing
is lost, nothing reordered."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import aiomqtt

from sync.mqtt import MqttSession
from sync.tls import ClientTls
from tests.waiting import poll
from worlds.fakes import Mosquitto

WAIT_S = 20.0
BIG = 512 * 1024
"""bytes of one large payload"""
BIG_COUNT = 40
"""large payloads published at once: 20 MiB, more than the loopback buffers of a
stopped broker's connection hold"""


class Received:
    """The payloads a session received, in order."""

    def __init__(self) -> None:
        self.got: list[bytes] = []

    async def __call__(self, message: aiomqtt.Message) -> None:
        payload = message.payload
        self.got.append(payload if isinstance(payload, bytes) else b"")


def _session(broker: Mosquitto, received: Received, topics: list[str]) -> MqttSession:
    async def target() -> tuple[str, int]:
        return broker.host, broker.port

    return MqttSession(
        target=target,
        username="writer",
        password="x",
        identifier="writes-test",
        subscriptions=topics,
        on_message=received,
        tls=ClientTls.plaintext(""),
    )


async def test_packets_queued_together_go_out_in_one_write_and_all_arrive(
    tmp_path: Path,
) -> None:
    received = Received()
    got = received.got
    async with Mosquitto(tmp_path / "mosq") as broker:
        async with _session(broker, received, ["w/#"]) as session:
            await asyncio.wait_for(session.connected.wait(), WAIT_S)
            writes = session.writes
            assert writes is not None
            for i in range(5):  # one at a time: each waits for its PUBACK
                await session.publish("w/one", b"one %d" % i)
            await poll(lambda: len(got) == 5, WAIT_S, "5 messages")
            before = writes.batches
            await asyncio.gather(*(session.publish("w/many", b"many %d" % i) for i in range(10)))
            await poll(lambda: len(got) == 15, WAIT_S, "15 messages")
    assert got == [b"one %d" % i for i in range(5)] + [b"many %d" % i for i in range(10)]
    # the 10 publishes were queued in one loop iteration: one write took them all (the rest
    # of the writes after it are the PUBACKs of the 10 messages received back, at most one
    # each)
    assert writes.batches - before <= 11, writes.batches - before
    assert writes.waited == 0


async def test_a_socket_that_cannot_take_everything_is_written_when_it_can(
    tmp_path: Path,
) -> None:
    received = Received()
    got = received.got
    payloads = [bytes([i]) * BIG for i in range(BIG_COUNT)]
    async with Mosquitto(tmp_path / "mosq") as broker:
        async with _session(broker, received, ["big"]) as session:
            await asyncio.wait_for(session.connected.wait(), WAIT_S)
            writes = session.writes
            assert writes is not None
            os.kill(broker.pid, signal.SIGSTOP)
            try:
                sending = asyncio.gather(*(session.publish("big", p) for p in payloads))
                await poll(lambda: writes.waited >= 1, WAIT_S, "a write the socket could not take")
            finally:
                os.kill(broker.pid, signal.SIGCONT)
            await sending
            await poll(lambda: len(got) == BIG_COUNT, WAIT_S, f"{BIG_COUNT} large messages")
    assert got == payloads
