"""The morning briefing (issue 17): a daily scheduled run that puts today's reminders, the
timeline since yesterday and the cards waiting for the owner into one notification.

Configured in ``home.yaml``::

    briefing:
      enabled: true        # off unless set
      at: "07:30"          # the owner's zone (``timezone:``)
      language: zh         # default: the language of the owner's newest request

It is one recurring scheduler job (kind ``briefing``, id ``briefing``); :meth:`Briefing.ensure`
keeps it in step with the configuration at every start (a changed time moves it, ``enabled:
false`` cancels it). When it comes due the text is composed then (:meth:`Briefing.compose`)
and sent as a notification (the device used last first, then the fallback order), once per
occurrence: the notification id derives from it.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hub.brain.intents.text import detect_language
from hub.brain.replies import join, say, spoken_time
from hub.schedule import Occurrence, recurrence
from hub.schedule.reminders import ReminderDesk
from hub.schedule.store import PENDING
from hub.timeline import HubStore
from hub.turns.later import occurrence_id
from hub.turns.notify import Notifier

log = logging.getLogger(__name__)

BRIEFING = "briefing"
JOB_ID = "briefing"
GRACE_MS = 3 * 3600 * 1000
"""a briefing due while the hub was down is still sent within this"""
DEFAULT_AT = dt.time(7, 30)
LATEST = 3
"""timeline entries quoted at most"""
QUOTE_CHARS = 80
QUIET_KINDS = frozenset({"reply", "presence"})
"""entry kinds the briefing does not count (the assistant's own words)"""


@dataclass(frozen=True)
class BriefingSettings:
    enabled: bool = False
    at: dt.time = DEFAULT_AT
    language: str = ""
    """``en`` / ``zh``; "": the language of the owner's newest request"""

    @classmethod
    def of(cls, config: Mapping[str, Any] | None) -> BriefingSettings:
        c = config or {}
        at = DEFAULT_AT
        if c.get("at"):
            at = dt.time.fromisoformat(str(c["at"]).strip())
        lang = str(c.get("language") or "")
        return cls(bool(c.get("enabled")), at, lang if lang in ("en", "zh") else "")

    @property
    def rule(self) -> str:
        return f"FREQ=DAILY;BYHOUR={self.at.hour};BYMINUTE={self.at.minute};BYSECOND=0"


class Briefing:
    """``cards``: the titles of the cards waiting for the owner."""

    def __init__(
        self,
        store: HubStore,
        reminders: ReminderDesk,
        notifier: Notifier,
        *,
        cards: Callable[[], Sequence[str]],
        settings: BriefingSettings,
    ) -> None:
        self.store = store
        self.reminders = reminders
        self.notifier = notifier
        self._cards = cards
        self.settings = settings

    def handlers(self) -> dict[str, Callable[[Occurrence], Awaitable[None]]]:
        return {BRIEFING: self.run}

    def ensure(self) -> None:
        """The daily job as the settings say (added, moved, revived or cancelled)."""
        scheduler = self.reminders.scheduler
        kept = scheduler.store.get(JOB_ID)
        if not self.settings.enabled:
            if kept is not None and kept.active:
                scheduler.cancel(JOB_ID)
                log.info("morning briefing off")
            return
        rule = self.settings.rule
        if kept is None:
            scheduler.add(JOB_ID, BRIEFING, {}, rule=rule, grace_ms=GRACE_MS)
        elif not kept.active or kept.rule != rule:
            now = scheduler.now_ms()
            first = recurrence.first_at_or_after(rule, now, scheduler.tz, now)
            scheduler.store.update(
                replace(kept, rule=rule, start_ms=now, next_ms=first, state=PENDING, updated_ms=now)
            )
            scheduler.poke()
        log.info("morning briefing every day at %s", self.settings.at.strftime("%H:%M"))

    def language(self) -> str:
        if self.settings.language:
            return self.settings.language
        for e in reversed(self.store.entries_before(0, 20)):
            if e.kind == "utterance":
                return detect_language(e.text)
        return "en"

    def compose(self, now_ms: int) -> str:
        """Today's reminders, the timeline since yesterday, the cards waiting: one text."""
        lang, tz = self.language(), self.reminders.scheduler.tz
        now = recurrence.local(now_ms, tz)
        midnight = (now + dt.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
        today = []
        for r in self.reminders.all():
            at = self.reminders.at(r)
            if at is not None and at < midnight:
                today.append(say("briefing.item", lang, time=spoken_time(at, lang), what=r.what))
        parts = [
            say("briefing.reminders", lang, lines=join(today, lang))
            if today
            else say("briefing.no_reminders", lang)
        ]
        since = [
            e
            for e in self.store.entries_since(now_ms - 24 * 3600 * 1000)
            if e.kind not in QUIET_KINDS
        ]
        if since:
            latest = [e.text[:QUOTE_CHARS] for e in since[-LATEST:]]
            parts.append(say("briefing.timeline", lang, count=len(since), lines=join(latest, lang)))
        else:
            parts.append(say("briefing.quiet", lang))
        cards = list(self._cards())
        if cards:
            titles = join([c[:QUOTE_CHARS] for c in cards[:LATEST]], lang)
            parts.append(say("briefing.cards", lang, count=len(cards), titles=titles))
        else:
            parts.append(say("briefing.no_cards", lang))
        return say("briefing.head", lang, parts=("" if lang == "zh" else " ").join(parts))

    async def run(self, occ: Occurrence) -> None:
        text = self.compose(self.reminders.scheduler.now_ms())
        log.info("morning briefing (%d characters)", len(text))
        self.notifier.notify(occurrence_id("brief-", occ), text, first="", urgent=False, trace="")
