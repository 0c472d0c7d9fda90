"""Notes from the phone's page: the hub's notes replica (:class:`sync.replicas.ReplicaSet`),
written as the page's device, and published to every device like any note change."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from protos import sync_pb2
from sync import documents as docs
from sync.replicas import ReplicaSet

NOTE_KINDS = ("note", "todo")
"""the kinds the page writes"""


@dataclass(frozen=True)
class NotesLink:
    notes: Callable[[], list[docs.Note]]
    add: Callable[[str, str, str], Awaitable[str]]
    """(text, kind, device id) → the new note's id"""
    edit: Callable[[str, str, str, str], Awaitable[None]]
    """(note id, field, typed-in value, device id); ``SyncError`` for an unknown note or
    field"""


def notes_link(
    replicas: ReplicaSet, publish: Callable[[list[sync_pb2.DocUpdate]], Awaitable[None]]
) -> NotesLink:
    async def add(text: str, kind: str, device: str) -> str:
        note_id, update = replicas.new_note(text, kind, device=device)
        await publish([update])
        return note_id

    async def edit(note_id: str, field: str, value: str, device: str) -> None:
        await publish([replicas.edit_note(note_id, field, value, device=device)])

    return NotesLink(replicas.notes, add, edit)
