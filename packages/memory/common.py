"""Shared by the memory server and its fake: the four tools and their receipts.

Both servers serve the same tools over an :class:`~hub.memory.assertions.AssertionStore`;
they differ only in where the store lives and how ``recall`` searches (the real server: the
home's recall index, FTS5 + vectors; the fake: a word-overlap scan of its own store).

Content gate: assertion text reaches the model only if the model may see it. With
``YIMI_MODEL_LOCATION=cloud`` (the default, the safe assumption) only ``low`` items whose
every source is on ``YIMI_CLOUD_SOURCES`` (``kind:id,kind:id``) are shown; others are
counted as withheld, their ids and versions still given so a commit can name them.
``YIMI_MODEL_LOCATION=local`` shows everything.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hub.capabilities.package_sdk import receipt
from hub.memory.assertions import AssertionStore
from hub.memory.errors import Conflict, MemoryStoreError
from hub.memory.models import ASSERTION_ITEM, Assertion, ForgetReport
from hub.memory.sensitivity import Source, cloud_eligible, format_source, parse_source

MAX_K = 20
MAX_HIDE = 20
"""item ids one recall may be asked to leave out"""
ERROR_CODES = {
    "memory.forgotten": "FORGOTTEN",
    "memory.unknown": "NOT_FOUND",
    "memory.invalid": "INVALID",
    "memory.dependency": "BAD_DEPENDENCY",
    "memory.request_reused": "REQUEST_REUSED",
}


def failed(exc: MemoryStoreError) -> dict[str, Any]:
    return receipt("failed", error=(ERROR_CODES.get(exc.key, "FAILED"), str(exc)))


def memory_home() -> Path:
    """``YIMI_MEMORY_HOME``, else the home that holds this package's state directory
    (``HOME/package-state/memory``), else the state directory itself (contract runs)."""
    explicit = os.environ.get("YIMI_MEMORY_HOME")
    if explicit:
        return Path(explicit)
    state = Path(os.environ.get("YIMI_STATE_DIR", ".")).resolve()
    if state.parent.name == "package-state":
        return state.parent.parent
    return state


@dataclass(frozen=True)
class Gate:
    """What may be shown to the model that will read the receipt."""

    local: bool
    allowed: frozenset[Source]

    @classmethod
    def from_env(cls) -> Gate:
        location = os.environ.get("YIMI_MODEL_LOCATION", "cloud").strip().lower()
        allowed = {
            s
            for s in (
                parse_source(x.strip()) for x in os.environ.get("YIMI_CLOUD_SOURCES", "").split(",")
            )
            if s is not None
        }
        return cls(location == "local", frozenset(allowed))

    def shows(self, item: Any) -> bool:
        return self.local or cloud_eligible(item, self.allowed)


@dataclass(frozen=True)
class Found:
    """One recall hit: an index item (``assertion:<id>``, ``derived:<id>``, …)."""

    item_id: str
    text: str
    sensitivity: str
    sources: tuple[Source, ...]
    score: float
    by_words: bool = True
    """found by its words (the keyword list), not only by meaning (the vectors)"""


class Search(Protocol):
    """How a server searches: ``told_only`` leaves out what the owner did not tell (the
    hub's replies, the owner's questions); ``hide``: item ids never to return."""

    def __call__(
        self,
        store: AssertionStore,
        query: str,
        k: int,
        include_stale: bool,
        *,
        told_only: bool = False,
        hide: Sequence[str] = (),
    ) -> list[Found]: ...


OpenErasure = Callable[[AssertionStore], Any]
"""the store → a ``hub.memory.erasure.Erasure`` over the home (the real server only)"""


class Tools:
    """The tool bodies; one lock, so one call at a time touches the store's connection."""

    def __init__(
        self,
        open_store: Callable[[], AssertionStore],
        search: Search,
        *,
        erasure: OpenErasure | None = None,
        plans: Path | None = None,
    ) -> None:
        self._open_store = open_store
        self._store: AssertionStore | None = None
        self._search = search
        self._open_erasure = erasure
        self._erasure: Any = None
        self._plans = plans
        """where plans wait for the owner's approval (one JSON file each)"""
        self._lock = threading.Lock()
        self.gate = Gate.from_env()

    @property
    def store(self) -> AssertionStore:
        if self._store is None:
            self._store = self._open_store()
        return self._store

    # ------------------------------------------------------------------ observe
    def recall(
        self,
        query: str,
        k: int = 5,
        include_stale: bool = False,
        told_only: bool = False,
        hide: Sequence[str] = (),
    ) -> dict[str, Any]:
        if not isinstance(query, str) or not query.strip():
            return receipt("failed", error=("INVALID", "query: say what to recall"))
        k = max(1, min(MAX_K, int(k)))
        hidden = [str(h) for h in hide][:MAX_HIDE]
        with self._lock:
            hits = self._search(
                self.store, query, k, include_stale, told_only=bool(told_only), hide=hidden
            )
            effects, withheld = [], 0
            for hit in hits:
                fields: dict[str, Any] = {
                    "sensitivity": hit.sensitivity,
                    "score": hit.score,
                    "found_by": "words" if hit.by_words else "meaning",
                }
                if hit.item_id.startswith(ASSERTION_ITEM):
                    found = self.store.find(hit.item_id[len(ASSERTION_ITEM) :])
                    if found is None or found.status == "forgotten":
                        continue
                    fields |= {"id": found.id, "version": found.version, "status": found.status}
                if self.gate.shows(hit):
                    fields["text"] = hit.text
                else:
                    withheld += 1
                effects.append(
                    {
                        "kind": "memory.recalled",
                        "state": "verified",
                        "target": hit.item_id,
                        "fields": fields,
                    }
                )
        values = [{"name": "memories recalled", "value": len(effects) - withheld, "unit": "items"}]
        unknowns = []
        if withheld:
            values.append(
                {"name": "memories withheld from a cloud model", "value": withheld, "unit": "items"}
            )
            unknowns.append(
                f"{withheld} recalled memories are too sensitive for a cloud model: "
                "their text was not shown"
            )
        return receipt("succeeded", effects=effects, values=values, unknowns=unknowns)

    def show(self, id: str) -> dict[str, Any]:
        with self._lock:
            try:
                a = self.store.get(id)
            except MemoryStoreError as exc:
                return failed(exc)
            return receipt(
                "succeeded", effects=[self._assertion_effect(a)], unknowns=self._withheld(a)
            )

    def _assertion_effect(self, a: Assertion) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "id": a.id,
            "version": a.version,
            "status": a.status,
            "sensitivity": a.sensitivity,
            "depends_on": ", ".join(f"{d}@{v}" for d, v in a.head.depends_on),
        }
        if a.status != "forgotten" and self.gate.shows(a):
            fields |= {
                "subject": a.head.subject,
                "predicate": a.head.predicate,
                "value": a.head.value,
                "sources": ", ".join(format_source(s) for s in a.sources),
            }
        return {"kind": "memory.assertion", "state": "verified", "target": a.id, "fields": fields}

    def _withheld(self, a: Assertion) -> list[str]:
        if a.status != "forgotten" and not self.gate.shows(a):
            return [f"{a.id} is {a.sensitivity}: its content is not shown to a cloud model"]
        return []

    # ------------------------------------------------------------------ owner_data
    def commit(
        self,
        subject: str,
        predicate: str,
        value: Any,
        id: str = "",
        expected_version: int = 0,
        sources: Sequence[str] = (),
        depends_on: Sequence[str] = (),
        sensitivity: str = "medium",
        confidence: float = 1.0,
        importance: float = 0.5,
        idempotency_key: str = "",
    ) -> dict[str, Any]:
        deps = []
        for d in depends_on:
            ident, sep, version = str(d).rpartition("@")
            if not sep or not version.isdigit():
                return receipt("failed", error=("INVALID", f"depends_on: {d!r} is not ID@VERSION"))
            deps.append((ident, int(version)))
        with self._lock:
            try:
                r = self.store.commit(
                    id or None,
                    int(expected_version),
                    subject=subject,
                    predicate=predicate,
                    value=value,
                    confidence=confidence,
                    sources=list(sources),
                    sensitivity=sensitivity,
                    depends_on=deps,
                    importance=importance,
                    request_id=idempotency_key or None,
                )
            except Conflict as exc:
                return receipt(
                    "failed",
                    error=("CONFLICT", str(exc)),
                    values=[{"name": "current version", "value": exc.current, "unit": "version"}],
                )
            except MemoryStoreError as exc:
                return failed(exc)
        effects = [
            {
                "kind": "memory.committed",
                "state": "verified",
                "target": r.id,
                "fields": {
                    "id": r.id,
                    "version": r.version,
                    "status": r.status,
                    "sensitivity": r.sensitivity,
                },
            }
        ]
        effects += [
            {"kind": "memory.needs_reevaluation", "state": "verified", "target": m, "fields": {}}
            for m in r.marked
        ]
        return receipt(
            "succeeded",
            effects=effects,
            values=[{"name": "version", "value": r.version, "unit": "version"}],
        )

    # ------------------------------------------------------------------ delete
    def forget(self, id: str) -> dict[str, Any]:
        with self._lock:
            try:
                report = self.store.forget(id)
            except MemoryStoreError as exc:
                return failed(exc)
        return forget_receipt(report)

    # ------------------------------------------------------------------ forgetting whole
    def _whole(self) -> Any:
        if self._open_erasure is None or self._plans is None:
            return None
        if self._erasure is None:
            self._erasure = self._open_erasure(self.store)
        return self._erasure

    def plan_forget(self, about: str, lang: str = "en") -> dict[str, Any]:
        """Everything that holds ``about`` (nothing is deleted): the plan the owner approves."""
        if not isinstance(about, str) or not about.strip():
            return receipt("failed", error=("INVALID", "about: say what to forget"))
        with self._lock:
            erasure = self._whole()
            if erasure is None:  # the fake: no timeline, no archive — nothing planned
                return receipt(
                    "succeeded",
                    unknowns=["no plan: forgetting whole needs the hub's home (forget facts)"],
                )
            plan = erasure.plan(about)
            assert self._plans is not None
            self._plans.mkdir(parents=True, exist_ok=True)
            (self._plans / f"{plan.plan_id}.json").write_text(plan.to_json(), encoding="utf-8")
        lines = plan.lines(lang) if self.gate.local else [plan.lines(lang)[0]]
        if not self.gate.local:
            lines += [f"- {layer}: {n}" for layer, n in sorted(plan.counts().items())]
        effects = [
            {
                "kind": "memory.forget_plan",
                "state": "verified",
                "target": plan.plan_id,
                "fields": {"items": len(plan.items), "summary": "\n".join(lines)},
            }
        ]
        effects += [
            {
                "kind": "memory.forget_planned",
                "state": "verified",
                "target": f"{i.layer}:{i.id}",
                "fields": {"layer": i.layer, "id": i.id},
            }
            for i in plan.items
        ]
        return receipt(
            "succeeded",
            effects=effects,
            values=[{"name": "items to delete", "value": len(plan.items), "unit": "items"}],
        )

    def forget_plan(self, plan_id: str, summary: str = "") -> dict[str, Any]:
        """Carry out a plan the owner approved (the gateway's card showed ``summary``)."""
        from hub.memory.erasure import ErasePlan

        with self._lock:
            erasure = self._whole()
            if erasure is None:
                return receipt(
                    "failed", error=("UNAVAILABLE", "forgetting whole needs the hub's home")
                )
            assert self._plans is not None
            path = self._plans / f"{Path(plan_id).name}.json"
            if not path.exists():
                return receipt("failed", error=("NOT_FOUND", f"no forget plan {plan_id}"))
            report = erasure.execute(ErasePlan.from_json(path.read_text(encoding="utf-8")))
            path.unlink()
        effects = [
            {
                "kind": "memory.deleted",
                "state": "verified",
                "target": f"{i.layer}:{i.id}",
                "fields": {"layer": i.layer},
            }
            for i in report.deleted
        ]
        unknowns = [f"{i.layer} {i.id} not deleted yet: {why}" for i, why in report.not_deleted]
        values = [
            {"name": "items deleted", "value": len(report.deleted), "unit": "items"},
            {"name": "items not deleted yet", "value": len(report.not_deleted), "unit": "items"},
        ]
        status = "partial" if report.not_deleted else "succeeded"
        return receipt(status, effects=effects, values=values, unknowns=unknowns)


def forget_receipt(report: ForgetReport) -> dict[str, Any]:
    """Exactly what was deleted, one effect per thing; nothing claimed beyond it."""
    effects: list[dict[str, Any]] = []

    def add(kind: str, target: str, **fields: Any) -> None:
        effects.append({"kind": kind, "state": "verified", "target": target, "fields": fields})

    for aid, versions in sorted(report.assertions.items()):
        add("memory.forgotten", aid, versions=", ".join(f"v{v}" for v in versions))
    for aid, versions in sorted(report.versions.items()):
        add("memory.versions_erased", aid, versions=", ".join(f"v{v}" for v in versions))
    for d in report.derived:
        add("memory.derived_deleted", d)
    for d in report.rederive:
        add("memory.derived_erased", d)
    for entry in report.index_entries:
        add("memory.index_entry_removed", entry)
    deleted = len(report.assertions) + len(report.derived) + len(report.rederive)
    values = [{"name": "items deleted", "value": deleted, "unit": "items"}]
    if report.index_error:
        return receipt(
            "partial",
            effects=effects,
            values=values,
            unknowns=[f"recall index entries were not confirmed removed: {report.index_error}"],
        )
    return receipt("succeeded", effects=effects, values=values)


def overlap_search(
    store: AssertionStore,
    query: str,
    k: int,
    include_stale: bool,
    *,
    told_only: bool = False,
    hide: Sequence[str] = (),
) -> list[Found]:
    """A scan for the fake: assertions ranked by how many query words (or CJK characters)
    their sentence shares. ``include_stale`` and ``told_only`` have no meaning here (the
    fake holds only facts, all told)."""
    words = {w for w in query.lower().split() if len(w) > 1}
    chars = {c for c in query if ord(c) > 0x2E80}
    scored = []
    for a in store.current():
        if f"{ASSERTION_ITEM}{a.id}" in hide:
            continue
        text = a.head.sentence
        low = text.lower()
        score = sum(1 for w in words if w in low) + sum(1 for c in chars if c in text)
        if score:
            scored.append((-score, a.id, a, text))
    scored.sort(key=lambda t: (t[0], t[1]))
    return [
        Found(f"{ASSERTION_ITEM}{a.id}", text, a.sensitivity, a.sources, float(-s))
        for s, _, a, text in scored[:k]
    ]


def register(mcp: Any, tools: Tools) -> None:
    """Serve ``tools`` on ``mcp`` (an ``MCPServer``) under the manifest's tool names."""

    @mcp.tool()
    def recall(
        query: str,
        k: int = 5,
        include_stale: bool = False,
        told_only: bool = False,
        hide: list[str] | None = None,
    ) -> dict[str, Any]:
        """Recall memories about the query (keywords and meaning; Chinese works too).

        Returns the best k items with id, version, status and, if this model may see it,
        the text. Items unused for 30 days are left out unless include_stale is true.
        told_only: only what the owner told (facts, the owner's own words) — not your
        replies nor the owner's questions. hide: item ids not to return."""
        return tools.recall(query, k, include_stale, told_only, hide or [])

    @mcp.tool()
    def show(id: str) -> dict[str, Any]:
        """One assertion as it stands: version, status (current, needs_reevaluation,
        forgotten), sensitivity, dependencies and, if this model may see it, its content."""
        return tools.show(id)

    @mcp.tool()
    def commit(
        subject: str,
        predicate: str,
        value: str,
        id: str = "",
        expected_version: int = 0,
        sources: list[str] | None = None,
        depends_on: list[str] | None = None,
        sensitivity: str = "medium",
        confidence: float = 1.0,
        importance: float = 0.5,
        idempotency_key: str = "",
    ) -> dict[str, Any]:
        """Remember a fact: subject, predicate (lower-case, e.g. food.preference), value.

        To change a fact, pass its id and the version you read (expected_version); a
        CONFLICT means it changed meanwhile: show it again and decide. A new fact has no id
        and expected_version 0. sources: "kind:id" strings; depends_on: "id@version"."""
        return tools.commit(
            subject,
            predicate,
            value,
            id,
            expected_version,
            sources or [],
            depends_on or [],
            sensitivity,
            confidence,
            importance,
            idempotency_key,
        )

    @mcp.tool()
    def plan_forget(about: str, lang: str = "en") -> dict[str, Any]:
        """Plan forgetting everything the owner said about something ("the dentist", "what
        I said yesterday about the dentist"): timeline entries, replies, memories, summaries,
        search entries, archived audio and cold-pack chunks. Deletes nothing; returns the
        plan id and its summary for forget_plan."""
        return tools.plan_forget(about, lang)

    @mcp.tool()
    def forget_plan(plan_id: str, summary: str = "") -> dict[str, Any]:
        """Carry out a plan from plan_forget once the owner approved it (summary: the plan's
        summary, shown to the owner on the approval card). The receipt lists what was
        deleted and what could not be yet."""
        return tools.forget_plan(plan_id, summary)

    @mcp.tool()
    def forget(id: str) -> dict[str, Any]:
        """Forget a fact for real: every version, and everything derived from it. The
        receipt lists exactly what was deleted; nothing else was."""
        return tools.forget(id)
