"""``yimi people add|list|forget`` (the people the owner names, from photos) and ``yimi photos``
(the snapshots: the hub's with ``--home``, exportable; the references a device holds with
``--bundle``)."""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path
from typing import Any

from cli.common import EXIT_ERROR, EXIT_OK, Command, fmt_ms


def cmd_people_add(args: argparse.Namespace) -> int:
    from hub.vision.faces import FaceModel
    from hub.vision.people import check_name, enrol, one_face
    from hub.vision.store import VisionStore
    from provisioning.home import Home

    home = Home.load(args.home)
    name = check_name(args.name)
    model = FaceModel()
    samples = []
    for path in args.photo:
        if not path.is_file():
            from hub.vision.errors import VisionError

            raise VisionError("camera.missing", path=str(path))
        samples.append(one_face(path.name, model.faces(path.read_bytes())))
    store = VisionStore.for_home(home.path)
    try:
        existing = [] if args.replace else store.samples(name)
        done = enrol(name, samples, existing)
        count = store.add_samples(name, done.samples, replace=args.replace)
    finally:
        store.close()
    loo = ", ".join(f"{d:.2f}" for d in done.loo)
    print(f"{name}: {count} face samples (leave-one-out distances {loo}; line {done.line:.2f})")
    return EXIT_OK


def cmd_people_list(args: argparse.Namespace) -> int:
    from hub.vision.store import VisionStore
    from provisioning.home import Home

    store = VisionStore.for_home(Home.load(args.home).path)
    try:
        people = store.people()
    finally:
        store.close()
    for person in people.values():
        print(f"{person.name}\t{person.samples} samples\tline {person.line:.2f}")
    if not people:
        print("nobody named yet: yimi people add NAME --photo FILE… / 还没有命名任何人")
    return EXIT_OK


def cmd_people_forget(args: argparse.Namespace) -> int:
    """Show what forgetting a person deletes; only ``--yes`` carries it out (as ``yimi
    memory forget --about``: it erases timeline entries on every device)."""
    from cli.memory import _close_erasure, _erasure
    from hub.brain.replies import say
    from hub.memory.erasure import EraseReport
    from hub.memory.home import open_memory
    from hub.vision.recall import entries
    from hub.vision.store import VisionStore
    from provisioning.home import Home

    lang = args.lang
    home = Home.load(args.home).path
    name = " ".join(args.name.split())
    store = VisionStore.for_home(home)
    try:
        samples, photos = store.held(name)
        memory = open_memory(home, with_index=True)
        erasure = _erasure(args, memory)
        try:
            plan = erasure.plan_replies(name)
            replies = sum(1 for i in plan.items if i.layer == "reply")
            print(
                say(
                    "people.plan",
                    lang,
                    name=name,
                    samples=samples,
                    photos=len(photos),
                    replies=replies,
                )
            )
            for line in plan.lines(lang)[1:]:
                print(line)
            if not args.yes:
                print(say("erase.ask", lang) + " (--yes)")
                return EXIT_OK
            # the replies first (logged in forget.log, so a restore deletes them again);
            # then the face data: a failure in between leaves the person to forget again
            report = erasure.execute(plan) if not plan.empty else EraseReport(plan.plan_id)
            gone = store.forget(name)
            erasure.index.upsert_many(entries(gone.photos))  # the photos' items lose the name
        finally:
            _close_erasure(erasure)
            memory.close()
    finally:
        store.close()
    for line in report.lines(lang):
        print(line)
    erased = sum(1 for i in report.deleted if i.layer in ("reply", "timeline"))
    print(
        say(
            "people.forgot",
            lang,
            name=gone.name,
            samples=gone.samples,
            photos=len(gone.photos),
            replies=erased,
        )
    )
    return EXIT_ERROR if report.not_deleted else EXIT_OK


def cmd_photos(args: argparse.Namespace) -> int:
    if args.bundle is not None:
        from edge_agent.timeline import device_timeline
        from provisioning.bundle import Bundle

        entries = [e for e in device_timeline(Bundle.load(args.bundle)) if e.kind == "photo"]
        for e in entries[-args.limit :]:
            print(f"{e.seq or 'pending':>6}  {fmt_ms(e.ts):<19}  {e.text}")
        return EXIT_OK
    from hub.archive.settings import open_archive
    from hub.vision.store import VisionStore
    from provisioning.home import Home

    home = Home.load(args.home)
    store = VisionStore.for_home(home.path)
    try:
        photos = store.photos(limit=args.limit)
    finally:
        store.close()
    if args.export is not None:
        args.export.mkdir(parents=True, exist_ok=True)
        with open_archive(home.path) as archive:
            for p in photos:
                data = archive.read(p.archive_id)
                if hashlib.sha256(data).hexdigest() != p.sha256:
                    from hub.vision.errors import VisionError

                    raise VisionError("vision.photo_refused", id=p.id, reason="digest mismatch")
                (args.export / f"{p.id}.jpg").write_bytes(data)
        print(f"{len(photos)} photo(s) exported to {args.export}")
        return EXIT_OK
    for p in photos:
        people = ", ".join(p.people) or "-"
        print(f"{p.id}  {fmt_ms(p.taken_ms):<19}  {p.device}  faces {p.faces}  people {people}")
        if p.text:
            print(f"    text: {p.text}")
    return EXIT_OK


def add_commands(sub: Any, command: Command) -> None:
    """Register ``yimi people …`` and ``yimi photos``."""
    people = sub.add_parser("people", help="people the owner names from photos (faces)")
    people_sub = people.add_subparsers(dest="action", required=True)
    sp = command(people_sub, "add", cmd_people_add, "name a person from photos of them")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--photo", type=Path, nargs="+", required=True, help="3 or more photos")
    sp.add_argument("--replace", action="store_true", help="start this person over")
    sp.add_argument("name")
    sp = command(people_sub, "list", cmd_people_list, "the people named")
    sp.add_argument("--home", type=Path, required=True)
    sp = command(
        people_sub,
        "forget",
        cmd_people_forget,
        "forget a person: shows what it deletes (their face samples, their name on the "
        "photos and in recall, the hub's replies that named them, on the hub and every "
        "device); carried out only with --yes, like yimi memory forget --about",
    )
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--yes", action="store_true", help="the owner approves what is shown")
    sp.add_argument("--lang", default="en", choices=("en", "zh"))
    sp.add_argument("name")

    sp = command(sub, "photos", cmd_photos, "list (or export) the snapshots")
    where = sp.add_mutually_exclusive_group(required=True)
    where.add_argument("--home", type=Path)
    where.add_argument("--bundle", type=Path)
    sp.add_argument("--limit", type=int, default=50)
    sp.add_argument("--export", type=Path, help="--home: write the JPEGs (digest checked) here")
