"""The hub's mosquitto broker against the real binary: credentials, ACLs, supervision."""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiomqtt
import pytest

from hub.errors import HubError
from hub.mesh import broker as broker_module
from hub.mesh.broker import MAX_PACKET_BYTES, Broker, BrokerAccount, BrokerTls
from provisioning.credentials import mosquitto_hash, new_password
from sync import topics
from sync.mqtt import transient_username
from tests.waiting import poll
from worlds import ports

pytestmark = pytest.mark.skipif(
    shutil.which("mosquitto") is None and not broker_module.MOSQUITTO_BINARY.exists(),
    reason="mosquitto is not installed",
)

REPO = Path(__file__).resolve().parents[1]
LOOPBACK = "127.0.0.1"
HOME = "5f3a9c0d1e2b4a67"
HUB = "hub"
DEV_A = "a1b2c3d4e5f60718"
DEV_B = "0f1e2d3c4b5a6978"
DEV_C = "c0ffee00c0ffee00"
DEADLINE = 10.0

PASSWORDS = {name: new_password() for name in (HUB, DEV_A, DEV_B, DEV_C)}


def account(name: str, role: str = "device") -> BrokerAccount:
    return BrokerAccount(name, mosquitto_hash(PASSWORDS[name]), role)


BASE_ACCOUNTS = [account(HUB, "hub"), account(DEV_A), account(DEV_B)]


# -- helpers -------------------------------------------------------------------------------


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie, not reaped) process."""
    try:
        return bool(Path(f"/proc/{pid}/cmdline").read_bytes())
    except OSError:
        return False


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in cmdline:
                found.append(int(entry.name))
    return found


def make_broker(workdir: Path, port: int, accounts: list[BrokerAccount] | None = None) -> Broker:
    return Broker(
        workdir,
        home_id=HOME,
        host=LOOPBACK,
        port=port,
        accounts=BASE_ACCOUNTS if accounts is None else accounts,
    )


def mqtt(
    port: int,
    username: str | None,
    password: str | None = None,
    **kwargs: object,
) -> aiomqtt.Client:
    if username is not None and password is None:
        password = PASSWORDS[username]
    return aiomqtt.Client(
        LOOPBACK,
        port,
        username=username,
        password=password,
        timeout=5,
        **kwargs,  # type: ignore[arg-type]
    )


async def connects(port: int, username: str | None, password: str | None = None) -> bool:
    """True if the broker accepts the login, False if it refuses it (CONNACK error)."""
    try:
        async with mqtt(port, username, password):
            return True
    except aiomqtt.MqttCodeError:
        return False


async def collect_until(client: aiomqtt.Client, last: bytes) -> list[tuple[str, bytes]]:
    """Every message ``client`` receives up to and including the one carrying ``last``."""
    got: list[tuple[str, bytes]] = []
    async with asyncio.timeout(DEADLINE):
        async for message in client.messages:
            payload = message.payload
            assert isinstance(payload, bytes | bytearray)
            got.append((message.topic.value, bytes(payload)))
            if payload == last:
                return got
    raise AssertionError("unreachable")


@asynccontextmanager
async def running(
    workdir: Path, port: int, accounts: list[BrokerAccount] | None = None
) -> AsyncIterator[Broker]:
    async with make_broker(workdir, port, accounts) as broker:
        yield broker


@pytest.fixture
def port() -> int:
    return ports.port()


@pytest.fixture(autouse=True)
def no_process_left(tmp_path: Path) -> Iterator[None]:
    yield
    assert [pid for pid in processes_mentioning(str(tmp_path)) if alive(pid)] == []


# -- credentials ---------------------------------------------------------------------------


def test_new_password_is_urlsafe_32_bytes() -> None:
    password = new_password()
    assert len(password) == 43 and "=" not in password
    assert len(base64.urlsafe_b64decode(password + "=")) == 32
    assert new_password() != password


@pytest.mark.skipif(shutil.which("mosquitto_passwd") is None, reason="no mosquitto_passwd")
def test_mosquitto_hash_matches_mosquitto_passwd(tmp_path: Path) -> None:
    passwd = tmp_path / "passwd"
    subprocess.run(
        ["mosquitto_passwd", "-c", "-b", str(passwd), "alice", "s3cret pw"],
        check=True,
        capture_output=True,
    )
    line = passwd.read_text().strip()
    user, reference = line.split(":", 1)
    _, scheme, iterations, salt_b64, _hash = reference.split("$")
    assert (user, scheme) == ("alice", "7")
    salt = base64.b64decode(salt_b64)
    assert len(salt) == 12
    assert mosquitto_hash("s3cret pw", salt=salt, iterations=int(iterations)) == reference
    ours = mosquitto_hash("s3cret pw")
    assert ours.startswith("$7$101$") and ours != reference  # fresh salt each time
    with pytest.raises(ValueError):
        mosquitto_hash("x", salt=b"short")


# -- authentication and ACL ------------------------------------------------------------------


async def test_broker_files_are_private(tmp_path: Path, port: int) -> None:
    workdir = tmp_path / "broker"
    async with running(workdir, port) as broker:
        assert workdir.stat().st_mode & 0o777 == 0o700
        for name in ("mosquitto.conf", "passwd", "acl", "mosquitto.pid"):
            assert (workdir / name).stat().st_mode & 0o777 == 0o600, name
        assert int((workdir / "mosquitto.pid").read_text()) == broker.pid
        assert "allow_anonymous false" in (workdir / "mosquitto.conf").read_text()


async def test_accepts_correct_password_refuses_wrong_and_anonymous(
    tmp_path: Path, port: int
) -> None:
    async with running(tmp_path / "broker", port):
        assert await connects(port, DEV_A)
        assert await connects(port, HUB)
        assert not await connects(port, DEV_A, "wrong-password")
        assert not await connects(port, DEV_A, PASSWORDS[DEV_B])
        assert not await connects(port, None)
        assert not await connects(port, DEV_C)  # no account yet


async def test_device_cannot_publish_on_another_devices_topic(tmp_path: Path, port: int) -> None:
    async with (
        running(tmp_path / "broker", port),
        mqtt(port, HUB) as hub,
        mqtt(port, DEV_A, identifier=DEV_A) as dev_a,
    ):
        await hub.subscribe(f"yimi/{HOME}/#", qos=1)
        await dev_a.publish(topics.uplink(HOME, DEV_B), b"forged", qos=1)
        await dev_a.publish(topics.mesh(HOME), b"forged-broadcast", qos=1)
        await dev_a.publish(topics.uplink(HOME, DEV_A), b"own", qos=1)
        # A's own message was sent last: it arriving alone proves the others were dropped.
        assert await collect_until(hub, b"own") == [(topics.uplink(HOME, DEV_A), b"own")]


async def test_device_cannot_read_another_devices_inbox(tmp_path: Path, port: int) -> None:
    async with (
        running(tmp_path / "broker", port),
        mqtt(port, HUB) as hub,
        mqtt(port, DEV_A, identifier=DEV_A) as dev_a,
    ):
        # mosquitto 2.0 grants the SUBACK but never delivers what the ACL forbids.
        await dev_a.subscribe(topics.inbox(HOME, DEV_B), qos=1)
        await dev_a.subscribe(f"yimi/{HOME}/dev/+/up", qos=1)
        await dev_a.subscribe(topics.inbox(HOME, DEV_A), qos=1)
        await dev_a.subscribe(topics.mesh(HOME), qos=1)
        await hub.publish(topics.inbox(HOME, DEV_B), b"for-b", qos=1)
        await hub.publish(topics.uplink(HOME, DEV_B), b"b-up", qos=1)
        await hub.publish(topics.mesh(HOME), b"broadcast", qos=1)
        await hub.publish(topics.inbox(HOME, DEV_A), b"for-a", qos=1)
        assert await collect_until(dev_a, b"for-a") == [
            (topics.mesh(HOME), b"broadcast"),
            (topics.inbox(HOME, DEV_A), b"for-a"),
        ]


# -- limits against a hostile device (issue 15) ---------------------------------------------


async def test_a_client_id_is_its_login_so_a_device_cannot_take_over_another_session(
    tmp_path: Path, port: int
) -> None:
    """A connecting with the hub's and B's client ids gets a session of its own login: the
    hub and B stay connected (a takeover would end their message streams) and still talk."""
    async with (
        running(tmp_path / "broker", port) as broker,
        mqtt(port, HUB, identifier=HUB) as hub,
        mqtt(port, DEV_B, identifier=DEV_B) as dev_b,
    ):
        await hub.subscribe(f"yimi/{HOME}/#", qos=1)
        await dev_b.subscribe(topics.inbox(HOME, DEV_B), qos=1)
        for stolen in (HUB, DEV_B, f"hub-{HOME}", f"{DEV_B}-edge"):
            async with mqtt(port, DEV_A, identifier=stolen) as attacker:
                await attacker.publish(topics.uplink(HOME, DEV_A), stolen.encode(), qos=1)
        await dev_b.publish(topics.uplink(HOME, DEV_B), b"b still here", qos=1)
        got = await collect_until(hub, b"b still here")
        assert [payload for _, payload in got] == [
            HUB.encode(),
            DEV_B.encode(),
            f"hub-{HOME}".encode(),
            f"{DEV_B}-edge".encode(),
            b"b still here",
        ]
        await hub.publish(topics.inbox(HOME, DEV_B), b"hub still here", qos=1)
        assert await collect_until(dev_b, b"hub still here") == [
            (topics.inbox(HOME, DEV_B), b"hub still here")
        ]
        log = broker.log_path.read_text()
    assert "already connected, closing old connection" not in log, log
    assert log.count(f" as {DEV_A} (") == 4, log  # the attacker's ids were replaced by its login


async def test_transient_logins_share_the_account_and_not_the_session(
    tmp_path: Path, port: int
) -> None:
    """``a.t3`` logs in with A's password and A's ACL, beside A's own session; a revoked
    account's transient logins are gone too."""
    a_transient = transient_username(DEV_A, 3)
    async with (
        running(tmp_path / "broker", port) as broker,
        mqtt(port, HUB) as hub,
        mqtt(port, DEV_A) as dev_a,
        mqtt(port, a_transient, PASSWORDS[DEV_A]) as say,
    ):
        await hub.subscribe(f"yimi/{HOME}/#", qos=1)
        await dev_a.subscribe(topics.inbox(HOME, DEV_A), qos=1)
        await say.publish(topics.uplink(HOME, DEV_B), b"forged", qos=1)  # A's ACL applies
        await say.publish(topics.uplink(HOME, DEV_A), b"from say", qos=1)
        assert await collect_until(hub, b"from say") == [(topics.uplink(HOME, DEV_A), b"from say")]
        await hub.publish(topics.inbox(HOME, DEV_A), b"to a", qos=1)
        assert await collect_until(dev_a, b"to a") == [(topics.inbox(HOME, DEV_A), b"to a")]
        assert not await connects(port, transient_username(DEV_B, 0), PASSWORDS[DEV_A])
        await broker.update_accounts([account(HUB, "hub"), account(DEV_B)])
        await poll(lambda: "a1b2c3d4e5f60718.t3" not in broker.passwd_path.read_text(), DEADLINE)
    async with running(tmp_path / "broker2", port, [account(HUB, "hub"), account(DEV_B)]):
        assert not await connects(port, a_transient, PASSWORDS[DEV_A])
        assert await connects(port, transient_username(DEV_B, 0), PASSWORDS[DEV_B])


async def dropped_after(port: int, topic: str, payload: bytes, *, retain: bool = False) -> None:
    """Publish as A (QoS 0), then read until the broker drops the connection (MqttError)."""
    async with mqtt(port, DEV_A) as c:
        await c.subscribe(topics.inbox(HOME, DEV_A), qos=1)
        await c.publish(topic, payload, qos=0, retain=retain)
        async with asyncio.timeout(DEADLINE):
            async for _ in c.messages:
                pass


async def test_retained_messages_are_refused_and_never_stored(tmp_path: Path, port: int) -> None:
    """A retained publish drops the publisher's connection, a will with the retain flag is
    refused at CONNECT; a new subscriber to that topic gets the next live message first."""
    topic = f"{topics.device_root(HOME, DEV_A)}/notes"
    async with running(tmp_path / "broker", port) as broker:
        with pytest.raises(aiomqtt.MqttError):
            await dropped_after(port, topic, b"kept forever?", retain=True)
        # MQTT 5 (a 3.1.1 client gets no CONNACK, only a closed socket: its timeout)
        will = aiomqtt.Will(topic, b"will", qos=1, retain=True)
        with pytest.raises(aiomqtt.MqttCodeError, match=r"(?i)retain not supported"):
            async with mqtt(port, DEV_A, will=will, protocol=aiomqtt.ProtocolVersion.V5):
                pass
        async with (
            mqtt(port, DEV_A) as sub,
            mqtt(port, transient_username(DEV_A, 0), PASSWORDS[DEV_A]) as pub,
        ):
            await sub.subscribe(topic, qos=1)
            await pub.publish(topic, b"live", qos=1)
            assert await collect_until(sub, b"live") == [(topic, b"live")]
        assert not await connects(port, DEV_A, "wrong-password")
        await poll(lambda: broker.log_path.read_text().count("not authorised") == 1, DEADLINE)
        assert broker.refusals() == {
            "broker.refused.protocol": 1,  # the retained publish
            "broker.refused.retain": 1,  # the will
            "broker.refused.login": 1,
        }
        assert broker.refusals() == {}  # counted once


async def test_an_oversize_packet_drops_the_connection(tmp_path: Path, port: int) -> None:
    async with running(tmp_path / "broker", port) as broker, mqtt(port, HUB) as hub:
        await hub.subscribe(f"yimi/{HOME}/#", qos=1)

        with pytest.raises(aiomqtt.MqttError):
            await dropped_after(port, topics.uplink(HOME, DEV_A), bytes(MAX_PACKET_BYTES))
        async with mqtt(port, DEV_A) as c:
            await c.publish(topics.uplink(HOME, DEV_A), b"small", qos=1)
        assert await collect_until(hub, b"small") == [(topics.uplink(HOME, DEV_A), b"small")]
        assert "disconnected due to oversize packet" in broker.log_path.read_text()
        assert broker.refusals() == {"broker.refused.oversize": 1}


def test_the_config_carries_every_limit(tmp_path: Path) -> None:
    conf = make_broker(tmp_path, 1883)._render_config().splitlines()
    for line in (
        "retain_available false",
        f"max_packet_size {MAX_PACKET_BYTES}",
        "max_queued_messages 1000",
        f"max_queued_bytes {16 * 1024 * 1024}",
        "max_inflight_messages 20",
        f"max_inflight_bytes {4 * 1024 * 1024}",
    ):
        assert line in conf, line
    # a listener setting: right after each listener's line (before the first, mosquitto
    # would open port 1883 too)
    listeners = [i for i, line in enumerate(conf) if line.startswith("listener ")]
    assert [conf[i] for i in listeners] == [
        f"listener 0 {tmp_path.absolute() / 'mqtt.sock'}",
        f"listener 1883 {LOOPBACK}",
    ]
    for i in listeners:
        assert conf[i + 1] == "use_username_as_clientid true", conf[i : i + 2]
    assert not any(line.startswith("use_username_as_clientid") for line in conf[: listeners[0]])


def local_client(
    broker: Broker, username: str | None, password: str | None = None
) -> aiomqtt.Client:
    """A client of ``broker``'s unix socket (the hub's own way in)."""
    assert broker.local_socket is not None
    if username is not None and password is None:
        password = PASSWORDS[username]
    return aiomqtt.Client(
        str(broker.local_socket),
        1883,
        transport="unix",
        username=username,
        password=password,
        identifier=username or "",
        timeout=5,
    )


async def test_the_hubs_unix_socket_is_private_and_asks_for_the_same_logins_and_acl(
    tmp_path: Path, port: int
) -> None:
    workdir = tmp_path / "broker"
    async with (
        running(workdir, port) as broker,
        local_client(broker, HUB) as hub,
        mqtt(port, DEV_A, identifier=DEV_A) as dev_a,
    ):
        sock = broker.local_socket
        assert sock is not None and sock.parent == workdir.absolute()
        assert sock.is_socket()
        assert workdir.stat().st_mode & 0o777 == 0o700  # only the hub's user reaches it
        for who, password in ((DEV_A, "wrong-password"), (None, None), (DEV_C, new_password())):
            with pytest.raises(aiomqtt.MqttCodeError):
                async with local_client(broker, who, password):
                    pass
        # the hub over the socket and a device over TCP are one broker, one ACL
        await hub.subscribe(f"yimi/{HOME}/#", qos=1)
        await dev_a.subscribe(topics.inbox(HOME, DEV_A), qos=1)
        async with local_client(broker, DEV_B) as dev_b:  # a device login: its own ACL here too
            await dev_b.publish(topics.uplink(HOME, DEV_A), b"forged", qos=1)
            await dev_b.publish(topics.uplink(HOME, DEV_B), b"b-own", qos=1)
        await dev_a.publish(topics.uplink(HOME, DEV_A), b"a-own", qos=1)
        got = await collect_until(hub, b"a-own")
        assert got == [
            (topics.uplink(HOME, DEV_B), b"b-own"),
            (topics.uplink(HOME, DEV_A), b"a-own"),
        ]
        await hub.publish(topics.inbox(HOME, DEV_A), b"for-a", qos=1)
        assert await collect_until(dev_a, b"for-a") == [(topics.inbox(HOME, DEV_A), b"for-a")]


def test_a_work_directory_too_long_for_a_socket_gets_only_the_network_listener(
    tmp_path: Path,
) -> None:
    deep = tmp_path / ("d" * 120)
    broker = make_broker(deep, 1883)
    assert broker.local_socket is None
    conf = broker._render_config().splitlines()
    assert [line for line in conf if line.startswith("listener ")] == [f"listener 1883 {LOOPBACK}"]


# -- supervision -----------------------------------------------------------------------------


async def test_killed_broker_is_restarted(tmp_path: Path, port: int) -> None:
    async with running(tmp_path / "broker", port) as broker:
        first = broker.pid
        assert first is not None and broker.restarts == 0 and broker.ready
        os.kill(first, signal.SIGKILL)

        async def restarted() -> bool:
            return broker.restarts >= 1 and broker.ready

        await poll(restarted, DEADLINE, "the broker restarted")
        await asyncio.wait_for(broker.wait_ready(), DEADLINE)
        assert broker.restarts == 1
        assert broker.pid not in (None, first)
        assert not alive(first)
        assert await connects(port, DEV_A)
        assert int((tmp_path / "broker" / "mosquitto.pid").read_text()) == broker.pid


async def test_exit_stops_the_broker(tmp_path: Path, port: int) -> None:
    workdir = tmp_path / "broker"
    async with running(workdir, port) as broker:
        pid = broker.pid
        assert pid is not None and alive(pid)
    assert not alive(pid)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert broker.pid is None
    assert not (workdir / "mosquitto.pid").exists()
    assert not await broker_module.accepts(LOOPBACK, port)


async def test_broker_dies_with_a_killed_hub(tmp_path: Path, port: int) -> None:
    script = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from hub.mesh.broker import Broker, BrokerAccount\n"
        "async def main():\n"
        "    acct = [BrokerAccount('hub', sys.argv[3], 'hub')]\n"
        "    async with Broker(Path(sys.argv[1]), home_id='ab', port=int(sys.argv[2]),"
        " accounts=acct) as b:\n"
        "        print(b.pid, flush=True)\n"
        "        await asyncio.Event().wait()\n"
        "asyncio.run(main())\n"
    )
    hub = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        str(tmp_path / "broker"),
        str(port),
        mosquitto_hash("pw"),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert hub.stdout is not None
        line = await asyncio.wait_for(hub.stdout.readline(), DEADLINE)
        mosquitto_pid = int(line)
        assert alive(mosquitto_pid)
    finally:
        hub.kill()
        await hub.wait()

    async def gone() -> bool:
        return not alive(mosquitto_pid)

    await poll(gone, DEADLINE, "mosquitto to die with the hub")


async def test_stale_broker_from_crashed_hub_is_replaced(tmp_path: Path, port: int) -> None:
    workdir = tmp_path / "broker"
    async with running(workdir, port):
        pass
    # A broker left running on our config, as if the hub had crashed without PDEATHSIG.
    stale = await asyncio.create_subprocess_exec(
        shutil.which("mosquitto") or str(broker_module.MOSQUITTO_BINARY),
        "-c",
        str(workdir / "mosquitto.conf"),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        (workdir / "mosquitto.pid").write_text(f"{stale.pid}\n")

        async def stale_listening() -> bool:
            return await broker_module.accepts(LOOPBACK, port)

        await poll(stale_listening, DEADLINE, "the stale broker to listen")
        async with running(workdir, port) as broker:
            assert await asyncio.wait_for(stale.wait(), DEADLINE) is not None
            assert broker.pid not in (None, stale.pid)
            assert await connects(port, DEV_A)
    finally:
        if stale.returncode is None:
            stale.kill()
            await stale.wait()


# -- accounts --------------------------------------------------------------------------------


async def test_update_accounts_adds_a_device_without_restart(tmp_path: Path, port: int) -> None:
    async with running(tmp_path / "broker", port) as broker:
        pid = broker.pid
        assert not await connects(port, DEV_C)
        await broker.update_accounts([*BASE_ACCOUNTS, account(DEV_C)])

        async def c_accepted() -> bool:
            return await connects(port, DEV_C)

        await poll(c_accepted, DEADLINE, "device C to be let in")
        assert broker.pid == pid and broker.restarts == 0
        # The new device got its ACL too: its uplink reaches the hub, a forged one does not.
        async with mqtt(port, HUB) as hub, mqtt(port, DEV_C, identifier=DEV_C) as dev_c:
            await hub.subscribe(f"yimi/{HOME}/#", qos=1)
            await dev_c.publish(topics.uplink(HOME, DEV_A), b"forged", qos=1)
            await dev_c.publish(topics.uplink(HOME, DEV_C), b"hello", qos=1)
            assert await collect_until(hub, b"hello") == [(topics.uplink(HOME, DEV_C), b"hello")]


async def test_update_accounts_revokes_a_device(tmp_path: Path, port: int) -> None:
    async with running(tmp_path / "broker", port) as broker:
        pid = broker.pid
        assert await connects(port, DEV_B)
        await broker.update_accounts([account(HUB, "hub"), account(DEV_A)])

        async def b_refused() -> bool:
            return not await connects(port, DEV_B)

        await poll(b_refused, DEADLINE, "device B to be refused")
        assert await connects(port, DEV_A)
        assert broker.pid == pid


async def test_queued_qos1_messages_survive_a_broker_restart(tmp_path: Path, port: int) -> None:
    workdir = tmp_path / "broker"
    async with running(workdir, port):
        async with mqtt(port, DEV_A, identifier=DEV_A, clean_session=False) as dev_a:
            await dev_a.subscribe(topics.inbox(HOME, DEV_A), qos=1)
        async with mqtt(port, HUB) as hub:
            await hub.publish(topics.inbox(HOME, DEV_A), b"queued", qos=1)
    async with (
        running(workdir, port),
        mqtt(port, DEV_A, identifier=DEV_A, clean_session=False) as dev_a,
    ):
        assert await collect_until(dev_a, b"queued") == [(topics.inbox(HOME, DEV_A), b"queued")]


# -- errors ----------------------------------------------------------------------------------


async def test_port_in_use_is_a_clear_error(tmp_path: Path, port: int) -> None:
    with socket.socket() as squatter:
        squatter.bind((LOOPBACK, port))
        squatter.listen()
        broker = make_broker(tmp_path / "broker", port)
        with pytest.raises(HubError) as info:
            async with broker:
                pytest.fail("the broker started on a taken port")
    assert info.value.key == "port.in_use"
    assert str(info.value) == f"port {port} on {LOOPBACK} is already in use"
    assert broker.pid is None


async def test_unbindable_host_is_a_clear_error(tmp_path: Path, port: int) -> None:
    tls = BrokerTls(tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem")
    broker = Broker(
        tmp_path / "broker",
        home_id=HOME,
        host="192.0.2.1",
        port=port,
        accounts=BASE_ACCOUNTS,
        tls=tls,  # plaintext is refused off loopback before anything else
    )
    with pytest.raises(HubError) as info:
        async with broker:
            pytest.fail("the broker started on an address this host does not have")
    assert info.value.key == "broker.failed"
    assert str(port) in str(info.value)


async def test_missing_mosquitto_is_a_clear_error(
    tmp_path: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(broker_module, "MOSQUITTO_BINARY", tmp_path / "no-such-mosquitto")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(HubError) as info:
        async with make_broker(tmp_path / "broker", port):
            pytest.fail("started without mosquitto")
    assert info.value.key == "broker.missing"
    assert "apt-get install" in str(info.value)


def test_invalid_accounts_are_rejected() -> None:
    with pytest.raises(ValueError):
        BrokerAccount("dev/../x", mosquitto_hash("pw"), "device")
    with pytest.raises(ValueError):
        BrokerAccount("dev", "plaintext", "device")
    with pytest.raises(ValueError):
        BrokerAccount("dev", mosquitto_hash("pw"), "admin")
    with pytest.raises(ValueError):
        make_broker(Path("/tmp/unused"), 1883, [account(DEV_A), account(DEV_A)])
    with pytest.raises(ValueError):
        Broker(Path("/tmp/unused"), home_id="not-hex", port=1883, accounts=[])


def test_a_connection_closed_before_its_tls_handshake_is_no_refusal(tmp_path: Path) -> None:
    """mosquitto logs an OpenSSL error for a TCP connection closed before any handshake (the
    hub's own readiness probe): never counted; a handshake a client aborts is, in either of
    the two ways mosquitto logs it (which one depends on how much of the handshake had
    arrived when it took the connection: a flaky suite run found the second)."""
    broker = make_broker(tmp_path / "broker", ports.port())
    broker.log_path.parent.mkdir(parents=True, exist_ok=True)
    broker.log_path.write_text(
        "1: New connection from 127.0.0.1:51918 on port 21444.\n"
        "1: OpenSSL Error[0]: error:0A000126:SSL routines::unexpected eof while reading\n"
        "1: Client <unknown> disconnected: Protocol error.\n"
        "1: Client connection from 127.0.0.1 failed: error:0A000126:SSL routines::unexpected"
        " eof while reading.\n"
        "2: OpenSSL Error[0]: error:0A000418:SSL routines::tlsv1 alert unknown ca\n"
        "3: Client connection from 127.0.0.1 failed: error:0A000418:SSL routines::tlsv1 alert"
        " unknown ca.\n"
        "4: Client connection from 127.0.0.1 failed: error:0A00010B:SSL routines::wrong version"
        " number.\n"
    )
    assert broker.refusals() == {"broker.refused.tls": 3}
