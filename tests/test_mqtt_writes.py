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
import pytest

from sync import mqtt
from sync.errors import SyncError
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


async def test_a_publish_waiting_for_its_ack_fails_when_the_connection_ends(
    tmp_path: Path,
) -> None:
    """A QoS 1 publish the broker never acknowledged fails with the connection's end, not
    after its timeout; messages that came before the end were all handed over, and the
    session connects again."""
    received = Received()
    got = received.got
    async with Mosquitto(tmp_path / "mosq") as broker:
        async with _session(broker, received, ["w/#"]) as session:
            await asyncio.wait_for(session.connected.wait(), WAIT_S)
            for i in range(3):
                await session.publish("w/before", b"before %d" % i)
            await poll(lambda: len(got) == 3, WAIT_S, "3 messages")
            writes = session.writes
            assert writes is not None
            written = writes.batches
            os.kill(broker.pid, signal.SIGSTOP)
            try:
                waiting = asyncio.ensure_future(session.publish("w/lost", b"never acked"))
                await poll(lambda: writes.batches > written, WAIT_S, "the publish written")
                assert not waiting.done()  # written, and waiting for its PUBACK
            finally:
                os.kill(broker.pid, signal.SIGKILL)
            with pytest.raises(SyncError) as err:
                await asyncio.wait_for(waiting, mqtt.PUBLISH_TIMEOUT_S - 1)
            assert err.value.key == "hub.unreachable"
            assert "Disconnected" in str(err.value.fields["reason"])
            assert session.connections == 1
    assert got == [b"before %d" % i for i in range(3)]


async def test_a_publish_the_broker_never_acknowledges_times_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mqtt, "PUBLISH_TIMEOUT_S", 0.3)
    received = Received()
    async with Mosquitto(tmp_path / "mosq") as broker:
        async with _session(broker, received, ["w/#"]) as session:
            await asyncio.wait_for(session.connected.wait(), WAIT_S)
            os.kill(broker.pid, signal.SIGSTOP)
            try:
                with pytest.raises(SyncError) as err:
                    await asyncio.wait_for(session.publish("w/hung", b"x"), WAIT_S)
            finally:
                os.kill(broker.pid, signal.SIGCONT)
            assert "timed out" in str(err.value.fields["reason"])
            # the broker is back: the next publish is acknowledged on the same connection
            await asyncio.wait_for(session.publish("w/after", b"after"), WAIT_S)
            assert session.connections == 1
            await poll(lambda: b"after" in received.got, WAIT_S, "the message after")
