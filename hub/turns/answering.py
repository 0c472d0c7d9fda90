"""Turns on the hub: admission, the brain, delivery with ACKs, activity entries.

:class:`Turns` is owned by the hub daemon (an async context manager entered after the
gateway). It opens the brain (``hub.brain.open_brain``: the rule-based model until an LLM
endpoint is configured for the ``brain`` role) and owns one task per device that answers
that device's turns in order; devices are answered concurrently, and the daemon's message
loop never waits on the brain.

**Admission** — the scope of each turn:

- *typed* text (``Utterance`` without ``voice``) signed with the key of an enrolled,
  unrevoked device whose certificate grants ``utter`` is the **owner**'s: every device of a
  home is the owner's, and typing needs the device in hand (unlocked) — the same standard as
  the phone's card approvals. A device without ``utter`` makes no turns (dropped, counted);
- *voice* turns take the scope the voiceprint authority gave (``hub/voice/hearing.py`` →
  ``hub/voice/voiceprints.py`` ``scope_for``: ``owner`` when verified, inside a trust window or by
  a call anchor; ``owner_uncertain``; ``guest``);
- only ``owner`` turns get the context sources (profile, notes, timeline, time zone);
  ``owner_uncertain`` and ``guest`` turns read no private memory, and the gateway and both
  brains offer them only the tools their scope allows (package manifests' ``scopes``).

The utterance joins the timeline with its ``seq`` (meta: ``scope``, ``admitted``) at once;
its raw original goes to the L5 archive (voice: the audio, by ``hub/voice/hearing.py``; typed: the
``Utterance`` message as an ``event`` object) from the turn's task.

**Delivery** — the brain's reply chunks (whole sentences) go to the device the sentence
came from as ``REPLY`` messages with ``chunk``/``final``; each is kept in ``hub.db`` until
the device ACKs it (``RENDERED`` or ``PLAYED``) and is sent again when the device comes back
online. When every chunk of a reply is ACKed its facts count as said
(``gateway.delivered``); before that they stay new, and come back in the next report. A
repeated utterance id never starts a second brain run: a finished reply is sent again, a
running one keeps going, and one cut off by a hub restart is run again (the brain's task
steps are idempotent) — at start, before ``brain.resume()``.

**Activity** — task events of background work (sub-agents, tasks waiting for a card, tasks
that finish after their turn was answered) become ``activity`` entries on the timeline,
with the status of their receipts; the timeline replicates them to every device, offline
ones when they catch up. A task that finishes after its turn was answered reports to the
device its turn came from (a reply without ``utterance_id``); cards answered on the phone
(``gateway.answer`` in :mod:`hub.gateway.courier`) and expired cards reach the brain
through :meth:`Turns.on_receipt`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from hub.archive.archive import Archive, NewObject
from hub.brain import AddressBook, Contact, TaskEvent, Turn, open_brain
from hub.brain.configured import ConfiguredBrain
from hub.capabilities.manifest import Manifest
from hub.gateway import Gateway, Receipt
from hub.memory.context import ContextSource, FunctionSource, Snippet, StaticSource
from hub.timeline import Admitted, Chunk, StoredReply
from protos import mesh_pb2
from protos.errors import YimiError
from sync import documents as docs
from sync.envelope import HUB, Opened
from sync.tasks import TaskOwner

if TYPE_CHECKING:
    from hub.mesh.daemon import HubDaemon

log = logging.getLogger(__name__)

SCOPES = ("owner", "owner_uncertain", "guest")
TYPED_SCOPE = "utter"
"""the certificate scope a device needs to make turns"""
RERUN_WINDOW_S = 24 * 3600
"""turns admitted but not answered within this long before a start are answered at start"""
HUB_BRAIN = "hub"
"""``Reply.brain`` of words the hub itself wrote (not the brain's)"""
NOT_HEARD = "I didn't catch anything after the wake word."
INTERRUPTED = "The hub restarted while I was answering this; please ask again if it still matters."
NOTE_STOP = frozenset("a an the my our your of to for from about with and or notes note".split())
MAX_NOTES = 10
TIMELINE_SNIPPETS = 12
ACTIVITY_KIND = "activity"


def reply_id_for(utterance_id: str) -> str:
    """The id of the reply to ``utterance_id`` (the same after a restart)."""
    return "r-" + hashlib.sha256(utterance_id.encode()).hexdigest()[:24]


def report_id_for(task_id: str) -> str:
    return "rp-" + hashlib.sha256(task_id.encode()).hexdigest()[:24]


def _short(task_id: str) -> str:
    return hashlib.sha256(task_id.encode()).hexdigest()[:16]


class FileContacts:
    """``HOME/contacts.yaml`` as an address book, read again when the file changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._book = AddressBook()

    def _current(self) -> AddressBook:
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = (0, 0)
        if stamp != self._stamp:
            try:
                self._book = AddressBook.load(self.path)
            except YimiError as exc:
                log.error("%s", exc)
                self._book = AddressBook()
            self._stamp = stamp
        return self._book

    def find(self, name: str) -> Contact | None:
        return self._current().find(name)


@dataclass
class _Job:
    admitted: Admitted
    raw: bytes | None
    """a typed utterance's message (archived as its raw original)"""
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


def typed_scope(scopes: Sequence[str]) -> str | None:
    """The scope of typed text from a device with these certificate scopes (``None``: the
    device may not make turns)."""
    return "owner" if TYPED_SCOPE in scopes else None


class Turns:
    def __init__(self, daemon: HubDaemon) -> None:
        self.daemon = daemon
        self.home = daemon.home.path
        self.store = daemon.store
        self.brain: ConfiguredBrain | None = None
        self.contacts = FileContacts(self.home / "contacts.yaml")
        self.started = asyncio.Event()
        """set when interrupted turns were answered again and ``brain.resume()`` ran"""
        self.resumed: list[str] = []
        self._tasks: TaskOwner | None = None
        self._queues: dict[str, asyncio.Queue[_Job]] = {}
        self._active: set[str] = set()
        """utterance ids queued or being answered in this process"""
        self._in_turn: set[str] = set()
        """task ids inside ``brain.turn`` now (their events are the turn's own reply)"""
        self._archive: Archive | None = None
        self._archive_failed = False
        self._brain_cm: Any = None

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> Turns:
        gw = self.daemon.consent.gateway
        if gw is None:
            raise RuntimeError("the gateway must be up before the brain")
        self._brain_cm = open_brain(
            self.daemon.home, gw, contacts=self.contacts, on_event=self.on_event
        )
        self.brain = await self._brain_cm.__aenter__()
        self._tasks = TaskOwner("turns")
        for device in self._queues:
            self._tasks.spawn(self._worker(device), f"device:{device}")
        self._tasks.spawn(self._startup(), "startup")
        log.info("brain ready: %s", self.brain.kind)
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._tasks is not None:
                await self._tasks.close()
                self._tasks = None
        finally:
            brain_cm, self._brain_cm = self._brain_cm, None
            self.brain = None
            try:
                if brain_cm is not None:
                    await brain_cm.__aexit__(et, e, tb)
            finally:
                if self._archive is not None:
                    self._archive.close()
                    self._archive = None

    @property
    def gateway(self) -> Gateway | None:
        return self.daemon.consent.gateway

    # ------------------------------------------------------------------ admission
    async def admit(self, opened: Opened, text: str, meta: dict[str, object]) -> None:
        """Put an utterance on the timeline and queue its turn (called on the message loop:
        returns without waiting for the brain)."""
        utt = opened.payload
        assert isinstance(utt, mesh_pb2.Utterance)
        scope = str(meta.get("scope") or "guest")
        if scope not in SCOPES:
            scope = "guest"
        meta = {**meta, "scope": scope, "admitted": True}
        now = int(time.time() * 1000)
        adm = self.store.admit_utterance(
            utterance_id=utt.id,
            device=opened.sender,
            text=text,
            ts_ms=utt.started_ms or opened.time_ms,
            received_ms=now,
            trace_id=opened.trace_id,
            meta=meta,
            replay_state=self.daemon._commit_counter(opened),
        )
        if adm.duplicate:
            await self.repeat(adm, opened.sender)
            return
        log.info("turn %s from %s admitted as %s (seq %d)", utt.id, opened.sender, scope, adm.seq)
        entry = docs.Entry(adm.utterance_id, adm.device, adm.ts_ms, "utterance", text, adm.seq)
        await self.daemon.sync.publish(self.daemon.sync.add_sequenced([entry]))
        raw = None if utt.HasField("voice") else utt.SerializeToString()
        self.enqueue(adm, raw)

    async def repeat(self, adm: Admitted, sender: str) -> None:
        """An utterance id already on the timeline came again: never a second brain run."""
        if adm.device != sender:
            self.daemon._count("rejected.utterance_id_taken")
            log.warning(
                "utterance id %s of %s reused by %s: ignored", adm.utterance_id, adm.device, sender
            )
            return
        reply = self.store.reply_for(adm.utterance_id)
        if reply is not None:
            log.info(
                "utterance %s from %s already answered: reply re-sent", adm.utterance_id, sender
            )
            await self._resend_reply(reply)
            return
        if adm.utterance_id in self._active:
            log.info("utterance %s from %s is being answered", adm.utterance_id, sender)
            for c in self.store.chunks(reply_id_for(adm.utterance_id)):
                await self._send_chunk(c)
            return
        if self._tasks is None or not self.started.is_set():
            return  # answered by the start-up pass
        log.info(
            "utterance %s from %s was cut off by a restart: answering it", adm.utterance_id, sender
        )
        self.enqueue(adm, None)

    def enqueue(self, adm: Admitted, raw: bytes | None) -> asyncio.Future[None] | None:
        """Queue a turn on its device's ordered queue (``None`` if it already is)."""
        if adm.utterance_id in self._active:
            return None
        self._active.add(adm.utterance_id)
        job = _Job(adm, raw)
        queue = self._queues.get(adm.device)
        if queue is None:
            queue = self._queues[adm.device] = asyncio.Queue()
            if self._tasks is not None:
                self._tasks.spawn(self._worker(adm.device), f"device:{adm.device}")
        queue.put_nowait(job)
        return job.done

    async def _worker(self, device: str) -> None:
        queue = self._queues[device]
        while True:
            job = await queue.get()
            try:
                await self._answer(job)
            except Exception:
                log.exception("turn %s failed", job.admitted.utterance_id)
            finally:
                self._active.discard(job.admitted.utterance_id)
                if not job.done.done():
                    job.done.set_result(None)

    # ------------------------------------------------------------------ answering
    async def _answer(self, job: _Job) -> None:
        adm = job.admitted
        uid, brain = adm.utterance_id, self.brain
        if job.raw is not None:
            await self._archive_typed(adm, job.raw)
        rid = reply_id_for(uid)
        meta = adm.meta
        scope = str(meta.get("scope", "guest"))
        voice = meta.get("source") == "voice"
        if brain is None:
            return
        if not adm.text.strip():
            await self._deliver(adm, rid, [(NOT_HEARD, True, "", HUB_BRAIN)])
            return
        task = brain.store.get(uid)
        if task is not None and task.finished and not str(task.result.get("report", "")).strip():
            # the brain closed it without words (an LLM turn cut off by a restart)
            await self._deliver(adm, rid, [(INTERRUPTED, True, uid, HUB_BRAIN)])
            return
        turn = Turn(
            adm.text,
            owner="owner",
            scope=scope,
            session_id=f"{adm.device}:{dt.date.today().isoformat()}",
            trace_id=adm.trace_id,
            device_id=adm.device,
            turn_id=uid,
            sources=self.sources(scope, uid),
            voice=voice,
        )
        t0 = time.perf_counter()
        self._in_turn.add(uid)
        sent = 0
        try:
            async for chunk in brain.turn(turn):
                await self._deliver(
                    adm,
                    rid,
                    [(chunk.text, chunk.final, chunk.task_id, chunk.brain)],
                    start=chunk.index,
                )
                sent = chunk.index + 1
                if chunk.final:
                    break
        except Exception as exc:
            log.exception("the brain failed on turn %s", uid)
            why = str(exc) if isinstance(exc, YimiError) else type(exc).__name__
            await self._deliver(
                adm,
                rid,
                [(f"Something went wrong on the hub: {why}", True, uid, HUB_BRAIN)],
                start=sent,
            )
        finally:
            self._in_turn.discard(uid)
        log.info(
            "turn %s answered in %.0f ms (%s)", uid, (time.perf_counter() - t0) * 1000, brain.kind
        )

    async def _deliver(
        self,
        adm: Admitted,
        reply_id: str,
        pieces: list[tuple[str, bool, str, str]],
        *,
        start: int = 0,
    ) -> None:
        """Keep and send chunks ``(text, final, task id, brain)`` of the reply to ``adm``;
        the final one puts the whole reply on the timeline."""
        for i, (text, final, task_id, brain) in enumerate(pieces, start):
            c = self.store.add_chunk(
                Chunk(
                    reply_id,
                    i,
                    adm.device,
                    adm.utterance_id,
                    task_id,
                    text,
                    final,
                    brain,
                    adm.trace_id,
                    adm.seq,
                )
            )
            if c.final:
                whole = " ".join(x.text for x in self.store.chunks(reply_id))
                stored = self.store.finish_reply(
                    reply_id=reply_id,
                    utterance_id=adm.utterance_id,
                    device=adm.device,
                    text=whole,
                    trace_id=adm.trace_id,
                    utterance_seq=adm.seq,
                    meta={"utterance": adm.utterance_id, "task": c.task_id, "brain": c.brain},
                )
                c = replace(c, reply_seq=stored.reply_seq)
                await self._publish_reply(stored)
            await self._send_chunk(c)

    async def _publish_reply(self, r: StoredReply) -> None:
        entry = docs.Entry(r.id, HUB, int(time.time() * 1000), "reply", r.text, r.reply_seq)
        await self.daemon.sync.publish(self.daemon.sync.add_sequenced([entry]))

    async def _send_chunk(self, c: Chunk) -> None:
        msg = mesh_pb2.Reply(
            id=c.reply_id,
            utterance_id=c.utterance_id,
            text=c.text,
            seq=c.utterance_seq,
            reply_seq=c.reply_seq,
            chunk=c.index,
            final=c.final,
            task_id=c.task_id,
            brain=c.brain,
        )
        try:
            await self.daemon._send_to(c.device, mesh_pb2.REPLY, msg, c.trace_id or None)
        except Exception as exc:  # sent again when the device is back online
            log.info("reply %s.%d to %s not sent now: %s", c.reply_id, c.index, c.device, exc)

    async def _resend_reply(self, reply: StoredReply) -> None:
        chunks = self.store.chunks(reply.id)
        if not chunks:  # a reply from before chunks were kept
            chunks = [
                Chunk(
                    reply.id,
                    0,
                    reply.device,
                    reply.utterance_id,
                    "",
                    reply.text,
                    True,
                    HUB_BRAIN,
                    reply.trace_id,
                    reply.utterance_seq,
                    reply.reply_seq,
                )
            ]
        for c in chunks:
            await self._send_chunk(c)

    async def resend(self, device: str) -> None:
        """``device`` came online: every chunk it has not ACKed, again."""
        for c in self.store.unacked_chunks(device):
            await self._send_chunk(c)
        for reply in self.store.unacked_replies(device):
            if not self.store.chunks(reply.id):
                await self._resend_reply(reply)

    async def on_ack(self, opened: Opened) -> None:
        """A device ACKed a chunk; a reply whose chunks are all ACKed has said its facts."""
        ack = opened.payload
        assert isinstance(ack, mesh_pb2.DeliveryAck)
        state = mesh_pb2.DeliveryState.Name(ack.state).lower() if ack.state else "rendered"
        got = self.store.record_chunk_delivery(
            ack.reply_id[:128],
            opened.sender,
            state,
            ack.at_ms or opened.time_ms,
            self.daemon._commit_counter(opened),
            ack.chunk,
        )
        if got.fresh:
            log.debug("reply %s.%d %s on %s", ack.reply_id, ack.chunk, state, opened.sender)
        gw = self.gateway
        if got.complete and got.task_id and gw is not None:
            receipts = gw.ledger.task_receipts(got.task_id)
            gw.delivered(got.task_id, receipts)
            if receipts:
                log.info(
                    "reply %s %s on %s: facts of task %s said",
                    ack.reply_id,
                    state,
                    opened.sender,
                    got.task_id,
                )

    # ------------------------------------------------------------------ events and receipts
    async def on_receipt(self, receipt: Receipt) -> None:
        """A card was answered or expired: the waiting task goes on."""
        brain = self.brain
        if brain is None:  # the brain reads it from the ledger when it resumes
            return
        try:
            await brain.on_receipt(receipt)
        except Exception:
            log.exception("task %s: receipt not taken by the brain", receipt.task_id)

    async def on_event(self, event: TaskEvent) -> None:
        """Task events: activity entries for background work, reports of late results."""
        in_turn = event.task_id in self._in_turn
        background = bool(event.parent_id) or not in_turn
        if background or event.state == "waiting_for_consent":
            await self._activity(event)
        if in_turn or not event.text or not event.device_id:
            return
        if event.state in ("done", "failed") or (
            event.state == "waiting_for_consent" and event.parent_id
        ):
            await self._report(event)

    async def _activity(self, event: TaskEvent) -> None:
        status = [
            f"{r.package}.{r.tool} {r.status}"
            + (" (card on your phone)" if r.status == "waiting" else "")
            for r in event.receipts
            if r.package and r.package != "brain"
        ]
        label = event.state.replace("_", " ")
        text = f"{event.title or 'task'} — {label}"
        if status:
            text += ": " + ", ".join(status[-4:])
        refused = [r.error for r in event.receipts if r.status == "not_executed" and r.error]
        if event.state == "failed" and refused:  # why the platform refused (the run's budget)
            text += f" ({refused[-1]})"
        entry_id = f"act-{_short(event.task_id)}-{event.state}"
        now = int(time.time() * 1000)
        seq, fresh = self.store.append_entry(
            entry_id,
            device=HUB,
            kind=ACTIVITY_KIND,
            text=text,
            ts_ms=now,
            trace_id=event.trace_id,
            meta={
                "task": event.task_id,
                "parent": event.parent_id,
                "state": event.state,
                "device": event.device_id,
                "receipts": [
                    {"package": r.package, "tool": r.tool, "status": r.status, "card": r.card_id}
                    for r in event.receipts
                ],
            },
        )
        if not fresh:
            return
        log.info("activity %s: %s", event.task_id, text)
        entry = docs.Entry(entry_id, HUB, now, ACTIVITY_KIND, text, seq)
        await self.daemon.sync.publish(self.daemon.sync.add_sequenced([entry]))

    async def _report(self, event: TaskEvent) -> None:
        """A task's result after its turn was answered: to the device of the turn."""
        adm = self.store.admitted(event.task_id)
        if (
            adm is not None
            and adm.device == event.device_id
            and self.store.reply_for(adm.utterance_id) is None
        ):  # its own turn was cut off by a restart: this is that turn's reply
            pieces = _split(event.text)
            await self._deliver(
                adm,
                reply_id_for(adm.utterance_id),
                [
                    (p, i == len(pieces) - 1, event.task_id, self._kind())
                    for i, p in enumerate(pieces)
                ],
            )
            return
        rid = report_id_for(f"{event.task_id}:{event.state}")
        if self.store.chunks(rid):
            return
        origin = self.store.admitted(event.task_id.split(".", 1)[0])
        useq = origin.seq if origin is not None else 0
        report = Admitted("", event.device_id, useq, "", event.trace_id, {}, 0, False)
        pieces = _split(event.text)
        log.info("task %s %s: report to %s", event.task_id, event.state, event.device_id)
        await self._deliver(
            report,
            rid,
            [(p, i == len(pieces) - 1, event.task_id, self._kind()) for i, p in enumerate(pieces)],
        )

    def _kind(self) -> str:
        return self.brain.kind if self.brain is not None else HUB_BRAIN

    # ------------------------------------------------------------------ start
    async def _startup(self) -> None:
        """Answer turns cut off by a stop (rule-based ones and those with no task yet first,
        their steps are idempotent), then let the brain resume its tasks, then answer the
        LLM turns that finished meanwhile."""
        brain = self.brain
        assert brain is not None
        await self.daemon.ready.wait()  # connected: the answers can go out at once
        since = int((time.time() - RERUN_WINDOW_S) * 1000)
        first: list[Admitted] = []
        later: list[Admitted] = []
        for adm in self.store.unanswered(since_ms=since):
            task = brain.store.get(adm.utterance_id)
            if task is None or task.finished or task.spec.get("brain") == brain.rules.kind:
                first.append(adm)
            else:
                later.append(adm)
        if first or later:
            log.info("%d turn(s) cut off by a stop: answering them", len(first) + len(later))
        waits = [f for adm in first if (f := self.enqueue(adm, None)) is not None]
        if waits:
            await asyncio.gather(*waits)
        self.resumed = await brain.resume()
        if self.resumed:
            log.info("resumed %d task(s): %s", len(self.resumed), ", ".join(self.resumed))
        for adm in later:  # LLM turns: finished meanwhile, or cut off and continued now
            task = brain.store.get(adm.utterance_id)
            if task is not None and self.store.reply_for(adm.utterance_id) is None:
                self.enqueue(adm, None)
        self.started.set()

    # ------------------------------------------------------------------ context
    def sources(self, scope: str, turn_id: str) -> list[ContextSource]:
        """The context sources of a turn: all of them for the owner, none otherwise."""
        if scope != "owner":
            return []
        return [
            FunctionSource("profile", self._profile),
            FunctionSource("notes", self._notes),
            FunctionSource("timeline", lambda q: self._timeline(q, turn_id)),
            StaticSource("timezone", [_timezone()]),
        ]

    async def _profile(self, query: str) -> Sequence[Snippet]:
        def read() -> list[Snippet]:
            out = []
            for name in ("USER.md", "MEMORY.md"):
                path = self.home / "profile" / name
                try:
                    text = path.read_text(encoding="utf-8", errors="replace")[: 64 * 1024]
                except FileNotFoundError:
                    continue
                for line in text.splitlines():
                    line = line.strip().lstrip("-* ").strip()
                    if line and not line.startswith("#"):
                        out.append(Snippet(line, "high", (("profile", name),)))
            return out

        return await asyncio.to_thread(read)

    async def _notes(self, query: str) -> Sequence[Snippet]:
        words = {w for w in re.findall(r"\w+", query.lower()) if w not in NOTE_STOP}
        out = []
        for n in reversed(self.daemon.replicas.notes()):
            hay = f"{n.kind} {n.text}".lower()
            if not words or all(w in hay for w in words):
                out.append(Snippet(n.text, "medium", (("note", n.id),)))
            if len(out) >= MAX_NOTES:
                break
        return out

    async def _timeline(self, query: str, turn_id: str) -> Sequence[Snippet]:
        start = dt.datetime.combine(dt.date.today(), dt.time()).timestamp() * 1000
        rows = [
            e
            for e in self.store.entries_since(int(start))
            if e.id != turn_id and e.kind not in ("reply", ACTIVITY_KIND)
        ]
        return [
            Snippet(
                f"{time.strftime('%H:%M', time.localtime(e.ts_ms / 1000))} {e.text}",
                "medium",
                (("timeline", e.id),),
            )
            for e in rows[-TIMELINE_SNIPPETS:]
        ]

    # ------------------------------------------------------------------ archive
    async def _archive_typed(self, adm: Admitted, raw: bytes) -> None:
        def store() -> str:
            if self._archive is None and not self._archive_failed:
                try:
                    from hub.archive.settings import open_archive

                    self._archive = open_archive(self.home)
                except Exception as exc:
                    self._archive_failed = True
                    log.error("typed originals will not be archived: %s", exc)
            if self._archive is None:
                return "not stored: no archive"
            obj = NewObject(
                "event",
                raw,
                adm.device,
                adm.trace_id,
                adm.ts_ms,
                {
                    "utterance_id": adm.utterance_id,
                    "format": "yimi.mesh.v1.Utterance",
                    "source": "typed",
                },
            )
            return str(self._archive.store([obj])[0])

        try:
            outcome = await asyncio.to_thread(store)
        except Exception as exc:
            outcome = f"not stored: {exc}"
        self.daemon._count("turn.archived" if outcome.startswith("stored") else "turn.not_archived")
        log.debug("typed original of %s: %s", adm.utterance_id, outcome)

    # ------------------------------------------------------------------ packages
    def package_env(self, manifest: Manifest) -> dict[str, str]:
        """Settings the hub gives a package from the brain's configuration: where the model
        that reads its results runs (``MODEL_LOCATION``: ``local`` when every brain and
        sub-agent endpoint is local, or none is configured — the rule-based model) and which
        sources may reach a cloud model (``CLOUD_SOURCES``)."""
        env: dict[str, str] = {}
        brain = self.brain
        if brain is None:
            return env
        config = brain.providers.current()
        if "MODEL_LOCATION" in manifest.config:
            eps = [*config.endpoints("brain"), *config.endpoints("subagent")]
            env["YIMI_MODEL_LOCATION"] = "local" if all(e.is_local for e in eps) else "cloud"
        if "CLOUD_SOURCES" in manifest.config:
            env["YIMI_CLOUD_SOURCES"] = ",".join(
                sorted(f"{k}:{v}" for k, v in config.cloud_sources)
            )
        return env


def _split(text: str) -> list[str]:
    from hub.brain.base import split_chunks

    return split_chunks(text) or ["…"]


def _timezone() -> Snippet:
    now = dt.datetime.now().astimezone()
    return Snippet(
        f"Local time {now:%Y-%m-%d %H:%M} ({now.tzname()})", "low", (("system", "timezone"),)
    )
