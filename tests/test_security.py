"""Mesh security over real processes: the broker ACL, envelope signatures, replay,
revocation, a rogue hub, and key files on disk (hostile bytes on the wire, group key
epochs and certificate scopes: :mod:`tests.test_security_wire`, a file of its own so that
the two halves run on separate workers).

The tests talk MQTT directly (aiomqtt) with a device's own bundle credentials, and build
envelopes with the product's own :class:`sync.envelope.Sealer` — forging, tampering and
replaying them as an attacker holding that device's keys could. Drop counters are flushed
to hub.db every 0.5 s, so everything here polls with a deadline. Ordering is the proof that
something *never* arrived: the broker handles one connection's publishes in order, so once
a later message from the same connection has been seen by the hub, an earlier one that was
not counted or stored never reached it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import socket
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiomqtt
import apsw
import pytest

from protos import mesh_pb2
from provisioning.bundle import Bundle
from provisioning.epochs import bundle_keys
from provisioning.identity import NodeKeys
from sync import topics
from sync.counter import PersistentCounter
from sync.envelope import (
    HUB,
    Opened,
    Opener,
    Peer,
    ReplayGuard,
    Sealer,
    random_id,
)
from sync.mqtt import TRANSIENT_SLOTS, transient_username
from tests.mesh_harness import Mesh, Proc, mosquitto_pids
from tests.waiting import poll_sync

pytestmark = pytest.mark.slow

PLACEHOLDER = "[placeholder reply: the brain is not wired in yet] "
LOG_LINE_RE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ [\w.]+: ")


# ---------------------------------------------------------------- envelopes
def shared_counter(bundle: Bundle) -> Callable[[], int]:
    """The bundle's own persistent counter (shared with ``yimi say`` and ``edge run``)."""

    def next_value() -> int:
        counter = PersistentCounter(bundle.state_dir / "counter.db")
        try:
            return counter.next()
        finally:
            counter.close()

    return next_value


def sealer(
    bundle: Bundle,
    *,
    sender: str | None = None,
    home_id: str | None = None,
    keys: NodeKeys | None = None,
    next_counter: Callable[[], int] | None = None,
) -> Sealer:
    """A Sealer with ``bundle``'s keys (or ``keys``), optionally lying about who sends."""
    return Sealer(
        home_id=home_id or bundle.home_id,
        node_id=sender or bundle.device_id,
        sign_key=(keys or bundle.keys).sign,
        box_key=(keys or bundle.keys).box,
        next_counter=next_counter or shared_counter(bundle),
        group_key=bundle.group_key,
    )


def utterance(
    bundle: Bundle, text: str, *, via: Sealer | None = None, recipient: str = HUB
) -> bytes:
    """Wire bytes of a typed utterance sealed to the hub."""
    now = int(time.time() * 1000)
    utt = mesh_pb2.Utterance(
        id=random_id("u-"),
        text=text,
        channel="test",
        started_ms=now,
        ended_ms=now,
        source="typed",
    )
    return (via or sealer(bundle)).seal(
        mesh_pb2.UTTERANCE, utt, recipient=recipient, recipient_box_pk=bundle.hub_box_pk
    )


def flip(data: bytes, *, in_signature: bool) -> bytes:
    """A copy of an envelope with one bit flipped in its signature or its sealed body."""
    outer = mesh_pb2.SignedEnvelope.FromString(data)
    if in_signature:
        sig = bytearray(outer.signature)
        sig[-1] ^= 0x01
        outer.signature = bytes(sig)
    else:
        body = bytearray(outer.body)
        body[-5] ^= 0x01  # inside the sealed ciphertext (the last field)
        outer.body = bytes(body)
    return outer.SerializeToString()


def device_opener(bundle: Path) -> Opener:
    """The opener a device of ``bundle`` builds (``edge_agent.node``): the hub as its only
    peer, the bundle's box key and every group key epoch the bundle holds."""
    b = Bundle.load(bundle)
    hub_peer = Peer(HUB, b.hub_sign_pk, b.hub_box_pk)
    return Opener(
        home_id=b.home_id,
        node_id=b.device_id,
        box_key=b.keys.box,
        lookup=lambda sender: hub_peer if sender == HUB else None,
        replay=ReplayGuard(),
        group_key=b.group_key,
        group_keys=bundle_keys(b.path, b.group_key, b.group_epoch),
    )


# ---------------------------------------------------------------- mqtt
_slots = itertools.count()


def client(mesh: Mesh, username: str, password: str, **kw: object) -> aiomqtt.Client:
    """A client logged in as one of ``username``'s transient logins (the broker makes the
    login the client id: the node's own login would take over the hub's or the device's
    own session); successive clients get successive slots."""
    login = transient_username(username, next(_slots) % TRANSIENT_SLOTS)
    return aiomqtt.Client(
        "127.0.0.1",
        mesh.mqtt_port,
        username=login,
        password=password,
        identifier=login,
        timeout=5,
        tls_context=mesh.mqtt_tls(),
        **kw,  # type: ignore[arg-type]
    )


def as_device(mesh: Mesh, bundle: Bundle, **kw: object) -> aiomqtt.Client:
    return client(mesh, bundle.device_id, bundle.mqtt_password, **kw)


def publish(mesh: Mesh, bundle: Bundle, *items: tuple[str, bytes]) -> None:
    """Publish ``(topic, payload)`` items in order over one connection as ``bundle``."""

    async def run() -> None:
        async with as_device(mesh, bundle) as c:
            for topic, payload in items:
                await c.publish(topic, payload, qos=1)

    asyncio.run(run())


# ---------------------------------------------------------------- hub state
def counters(mesh: Mesh) -> dict[str, int]:
    return {str(k): int(v) for k, v in mesh.hub_query("SELECT name, value FROM counters")}  # type: ignore[call-overload]


def rejected(mesh: Mesh) -> dict[str, int]:
    return {k: v for k, v in counters(mesh).items() if k.startswith("rejected.")}


def utterances(mesh: Mesh) -> list[str]:
    return [text for _, _, kind, text in mesh.hub_timeline() if kind == "utterance"]


def wait_counts(mesh: Mesh, expected: dict[str, int], timeout: float = 30) -> dict[str, int]:
    """Poll until every counter in ``expected`` has (at least) its value; return them all."""
    poll_sync(
        lambda: all(counters(mesh).get(k, 0) >= v for k, v in expected.items()),
        timeout,
        f"counters {expected} (have {counters(mesh)})",
    )
    return counters(mesh)


def uplink(b: Bundle) -> str:
    return topics.uplink(b.home_id, b.device_id)


def hub_log_is_clean(hub: Proc) -> str:
    """The hub's log: no traceback, and every line a one-line log record."""
    text = hub.text()
    assert "Traceback" not in text, text
    for line in text.splitlines():
        assert LOG_LINE_RE.match(line), f"not a one-line log record: {line!r}"
    return text


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


# ---------------------------------------------------------------- tests
def test_broker_acl_keeps_a_device_off_another_devices_topics(mesh: Mesh) -> None:
    """With A's credentials, publishing under B's topics never reaches the hub (nor B), and
    subscribing to B's topics yields nothing of B's; later messages of A's own do arrive,
    which proves the earlier ones were dropped by the broker."""
    a = Bundle.load(mesh.add_device("alpha", "glasses"))
    b = Bundle.load(mesh.add_device("bravo", "phone"))
    hub = mesh.start_hub()
    home = a.home_id
    b_root, a_inbox = topics.device_root(home, b.device_id), topics.inbox(home, a.device_id)
    as_b = sealer(a, sender=b.device_id)  # A's keys, claiming to be B

    b_inbox, a_uplink = topics.inbox(home, b.device_id), uplink(a)
    b_says = utterance(b, "B on its own uplink")

    async def collect(c: aiomqtt.Client, opener: Opener, own: str, echo: bytes) -> list[str]:
        """What one client sees, labelled, until the hub's reply on its inbox: an inbox
        message is labelled with the kind it opens as from the hub (the hub also writes to a
        phone's inbox unbidden: the audit head it asks witnesses for), an uplink message as
        the client's own publish coming back or not. The reply follows the echo: the broker
        queued the echo to the client before the hub could see the utterance."""
        seen: list[str] = []
        async with asyncio.timeout(10):
            async for msg in c.messages:
                topic, payload = msg.topic.value, msg.payload
                assert isinstance(payload, bytes)
                if topic == own:
                    opened = opener.open(payload)
                    kind = mesh_pb2.Kind.Name(opened.kind) if isinstance(opened, Opened) else None
                    seen.append(f"in:{kind or 'unopened'}")
                    if kind == "REPLY":
                        return seen
                elif topic.endswith("/up"):
                    seen.append(f"{topic}:{'echo' if payload == echo else 'other'}")
                else:
                    seen.append(topic)
        raise AssertionError("unreachable")

    async def run() -> tuple[list[str], list[str]]:
        async with as_device(mesh, b) as bc, as_device(mesh, a) as ac:
            await bc.subscribe(f"{b_root}/#", qos=1)
            await ac.subscribe(a_inbox, qos=1)
            await ac.subscribe(f"{b_root}/#", qos=1)  # A tries to read B's topics
            # A writes on B's uplink (as itself and as B), presence and inbox
            await ac.publish(uplink(b), utterance(a, "A on B's uplink"), qos=1)
            await ac.publish(uplink(b), utterance(a, "A as B on B's uplink", via=as_b), qos=1)
            await ac.publish(topics.presence(home, b.device_id), b"\x00fake", qos=1)
            await ac.publish(b_inbox, b"\x00fake", qos=1)
            # B talks to the hub and gets its reply
            await bc.publish(uplink(b), b_says, qos=1)
            seen_by_b = await collect(bc, device_opener(b.path), b_inbox, b_says)
            # then A, on its own uplink: a marker drop, then a legitimate utterance
            await ac.publish(a_uplink, b"\x00marker", qos=1)
            await ac.publish(a_uplink, utterance(a, "A on its own uplink"), qos=1)
            seen_by_a = await collect(ac, device_opener(a.path), a_inbox, b"")
        return seen_by_b, seen_by_a

    seen_by_b, seen_by_a = asyncio.run(run())
    # B saw its own publish come back, then its reply; nothing of A's (no other uplink
    # message, no presence, no inbox message the hub did not seal); whatever else the hub
    # sent B on its own is still the hub's
    hub_sent = {"in:AUDIT_HEAD"}
    assert [s for s in seen_by_b if s not in hub_sent] == [f"{uplink(b)}:echo", "in:REPLY"], (
        seen_by_b
    )
    # A saw only its own reply: not B's uplink, not B's reply
    assert seen_by_a == ["in:REPLY"], seen_by_a
    assert utterances(mesh) == ["B on its own uplink", "A on its own uplink"]
    # the marker proves the hub has handled (and flushed the counts of) everything before it
    wait_counts(mesh, {"rejected.malformed": 1})
    assert rejected(mesh) == {"rejected.malformed": 1}, (
        "something A published under B's topics reached the hub"
    )
    assert hub.alive()
    hub_log_is_clean(hub)


def test_forged_and_tampered_envelopes_are_rejected_by_signature(mesh: Mesh) -> None:
    """On A's own uplink (the broker lets it through): an envelope claiming sender B but
    signed with A's key, and A's envelopes with one flipped bit, are counted as
    ``rejected.bad_signature`` and never reach the timeline."""
    a = Bundle.load(mesh.add_device("alpha", "glasses"))
    b = Bundle.load(mesh.add_device("bravo", "phone"))
    hub = mesh.start_hub()

    forged = utterance(a, "I am B, honest", via=sealer(a, sender=b.device_id))
    sig_flipped = flip(utterance(a, "tampered signature"), in_signature=True)
    body_flipped = flip(utterance(a, "tampered body"), in_signature=False)
    publish(
        mesh,
        a,
        (uplink(a), forged),
        (uplink(a), sig_flipped),
        (uplink(a), body_flipped),
        (uplink(a), utterance(a, "the real A")),
    )
    poll_sync(lambda: utterances(mesh) == ["the real A"], 10, "A's genuine message")
    wait_counts(mesh, {"rejected.bad_signature": 3})
    assert rejected(mesh) == {"rejected.bad_signature": 3}
    assert utterances(mesh) == ["the real A"]
    status = mesh.yimi("hub", "status", "--home", str(mesh.home), check=True).stdout
    assert re.search(r"^\s+rejected\.bad_signature\s+3$", status, re.M), status
    log = hub_log_is_clean(hub)
    assert f"dropped envelope from {b.device_id}: bad_signature" in log
    assert log.count(f"dropped envelope from {a.device_id}: bad_signature") == 2


def test_a_replayed_envelope_is_rejected_even_after_a_hub_restart(mesh: Mesh) -> None:
    """The same signed envelope published twice: accepted once, then ``rejected.replayed``;
    the replay window is persisted, so a third copy after a hub restart is refused too."""
    a = Bundle.load(mesh.add_device("alpha", "glasses"))
    hub = mesh.start_hub()
    captured = utterance(a, "say it once", via=sealer(a, next_counter=lambda: 1_000_000))

    publish(mesh, a, (uplink(a), captured), (uplink(a), captured))
    wait_counts(mesh, {"rejected.replayed": 1, "accepted.utterance": 1})
    assert utterances(mesh) == ["say it once"]
    assert rejected(mesh) == {"rejected.replayed": 1}

    assert mesh.stop(hub) == 0
    hub = mesh.start_hub()
    publish(mesh, a, (uplink(a), captured))
    wait_counts(mesh, {"rejected.replayed": 2})
    assert utterances(mesh) == ["say it once"]
    assert counters(mesh)["accepted.utterance"] == 1
    hub_log_is_clean(hub)


def test_a_revoked_device_is_refused_within_one_second(mesh: Mesh) -> None:
    """While A is connected, ``yimi device revoke``: A's broker session is cut, its login
    refused, and every envelope of A's that still reaches the hub (injected over a
    broker account the device does not have) from 1 s after the command returned is
    counted ``rejected.revoked`` and stored nowhere. The measured delay is reported."""
    a = Bundle.load(mesh.add_device("alpha", "glasses"))
    hub = mesh.start_hub()
    hub_password = (mesh.home / "keys" / "broker.secret").read_text()
    period, span = 0.05, 1.5

    async def run() -> tuple[float, float | None, list[tuple[str, float]]]:
        async with as_device(mesh, a) as ac, client(mesh, HUB, hub_password) as injector:
            await ac.subscribe(topics.inbox(a.home_id, a.device_id), qos=1)
            await ac.publish(uplink(a), utterance(a, "before revoke"), qos=1)
            async with asyncio.timeout(10):
                async for _ in ac.messages:  # the reply: A is live
                    break
            t0 = time.monotonic()
            r = await asyncio.to_thread(
                mesh.yimi, "device", "revoke", "alpha", "--home", str(mesh.home)
            )
            t_ret = time.monotonic()
            assert r.returncode == 0, r.stderr
            cut: float | None = None

            async def watch_session() -> None:
                nonlocal cut
                try:
                    async for _ in ac.messages:
                        pass
                except aiomqtt.MqttError:
                    pass
                cut = time.monotonic() - t_ret

            watcher = asyncio.create_task(watch_session())
            sent: list[tuple[str, float]] = []
            i = 0
            while (dt := time.monotonic() - t_ret) < span:
                text = f"after revoke #{i}"
                await injector.publish(uplink(a), utterance(a, text), qos=1)
                sent.append((text, dt))
                i += 1
                await asyncio.sleep(period)
            async with asyncio.timeout(5):
                await watcher
            return t_ret - t0, cut, sent

    took, cut, sent = asyncio.run(run())
    poll_sync(
        lambda: (
            counters(mesh).get("rejected.revoked", 0)
            + len([t for t in utterances(mesh) if t.startswith("after revoke")])
            == len(sent)
        ),
        10,
        "the hub to handle every injected envelope",
    )
    accepted = [t for t in utterances(mesh) if t.startswith("after revoke")]
    refused = [(t, dt) for t, dt in sent if t not in accepted]
    assert accepted == [t for t, _ in sent[: len(accepted)]], "accepted after a refusal"
    assert refused, "nothing was refused"
    first_refused = refused[0][1]
    measured = (
        f"revoke command took {took:.3f} s; the hub refused A's envelopes from "
        f"{first_refused:.3f} s after it returned ({len(accepted)} accepted before); "
        f"A's broker session was cut after {cut if cut is None else round(cut, 3)} s"
    )
    assert first_refused <= 1.0, measured
    assert all(dt < 1.0 for t, dt in sent if t in accepted), measured
    assert cut is not None and cut <= 1.0, measured
    assert counters(mesh)["rejected.revoked"] == len(refused), measured
    print(measured)

    async def login() -> None:
        async with as_device(mesh, a):
            pass

    with pytest.raises(aiomqtt.MqttError, match=r"(?i)not authori[sz]ed"):
        asyncio.run(login())
    listing = mesh.yimi("device", "list", "--home", str(mesh.home), check=True).stdout
    assert re.search(r"^alpha\s+glasses\s+\S+\s+revoked\b", listing, re.M), listing
    assert hub.alive()
    hub_log_is_clean(hub)


def test_a_rogue_hub_with_another_key_is_refused(mesh: Mesh, tmp_path: Path) -> None:
    """A second home's hub (another key, another TLS CA) on other ports: ``yimi say --hub
    <rogue>`` queues (exit 3) at once, saying why (its TLS certificate is not from the pinned
    CA); ``yimi edge run --hub <rogue>`` logs the refusal and never logs in to the rogue
    broker."""
    bundle_dir = mesh.add_device("loyal", "phone")
    device = Bundle.load(bundle_dir).device_id
    rogue = Mesh(tmp_path / "rogue")
    rogue.root.mkdir()
    try:
        rogue.init()
        rogue_hub = rogue.start_hub()
        target = rogue.hub_target

        r = mesh.say(bundle_dir, "are you my hub", "--hub", target, "--timeout", "3")
        assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
        assert r.stdout == "", r.stdout
        assert "refusing hub at " + target in r.stderr, r.stderr
        assert "TLS certificate" in r.stderr and "CERTIFICATE_VERIFY" not in r.stderr, r.stderr
        assert "queued" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr, r.stderr

        edge = mesh.spawn("edge-rogue", "edge", "run", "--bundle", str(bundle_dir), "--hub", target)
        poll_sync(
            lambda: edge.text().count(f"refusing hub at {target}") >= 2 or not edge.alive(),
            20,
            "the edge to refuse the rogue hub (twice: it retries with backoff)",
        )
        assert edge.alive(), edge.text()
        text = edge.text()
        assert "connected to hub" not in text and "Traceback" not in text, text
        assert mesh.stop(edge) == 0, edge.text()

        broker_log = (rogue.home / "broker" / "mosquitto.log").read_text()
        assert device not in broker_log, "the device logged in to the rogue broker"
        assert rogue.hub_timeline() == [] and counters(rogue) == {}
        assert rogue_hub.alive()
    finally:
        rogue.close()
    assert mosquitto_pids(str(rogue.root)) == []
    # the utterance waits in the device's own outbox for its real hub
    conn = apsw.Connection(str(bundle_dir / "state" / "outbox.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert conn.execute("SELECT count(*) FROM outbox").fetchone() == (1,)
    finally:
        conn.close()


def _scan_roots(tmp_path: Path) -> list[Path]:
    roots = {tmp_path.resolve(), Path(tempfile.gettempdir()).resolve(), Path("/tmp").resolve()}
    return sorted(r for r in roots if not any(r != o and r.is_relative_to(o) for o in roots))


@pytest.fixture(scope="module")
def module_started() -> float:
    """The wall clock before any home of this module's tests exists: pytest sets a module
    fixture up before the function fixtures (``mesh`` among them)."""
    return time.time()


CTIME_SLACK_S = 2.0
"""seconds subtracted from a cutoff (the kernel stamps file times with a coarse clock)"""


def files_containing(
    needles: dict[str, list[bytes]], roots: list[Path], *, since: float = 0.0
) -> dict[str, set[Path]]:
    """For each label, every regular file under ``roots`` holding any of its byte strings
    (one pass over the tree; unreadable files are skipped).

    Files whose status last changed before ``since`` (wall clock) are not read: a file that
    holds bytes made after ``since`` was written after it, and writing (or linking, renaming,
    copying) sets ``st_ctime``, which no process can set back. The needles are secrets made
    by the test, so this skips only files that cannot hold them — on a shared machine most of
    /tmp (gigabytes: half a minute of reading)."""
    found: dict[str, set[Path]] = {label: set() for label in needles}
    longest = max(len(n) for ns in needles.values() for n in ns)
    for root in roots:
        for dirpath, _dirs, filenames in os.walk(root, followlinks=False):
            for name in filenames:
                path = Path(dirpath, name)
                try:
                    st = path.lstat()
                    if not stat.S_ISREG(st.st_mode) or st.st_size > 256 * 1024 * 1024:
                        continue
                    if st.st_ctime < since - CTIME_SLACK_S:
                        continue
                    with path.open("rb") as fh:
                        tail = b""
                        while chunk := fh.read(1 << 20):
                            window = tail + chunk
                            for label, ns in needles.items():
                                if any(n in window for n in ns):
                                    found[label].add(path.resolve())
                            tail = window[-longest:]
                except OSError:
                    continue
    return found


def test_private_keys_live_only_in_their_own_files_with_mode_0600(
    module_started: float, mesh: Mesh, tmp_path: Path
) -> None:
    """After init, add and pair (and some traffic): every private key file is 0600 in a
    0700 folder, and each device's private key bytes (hex or raw) are found, across the
    test tree and the whole of /tmp, only in that device's own ``device.key``."""
    flashed = mesh.add_device("flashed", "watch")
    hub = mesh.start_hub()
    code = mesh.yimi("hub", "pair-code", "--home", str(mesh.home), check=True).stdout.split()[0]
    paired = mesh.root / "bundle-paired"
    mesh.yimi(
        "device",
        "pair",
        "--code",
        code,
        "--profile",
        "phone",
        "--name",
        "paired",
        "--out",
        str(paired),
        "--hub",
        mesh.hub_target,
        check=True,
    )
    for bundle in (flashed, paired):
        r = mesh.say(bundle, f"hello from {bundle.name}")
        assert r.returncode == 0, r.stderr

    def mode(p: Path) -> int:
        return stat.S_IMODE(p.stat().st_mode)

    home = mesh.home
    assert mode(home) == 0o700 and mode(home / "keys") == 0o700
    key_files = sorted((home / "keys").iterdir())
    assert {p.name for p in key_files} >= {"home.key", "hub.key", "group.key", "broker.secret"}
    for p in key_files:
        assert mode(p) == 0o600, f"{p} has mode {mode(p):o}"
    assert mode(home / "broker") == 0o700
    for p in (home / "broker" / "passwd", home / "broker" / "acl"):
        assert mode(p) == 0o600, f"{p} has mode {mode(p):o}"
    for bundle in (flashed, paired):
        assert mode(bundle) == 0o700 and mode(bundle / "state") == 0o700
        for name in ("device.key", "secrets.json"):
            assert mode(bundle / name) == 0o600, f"{bundle / name} has mode {mode(bundle / name):o}"

    # one pass over the test tree and /tmp for every secret, hex and raw
    needles: dict[str, list[bytes]] = {}
    owners: dict[str, Path] = {}
    for key_file in (
        flashed / "device.key",
        paired / "device.key",
        home / "keys" / "home.key",
        home / "keys" / "hub.key",
    ):
        keys = json.loads(key_file.read_text())
        for field in ("sign_seed", "box_sk"):
            label = f"{field} of {key_file}"
            needles[label] = [keys[field].encode(), bytes.fromhex(keys[field])]
            owners[label] = key_file.resolve()
    for bundle in (flashed, paired):  # a device's broker password (the home keeps a hash)
        secrets_file = bundle / "secrets.json"
        label = f"mqtt_password of {bundle.name}"
        needles[label] = [json.loads(secrets_file.read_text())["mqtt_password"].encode()]
        owners[label] = secrets_file.resolve()
    found = files_containing(needles, _scan_roots(tmp_path), since=module_started)
    for label, holders in found.items():
        assert holders == {owners[label]}, f"{label} found in {sorted(map(str, holders))}"
    assert hub.alive()
