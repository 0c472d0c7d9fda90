"""``yimi people add|list|forget`` (the people the owner names, from photos) and ``yimi photos``
(the snapshots: the hub's with ``--home``, exportable; the references a device holds with
``--bundle``)."""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path
from typing import Any

from cli.common import EXIT_OK, Command, fmt_ms


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
    from hub.vision.recall import PhotoIndex
    from hub.vision.store import VisionStore
    from provisioning.home import Home

    home = Home.load(args.home).path
    store = VisionStore.for_home(home)
    try:
        gone = store.forget(" ".join(args.name.split()))
    finally:
        store.close()
    index = PhotoIndex(home)
    try:  # the photos' recall items lose the name too
        index.put(gone.photos)
    finally:
        index.close()
    print(
        f"forgot {gone.name}: {gone.samples} face samples deleted, their name taken off "
        f"{len(gone.photos)} photo(s) and their recall items"
    )
    return EXIT_OK


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
    sp = command(people_sub, "forget", cmd_people_forget, "delete a person's face data")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("name")

    sp = command(sub, "photos", cmd_photos, "list (or export) the snapshots")
    where = sp.add_mutually_exclusive_group(required=True)
    where.add_argument("--home", type=Path)
    where.add_argument("--bundle", type=Path)
    sp.add_argument("--limit", type=int, default=50)
    sp.add_argument("--export", type=Path, help="--home: write the JPEGs (digest checked) here")
