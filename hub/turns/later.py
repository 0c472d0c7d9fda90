"""Later: what the scheduler's jobs say when they come due (issue 17).

A timer rings on the device that set it — only there — as a hub reply in the language of
the request that set it (:func:`ring`); the device ACKs it ``played`` (spoken) or
``rendered`` like any reply, and it is kept and sent again until it does. A reminder is said
on the device that set it and goes on the timeline, so every device shows it
(:func:`remind`). Reply and entry ids derive from (job, occurrence): an occurrence run again
after a restart sends the same reply, never a second one.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable

from hub.brain.replies import say, spoken_duration
from hub.schedule import Occurrence
from hub.timeline import Admitted, HubStore
from hub.turns.activity import hub_entry
from hub.turns.admission import PublishFn
from hub.turns.delivery import HUB_BRAIN, Delivery, Piece
from hub.turns.notify import Notifier

log = logging.getLogger(__name__)

REMINDER_KIND = "reminder"
"""timeline entry kind of a reminder that came due"""


def occurrence_id(prefix: str, occ: Occurrence) -> str:
    key = f"{occ.job.id}@{occ.occurrence_ms}"
    return prefix + hashlib.sha256(key.encode()).hexdigest()[:24]


def ring_text(occ: Occurrence) -> str:
    spec, lang = occ.job.spec, str(occ.job.spec.get("lang") or "en")
    name = str(spec.get("name") or "")
    label = say("timer.label_named", lang, name=name) if name else say("timer.label", lang)
    duration = spoken_duration(int(spec.get("duration_ms") or 0), lang)
    return say("timer.ring", lang, duration=duration, label=label)


class Later:
    """The scheduler's handlers that speak: ``timer`` and ``reminder`` (see the module doc)."""

    def __init__(
        self,
        store: HubStore,
        delivery: Delivery,
        *,
        publish: PublishFn,
        notifier: Notifier | None = None,
    ) -> None:
        self.store = store
        self.delivery = delivery
        self._publish = publish
        self.notifier = notifier
        """reminders go out as notifications (fallback along the devices) when set"""

    def handlers(self) -> dict[str, Callable[[Occurrence], Awaitable[None]]]:
        return {"timer": self.ring, "reminder": self.remind}

    def on_missed(self) -> dict[str, Callable[[Occurrence], Awaitable[None]]]:
        return {"reminder": self.missed}

    async def _say(self, occ: Occurrence, rid: str, device: str, text: str) -> None:
        if self.store.chunks(rid):  # run again after a restart: the same reply, not a second
            await self.delivery.resend_chunks(rid)
            return
        trace = str(occ.job.spec.get("trace_id") or "")
        to = Admitted("", device, 0, "", trace, {}, 0, False)
        await self.delivery.deliver(to, rid, [Piece(text, True, occ.job.id, HUB_BRAIN)])

    async def ring(self, occ: Occurrence) -> None:
        device = str(occ.job.spec.get("device") or "")
        if not device:
            log.warning("timer %s names no device: not rung", occ.job.id)
            return
        text = ring_text(occ)
        log.info("timer %s rings on %s", occ.job.id, device)
        await self._say(occ, occurrence_id("tm-", occ), device, text)

    async def remind(self, occ: Occurrence) -> None:
        spec, lang = occ.job.spec, str(occ.job.spec.get("lang") or "en")
        text = say("reminder.due", lang, what=str(spec.get("what") or ""))
        await self._entry(occ, occurrence_id("rem-", occ), text)
        device = str(spec.get("device") or "")
        if self.notifier is not None:
            self.notifier.notify(
                occurrence_id("rm-", occ),
                text,
                first=device,
                urgent=bool(spec.get("urgent")),
                trace=str(spec.get("trace_id") or ""),
            )
        elif device:
            await self._say(occ, occurrence_id("rm-", occ), device, text)

    async def missed(self, occ: Occurrence) -> None:
        """A reminder that came due while the hub was down, later than its grace: on the
        timeline as missed (not said)."""
        spec, lang = occ.job.spec, str(occ.job.spec.get("lang") or "en")
        what, when = str(spec.get("what") or ""), str(spec.get("when") or "")
        text = say("reminder.missed", lang, what=what, when=when)
        await self._entry(occ, occurrence_id("rmm-", occ), text)

    async def _entry(self, occ: Occurrence, entry_id: str, text: str) -> None:
        await hub_entry(
            self.store,
            self._publish,
            entry_id,
            REMINDER_KIND,
            text,
            trace_id=str(occ.job.spec.get("trace_id") or ""),
            meta={"job": occ.job.id, "occurrence_ms": occ.occurrence_ms, "late_ms": occ.late_ms},
        )
