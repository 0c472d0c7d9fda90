"""Issue 15, the broker part, as the attacks: an enrolled device (its own bundle's broker
password, a real MQTT client) against a real hub on loopback — taking the hub's and another
device's client id, storing retained messages, an oversize packet, a publish flood. Each is
refused (and counted where the hub sees it), and the hub still answers a legitimate
``yimi say`` afterwards.

The broker log (``connection_messages true``) is the record of who was connected when: every
session the hub's or a device's own login opens is one ``New client connected … as <login> (``
line, and a takeover is logged as ``already connected, closing old connection``.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from pathlib import Path

import aiomqtt
import pytest

from provisioning.bundle import Bundle
from sync import topics
from sync.envelope import HUB
from sync.mqtt import TRANSIENT_SLOTS, transient_username
from tests.mesh_harness import Mesh, Proc
from tests.waiting import poll_sync

pytestmark = pytest.mark.slow

_slots = itertools.count()


def client(
    mesh: Mesh, bundle: Bundle, *, identifier: str | None = None, **kw: object
) -> aiomqtt.Client:
    """``bundle``'s device on the hub's broker: as its own login when ``identifier`` is given
    (the attacker choosing a client id), else as one of its transient logins."""
    login = (
        bundle.device_id
        if identifier
        else transient_username(bundle.device_id, next(_slots) % TRANSIENT_SLOTS)
    )
    return aiomqtt.Client(
        "127.0.0.1",
        mesh.mqtt_port,
        username=login,
        password=bundle.mqtt_password,
        identifier=identifier or login,
        timeout=5,
        tls_context=mesh.mqtt_tls(),
        **kw,  # type: ignore[arg-type]
    )


def broker_log(mesh: Mesh) -> str:
    return (mesh.home / "broker" / "mosquitto.log").read_text(errors="replace")


def sessions_of(mesh: Mesh, login: str) -> int:
    """How many sessions ``login`` has opened on the hub's broker so far."""
    return sum(
        1
        for ln in broker_log(mesh).splitlines()
        if "New client connected" in ln and f" as {login} (" in ln
    )


def counters(mesh: Mesh) -> dict[str, int]:
    return {str(k): int(v) for k, v in mesh.hub_query("SELECT name, value FROM counters")}  # type: ignore[call-overload]


def rejected(mesh: Mesh) -> dict[str, int]:
    return {k: v for k, v in counters(mesh).items() if k.startswith("rejected.")}


def answered(mesh: Mesh, bundle_dir: Path, text: str) -> float:
    """``yimi say`` from ``bundle_dir`` is answered; returns how long it took (s)."""
    t0 = time.monotonic()
    r = mesh.say(bundle_dir, text, "--timeout", "30")
    took = time.monotonic() - t0
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert r.stdout.strip() and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    return took


def assert_no_traceback(*procs: Proc) -> None:
    for p in procs:
        assert p.alive(), p.text()
        assert "Traceback" not in p.text(), p.text()


async def dropped_after(
    c: aiomqtt.Client, topic: str, payload: bytes, *, retain: bool = False
) -> None:
    """Publish (QoS 0) and read until the broker drops the connection (MqttError)."""
    await c.publish(topic, payload, qos=0, retain=retain)
    async with asyncio.timeout(10):
        async for _ in c.messages:
            pass


# ---------------------------------------------------------------- tests
def test_a_device_cannot_take_the_hubs_or_another_devices_client_id(mesh: Mesh) -> None:
    """A connects again and again for 5 s with the client ids of the hub (old and plain) and
    of B (its device id and its edge's old id): every session is A's own, the hub's and B's
    edge's broker sessions are never closed (no reconnect), and both still talk."""
    a_dir, b_dir = mesh.add_device("alpha", "glasses"), mesh.add_device("bravo", "phone")
    a, b = Bundle.load(a_dir), Bundle.load(b_dir)
    hub = mesh.start_hub()
    edge_b = mesh.start_edge(b_dir)
    assert (sessions_of(mesh, HUB), sessions_of(mesh, b.device_id)) == (1, 1)
    # the hub's own session comes over the broker's private unix socket (no TCP, no TLS)
    sock = (mesh.home / "broker" / "mqtt.sock").absolute()
    assert f"New client connected from {sock}:0 as {HUB} (" in broker_log(mesh)
    stolen = [HUB, f"hub-{a.home_id}", b.device_id, f"{b.device_id}-edge"]

    async def attack() -> int:
        attempts = 0
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            for ident in stolen:
                clean = attempts % 2 == 0  # a persistent session too (steals queued messages)
                async with client(mesh, a, identifier=ident, clean_session=clean) as c:
                    await c.subscribe(topics.all_uplinks(a.home_id), qos=1)  # ACL: nothing
                    marker = b"\x00" + ident.encode()
                    await c.publish(topics.uplink(a.home_id, a.device_id), marker, qos=1)
                attempts += 1
        return attempts

    attempts = asyncio.run(attack())
    log = broker_log(mesh)
    assert "already connected, closing old connection" not in log, log[-2000:]
    assert sessions_of(mesh, a.device_id) == attempts  # every attempt ran as A's own login
    took_b = answered(mesh, b_dir, "hello after the takeover attempts")
    took_a = answered(mesh, a_dir, "and from the attacker's bundle")
    # neither the hub nor B's edge ever reconnected
    assert (sessions_of(mesh, HUB), sessions_of(mesh, b.device_id)) == (1, 1)
    assert edge_b.text().count("connected to hub") == 1, edge_b.text()
    poll_sync(  # every marker reached the hub (handled, or over A's publish rate)
        lambda: sum(rejected(mesh).values()) == attempts, 10, "A's markers"
    )
    assert_no_traceback(hub, edge_b)
    print(
        f"{attempts} connections of A with stolen ids in 5 s: hub sessions 1, B sessions 1; "
        f"yimi say after: B {took_b:.2f} s, A {took_a:.2f} s"
    )


def test_retained_and_oversize_publishes_are_refused_and_nothing_is_stored(mesh: Mesh) -> None:
    """40 retained 400 KB publishes (the 40 MB the issue saw stored), a last will with the
    retain flag, and a 600 KB packet: each drops the attacker's connection; a new
    subscriber to those topics then gets only the next live message; the hub saw none of
    them, and counts each refusal from the broker's log (``yimi hub status``)."""
    a_dir = mesh.add_device("alpha", "glasses")
    a = Bundle.load(a_dir)
    hub = mesh.start_hub()
    root = topics.device_root(a.home_id, a.device_id)
    targets = [
        f"{root}/notes",
        topics.presence(a.home_id, a.device_id),
        topics.uplink(a.home_id, a.device_id),
    ]
    big = b"\x0a" + bytes(400 * 1024)

    async def attack() -> int:
        refused = 0
        for i in range(40):
            with pytest.raises(aiomqtt.MqttError):
                async with client(mesh, a) as c:
                    await dropped_after(c, targets[i % len(targets)], big, retain=True)
            refused += 1
        will = aiomqtt.Will(f"{root}/notes", big[:60_000], qos=1, retain=True)
        with pytest.raises(aiomqtt.MqttCodeError, match=r"(?i)retain not supported"):
            async with client(mesh, a, will=will, protocol=aiomqtt.ProtocolVersion.V5):
                pass
        with pytest.raises(aiomqtt.MqttError):
            async with client(mesh, a) as c:
                await dropped_after(
                    c, topics.uplink(a.home_id, a.device_id), b"\x0a" + bytes(600 * 1024)
                )
        return refused

    async def fresh_subscriber() -> list[tuple[str, bytes]]:
        got: list[tuple[str, bytes]] = []
        async with client(mesh, a) as sub, client(mesh, a) as pub:
            for t in targets:
                await sub.subscribe(t, qos=1)
            await pub.publish(f"{root}/notes", b"live", qos=1)
            async with asyncio.timeout(10):
                async for m in sub.messages:
                    got.append((m.topic.value, bytes(m.payload)))  # type: ignore[arg-type]
                    if m.payload == b"live":
                        return got
        raise AssertionError("unreachable")

    refused = asyncio.run(attack())
    assert refused == 40
    assert asyncio.run(fresh_subscriber()) == [(f"{root}/notes", b"live")]
    log = broker_log(mesh)
    assert log.count("disconnected due to oversize packet") == 1, log[-2000:]
    assert "retain not supported" in log
    answered(mesh, a_dir, "still there after the retained flood?")
    assert rejected(mesh) == {}, "a refused publish reached the hub"
    # what only the broker saw, counted by the hub from its log, and shown
    want = {"broker.refused.protocol": 40, "broker.refused.retain": 1, "broker.refused.oversize": 1}
    poll_sync(
        lambda: {k: v for k, v in counters(mesh).items() if k.startswith("broker.")} == want,
        10,
        f"the broker's refusals counted as {want} (have {counters(mesh)})",
    )
    status = mesh.yimi("hub", "status", "--home", str(mesh.home), check=True).stdout
    assert re.search(r"^\s+broker\.refused\.protocol\s+40$", status, re.M), status
    data = mesh.home / "broker" / "data"
    stored = sum(p.stat().st_size for p in data.iterdir() if p.is_file())
    assert stored < 1024 * 1024, f"the broker's persistence holds {stored} bytes"
    assert_no_traceback(hub)


def test_a_publish_flood_from_one_device_is_capped_and_counted(mesh: Mesh) -> None:
    """A publishes junk on its own uplink as fast as one connection can (QoS 1) while B says
    something: the hub handles at most A's burst plus its rate, counts the rest
    ``rejected.rate_limited`` without opening them, answers B meanwhile and A afterwards."""
    a_dir, b_dir = mesh.add_device("alpha", "glasses"), mesh.add_device("bravo", "phone")
    a, b = Bundle.load(a_dir), Bundle.load(b_dir)
    hub = mesh.start_hub()
    took_quiet = answered(mesh, b_dir, "a quiet hello")
    junk = b"\x00" + bytes(63)

    async def flood_while_b_says() -> tuple[int, float, float]:
        sent = 0
        async with client(mesh, a) as c:
            t0 = time.monotonic()
            say = asyncio.create_task(
                asyncio.to_thread(answered, mesh, b_dir, "hello during a flood")
            )
            while not say.done() or sent < 3000:
                await c.publish(topics.uplink(a.home_id, a.device_id), junk, qos=1)
                sent += 1
            took_b = await say
            return sent, time.monotonic() - t0, took_b

    sent, flood_s, took_b = asyncio.run(flood_while_b_says())

    # a marker from B, published after every one of A's was acknowledged: once the hub has
    # logged it, it has handled all of A's the broker delivered
    async def marker() -> None:
        async with client(mesh, b) as c:
            await c.publish(topics.uplink(b.home_id, b.device_id), b"\x00marker", qos=1)

    asyncio.run(marker())
    poll_sync(
        lambda: f"dropped envelope from {b.device_id}: malformed" in hub.text(), 30, "B's marker"
    )
    mark = f"dropped envelope from {a.device_id}: malformed"
    stamps = [_logged_at(line) for line in hub.text().splitlines() if mark in line]
    handled = len(stamps)
    # the bucket (full at A's first message) refills for as long as the hub handles A's
    # messages, which under load goes on past A's last publish (the broker queues them for
    # the hub): the window is the hub's own, from the first of A's it handled to the last
    window_s = stamps[-1] - stamps[0] if stamps else 0.0
    poll_sync(
        lambda: rejected(mesh).get("rejected.malformed", 0) == handled + 1,
        10,
        "the counters to be flushed",
    )
    limited = rejected(mesh).get("rejected.rate_limited", 0)
    lost = sent - handled - limited
    figures = (
        f"A sent {sent} in {flood_s:.2f} s ({sent / flood_s:.0f}/s): hub handled {handled} "
        f"in {window_s:.2f} s, "
        f"rate-limited {limited}, lost at the broker {lost}; B's say {took_b:.2f} s during "
        f"the flood ({took_quiet:.2f} s before)"
    )
    assert handled <= 200 + 50 * window_s + 5, figures
    assert limited >= sent // 2 and lost >= 0, figures
    assert hub.text().count("over its publish rate") <= 2 + flood_s / 10, figures
    took_a = answered(mesh, a_dir, "the flooder speaks normally again")
    assert_no_traceback(hub)
    print(f"{figures}; A's say after {took_a:.2f} s")


def _logged_at(line: str) -> float:
    """Seconds since the epoch at which the hub logged ``line`` (its ``asctime`` prefix,
    milliseconds after the comma)."""
    stamp, _, ms = line[:23].partition(",")
    return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000
