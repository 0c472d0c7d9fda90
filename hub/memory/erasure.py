"""Forgetting whole: "forget what I said about the dentist" — plan, approval, execution,
report, and re-application after a restore.

:meth:`Erasure.plan` finds everything that holds it: the timeline entries whose words
mention it (keyword search of the recall index, narrowed by a time phrase — "what I said
yesterday about …"), the replies to them, the L3 assertions and derived items that mention
it or came from those entries (along dependencies, :mod:`hub.memory.forget`), their
recall-index entries, the archived audio and typed originals of those utterances
(``meta.utterance_id``) and the cold-pack chunks that hold them. Nothing is written: the
plan is shown to the owner (:meth:`ErasePlan.lines`), and only an approval executes it.

:meth:`Erasure.execute` carries it out and reports each item as deleted or not, and why
(a cold pack on an offline target: its chunk is marked deleted, the hot copy is gone, and
the repack is retried by the archive's upkeep — the report says so, never "deleted").
Timeline entries are erased from ``hub.db`` (ids and ``seq`` kept, text overwritten) and
from the hub's replicas (deleted from the CRDT list, their ids tombstoned, history purged:
no payload stays); the returned updates carry the tombstones to every device, whose
replicas purge their history too (``sync.replicas.ReplicaSet.apply``).

Every executed plan is appended, ids only, to ``HOME/forget.log`` (fsynced before anything
is deleted). :meth:`Erasure.reapply` replays the log — after any store was restored from a
backup (``hub.db``, the replicas, the archive index, the recall index, ``memory.db``) the
same things are deleted again; the hub runs it at every start.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hub.memory import forget as forgetting
from hub.memory.models import ASSERTION_ITEM, assertion_item, derived_item
from hub.memory.period import past_period
from hub.memory.timeline_recall import TIMELINE_ITEM, timeline_item
from protos.clock import now_ms
from storage.private import open_private
from storage.sqlite import transaction

if TYPE_CHECKING:
    from hub.archive.archive import Archive
    from hub.memory.assertions import AssertionStore
    from hub.memory.index import MemoryIndex
    from hub.timeline import HubStore
    from protos import sync_pb2
    from sync.replicas import ReplicaSet

log = logging.getLogger(__name__)

LOG_NAME = "forget.log"
MAX_MATCHES = 100
DERIVED_ITEM = "derived:"

LAYERS = ("timeline", "reply", "assertion", "derived", "index", "archive", "cold_chunk")


@dataclass(frozen=True)
class PlanItem:
    """One thing a plan deletes: its layer, its id, what the owner sees of it."""

    layer: str
    id: str
    text: str = ""
    where: str = ""
    """a cold chunk's pack and target"""


@dataclass(frozen=True)
class ErasePlan:
    plan_id: str
    about: str
    created_ms: int
    timeline: tuple[str, ...] = ()
    """entries (utterances, replies, activity) to erase"""
    assertions: tuple[str, ...] = ()
    derived: tuple[str, ...] = ()
    archive: tuple[str, ...] = ()
    items: tuple[PlanItem, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.items

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ErasePlan:
        data = json.loads(text)
        for key in ("timeline", "assertions", "derived", "archive"):
            data[key] = tuple(data.get(key, ()))
        data["items"] = tuple(PlanItem(**i) for i in data.get("items", ()))
        return cls(**data)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for item in self.items:
            out[item.layer] = out.get(item.layer, 0) + 1
        return out

    def lines(self, lang: str = "en") -> list[str]:
        """What the owner is shown before approving (the card's text)."""
        from hub.brain.replies import say

        out = [say("erase.plan", lang, about=self.about)]
        for item in self.items:
            label = say(f"erase.layer.{item.layer}", lang)
            detail = f" — {item.text[:120]}" if item.text else ""
            where = f" ({item.where})" if item.where else ""
            out.append(f"- {label} {item.id}{where}{detail}")
        return out


@dataclass
class EraseReport:
    plan_id: str
    deleted: list[PlanItem] = field(default_factory=list)
    not_deleted: list[tuple[PlanItem, str]] = field(default_factory=list)
    updates: list[sync_pb2.DocUpdate] = field(default_factory=list)
    """replica updates (tombstones) to send to the devices"""

    def lines(self, lang: str = "en") -> list[str]:
        from hub.brain.replies import say

        out = [say("erase.done", lang, n=len(self.deleted))]
        for item in self.deleted:
            out.append(f"- {say(f'erase.layer.{item.layer}', lang)} {item.id}")
        if self.not_deleted:
            out.append(say("erase.not_done", lang, n=len(self.not_deleted)))
            for item, why in self.not_deleted:
                out.append(f"- {say(f'erase.layer.{item.layer}', lang)} {item.id}: {why}")
        return out


def log_path(home: Path) -> Path:
    return home / LOG_NAME


class Erasure:
    """Plans and executes whole forgetting over the stores of one home (all given open;
    ``archive`` and ``replicas`` may be missing). Blocking: async callers use a thread."""

    def __init__(
        self,
        home: Path,
        *,
        memory: AssertionStore,
        index: MemoryIndex,
        timeline: HubStore,
        replicas: ReplicaSet | None,
        archive: Archive | None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.home = home
        self.memory = memory
        self.index = index
        self.timeline = timeline
        self.replicas = replicas
        self.archive = archive
        self.clock = clock

    # ------------------------------------------------------------------ plan
    def plan(self, about: str, *, now: dt.datetime | None = None) -> ErasePlan:
        """Everything that holds ``about``; writes nothing."""
        about = " ".join(about.split())
        period = past_period(about, (now or dt.datetime.now()).astimezone())
        words = (period.rest if period is not None else about) or about
        window = (period.start_ms, period.end_ms) if period is not None else None
        hits = self.index.search_fts(words, MAX_MATCHES, include_stale=True, created=window)
        entry_ids = [
            h.item_id[len(TIMELINE_ITEM) :] for h in hits if h.item_id.startswith(TIMELINE_ITEM)
        ]
        texts = {h.item_id: h.text for h in hits}
        replies = set(self.timeline.replies_of(entry_ids).values())
        entry_ids += [r for r in replies if r not in entry_ids]
        assertion_ids = [
            h.item_id[len(ASSERTION_ITEM) :]
            for h in hits
            if h.item_id.startswith(ASSERTION_ITEM)
            and window is None  # an assertion is not "said on Tuesday": only what came from it
        ]
        derived_ids = [
            h.item_id[len(DERIVED_ITEM) :]
            for h in hits
            if h.item_id.startswith(DERIVED_ITEM) and window is None
        ]
        return self._plan(
            about, entry_ids, texts, replies, assertion_ids=assertion_ids, derived_ids=derived_ids
        )

    def plan_replies(self, words: str) -> ErasePlan:
        """The hub's own replies that name ``words`` (``yimi people forget``: what it said
        it recognised on the photos, or was told a face is), and what came from them;
        writes nothing. Not the owner's own words, nor memories about the person: those
        are :meth:`plan`'s (``yimi memory forget --about``)."""
        words = " ".join(words.split())
        found = self.timeline.replies_naming(words, MAX_MATCHES)
        return self._plan(words, list(found), found, set(found))

    def _plan(
        self,
        about: str,
        entry_ids: list[str],
        texts: Mapping[str, str],
        replies: Collection[str],
        *,
        assertion_ids: Sequence[str] = (),
        derived_ids: Sequence[str] = (),
    ) -> ErasePlan:
        """The plan over these timeline entries (``replies``: those that are the hub's
        replies; ``texts``: what the owner is shown, by entry or index item id) and these
        assertions and derived items, with all that came from them."""
        sources = [(kind, eid) for eid in entry_ids for kind in ("timeline", "utterance")]
        with transaction(self.memory.conn):
            mem = forgetting.plan(
                self.memory.conn,
                forgetting.Roots(
                    assertions=[a for a in assertion_ids if self._live_assertion(a)],
                    sources=sources,
                    derived=list(derived_ids),
                ),
            )
        items: list[PlanItem] = []
        for eid in entry_ids:
            layer = "reply" if eid in replies else "timeline"
            text = texts.get(eid) or texts.get(timeline_item(eid), "")
            items.append(PlanItem(layer, eid, text))
        for aid in mem.assertions:
            found = self.memory.find(aid)
            items.append(PlanItem("assertion", aid, found.head.sentence if found else ""))
        for did in (*mem.derived_delete, *mem.derived_rederive):
            items.append(PlanItem("derived", did))
        index_items = [
            *(timeline_item(e) for e in entry_ids),
            *(assertion_item(a) for a in mem.assertions),
            *(derived_item(d) for d in (*mem.derived_delete, *mem.derived_rederive)),
        ]
        present = set(self.index.ids())
        items += [PlanItem("index", i) for i in index_items if i in present]
        archive_ids: list[str] = []
        if self.archive is not None:
            for obj in self.archive.objects_of_utterances(entry_ids):
                archive_ids.append(obj.id)
                items.append(PlanItem("archive", obj.id, f"{obj.kind}, {obj.size} bytes"))
                if obj.pack_id:
                    items.append(
                        PlanItem(
                            "cold_chunk",
                            obj.id,
                            where=f"{obj.pack_id} on {self.archive.target.describe()}",
                        )
                    )
        created = self.clock()
        digest = hashlib.sha256(f"{about}|{created}|{entry_ids}|{mem.assertions}".encode())
        return ErasePlan(
            plan_id="fp-" + digest.hexdigest()[:16],
            about=about,
            created_ms=created,
            timeline=tuple(entry_ids),
            assertions=tuple(mem.assertions),
            derived=tuple(dict.fromkeys((*mem.derived_delete, *mem.derived_rederive))),
            archive=tuple(archive_ids),
            items=tuple(items),
        )

    def _live_assertion(self, aid: str) -> bool:
        found = self.memory.find(aid)
        return found is not None and found.status != "forgotten"

    # ------------------------------------------------------------------ execute
    def execute(self, plan: ErasePlan) -> EraseReport:
        """Carry out an approved plan; the report says what was deleted and what was not."""
        at = self.clock()
        self._log({"op": "forget_whole", "plan": plan.plan_id, "at": at, **_ids(plan)})
        report = EraseReport(plan.plan_id)
        self._apply(plan, at, report)
        log.info(
            "forget plan %s executed: %d deleted, %d not",
            plan.plan_id,
            len(report.deleted),
            len(report.not_deleted),
        )
        return report

    def _apply(self, plan: ErasePlan, at: int, report: EraseReport) -> None:
        by_key = {(i.layer, i.id): i for i in plan.items}

        def item(layer: str, ident: str) -> PlanItem:
            return by_key.get((layer, ident), PlanItem(layer, ident))

        # memory: assertions, derived items and their index entries
        roots = forgetting.Roots(
            assertions=[a for a in plan.assertions if self._live_assertion(a)],
            sources=[(k, e) for e in plan.timeline for k in ("timeline", "utterance")],
            derived=list(plan.derived),
        )
        mem = self.memory.erase(roots)
        for aid in mem.assertions:
            report.deleted.append(item("assertion", aid))
        for did in (*mem.derived, *mem.rederive):
            report.deleted.append(item("derived", did))
        # timeline: hub.db, the recall index, the replicas
        erased = set(self.timeline.forget_entries(list(plan.timeline), at))
        replies = {i.id for i in plan.items if i.layer == "reply"}
        for eid in plan.timeline:
            if eid in erased:
                report.deleted.append(item("reply" if eid in replies else "timeline", eid))
        removed = set(self.index.remove([timeline_item(e) for e in plan.timeline]))
        removed |= set(mem.index_entries)
        for i in plan.items:
            if i.layer == "index" and i.id in removed:
                report.deleted.append(i)
        if self.replicas is not None:
            report.updates = self.replicas.forget_entries(plan.timeline, at_ms=at)
        # the archive: hot copies now, cold chunks by repack (retried while the target is down)
        if self.archive is not None:
            self._archive(plan, report, item)

    def _archive(
        self, plan: ErasePlan, report: EraseReport, item: Callable[[str, str], PlanItem]
    ) -> None:
        assert self.archive is not None
        from hub.archive.errors import ArchiveError

        packs: dict[str, str] = {}
        for oid in plan.archive:
            try:
                result = self.archive.delete(oid)
            except ArchiveError as exc:
                report.not_deleted.append((item("archive", oid), str(exc)))
                continue
            if not result.already_deleted:
                report.deleted.append(item("archive", oid))
            if result.cold_pack:
                packs[oid] = result.cold_pack
        if not packs:
            return
        outcome = {r.old_pack: r for r in self.archive.repack()}
        for oid, pack in packs.items():
            r = outcome.get(pack)
            if r is not None and r.ok:
                report.deleted.append(item("cold_chunk", oid))
            else:
                why = r.problem if r is not None else "the pack was not rewritten"
                report.not_deleted.append(
                    (
                        item("cold_chunk", oid),
                        f"pack {pack} on {self.archive.target.describe()}: {why}; "
                        "marked deleted, retried at the next archive upkeep",
                    )
                )

    # ------------------------------------------------------------------ log
    def _log(self, entry: dict[str, Any]) -> None:
        path = log_path(self.home)
        with open_private(path, "ab") as fh:
            fh.write(json.dumps(entry, ensure_ascii=False, sort_keys=True).encode() + b"\n")
            fh.flush()
            os.fsync(fh.fileno())

    def reapply(self) -> EraseReport:
        """Delete again what every logged plan deleted (after a store was restored): only
        what is back is reported."""
        report = EraseReport("reapply")
        path = log_path(self.home)
        if not path.exists():
            return report
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                log.warning("forget log %s: an unreadable line skipped", path)
                continue
            plan = ErasePlan(
                plan_id=str(entry.get("plan", "")),
                about="",
                created_ms=int(entry.get("at", 0)),
                timeline=tuple(entry.get("timeline", ())),
                assertions=tuple(entry.get("assertions", ())),
                derived=tuple(entry.get("derived", ())),
                archive=tuple(
                    a
                    for a in entry.get("archive", ())
                    if self.archive is not None and self._archived_live(a)
                ),
                items=tuple(
                    PlanItem("index", i) for i in entry.get("index", ()) if isinstance(i, str)
                ),
            )
            self._apply(plan, int(entry.get("at", 0)) or self.clock(), report)
            if report.updates:
                log.info("forget plan %s re-applied to the replicas", plan.plan_id)
        return report

    def _archived_live(self, object_id: str) -> bool:
        assert self.archive is not None
        from hub.archive.errors import ArchiveError

        try:
            info = self.archive.info(object_id)
        except ArchiveError:
            return False
        return info.deleted_ms is None or info.pack_id is not None


def _ids(plan: ErasePlan) -> dict[str, list[str]]:
    return {
        "timeline": list(plan.timeline),
        "assertions": list(plan.assertions),
        "derived": list(plan.derived),
        "archive": list(plan.archive),
        "index": [i.id for i in plan.items if i.layer == "index"],
    }
