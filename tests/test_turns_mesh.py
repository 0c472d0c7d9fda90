"""Turns through the brain on the real mesh: the hub (in this process: mosquitto, gRPC,
gateway over the real memory and messaging packages, the brain) answers ``yimi say`` from
a Mac bundle; an e-mail waits for a card that ``yimi approve`` answers on the phone bundle;
the e-mail goes through a local SMTP server; the result reaches the Mac as a report; the
activity entries reach a device that was offline; a guest voice can neither send nor read
memory; a repeated utterance id never runs the brain twice; facts count as said only after
the device's ACK; a restart while a card waits resumes the task and sends exactly once; the
same e-mail turn against a fake OpenAI-compatible endpoint (real HTTP, scripted tool
calls)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import edge_agent.node as node_module
from edge_agent.node import DeviceNode, NodeOptions
from hub.gateway.facts import fact_map
from hub.mesh.daemon import HubDaemon
from hub.turns.delivery import MAX_ACK_CHUNKS, report_id_for
from protos import mesh_pb2, voice_pb2
from provisioning.bundle import Bundle
from provisioning.home import Home
from sync import documents as docs
from sync.envelope import Opened, new_trace_id, random_id
from tests.fake_openai import FakeOpenAI, Reply, Request, calls, stall, text
from tests.mesh_harness import Mesh, Proc
from tests.waiting import poll
from worlds.fakes import SmtpWorld

pytestmark = pytest.mark.slow

RULES = "[rule-based]"
"""the old reply prefix: no reply names its implementation any more"""
MAIL = "e-mail the meeting notes to my colleague"


# ---------------------------------------------------------------- helpers
def prepare(mesh: Mesh, smtp: SmtpWorld) -> None:
    mesh.prepare_mail(
        smtp, [{"name": "Dana Lee", "email": "dana@example.org", "aliases": ["colleague"]}]
    )


def turn_id(mesh: Mesh, words: str) -> str:
    rows = mesh.hub_query("SELECT id FROM timeline WHERE kind='utterance' AND text=?", words)
    assert len(rows) == 1, rows
    return str(rows[0][0])


def activity(mesh: Mesh) -> list[str]:
    return [
        str(r[0])
        for r in mesh.hub_query("SELECT text FROM timeline WHERE kind='activity' ORDER BY seq")
    ]


def archived(mesh: Mesh) -> list[dict[str, object]]:
    """The meta of the event objects in the home's L5 archive."""
    import apsw

    conn = apsw.Connection(str(mesh.home / "archive" / "index.db"))
    try:
        rows = conn.execute("SELECT meta FROM objects WHERE kind='event' ORDER BY ts_ms")
        return [json.loads(str(m)) for (m,) in rows]
    finally:
        conn.close()


def facts_said(hub: HubDaemon, task_id: str) -> tuple[list[str], list[str]]:
    gw = hub.consent.gateway
    assert gw is not None
    ids = list(fact_map(gw.ledger.task_receipts(task_id)))
    assert ids, "the task has facts"
    return gw.ledger.fact_states(task_id, ids)


async def approve(mesh: Mesh, phone: Path) -> str:
    r = await asyncio.to_thread(
        mesh.yimi, "approve", "--bundle", str(phone), "--hub", mesh.hub_target
    )
    assert r.returncode == 0, (r.stdout, r.stderr)
    return r.stdout


# ---------------------------------------------------------------- the demo's steps, rule-based
async def test_remember_recall_and_an_email_approved_on_the_phone(mesh: Mesh) -> None:
    mac = mesh.add_device("mac1", "mac")
    phone = mesh.add_device("phone1", "phone")
    glasses = mesh.add_device("specs", "glasses")
    async with SmtpWorld() as smtp:
        prepare(mesh, smtp)
        async with mesh.hub_in_process() as hub:
            assert hub.turns.brain is not None and hub.turns.brain.kind == "rule-based"
            mac_edge = await asyncio.to_thread(mesh.start_edge, mac, hub=mesh.hub_target)
            phone_edge = await asyncio.to_thread(mesh.start_edge, phone, hub=mesh.hub_target)

            out = await mesh.say_answered(mac, "Yimi, remember I don't eat cilantro")
            assert RULES not in out and "I'll remember: I don't eat cilantro" in out, out
            out = await mesh.say_answered(mac, "what do you remember about cilantro")
            assert RULES not in out and "I don't eat cilantro" in out, out

            # typed on the Mac: the owner's turn (admission), the original archived
            meta = json.loads(
                str(
                    mesh.hub_query(
                        "SELECT meta FROM timeline WHERE kind='utterance' ORDER BY seq LIMIT 1"
                    )[0][0]
                )
            )
            assert (meta["scope"], meta["admitted"]) == ("owner", True), meta
            # written by the archive's batching writer, off the turn's path
            originals = await poll(
                lambda: got if len(got := archived(mesh)) >= 2 else None,
                10,
                "both typed originals archived",
            )
            assert [m["source"] for m in originals] == ["typed", "typed"], originals

            out = await mesh.say_answered(mac, MAIL)
            assert "need your approval" in out and "card on your phone" in out, out
            assert smtp.messages() == []
            task = turn_id(mesh, MAIL)
            await poll(lambda: "card " in phone_edge.text(), 20, "the card on the phone")
            assert "ship on Friday" in phone_edge.text(), "the card previews the notes"
            await poll(
                lambda: any("waiting for consent" in a for a in activity(mesh)),
                10,
                "the waiting activity",
            )

            shown = await approve(mesh, phone)
            assert "executed" in shown and "dana@example.org" in shown, shown
            await poll(lambda: smtp.messages(), 20, "the e-mail at the SMTP server")
            (mail,) = smtp.messages()
            assert mail.recipients == ["dana@example.org"]
            assert "ship on Friday" in mail.message.get_payload()

            # the result comes back to the Mac, where the sentence was typed
            def reported(p: Proc = mac_edge) -> bool:
                return "hub: Sent the e-mail to dana@example.org" in p.text()

            await poll(reported, 20, "the report on the Mac")
            assert hub.turns.brain.store.require(task).state == "done"
            acts = activity(mesh)
            assert any(
                a.startswith("e-mail Dana Lee — waiting for consent: messaging.send_email waiting")
                for a in acts
            ), acts
            assert any(
                a.startswith("e-mail Dana Lee — done: ") and "messaging.send_email succeeded" in a
                for a in acts
            ), acts
            # the Mac ACKed the report: its facts are said now
            await poll(lambda: not facts_said(hub, task)[0], 10, "the facts to be said")

            # the glasses were off the whole time: they catch up the same timeline
            specs = await asyncio.to_thread(mesh.start_edge, glasses, hub=mesh.hub_target)

            def glasses_timeline() -> str:
                return mesh.yimi("timeline", "--bundle", str(glasses)).stdout

            await poll(
                lambda: "messaging.send_email succeeded" in glasses_timeline(),
                30,
                "the activity on the glasses",
            )
            view = glasses_timeline()
            assert "I don't eat cilantro" in view and "activity" in view, view
            for p in (mac_edge, phone_edge, specs):
                mesh.stop(p)
    hub_view = mesh.yimi("timeline", "--home", str(mesh.home), check=True).stdout
    assert "activity" in hub_view and "waiting for consent" in hub_view, hub_view


# ---------------------------------------------------------------- answered while announced
async def test_a_card_answered_while_its_reply_is_sent_is_still_reported(
    mesh: Mesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner denies the card while the reply that announced it is still on its way
    (held here until the denial has settled the task): the denial is reported to the Mac
    after that reply, and recorded as activity — not lost as part of a turn already said."""
    mac = mesh.add_device("mac1", "mac")
    phone = mesh.add_device("phone1", "phone")
    async with SmtpWorld() as smtp:
        prepare(mesh, smtp)
        async with mesh.hub_in_process() as hub:
            brain = hub.turns.brain
            assert brain is not None
            mac_edge = await asyncio.to_thread(mesh.start_edge, mac, hub=mesh.hub_target)
            held, release = asyncio.Event(), asyncio.Event()
            deliver = hub.turns.delivery.deliver

            async def slow_announcement(adm: Any, rid: str, pieces: Any, **kw: Any) -> None:
                if any("need your approval" in p.text for p in pieces):
                    held.set()
                    await release.wait()
                await deliver(adm, rid, pieces, **kw)

            monkeypatch.setattr(hub.turns.delivery, "deliver", slow_announcement)
            said = asyncio.ensure_future(
                asyncio.to_thread(mesh.say, mac, MAIL, "--hub", mesh.hub_target)
            )
            try:
                await asyncio.wait_for(held.wait(), 30)
                task = turn_id(mesh, MAIL)
                r = await asyncio.to_thread(
                    mesh.yimi, "deny", "--bundle", str(phone), "--hub", mesh.hub_target
                )
                assert r.returncode == 0, (r.stdout, r.stderr)
                await poll(lambda: brain.store.require(task).finished, 20, "the denial settled")
            finally:
                release.set()
                out = (await said).stdout
            assert "need your approval" in out, out

            # shown once on the Mac: by its edge daemon, or by `yimi say` when the report came
            # while it was still connected (the bundle's processes claim each chunk once)
            def reported(p: Proc = mac_edge) -> bool:
                return "hub: Cancelled: " in p.text() or "(update) Cancelled: " in out

            await poll(reported, 20, "the denial reported on the Mac")
            report = report_id_for(f"{task}:failed")
            await poll(
                lambda: mesh.hub_query(
                    "SELECT device FROM deliveries WHERE reply_id=? AND state='rendered'", report
                ),
                10,
                "the report ACKed rendered",
            )
            replies = [
                str(t)
                for (t,) in mesh.hub_query(
                    "SELECT text FROM timeline WHERE kind='reply' ORDER BY seq"
                )
            ]
            assert "need your approval" in replies[-2] and "Cancelled: " in replies[-1], replies
            assert smtp.messages() == []
            await poll(
                lambda: any(a.startswith("e-mail Dana Lee — failed") for a in activity(mesh)),
                10,
                "the outcome as activity",
            )
            mesh.stop(mac_edge)


# ---------------------------------------------------------------- a guest voice
def queue_voice(bundle: Path, words: str) -> str:
    """Put a heard utterance in the device's outbox (its edge daemon sends it): words the
    device recognised itself, no audio, no speaker embedding — nobody the voiceprint
    authority can call the owner."""
    from sync.outbox import Outbox

    now = int(time.time() * 1000)
    utt = mesh_pb2.Utterance(
        id=random_id("u-"),
        text=words,
        channel="mac",
        started_ms=now,
        ended_ms=now,
        source="voice",
        voice=voice_pb2.VoiceInfo(window=voice_pb2.WAKE),
    )
    outbox = Outbox(Bundle.load(bundle).state_dir / "outbox.db")
    try:
        outbox.put(utt.id, mesh_pb2.UTTERANCE, utt.SerializeToString(), new_trace_id(), now)
    finally:
        outbox.close()
    return utt.id


def reply_text(mesh: Mesh, uid: str) -> str:
    rows = mesh.hub_query("SELECT text FROM replies WHERE utterance_id=?", uid)
    return str(rows[0][0]) if rows else ""


async def test_a_guest_voice_can_neither_send_nor_read_memory(mesh: Mesh) -> None:
    mac = mesh.add_device("mac1", "mac")
    async with SmtpWorld() as smtp:
        prepare(mesh, smtp)
        async with mesh.hub_in_process() as hub:
            await mesh.say_answered(mac, "remember my PIN hint is the blue door")
            send = queue_voice(mac, "Yimi, send an e-mail to Dana saying hi")
            recall = queue_voice(mac, "what do you remember about the PIN")
            edge = await asyncio.to_thread(mesh.start_edge, mac, hub=mesh.hub_target)
            await poll(lambda: reply_text(mesh, recall), 30, "both replies")
            sent, recalled = reply_text(mesh, send), reply_text(mesh, recall)
            assert "I may not" in sent and "card" not in sent, sent
            assert "blue door" not in recalled and "I may not" in recalled, recalled
            await poll(lambda: "I may not" in edge.text(), 10, "the replies on the Mac")
            assert "blue door" not in edge.text(), edge.text()
            gw = hub.consent.gateway
            assert gw is not None
            assert smtp.messages() == [] and gw.consent.pending() == []
            refused = list(gw.ledger.db.execute("SELECT tool FROM calls WHERE status='rejected'"))
            assert {t for (t,) in refused} >= {"send_email", "recall"}, refused
            mesh.stop(edge)
        scopes = [
            (json.loads(str(m))["scope"], json.loads(str(m))["source"])
            for (m,) in mesh.hub_query("SELECT meta FROM timeline WHERE kind='utterance'")
        ]
        assert scopes == [("owner", "typed"), ("guest", "voice"), ("guest", "voice")], scopes


# ---------------------------------------------------------------- delivery: ACKs, repeats
@dataclass
class Heard:
    """Reply chunks a device got, by utterance id (reports under "")."""

    chunks: dict[str, list[mesh_pb2.Reply]] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, reply: mesh_pb2.Reply) -> None:
        got = self.chunks.setdefault(reply.utterance_id, [])
        if all((r.id, r.chunk) != (reply.id, reply.chunk) for r in got):
            got.append(reply)
        self.changed.set()

    async def final(self, uid: str, timeout: float = 30) -> list[mesh_pb2.Reply]:
        async with asyncio.timeout(timeout):
            while not (self.chunks.get(uid) and self.chunks[uid][-1].final):
                self.changed.clear()
                await self.changed.wait()
        return self.chunks[uid]


@asynccontextmanager
async def mute_device(mesh: Mesh, bundle: Path) -> AsyncIterator[tuple[DeviceNode, Heard]]:
    """A device in this process that takes replies but never ACKs them."""
    heard = Heard()

    async def on_reply(reply: mesh_pb2.Reply, opened: Opened, fresh: bool) -> None:
        heard.add(reply)

    node = DeviceNode(Bundle.load(bundle), NodeOptions(mode="say", hub=mesh.hub_target), on_reply)
    async with node:
        assert node.mqtt is not None
        await asyncio.wait_for(node.mqtt.connected.wait(), 20)
        yield node, heard


async def test_a_devices_received_updates_share_one_sync(
    mesh: Mesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timeline updates a device receives (one broadcast per turn) are appended to its
    replica logs at once and synced together, within ``RECEIVED_SYNC_S``: not one fsync per
    update."""
    monkeypatch.setattr(node_module, "RECEIVED_SYNC_S", 2.0)  # the turns fit in one window
    mac = mesh.add_device("mac1", "mac")
    async with mesh.hub_in_process(), mute_device(mesh, mac) as (node, heard):
        flushes = node.replica_sync.flushes
        said = [f"hello number {i}" for i in range(6)]
        for text in said:
            uid, _ = node.queue_utterance(text)
            await node.flush(stop_after=uid)
            await heard.final(uid)

        def held() -> set[str]:
            return {
                e.text
                for d in node.replicas.doc_ids()
                if d.startswith(docs.TIMELINE)
                for e in docs.entries_of(node.replicas.get(d).doc)
            }

        await poll(lambda: set(said) <= held(), 20, "the turns' broadcasts at the device")
        sync = node.replica_sync
        # ``pending`` drops when a flush takes the files, ``flushes`` counts it once synced
        await poll(lambda: sync.flushes > flushes and not sync.pending, 20, "the updates synced")
        assert sync.flushes - flushes <= 2, sync.flushes - flushes


async def test_repeated_utterance_and_facts_said_only_after_the_ack(mesh: Mesh) -> None:
    mac = mesh.add_device("mac1", "mac")
    async with SmtpWorld() as smtp:
        prepare(mesh, smtp)
        async with mesh.hub_in_process() as hub:
            brain = hub.turns.brain
            assert brain is not None
            async with mute_device(mesh, mac) as (node, heard):
                uid, _ = node.queue_utterance("remember the bins go out on Monday")
                payload = node.outbox.pending(limit=1)[0].payload
                await node.flush(stop_after=uid)
                first = [(r.id, r.chunk, r.text) for r in await heard.final(uid)]
                assert "I'll remember: the bins go out on Monday" in first[0][2]
                # delivered but not ACKed: not said, kept for sending again
                new, said = facts_said(hub, uid)
                assert new and not said
                assert hub.store.unacked_chunks(node.bundle.device_id)
                tasks, calls_before = brain.store.count(), _calls(hub)

                # the same utterance id again: the same reply, never a second brain run
                heard.chunks.clear()
                node.outbox.put(uid, mesh_pb2.UTTERANCE, payload, new_trace_id(), 0)
                await node.flush(stop_after=uid)
                again = [(r.id, r.chunk, r.text) for r in await heard.final(uid)]
                assert again == first
                assert (brain.store.count(), _calls(hub)) == (tasks, calls_before)
                assert hub.store.counters()["accepted.duplicate"] == 1
            assert not facts_said(hub, uid)[1], "nothing ACKed, nothing said"
            # the device's daemon comes online: the unACKed chunks come again, are ACKed,
            # and only now its facts count as said
            edge = await asyncio.to_thread(mesh.start_edge, mac, hub=mesh.hub_target)
            await poll(lambda: not facts_said(hub, uid)[0], 20, "the facts to be said")
            assert not hub.store.unacked_chunks(node.bundle.device_id)
            mesh.stop(edge)
        assert mesh.hub_query(
            "SELECT state FROM deliveries d JOIN replies r ON r.id = d.reply_id "
            "WHERE r.utterance_id=?",
            uid,
        ) == [("rendered",)]


async def test_a_replys_chunks_are_acked_in_one_message_and_older_acks_still_count(
    mesh: Mesh,
) -> None:
    """A device ACKs the chunks of a reply that come together in one ``DeliveryAck``
    (``more_chunks``), and the hub records every chunk and the delivery; an ACK per chunk,
    as an older device sends them, still counts; an ACK of too many chunks is refused."""
    mac = mesh.add_device("mac1", "mac")
    heard = Heard()
    acks: list[mesh_pb2.DeliveryAck] = []
    by_hand: set[str] = set()
    """utterances whose reply the test ACKs itself"""

    async def on_reply(reply: mesh_pb2.Reply, opened: Opened, fresh: bool) -> None:
        heard.add(reply)
        if reply.utterance_id not in by_hand:
            await node.ack(reply, mesh_pb2.RENDERED)

    node = DeviceNode(Bundle.load(mac), NodeOptions(mode="say", hub=mesh.hub_target), on_reply)
    send = node.acks._send

    async def spy(ack: mesh_pb2.DeliveryAck) -> None:
        acks.append(ack)
        await send(ack)

    node.acks._send = spy
    did = node.bundle.device_id
    async with mesh.hub_in_process() as hub, node:
        assert node.mqtt is not None
        await asyncio.wait_for(node.mqtt.connected.wait(), 20)
        uid, _ = node.queue_utterance("words the brain does not understand")
        await node.flush(stop_after=uid)
        chunks = await heard.final(uid)
        assert len(chunks) >= 2, [c.text for c in chunks]
        await poll(lambda: not hub.store.unacked_chunks(did), 20, "every chunk ACKed")
        assert [(a.chunk, list(a.more_chunks)) for a in acks] == [
            (chunks[-1].chunk, [c.chunk for c in chunks[:-1]])
        ], "one ACK for the reply"
        rid = chunks[0].id
        assert mesh.hub_query("SELECT state FROM deliveries WHERE reply_id=?", rid) == [
            ("rendered",)
        ]

        # an older device: one ACK per chunk, no more_chunks
        old, _ = node.queue_utterance("more words the brain does not understand")
        by_hand.add(old)
        await node.flush(stop_after=old)
        chunks = await heard.final(old)
        rid = chunks[0].id
        for c in chunks:
            await node.acks._send(
                mesh_pb2.DeliveryAck(reply_id=rid, state=mesh_pb2.RENDERED, chunk=c.chunk)
            )
        await poll(lambda: not hub.store.unacked_chunks(did), 20, "the older device's ACKs")
        assert mesh.hub_query("SELECT count(*) FROM deliveries WHERE reply_id=?", rid) == [(1,)]

        # too many chunks in one ACK: refused whole, counted
        uid, _ = node.queue_utterance("still more words nobody understands")
        by_hand.add(uid)
        await node.flush(stop_after=uid)
        chunks = await heard.final(uid)
        await node.acks._send(
            mesh_pb2.DeliveryAck(
                reply_id=chunks[0].id,
                state=mesh_pb2.RENDERED,
                chunk=0,
                more_chunks=range(1, MAX_ACK_CHUNKS + 1),
            )
        )
        await poll(
            lambda: hub.store.counters().get("rejected.ack_too_many_chunks") == 1,
            20,
            "the refusal counted",
        )
        assert len(hub.store.unacked_chunks(did)) == len(chunks), "none of them recorded"


def _calls(hub: HubDaemon) -> int:
    gw = hub.consent.gateway
    assert gw is not None
    return int(next(iter(gw.ledger.db.execute("SELECT COUNT(*) FROM calls")))[0])


# ---------------------------------------------------------------- restart while a card waits
async def test_hub_restart_while_a_card_waits_sends_once(mesh: Mesh) -> None:
    mac = mesh.add_device("mac1", "mac")
    phone = mesh.add_device("phone1", "phone")
    async with SmtpWorld() as smtp:
        prepare(mesh, smtp)
        async with mesh.hub_in_process():
            mac_edge = await asyncio.to_thread(mesh.start_edge, mac, hub=mesh.hub_target)
            out = await mesh.say_answered(mac, MAIL)
            assert "need your approval" in out, out
        task = turn_id(mesh, MAIL)
        # the hub is down; it comes back and resumes the task, still waiting for the card
        async with mesh.hub_in_process() as hub:
            brain = hub.turns.brain
            assert brain is not None
            assert task in hub.turns.resumed
            assert brain.store.require(task).state == "waiting_for_consent"
            shown = await approve(mesh, phone)
            assert "executed" in shown, shown
            await poll(lambda: smtp.messages(), 20, "the e-mail")
            await poll(lambda: brain.store.require(task).state == "done", 20, "the task done")
            await poll(
                lambda: "Sent the e-mail to dana@example.org" in mac_edge.text(),
                30,
                "the report on the Mac",
            )
            gw = hub.consent.gateway
            assert gw is not None
            sends = list(gw.ledger.db.execute("SELECT status FROM calls WHERE tool='send_email'"))
            assert sends == [("succeeded",)], sends
        assert len(smtp.messages()) == 1, "the send ran exactly once"
        mesh.stop(mac_edge)


# ---------------------------------------------------------------- an LLM endpoint
def _configure(home: Path, base_url: str, *, prefer_local: bool = True, **endpoint: object) -> None:
    """The brain and sub-agents on the fake endpoint; ``endpoint``: more fields for both;
    ``prefer_local=False``: every turn goes to the model, even one the intents know."""
    from hub.brain.providers import ProviderStore
    from tests.brain_kit import configure, fake_config

    store = ProviderStore.for_home(Home.load(home))
    config = fake_config(base_url, **({} if prefer_local else {"prefer_local": False}))
    for eps in config["roles"].values():
        for ep in eps:
            ep.update(endpoint)
    try:
        configure(store, config)
    finally:
        store.close()


def _first(req: Request) -> bool:
    return not any(m.get("role") == "tool" for m in req.messages)


async def test_the_email_turn_with_a_fake_openai_endpoint(mesh: Mesh) -> None:
    mac = mesh.add_device("mac1", "mac")
    phone = mesh.add_device("phone1", "phone")

    def responder(req: Request) -> Reply:
        if req.model == "brain-model":
            if _first(req):
                return calls(
                    (
                        "brain__delegate",
                        {
                            "instructions": "e-mail the meeting notes to dana@example.org",
                            "title": "e-mail Dana the meeting notes",
                        },
                    )
                )
            return text("I'll e-mail the meeting notes to Dana.")
        if _first(req):
            return calls(
                (
                    "messaging__send_email",
                    {
                        "to": "dana@example.org",
                        "subject": "Meeting notes",
                        "body": "Meeting notes: ship on Friday.",
                        "owner_requested": True,
                    },
                )
            )
        return text("The e-mail waits for the owner's approval.")

    async with SmtpWorld() as smtp, FakeOpenAI(responder) as fake:
        prepare(mesh, smtp)
        _configure(mesh.home, fake.base_url, prefer_local=False)  # the intents know MAIL
        async with mesh.hub_in_process() as hub:
            mac_edge = await asyncio.to_thread(mesh.start_edge, mac, hub=mesh.hub_target)
            brain = hub.turns.brain
            assert brain is not None and brain.kind == "llm"
            out = await mesh.say_answered(mac, MAIL)
            assert "I'll e-mail the meeting notes to Dana." in out and RULES not in out, out
            await poll(
                lambda: any("waiting for consent" in a for a in activity(mesh)),
                30,
                "the sub-agent waiting for the card",
            )
            shown = await approve(mesh, phone)
            assert "executed" in shown and "dana@example.org" in shown, shown
            await poll(lambda: smtp.messages(), 20, "the e-mail")
            await poll(
                lambda: "Sent the e-mail to dana@example.org" in mac_edge.text(),
                30,
                "the report on the Mac",
            )
            acts = activity(mesh)
            assert any("done" in a and "messaging.send_email succeeded" in a for a in acts), acts
        assert len(smtp.messages()) == 1
        assert fake.chat_requests("brain-model") and fake.chat_requests("sub-model")
        mesh.stop(mac_edge)


async def test_a_turn_cut_off_by_a_restart_is_answered_after_it(mesh: Mesh) -> None:
    """The hub stops while the model is still thinking: at the next start the turn is run
    again (it had made no tool call, so nothing is redone) and the Mac gets the model's
    answer — exactly one reply to the utterance."""
    mac = mesh.add_device("mac1", "mac")
    held = asyncio.Event()
    thinking = asyncio.Event()

    async def responder(req: Request) -> Reply:
        if not thinking.is_set():
            thinking.set()
            await held.wait()  # the hub stops during this request
            return text("never said")
        return text("Pasta with the tomatoes you have.")

    words = "what should I cook tonight"
    async with SmtpWorld() as smtp, FakeOpenAI(responder) as fake:
        prepare(mesh, smtp)
        _configure(mesh.home, fake.base_url)
        try:
            async with mesh.hub_in_process():
                edge = await asyncio.to_thread(mesh.start_edge, mac, hub=mesh.hub_target)
                r = await asyncio.to_thread(
                    mesh.say, mac, words, "--hub", mesh.hub_target, "--timeout", "3"
                )
                # no reply yet, but the hub has the utterance: late, not queued
                assert r.returncode == 4, (r.stdout, r.stderr)
                assert "is still answering it" in r.stderr, r.stderr
                await asyncio.wait_for(thinking.wait(), 30)
            uid = turn_id(mesh, words)
            assert reply_text(mesh, uid) == ""
            async with mesh.hub_in_process() as hub:
                await poll(lambda: reply_text(mesh, uid), 30, "the reply after the restart")
                assert "Pasta with the tomatoes you have." in reply_text(mesh, uid)
                await poll(
                    lambda: "Pasta with the tomatoes you have." in edge.text(),
                    30,
                    "the reply on the Mac",
                )
                brain = hub.turns.brain
                assert brain is not None
                assert brain.store.require(uid).state == "done"
                mesh.stop(edge)
        finally:
            held.set()
    assert len(mesh.hub_query("SELECT id FROM replies WHERE utterance_id=?", uid)) == 1
    assert len(fake.chat_requests("brain-model")) == 2, "asked once before, once after"


async def test_a_reply_later_than_say_waits_is_late_not_queued(mesh: Mesh) -> None:
    """The model stalls longer than ``yimi say`` waits: say reports the reply as late and
    names the timeline (not "hub unreachable … queued"); the turn's own model timeout then
    ends it with a clear reply on the timeline; the utterance is never sent again."""
    mac = mesh.add_device("mac1", "mac")
    words = "tell me a very long story"
    async with SmtpWorld() as smtp, FakeOpenAI(lambda req: stall()) as fake:
        prepare(mesh, smtp)
        _configure(mesh.home, fake.base_url, timeout_s=5)
        async with mesh.hub_in_process():
            r = await asyncio.to_thread(
                mesh.say, mac, words, "--hub", mesh.hub_target, "--timeout", "2"
            )
            assert r.returncode == 4, (r.stdout, r.stderr)
            uid = turn_id(mesh, words)
            err = r.stderr
            assert "unreachable" not in err and "queued" not in err, err
            assert f"the hub has utterance {uid}" in err and "is still answering it" in err, err
            assert f"'yimi timeline --bundle {mac}'" in err, err
            await poll(lambda: reply_text(mesh, uid), 30, "the late reply on the timeline")
            assert "did not answer within 5 seconds" in reply_text(mesh, uid)
            await poll(lambda: fake.answering == 0, 10, "the stalled request to be dropped")
            fake.responder = lambda req: text("Once upon a time.")
            out = await mesh.say_answered(mac, "hello there")
            assert "Once upon a time." in out, out
        assert len(mesh.hub_query("SELECT id FROM timeline WHERE text=?", words)) == 1
        assert len(mesh.hub_query("SELECT id FROM replies WHERE utterance_id=?", uid)) == 1
        asked = [r.last_user() for r in fake.chat_requests("brain-model")]
        assert asked.count("hello there") == 1 and asked.count(words) >= 1, asked
