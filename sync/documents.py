"""What the replicated documents mean: the timeline (period documents), ``seq`` and notes.

* ``timeline.<YYYY>-W<ww>`` — one per ISO week (UTC) of the entry's time: a list
  ``entries`` of flat, immutable entries ``{id, device, ts, kind, text, …}`` (scalar values
  only; flat entries import ~1,000× faster than nested ones).
* ``seq.<YYYY>-W<ww>`` — a map ``seq: id → n`` written only by the hub. It is a document of
  its own so that authority is checked per document: the hub applies no device update to a
  ``seq.`` document, and devices take ``seq.`` updates only from the hub.
* ``notes`` — one root map per record, ``note:<id>`` with fields ``text``, ``kind``,
  ``done``, ``deleted``, ``updated_at`` (ms) and ``updated_by``. Concurrent edits of
  different fields merge; the same field resolves by loro's Lamport order, and ``updated_at``
  keeps the wall time of the latest edit.

Display order of the timeline is ``(seq, ts, device)``; entries without a ``seq`` yet are
*pending* and listed after the sequenced ones by ``(ts, device)``. Readers skip anything
malformed (a hostile or buggy peer cannot break a listing).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from loro import LoroDoc, VersionVector

from protos.clock import now_ms
from sync.crdt import PASS_THROUGH

TIMELINE = "timeline."
SEQ = "seq."
NOTES = "notes"
NOTE_PREFIX = "note:"
NOTE_FIELDS = ("text", "kind", "done", "deleted")
MAX_TEXT_CHARS = 16_000
ENTRY_SCALARS = (str, int, float, bool)


def period_of(ts_ms: int) -> str:
    """ISO week (UTC) of a time, e.g. ``2026-W48``."""
    year, week, _ = dt.datetime.fromtimestamp(ts_ms / 1000, tz=dt.UTC).isocalendar()
    return f"{year}-W{week:02d}"


def period_start_ms(period: str) -> int:
    year, week = period.split("-W")
    monday = dt.datetime.fromisocalendar(int(year), int(week), 1).replace(tzinfo=dt.UTC)
    return int(monday.timestamp() * 1000)


def timeline_doc(period: str) -> str:
    return TIMELINE + period


def seq_doc(period: str) -> str:
    return SEQ + period


@functools.lru_cache(maxsize=1024)
def period_of_doc(doc_id: str) -> str | None:
    """The period of a timeline or seq document's id (``None`` for any other id). Cached:
    every received update asks it several times (wanted, refusal) of the same few ids."""
    for prefix in (TIMELINE, SEQ):
        if doc_id.startswith(prefix):
            period = doc_id[len(prefix) :]
            try:
                period_start_ms(period)
            except ValueError:
                return None
            return period
    return None


def is_known_doc(doc_id: str) -> bool:
    return doc_id == NOTES or period_of_doc(doc_id) is not None


@dataclass(frozen=True)
class Entry:
    id: str
    device: str
    ts: int
    kind: str
    text: str
    seq: int | None = None

    def as_value(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "device": self.device,
            "ts": self.ts,
            "kind": self.kind,
            "text": self.text,
        }


def make_entry(
    *, entry_id: str, device: str, kind: str, text: str, ts_ms: int | None = None
) -> Entry:
    return Entry(
        id=entry_id,
        device=device,
        ts=now_ms() if ts_ms is None else ts_ms,
        kind=kind,
        text=text[:MAX_TEXT_CHARS],
    )


def parse_entry(value: object) -> Entry | None:
    if not isinstance(value, dict):
        return None
    try:
        eid, device, ts, kind, text = (value[k] for k in ("id", "device", "ts", "kind", "text"))
    except KeyError:
        return None
    if not (isinstance(eid, str) and isinstance(device, str) and isinstance(kind, str)):
        return None
    if not isinstance(text, str) or not isinstance(ts, int) or isinstance(ts, bool) or not eid:
        return None
    return Entry(eid[:128], device[:128], ts, kind[:32], text[:MAX_TEXT_CHARS])


def push_entries(doc: LoroDoc, entries: Iterable[Entry]) -> None:
    timeline = doc.get_list("entries")
    for entry in entries:
        timeline.push(entry.as_value())


FORGOTTEN = "forgotten"
"""a timeline document's map of the entries the owner had forgotten: ``id → time (ms)``, the
id only (no payload). The hub deletes the entries from the list and writes their ids here;
every replica then drops its history (:meth:`sync.replica.Replica.purge_history`), and no
reader, merge (:func:`reapply`) or device push brings an entry with such an id back."""


def forgotten_of(doc: LoroDoc) -> set[str]:
    raw = doc.get_map(FORGOTTEN).get_value()
    return {str(k) for k in raw} if isinstance(raw, dict) else set()


def forget_entries(doc: LoroDoc, entry_ids: Collection[str], *, at_ms: int) -> None:
    """Delete every occurrence of these entries from the list and tombstone their ids."""
    wanted = set(entry_ids)
    timeline = doc.get_list("entries")
    values = timeline.get_value()
    for i in reversed(range(len(values))):  # type: ignore[arg-type]
        value = values[i]  # type: ignore[index]
        if isinstance(value, dict) and value.get("id") in wanted:
            timeline.delete(i, 1)
    tombs = doc.get_map(FORGOTTEN)
    for entry_id in sorted(wanted):
        tombs.insert(entry_id, at_ms)


def entries_of(doc: LoroDoc) -> list[Entry]:
    """The entries of a timeline document, first occurrence of each id wins (forgotten ones
    never)."""
    seen: set[str] = forgotten_of(doc)
    out: list[Entry] = []
    for value in doc.get_list("entries").get_value():  # type: ignore[union-attr]
        entry = parse_entry(value)
        if entry is not None and entry.id not in seen:
            seen.add(entry.id)
            out.append(entry)
    return out


ENTRIES_CONTAINER = "cid:root-entries:List"
LORO_JSON_CONTAINER = "\U0001f99c:"
"""prefix loro's JSON export gives a container reference in place of a value"""


def entries_added(doc: LoroDoc, since: VersionVector) -> list[Entry] | None:
    """The entries the operations after version ``since`` pushed (first of each id).

    Costs in proportion to those operations, where :func:`entries_of` decodes the whole
    document (~20 µs an entry: half a second at 25,000). ``None`` when the operations cannot
    be read this way (loro refused, or an entry holds a container): scan the document then.
    """
    try:
        changes = json.loads(doc.export_json_updates(since, doc.oplog_vv)).get("changes", [])
    except PASS_THROUGH:
        raise
    except BaseException:
        return None
    seen: set[str] = set()
    out: list[Entry] = []
    for change in changes:
        for op in change.get("ops", []):
            content = op.get("content", {})
            if op.get("container") != ENTRIES_CONTAINER or content.get("type") != "insert":
                continue
            for value in content.get("value", []):
                if isinstance(value, dict) and any(
                    isinstance(v, str) and v.startswith(LORO_JSON_CONTAINER) for v in value.values()
                ):
                    return None
                entry = parse_entry(value)
                if entry is not None and entry.id not in seen:
                    seen.add(entry.id)
                    out.append(entry)
    return out


REFUSED = -1
"""the ``seq`` the hub writes for an entry it refused (a device wrote it in another
device's name): not part of the timeline; every replica leaves it out"""


def _mark(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def marked(doc: LoroDoc, entry_id: str) -> bool:
    """Whether the hub has dealt with an entry: given a ``seq``, or refused it."""
    n = _mark(getattr(doc.get_map("seq").get(entry_id), "value", None))
    return n is not None and (n > 0 or n == REFUSED)


def refused_of(doc: LoroDoc) -> set[str]:
    """The entries the hub refused (``seq`` = :data:`REFUSED`)."""
    raw = doc.get_map("seq").get_value()
    return {k for k, v in raw.items() if _mark(v) == REFUSED} if isinstance(raw, dict) else set()


def seq_of(doc: LoroDoc, entry_id: str) -> int | None:
    """One entry's ``seq`` (as :func:`seqs_of` would give it), without reading the whole map."""
    value = getattr(doc.get_map("seq").get(entry_id), "value", None)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def seqs_of(doc: LoroDoc) -> dict[str, int]:
    raw = doc.get_map("seq").get_value()
    if not isinstance(raw, dict):
        return {}
    return {
        k: v for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0
    }


def set_seqs(doc: LoroDoc, seqs: Iterable[tuple[str, int]]) -> None:
    m = doc.get_map("seq")
    for entry_id, n in seqs:
        m.insert(entry_id, n)


def display_order(
    entries: Iterable[Entry], seqs: dict[str, int], refused: Collection[str] = ()
) -> list[Entry]:
    """Entries by ``(seq, ts, device)``, unsequenced ones last, refused ones left out."""
    rows = [
        Entry(e.id, e.device, e.ts, e.kind, e.text, seqs.get(e.id))
        for e in entries
        if e.id not in refused
    ]
    return sorted(
        rows,
        key=lambda e: (e.seq is None, e.seq or 0, e.ts, e.device, e.id),
    )


# ---------------------------------------------------------------- notes
@dataclass(frozen=True)
class Note:
    id: str
    text: str
    kind: str
    done: bool
    deleted: bool
    updated_at: int
    updated_by: str


NOTE_EDITS: dict[str, Callable[[str], object]] = {
    "text": str,
    "kind": str,
    "done": lambda v: v.lower() in ("1", "true", "yes", "done"),
}
"""the note fields an owner edits, each with how its typed-in text becomes the value"""


def note_root(note_id: str) -> str:
    return NOTE_PREFIX + note_id


def set_note_fields(doc: LoroDoc, note_id: str, fields: dict[str, object], *, device: str) -> None:
    m = doc.get_map(note_root(note_id))
    for key, value in fields.items():
        m.insert(key, value)  # type: ignore[arg-type]  # callers pass scalars
    m.insert("updated_at", now_ms())
    m.insert("updated_by", device)


def notes_of(doc: LoroDoc, *, include_deleted: bool = False) -> list[Note]:
    out = []
    value = doc.get_deep_value()
    if not isinstance(value, dict):
        return []
    for root, fields in value.items():
        if (
            not isinstance(root, str)
            or not root.startswith(NOTE_PREFIX)
            or not isinstance(fields, dict)
        ):
            continue
        note = Note(
            id=root[len(NOTE_PREFIX) :],
            text=str(fields.get("text", ""))[:MAX_TEXT_CHARS],
            kind=str(fields.get("kind", "note"))[:32],
            done=fields.get("done") is True,
            deleted=fields.get("deleted") is True,
            updated_at=fields.get("updated_at") if isinstance(fields.get("updated_at"), int) else 0,  # type: ignore[arg-type]
            updated_by=str(fields.get("updated_by", "")),
        )
        if include_deleted or not note.deleted:
            out.append(note)
    return sorted(out, key=lambda n: (n.updated_at, n.id))


def reapply(old: LoroDoc, new: LoroDoc) -> None:
    """Re-express what ``old`` knows and ``new`` lacks as changes on ``new``.

    Used when a replica must take a peer's compacted snapshot and its own history cannot
    be merged: timeline entries are immutable (missing ids are pushed again), ``seq`` maps
    are per-key values (ours is written where the key is missing), and a note gets the
    fields we changed since the state both documents share, unless they changed the same
    field too and their ``updated_at`` is newer (with no shared state: the newer note).
    """
    present = {e.id for e in entries_of(new)} | forgotten_of(new)
    push_entries(new, [e for e in entries_of(old) if e.id not in present])
    gone = forgotten_of(old) - forgotten_of(new)
    if gone:  # a tombstone only we had: it holds in the merged document too
        tombs = new.get_map(FORGOTTEN)
        for entry_id in sorted(gone):
            tombs.insert(entry_id, 0)
    theirs = seqs_of(new).keys() | refused_of(new)
    ours = [*seqs_of(old).items(), *((k, REFUSED) for k in refused_of(old))]
    set_seqs(new, [(k, v) for k, v in ours if k not in theirs])
    newer = {n.id: n for n in notes_of(new, include_deleted=True)}
    base = _shared_state(old, new)
    before = {n.id: n for n in notes_of(base, include_deleted=True)} if base is not None else {}
    for note in notes_of(old, include_deleted=True):
        other, was = newer.get(note.id), before.get(note.id)
        ours_newer = other is None or note.updated_at > other.updated_at
        keys: tuple[str, ...]
        if other is None or was is None:
            keys = NOTE_FIELDS if ours_newer else ()
        else:
            keys = tuple(
                k
                for k in NOTE_FIELDS
                if getattr(note, k) != getattr(was, k)
                and (ours_newer or getattr(other, k) == getattr(was, k))
            )
        if not keys:
            continue
        m = new.get_map(note_root(note.id))
        for key in keys:
            m.insert(key, getattr(note, key))
        if ours_newer:
            m.insert("updated_at", note.updated_at)
            m.insert("updated_by", note.updated_by)


def _shared_state(old: LoroDoc, new: LoroDoc) -> LoroDoc | None:
    """``old`` as of the operations ``new`` has too (``None`` if loro cannot give it)."""
    try:
        return old.fork_at(old.vv_to_frontiers(old.oplog_vv.intersection(new.oplog_vv)))
    except PASS_THROUGH:
        raise
    except BaseException:
        return None
