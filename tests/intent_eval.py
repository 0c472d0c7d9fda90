"""Scoring the intent engine on the labelled sentence set (shared by the test and the bench).

* intent accuracy: sentences (in-domain and out-of-domain) whose intent is right; an
  out-of-domain sentence is right only when the engine returns None;
* slot accuracy: asserted slots (in-domain sentences) holding the labelled value — a slot
  counts as wrong when the intent is wrong; free text compares after ``normalise_free_text``,
  numbers numerically, everything else exactly;
* ``ood_actions``: out-of-domain sentences that got any intent (must be none).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from hub.brain.intents import IntentEngine, Match, Named, SlotLists
from tests.intent_set import Labelled, load_lists, slot_agrees


def fixture_lists() -> SlotLists:
    """The labelled set's lists.yaml as the engine's SlotLists."""
    data = load_lists()

    def named(key: str) -> tuple[Named, ...]:
        return tuple(
            Named(
                value=str(e["value"]),
                names=tuple(str(n) for n in e.get("names", ())),
                domain=str(e.get("domain", "")),
                area=str(e.get("area", "")),
            )
            for e in data.get(key, ()) or ()
        )

    kwargs = {k: named(k) for k in ("contacts", "devices", "areas", "shops", "lists", "subjects")}
    if not kwargs["lists"]:
        del kwargs["lists"]
    return SlotLists(**kwargs)


def slot_ok(intent: str, name: str, want: object, got: object) -> bool:
    """One asserted slot: the labelled set's own comparison (a timer's name is free text)."""
    if got is None or isinstance(want, bool) or not isinstance(want, (str, int, float)):
        return False
    key = "item" if (name == "name" and "Timer" in intent) else name
    return slot_agrees(key, want, got)


@dataclass
class Miss:
    item: Labelled
    got: Match | None
    why: str


@dataclass
class Score:
    sentences: int = 0
    intents_right: int = 0
    slots: int = 0
    slots_right: int = 0
    ood: int = 0
    ood_actions: int = 0
    misses: list[Miss] = field(default_factory=list)

    @property
    def intent_accuracy(self) -> float:
        return self.intents_right / self.sentences if self.sentences else float("nan")

    @property
    def slot_accuracy(self) -> float:
        return self.slots_right / self.slots if self.slots else float("nan")


def evaluate(engine: IntentEngine, items: Iterable[Labelled]) -> Score:
    score = Score()
    for item in items:
        got = engine.recognize(item.text)
        score.sentences += 1
        if item.intent is None:
            score.ood += 1
            if got is None:
                score.intents_right += 1
            else:
                score.ood_actions += 1
                score.misses.append(Miss(item, got, "out of domain got an intent"))
            continue
        right = got is not None and got.intent == item.intent
        score.intents_right += right
        wrong_slots = []
        for name, want in item.slots.items():
            score.slots += 1
            value = got.slots.get(name) if (got is not None and right) else None
            if right and slot_ok(item.intent, name, want, value):
                score.slots_right += 1
            else:
                wrong_slots.append(name)
        if not right:
            score.misses.append(Miss(item, got, "intent"))
        elif wrong_slots:
            score.misses.append(Miss(item, got, "slots " + ",".join(wrong_slots)))
    return score


def describe(misses: Sequence[Miss]) -> str:
    lines = []
    for m in misses:
        got = "None" if m.got is None else f"{m.got.intent} {dict(m.got.slots)}"
        lines.append(
            f"  {'H' if m.item.held_out else ' '} [{m.why}] {m.item.text!r}:"
            f" want {m.item.intent} {dict(m.item.slots)}; got {got}"
        )
    return "\n".join(lines)
