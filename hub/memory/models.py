"""The memory's records: assertion versions, commit receipts, forget reports, derived items."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from hub.memory.sensitivity import Source

STATUSES = ("current", "needs_reevaluation", "superseded", "forgotten")
"""an assertion version's status; the head is ``current`` or ``needs_reevaluation``"""
PROFILE_PREDICATE = "core_profile.entry"
"""assertions with this predicate make up the L2 core profile"""
ASSERTION_ITEM = "assertion:"
DERIVED_ITEM = "derived:"
"""prefixes of recall-index item ids: ``assertion:<id>`` and ``derived:<id>``"""

Dependency = tuple[str, int]
"""(assertion id, version)"""


def assertion_item(assertion_id: str) -> str:
    return ASSERTION_ITEM + assertion_id


def derived_item(derived_id: str) -> str:
    return DERIVED_ITEM + derived_id


def render_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def render_sentence(subject: str, predicate: str, value: Any) -> str:
    """One sentence for the recall index: ``owner dislikes cilantro``."""
    if predicate == PROFILE_PREDICATE:
        return f"{subject}: {render_value(value)}"
    words = predicate.replace("_", " ").replace(".", " ")
    return f"{subject} {words} {render_value(value)}"


@dataclass(frozen=True)
class Version:
    """One version of an assertion; payload fields are None once erased."""

    id: str
    version: int
    status: str
    subject: str | None
    predicate: str | None
    value: Any
    confidence: float | None
    sources: tuple[Source, ...]
    sensitivity: str
    importance: float | None
    depends_on: tuple[Dependency, ...]
    created_ms: int
    erased: bool = False

    @property
    def sentence(self) -> str:
        if self.erased or self.subject is None or self.predicate is None:
            return ""
        return render_sentence(self.subject, self.predicate, self.value)


@dataclass(frozen=True)
class Assertion:
    """An assertion as it stands: its status and its head version."""

    id: str
    status: str
    head: Version

    @property
    def version(self) -> int:
        return self.head.version

    @property
    def sensitivity(self) -> str:
        return self.head.sensitivity

    @property
    def sources(self) -> tuple[Source, ...]:
        return self.head.sources


@dataclass(frozen=True)
class CommitReceipt:
    """What a commit did; a retry with the same request id gets this same receipt."""

    id: str
    version: int
    status: str
    sensitivity: str
    committed_ms: int
    request_id: str | None = None
    marked: tuple[str, ...] = ()
    """assertions this commit marked ``needs_reevaluation`` (transitively)"""
    erased_versions: tuple[int, ...] = ()
    """earlier versions whose payload this commit erased (``erase_previous``)"""
    forgotten: tuple[str, ...] = ()
    """assertions forgotten with them (they depended on an erased version)"""
    merged: bool = False
    """the fact was already current (same subject, predicate, value): this commit's sources
    joined it and no version was written"""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CommitReceipt:
        data = json.loads(text)
        for key in ("marked", "erased_versions", "forgotten"):
            data[key] = tuple(data.get(key, ()))
        return cls(**data)


@dataclass(frozen=True)
class DerivedItem:
    """A summary, snippet, embedding or context, with the sources it came from."""

    id: str
    kind: str
    status: str
    text: str | None
    sensitivity: str
    sources: tuple[Source, ...]
    created_ms: int


@dataclass
class ForgetReport:
    """Exactly what a forget deleted: nothing here that was not deleted by it."""

    assertions: dict[str, list[int]] = field(default_factory=dict)
    """forgotten assertion id → versions whose payload was erased (a tombstone stays)"""
    versions: dict[str, list[int]] = field(default_factory=dict)
    """living assertion id → earlier versions whose payload was erased (a correction)"""
    derived: list[str] = field(default_factory=list)
    """derived items deleted"""
    rederive: list[str] = field(default_factory=list)
    """derived items whose payload was erased and which wait to be derived again"""
    sources: list[Source] = field(default_factory=list)
    """registered outside sources removed from the registry"""
    index_entries: list[str] = field(default_factory=list)
    """recall-index entries the index reported removed"""
    index_error: str = ""
    """set if the index could not be reached: its entries were NOT confirmed removed"""

    @property
    def empty(self) -> bool:
        return not (
            self.assertions
            or self.versions
            or self.derived
            or self.rederive
            or self.sources
            or self.index_entries
        )

    def merge(self, other: ForgetReport) -> None:
        for mine_map, theirs_map in (
            (self.assertions, other.assertions),
            (self.versions, other.versions),
        ):
            for k, vs in theirs_map.items():
                mine_map[k] = sorted(set(mine_map.get(k, [])) | set(vs))
        for mine, theirs in (
            (self.derived, other.derived),
            (self.rederive, other.rederive),
            (self.index_entries, other.index_entries),
        ):
            mine.extend(x for x in theirs if x not in mine)
        self.sources.extend(s for s in other.sources if s not in self.sources)
        self.index_error = self.index_error or other.index_error

    def lines(self) -> list[str]:
        """Human-readable, one line per kind of thing deleted."""
        out = []
        for aid, versions in sorted(self.assertions.items()):
            vs = ", ".join(f"v{v}" for v in versions) or "no payload left"
            out.append(f"assertion {aid}: erased {vs}; tombstone kept")
        for aid, versions in sorted(self.versions.items()):
            vs = ", ".join(f"v{v}" for v in versions)
            out.append(f"assertion {aid}: earlier versions erased: {vs}")
        out += [f"derived {d}: deleted" for d in self.derived]
        out += [f"derived {d}: payload erased, to be derived again" for d in self.rederive]
        out += [f"source {k}:{i}: removed from the registry" for k, i in self.sources]
        out += [f"index entry {e}: removed" for e in self.index_entries]
        if self.index_error:
            out.append(f"index: NOT confirmed removed ({self.index_error})")
        return out


@dataclass(frozen=True)
class Change:
    """What a write touched, for listeners (the L2 profile)."""

    ids: frozenset[str]
    predicates: frozenset[str]
