"""CRDT replication over real processes: the hub (with its own mosquitto and gRPC) and
``yimi edge run`` daemons on loopback, written to with ``yimi memo`` / ``yimi note``.

* a partition: three devices offline, each writing entries and editing the same note, the
  hub writing too; after healing every replica is identical, in the same ``seq`` order,
  within a stated bound (printed; see it with ``pytest -s``);
* ``kill -9`` of each node in turn while two devices keep writing: nothing lost or
  duplicated, the hub's CRDT ``seq`` agrees with its SQLite timeline (the source of truth);
* hostile ``SYNC_UPDATE`` envelopes (a ``seq.`` document, garbage, oversize, an unknown
  document, a Rust panic, a revoked device) are refused and counted; the hub stays up.

Replicas are read in this process with :class:`sync.replicas.ReplicaSet` (the same code the
CLI runs, under the same lock) while polling, and through the CLI once converged.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import aiomqtt
import pytest

from protos import mesh_pb2, sync_pb2
from provisioning.bundle import Bundle
from sync import documents as docs
from sync import topics
from sync.counter import PersistentCounter
from sync.envelope import Sealer
from sync.mqtt import random_transient_username
from sync.replicas import ReplicaSet
from sync.replication import CATCHUP_ENV
from tests.mesh_harness import Mesh, Proc, mosquitto_pids
from tests.test_sync_replica import panicking_update
from tests.waiting import poll_sync

pytestmark = pytest.mark.slow

CATCHUP_S = "5"
"""the devices' periodic catch-up interval in the kill -9 test (``YIMI_CATCHUP_INTERVAL_S``)"""
CONVERGENCE_BOUND_S = 20.0
"""seconds from restarting the edges after a partition to every replica being identical"""
ROW_RE = re.compile(
    r"^\s*(?P<seq>\d+|pending)\s+(?P<device>\S+)\s+"
    r"(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\s+(?P<kind>\w+)\s+(?P<text>.*)$"
)

Row = tuple[str, int | None, str, int, str, str]
"""(id, seq, device, ts, kind, text)"""


# ---------------------------------------------------------------- reading replicas
def replicas_dir(bundle: Path) -> Path:
    return Bundle.load(bundle).state_dir / "replicas"


def crdt_rows(folder: Path) -> list[Row]:
    """A replica's timeline in display order, read as the CLI reads it."""
    return [(e.id, e.seq, e.device, e.ts, e.kind, e.text) for e in ReplicaSet(folder).timeline()]


def crdt_notes(folder: Path) -> list[docs.Note]:
    return ReplicaSet(folder).notes(include_deleted=True)


def raw_id_counts(folder: Path) -> Counter[str]:
    """How often each entry id occurs in the raw ``entries`` lists (readers dedupe; this
    does not)."""
    rs = ReplicaSet(folder)
    counts: Counter[str] = Counter()
    for doc_id in rs.doc_ids():
        if doc_id.startswith(docs.TIMELINE):
            for value in rs.get(doc_id).doc.get_list("entries").get_value():  # type: ignore[union-attr]
                if isinstance(value, dict):
                    counts[str(value.get("id"))] += 1
    return counts


def sqlite_rows(mesh: Mesh) -> list[Row]:
    return [
        (str(i), int(s), str(d), int(t), str(k), str(x))  # type: ignore[call-overload]
        for s, i, d, t, k, x in mesh.hub_query(
            "SELECT seq, id, device, ts_ms, kind, text FROM timeline ORDER BY seq"
        )
    ]


def cli_timeline(
    mesh: Mesh, where: str, path: Path, names: dict[str, str]
) -> list[tuple[str, ...]]:
    """``yimi timeline`` rows, the device column mapped to device ids."""
    out = mesh.yimi("timeline", where, str(path), check=True).stdout
    lines = out.splitlines()
    assert lines[0].split() == ["SEQ", "DEVICE", "TIME", "KIND", "TEXT"], out
    rows: list[tuple[str, ...]] = []
    for line in lines[1:]:
        m = ROW_RE.match(line)
        assert m, f"unparsable timeline line {line!r}"
        device = names.get(m["device"], m["device"])
        rows.append((m["seq"], device, m["time"], m["kind"], m["text"]))
    return rows


def cli_notes(mesh: Mesh, where: str, path: Path) -> list[str]:
    return mesh.yimi("note", "list", where, str(path), "--all", check=True).stdout.splitlines()


def yimi_ok(mesh: Mesh, *args: str) -> str:
    r = mesh.yimi(*args)
    assert r.returncode == 0, f"yimi {' '.join(args)} → {r.returncode}: {r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr
    return r.stdout


def memo(mesh: Mesh, where: str, path: Path, text: str) -> str:
    """``yimi memo``; returns the new entry's id."""
    out = yimi_ok(mesh, "memo", where, str(path), text)
    m = re.match(r"^(m-[0-9a-f]+) written to the timeline", out)
    assert m, out
    return m.group(1)


def start_edges(mesh: Mesh, bundles: list[Path]) -> list[Proc]:
    """Start the edges at once (not one after the other) and wait until all connected."""
    procs = [mesh.spawn(f"edge-{b.name}", "edge", "run", "--bundle", str(b)) for b in bundles]
    poll_sync(
        lambda: all("connected to hub" in p.text() or not p.alive() for p in procs),
        30,
        "the edges to connect",
    )
    for p in procs:
        assert p.alive(), p.text()
    return procs


def no_traceback(*procs: Proc) -> None:
    for p in procs:
        assert "Traceback" not in p.text(), f"{p.name}:\n{p.text()[-4000:]}"


def hub_crdt_agrees_with_sqlite(mesh: Mesh) -> None:
    """Every SQLite timeline entry is in the hub's documents with the same seq, and the
    documents hold nothing SQLite lacks (no entry without a seq)."""
    sql = {r[0]: r for r in sqlite_rows(mesh)}
    crdt = {r[0]: r for r in crdt_rows(mesh.home / "replicas")}
    assert set(sql) == set(crdt), set(sql) ^ set(crdt)
    for eid, row in crdt.items():
        assert row[1] is not None, f"{eid} has no seq in the hub's documents"
        assert row == sql[eid], (row, sql[eid])


# ---------------------------------------------------------------- partition
def test_partition_three_devices_and_the_hub_converge_within_the_bound(mesh: Mesh) -> None:
    """Hub + glasses, phone, mac with ``yimi edge run``. Partition (every edge stopped):
    each device writes two memos and each with ``notes.write`` (phone, mac; not the
    glasses) sets the *same* note's text to its own value (the phone also its kind), the
    running hub writes two memos and marks the note done. Heal:
    every replica — three devices' and the hub's documents, and the hub's SQLite
    timeline — holds the same entries in the same seq order and the same note, with the
    concurrent edits of different fields merged, within CONVERGENCE_BOUND_S."""
    names = {"glasses": "glasses", "phone": "phone", "mac": "mac"}
    bundles = {n: mesh.add_device(n, profile) for n, profile in names.items()}
    ids = {n: Bundle.load(b).device_id for n, b in bundles.items()}
    to_id = {**{n: i for n, i in ids.items()}, "hub": "hub"}
    folders = {n: replicas_dir(b) for n, b in bundles.items()}
    hub_folder = mesh.home / "replicas"
    home = ("--home", mesh.home)
    hub = mesh.start_hub()
    edges = start_edges(mesh, list(bundles.values()))

    # baseline: a note and an entry from a device, an entry from the hub, everywhere
    written = {memo(mesh, "--bundle", bundles["glasses"], "baseline from the glasses")}
    written.add(memo(mesh, *home, "baseline from the hub"))
    note_id = yimi_ok(
        mesh, "note", "add", "--bundle", str(bundles["phone"]), "--kind", "note", "shared note"
    ).strip()

    def everyone_has(entry_ids: set[str], note_text: str | None = None) -> bool:
        sql = sqlite_rows(mesh)
        if {r[0] for r in sql} != entry_ids:
            return False
        for folder in [hub_folder, *folders.values()]:
            if crdt_rows(folder) != sql:
                return False
            if note_text is not None and [n.text for n in crdt_notes(folder)] != [note_text]:
                return False
        return True

    def state(entry_ids: set[str]) -> str:
        """What each replica holds (said when a wait times out)."""
        lines = [f"written: {sorted(entry_ids)}"]
        lines.append(f"hub sqlite: {[(r[0], r[1]) for r in sqlite_rows(mesh)]}")
        for name, folder in [("hub", hub_folder), *folders.items()]:
            rows = [(r[0], r[1]) for r in crdt_rows(folder)]
            lines.append(f"{name}: {rows}; notes {[n.text for n in crdt_notes(folder)]}")
        for p in [hub, *edges]:
            lines.append(f"--- {p.name} (last lines)\n{p.text()[-3000:]}")
        return "\n".join(lines)

    t0 = time.monotonic()
    try:
        poll_sync(lambda: everyone_has(written, "shared note"), 30, "the baseline everywhere")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{state(written)}") from None
    print(f"\n[sync] baseline on 4 replicas: {time.monotonic() - t0:.2f} s")

    # partition: every device offline
    for e in edges:
        assert mesh.stop(e, signal.SIGTERM) == 0, e.text()
    texts = {}
    for n, b in bundles.items():
        for i in range(2):
            written.add(memo(mesh, "--bundle", b, f"offline {i} on the {n}"))
        if "notes.write" not in Bundle.load(b).certificate.scopes:  # the glasses
            continue
        texts[n] = f"the {n}'s text"
        yimi_ok(mesh, "note", "set", "--bundle", str(b), note_id, "text", texts[n])
    yimi_ok(mesh, "note", "set", "--bundle", str(bundles["phone"]), note_id, "kind", "todo")
    for i in range(2):
        written.add(memo(mesh, *home, f"the hub writes {i} during the partition"))
    yimi_ok(mesh, "note", "set", *map(str, home), note_id, "done", "true")
    # the hub sequences its own writes while the devices are away
    poll_sync(lambda: len(sqlite_rows(mesh)) == 4, 10, "the hub to sequence its memos")
    assert not everyone_has(written)

    # heal
    t_heal = time.monotonic()
    edges = start_edges(mesh, list(bundles.values()))

    def converged() -> bool:
        if not everyone_has(written):
            return False
        notes = [crdt_notes(f) for f in [hub_folder, *folders.values()]]
        return all(n == notes[0] for n in notes)

    try:
        poll_sync(converged, 60, "every replica to converge", interval=0.1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{state(written)}") from None
    took = time.monotonic() - t_heal
    print(
        f"[sync] partition healed: 3 devices + hub identical after {took:.2f} s "
        f"(bound {CONVERGENCE_BOUND_S:.0f} s, {len(written)} entries, edge start included)"
    )
    assert took < CONVERGENCE_BOUND_S, f"converged after {took:.2f} s"

    # what converged: all entries sequenced 1..n, the note's fields merged
    sql = sqlite_rows(mesh)
    assert [r[1] for r in sql] == list(range(1, len(written) + 1))
    assert {r[0] for r in sql} == written
    (note,) = crdt_notes(hub_folder)
    assert note.text in texts.values(), note  # one device's text wins everywhere
    assert (note.kind, note.done, note.deleted) == ("todo", True, False), note

    # the same through the CLI: `yimi timeline --bundle` on every device = `--home`
    hub_view = cli_timeline(mesh, "--home", mesh.home, to_id)
    assert len(hub_view) == len(written) and all(r[0] != "pending" for r in hub_view)
    assert [r[4] for r in hub_view] == [r[5] for r in sql]
    for n, b in bundles.items():
        assert cli_timeline(mesh, "--bundle", b, to_id) == hub_view, n
    hub_notes = cli_notes(mesh, "--home", mesh.home)
    assert len(hub_notes) == 1 and note_id in hub_notes[0] and "todo" in hub_notes[0]
    for n, b in bundles.items():
        assert cli_notes(mesh, "--bundle", b) == hub_notes, n

    # hub/CRDT agreement: SQLite (the source of seq) and the hub's documents
    hub_crdt_agrees_with_sqlite(mesh)
    for folder in folders.values():
        assert all(c == 1 for c in raw_id_counts(folder).values())

    for e in edges:
        assert mesh.stop(e, signal.SIGTERM) == 0
    assert mesh.stop(hub, signal.SIGTERM) == 0
    no_traceback(hub, *edges)


# ---------------------------------------------------------------- kill -9 during sync
class Writer(threading.Thread):
    """Writes memos with ``yimi memo --bundle`` in a loop until stopped; keeps their ids."""

    def __init__(self, mesh: Mesh, bundle: Path) -> None:
        super().__init__(daemon=True)
        self.mesh, self.bundle = mesh, bundle
        self.ids: list[str] = []
        self.errors: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.halt.is_set():
            r = self.mesh.yimi("memo", "--bundle", str(self.bundle), f"{self.bundle.name} #{i}")
            m = re.match(r"^(m-[0-9a-f]+) written", r.stdout)
            if r.returncode != 0 or not m:
                self.errors.append(f"{r.returncode}: {r.stderr[-500:]}")
            else:
                self.ids.append(m.group(1))
            i += 1

    def count(self) -> int:
        return len(self.ids)

    def wrote_more(self, n: int) -> Callable[[], bool]:
        """A condition: ``n`` more memos written than now."""
        start = self.count()
        return lambda: self.count() >= start + n


def test_kill_9_of_each_node_during_sync_loses_and_doubles_nothing(mesh: Mesh) -> None:
    """Two devices keep writing memos while their edges sync. ``kill -9`` the glasses'
    edge, then the phone's, then the hub (its mosquitto dies with it), restarting each.
    Afterwards every memo written is on every replica and in the hub's SQLite timeline
    exactly once (by id, in the raw document lists too) with the same seq, and the hub's
    CRDT seq matches SQLite."""
    # live updates lost across the hub restart come with the next periodic catch-up (below)
    mesh.env[CATCHUP_ENV] = CATCHUP_S
    g, p = mesh.add_device("glasses", "glasses"), mesh.add_device("phone", "phone")
    hub = mesh.start_hub()
    edges = dict(zip((g, p), start_edges(mesh, [g, p]), strict=True))
    writers = [Writer(mesh, g), Writer(mesh, p)]
    for w in writers:
        w.start()

    def synced() -> int:
        return len(sqlite_rows(mesh))

    def progress(n: int, what: str) -> None:
        # > CATCHUP_S: after a hub restart, live updates a device sent before the
        # hub's own MQTT client subscribed are lost and come with the next periodic catch-up
        start = synced()
        poll_sync(lambda: synced() >= start + n, 45, what, interval=0.1)

    kills: list[str] = []
    try:
        progress(4, "memos reaching the hub")
        for bundle in (g, p):
            rc = mesh.stop(edges[bundle], signal.SIGKILL)
            assert rc == -signal.SIGKILL
            kills.append(f"edge {bundle.name} at {synced()} synced")
            w = writers[0 if bundle == g else 1]
            poll_sync(w.wrote_more(2), 20, "memos while it is dead")
            edges[bundle] = mesh.start_edge(bundle)
            progress(4, f"sync after restarting {bundle.name}'s edge")

        os.kill(hub.popen.pid, signal.SIGKILL)  # the hub alone: its mosquitto follows
        assert hub.popen.wait(timeout=10) == -signal.SIGKILL
        kills.append(f"hub at {synced()} synced")
        poll_sync(
            lambda: not mosquitto_pids(str(mesh.home / "broker" / "mosquitto.conf")),
            10,
            "the hub's mosquitto to die with it",
        )
        counts = [w.count() for w in writers]
        poll_sync(
            lambda: all(w.count() >= c + 2 for w, c in zip(writers, counts, strict=True)),
            20,
            "memos while the hub is dead",
        )
        hub = mesh.start_hub()
        progress(4, "sync after restarting the hub")
    finally:
        for w in writers:
            w.halt.set()
        for w in writers:
            w.join(timeout=30)
    assert not any(w.errors for w in writers), [w.errors for w in writers]
    written = [i for w in writers for i in w.ids]
    assert len(written) == len(set(written))
    everyone = [mesh.home / "replicas", replicas_dir(g), replicas_dir(p)]

    def complete() -> bool:
        sql = sqlite_rows(mesh)
        return {r[0] for r in sql} == set(written) and all(crdt_rows(f) == sql for f in everyone)

    t0 = time.monotonic()
    poll_sync(complete, 60, "every memo on every replica", interval=0.2)
    print(
        f"\n[sync] kill -9 of {', '.join(kills)}; {len(written)} memos; "
        f"converged {time.monotonic() - t0:.2f} s after the writers stopped"
    )

    sql = sqlite_rows(mesh)
    assert len(sql) == len(written) and [r[1] for r in sql] == list(range(1, len(sql) + 1))
    assert mesh.hub_query("SELECT count(*), count(DISTINCT id) FROM timeline") == [
        (len(written), len(written))
    ]
    for folder in everyone:
        stored = raw_id_counts(folder)
        assert set(stored) == set(written), folder
        doubled = {i: c for i, c in stored.items() if c != 1}
        assert not doubled, f"{folder}: entries stored more than once: {doubled}"
    hub_crdt_agrees_with_sqlite(mesh)
    # a device's own memos are sequenced in the order they were written
    for w in writers:
        assert [r[0] for r in sql if r[0] in set(w.ids)] == w.ids
    assert hub.alive() and all(e.alive() for e in edges.values())


# ---------------------------------------------------------------- hostile sync updates
def sealer_of(bundle: Bundle) -> Sealer:
    def next_counter() -> int:
        counter = PersistentCounter(bundle.state_dir / "counter.db")
        try:
            return counter.next()
        finally:
            counter.close()

    return Sealer.for_device(bundle, next_counter)


def sync_envelope(bundle: Bundle, *updates: sync_pb2.DocUpdate) -> bytes:
    return sealer_of(bundle).seal(
        mesh_pb2.SYNC_UPDATE, sync_pb2.SyncUpdate(updates=list(updates)), recipient="*"
    )


def publish(mesh: Mesh, username: str, password: str, items: list[tuple[str, bytes]]) -> None:
    async def run() -> None:
        async with aiomqtt.Client(
            "127.0.0.1",
            mesh.mqtt_port,
            username=random_transient_username(username),  # not the node's own session
            password=password,
            identifier=f"test-{secrets.token_hex(4)}",
            timeout=5,
            tls_context=mesh.mqtt_tls(),
        ) as c:
            for topic, payload in items:
                await c.publish(topic, payload, qos=1)

    asyncio.run(run())


def counters(mesh: Mesh) -> dict[str, int]:
    return {str(k): int(v) for k, v in mesh.hub_query("SELECT name, value FROM counters")}  # type: ignore[call-overload]


def login_refused(mesh: Mesh, bundle: Bundle) -> bool:
    async def attempt() -> None:
        async with aiomqtt.Client(
            "127.0.0.1",
            mesh.mqtt_port,
            username=bundle.device_id,
            password=bundle.mqtt_password,
            identifier=f"probe-{secrets.token_hex(3)}",
            timeout=5,
            tls_context=mesh.mqtt_tls(),
        ):
            pass

    try:
        asyncio.run(attempt())
    except aiomqtt.MqttError:
        return True
    return False


def test_hostile_sync_updates_are_refused_and_the_hub_stays_up(mesh: Mesh) -> None:
    """On an enrolled device's own sync topic: a ``seq.`` document update, garbage bytes,
    a Rust panic, an unknown document and an envelope over 256 KiB; then a valid update of
    a revoked device (injected over the hub's broker account). Each is refused and counted
    (``rejected.sync_update`` ×4, ``rejected.oversize``, ``rejected.revoked``), nothing of
    them lands on the hub, the hub log has no traceback, and a legitimate update to the
    same documents right after is applied, sequenced and re-broadcast."""
    a = Bundle.load(mesh.add_device("alpha", "phone"))
    b = Bundle.load(mesh.add_device("bravo", "glasses"))
    c = mesh.add_device("charlie", "mac")
    hub = mesh.start_hub()
    watcher = mesh.start_edge(c)  # sees what the hub re-broadcasts
    tl = docs.timeline_doc(docs.period_of(int(time.time() * 1000)))
    sq = docs.seq_doc(docs.period_of(int(time.time() * 1000)))
    scratch = ReplicaSet(mesh.root / "scratch")

    forged_seq = scratch.get(sq).change(lambda d: docs.set_seqs(d, [("forged", 1)]))
    entry = docs.make_entry(entry_id="m-legit", device=a.device_id, kind="memo", text="legit")
    good_tl = scratch.add_entry(entry)
    bad = [
        sync_pb2.DocUpdate(doc=sq, blob=forged_seq),  # hub-only document
        sync_pb2.DocUpdate(doc=tl, blob=b"\x00garbage" * 100),  # not loro
        sync_pb2.DocUpdate(doc=docs.NOTES, blob=panicking_update()),  # loro panics on it
        sync_pb2.DocUpdate(doc="secrets", blob=good_tl.blob),  # unknown document
    ]
    oversize = sync_pb2.DocUpdate(doc=tl, blob=os.urandom(300 * 1024))
    own_topic = topics.sync(a.home_id, a.device_id)
    publish(
        mesh,
        a.device_id,
        a.mqtt_password,
        [(own_topic, sync_envelope(a, u)) for u in bad] + [(own_topic, sync_envelope(a, oversize))],
    )
    poll_sync(
        lambda: (
            counters(mesh).get("rejected.sync_update", 0) >= 4
            and counters(mesh).get("rejected.oversize", 0) >= 1
        ),
        20,
        f"the hub to refuse and count them ({counters(mesh)})",
    )

    # a revoked device: its updates are refused even when they reach the hub
    r = mesh.yimi("device", "revoke", "bravo", "--home", str(mesh.home))
    assert r.returncode == 0, r.stderr
    poll_sync(lambda: login_refused(mesh, b), 10, "the hub to apply the revocation")
    hub_password = (mesh.home / "keys" / "broker.secret").read_text()
    revoked_entry = docs.make_entry(
        entry_id="m-revoked", device=b.device_id, kind="memo", text="from a revoked device"
    )
    revoked_update = ReplicaSet(mesh.root / "scratch-b").add_entry(revoked_entry)
    publish(
        mesh,
        "hub",
        hub_password,
        [(topics.sync(b.home_id, b.device_id), sync_envelope(b, revoked_update))],
    )
    poll_sync(lambda: counters(mesh).get("rejected.revoked", 0) >= 1, 10, "rejected.revoked")

    # then a legitimate update from alpha to the same documents is applied
    note = scratch.set_note("n-legit", {"text": "still listening"}, device=a.device_id)
    publish(mesh, a.device_id, a.mqtt_password, [(own_topic, sync_envelope(a, good_tl, note))])

    def applied() -> bool:
        return [r[0] for r in sqlite_rows(mesh)] == ["m-legit"] and [
            n.text for n in crdt_notes(mesh.home / "replicas")
        ] == ["still listening"]

    poll_sync(applied, 15, "the legitimate update on the hub")
    # re-broadcast live (the watcher's periodic catch-up is 30 s away), and nothing else
    poll_sync(
        lambda: (
            crdt_rows(replicas_dir(c)) == sqlite_rows(mesh)
            and [n.text for n in crdt_notes(replicas_dir(c))] == ["still listening"]
        ),
        10,
        "the watcher to receive the hub's re-broadcast",
    )
    rejected = {k: v for k, v in counters(mesh).items() if k.startswith("rejected.")}
    assert rejected == {
        "rejected.sync_update": 4,
        "rejected.oversize": 1,
        "rejected.revoked": 1,
    }, rejected
    assert counters(mesh).get("accepted.sync_entry") == 1
    hub_docs = ReplicaSet(mesh.home / "replicas")
    assert "secrets" not in hub_docs.doc_ids()
    assert not list((mesh.home / "replicas").glob("secrets*"))
    assert docs.seqs_of(hub_docs.get(sq).doc) == {"m-legit": 1}, "no forged seq"
    assert [e.id for e in hub_docs.timeline()] == ["m-legit"], "nothing from bravo"
    hub_crdt_agrees_with_sqlite(mesh)

    assert docs.seqs_of(ReplicaSet(replicas_dir(c)).get(sq).doc) == {"m-legit": 1}

    assert hub.alive() and watcher.alive()
    text = hub.text()
    assert "Traceback" not in text, text[-4000:]
    assert text.count("refused:") >= 4, text[-4000:]  # one warning line per refusal
    assert mesh.stop(watcher, signal.SIGTERM) == 0
    assert mesh.stop(hub, signal.SIGTERM) == 0, hub.text()[-3000:]
    no_traceback(hub, watcher)
    assert mosquitto_pids(str(mesh.root)) == []
