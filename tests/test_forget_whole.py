"""Forgetting whole (issue 22): one plan over assertions, summaries, the timeline (hub.db and
every replica, tombstoned without payload), the recall index, archived originals and cold
packs; executed only when approved; re-applied after a restore."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hub.archive.archive import Archive, NewObject
from hub.archive.targets import WebDavTarget
from hub.memory.derived import DerivedStore
from hub.memory.erasure import ErasePlan, Erasure
from hub.memory.home import open_memory
from hub.memory.index import MemoryIndex
from hub.memory.timeline_recall import TimelineIndexer, TimelineText, cursor_path, timeline_item
from hub.timeline import HubStore
from models.embed import Embedder, shared_embedder
from protos import sync_pb2
from sync import documents as docs
from sync.crdt import updates_since, version
from sync.replicas import ReplicaSet
from tests.test_archive import Clock, DavServer, Disk

T0_MS = 1_780_000_000_000
SAID = [
    ("u-1", "I booked the dentist for Friday, the left molar hurts"),
    ("u-2", "buy oat milk and bread on the way home"),
    ("u-3", "我的牙医诊所搬到了西湖路"),
]
SECRET = ("dentist", "牙医")


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return shared_embedder()


@dataclass
class Home:
    path: Path
    timeline: HubStore
    index: MemoryIndex
    replicas: ReplicaSet
    device: ReplicaSet
    archive: Archive
    clock: Clock
    erasure: Erasure
    fact: str
    derived: str

    def close(self) -> None:
        self.erasure.memory.close()
        self.timeline.close()
        self.archive.close()


def _home(tmp: Path, embedder: Embedder, target: WebDavTarget | None = None) -> Home:
    timeline = HubStore(tmp / "hub.db")
    replicas = ReplicaSet(tmp / "replicas")
    device = ReplicaSet(tmp / "device-replicas")
    clock = Clock()
    archive = Archive(tmp / "archive", disk=Disk(), now=clock, pack_after_s=60.0, target=target)
    for n, (uid, text) in enumerate(SAID):
        ts = T0_MS + n * 60_000
        timeline.admit_utterance(
            utterance_id=uid,
            device="phone",
            text=text,
            ts_ms=ts,
            received_ms=ts,
            trace_id=f"t-{uid}",
            meta={"scope": "owner"},
            replay_state=None,
        )
        timeline.append_entry(
            f"r-{uid}",
            device="phone",
            kind="reply",
            text=f"Noted: {text}",
            ts_ms=ts + 1,
            trace_id=f"t-{uid}",
            meta={},
        )
        timeline.conn.execute(
            "INSERT INTO replies VALUES (?,?,?,?,0,?,?,?,?)",
            (f"r-{uid}", uid, "phone", f"Noted: {text}", n, n, f"t-{uid}", ts),
        )
        for e in (
            docs.make_entry(entry_id=uid, device="phone", kind="utterance", text=text, ts_ms=ts),
            docs.make_entry(
                entry_id=f"r-{uid}", device="hub", kind="reply", text=f"Noted: {text}", ts_ms=ts + 1
            ),
        ):
            device.apply(replicas.add_entry(e))
        archive.store(
            [
                NewObject(
                    "audio", text.encode() * 200, "phone", f"t-{uid}", ts, {"utterance_id": uid}
                ),
                NewObject("event", text.encode(), "phone", f"t-{uid}", ts, {"utterance_id": uid}),
            ]
        )
    clock.advance(61)
    assert all(p.ok for p in archive.pack())
    index = MemoryIndex.for_home(tmp, embedder=embedder, clock=lambda: T0_MS)
    memory = open_memory(tmp, index=index)
    TimelineIndexer(
        lambda after, limit: [
            TimelineText(e.seq, e.id, e.kind, e.text, e.ts_ms, s)
            for e, s in timeline.entries_with_scope(after=after, limit=limit)
        ],
        index,
        cursor_path(tmp),
    ).catch_up()
    fact = memory.commit(
        None,
        0,
        subject="owner",
        predicate="health.dentist",
        value="molar appointment Friday",
        sources=[("timeline", "u-1")],
    ).id
    derived = (
        DerivedStore(memory)
        .record("summary", "Owner sees the dentist on Friday", [("assertion", fact)])
        .id
    )
    erasure = Erasure(
        tmp,
        memory=memory,
        index=index,
        timeline=timeline,
        replicas=replicas,
        archive=archive,
        clock=lambda: T0_MS + 3_600_000,
    )
    return Home(tmp, timeline, index, replicas, device, archive, clock, erasure, fact, derived)


@pytest.fixture
def home(tmp_path: Path, embedder: Embedder) -> Iterator[Home]:
    h = _home(tmp_path, embedder)
    yield h
    h.close()


def holds(folder: Path, needle: str) -> list[str]:
    raw = needle.encode()
    return sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file() and raw in p.read_bytes()
    )


def cold_objects(folder: Path) -> set[str]:
    """The object ids in every cold pack under ``folder``."""
    from hub.archive import pack as fmt

    out: set[str] = set()
    for p in folder.rglob("*.l5p"):
        header = fmt.parse_header(fmt.bytes_reader(p.read_bytes()))
        out |= {c.object_id for c in header.chunks}
    return out


def snapshot(h: Home) -> dict[str, object]:
    return {
        "timeline": [(e.id, e.text) for e in h.timeline.entries()],
        "index": sorted(h.index.ids()),
        "assertion": h.erasure.memory.get(h.fact).status,
        "archive": [(o.id, o.deleted_ms) for o in h.archive.objects()],
        "replica": [e.id for e in h.replicas.timeline()],
        "device": [e.id for e in h.device.timeline()],
    }


def test_replicas_tombstone_without_payload_on_every_device(tmp_path: Path) -> None:
    hub, dev, late = (ReplicaSet(tmp_path / n) for n in ("hub", "dev", "late"))
    e1 = docs.make_entry(
        entry_id="u-1", device="phone", kind="utterance", text="my dentist is Dr Lin", ts_ms=T0_MS
    )
    e2 = docs.make_entry(
        entry_id="u-2", device="phone", kind="utterance", text="buy milk", ts_ms=T0_MS + 1
    )
    ups = [hub.add_entry(e1), hub.add_entry(e2)]
    for u in ups:
        dev.apply(u)
        late.apply(u)
    late.add_entry(
        docs.make_entry(entry_id="u-3", device="late", kind="note", text="own", ts_ms=T0_MS + 2)
    )
    out = hub.forget_entries({"u-1"}, at_ms=T0_MS + 5)
    assert out and all(b"dentist" not in u.blob for u in out)  # the update carries no payload
    for u in out:
        dev.apply(u)
    doc_id = ups[0].doc
    blob, snap = updates_since(doc_id, hub.get(doc_id).doc, version(late.get(doc_id).doc))
    late.apply(sync_pb2.DocUpdate(doc=doc_id, blob=blob, snapshot=snap))
    for replicas, name in ((hub, "hub"), (dev, "dev"), (late, "late")):
        assert replicas.holds_text("dentist") == [], name
        assert "u-1" not in [e.id for e in replicas.timeline()], name
        assert docs.forgotten_of(replicas.get(doc_id).doc) == {"u-1"}
    assert [e.id for e in late.timeline()] == ["u-2", "u-3"]
    # merging a stale copy (reapply) does not bring the entry back
    stale = ReplicaSet(tmp_path / "stale")
    for u in ups:
        stale.apply(u)
    fresh = hub.get(doc_id).doc
    docs.reapply(stale.get(doc_id).doc, fresh)
    assert "u-1" not in [e.id for e in docs.entries_of(fresh)]
    assert hub.forget_entries({"u-1"}, at_ms=T0_MS + 6) == []  # idempotent


def test_plan_lists_every_layer_and_writes_nothing(home: Home) -> None:
    before = snapshot(home)
    plan = home.erasure.plan("dentist")
    layers = {(i.layer, i.id) for i in plan.items}
    assert {("timeline", "u-1"), ("reply", "r-u-1"), ("assertion", home.fact)} <= layers
    assert ("derived", home.derived) in layers
    assert ("index", timeline_item("u-1")) in layers and (
        "index",
        f"assertion:{home.fact}",
    ) in layers
    archived = {o.id for o in home.archive.objects_of_utterances(["u-1"])}
    assert len(archived) == 2 and {i.id for i in plan.items if i.layer == "archive"} == archived
    assert {i.id for i in plan.items if i.layer == "cold_chunk"} == archived
    assert "u-2" not in plan.timeline and "u-3" not in plan.timeline  # milk; Chinese words
    en, zh = plan.lines("en"), plan.lines("zh")
    assert en[0].startswith("To forget what you said about dentist") and zh[0].startswith("要忘掉")
    assert ErasePlan.from_json(plan.to_json()) == plan
    # a plan that is not approved is never executed: nothing changed
    assert snapshot(home) == before
    zh_plan = home.erasure.plan("牙医")
    assert set(zh_plan.timeline) == {"u-3", "r-u-3"}


def test_the_hubs_replies_naming_someone_are_planned_and_erased_alone(home: Home) -> None:
    """``yimi people forget``'s part of the plan: the hub's replies that hold the words
    (from hub.db, in either language), not the owner's utterance they answered."""
    assert home.erasure.plan_replies("牙医").timeline == ("r-u-3",)
    plan = home.erasure.plan_replies("OAT milk")
    assert plan.timeline == ("r-u-2",)
    assert {(i.layer, i.id) for i in plan.items} == {
        ("reply", "r-u-2"),
        ("index", timeline_item("r-u-2")),
    }
    assert "Noted: buy oat milk" in plan.lines("en")[1]
    report = home.erasure.execute(plan)
    assert {(i.layer, i.id) for i in report.deleted} == {(i.layer, i.id) for i in plan.items}
    for u in report.updates:
        home.device.apply(u)
    texts = {e.id: e.text for e in home.timeline.entries()}
    assert texts["r-u-2"] == "" and texts["u-2"] == SAID[1][1]
    assert timeline_item("r-u-2") not in home.index.ids()
    assert timeline_item("u-2") in home.index.ids()
    for replicas in (home.replicas, home.device):
        ids = [e.id for e in replicas.timeline()]
        assert "r-u-2" not in ids and "u-2" in ids
    assert home.erasure.plan_replies("oat milk").empty
    assert home.erasure.plan_replies("dent").empty  # whole words: not "dentist"


def test_an_approved_plan_reaches_every_layer_and_survives_a_restore(home: Home) -> None:
    backup = home.path / "backup"
    backup.mkdir()
    for conn in (home.timeline.conn, home.erasure.memory.conn, home.archive.db):
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()  # the backup copies files
    for name in ("hub.db", "memory.db", "archive/index.db"):
        src = home.path / name
        (backup / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, backup / name)
    shutil.copytree(home.path / "replicas", backup / "replicas")

    plan = home.erasure.plan("dentist")
    report = home.erasure.execute(plan)
    assert not report.not_deleted, report.not_deleted
    assert {(i.layer, i.id) for i in report.deleted} == {(i.layer, i.id) for i in plan.items}
    for u in report.updates:  # what the hub broadcasts: the devices' replicas purge too
        home.device.apply(u)
    assert_gone(home)
    assert "Deleted" in report.lines("en")[0] and "已删除" in report.lines("zh")[0]

    # a backup restored over every store: the deletion log deletes it all again
    home.close()
    for name in ("hub.db", "memory.db", "archive/index.db"):
        for suffix in ("-wal", "-shm"):
            Path(str(home.path / name) + suffix).unlink(missing_ok=True)
        shutil.copy(backup / name, home.path / name)
    shutil.rmtree(home.path / "replicas")
    shutil.copytree(backup / "replicas", home.path / "replicas")
    shutil.rmtree(backup)
    restored = reopen(home)
    assert any(e.text for e in restored.timeline.entries() if e.id == "u-1")  # back, for now
    again = restored.erasure.reapply()
    assert ("timeline", "u-1") in {(i.layer, i.id) for i in again.deleted}
    assert_gone(restored)
    restored.close()


def reopen(h: Home) -> Home:
    timeline = HubStore(h.path / "hub.db")
    replicas = ReplicaSet(h.path / "replicas")
    archive = Archive(h.path / "archive", disk=Disk(), now=h.clock, pack_after_s=60.0)
    memory = open_memory(h.path, index=h.index)
    erasure = Erasure(
        h.path,
        memory=memory,
        index=h.index,
        timeline=timeline,
        replicas=replicas,
        archive=archive,
        clock=lambda: T0_MS + 7_200_000,
    )
    return Home(
        h.path, timeline, h.index, replicas, h.device, archive, h.clock, erasure, h.fact, h.derived
    )


def assert_gone(h: Home) -> None:
    rows = {e.id: e.text for e in h.timeline.entries()}
    assert rows["u-1"] == "" and rows["r-u-1"] == "" and rows["u-2"]
    assert h.erasure.memory.get(h.fact).status == "forgotten"
    assert timeline_item("u-1") not in set(h.index.ids())
    assert "u-1" not in [e.id for e in h.replicas.timeline()]
    assert "u-1" not in [e.id for e in h.device.timeline()]
    for folder in ("replicas", "device-replicas", "archive"):
        assert holds(h.path / folder, "dentist") == [], folder
    stores = [p.name for p in h.path.glob("*.db*") if b"left molar" in p.read_bytes()]
    assert stores == [], stores  # hub.db, memory.db: overwritten, not just unlinked
    assert holds(h.path / "archive", "oat milk")  # the rest stays
    victims = {o.id for o in h.archive.objects() if o.deleted_ms is not None}
    assert victims and not victims & cold_objects(h.path / "archive" / "cold")
    hits = h.index.search_fts("dentist", 10, include_stale=True)
    assert [x.item_id for x in hits if "u-1" in x.item_id or h.fact in x.item_id] == []


def test_an_offline_cold_target_is_reported_and_retried(tmp_path: Path, embedder: Embedder) -> None:
    root = tmp_path / "dav-root"
    root.mkdir()
    dav = DavServer(root)
    h = _home(
        tmp_path / "home",
        embedder,
        WebDavTarget(dav.url("packs"), username="yimi", password="s3cret"),
    )
    try:
        dav.stop()  # the NAS is down when the owner approves
        report = h.erasure.execute(h.erasure.plan("dentist"))
        pending = [(i.layer, why) for i, why in report.not_deleted]
        assert pending and all(layer == "cold_chunk" for layer, _ in pending)
        assert all("retried" in why for _, why in pending)
        assert ("timeline", "u-1") in {(i.layer, i.id) for i in report.deleted}
        assert holds(tmp_path / "home" / "archive", "dentist") == []  # hot copies are gone
        victims = {o.id for o in h.archive.objects() if o.deleted_ms is not None}
        assert victims <= cold_objects(root)  # still in the pack on the NAS
        back = DavServer(root)
        try:
            h.archive.target = WebDavTarget(back.url("packs"), username="yimi", password="s3cret")
            again = h.erasure.reapply()  # what the upkeep (and every start) retries
            assert {i.layer for i in again.deleted} >= {"cold_chunk"}
            assert not victims & cold_objects(root)
        finally:
            back.stop()
    finally:
        h.close()


@pytest.mark.slow
async def test_forget_by_voice_goes_through_an_approval_card(
    tmp_path: Path, embedder: Embedder
) -> None:
    """The rule brain plans with the real memory package; the plan is a card even though
    the owner asked; a denied card deletes nothing, an approved one deletes everything."""
    from hub.brain.base import Turn, collect
    from hub.brain.rules import RuleBrain
    from hub.brain.tasks import TaskStore
    from hub.gateway import open_gateway
    from protos import consent_pb2
    from tests.brain_kit import BOOK, PACKAGES
    from tests.gateway_kit import Phone, RecordingCourier

    h = _home(tmp_path / "home", embedder)
    courier = RecordingCourier()
    state = tmp_path / "package-state"
    state.mkdir()
    env = {
        "YIMI_STATE_DIR": str(state),
        "YIMI_MEMORY_HOME": str(h.path),
        "YIMI_MODEL_LOCATION": "local",
    }
    phone = Phone()
    store = TaskStore(tmp_path / "tasks.db")
    try:
        async with (
            open_gateway(
                tmp_path / "gateway",
                packages=[PACKAGES["memory"]],
                env_for=lambda _m, _v: env,
                courier=courier,
                variant="real",
                durable=False,
            ) as gw,
            RuleBrain(gw, store, contacts=BOOK) as brain,
        ):
            before = snapshot(h)
            said = "forget what I said about the dentist"
            waiting = await collect(brain.turn(Turn(said, turn_id="t-no")))
            assert "approv" in waiting, waiting
            card = courier.shown[-1]
            assert card.effect == "delete" and "left molar" in card.preview, card.preview
            assert "cold-pack chunk" in card.preview and "archived original" in card.preview
            _, denied = await phone.answer(gw, phone.sign(card, decision=consent_pb2.DENY))
            assert denied is not None and denied.status == "cancelled"
            await brain.on_receipt(denied)
            assert snapshot(h) == before  # denied: nothing deleted

            await collect(brain.turn(Turn(said, turn_id="t-yes")))
            card = courier.shown[-1]
            _, done = await phone.answer(gw, phone.sign(card))
            assert done is not None and done.status == "succeeded", done
            await brain.on_receipt(done)
            assert brain.store.require("t-yes").state == "done"
            assert any(e.kind == "memory.deleted" for e in done.effects)
    finally:
        store.close()
    # the package purged the home's replicas on disk; the running hub reloads them and a
    # device catching up (every 30 s, and on every connection) is behind the purge point:
    # it gets the snapshot, which carries the tombstones
    h.replicas.refresh()
    for doc_id in h.device.doc_ids():
        have = version(h.device.get(doc_id).doc)
        blob, snap = updates_since(doc_id, h.replicas.get(doc_id).doc, have)
        h.device.apply(sync_pb2.DocUpdate(doc=doc_id, blob=blob, snapshot=snap))
    assert_gone(h)
    h.close()


def test_the_cli_shows_the_plan_and_carries_it_out_only_with_yes(
    tmp_path: Path, embedder: Embedder, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli import main as cli

    h = _home(tmp_path, embedder)
    (tmp_path / "home.yaml").write_text("home_id: test\n")
    before = snapshot(h)
    h.close()
    code = cli.main(["memory", "forget", "--about", "dentist", "--home", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("To forget what you said about dentist")
    assert "left molar" in out and "Nothing is deleted until you approve" in out
    h = reopen(h)
    assert snapshot(h) == before
    h.close()
    code = cli.main(
        ["memory", "forget", "--about", "牙医", "--home", str(tmp_path), "--yes", "--lang", "zh"]
    )
    out = capsys.readouterr().out
    assert code == 0 and "要忘掉" in out and "已删除" in out, out
    code = cli.main(["memory", "reapply-deletions", "--home", str(tmp_path)])
    assert code == 0 and "nothing to delete again" in capsys.readouterr().out
    h = reopen(h)
    rows = {e.id: e.text for e in h.timeline.entries()}
    assert rows["u-3"] == "" and rows["u-1"]  # only what was approved
    h.close()


def test_people_forget_shows_the_plan_and_deletes_only_with_yes_in_chinese(
    tmp_path: Path, embedder: Embedder, capsys: pytest.CaptureFixture[str]
) -> None:
    """``yimi people forget`` (the vision side of forgetting whole): the face samples and
    the hub's replies that named the person, shown first, deleted only with ``--yes``."""
    import numpy as np

    from cli import main as cli
    from hub.vision.people import Sample
    from hub.vision.store import VisionStore
    from provisioning.home import Home as Provisioned

    path = Provisioned.init(tmp_path / "home").path
    h = _home(path, embedder)
    seen = "照片里有：王芳。"
    h.timeline.append_entry(
        "r-seen", device="phone", kind="reply", text=seen, ts_ms=T0_MS, trace_id="t", meta={}
    )
    h.close()
    store = VisionStore.for_home(path)
    store.add_samples("王芳", [Sample(f"p{i}", np.full(128, 0.1 * i)) for i in range(3)])
    store.close()
    forget = ["people", "forget", "王芳", "--home", str(path), "--lang", "zh"]
    assert cli.main(forget) == 0
    out = capsys.readouterr().out
    assert "要忘掉王芳，我会删除其 3 个人脸样本" in out and seen in out, out
    assert "你批准之前，什么都不会删除" in out, out
    store = VisionStore.for_home(path)
    assert "王芳" in store.people()
    store.close()
    assert cli.main([*forget, "--yes"]) == 0
    out = capsys.readouterr().out
    assert "已忘掉王芳：删除了 3 个人脸样本" in out and "删除了 1 条时间线条目" in out, out
    store = VisionStore.for_home(path)
    assert store.people() == {}
    store.close()
    h = reopen(h)
    rows = {e.id: e.text for e in h.timeline.entries()}
    assert rows["r-seen"] == "" and all(rows[f"r-{uid}"] for uid, _ in SAID)
    h.close()
