"""The built-in rule-based model: the offline default, needing no model endpoint.

It is **not** a language model and never says it is one: every reply starts with
``[rule-based]``. It understands exactly this fixed set of requests (English, an optional
leading "Yimi," and "please"; anything else gets the list below as its answer):

- **remember** — "remember I don't eat cilantro", "remember that …" → ``memory.commit``
  (a core-profile entry, sourced from the utterance);
- **recall** — "what do you remember about cilantro", "what do you know about Dana",
  "recall cilantro" → ``memory.recall``;
- **send a message** — "e-mail the meeting notes to my colleague", "send an e-mail to Dana
  saying I'm late", "message Dana: running late" → ``messaging.send_email``;
- **control a device** — "turn on the kitchen light", "switch the kettle off" →
  ``home.list_devices`` (to find the device) and ``home.set_state``;
- **timeline** — "what's on my timeline (today)" → the turn's ``timeline`` context source;
- **order and pay** — "order the same lunch as last time", "order two beef noodles from
  Lotus Kitchen (for up to 30 euros)" → a payment intent from the owner's own request, then
  ``errands.browse_menu`` / ``add_to_cart`` / ``go_to_checkout`` (the checkout stops: a card
  on the phone); "pay it" (voice pay, if the owner enabled it) and "undo"
  (:mod:`hub.brain.ordering`).

Recipients are looked up in the address book (:class:`AddressBook`: name, aliases such as
"my colleague", e-mail). "the meeting notes" (any ``the ... notes``) is looked up in the
turn's ``notes`` context source and its text becomes the body. Every action goes through
the gateway as one persisted step (see :mod:`hub.brain.runtime`); the owner's own sentence
is what asked for it, so ``owner_requested`` is true — except for turns whose scope is not
``owner``, where it is false and the gateway's scope rules decide (a guest can neither send
nor read memory).
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from hub.brain.base import Brain, Outbox, ReplyChunk, Turn
from hub.brain.errors import BrainError
from hub.brain.ordering import ORDER_KINDS, PAYMENT_KINDS, PaymentDesk, parse_order
from hub.brain.runtime import BrainCore, waiting
from hub.brain.tasks import TaskRecord, TaskStore
from hub.gateway import Gateway, Receipt
from hub.memory.context import ContextSource, Snippet

log = logging.getLogger(__name__)

PREFIX = "[rule-based]"
HELP = (
    f"{PREFIX} I am the built-in rule-based assistant, not a language model. I understand: "
    "remember …; what do you remember about …; e-mail … to <contact> (or: send an e-mail to "
    "<contact> saying …); turn on/off <device>; what's on my timeline; order <items> from "
    "<shop>; order the same lunch as last time; pay it; undo."
)
SOURCE_TIMEOUT_S = 1.2


# ---------------------------------------------------------------- address book
@dataclass(frozen=True)
class Contact:
    name: str
    email: str
    aliases: tuple[str, ...] = ()


class Contacts(Protocol):
    def find(self, name: str) -> Contact | None: ...


def _norm(name: str) -> str:
    name = re.sub(r"[^\w\s@.-]", " ", name.lower())
    name = re.sub(r"^(?:to\s+)?(?:my|the|our)\s+", "", name.strip())
    return " ".join(name.split())


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


# ---------------------------------------------------------------- parsing
@dataclass(frozen=True)
class Intent:
    kind: str
    """``remember`` / ``recall`` / ``send`` / ``device`` / ``timeline`` / ``unknown``"""
    slots: dict[str, str] = field(default_factory=dict)


_WAKE = re.compile(r"^\s*(?:(?:hey|ok|okay)\s+)?yimi\b[\s,!.:]*", re.I)
_PLEASE = re.compile(r"^(?:please|could you|can you|would you)\s+", re.I)
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("remember", re.compile(r"^remember(?:\s+that)?\s+(?P<fact>.+)$", re.I)),
    (
        "recall",
        re.compile(
            r"^(?:what\s+do\s+you\s+(?:remember|know)\s+about|recall|do\s+you\s+remember)"
            r"\s+(?P<query>.+)$",
            re.I,
        ),
    ),
    (
        "timeline",
        re.compile(
            r"^what(?:'s|\s+is)\s+on\s+my\s+(?:timeline|agenda|day|schedule)(?:\s+today)?$", re.I
        ),
    ),
    (
        "device",
        re.compile(r"^(?:turn|switch)\s+(?P<state>on|off)\s+(?:the\s+)?(?P<device>.+)$", re.I),
    ),
    (
        "device",
        re.compile(r"^(?:turn|switch)\s+(?:the\s+)?(?P<device>.+?)\s+(?P<state>on|off)$", re.I),
    ),
    (
        "send",
        re.compile(
            r"^(?:send\s+)?(?:an?\s+)?(?:e-?mail|message)\s+to\s+(?P<to>.+?)"
            r"(?:\s+saying\s+|\s*:\s*|,\s*)(?P<body>.+)$",
            re.I,
        ),
    ),
    (
        "send",
        re.compile(
            r"^(?:e-?mail|message|tell)\s+(?P<to>[\w .'-]+?)(?:\s+saying\s+|\s*:\s*|,\s*)"
            r"(?P<body>.+)$",
            re.I,
        ),
    ),
    (
        "send",
        re.compile(r"^(?:send|e-?mail|forward)\s+(?P<what>.+?)\s+to\s+(?P<to>.+)$", re.I),
    ),
]


def parse(text: str) -> Intent:
    """The request in ``text``, or ``unknown``."""
    order = parse_order(text)
    if order is not None:
        return Intent(order.kind, order.slots)
    t = _WAKE.sub("", text.strip())
    t = _PLEASE.sub("", t).strip().rstrip(".!?。！？ ").strip()
    for kind, pattern in _PATTERNS:
        m = pattern.match(t)
        if m:
            return Intent(kind, {k: v.strip() for k, v in m.groupdict().items() if v})
    return Intent("unknown")


# ---------------------------------------------------------------- the brain
class RuleBrain(Brain):
    """The rule-based brain. ``turn()`` runs the request's steps through the gateway and
    answers when the task rests (done, failed or waiting for the owner's card)."""

    kind = "rule-based"

    def __init__(
        self,
        gateway: Gateway,
        store: TaskStore,
        *,
        contacts: Contacts | None = None,
        on_event: Any = None,
    ) -> None:
        self.core = BrainCore(gateway, store, on_event, prefix=PREFIX + " ")
        self.store = store
        self.contacts: Contacts = contacts or AddressBook()
        self.desk = PaymentDesk(gateway)

    async def turn(self, turn: Turn) -> AsyncIterator[ReplyChunk]:
        turn = turn.ids()
        intent = parse(turn.text)
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
            spec={
                "brain": self.kind,
                "intent": intent.kind,
                "slots": intent.slots,
                **({"heard": turn.text[:500]} if intent.kind == "unknown" else {}),
            },
        )
        if fresh and intent.kind in ORDER_KINDS:  # where the words came from, for payments
            task = self.store.update_spec(task.task_id, pay=self.desk.request_spec(turn))
        out = Outbox(task.task_id, task.trace_id, turn.device_id, self.kind)
        if not fresh and task.finished:
            text = str(task.result.get("report", "")) or f"{PREFIX} (already answered)"
        else:
            async with self.core.lock(task.task_id):
                text = await self._run(task, intent, turn.sources)
        for chunk in out.make(text):
            yield chunk

    async def _run(self, task: TaskRecord, intent: Intent, sources: Sequence[ContextSource]) -> str:
        task = self.store.walk(task.task_id, "admitted", "thinking")
        try:
            body = await self._act(task, intent, sources)
        except BrainError as exc:
            body = str(exc)
            self.store.move(task.task_id, "failed", body)
        text = f"{PREFIX} {body}"
        current = self.store.require(task.task_id)
        if current.state == "waiting_for_consent" or not current.finished:
            current = await self.core.settle(task.task_id, text=text)
            if current.finished:
                return str(current.result.get("report", text))
            return text
        # finished inside _act (help text, unknown recipient...): record and report
        current = self.store.move(task.task_id, current.state, result={"report": text})
        await self.core.emit(current, text)
        return text

    async def _act(self, task: TaskRecord, intent: Intent, sources: Sequence[ContextSource]) -> str:
        asked = task.scope == "owner"
        s = intent.slots
        if intent.kind == "remember":
            self.store.move(task.task_id, "acting")
            r = await self.core.step(
                task,
                "commit",
                "memory",
                "commit",
                {
                    "subject": "owner",
                    "predicate": "core_profile.entry",
                    "value": s["fact"],
                    "sources": [f"utterance:{task.task_id}"],
                    "owner_requested": asked,
                },
            )
            return _said(r, f"I'll remember: {s['fact']}.", "remember that")
        if intent.kind == "recall":
            r = await self.core.step(
                task,
                "recall",
                "memory",
                "recall",
                {"query": s["query"], "owner_requested": asked},
                lookup=True,
            )
            if r.status != "succeeded":
                return _said(r, "", "look that up")
            texts = [str(e.fields["text"]) for e in r.effects if e.fields.get("text")]
            hidden = len(r.effects) - len(texts)
            if not texts and not hidden:
                return f"I have nothing about {s['query']}."
            lines = "; ".join(texts[:5])
            extra = f" ({hidden} more not shown)" if hidden else ""
            return (
                f"About {s['query']} I remember: {lines}.{extra}"
                if texts
                else (f"I have {hidden} memories about {s['query']} I cannot show here.")
            )
        if intent.kind == "timeline":
            snippets = await _fetch(sources, "timeline", "today")
            if not snippets:
                return "Your timeline has nothing for today."
            return "On your timeline: " + "; ".join(x.text for x in snippets[:8]) + "."
        if intent.kind == "device":
            return await self._device(task, s["device"], s["state"].lower(), asked)
        if intent.kind == "send":
            return await self._send(task, s, sources, asked)
        if intent.kind in PAYMENT_KINDS:
            return await self.desk.order(self.core, task, intent.kind, s)
        if intent.kind == "pay_it":
            return await self.desk.pay_it(task, self.store)
        if intent.kind == "undo":
            return await self.desk.undo(task, self.store)
        # not a request it knows: say what was heard (the owner sees what reached it)
        heard = " ".join(str(task.spec.get("heard", "")).split())
        text = (f"I heard: {heard}. " if heard else "") + HELP[len(PREFIX) + 1 :]
        self.store.walk(task.task_id, "verifying")
        self.store.move(task.task_id, "done", result={"report": f"{PREFIX} {text}"})
        return text

    async def _device(self, task: TaskRecord, name: str, state: str, asked: bool) -> str:
        listing = await self.core.step(task, "devices", "home", "list_devices", {}, lookup=True)
        if listing.status != "succeeded":
            return _said(listing, "", "see your devices")
        entity = _match_device(name, listing)
        if entity is None:
            known = ", ".join(sorted(str(e.fields.get("name", e.target)) for e in listing.effects))
            self.store.move(task.task_id, "failed", f"no device {name!r}")
            return f"I found no device called {name}. Devices: {known}."
        self.store.move(task.task_id, "acting")
        r = await self.core.step(
            task,
            "switch",
            "home",
            "set_state",
            {"entity": entity, "state": state, "owner_requested": asked},
        )
        return _said(r, f"Turning {state} {entity}.", f"turn {state} {entity}")

    async def _send(
        self, task: TaskRecord, s: dict[str, str], sources: Sequence[ContextSource], asked: bool
    ) -> str:
        contact = self.contacts.find(s["to"])
        started = self.store.step(task.task_id, "send")
        if started is not None:  # resumed: the recorded arguments are the ones to send
            r = await self.core.step(task, "send", "messaging", "send_email", {})
            to = str(started.args.get("to", ""))
            return _said(r, f"Sent the e-mail to {to}.", f"e-mail {to}")
        if contact is None:
            self.store.move(task.task_id, "failed", "unknown recipient")
            return f"I don't know who {s['to']} is: add them to the address book first."
        if "body" in s:
            subject, body = "A message from Yimi", s["body"]
        else:
            what = s["what"]
            subject = what[:1].upper() + what[1:]
            found = await _fetch(sources, "notes", what) if re.search(r"\bnotes?\b", what) else []
            if re.search(r"\bnotes?\b", what) and not found:
                self.store.move(task.task_id, "failed", "no notes found")
                return f"I found no {what} to send."
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
        return _said(r, f"Sent the e-mail to {who}.", f"e-mail {who}")

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
                    await self._run(task, Intent(task.spec.get("intent", "unknown"), slots), ())
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
def _title(intent: Intent) -> str:
    s = intent.slots
    return {
        "remember": f"remember: {s.get('fact', '')}",
        "recall": f"recall: {s.get('query', '')}",
        "send": f"e-mail {s.get('to', '')}",
        "device": f"turn {s.get('state', '')} {s.get('device', '')}",
        "timeline": "timeline",
        "order": f"order from {s.get('shop', '')}: {s.get('items', '')}",
        "order_same": f"order the same {s.get('meal', 'order')} as last time",
        "pay_it": "pay it",
        "undo": "undo a payment",
    }.get(intent.kind, "help")[:200]


def _said(r: Receipt, success: str, what: str) -> str:
    """The sentence for a receipt (facts are added by the gateway's checker)."""
    if r.status == "succeeded":
        return success
    if r.status == "waiting":
        return f"To {what}, I need your approval: there is a card on your phone."
    if r.status == "rejected":
        return f"I may not {what} here: {r.error or 'refused'}."
    if r.status == "partial":
        return f"I tried to {what}, but only part of it is confirmed."
    if r.status == "unknown":
        return f"I tried to {what}; whether it worked is not confirmed."
    return f"I could not {what}: {r.error or r.status}."


def _match_device(name: str, listing: Receipt) -> str | None:
    """The entity id whose name or id best matches ``name`` (all words present)."""
    words = [
        w for w in re.findall(r"\w+", name.lower()) if w not in ("the", "my", "light", "lights")
    ]
    light = bool(re.search(r"\blights?\b", name.lower()))
    best: tuple[int, str] | None = None
    for e in listing.effects:
        entity = e.target or str(e.fields.get("entity", ""))
        hay = f"{entity} {e.fields.get('name', '')}".lower().replace("_", " ").replace(".", " ")
        if not all(w in hay for w in words):
            continue
        score = len(words) + (2 if light and entity.startswith("light.") else 0)
        if best is None or score > best[0]:
            best = (score, entity)
    return best[1] if best else None


async def _fetch(sources: Iterable[ContextSource], name: str, query: str) -> list[Snippet]:
    import asyncio

    for src in sources:
        if src.name == name:
            try:
                async with asyncio.timeout(SOURCE_TIMEOUT_S):
                    return [x for x in await src.fetch(query) if x.text.strip()]
            except Exception as exc:
                log.warning("context source %s failed: %s", name, exc)
                return []
    return []
