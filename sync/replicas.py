"""All the replicas of one node, in one folder: timeline periods, ``seq`` and notes."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Collection
from functools import partial
from pathlib import Path

from loro import ExportMode, LoroDoc, VersionVector

from protos import sync_pb2
from storage.group_commit import GroupCommit
from storage.private import private_dir
from sync import documents as docs
from sync.crdt import version
from sync.envelope import random_id
from sync.errors import SyncError
from sync.replica import Applied, Replica

log = logging.getLogger(__name__)

EMPTY_VERSION = version(LoroDoc())
"""the version of a document with nothing in it"""

_DOC_FILE = re.compile(r"^(?P<doc>[A-Za-z0-9][A-Za-z0-9._-]{0,63})\.g\d+\.(snap|log)$")


class ReplicaSet:
    def __init__(
        self,
        folder: Path,
        *,
        window_days: int | None = None,
        compact_at: int | None = None,
        group: GroupCommit | None = None,
    ) -> None:
        self.folder = folder
        self.group = group
        """appends are synced by this group's flush, not each on its own (the hub)"""
        self.compact_at = compact_at
        """bytes of update log after which a document is compacted (the hub sets this)"""
        self.window_days = window_days
        """keep only timeline periods that overlap the last ``window_days`` (small devices)"""
        private_dir(folder)
        self._replicas: dict[str, Replica] = {}
        self._at_start = set(self.doc_ids())
        """documents on disk when this set was made (any other is new to :meth:`refresh`)"""
        self._made_elsewhere: set[str] = set()
        """documents another process made after this set was: opened here (by an
        :meth:`apply`, say) before :meth:`refresh` reported what they held"""

    # ------------------------------------------------------------------ documents
    def doc_ids(self) -> list[str]:
        on_disk = {m.group("doc") for n in os.listdir(self.folder) if (m := _DOC_FILE.match(n))}
        return sorted(d for d in on_disk | set(self._replicas) if self.wanted(d))

    def wanted(self, doc_id: str) -> bool:
        if not docs.is_known_doc(doc_id):
            return False
        period = docs.period_of_doc(doc_id)
        if period is None or self.window_days is None:
            return True
        horizon = time.time() * 1000 - (self.window_days + 7) * 86_400_000
        return docs.period_start_ms(period) >= horizon

    def get(self, doc_id: str) -> Replica:
        replica = self._replicas.get(doc_id)
        if replica is None:
            replica = self._replicas[doc_id] = Replica(
                self.folder, doc_id, compact_at=self.compact_at, group=self.group
            )
            if doc_id not in self._at_start and version(replica.doc) != EMPTY_VERSION:
                self._made_elsewhere.add(doc_id)  # nothing of it was written here
        return replica

    def problems(self) -> list[str]:
        return [p for r in self._replicas.values() for p in r.problems]

    # ------------------------------------------------------------------ timeline
    def add_entry(self, entry: docs.Entry) -> sync_pb2.DocUpdate:
        doc_id = docs.timeline_doc(docs.period_of(entry.ts))
        blob = self.get(doc_id).change(partial(docs.push_entries, entries=[entry]))
        return sync_pb2.DocUpdate(doc=doc_id, blob=blob)

    def timeline(self) -> list[docs.Entry]:
        entries: list[docs.Entry] = []
        seqs: dict[str, int] = {}
        refused: set[str] = set()
        for doc_id in self.doc_ids():
            if doc_id.startswith(docs.TIMELINE):
                entries += docs.entries_of(self.get(doc_id).doc)
            elif doc_id.startswith(docs.SEQ):
                seqs.update(docs.seqs_of(self.get(doc_id).doc))
                refused |= docs.refused_of(self.get(doc_id).doc)
        unique = {e.id: e for e in reversed(entries)}  # first occurrence wins
        return docs.display_order(unique.values(), seqs, refused)

    # ------------------------------------------------------------------ notes
    def set_note(
        self, note_id: str, fields: dict[str, object], *, device: str
    ) -> sync_pb2.DocUpdate:
        blob = self.get(docs.NOTES).change(
            partial(docs.set_note_fields, note_id=note_id, fields=fields, device=device)
        )
        return sync_pb2.DocUpdate(doc=docs.NOTES, blob=blob)

    def add_note(self, text: str, kind: str, *, device: str) -> str:
        """Write a new note (not done, not deleted); return its id."""
        return self.new_note(text, kind, device=device)[0]

    def new_note(self, text: str, kind: str, *, device: str) -> tuple[str, sync_pb2.DocUpdate]:
        """:meth:`add_note`, with the update to send to the other replicas."""
        note_id = random_id("n-")[:14]
        update = self.set_note(
            note_id, {"text": text, "kind": kind, "done": False, "deleted": False}, device=device
        )
        return note_id, update

    def edit_note(self, note_id: str, field: str, value: str, *, device: str) -> sync_pb2.DocUpdate:
        """Set one field of a known note from its typed-in text (:data:`docs.NOTE_EDITS`);
        the update to send on. SyncError ``note.unknown`` / ``note.field``."""
        self._known_note(note_id)
        if field not in docs.NOTE_EDITS:
            raise SyncError("note.field", field=field, known=", ".join(docs.NOTE_EDITS))
        return self.set_note(note_id, {field: docs.NOTE_EDITS[field](value)}, device=device)

    def delete_note(self, note_id: str, *, device: str) -> None:
        """Mark a known note deleted (it stays, so the deletion replicates). SyncError
        ``note.unknown``."""
        self._known_note(note_id)
        self.set_note(note_id, {"deleted": True}, device=device)

    def _known_note(self, note_id: str) -> None:
        if note_id not in {n.id for n in self.notes(include_deleted=True)}:
            raise SyncError("note.unknown", id=note_id)

    def notes(self, *, include_deleted: bool = False) -> list[docs.Note]:
        return docs.notes_of(self.get(docs.NOTES).doc, include_deleted=include_deleted)

    # ------------------------------------------------------------------ replication
    def refresh(self) -> list[sync_pb2.DocUpdate]:
        """Changes other processes wrote to this folder since we last looked."""
        out = []
        for doc_id in self.doc_ids():
            replica = self.get(doc_id)
            blobs = replica.refresh()
            if doc_id in self._made_elsewhere:  # made by another process after we started
                self._made_elsewhere.discard(doc_id)  # (opened here since): all of it is new
                blobs = [bytes(replica.doc.export(ExportMode.Updates(VersionVector())))]
            for blob in blobs:
                out.append(sync_pb2.DocUpdate(doc=doc_id, blob=blob))
        return out

    def states(self) -> list[sync_pb2.DocState]:
        return [sync_pb2.DocState(doc=d, version=version(self.get(d).doc)) for d in self.doc_ids()]

    def apply(self, update: sync_pb2.DocUpdate) -> Applied:
        """Import a peer's update (the caller checked the sender may write this document).

        An update that forgets timeline entries (new ids in the document's ``forgotten``
        map) also purges this replica's history: the entries' text is then in no file here.
        """
        replica = self.get(update.doc)
        timeline = update.doc.startswith(docs.TIMELINE)
        before = docs.forgotten_of(replica.doc) if timeline else set()
        if update.snapshot:
            applied = replica.replace_with_snapshot(update.blob, docs.reapply)
        else:
            applied = replica.apply(update.blob)
        if timeline and applied.changed and docs.forgotten_of(replica.doc) - before:
            replica.purge_history()
        return applied

    def forget_entries(self, entry_ids: Collection[str], *, at_ms: int) -> list[sync_pb2.DocUpdate]:
        """Forget timeline entries on this replica: deleted from their documents, their ids
        tombstoned, the documents' history purged. Returns the updates to send (ids and
        deletions only, no payload). Entries not here are tombstoned nowhere: a document
        that never held them cannot resurrect them."""
        wanted = set(entry_ids)
        out = []
        for doc_id in self.doc_ids():
            if not doc_id.startswith(docs.TIMELINE):
                continue
            replica = self.get(doc_id)
            held = {
                v.get("id")
                for v in replica.doc.get_list("entries").get_value()  # type: ignore[union-attr]
                if isinstance(v, dict)
            }
            here = (wanted & held) - docs.forgotten_of(replica.doc)
            if not here:
                continue
            blob = replica.change(partial(docs.forget_entries, entry_ids=here, at_ms=at_ms))
            replica.purge_history()
            out.append(sync_pb2.DocUpdate(doc=doc_id, blob=blob))
        return out

    def holds_text(self, needle: str) -> list[str]:
        """The files of this replica folder whose bytes contain ``needle`` (UTF-8): a check
        that forgotten text is gone from disk."""
        raw = needle.encode()
        return sorted(
            p.name for p in self.folder.iterdir() if p.is_file() and raw in p.read_bytes()
        )
