"""The built-in rule-based brain: the offline default, needing no model endpoint.

It is **not** a language model and never says it is one. Requests are understood by the
intent engine (:mod:`hub.brain.intents`: hassil templates, Yimi's own and Home Assistant's,
in English and Chinese, over live slot lists — :mod:`hub.brain.slots`); the reply is in the
turn's language (:attr:`Turn.lang`), its words all come from :mod:`hub.brain.replies`. The
mode stays visible where it belongs: ``ReplyChunk.brain``, the task's spec
(``brain: rule-based``) and ``yimi brain status`` — not in the spoken text.

Intents and what they do (every action goes through the gateway as one persisted step,
see :mod:`hub.brain.runtime`):

- ``YimiRemember`` → ``memory.commit``; ``YimiRecall`` → ``memory.recall``;
  ``YimiForget`` → ``memory.recall`` then ``memory.forget`` of the best matches;
- ``YimiSendMessage`` → ``messaging.send_email`` to a contact of the address book; "the
  meeting notes" (a thing to send naming notes) is read from the turn's ``notes`` source;
- ``HassTurnOn/Off``, ``HassLightSet``, ``HassSetPosition``, ``HassSetVolume`` →
  ``home.set_state`` of the named device, or of the area's devices of the domain;
  ``HassGetState`` → ``home.get_state``;
- ``YimiTimeline`` → the ``timeline`` context source (query ``today`` / ``yesterday`` /
  ``last_week``);
- ``YimiListRead``, ``HassShoppingListAddItem``, ``HassListAddItem``,
  ``HassShoppingListCompleteItem`` → the hub's lists (:mod:`hub.brain.lists`, in-hub tools
  of the gateway);
- ``HassGetCurrentTime/Date`` → the hub's local clock, spoken;
- timers (start, cancel, pause, resume, add or take off time, status) → the hub's
  scheduler (:mod:`hub.schedule.timers`): a timer is the asking device's, and rings there;
  "not yet" when the brain runs without a scheduler; ``YimiRemind`` /
  ``YimiReminderList`` / ``YimiReminderCancel`` / ``YimiReminderMove`` → the hub's
  reminders (:mod:`hub.schedule.reminders`; the time read by :mod:`hub.brain.when`);
  ``YimiWatch`` ("tell me when the front door opens", "门开了告诉我") → a watch
  (:mod:`hub.schedule.watches`: the device polled, observe-only; or a timeline rule);
  ``YimiScheduleRun`` ("every Monday at 9 e-mail …") → a recurring job whose command later
  runs as a turn with a scheduled scope (``Turn.scheduled``: the gateway blocks a call that
  needs a card); ``HassNevermind`` → "OK.";
  ``YimiHelp`` → what it can do;
- ``YimiOrder``, ``YimiOrderSame``, ``YimiPayIt``, ``YimiUndo`` → :mod:`hub.brain.ordering`.

A sentence the engine does not recognise (or recognises with a score below
``LOCAL_CONFIDENCE``) gets the honest answer in its language and no action. The owner's own
sentence is what asked for an action, so ``owner_requested`` is true — except for turns
whose scope is not ``owner``, where it is false and the gateway's scope rules decide.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import yaml

from hub.brain.base import Brain, Outbox, ReplyChunk, Turn
from hub.brain.errors import BrainError
from hub.brain.lists import LIST_IDS, ListStore, ListTools, lists_manifest
from hub.brain.ordering import ORDER_INTENTS, PAYMENT_KINDS, PaymentDesk
from hub.brain.replies import (
    brief,
    join,
    joined,
    say,
    spoken_date,
    spoken_duration,
    spoken_time,
    spoken_when,
)
from hub.brain.runtime import BrainCore, waiting
from hub.brain.slots import Device, LiveSlots
from hub.brain.tasks import TaskRecord, TaskStore
from hub.gateway import Gateway, Receipt
from hub.gateway.gateway import SCHEDULED_BLOCK
from hub.memory.context import ContextSource, Snippet
from hub.timeline import NOT_UNDERSTOOD
from protos.errors import YimiError

if TYPE_CHECKING:
    from hub.brain.intents import IntentEngine
    from hub.brain.vision import VisionDesk
    from hub.schedule.reminders import ReminderDesk
    from hub.schedule.timers import TimerDesk, TimerView
    from hub.schedule.watches import WatchDesk

log = logging.getLogger(__name__)

SOURCE_TIMEOUT_S = 1.2
MAX_FORGET = 3
"""memories one "forget …" removes at most (the best-scored recall hits)"""
ANSWERED = ("verifying", "done")
"""the states a task answered at once goes through after ``thinking`` (as :meth:`_finish`)"""
TIMERS = frozenset(
    {
        "HassStartTimer",
        "HassCancelTimer",
        "HassPauseTimer",
        "HassUnpauseTimer",
        "HassTimerStatus",
        "HassIncreaseTimer",
        "HassDecreaseTimer",
    }
)
WATCH_STATES: Mapping[str, tuple[tuple[str, ...], tuple[str, str]]] = {
    "open": (("open", "on", "unlocked"), ("opens", "开了")),
    "closed": (("closed", "off", "locked"), ("closes", "关了")),
    "on": (("on", "open"), ("turns on", "开了")),
    "off": (("off", "closed"), ("turns off", "关了")),
}
"""a watch's wanted state → the device states that are it, and how it is said (en, zh)"""
REMINDERS = frozenset(
    {"YimiRemind", "YimiReminderList", "YimiReminderCancel", "YimiReminderMove", "YimiScheduleRun"}
)
VISION = frozenset({"YimiPhoto", "YimiSeenText", "YimiSeenPeople", "YimiNamePerson"})
NOT_SCHEDULED = TIMERS | REMINDERS | VISION | {"HassNevermind", "YimiHelp"}
"""intents a scheduled run never repeats (besides payments, which need the owner now)"""
LEVELS = {
    "HassLightSet": ("brightness", "brightness", "device.brightness"),
    "HassSetPosition": ("position", "position", "device.position"),
    "HassSetVolume": ("volume_level", "volume", "device.volume"),
}
"""intent → (its slot, the ``home.set_state`` argument, the reply key)"""
NOTE_WORDS = ("note", "notes", "minutes", "笔记", "纪要", "记录", "会议记录")
"""a thing to send naming one of these is read from the ``notes`` source"""
HEARD_AS_NOTES = {"notice": "notes"}
"""what the recogniser hears for "notes" (Whisper base: "the meeting notice") → the word meant;
a thing to send is read with the word meant, and its subject says it"""
LIST_DOMAINS = ("light", "switch", "fan")
SCOPE_REFUSAL = "scope "
"""how the gateway's scope refusal begins ("scope 'guest' may not use memory.recall")"""
"""what "turn on the kitchen" switches when no domain is named (lights first)"""


# ---------------------------------------------------------------- address book
@dataclass(frozen=True)
class Contact:
    name: str
    email: str
    aliases: tuple[str, ...] = ()


class Contacts(Protocol):
    def find(self, name: str) -> Contact | None: ...


def _norm(name: str) -> str:
    """Lower case, punctuation as spaces, a leading "to"/"my"/"the"/"our" dropped."""
    words = "".join(ch if ch.isalnum() or ch in "@.-" else " " for ch in name.casefold()).split()
    if words[:1] == ["to"]:
        words = words[1:]
    if words[:1] and words[0] in ("my", "the", "our"):
        words = words[1:]
    return " ".join(words)


@dataclass
class AddressBook:
    """Contacts by name, first name, alias ("my colleague" matches alias "colleague")."""

    contacts: list[Contact] = field(default_factory=list)

    def find(self, name: str) -> Contact | None:
        want = _norm(name)
        if not want:
            return None
        for c in self.contacts:
            names = [_norm(c.name), *(_norm(a) for a in c.aliases)]
            if want in names or want == c.email.lower():
                return c
        firsts = [c for c in self.contacts if _norm(c.name).split()[:1] == [want]]
        return firsts[0] if len(firsts) == 1 else None

    def all(self) -> list[Contact]:
        """Every contact (the intent engine's contact list)."""
        return list(self.contacts)

    @classmethod
    def load(cls, path: Path) -> AddressBook:
        """``contacts.yaml``: a list of ``{name, email, aliases: [...]}``; missing → empty."""
        if not path.exists():
            return cls()
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8")) or []
        except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
            raise BrainError("contacts.invalid", path=path, reason=exc) from None
        if not isinstance(raw, list):
            raise BrainError("contacts.invalid", path=path, reason="not a list")
        out = []
        for i, c in enumerate(raw):
            if not isinstance(c, dict) or not c.get("name") or "@" not in str(c.get("email", "")):
                raise BrainError("contacts.invalid", path=path, reason=f"entry {i}: name, email")
            out.append(
                Contact(str(c["name"]), str(c["email"]), tuple(map(str, c.get("aliases", []))))
            )
        return cls(out)


# ---------------------------------------------------------------- requests
@dataclass(frozen=True)
class Intent:
    """A recognised request: the engine's intent name and its slots (``None``: unknown)."""

    name: str | None
    slots: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """The desk's kind for orders (``order`` …), else the intent name or ``unknown``."""
        if self.name in ORDER_INTENTS:
            return ORDER_INTENTS[self.name]
        return self.name or "unknown"


# ---------------------------------------------------------------- the brain
class RuleBrain(Brain):
    """The rule-based brain. ``turn()`` runs the request's steps through the gateway and
    answers when the task rests (done, failed or waiting for the owner's card).

    ``lists``: the hub's list store (default ``lists.db`` next to the task store);
    ``slots``: the live slot lists and intent engine (default: built here, reading the
    address book and the gateway's packages); ``now``: the hub's local clock."""

    kind = "rule-based"

    def __init__(
        self,
        gateway: Gateway,
        store: TaskStore,
        *,
        contacts: Contacts | None = None,
        on_event: Any = None,
        lists: ListStore | None = None,
        slots: LiveSlots | None = None,
        now: Callable[[], dt.datetime] | None = None,
        timers: TimerDesk | None = None,
        reminders: ReminderDesk | None = None,
        watches: WatchDesk | None = None,
        vision: VisionDesk | None = None,
    ) -> None:
        self.core = BrainCore(gateway, store, on_event)
        self.vision = vision
        """the hub's eyes (``None``: "take a picture" answers "not yet")"""
        self.timers = timers
        self.reminders = reminders
        self.watches = watches
        """the hub's watches (``None``: watches answer "not yet")"""
        """the hub's reminders (``None``: reminders answer "not yet")"""
        """the hub's timers (``None``: timers answer "not yet")"""
        self.store = store
        self.contacts: Contacts = contacts or AddressBook()
        self.desk = PaymentDesk(gateway)
        self._own_lists = lists is None
        self.lists = lists or ListStore(store.path.parent / "lists.db")
        self.core.add_local(lists_manifest(), ListTools(self.lists))
        self.slots = slots or LiveSlots(gateway, self.contacts)
        self.now = now or (lambda: dt.datetime.now().astimezone())
        self._at_once: dict[str, Callable[[str], str]] = {
            "HassGetCurrentTime": lambda lang: say(
                "time.now", lang, time=spoken_time(self.now(), lang)
            ),
            "HassGetCurrentDate": lambda lang: say(
                "date.today", lang, date=spoken_date(self.now(), lang)
            ),
            "HassNevermind": lambda lang: say("nevermind", lang),
            "YimiHelp": lambda lang: say("help", lang),
        }
        """answers that need no step and nothing of their task, by intent, in ``lang``"""

    @property
    def engine(self) -> IntentEngine:
        """The intent engine over the live slot lists (``slots.engine``)."""
        engine = self.slots.engine
        assert engine is not None
        return engine

    async def close(self) -> None:
        if self._own_lists:
            self.lists.close()

    async def recognize(self, text: str, lang: str) -> Intent:
        from hub.brain.intents import LOCAL_CONFIDENCE, Lang

        first: Lang = "zh" if lang == "zh" else "en"
        match = await self.slots.recognize(text, first)
        if match is None:  # words in the other language than the one heard ("OK" in zh)
            match = await self.slots.recognize(text, "en" if first == "zh" else "zh")
        if match is None or match.score < LOCAL_CONFIDENCE:
            return Intent(None)
        return Intent(match.intent, dict(match.slots))

    async def turn(self, turn: Turn) -> AsyncGenerator[ReplyChunk, None]:
        turn = turn.ids()
        lang = turn.lang
        existing = self.store.get(turn.turn_id)
        if existing is not None:  # a redelivered turn: what it was understood as then
            intent = Intent(existing.spec.get("intent"), dict(existing.spec.get("slots", {})))
        else:
            intent = await self.recognize(turn.text, lang)
        spec = {
            "brain": self.kind,
            "intent": intent.name,
            "slots": dict(intent.slots),
            "lang": lang,
            **({"scheduled": True} if turn.scheduled else {}),
            **({"text": turn.text[:500]} if intent.name == "YimiScheduleRun" else {}),
            **({"heard": turn.text[:500]} if intent.name is None else {}),
        }
        # a request answered without a step (the time, help, one not understood): its task
        # is created answered, in one transaction, rather than created and then finished
        answer = self._answer_now(intent, spec, lang) if existing is None else None
        task, fresh = self.store.create(
            turn.turn_id,
            trace_id=turn.trace_id,
            run_id=turn.turn_id,
            owner=turn.owner,
            scope=turn.scope,
            kind="turn",
            session_id=turn.session_id,
            device_id=turn.device_id,
            title=_title(intent),
            spec=spec,
            then=("admitted", "thinking", *(() if answer is None else ANSWERED)),
            result=None if answer is None else {"report": answer},
        )
        if fresh and intent.kind in ("order", "order_same", "pay_it", "undo"):
            # where the words came from, for payments
            task = self.store.update_spec(task.task_id, pay=self.desk.request_spec(turn))
        out = Outbox(
            task.task_id,
            task.trace_id,
            turn.device_id,
            self.kind,
            intent=intent.name or NOT_UNDERSTOOD,
        )
        if fresh and answer is not None:
            text = answer
            await self.core.emit(task, text, receipts=())  # no step: no receipt
        elif not fresh and task.finished:
            text = str(task.result.get("report", "")) or say("already", lang)
        else:
            async with self.core.lock(task.task_id):
                text = await self._run(task, intent, turn.sources)
        for chunk in out.make(text):
            yield chunk

    async def _run(self, task: TaskRecord, intent: Intent, sources: Sequence[ContextSource]) -> str:
        if task.state in ("received", "admitted"):  # a fresh task is created thinking
            task = self.store.walk(task.task_id, "admitted", "thinking")
        lang = _lang(task)
        try:
            text = await self._act(task, intent, sources, lang)
        except BrainError as exc:
            text = str(exc)
            self.store.move(task.task_id, "failed", text)
        current = self.store.require(task.task_id)
        if current.state == "waiting_for_consent" or not current.finished:
            current = await self.core.settle(task.task_id, text=text)
            if current.finished:
                return str(current.result.get("report", text))
            return text
        # finished inside _act (help text, unknown recipient...): record and report (a
        # task _finish closed holds the report already)
        if current.result != {"report": text}:
            current = self.store.move(task.task_id, current.state, result={"report": text})
        await self.core.emit(current, text)
        return text

    async def _act(
        self, task: TaskRecord, intent: Intent, sources: Sequence[ContextSource], lang: str
    ) -> str:
        asked = task.scope == "owner"
        s = intent.slots
        name = intent.name
        answer = self._answer_now(intent, task.spec, lang)
        if answer is not None:
            return self._finish(task, answer)
        if name == "YimiRemember":
            self.store.move(task.task_id, "acting")
            fact = str(s.get("fact", ""))
            r = await self.core.step(
                task,
                "commit",
                "memory",
                "commit",
                {
                    "subject": "owner",
                    "predicate": "core_profile.entry",
                    "value": fact,
                    "sources": [f"utterance:{task.task_id}"],
                    "owner_requested": asked,
                },
            )
            return _said(r, say("remember.done", lang, fact=fact), "act.remember", lang)
        if name == "YimiRecall":
            # "what did I say last Tuesday about …": the time goes with the question
            asked_about = " ".join(str(s[k]) for k in ("when", "query") if s.get(k))
            return await self._recall(task, asked_about, asked, lang, said=bool(s.get("when")))
        if name == "YimiForget":
            return await self._forget(task, str(s.get("query", "")), asked, lang)
        if name == "YimiTimeline":
            period = str(s.get("period") or "today")
            snippets = await _fetch(sources, "timeline", period)
            when = say(f"period.{period}", lang) if period in _PERIODS else period
            if not snippets:
                return self._finish(task, say("timeline.empty", lang, period=when))
            lines = join([x.text for x in snippets[:8]], lang)
            return self._finish(task, say("timeline.list", lang, period=when, lines=lines))
        if name in ("HassTurnOn", "HassTurnOff", *LEVELS):
            return await self._device(task, name, s, asked, lang)
        if name == "HassGetState":
            return await self._state(task, s, lang)
        if name == "YimiSendMessage":
            return await self._send(task, s, sources, asked, lang)
        if name in ("YimiListRead", "HassShoppingListAddItem", "HassListAddItem"):
            return await self._list(task, name, s, lang)
        if name == "HassShoppingListCompleteItem":
            return await self._list(task, name, s, lang)
        if name in TIMERS:
            if self.timers is None:
                return self._finish(task, say("not_yet.timer", lang))
            return self._finish(task, self._timer(task, name, s, lang))
        if name == "YimiWatch":
            if self.watches is None:
                return self._finish(task, say("not_yet.watch", lang))
            return self._finish(task, self._watch(task, s, lang))
        if name in REMINDERS:
            if self.reminders is None:
                return self._finish(task, say("not_yet.reminder", lang))
            return self._finish(task, await self._reminder(task, name, s, lang))
        if name in VISION:
            if self.vision is None:
                return self._finish(task, say("not_yet.vision", lang))
            return self._finish(task, await self._see(task, name, s, lang))
        if intent.kind in PAYMENT_KINDS:
            slots = {k: str(v) for k, v in s.items()}
            if slots.get("shop"):
                slots["shop_name"] = self.slots.shop_name(slots["shop"])
            slots["shops"] = join([n.names[0] for n in self.slots.shops if n.names], lang)
            return await self.desk.order(self.core, task, intent.kind, slots)
        if intent.kind == "pay_it":
            return await self.desk.pay_it(task, self.store)
        if intent.kind == "undo":
            return await self.desk.undo(task, self.store)
        return self._finish(task, _not_understood(task.spec, lang))

    def _answer_now(self, intent: Intent, spec: Mapping[str, Any], lang: str) -> str | None:
        """The answer to a request that needs no step and nothing of its task but ``spec``
        (the time, the date, help, never mind, a request not understood), else ``None``."""
        if intent.name is None:
            return _not_understood(spec, lang)
        answer = self._at_once.get(intent.name)
        return None if answer is None else answer(lang)

    async def _see(self, task: TaskRecord, name: str, s: Mapping[str, Any], lang: str) -> str:
        """A snapshot on the asking device, or what recent snapshots showed."""
        assert self.vision is not None
        if name == "YimiPhoto":
            if task.scope != "owner":
                return say("photo.owner_only", lang)
            asked = await self.vision.capture(task.device_id, task.task_id, task.trace_id)
            return say("photo.taking" if asked else "photo.no_camera", lang)
        if name == "YimiNamePerson":
            if task.scope != "owner":
                return say("photo.owner_only", lang)
            person = str(s.get("person", "")).strip()
            try:
                count, needed = await self.vision.name_last(person)
            except YimiError as exc:
                return str(exc)
            if count >= needed:
                return say("named.known", lang, name=person)
            return say("named.more", lang, name=person, count=count, needed=needed)
        today = self.now().replace(hour=0, minute=0, second=0, microsecond=0)
        since = today - dt.timedelta(days=1) if s.get("when") == "yesterday" else today
        if name == "YimiSeenText":
            photo = self.vision.last_text()
            if photo is None:
                return say("seen.no_text", lang)
            when = spoken_time(dt.datetime.fromtimestamp(photo.taken_ms / 1000).astimezone(), lang)
            return say("seen.text", lang, text=photo.text[:300], time=when)
        seen = self.vision.people_seen(int(since.timestamp() * 1000) if s.get("when") else 0)
        names: list[str] = []
        for photo in seen:
            names += [n for n in photo.people if n not in names]
        if not names:
            return say("seen.nobody", lang)
        return say("seen.people", lang, people=join(names, lang))

    def _finish(self, task: TaskRecord, text: str, state: str = "done") -> str:
        """A task answered without any action: verifying → ``state`` (one transaction)."""
        self.store.finish(task.task_id, state, result={"report": text})
        return text

    # ------------------------------------------------------------------ memory
    async def _lookup(
        self, task: TaskRecord, query: str, asked: bool, *, told_only: bool = False
    ) -> Receipt:
        """``memory.recall`` of ``query``, one persisted step (recall and forget both start
        so). ``told_only``: only what the owner told — not the hub's replies, nor the
        owner's questions (this one, by its timeline item, included)."""
        from hub.memory.timeline_recall import timeline_item  # imports hub.brain.when

        args: dict[str, Any] = {"query": query, "owner_requested": asked}
        if told_only:
            args |= {"told_only": True, "hide": [timeline_item(task.task_id)]}
        return await self.core.step(task, "recall", "memory", "recall", args, lookup=True)

    async def _recall(
        self, task: TaskRecord, query: str, asked: bool, lang: str, *, said: bool = False
    ) -> str:
        """What the owner told about ``query``: never the hub's own replies nor the
        questions asked about it (this one and earlier ones). What matches its words
        answers; only when nothing does (a word misheard: "Ceylon Troop" for "cilantro"),
        the best found by meaning alone. Unless the question is about what was said when
        (``said``), remembered facts answer before the owner's words on the timeline (the
        "remember …" sentence is the fact's source), which answer only when no fact
        matches; short (:func:`brief`)."""
        from hub.memory.timeline_recall import TIMELINE_ITEM  # imports hub.brain.when

        r = await self._lookup(task, query, asked, told_only=True)
        if r.status != "succeeded":
            return _said(r, "", "act.recall", lang)
        effects = [e for e in r.effects if e.kind == "memory.recalled"]
        by_words = [e for e in effects if e.fields.get("found_by", "words") == "words"]
        effects = by_words or effects
        facts = [e for e in effects if not e.target.startswith(TIMELINE_ITEM)]
        if not said and any(e.fields.get("text") for e in facts):
            effects = facts
        if not by_words:
            effects = effects[:1]
        texts = [
            str(e.fields["text"]).removeprefix("owner: ")  # the owner's own facts: "owner: …"
            for e in effects
            if e.fields.get("text")
        ]
        hidden = len(effects) - len(texts)
        if not texts and not hidden:
            return say("recall.none", lang, query=query)
        if not texts:
            return say("recall.hidden", lang, n=hidden, query=query)
        lines, left_out = brief(texts, lang)
        more = hidden + left_out
        extra = say("recall.more", lang, n=more) if more else ""
        return say("recall.found", lang, query=query, lines=lines) + extra

    async def _forget(self, task: TaskRecord, query: str, asked: bool, lang: str) -> str:
        """Forgetting whole where the memory package can plan it (the home's): the plan
        (everything said about ``query``: timeline, archive, memories, summaries) goes to
        the owner as a card — always, even when the owner asked — and only the approval
        executes it. A memory that gives no plan (the fake) forgets the recalled facts."""
        plan = await self.core.step(
            task, "plan", "memory", "plan_forget", {"about": query, "lang": lang}, lookup=True
        )
        head = next((e for e in plan.effects if e.kind == "memory.forget_plan"), None)
        if plan.status == "succeeded" and head is not None:
            if not int(head.fields.get("items") or 0):
                self.store.move(task.task_id, "failed", "nothing to forget")
                return say("forget.none", lang, query=query)
            self.store.move(task.task_id, "acting")
            r = await self.core.step(
                task,
                "forget_plan",
                "memory",
                "forget_plan",
                {
                    "plan_id": head.target,
                    "summary": str(head.fields.get("summary") or ""),
                    "owner_requested": False,  # a plan this wide is always shown first
                },
            )
            return _said(r, say("erase.said", lang, n=_deleted(r)), "act.forget", lang)
        return await self._forget_facts(task, query, asked, lang)

    async def _forget_facts(self, task: TaskRecord, query: str, asked: bool, lang: str) -> str:
        r = await self._lookup(task, query, asked)
        if r.status != "succeeded":
            return _said(r, "", "act.forget", lang)
        hits = [e for e in r.effects if e.fields.get("id")]
        if not hits:
            self.store.move(task.task_id, "failed", "nothing to forget")
            return say("forget.none", lang, query=query)
        best = max(float(e.fields.get("score") or 0) for e in hits)
        chosen = [e for e in hits if float(e.fields.get("score") or 0) >= best][:MAX_FORGET]
        self.store.move(task.task_id, "acting")
        texts: list[str] = []
        last: Receipt | None = None
        for i, e in enumerate(chosen):
            last = await self.core.step(
                task,
                f"forget{i}",
                "memory",
                "forget",
                {"id": str(e.fields["id"]), "owner_requested": asked},
            )
            if last.status != "succeeded":
                return _said(last, "", "act.forget", lang)
            texts.append(str(e.fields.get("text") or e.fields["id"]))
        return say("forget.done", lang, lines=join(texts, lang))

    # ------------------------------------------------------------------ devices
    def _targets(self, slots: Mapping[str, Any], domains: Iterable[str] = ()) -> list[Device]:
        entity = str(slots.get("name") or "")
        if entity:
            found = self.slots.device(entity)
            return [found] if found is not None else [Device(entity, entity, entity.split(".")[0])]
        area = str(slots.get("area") or "")
        domain = str(slots.get("domain") or "")
        if not area:
            return []
        if domain:
            return self.slots.in_area(area, domain)
        for d in domains:  # "turn on the kitchen": its lights, else what it can switch
            found_d = self.slots.in_area(area, d)
            if found_d:
                return found_d
        return []

    async def _device(
        self, task: TaskRecord, name: str, slots: Mapping[str, Any], asked: bool, lang: str
    ) -> str:
        on_off = name in ("HassTurnOn", "HassTurnOff")
        domains: tuple[str, ...] = LIST_DOMAINS if on_off else ()
        if name == "HassSetVolume":
            domains = ("media_player",)
        elif name == "HassSetPosition":
            domains = ("cover",)
        elif name == "HassLightSet":
            domains = ("light",)
        targets = self._targets(slots, domains)
        if not targets and name == "HassSetVolume" and not slots.get("name"):
            targets = [d for d in self.slots.devices if d.domain == "media_player"][:1]
        if not targets:
            known = ", ".join(sorted(d.name for d in self.slots.devices))
            self.store.move(task.task_id, "failed", "no such device")
            if not known:
                return say("device.none", lang)
            return say("device.unknown", lang, known=known)
        self.store.move(task.task_id, "acting")
        args: dict[str, Any] = {}
        if on_off:
            state = "on" if name == "HassTurnOn" else "off"
            args["state"] = state
            act = f"act.device_{state}"
        else:
            slot, arg, _key = LEVELS[name]
            args[arg] = int(slots.get(slot, 0))
            act = "act.device"
        replies = []
        for i, d in enumerate(targets):
            key = "switch" if i == 0 else f"switch{i}"
            r = await self.core.step(
                task,
                key,
                "home",
                "set_state",
                {"entity": d.entity, **args, "owner_requested": asked},
            )
            # success: the receipt's facts are the reply (rendered in the turn's language)
            replies.append(_said(r, "", act, lang, name=d.name))
        return joined(replies, lang)

    async def _state(self, task: TaskRecord, slots: Mapping[str, Any], lang: str) -> str:
        targets = self._targets(slots)
        if not targets:
            known = ", ".join(sorted(d.name for d in self.slots.devices))
            self.store.move(task.task_id, "failed", "no such device")
            return say("device.unknown", lang, known=known) if known else say("device.none", lang)
        d = targets[0]
        r = await self.core.step(task, "state", "home", "get_state", {"entity": d.entity})
        if r.status != "succeeded":
            return _said(r, "", "act.state", lang, name=d.name)
        asked = str(slots.get("state") or "").lower()
        for e in r.effects:
            state = str(e.fields.get("state", ""))
            if asked and state:
                key = "device.is_yes" if state.lower() == asked else "device.is_no"
                return say(
                    key, lang, name=e.fields.get("name") or d.name, state=_state_word(state, lang)
                )
        return ""  # the reading's facts (a state, a value) are the answer

    # ------------------------------------------------------------------ lists
    async def _list(self, task: TaskRecord, name: str, slots: Mapping[str, Any], lang: str) -> str:
        list_id = str(slots.get("name") or "shopping")
        if list_id not in LIST_IDS:
            list_id = "shopping"
        if name == "YimiListRead":
            r = await self.core.step(task, "list", "lists", "read_list", {"list": list_id})
            return _said(r, "", "act.list_read", lang)
        item = str(slots.get("item") or "")
        self.store.move(task.task_id, "acting")
        if name == "HassShoppingListCompleteItem":
            r = await self.core.step(
                task, "list", "lists", "complete_item", {"list": list_id, "item": item}
            )
            if r.status == "failed" and r.error_code == "NOT_FOUND":
                return say("list.not_on", lang, item=item, list=say(f"list.{list_id}", lang))
            return _said(r, "", "act.list_done", lang, item=item)
        r = await self.core.step(task, "list", "lists", "add_item", {"list": list_id, "item": item})
        return _said(r, "", "act.list_add", lang, item=item)

    # ------------------------------------------------------------------ timers
    def _timer(self, task: TaskRecord, name: str, s: Mapping[str, Any], lang: str) -> str:
        desk = self.timers
        assert desk is not None
        device, wanted = task.device_id, str(s.get("name") or "")
        duration_ms = 1000 * (
            3600 * int(s.get("hours") or 0)
            + 60 * int(s.get("minutes") or 0)
            + int(s.get("seconds") or 0)
        )
        if name == "HassStartTimer":
            if duration_ms <= 0:
                return say("timer.none", lang)
            t = desk.start(
                task.task_id, device, duration_ms, name=wanted, lang=lang, trace=task.trace_id
            )
            label = _timer_label(t.name, lang)
            return say(
                "timer.started",
                lang,
                label=label,
                Label=_cap(label),
                duration=spoken_duration(t.duration_ms, lang),
            )
        found = desk.on(device, wanted)
        if not found:
            if wanted:
                return say("timer.none_named", lang, label=_timer_label(wanted, lang))
            return say("timer.none", lang)
        if name == "HassTimerStatus":
            lines = [_timer_left(t, lang) for t in found]
            return say("timer.status", lang, lines=join(lines, lang))
        if len(found) > 1:
            names = join([_timer_label(t.name, lang) for t in found], lang)
            return say("timer.which", lang, names=names)
        t = found[0]
        label = _timer_label(t.name, lang)
        if name == "HassCancelTimer":
            desk.cancel(t)
            return say("timer.cancelled", lang, label=label)
        if name == "HassPauseTimer":
            if t.paused:
                return say("timer.already_paused", lang, label=label)
            done = desk.pause(t) or t
            return say("timer.paused", lang, label=label, remaining=_left(done, lang))
        if name == "HassUnpauseTimer":
            if not t.paused:
                return say("timer.not_running", lang, label=label)
            done = desk.resume(t) or t
            return say("timer.resumed", lang, label=label, remaining=_left(done, lang))
        sign = -1 if name == "HassDecreaseTimer" else 1
        done = desk.extend(t, sign * duration_ms) or t
        return say("timer.changed", lang, label=label, remaining=_left(done, lang))

    # ------------------------------------------------------------------ reminders
    async def _reminder(self, task: TaskRecord, name: str, s: Mapping[str, Any], lang: str) -> str:
        from hub.brain.when import parse

        desk = self.reminders
        assert desk is not None
        what = str(s.get("what") or "").strip()
        if name == "YimiScheduleRun":
            said = str(task.spec.get("text") or s.get("command") or "")
            return await self._schedule_run(task, said, lang)
        if name == "YimiRemind":
            now = desk.now()
            said = str(s.get("when") or "")
            when = parse(f"{said} {what}" if said else what, lang, now)
            if when is None and said and lang != "zh":  # "a reminder for 7 to …"
                when = parse(f"at {said} {what}", lang, now)
            if when is None:
                self.store.move(task.task_id, "failed", "no time")
                return say("reminder.when", lang, what=what)
            what = when.rest or what
            at_time = dt.time(when.hour, when.minute)
            if when.at is not None:
                at_time = when.at.time()
            spoken = spoken_when(when.at, when.days if not when.at else None, at_time, now, lang)
            if when.at is not None and when.at <= now:
                self.store.move(task.task_id, "failed", "in the past")
                return say("reminder.past", lang, when=spoken)
            desk.add(
                task.task_id,
                device=task.device_id,
                what=what,
                when=spoken,
                lang=lang,
                trace=task.trace_id,
                at=when.at,
                rule=when.rule,
            )
            return say("reminder.set", lang, when=spoken, what=what)
        if name == "YimiReminderMove":
            return self._move_reminder(task, s, lang)
        found = desk.all(what)
        if not found:
            if what:
                return say("reminder.none_match", lang, what=what)
            return say("reminder.none", lang)
        lines = join([say("reminder.item", lang, when=r.when, what=r.what) for r in found], lang)
        if name == "YimiReminderList":
            return say("reminder.list", lang, lines=lines)
        if len(found) > 1:
            return say("reminder.which", lang, lines=lines)
        desk.cancel(found[0])
        return say("reminder.cancelled", lang, what=found[0].what)

    def _watch(self, task: TaskRecord, s: Mapping[str, Any], lang: str) -> str:
        """ "tell me when the front door opens", "门开了告诉我": a watch on the device's state
        (polled by the hub, observe-only); "… when the timeline mentions X": on the timeline."""
        desk = self.watches
        assert desk is not None
        what = str(s.get("what") or "").strip()
        if what and not s.get("name"):
            desk.watch_timeline(
                task.task_id,
                device=task.device_id,
                rule=what,
                what=what,
                lang=lang,
                trace=task.trace_id,
            )
            return say("watch.timeline_set", lang, what=what)
        targets = self._targets(s)
        if not targets:
            known = ", ".join(sorted(d.name for d in self.slots.devices))
            self.store.move(task.task_id, "failed", "no such device")
            return say("device.unknown", lang, known=known) if known else say("device.none", lang)
        d, state = targets[0], str(s.get("state") or "open")
        states, verb = WATCH_STATES.get(state, WATCH_STATES["open"])
        from hub.brain.intents.text import detect_language

        zh_name = next((a for a in (d.name, *d.aliases) if detect_language(a) == "zh"), d.name)
        label = zh_name if lang == "zh" else f"the {d.name[:1].lower()}{d.name[1:]}"
        said = f"{label}{verb[1]}" if lang == "zh" else f"{label} {verb[0]}"
        desk.watch_home(
            task.task_id,
            device=task.device_id,
            entity=d.entity,
            states=states,
            what=said,
            lang=lang,
            trace=task.trace_id,
        )
        return say("watch.set", lang, what=said)

    def _move_reminder(self, task: TaskRecord, s: Mapping[str, Any], lang: str) -> str:
        """ "move my 5 pm reminder to 6", "把提醒改到六点": the reminder named by its words or
        its time (the only one, if neither is said) is due at the new time instead."""
        from hub.brain.when import parse, parse_moved
        from hub.schedule import recurrence

        desk = self.reminders
        assert desk is not None
        now = desk.now()
        old = str(s.get("old") or s.get("what") or "").strip()
        found = desk.all(old) if old else desk.all()
        if old and not found:  # "my 5 pm reminder": by its time
            t = parse(old if lang == "zh" else f"at {old}", lang, now)
            if t is not None:
                found = [
                    r
                    for r in desk.all()
                    if (at := desk.at(r)) is not None and (at.hour, at.minute) == (t.hour, t.minute)
                ]
        if not found:
            self.store.move(task.task_id, "failed", "no such reminder")
            if old:
                return say("reminder.none_match", lang, what=old)
            return say("reminder.none", lang)
        if len(found) > 1:
            lines = join(
                [say("reminder.item", lang, when=r.when, what=r.what) for r in found], lang
            )
            return say("reminder.which", lang, lines=lines)
        view = found[0]
        was = desk.at(view)
        when = parse_moved(str(s.get("when") or ""), lang, now, was)
        if when is None:
            self.store.move(task.task_id, "failed", "no time")
            return say("reminder.move_when", lang)
        at, rule, days = when.at, when.rule, when.days
        clock = dt.time(when.hour, when.minute) if at is None else at.time()
        if view.recurring and not rule:  # "every day at 8" moved "to 9": every day at 9
            job = desk.scheduler.store.get(view.id)
            assert job is not None
            at, rule = None, recurrence.at_time(job.rule, clock.hour, clock.minute)
            days = recurrence.days_of(job.rule)
        spoken = spoken_when(at, days if at is None else None, clock, now, lang)
        if at is not None and at <= now:
            self.store.move(task.task_id, "failed", "in the past")
            return say("reminder.past", lang, when=spoken)
        moved = desk.move(view, when=spoken, at=at, rule=rule)
        if moved is None:
            return say("reminder.none", lang)
        return say("reminder.moved", lang, when=spoken, what=view.what)

    async def _schedule_run(self, task: TaskRecord, command: str, lang: str) -> str:
        """ "every Monday at 9 e-mail …": the command runs at those times as a scheduled run
        (a call that needs a card is then blocked, never shown)."""
        from hub.brain.when import parse

        desk = self.reminders
        assert desk is not None
        now = desk.now()
        when = parse(command, lang, now)
        later = await self.recognize(when.rest, lang) if when is not None and when.rest else None
        if (
            when is None
            or not when.rule
            or later is None
            or later.name is None
            or later.name in NOT_SCHEDULED
            or later.kind in PAYMENT_KINDS
            or later.kind in ("pay_it", "undo")
        ):
            self.store.move(task.task_id, "failed", "not a command to repeat")
            return joined([say("heard", lang, heard=command), say("unknown", lang)], lang)
        spoken = spoken_when(None, when.days, dt.time(when.hour, when.minute), now, lang)
        desk.add_run(
            task.task_id,
            device=task.device_id,
            command=when.rest,
            when=spoken,
            lang=lang,
            trace=task.trace_id,
            rule=when.rule,
        )
        return say("run.set", lang, when=spoken, what=when.rest)

    # ------------------------------------------------------------------ messages
    async def _send(
        self,
        task: TaskRecord,
        s: Mapping[str, Any],
        sources: Sequence[ContextSource],
        asked: bool,
        lang: str,
    ) -> str:
        to_name = str(s.get("contact", ""))
        contact = self.contacts.find(to_name) if to_name else None
        started = self.store.step(task.task_id, "send")
        if started is not None:  # resumed: the recorded arguments are the ones to send
            r = await self.core.step(task, "send", "messaging", "send_email", {})
            to = str(started.args.get("to", ""))
            return _said(r, say("send.done", lang, who=to), "act.send", lang, who=to)
        if contact is None:
            self.store.move(task.task_id, "failed", "unknown recipient")
            return say("send.unknown_contact", lang, name=to_name or "?")
        if s.get("body"):
            subject, body = say("send.subject", lang), str(s["body"])
        else:
            what = _meant(str(s.get("what", "")))
            subject = what[:1].upper() + what[1:]
            notes = _names_notes(what)
            found = await _fetch(sources, "notes", what) if notes else []
            if notes and not found:
                self.store.move(task.task_id, "failed", "no notes found")
                return say("send.no_notes", lang, what=what)
            body = "\n".join(x.text for x in found) if found else what
        self.store.move(task.task_id, "acting")
        r = await self.core.step(
            task,
            "send",
            "messaging",
            "send_email",
            {"to": contact.email, "subject": subject, "body": body, "owner_requested": asked},
        )
        who = f"{contact.name} ({contact.email})"
        return _said(r, say("send.done", lang, who=who), "act.send", lang, who=who)

    # ------------------------------------------------------------------ restarts
    async def resume(self) -> list[str]:
        """Continue unfinished rule tasks: steps with receipts are not run again; a task
        waiting for a card stays waiting unless the ledger already has the answer. The
        outcome goes out as a task event (the original turn's reply stream is gone)."""
        resumed = []
        for task in self.store.unfinished(kind="turn"):
            if task.spec.get("brain") != self.kind:
                continue
            if task.state == "waiting_for_consent":
                await self._recheck_waiting(task)
            else:
                async with self.core.lock(task.task_id):
                    slots = dict(task.spec.get("slots", {}))
                    await self._run(task, Intent(task.spec.get("intent"), slots), ())
            log.info("resumed task %s: %s", task.task_id, self.store.require(task.task_id).state)
            resumed.append(task.task_id)
        return resumed

    async def _recheck_waiting(self, task: TaskRecord) -> None:
        for step in self.store.steps(task.task_id):
            if waiting(step.status, step.receipt):
                r = self.core.recorded(task.task_id, step.call_id)
                if r is not None and not waiting(r.status, r.to_dict()):
                    await self.core.receipt_arrived(r)

    async def on_receipt(self, receipt: Receipt) -> None:
        await self.core.receipt_arrived(receipt)


# ---------------------------------------------------------------- helpers
_PERIODS = ("today", "yesterday", "last_week")
_STATE_WORDS = {"on": "开着", "off": "关着", "locked": "锁着", "unlocked": "没锁"}


def _lang(task: TaskRecord) -> str:
    return str(task.spec.get("lang") or "en")


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _timer_label(name: str, lang: str) -> str:
    return say("timer.label_named", lang, name=name) if name else say("timer.label", lang)


def _left(t: TimerView, lang: str) -> str:
    return spoken_duration(t.remaining_ms, lang)


def _timer_left(t: TimerView, lang: str) -> str:
    label = _timer_label(t.name, lang)
    paused = say("timer.paused_mark", lang) if t.paused else ""
    return say(
        "timer.left", lang, label=label, Label=_cap(label), remaining=_left(t, lang), paused=paused
    )


def _state_word(state: str, lang: str) -> str:
    return _STATE_WORDS.get(state.lower(), state) if lang == "zh" else state


def _meant(what: str) -> str:
    """``what`` with the words heard for "notes" put back (:data:`HEARD_AS_NOTES`)."""
    return " ".join(HEARD_AS_NOTES.get(w.lower(), w) for w in what.split(" "))


def _names_notes(what: str) -> bool:
    words = _norm(what).split()
    return any(w in words for w in NOTE_WORDS) or any(
        w in what for w in NOTE_WORDS if not w.isascii()
    )


def _not_understood(spec: Mapping[str, Any], lang: str) -> str:
    """The honest answer to a request not understood, never an action (with what was heard:
    the owner sees what reached the hub)."""
    heard = " ".join(str(spec.get("heard", "")).split()).rstrip(".。!！?？")
    said = say("heard", lang, heard=heard) if heard else ""
    return joined([said, say("unknown", lang)], lang)


def _title(intent: Intent) -> str:
    s = intent.slots

    def g(key: str) -> str:
        return str(s.get(key, ""))

    titles = {
        "YimiRemember": f"remember: {g('fact')}",
        "YimiRecall": f"recall: {g('query')}",
        "YimiForget": f"forget: {g('query')}",
        "YimiSendMessage": f"e-mail {g('contact')}",
        "HassTurnOn": f"turn on {g('name') or g('area')}",
        "HassTurnOff": f"turn off {g('name') or g('area')}",
        "HassLightSet": f"brightness {g('brightness')}: {g('name') or g('area')}",
        "HassSetPosition": f"position {g('position')}: {g('name') or g('area')}",
        "HassSetVolume": f"volume {g('volume_level')}: {g('name')}",
        "HassGetState": f"state of {g('name') or g('area')}",
        "YimiTimeline": f"timeline: {g('period') or 'today'}",
        "YimiPhoto": "take a picture",
        "YimiSeenText": "what the last photo said",
        "YimiSeenPeople": "who was on the photos",
        "YimiNamePerson": f"name the face on the photo: {g('person')}",
        "YimiListRead": f"read the {g('name') or 'shopping'} list",
        "HassShoppingListAddItem": f"add to the shopping list: {g('item')}",
        "HassListAddItem": f"add to the {g('name')} list: {g('item')}",
        "HassShoppingListCompleteItem": f"check off: {g('item')}",
        "HassGetCurrentTime": "the time",
        "HassGetCurrentDate": "the date",
        "YimiOrder": f"order from {g('shop')}: {g('items')}",
        "YimiOrderSame": f"order the same {g('meal') or 'order'} as last time",
        "YimiPayIt": "pay it",
        "YimiUndo": "undo a payment",
        "HassNevermind": "never mind",
        "YimiRemind": f"reminder: {g('what')}",
        "YimiReminderList": "the reminders",
        "YimiReminderCancel": f"cancel a reminder: {g('what')}",
        "YimiReminderMove": f"move a reminder: {g('old') or g('what')}",
        "YimiWatch": f"watch: {g('name') or g('what')}",
        "YimiScheduleRun": f"every {g('command')}",
    }
    if intent.name in TIMERS:
        return "timer"
    return titles.get(intent.name or "", "help")[:200]


def _deleted(r: Receipt) -> int:
    return sum(1 for e in r.effects if e.kind == "memory.deleted")


def _said(r: Receipt, success: str, act: str, lang: str, **fields: Any) -> str:
    """The sentence for a receipt (facts are added by the gateway's checker)."""
    what = say(act, lang, **fields)
    if r.status == "succeeded":
        return success
    if r.status == "waiting":
        return say("said.waiting", lang, what=what)
    if r.status == "rejected":
        return say("said.rejected", lang, what=what, why=_why_rejected(r, lang))
    if r.status == "partial":
        return say("said.partial", lang, what=what)
    if r.status == "unknown":
        return say("said.unknown", lang, what=what)
    return say("said.failed", lang, what=what, why=r.error or r.status)


def _why_rejected(r: Receipt, lang: str) -> str:
    """Why the gateway refused, for the person: a scope refusal (the gateway's own fixed
    reason, :meth:`hub.gateway.Gateway._decide`) in the turn's language, naming no tool;
    any other reason as the gateway gave it."""
    if r.error.startswith(SCOPE_REFUSAL) and " may not use " in r.error:
        return say("refused.scope", lang)
    if r.error == SCHEDULED_BLOCK:
        return say("refused.scheduled", lang)
    return r.error or say("refused", lang)


async def _fetch(sources: Iterable[ContextSource], name: str, query: str) -> list[Snippet]:
    for src in sources:
        if src.name == name:
            try:
                async with asyncio.timeout(SOURCE_TIMEOUT_S):
                    return [x for x in await src.fetch(query) if x.text.strip()]
            except Exception as exc:
                log.warning("context source %s failed: %s", name, exc)
                return []
    return []
