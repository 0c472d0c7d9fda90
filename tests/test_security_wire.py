"""Mesh security over real processes, part two (see :mod:`tests.test_security` for the
setting; the two halves run on separate workers): hostile bytes on the wire, group key
epochs and revocation, and every kind checked against the sender's certificate."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import stat
import time
from collections.abc import Callable
from pathlib import Path

import aiomqtt
import pytest
from google.protobuf.message import Message

from protos import consent_pb2, executor_pb2, mesh_pb2, sync_pb2
from provisioning.bundle import Bundle
from provisioning.epochs import bundle_keys
from provisioning.identity import NodeKeys
from sync import documents as docs
from sync import topics
from sync.envelope import (
    HUB,
    Dropped,
    DropReason,
    Opened,
    Sealer,
    random_id,
)
from sync.replicas import ReplicaSet
from tests.mesh_harness import Mesh, mosquitto_pids
from tests.test_security import (
    as_device,
    counters,
    device_opener,
    hub_log_is_clean,
    port_open,
    publish,
    rejected,
    sealer,
    uplink,
    utterance,
    utterances,
    wait_counts,
)
from tests.waiting import poll_sync

pytestmark = pytest.mark.slow


def test_hostile_bytes_on_the_wire_never_crash_the_hub(mesh: Mesh) -> None:
    """Garbage, an empty payload, a truncated envelope, another home's envelope, one from
    an unknown sender, one for another recipient and a 300 KB one reach the hub and are
    counted by reason; a 600 KB one is refused by the broker (max packet 512 KiB). The hub
    stays up, logs one line per drop, no traceback, and still serves A afterwards."""
    a = Bundle.load(mesh.add_device("alpha", "glasses"))
    b = Bundle.load(mesh.add_device("bravo", "phone"))
    hub = mesh.start_hub()
    stranger = NodeKeys.generate()
    valid = utterance(a, "cut short")
    items = [
        (uplink(a), bytes(range(256)) * 4),  # garbage
        (uplink(a), b""),  # empty
        (uplink(a), valid[: len(valid) // 2]),  # truncated
        (uplink(a), utterance(a, "other home", via=sealer(a, home_id="0123456789abcdef"))),
        (uplink(a), utterance(a, "who?", via=sealer(a, sender="f00df00df00df00d", keys=stranger))),
        (uplink(a), utterance(a, "not for the hub", recipient=b.device_id)),
        (uplink(a), b"\x0a" + os.urandom(300 * 1024)),  # over the hub's 256 KiB
    ]
    publish(mesh, a, *items)
    expected = {
        "rejected.malformed": 3,
        "rejected.wrong_home": 1,
        "rejected.unknown_sender": 1,
        "rejected.wrong_recipient": 1,
        "rejected.oversize": 1,
    }
    wait_counts(mesh, expected)
    assert rejected(mesh) == expected

    # 600 KB: over the broker's max_packet_size; it drops the connection, not the hub
    async def too_big() -> None:
        async with as_device(mesh, a) as c:
            await c.publish(uplink(a), b"\x0a" + bytes(600 * 1024), qos=0)
            async with asyncio.timeout(10):
                async for _ in c.messages:  # ends when the broker drops the connection
                    pass

    with pytest.raises(aiomqtt.MqttError):
        asyncio.run(too_big())
    broker_log = mesh.home / "broker" / "mosquitto.log"
    poll_sync(
        lambda: "disconnected due to oversize packet" in broker_log.read_text(),
        5,
        "the broker to refuse the oversize packet",
    )

    publish(mesh, a, (uplink(a), b"\x00after"), (uplink(a), utterance(a, "still there?")))
    poll_sync(lambda: utterances(mesh) == ["still there?"], 10, "the hub to serve A again")
    wait_counts(mesh, {"rejected.malformed": 4})
    assert rejected(mesh) == {**expected, "rejected.malformed": 4}, "the 600 KB one got through"
    assert hub.alive()
    log = hub_log_is_clean(hub)
    assert log.count("dropped envelope from") == sum(expected.values()) + 1
    for reason in ("malformed", "wrong_home", "unknown_sender", "wrong_recipient", "oversize"):
        assert f": {reason} " in log or log.rstrip().endswith(f": {reason}"), reason

    assert mesh.stop(hub, signal.SIGTERM) == 0
    assert mosquitto_pids(str(mesh.root)) == [] and not port_open(mesh.grpc_port)


# ---------------------------------------------------------------- group key epochs
def held_epochs(bundle: Path) -> list[int]:
    """The group key epochs a device holds (what its own processes persisted)."""
    b = Bundle.load(bundle)
    return [e.number for e in bundle_keys(b.path, b.group_key, b.group_epoch).epochs]


def epoch_of(data: bytes) -> int:
    return mesh_pb2.EnvelopeBody.FromString(mesh_pb2.SignedEnvelope.FromString(data).body).epoch


def test_a_revoked_bundle_cannot_open_a_broadcast_sent_after_its_revocation(
    mesh: Mesh, tmp_path: Path
) -> None:
    """Alpha, bravo (online) and charlie (offline) are enrolled. ``yimi home rotate-key``
    makes epoch 1 and both online devices get it; a broadcast under it is captured off the
    broker (MQTT is plain TCP: anyone on the LAN has these bytes) and alpha's bundle opens
    it. Then alpha is revoked: the hub makes epoch 2 and boxes it to bravo and charlie only.
    The next broadcast — the sync of bravo's `yimi say`, served — is captured again: alpha's
    bundle (the one its edge daemon kept running with, and a copy stolen before the
    revocation) cannot open it, bravo's can. Charlie comes back online, is handed epoch 2,
    catches up on what it missed and opens what is broadcast next; alpha still cannot."""
    a = mesh.add_device("alpha", "glasses")
    b = mesh.add_device("bravo", "phone")
    c = mesh.add_device("charlie", "watch")
    hub = mesh.start_hub()
    edges = [mesh.start_edge(a), mesh.start_edge(b)]
    bravo = Bundle.load(b)

    async def captured_during(action: Callable[[], object], want: Callable[[bytes], bool]) -> bytes:
        """Run ``action`` (in a thread) while listening on the mesh topic as a LAN tap
        would; the first broadcast ``want`` accepts."""
        async with as_device(mesh, bravo) as tap:
            await tap.subscribe(topics.mesh(bravo.home_id), qos=1)
            done = asyncio.ensure_future(asyncio.to_thread(action))
            async with asyncio.timeout(30):
                async for message in tap.messages:
                    data = message.payload
                    assert isinstance(data, bytes)
                    if want(data):
                        await done
                        return data
        raise AssertionError("no broadcast captured")

    def say(bundle: Path, text: str) -> Callable[[], None]:
        def run() -> None:
            r = mesh.say(bundle, text)
            assert r.returncode == 0, r.stderr

        return run

    # epoch 1 by hand, while everyone is enrolled: both online devices take it
    t0 = time.monotonic()
    out = mesh.yimi("home", "rotate-key", "--home", str(mesh.home), check=True).stdout
    assert "epoch 1 made" in out, out
    poll_sync(lambda: held_epochs(a) == held_epochs(b) == [0, 1], 10, "epoch 1 on alpha and bravo")
    took_rotate = time.monotonic() - t0
    before = asyncio.run(captured_during(say(b, "said before"), lambda d: epoch_of(d) == 1))
    got = device_opener(a).open(before)
    assert isinstance(got, Opened), got  # the tap works, and alpha could read until now
    stolen = tmp_path / "stolen-alpha"
    shutil.copytree(a, stolen)

    # the revocation makes epoch 2, boxed to bravo and charlie only
    t0 = time.monotonic()
    mesh.yimi("device", "revoke", "alpha", "--home", str(mesh.home), check=True)
    poll_sync(lambda: held_epochs(b) == [1, 2], 10, "epoch 2 on bravo")
    took_revoke = time.monotonic() - t0
    poll_sync(lambda: not edges[0].alive() or "revoked" in edges[0].text(), 10, "alpha cut")
    secret = "said after alpha was revoked"
    after = asyncio.run(captured_during(say(b, secret), lambda d: epoch_of(d) == 2))
    for thief in (a, stolen):
        assert held_epochs(thief) == [0, 1], thief
        refused = device_opener(thief).open(after)
        assert isinstance(refused, Dropped) and refused.reason == DropReason.UNDECRYPTABLE
    read = device_opener(b).open(after)
    assert isinstance(read, Opened) and read.kind == mesh_pb2.SYNC_UPDATE, read
    assert secret.encode() in read.payload.SerializeToString()
    assert secret.encode() not in after

    # charlie was offline throughout: it gets epoch 2 when it is back, and catches up
    t0 = time.monotonic()
    edges.append(mesh.start_edge(c))
    poll_sync(lambda: held_epochs(c)[-1] == 2, 10, "epoch 2 on charlie")
    took_offline = time.monotonic() - t0
    folder = Bundle.load(c).state_dir / "replicas"
    poll_sync(
        lambda: secret in [e.text for e in ReplicaSet(folder).timeline()], 20, "charlie's catch-up"
    )
    later = asyncio.run(captured_during(say(c, "charlie is back"), lambda d: epoch_of(d) == 2))
    assert isinstance(device_opener(c).open(later), Opened)
    assert isinstance(device_opener(b).open(later), Opened)
    refused = device_opener(stolen).open(later)
    assert isinstance(refused, Dropped) and refused.reason == DropReason.UNDECRYPTABLE
    # the hub keeps its epochs private and counts the rotation
    epochs_file = mesh.home / "keys" / "epochs.json"
    assert stat.S_IMODE(epochs_file.stat().st_mode) == 0o600
    assert [e["epoch"] for e in json.loads(epochs_file.read_text())["epochs"]] == [1, 2]
    wait_counts(mesh, {"group_key.rotated.revocation": 1})
    status = mesh.yimi("hub", "status", "--home", str(mesh.home), check=True).stdout
    assert "mesh group key: epoch 2," in status, status
    assert re.search(r"^\s+group_key\.rotated\.revocation\s+1$", status, re.M), status
    print(
        f"rotate-key reached 2 online devices in {took_rotate:.2f} s; a revocation's epoch "
        f"reached the remaining online device in {took_revoke:.2f} s; the offline device had "
        f"it {took_offline:.2f} s after its edge started"
    )
    assert hub.alive()
    hub_log_is_clean(hub)


def test_a_revocation_while_the_hub_was_down_and_the_periodic_rotation_make_new_epochs(
    mesh: Mesh,
) -> None:
    """Alpha is revoked while the hub is not running: the hub makes epoch 1 as it starts
    and bravo gets it when it comes online. With ``mesh.group_key_days`` tiny the hub
    then rotates by itself, and bravo follows every epoch."""
    a = mesh.add_device("alpha", "glasses")
    b = mesh.add_device("bravo", "phone")
    mesh.yimi("device", "revoke", "alpha", "--home", str(mesh.home), check=True)
    hub = mesh.start_hub()
    wait_counts(mesh, {"group_key.rotated.revocation": 1})
    mesh.start_edge(b)
    poll_sync(lambda: held_epochs(b)[-1] >= 1, 10, "epoch 1 on bravo")
    assert held_epochs(a) == [0]
    mesh.stop(hub)
    mesh.configure(mesh={"group_key_days": 2 / 86_400})  # every 2 s
    hub = mesh.start_hub()
    wait_counts(mesh, {"group_key.rotated.periodic": 2}, timeout=20)
    epochs = json.loads((mesh.home / "keys" / "epochs.json").read_text())["epochs"]
    newest = epochs[-1]["epoch"]
    assert newest >= 3 and [e["epoch"] for e in epochs] == [newest - 1, newest]
    poll_sync(lambda: held_epochs(b)[-1] >= newest, 10, f"epoch {newest} on bravo")
    assert counters(mesh)["group_key.rotated.revocation"] == 1  # not made again at restart
    r = mesh.say(b, "still served")
    assert r.returncode == 0, r.stderr
    assert hub.alive()
    hub_log_is_clean(hub)


# ---------------------------------------------------------------- certificate scopes (issue 15)
def sync_update(bundle: Bundle, *updates: sync_pb2.DocUpdate, via: Sealer | None = None) -> bytes:
    """A live SYNC_UPDATE as a device sends it: group-sealed to the mesh, its own topic."""
    return (via or sealer(bundle)).seal(
        mesh_pb2.SYNC_UPDATE, sync_pb2.SyncUpdate(updates=list(updates)), recipient="*"
    )


def boxed(bundle: Bundle, kind: int, msg: Message, *, via: Sealer | None = None) -> bytes:
    return (via or sealer(bundle)).seal(
        kind, msg, recipient=HUB, recipient_box_pk=bundle.hub_box_pk
    )


def test_every_kind_is_checked_against_the_senders_certificate(mesh: Mesh) -> None:
    """The attacks of issue 15 (failures 4, 6, 7, 8), each over the attacker's own topics:
    a watch without ``timeline.write`` writes a memo and a ``reply``-kind entry into the
    timeline and sends an approval; glasses without ``notes.write`` edit a note; glasses send
    an executor result and a hub-only ``REPLY``; a mac (an executor) sends a result nobody
    asked for; glasses send an utterance sealed with the group key to ``*`` and one with
    counter 2^63. Each is refused and counted by reason (``yimi hub status`` shows them),
    none reaches the hub's documents or timeline nor the phone, the hub logs no traceback,
    the glasses' replay window did not move, and a legitimate ``yimi say`` is answered."""
    watch = Bundle.load(mesh.add_device("ticker", "watch"))
    glasses_dir = mesh.add_device("specs", "glasses")
    glasses = Bundle.load(glasses_dir)
    phone_dir = mesh.add_device("pocket", "phone")
    phone = Bundle.load(phone_dir)
    mac = Bundle.load(mesh.add_device("desk", "mac"))
    hub = mesh.start_hub()
    watcher = mesh.start_edge(phone_dir)  # sees what the hub re-broadcasts
    home = phone.home_id

    # the phone (notes.write) writes a note; it reaches the hub and comes back to the phone
    scratch = ReplicaSet(mesh.root / "scratch")
    note = scratch.set_note("n-1", {"text": "buy milk", "kind": "todo"}, device=phone.device_id)
    publish(mesh, phone, (topics.sync(home, phone.device_id), sync_update(phone, note)))
    hub_docs = mesh.home / "replicas"
    poll_sync(lambda: [n.text for n in ReplicaSet(hub_docs).notes()] == ["buy milk"], 15, "note")

    now = int(time.time() * 1000)
    memo = ReplicaSet(mesh.root / "scratch-w").add_entry(
        docs.make_entry(entry_id="w-memo", device=watch.device_id, kind="memo", text="memo")
    )
    fake_reply = ReplicaSet(mesh.root / "scratch-w2").add_entry(
        docs.make_entry(
            entry_id="w-reply",
            device=watch.device_id,
            kind="reply",
            text="I sent the e-mail to your bank.",
        )
    )
    edit = scratch.set_note("n-1", {"text": "wire 5000 to mallory"}, device=glasses.device_id)
    publish(
        mesh,
        watch,
        (topics.sync(home, watch.device_id), sync_update(watch, memo)),
        (topics.sync(home, watch.device_id), sync_update(watch, fake_reply)),
        # glasses hold approve.gesture (checked card by card: test_nod_mesh.py); a watch
        # holds no card scope at all
        (uplink(watch), boxed(watch, mesh_pb2.APPROVAL, consent_pb2.Approval(body=b"yes"))),
    )
    huge = sealer(glasses, next_counter=lambda: 2**63)
    group_utterance = sealer(glasses).seal(
        mesh_pb2.UTTERANCE,
        mesh_pb2.Utterance(id=random_id("u-"), text="group-sealed", started_ms=now, ended_ms=now),
        recipient="*",
    )
    publish(
        mesh,
        glasses,
        (topics.sync(home, glasses.device_id), sync_update(glasses, edit)),
        (
            uplink(glasses),
            boxed(glasses, mesh_pb2.EXEC_RESULT, executor_pb2.ExecResult(request_id="r-1")),
        ),
        (
            uplink(glasses),
            boxed(glasses, mesh_pb2.REPLY, mesh_pb2.Reply(id="r-x", text="I paid the bill")),
        ),
        (uplink(glasses), group_utterance),
        (uplink(glasses), utterance(glasses, "counter 2^63", via=huge)),
    )
    publish(
        mesh,
        mac,
        (uplink(mac), boxed(mac, mesh_pb2.EXEC_RESULT, executor_pb2.ExecResult(request_id="r-2"))),
    )
    expected = {
        "rejected.scope": 6,
        "rejected.not_boxed": 1,
        "rejected.malformed": 1,
        "rejected.exec_result_unexpected": 1,
    }
    wait_counts(mesh, expected)

    # a legitimate memo of the glasses (timeline.write) right after: applied, re-broadcast
    legit = ReplicaSet(mesh.root / "scratch-g").add_entry(
        docs.make_entry(entry_id="g-memo", device=glasses.device_id, kind="memo", text="legit")
    )
    publish(mesh, glasses, (topics.sync(home, glasses.device_id), sync_update(glasses, legit)))
    phone_docs = phone.state_dir / "replicas"
    poll_sync(
        lambda: [e.id for e in ReplicaSet(phone_docs).timeline()] == ["g-memo"],
        15,
        "the phone to receive the legitimate memo",
    )
    # the hub handles a connection's messages in order: nothing refused got anywhere
    for folder in (hub_docs, phone_docs):
        replicas = ReplicaSet(folder)
        assert [e.id for e in replicas.timeline()] == ["g-memo"], folder
        assert [n.text for n in replicas.notes()] == ["buy milk"], folder
        raw = [
            v.get("id")
            for d in replicas.doc_ids()
            if d.startswith(docs.TIMELINE)
            for v in replicas.get(d).doc.get_list("entries").get_value()  # type: ignore[union-attr]
            if isinstance(v, dict)
        ]
        assert raw == ["g-memo"], f"a refused entry reached {folder}: {raw}"
    assert [r[1] for r in mesh.hub_timeline()] == [glasses.device_id]

    # the glasses' window did not move to 2^63: its next envelopes (shared counter) work
    r = mesh.say(glasses_dir, "are you still there")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip(), "no answer"
    assert "are you still there" in utterances(mesh)
    assert rejected(mesh) == expected
    status = mesh.yimi("hub", "status", "--home", str(mesh.home), check=True).stdout
    for name, value in expected.items():
        assert re.search(rf"^\s+{re.escape(name)}\s+{value}$", status, re.M), status
    assert hub.alive() and watcher.alive()
    log = hub_log_is_clean(hub)
    assert "OverflowError" not in log
    assert "needs the 'timeline.write' scope" in log and "needs the 'notes.write' scope" in log
    assert "needs the 'approve' scope" in log and "needs the 'execute' scope" in log
