"""``yimi timeline``, ``yimi memo`` and ``yimi note …``: the shared timeline and the owner's
notes, from the hub's side (``--home``) or a device's (``--bundle``); memos and notes work
offline (they replicate when the hub is reachable)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cli.common import EXIT_OK, Command, fmt_ms


def cmd_timeline(args: argparse.Namespace) -> int:
    rows: list[tuple[int | None, str, int, str, str]]
    if args.home is not None:
        from hub.timeline import HubStore
        from provisioning.home import Home

        home = Home.load(args.home)
        registry = home.registry()
        store = HubStore(args.home / "hub.db")
        try:
            names = {d.device_id: d.name for d in registry.devices()}
            rows = [
                (e.seq, names.get(e.device, e.device), e.ts_ms, e.kind, e.text)
                for e in store.entries(limit=args.limit)
            ]
        finally:
            store.close()
            registry.close()
    else:
        from edge_agent.timeline import device_timeline
        from provisioning.bundle import Bundle

        bundle = Bundle.load(args.bundle)
        names = {bundle.device_id: bundle.name}
        rows = [
            (e.seq, names.get(e.device, e.device), e.ts, e.kind, e.text)
            for e in device_timeline(bundle)
        ][-args.limit :]
    print(f"{'SEQ':>6}  {'DEVICE':<16} {'TIME':<19}  {'KIND':<9} TEXT")
    for seq, device, ts, kind, text in rows:
        shown = "pending" if seq is None else str(seq)
        print(f"{shown:>6}  {device:<16} {fmt_ms(ts):<19}  {kind:<9} {text}")
    return EXIT_OK


def _replicas_of(args: argparse.Namespace, *, writes: str | None = None) -> tuple[Any, str]:
    """The replica set of ``--bundle`` (a device) or ``--home`` (the hub), and who writes.

    ``writes`` names the document kind about to be written (``timeline``, ``notes``): a
    bundle whose certificate lacks its scope (``sync.scopes.doc_scope``) raises SyncError
    ``scope.missing`` — the hub would refuse the change."""
    from sync.replicas import ReplicaSet

    if args.home is not None:
        from provisioning.home import Home

        home = Home.load(args.home)
        return ReplicaSet(home.path / "replicas"), "hub"
    from provisioning.bundle import Bundle

    bundle = Bundle.load(args.bundle)
    if writes is not None:
        from sync import documents as docs
        from sync.errors import SyncError
        from sync.scopes import doc_scope

        scope = doc_scope(docs.NOTES if writes == "notes" else docs.TIMELINE)
        if scope not in bundle.certificate.scopes:
            raise SyncError(
                "scope.missing", profile=bundle.profile.name, scope=scope, what=writes + " edits"
            )
    window = bundle.profile.window_days
    return ReplicaSet(bundle.state_dir / "replicas", window_days=window), bundle.device_id


def cmd_memo(args: argparse.Namespace) -> int:
    from sync import documents as docs
    from sync.envelope import random_id
    from sync.scopes import HUB_ENTRY_KINDS

    replicas, writer = _replicas_of(args, writes="timeline")
    if writer != "hub" and args.kind in HUB_ENTRY_KINDS:
        from sync.errors import SyncError

        raise SyncError("memo.hub_kind", kind=args.kind)
    entry = docs.make_entry(
        entry_id=random_id("m-"), device=writer, kind=args.kind, text=" ".join(args.text)
    )
    replicas.add_entry(entry)
    print(f"{entry.id} written to the timeline (pending until the hub gives it a seq)")
    return EXIT_OK


def cmd_note(args: argparse.Namespace) -> int:
    replicas, writer = _replicas_of(args, writes=None if args.action == "list" else "notes")
    if args.action == "add":
        print(replicas.add_note(" ".join(args.text), args.kind, device=writer))
        return EXIT_OK
    if args.action == "list":
        notes = replicas.notes(include_deleted=args.all)
        for n in notes:
            mark = "x" if n.done else " "
            gone = " (deleted)" if n.deleted else ""
            print(f"[{mark}] {n.id:<14} {n.kind:<6} {n.text}{gone}  — {fmt_ms(n.updated_at)}")
        if not notes:
            print("(no notes)")
        return EXIT_OK
    if args.action == "rm":
        replicas.delete_note(args.id, device=writer)
    else:
        replicas.edit_note(args.id, args.field, args.value, device=writer)
    print(f"note {args.id} updated")
    return EXIT_OK


def _where(sp: argparse.ArgumentParser) -> None:
    group = sp.add_mutually_exclusive_group(required=True)
    group.add_argument("--home", type=Path, help="the hub's replicas")
    group.add_argument("--bundle", type=Path, help="this device's replicas")


def add_commands(sub: Any, command: Command) -> None:
    """Register ``yimi memo``, ``yimi note …`` and ``yimi timeline``."""
    sp = command(sub, "memo", cmd_memo, "write an entry into the shared timeline (works offline)")
    _where(sp)
    sp.add_argument("--kind", default="memo")
    sp.add_argument("text", nargs="+")

    note = sub.add_parser("note", help="the owner's notes, edited on any device (works offline)")
    note_sub = note.add_subparsers(dest="action", required=True)
    sp = command(note_sub, "add", cmd_note, "add a note; prints its id")
    _where(sp)
    sp.add_argument("--kind", default="note", help="note, todo, preference, …")
    sp.add_argument("text", nargs="+")
    sp = command(note_sub, "list", cmd_note, "list notes")
    _where(sp)
    sp.add_argument("--all", action="store_true", help="include deleted notes")
    sp = command(note_sub, "set", cmd_note, "set one field of a note: text, kind or done")
    _where(sp)
    sp.add_argument("id")
    sp.add_argument("field")
    sp.add_argument("value")
    sp = command(note_sub, "rm", cmd_note, "delete a note")
    _where(sp)
    sp.add_argument("id")

    sp = command(sub, "timeline", cmd_timeline, "list timeline entries (hub or device view)")
    where = sp.add_mutually_exclusive_group(required=True)
    where.add_argument("--home", type=Path)
    where.add_argument("--bundle", type=Path)
    sp.add_argument("--limit", type=int, default=1000)
