"""End to end over real processes: ``yimi home init`` → ``device add`` → ``hub run`` →
``yimi say`` / ``yimi edge run``, with the real mosquitto, gRPC and zeroconf on loopback.

Every test ends by stopping its hub with SIGTERM and checking that it exits 0 and leaves
no broker process and no listening port behind.
"""

from __future__ import annotations

import json
import re
import signal
import socket
from pathlib import Path

import pytest
import yaml

from hub.brain.replies import say as reply_text
from tests.mesh_harness import Mesh, Proc, mosquitto_pids
from tests.waiting import poll_sync
from worlds import ports

pytestmark = pytest.mark.slow

UNKNOWN = reply_text("unknown", "en")
"""replies come from the built-in rule-based brain; what it does not understand it
answers with "I heard: <text>." and, honestly, what it can do"""
ROW_RE = re.compile(
    r"^\s*(?P<seq>\d+|pending)\s+(?P<device>\S+)\s+"
    r"(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\s+(?P<kind>\w+)\s+(?P<text>.*)$"
)


# ---------------------------------------------------------------- helpers
def device_id(bundle: Path) -> str:
    return str(yaml.safe_load((bundle / "bundle.yaml").read_text())["device_id"])


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def timeline_rows(stdout: str) -> list[dict[str, str]]:
    """Parse ``yimi timeline`` output (after its header line) into dicts."""
    lines = stdout.splitlines()
    assert lines and lines[0].split() == ["SEQ", "DEVICE", "TIME", "KIND", "TEXT"], stdout
    rows = []
    for line in lines[1:]:
        m = ROW_RE.match(line)
        assert m, f"unparsable timeline line: {line!r}"
        rows.append(m.groupdict())
    return rows


def say_ok(mesh: Mesh, bundle: Path, text: str, *args: str) -> str:
    r = mesh.say(bundle, text, *args)
    assert r.returncode == 0, f"say {text!r} failed ({r.returncode}): {r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr
    return r.stdout


def presence_state(mesh: Mesh, name: str) -> str:
    out = mesh.yimi("device", "list", "--home", str(mesh.home), check=True).stdout
    for line in out.splitlines()[1:]:
        cols = line.split()
        if cols and cols[0] == name:
            return cols[3]
    raise AssertionError(f"{name} not in device list:\n{out}")


def stop_hub_cleanly(mesh: Mesh, hub: Proc) -> None:
    """SIGTERM the hub: exit 0, no mosquitto, no gRPC or MQTT port listening."""
    rc = mesh.stop(hub, signal.SIGTERM)
    assert rc == 0, f"hub exited {rc} on SIGTERM:\n{hub.text()[-3000:]}"
    assert mosquitto_pids(str(mesh.root)) == [], "mosquitto survived the hub's SIGTERM"
    assert not port_open(mesh.grpc_port), "the gRPC port still listens after SIGTERM"
    assert not port_open(mesh.mqtt_port), "the MQTT port still listens after SIGTERM"
    assert not (mesh.home / "hub.pid").exists(), "hub.pid left behind"
    assert "Traceback" not in hub.text(), hub.text()


# ---------------------------------------------------------------- tests
def test_two_devices_interleaved_timeline_acks_status_and_sigterm(mesh: Mesh) -> None:
    """init → two devices → hub → interleaved ``say``: one ordered timeline with seq,
    device, time and text (CLI and hub.db), every reply printed and ACKed ``rendered``,
    each device's own view carries the hub's seqs, ``hub status`` counts it all, and
    SIGTERM stops the hub with nothing left behind."""
    g = mesh.add_device("glasses1", "glasses")
    p = mesh.add_device("phone1", "phone")
    ids = {g: device_id(g), p: device_id(p)}
    hub = mesh.start_hub()

    order = [g, p, p, g, p, g]
    sent: list[tuple[Path, str]] = []
    for i, bundle in enumerate(order):
        text = f"utterance {i} from {bundle.name}"
        out = say_ok(mesh, bundle, text)
        # the reply to *this* utterance is printed (no "(queued earlier)" items here)
        (line,) = out.strip().splitlines()
        assert line == f"I heard: {text}. {UNKNOWN}", out
        sent.append((bundle, text))

    # hub.db: utterance, then its reply, in send order, with consecutive seqs
    rows: list[tuple[int, str, str, str, int]] = [
        (int(q), str(d), str(k), str(t), int(ts))  # type: ignore[call-overload]
        for q, d, k, t, ts in mesh.hub_query(
            "SELECT seq, device, kind, text, ts_ms FROM timeline ORDER BY seq"
        )
    ]
    assert len(rows) == 2 * len(sent), rows
    for n, (bundle, text) in enumerate(sent):
        utt, rep = rows[2 * n], rows[2 * n + 1]
        assert utt[1:4] == (ids[bundle], "utterance", text), utt
        assert rep[1:3] == ("hub", "reply"), rep
        assert rep[3] == f"I heard: {text}. {UNKNOWN}", rep
        assert rep[0] == utt[0] + 1
        assert utt[4] > 1_600_000_000_000, utt
    seqs = [r[0] for r in rows]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)

    # `yimi timeline --home`: the same rows, with seq, device, time and text
    # (the device column may show the device's name or its id)
    names = {ids[g]: "glasses1", ids[p]: "phone1", "hub": "hub"}
    cli = timeline_rows(mesh.yimi("timeline", "--home", str(mesh.home), check=True).stdout)
    assert len(cli) == len(rows)
    for shown, row in zip(cli, rows, strict=True):
        assert int(shown["seq"]) == row[0]
        assert shown["device"] in (row[1], names[str(row[1])]), shown
        assert (shown["kind"], shown["text"]) == row[2:4]

    # every reply ACKed by the device that asked, state "rendered"
    def acks() -> list[tuple[object, ...]]:
        return mesh.hub_query(
            "SELECT r.utterance_seq, r.device, d.device, d.state FROM replies r "
            "JOIN deliveries d ON d.reply_id = r.id ORDER BY r.utterance_seq"
        )

    poll_sync(lambda: len(acks()) == len(sent), 10, "an ACK for every reply")
    utt_rows = [r for r in rows if r[2] == "utterance"]
    assert acks() == [(r[0], r[1], r[1], "rendered") for r in utt_rows]

    # `yimi timeline --bundle`: the device's replica of the shared timeline (same seqs and
    # order as the hub), current at least up to this device's own last turn
    for bundle in (g, p):
        view = timeline_rows(mesh.yimi("timeline", "--bundle", str(bundle), check=True).stdout)
        listed = [(int(r["seq"]), r["kind"], r["text"]) for r in view]
        assert listed == [(r[0], r[2], r[3]) for r in rows[: len(listed)]], listed
        own = [r for r in rows if r[1] == ids[bundle]]
        assert len(listed) >= own[-1][0] + 1, "the device's last turn and its reply are listed"
        assert {r["device"] for r in view if int(r["seq"]) in {o[0] for o in own}} == {
            bundle.name.removeprefix("bundle-")
        }

    # `yimi hub status`: running, both devices, counts by name
    status = mesh.yimi("hub", "status", "--home", str(mesh.home), check=True).stdout
    assert f"hub: running (pid {hub.popen.pid})" in status, status
    assert re.search(r"^glasses1\s+glasses\s+" + ids[g], status, re.M), status
    assert re.search(r"^phone1\s+phone\s+" + ids[p], status, re.M), status
    assert re.search(r"^\s+accepted\.utterance\s+6$", status, re.M), status
    assert re.search(r"^\s+accepted\.ack\s+6$", status, re.M), status
    assert "rejected." not in status, status

    stop_hub_cleanly(mesh, hub)
    status = mesh.yimi("hub", "status", "--home", str(mesh.home), check=True).stdout
    assert "hub: not running" in status, status


def test_say_without_hub_address_finds_the_hub_by_zeroconf(mesh: Mesh) -> None:
    """With no --hub, no cached address and a stale hint (a closed port), ``yimi say``
    can only reach the hub through its ``_yimi._tcp`` advert on loopback."""
    bundle = mesh.add_device("roamer", "phone")
    cfg_file = bundle / "bundle.yaml"
    cfg = yaml.safe_load(cfg_file.read_text())
    closed = ports.port()
    cfg["hub"]["grpc_port"] = closed  # the hint points at nothing
    cfg_file.write_text(yaml.safe_dump(cfg, sort_keys=False))
    cache = bundle / "state" / "hub.json"
    cache.unlink(missing_ok=True)
    hub = mesh.start_hub()
    assert not port_open(closed)

    out = say_ok(mesh, bundle, "where is my hub")
    assert out.strip(), "the hub it found answered"
    assert [r[3] for r in mesh.hub_timeline() if r[2] == "utterance"] == ["where is my hub"]
    # the address it found (and cached) is the advertised one, not the dead hint
    found = json.loads(cache.read_text())
    assert (found["host"], found["grpc_port"], found["mqtt_port"]) == (
        "127.0.0.1",
        mesh.grpc_port,
        mesh.mqtt_port,
    ), found
    stop_hub_cleanly(mesh, hub)


def test_edge_daemon_and_say_share_a_bundle_and_presence_follows_the_edge(mesh: Mesh) -> None:
    """``yimi edge run`` and ``yimi say`` on one bundle at once: say prints the reply, the
    edge receives and ACKs it too, the utterance lands once. Presence is online while the
    edge runs,
    offline after its SIGTERM (explicit offline) and after its SIGKILL (retained will)."""
    bundle = mesh.add_device("specs", "glasses")
    did = device_id(bundle)
    hub = mesh.start_hub()
    assert presence_state(mesh, "specs") == "never"

    edge = mesh.start_edge(bundle)
    poll_sync(lambda: presence_state(mesh, "specs") == "online", 10, "presence online")

    texts = ["first with the edge running", "second with the edge running"]
    for text in texts:
        out = say_ok(mesh, bundle, text)
        assert f"I heard: {text}. {UNKNOWN}" in out
    utterances = [(d, t) for _, d, k, t in mesh.hub_timeline() if k == "utterance"]
    assert utterances == [(did, t) for t in texts], "each utterance exactly once, in order"

    # Both processes got every reply and ACKed it: the hub keeps one delivery per reply
    # and counts the second ACK as a duplicate. (Which of the two *prints* a reply first
    # is a race: the edge skips replies already in the bundle's shared local timeline.)
    def counter(name: str) -> int:
        rows = mesh.hub_query("SELECT value FROM counters WHERE name=?", name)
        return int(rows[0][0]) if rows else 0  # type: ignore[call-overload]

    # (a reply comes in chunks, each ACKed on its own: one duplicate per chunk)
    chunks = int(mesh.hub_query("SELECT count(*) FROM reply_chunks")[0][0])  # type: ignore[call-overload]
    poll_sync(lambda: counter("accepted.ack_duplicate") == chunks, 10, "the edge's ACKs too")
    assert counter("accepted.ack") == 2
    assert mesh.hub_query("SELECT count(*) FROM deliveries WHERE state='rendered'") == [(2,)]
    assert mesh.hub_query("SELECT count(*) FROM deliveries") == [(2,)]
    for text in texts:  # whoever rendered it, nobody rendered it twice
        assert edge.text().count(f"I heard: {text}") <= 1, edge.text()
    assert presence_state(mesh, "specs") == "online"

    # SIGTERM: the edge says goodbye (explicit, retained offline) and exits 0
    assert mesh.stop(edge, signal.SIGTERM) == 0, edge.text()
    poll_sync(lambda: presence_state(mesh, "specs") == "offline", 10, "presence offline")
    assert "Traceback" not in edge.text(), edge.text()

    # SIGKILL: no goodbye, the broker publishes the last will
    edge2 = mesh.start_edge(bundle)
    poll_sync(lambda: presence_state(mesh, "specs") == "online", 10, "presence online again")
    mesh.stop(edge2, signal.SIGKILL)
    poll_sync(lambda: presence_state(mesh, "specs") == "offline", 10, "the last will (offline)")

    stop_hub_cleanly(mesh, hub)
