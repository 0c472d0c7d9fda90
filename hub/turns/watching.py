"""What a watch says when its condition occurs (issue 17; the watches themselves:
:mod:`hub.schedule.watches`).

A ``home`` watch's poll reads the device's state through ``read_state`` (the daemon's
gateway call, an observe effect in a scheduled scope); a change into a wanted state is a
notification ("You asked to know when the front door opens: it just did.") to the owner
(the device used last first, then the fallback order). A ``timeline`` watch hears of every
entry the hub puts on the timeline (:meth:`Watching.on_entries`); the assistant's own
replies are not occurrences (a watch would otherwise hear its own notification).
Notification ids derive from (watch, occurrence): nothing is told twice.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence

from hub.brain.replies import say
from hub.gateway import Gateway
from hub.gateway.gateway import CallContext, ToolCall
from hub.schedule import Occurrence
from hub.schedule.watches import HOME, WATCH, WatchDesk, entry_key
from hub.turns.notify import Notifier
from sync.documents import Entry

log = logging.getLogger(__name__)

ReadState = Callable[[str, str], Awaitable[str | None]]
"""(entity, call id) → its state, ``None`` when it cannot be read"""
NOT_OCCURRENCES = frozenset({"reply"})


def gateway_reader(gateway: Callable[[], Gateway | None]) -> ReadState:
    """A watch's poll: ``home.get_state`` through the gateway (an observe call, in a
    scheduled scope: it could never show a card), recorded in its ledger like any call."""

    async def read(entity: str, call_id: str) -> str | None:
        gw = gateway()
        if gw is None:
            return None
        call = ToolCall("home", "get_state", {"entity": entity}, call_id, f"watch:{call_id}")
        r = await gw.call(call, CallContext(scheduled=True, session_id="watch"))
        if r.status != "succeeded":
            return None
        return next((str(e.fields["state"]) for e in r.effects if e.fields.get("state")), None)

    return read


def notification_id(job_id: str, key: int) -> str:
    return "wt-" + hashlib.sha256(f"{job_id}@{key}".encode()).hexdigest()[:24]


class Watching:
    def __init__(self, desk: WatchDesk, notifier: Notifier, *, read_state: ReadState) -> None:
        self.desk = desk
        self.notifier = notifier
        self._read = read_state

    def handlers(self) -> dict[str, Callable[[Occurrence], Awaitable[None]]]:
        return {WATCH: self.poll}

    async def poll(self, occ: Occurrence) -> None:
        spec = occ.job.spec
        if spec.get("source") != HOME:
            return
        entity = str(spec.get("entity") or "")
        call_id = f"{occ.job.id}@{occ.occurrence_ms}"
        try:
            state = await self._read(entity, call_id)
        except Exception as exc:  # any failure of the read: poll later, with backoff
            log.info("watch %s: %s not read (%s)", occ.job.id, entity, exc)
            state = None
        reading = self.desk.polled(occ.job, state)
        if reading.notify:
            lang = str(spec.get("lang") or "en")
            text = say("watch.home", lang, what=str(spec.get("what") or entity))
            log.info("watch %s: %s is now %s", occ.job.id, entity, state)
            self.notifier.notify(
                notification_id(occ.job.id, occ.occurrence_ms),
                text,
                first=str(spec.get("device") or ""),
                urgent=False,
                trace=str(spec.get("trace_id") or ""),
            )

    def on_entries(self, entries: Sequence[Entry]) -> None:
        """New timeline entries (the hub's publishing path: a failure here is logged, never
        raised into it)."""
        try:
            self._on_entries(entries)
        except Exception:
            log.exception("timeline watches not checked for %d entries", len(entries))

    def _on_entries(self, entries: Sequence[Entry]) -> None:
        for e in entries:
            if e.kind in NOT_OCCURRENCES:
                continue
            for job in self.desk.matching(e.id, e.text):
                lang = str(job.spec.get("lang") or "en")
                text = say(
                    "watch.timeline", lang, what=str(job.spec.get("what")), text=e.text[:200]
                )
                self.notifier.notify(
                    notification_id(job.id, entry_key(e.id)),
                    text,
                    first=str(job.spec.get("device") or ""),
                    urgent=False,
                    trace=str(job.spec.get("trace_id") or ""),
                )
