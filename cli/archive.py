"""``yimi archive`` subcommands: the L5 archive of a home.

| command | what it does |
|---|---|
| ``yimi archive status --home DIR`` | hot and cold counts, packs by state, refusals, disk reserve |
| ``yimi archive pack --home DIR [--all]`` | pack due objects, repack deletions, expire |
| ``yimi archive verify --home DIR [PACK ...]`` | fetch and verify packs (exit 1 if any fails) |
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cli.common import EXIT_ERROR, EXIT_OK, Command
from hub.archive.admission import human_bytes


def _open(args: argparse.Namespace, **overrides: Any) -> Any:
    from hub.archive.settings import open_archive
    from provisioning.errors import ProvisioningError

    if not (args.home / "home.yaml").exists():
        raise ProvisioningError("home.missing", path=args.home)
    return open_archive(args.home, target=args.target, **overrides)


def cmd_archive_status(args: argparse.Namespace) -> int:
    with _open(args) as archive:
        s = archive.status()
    print(f"hot:      {s.hot_objects} objects, {human_bytes(s.hot_bytes)}")
    print(f"unpacked: {s.unpacked_objects} objects, {human_bytes(s.unpacked_bytes)}")
    packs = ", ".join(f"{n} {state}" for state, n in sorted(s.packs.items())) or "none"
    print(f"packs:    {packs}; {human_bytes(s.cold_bytes)} verified cold on {s.target}")
    if s.deleted_awaiting_repack:
        print(f"deleted:  {s.deleted_awaiting_repack} chunks still in packs (run 'pack' to repack)")
    if s.damaged:
        print(f"damaged:  {s.damaged} hot copies fail their SHA-256")
    print(
        f"refused:  {s.refusals} writes not stored"
        + (f"; last {s.last_refusal}" if s.last_refusal else "")
    )
    a = s.admission
    inodes = "no limit" if a.space.free_inodes is None else f"{a.space.free_inodes:,}"
    verdict = "writes admitted" if a.ok else f"WRITES REFUSED: {a.reason}"
    print(f"disk:     {human_bytes(a.space.free_bytes)} free, inodes {inodes}: {verdict}")
    room = human_bytes(max(0, s.headroom_bytes))
    print(f"headroom: {room} above the reserve" if s.headroom_bytes >= 0 else "headroom: none")
    print(f"last pack:   {_when(s.last_pack_ms)}")
    print(f"next expiry: {_when(s.next_expiry_ms)}")
    return EXIT_OK


def _when(ms: int | None) -> str:
    if ms is None:
        return "none"
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def cmd_archive_pack(args: argparse.Namespace) -> int:
    from hub.archive.maintainer import run_round

    overrides: dict[str, Any] = {"pack_after_s": 0.0} if args.all else {}
    with _open(args, **overrides) as archive:
        report = run_round(archive, max_packs=None)
    failed = 0
    for p in report.packed:
        if p.ok:
            print(
                f"packed {p.pack_id}: {p.objects} objects, {human_bytes(p.decoded_bytes)} → "
                f"{human_bytes(p.pack_bytes)}, verified"
            )
        else:
            failed += 1
            print(f"pack {p.pack_id} FAILED: {'; '.join(p.problems)}")
    for r in report.repacked:
        if r.ok:
            print(f"repacked {r.old_pack} → {r.new_pack or '(nothing left)'}: purged {r.purged}")
        else:
            failed += 1
            print(f"repack of {r.old_pack} FAILED: {r.problem}")
    rel = report.released
    if rel.hot_deleted:
        print(
            f"released {rel.hot_deleted} hot copies ({human_bytes(rel.bytes_freed)}) "
            "after re-verifying their packs"
        )
    for pack_id in rel.packs_failed:
        failed += 1
        print(f"pack {pack_id} FAILED re-verification: its hot copies are kept")
    if not (report.packed or report.repacked or rel.hot_deleted or rel.packs_failed):
        print("nothing to pack")
    return EXIT_ERROR if failed else EXIT_OK


def cmd_archive_verify(args: argparse.Namespace) -> int:
    with _open(args) as archive:
        reports = (
            [archive.verify_pack(p) for p in args.packs] if args.packs else archive.verify_all()
        )
    for r in reports:
        print(r)
    if not reports:
        print("no verified packs to check")
    return EXIT_OK if all(r.ok for r in reports) else EXIT_ERROR


def add_commands(sub: Any, command: Command) -> None:
    """Register ``yimi archive …`` (``command`` is cli.main's helper)."""
    arc = sub.add_parser("archive", help="the L5 archive: raw audio, images and events")
    arc_sub = arc.add_subparsers(dest="action", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--home", type=Path, required=True)
        sp.add_argument(
            "--target", help="cold target (folder or WebDAV URL) instead of the configured one"
        )

    common(command(arc_sub, "status", cmd_archive_status, "hot, cold, refusals and disk reserve"))
    sp = command(
        arc_sub, "pack", cmd_archive_pack, "pack due objects, repack deletions, expire hot copies"
    )
    common(sp)
    sp.add_argument("--all", action="store_true", help="pack every hot object, whatever its age")
    sp = command(arc_sub, "verify", cmd_archive_verify, "fetch and verify cold packs")
    common(sp)
    sp.add_argument("packs", nargs="*", help="pack ids (default: every verified pack)")
