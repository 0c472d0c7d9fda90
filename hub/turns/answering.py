"""Answering: each admitted turn through the brain, one device's turns in order.

:class:`Turns` is owned by the hub daemon (an async context manager entered after the
gateway). It opens the brain (``hub.brain.open_brain``: the rule-based model until an LLM
endpoint is configured for the ``brain`` role) and owns one task per device that answers
that device's turns in order; devices are answered concurrently, and the daemon's message
loop never waits on the brain. Turns come from :mod:`hub.turns.admission`; their replies go
out through :mod:`hub.turns.delivery`; background work becomes activity entries
(:mod:`hub.turns.activity`); owner turns read :mod:`hub.turns.context`.

The raw original of a typed utterance goes to the L5 archive (the ``Utterance`` message as
an ``event`` object) through :mod:`hub.turns.originals`, batched and never waited on by the
turn (voice: the audio, by ``hub/voice/hearing.py``).
An utterance admitted with an ``error`` (audio the hub could not use) is answered with the
hub's words for it.

A repeated utterance id never starts a second brain run: a finished reply is sent again, a
running one keeps going, and one cut off by a hub restart is run again (the brain's task
steps are idempotent) — at start, before ``brain.resume()``.

A task that finishes after its turn was answered reports to the device its turn came from
(a reply without ``utterance_id``); cards answered on the phone (``gateway.answer`` in
:mod:`hub.gateway.courier`) and expired cards reach the brain through
:meth:`Turns.on_receipt`. The outcome of a card answered while the reply announcing it is
still being sent is reported right after that reply (never taken as part of it).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from hub.brain import TaskEvent, Turn, open_brain
from hub.brain.configured import ConfiguredBrain
from hub.brain.slots import SlotSettings
from hub.brain.vision import VisionDesk
from hub.capabilities.manifest import Manifest
from hub.gateway import Gateway, Receipt
from hub.memory.context import ContextSource
from hub.schedule import Occurrence
from hub.schedule.reminders import ReminderDesk
from hub.schedule.timers import TimerDesk
from hub.schedule.watches import WatchDesk
from hub.timeline import Admitted, HubStore
from hub.turns.activity import Activity
from hub.turns.admission import TurnMeta, meta_of
from hub.turns.context import ContextSources, FileContacts
from hub.turns.delivery import HUB_BRAIN, Delivery, Piece, reply_id_for, report_id_for
from hub.turns.originals import TypedOriginals
from protos.errors import YimiError
from provisioning.home import Home
from storage.group_commit import GroupCommit
from sync.tasks import TaskOwner

log = logging.getLogger(__name__)

RERUN_WINDOW_S = 24 * 3600
"""turns admitted but not answered within this long before a start are answered at start"""
WARM_UP_S = 20.0
"""the longest a hub's start waits for its first read of the slot lists (package starts)"""
NOT_HEARD = "I didn't catch anything after the wake word."
INTERRUPTED = "The hub restarted while I was answering this; please ask again if it still matters."


def brain_turn(adm: Admitted, meta: TurnMeta, sources: Sequence[ContextSource]) -> Turn:
    """The brain's :class:`Turn` of an admitted utterance: its scope, ids, context
    sources, whether the reply is spoken, and its language (a voice turn's from the ASR)."""
    return Turn(
        adm.text,
        owner="owner",
        scope=meta.scope,
        session_id=f"{adm.device}:{dt.date.today().isoformat()}",
        trace_id=adm.trace_id,
        device_id=adm.device,
        turn_id=adm.utterance_id,
        sources=sources,
        voice=meta.is_voice,
        language=meta.language,  # "" for a typed turn: Turn.lang reads the script
    )


@dataclass
class _Job:
    admitted: Admitted
    raw: bytes | None
    """a typed utterance's message (archived as its raw original)"""
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Turns:
    def __init__(
        self,
        home: Home,
        store: HubStore,
        *,
        delivery: Delivery,
        activity: Activity,
        context: ContextSources,
        gateway: Callable[[], Gateway | None],
        ready: asyncio.Event,
        count: Callable[[str], None],
        timers: TimerDesk | None = None,
        reminders: ReminderDesk | None = None,
        watches: WatchDesk | None = None,
        vision: VisionDesk | None = None,
        group: GroupCommit | None = None,
    ) -> None:
        self._home = home
        self._slot_settings = SlotSettings.from_config(home.config)
        self._group = group
        """the hub's group commit: the brain's task store commits through it"""
        self.watches = watches
        self.vision = vision
        self.timers = timers
        self.reminders = reminders
        """the hub's timers, handed to the brain"""
        self.home = home.path
        self.store = store
        self.delivery = delivery
        self.activity = activity
        self.context = context
        self._gateway = gateway
        self._ready = ready
        """set once the hub is connected (answers cut off by a stop wait for it)"""
        self._count = count
        self.brain: ConfiguredBrain | None = None
        self.contacts = FileContacts(self.home / "contacts.yaml")
        self.started = asyncio.Event()
        """set when interrupted turns were answered again, ``brain.resume()`` ran and the
        slot lists were first read (or :data:`WARM_UP_S` passed)"""
        self.warmed = asyncio.Event()
        """set when the first read of the slot lists (devices, shops) ended, read or not"""
        self.resumed: list[str] = []
        self._tasks: TaskOwner | None = None
        self._queues: dict[str, asyncio.Queue[_Job]] = {}
        self._active: set[str] = set()
        """utterance ids queued or being answered in this process"""
        self._in_turn: set[str] = set()
        """task ids inside ``brain.turn`` now (their events are the turn's own reply)"""
        self._from_receipt: Counter[str] = Counter()
        """task ids a card's answer is settling now (how many answers): their events are
        never part of the reply of a turn still being sent (made before the answer came)"""
        self._after_turn: dict[str, list[TaskEvent]] = {}
        """reports of such events, held until their turn's own reply is out"""
        self._originals = TypedOriginals(self.home, count)
        self._brain_cm: Any = None

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> Turns:
        gw = self._gateway()
        if gw is None:
            raise RuntimeError("the gateway must be up before the brain")
        self._brain_cm = open_brain(
            self._home,
            gw,
            contacts=self.contacts,
            on_event=self.on_event,
            timers=self.timers,
            reminders=self.reminders,
            watches=self.watches,
            vision=self.vision,
            group=self._group,
        )
        self.brain = await self._brain_cm.__aenter__()
        await self._originals.__aenter__()
        self._tasks = TaskOwner("turns")
        for device in self._queues:
            self._tasks.spawn(self._worker(device), f"device:{device}")
        if self._slot_settings.at_start:
            self._tasks.spawn(self._warm_up(), "slots-warm-up")
        else:
            log.info("slot lists read at the first request that needs them (at_start: false)")
            self.warmed.set()
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
                await self._originals.__aexit__(None, None, None)

    @property
    def gateway(self) -> Gateway | None:
        return self._gateway()

    # ------------------------------------------------------------------ queue
    async def repeat(self, adm: Admitted, sender: str) -> None:
        """An utterance id already on the timeline came again: never a second brain run."""
        if adm.device != sender:
            self._count("rejected.utterance_id_taken")
            log.warning(
                "utterance id %s of %s reused by %s: ignored", adm.utterance_id, adm.device, sender
            )
            return
        reply = self.store.reply_for(adm.utterance_id)
        if reply is not None:
            log.info(
                "utterance %s from %s already answered: reply re-sent", adm.utterance_id, sender
            )
            await self.delivery.resend_reply(reply)
            return
        if adm.utterance_id in self._active:
            log.info("utterance %s from %s is being answered", adm.utterance_id, sender)
            await self.delivery.resend_chunks(reply_id_for(adm.utterance_id))
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
        while True:  # a cancellation lost in a turn: TaskOwner cancels again (sync.tasks)
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
            await self._originals.keep(adm, job.raw)
        rid = reply_id_for(uid)
        meta = meta_of(adm)
        if meta.error:  # audio the hub could not use: its own words say what went wrong
            await self.delivery.deliver(adm, rid, [Piece(meta.error_text, True, "", HUB_BRAIN)])
            return
        if brain is None:
            return
        if not adm.text.strip():
            await self.delivery.deliver(adm, rid, [Piece(NOT_HEARD, True, "", HUB_BRAIN)])
            return
        # a turn begun before (a restart cut it off; the device sent it again) may have a task:
        # a fresh admission has none (the brain itself looks for one all the same)
        task = brain.store.get(uid) if adm.duplicate else None
        if task is not None and task.finished and not str(task.result.get("report", "")).strip():
            # the brain closed it without words (an LLM turn cut off by a restart)
            await self.delivery.deliver(adm, rid, [Piece(INTERRUPTED, True, uid, HUB_BRAIN)])
            return
        turn = brain_turn(adm, meta, self.context.sources(meta.scope, uid))
        t0 = time.perf_counter()
        self._in_turn.add(uid)
        sent = 0
        made: list[Piece] = []  # chunks made together: kept and sent together (``more``)
        try:
            # closed as the final chunk is sent, not left for the collector to close later
            # (a suspended async generator costs the loop a wake-up and a task when it is)
            async with aclosing(brain.turn(turn)) as chunks:
                async for chunk in chunks:
                    if not made:
                        sent = chunk.index
                    made.append(
                        Piece(chunk.text, chunk.final, chunk.task_id, chunk.brain, chunk.intent)
                    )
                    if chunk.more and not chunk.final:
                        continue
                    pieces, made = made, []
                    await self.delivery.deliver(adm, rid, pieces, start=sent)
                    sent += len(pieces)
                    if chunk.final:
                        break
        except Exception as exc:
            log.exception("the brain failed on turn %s", uid)
            why = str(exc) if isinstance(exc, YimiError) else type(exc).__name__
            failed = Piece(f"Something went wrong on the hub: {why}", True, uid, HUB_BRAIN)
            await self.delivery.deliver(adm, rid, [*made, failed], start=sent)
        finally:
            late = self._turn_ended(uid)
        if log.isEnabledFor(logging.DEBUG):  # every turn; brain.kind reads the configuration
            log.debug(
                "turn %s answered in %.0f ms (%s)",
                uid,
                (time.perf_counter() - t0) * 1000,
                brain.kind,
            )
        for event in late:
            await self._report(event)

    # ------------------------------------------------------------------ scheduled runs
    async def run_scheduled(self, occ: Occurrence) -> None:
        """A scheduled run is due: its command runs as a turn with a scheduled scope (the
        gateway blocks a call that would need a card); the outcome is an activity entry and
        a notice to the device that set it. Blocked → "needs you: open the companion"."""
        from hub.brain.base import collect
        from hub.brain.replies import say
        from hub.gateway.gateway import SCHEDULED_BLOCK
        from hub.turns.later import occurrence_id

        brain, gw = self.brain, self._gateway()
        if brain is None or gw is None:
            raise RuntimeError("the brain is not up: the run stays due")
        spec = occ.job.spec
        lang, command = str(spec.get("lang") or "en"), str(spec.get("command") or "")
        device, trace = str(spec.get("device") or ""), str(spec.get("trace_id") or "")
        run_id = occurrence_id("run-", occ)
        turn = Turn(
            command,
            owner="owner",
            scope="owner",
            session_id=f"scheduled:{occ.job.id}",
            trace_id=trace,
            device_id=device,
            turn_id=run_id,
            sources=self.context.sources("owner", run_id),
            scheduled=True,
            language=lang,
        )
        self._in_turn.add(run_id)
        try:
            result = await collect(brain.turn(turn))
        finally:
            late = self._turn_ended(run_id)
        receipts = gw.ledger.task_receipts(run_id)
        blocked = [r for r in receipts if r.status == "rejected" and r.error == SCHEDULED_BLOCK]
        if blocked:
            text = say("run.blocked", lang, what=command)
        else:
            text = say("run.done", lang, what=command, result=result)
        meta: dict[str, object] = {
            "job": occ.job.id,
            "occurrence_ms": occ.occurrence_ms,
            "task": run_id,
            "state": "blocked" if blocked else "done",
            "receipts": [
                {"package": r.package, "tool": r.tool, "status": r.status} for r in receipts
            ],
        }
        await self.activity.note(f"act-{run_id}", text, trace_id=trace, meta=meta)
        if device:
            rid = report_id_for(run_id)
            if not self.store.chunks(rid):
                notice = Admitted("", device, 0, "", trace, {}, 0, False)
                await self.delivery.deliver(notice, rid, [Piece(text, True, run_id, HUB_BRAIN)])
        for event in late:
            await self._report(event)

    # ------------------------------------------------------------------ events and receipts
    def _turn_ended(self, task_id: str) -> list[TaskEvent]:
        """``task_id``'s turn is out of ``brain.turn``: the reports held for it."""
        self._in_turn.discard(task_id)
        return self._after_turn.pop(task_id, [])

    async def on_receipt(self, receipt: Receipt) -> None:
        """A card was answered or expired: the waiting task goes on."""
        brain = self.brain
        if brain is None:  # the brain reads it from the ledger when it resumes
            return
        self._from_receipt[receipt.task_id] += 1
        try:
            await brain.on_receipt(receipt)
        except Exception:
            log.exception("task %s: receipt not taken by the brain", receipt.task_id)
        finally:
            self._from_receipt[receipt.task_id] -= 1
            if self._from_receipt[receipt.task_id] <= 0:
                del self._from_receipt[receipt.task_id]

    async def on_event(self, event: TaskEvent) -> None:
        """Task events: activity entries for background work, reports of late results.

        An event of a task inside its turn is that turn's own reply, unless a card's answer
        made it: the owner (or the expiry sweep) can answer a card while the reply that
        announced it is still being sent, and its outcome is reported once that reply is
        out."""
        in_turn = event.task_id in self._in_turn
        late = in_turn and self._from_receipt[event.task_id] > 0
        background = bool(event.parent_id) or not in_turn or late
        if background or event.state == "waiting_for_consent":
            await self.activity.record(event)
        if (in_turn and not late) or not event.text or not event.device_id:
            return
        if event.state in ("done", "failed") or (
            event.state == "waiting_for_consent" and event.parent_id
        ):
            if late:
                self._after_turn.setdefault(event.task_id, []).append(event)
            else:
                await self._report(event)

    async def _report(self, event: TaskEvent) -> None:
        """A task's result after its turn was answered: to the device of the turn."""
        adm = self.store.admitted(event.task_id)
        if (
            adm is not None
            and adm.device == event.device_id
            and self.store.reply_for(adm.utterance_id) is None
        ):  # its own turn was cut off by a restart: this is that turn's reply
            pieces = _split(event.text)
            await self.delivery.deliver(
                adm,
                reply_id_for(adm.utterance_id),
                [
                    Piece(p, i == len(pieces) - 1, event.task_id, self._kind())
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
        await self.delivery.deliver(
            report,
            rid,
            [
                Piece(p, i == len(pieces) - 1, event.task_id, self._kind())
                for i, p in enumerate(pieces)
            ],
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
        await self._ready.wait()  # connected: the answers can go out at once
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
        await self.warm(WARM_UP_S)
        self.started.set()

    async def _warm_up(self) -> None:
        """Read the slot lists once at start: the packages behind them (home, errands) start
        now, not in the owner's first turn."""
        brain = self.brain
        assert brain is not None
        t0 = time.monotonic()
        try:
            await brain.rules.slots.refresh()
        except Exception as exc:  # a package that fails is read again on demand
            log.warning("slot lists not read at start: %s", exc)
        finally:
            self.warmed.set()
        log.info("slot lists read at start in %.1f s", time.monotonic() - t0)

    async def warm(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for the first read of the slot lists; whether it
        ended."""
        try:
            async with asyncio.timeout(timeout):
                await self.warmed.wait()
        except TimeoutError:
            log.warning("slot lists still being read after %.0f s: going on", timeout)
            return False
        return True

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
