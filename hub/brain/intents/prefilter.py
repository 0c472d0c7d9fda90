"""The templates a request can match, found through an index of their required words.

hassil skips a template whose required literal text (``Sentence.get_required_clauses``: a
set of clauses, each a set of fragments, at least one fragment of every clause in the
text) is missing from the request, but it finds that out by checking every template, and
builds the match settings of every template block, on every call: about 850 English
templates, most of the time of a request it does not understand.

:class:`TemplateIndex` does the same filtering once per request instead: each template is
filed under one of its clauses (the one with the longest fragments, the rarest), the
request's text (normalised and folded exactly as hassil does, with and without skip words)
is searched for each filed fragment, and hassil then runs over only the templates whose
filed clause was found — plus those with no required text. A template left out is one
hassil's own filter would have skipped, so the results are the same, in the same order
(a test checks that on the labelled sets). Subsets are cached: requests that find the same
fragments share one.

A caller that knows which slot lists have no value in the request (the engine: none of the
home's device or area names occurs in it) names them as ``absent``, and the templates that
need a value of one of them (:func:`required_lists`: "[the] {name}", "{area} to
{brightness}") are left out as well — hassil could only fail on them, list value by list
value; they are most of the work of a request no template matches.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hassil import Intents
from hassil.expression import (
    Alternative,
    Expression,
    Group,
    ListReference,
    RuleReference,
    Sentence,
)
from hassil.intents import Intent, IntentData
from hassil.util import CJK_WHITESPACE, fold_case, normalize_for_matching, remove_skip_words_tracked

SUBSETS_CACHED = 256
"""template subsets kept (one per set of fragments found)"""
MAX_DEPTH = 32
"""nesting followed by :func:`required_lists` (rules within rules); deeper counts as none"""


def required_lists(exp: Expression, rules: Mapping[str, Any], depth: int = 0) -> set[str]:
    """The slot lists every match of ``exp`` takes a value from (conservative: a list under
    an optional, or in only some branches of an alternative, is not required)."""
    if depth > MAX_DEPTH:
        return set()
    if isinstance(exp, ListReference):
        return {exp.list_name}
    if isinstance(exp, Alternative):
        if exp.is_optional or not exp.items:
            return set()
        branches = [required_lists(item, rules, depth + 1) for item in exp.items]
        return set.intersection(*branches)
    if isinstance(exp, Group):
        return set().union(*(required_lists(item, rules, depth + 1) for item in exp.items))
    if isinstance(exp, RuleReference) and exp.rule_name in rules:
        return required_lists(rules[exp.rule_name].expression, rules, depth + 1)
    return set()


@dataclass(frozen=True)
class _Place:
    """Where one template is: its intent, its block, and the template itself."""

    intent: str
    block: int
    sentence: Sentence


def haystack(text: str, intents: Intents) -> str:
    """The text hassil looks for required fragments in (``recognize_all``'s pre-filter):
    ``text`` normalised and folded, with and without the skip words, and without the
    spaces between CJK characters where whitespace is ignored."""
    tracked = normalize_for_matching(text)
    with_skip = tracked.text
    without_skip = with_skip
    if intents.skip_words:
        stripped = tracked.copy()
        remove_skip_words_tracked(stripped, intents.skip_words, intents.settings.ignore_whitespace)
        without_skip = stripped.text
    hay = f"{fold_case(with_skip)}\n{fold_case(without_skip)}"
    if intents.settings.ignore_whitespace:
        hay += "\n" + CJK_WHITESPACE.sub("", hay)
    return hay


def _filed_clause(clauses: frozenset[frozenset[str]]) -> frozenset[str]:
    """The clause a template is filed under: longest shortest fragment, then fewest."""
    return max(clauses, key=lambda c: (min(len(f) for f in c), -len(c), sorted(c)))


@dataclass
class TemplateIndex:
    """The templates of ``intents`` filed by one required clause each (see the module doc)."""

    intents: Intents
    _places: list[_Place] = field(default_factory=list)
    _needs: list[frozenset[str]] = field(default_factory=list)
    """per template: the slot lists it needs a value of (:func:`required_lists`)"""
    _by_fragment: dict[str, list[int]] = field(default_factory=dict)
    _always: list[int] = field(default_factory=list)
    _subsets: OrderedDict[tuple[int, ...], Intents] = field(default_factory=OrderedDict)

    def __post_init__(self) -> None:
        by_fragment: defaultdict[str, list[int]] = defaultdict(list)
        for name, intent in self.intents.intents.items():
            for block, data in enumerate(intent.data):
                rules = {**self.intents.expansion_rules, **data.expansion_rules}  # hassil's
                for sentence in data.sentences:
                    i = len(self._places)
                    self._places.append(_Place(name, block, sentence))
                    # a list the block defines itself is its own, not the caller's
                    needs = required_lists(sentence.expression, rules) - set(data.slot_lists)
                    self._needs.append(frozenset(needs))
                    clauses = sentence.get_required_clauses(rules)
                    if not clauses:
                        self._always.append(i)
                        continue
                    for fragment in _filed_clause(clauses):
                        by_fragment[fragment].append(i)
        self._by_fragment = dict(by_fragment)

    @property
    def templates(self) -> int:
        return len(self._places)

    def candidates(self, text: str, absent: Collection[str] = ()) -> Intents:
        """The subset of the templates hassil could match ``text`` against, given that the
        slot lists ``absent`` have no value in it."""
        return self.candidates_in(haystack(text, self.intents), absent)

    def candidates_in(self, hay: str, absent: Collection[str] = ()) -> Intents:
        """:meth:`candidates` of a request whose :func:`haystack` is ``hay``."""
        found = set(self._always)
        for fragment, places in self._by_fragment.items():
            if fragment in hay:
                found.update(places)
        if absent:
            needs = self._needs
            found = {i for i in found if needs[i].isdisjoint(absent)}
        key = tuple(sorted(found))
        subset = self._subsets.get(key)
        if subset is None:
            subset = self._subsets[key] = self._subset(key)
            if len(self._subsets) > SUBSETS_CACHED:
                self._subsets.popitem(last=False)
        else:
            self._subsets.move_to_end(key)
        return subset

    def _subset(self, key: Sequence[int]) -> Intents:
        kept: dict[str, dict[int, list[Sentence]]] = {}
        for i in key:  # the templates' own order: intents, blocks, sentences
            place = self._places[i]
            kept.setdefault(place.intent, {}).setdefault(place.block, []).append(place.sentence)
        intents: dict[str, Intent] = {}
        for name, blocks in kept.items():
            intent = self.intents.intents[name]
            data = [_block(intent.data[b], sentences) for b, sentences in blocks.items()]
            intents[name] = dataclasses.replace(intent, data=data)
        return dataclasses.replace(self.intents, intents=intents)


def _block(data: IntentData, sentences: list[Sentence]) -> IntentData:
    """``data`` with only ``sentences`` (the same parsed templates, in the same order)."""
    if len(sentences) == len(data.sentences):
        return data
    sub = dataclasses.replace(data, sentence_texts=[str(s.text) for s in sentences])
    sub.__dict__["sentences"] = sentences  # ``sentences`` is a cached property of the texts
    return sub
