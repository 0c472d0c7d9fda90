"""``yimi models``: the node's model catalog (``models/catalog.py``).

- ``status (--home DIR | --bundle DIR)``: per role selected, effective, previous, progress,
  error
- ``list (--home | --bundle) [--role R]``: every model the catalog knows, with digests
- ``add (--home | --bundle) --role R --name N --path P …``: record an operator's model
- ``switch ROLE NAME (--home | --bundle) --confirm-with OWNER_BUNDLE``: select a model,
  confirmed by an owner device's key
- ``prepare (--home | --bundle) [--role R]``: verify (and convert) the models now, with
  a progress bar

Errors (a missing package, a digest mismatch, a refused confirmation) are one line each.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from cli.common import EXIT_ERROR, EXIT_OK, Command


def _node_dir(args: argparse.Namespace) -> Path:
    return Path(args.home if args.home is not None else args.bundle)


def _short(digest: str) -> str:
    return digest[:16]


def cmd_models_status(args: argparse.Namespace) -> int:
    from models.catalog import Catalog

    catalog = Catalog.open(_node_dir(args))
    rows = catalog.status()
    print(f"{'ROLE':<8} {'SELECTED':<26} {'EFFECTIVE':<26} {'PREVIOUS':<22} {'PROGRESS':<9} ERROR")
    for s in rows:
        progress = f"{s.progress * 100:.0f} %" if s.progress is not None else "-"
        print(
            f"{s.role:<8} {s.selected:<26} {s.effective or '-':<26} {s.previous or '-':<22} "
            f"{progress:<9} {s.error or '-'}"
        )
        if s.activity:
            print(f"{'':<8} {s.activity}")
        elif s.pending:
            print(f"{'':<8} switching to {s.pending}")
        elif s.role == "embed" and args.home is not None:
            note = _recall_note(Path(args.home))
            if note:
                print(f"{'':<8} {note}")
    return EXIT_OK


def _recall_note(home: Path) -> str | None:
    """A home whose recall index was built with another model, not migrated yet."""
    from hub.memory.index import index_model, live_index

    path, current = live_index(home)
    if current or not path.exists():
        return None
    return (
        f"recall still uses its index built with {index_model(path)}: it is rebuilt on the "
        "hub's next start (or now: 'yimi models prepare --role embed')"
    )


def cmd_models_list(args: argparse.Namespace) -> int:
    from models.catalog import ROLES, Catalog, package_dir

    catalog = Catalog.open(_node_dir(args))
    roles = [args.role] if args.role else list(ROLES) if args.all else catalog.roles()
    entries = {(e.role, e.name): e for e in catalog.entries()}
    print(f"{'':1} {'ROLE':<8} {'NAME':<26} {'VERSION':<10} {'RUNTIME':<12} {'SHA-256':<17} PATH")
    for role in roles:
        selected, _ = catalog.selection(role)
        packaged = {b.name: b for b in catalog.packaged_models(role)}
        names = sorted({n for r, n in entries if r == role} | set(packaged))
        for name in names:
            mark = "*" if name == selected else ""
            e = entries.get((role, name))
            if e is not None:
                print(
                    f"{mark:1} {role:<8} {name:<26} {e.version:<10} {e.runtime:<12} "
                    f"{_short(e.sha256):<17} {e.path}"
                )
                for f in e.extras:
                    print(
                        f"{'':1} {'':<8} {'+ ' + f.label:<26} {'':<10} {'':<12} "
                        f"{_short(f.sha256):<17} {f.path}"
                    )
                continue
            b = packaged[name]
            root = package_dir(b.module)
            where = (
                f"(not installed: package {b.dist})"
                if root is None
                else f"(built in, not joined yet: {b.source} on first use)"
                if b.join is not None
                else f"(built in, not used yet: {root / b.relpath})"
            )
            print(
                f"{mark:1} {role:<8} {name:<26} {b.version:<10} {b.runtime:<12} {'-':<17} {where}"
            )
    return EXIT_OK


def cmd_models_add(args: argparse.Namespace) -> int:
    from models.catalog import Catalog, ModelEntry, ModelFile

    catalog = Catalog.open(_node_dir(args))
    extras = []
    for spec in args.extra or []:
        label, sep, path = spec.partition("=")
        if not sep:
            print(f"yimi: --extra {spec!r}: use LABEL=PATH", file=sys.stderr)
            return EXIT_ERROR
        extras.append(ModelFile(label, path, ""))
    entry = catalog.add(
        ModelEntry(
            name=args.name,
            role=args.role,
            version=args.version,
            path=str(args.path),
            sha256=args.sha256 or "",
            runtime=args.runtime,
            source=args.source or "operator",
            extras=tuple(extras),
        )
    )
    print(f"added {entry.role} model {entry.name} {entry.version} ({entry.runtime})")
    print(f"  path    {entry.path}")
    print(f"  sha256  {entry.sha256}")
    for f in entry.extras:
        print(f"  + {f.label}: {f.path} ({f.sha256})")
    print(f"not selected: 'yimi models switch {entry.role} {entry.name} ... --confirm-with OWNER'")
    return EXIT_OK


def cmd_models_switch(args: argparse.Namespace) -> int:
    from models.catalog import DERIVED, Catalog, sign_switch
    from provisioning.bundle import Bundle

    catalog = Catalog.open(_node_dir(args))
    assert catalog.trust is not None
    owner = Bundle.load(args.confirm_with)
    entry = catalog.resolve_name(args.role, args.name)
    # the owner device signs what it was shown: node, role, model name and digest
    print(
        f"{owner.name} ({owner.profile.name}) confirms: {args.role} -> {entry.name} "
        f"{entry.version} sha256 {entry.sha256} on {catalog.trust.node_id}"
    )
    confirmation = sign_switch(
        sign_key=owner.keys.sign,
        device_id=owner.device_id,
        certificate=(owner.path / "certificate.bin").read_bytes(),
        home_id=owner.home_id,
        node=catalog.trust.node_id,
        role=args.role,
        name=entry.name,
        sha256=entry.sha256,
    )
    derived = None
    if args.role in DERIVED and args.home is not None:
        from hub.memory.reindex import RecallRebuild

        derived = RecallRebuild(Path(args.home))
        print(f"rebuilding the {DERIVED[args.role]} for {entry.name} first", file=sys.stderr)
    s = catalog.switch(args.role, entry.name, confirmation, derived)
    print(
        f"{s.role}: selected {s.selected}, effective {s.effective or '-'}, "
        f"previous {s.previous or '-'}"
    )
    return EXIT_OK


def cmd_models_prepare(args: argparse.Namespace) -> int:
    from models.catalog import Catalog
    from protos.errors import YimiError

    catalog = Catalog.open(_node_dir(args))
    roles = args.role or [s.role for s in catalog.status()]
    failed = 0
    for role in roles:

        def bar(fraction: float, role: str = role) -> None:
            filled = int(fraction * 30)
            print(
                f"\r{role}: converting [{'#' * filled}{'.' * (30 - filled)}] "
                f"{fraction * 100:3.0f} %",
                end="",
                file=sys.stderr,
                flush=True,
            )
            if fraction >= 1.0:
                print(file=sys.stderr)

        try:
            entry = catalog.resolve(role, progress=bar)
        except YimiError as exc:
            failed += 1
            print(f"{role}: {exc}")
            continue
        print(f"{role}: {entry.name} {entry.version} ok ({_short(entry.sha256)})")
        if role == "embed" and args.home is not None:
            from hub.memory.reindex import migrate_home

            try:
                moved = migrate_home(Path(args.home))
            except YimiError as exc:
                failed += 1
                print(f"{role}: {exc}")
                continue
            if moved is not None:
                print(f"{role}: recall index rebuilt for {moved.selected}")
    return EXIT_ERROR if failed else EXIT_OK


def add_commands(sub: Any, command: Command) -> None:
    """Register ``yimi models …`` on ``yimi``'s subparsers (``command`` is cli.main's helper)."""
    from models.roles import ROLES, RUNTIMES

    def where_arg(sp: argparse.ArgumentParser) -> None:
        group = sp.add_mutually_exclusive_group(required=True)
        group.add_argument("--home", type=Path, help="the hub's catalog")
        group.add_argument("--bundle", type=Path, help="this device's catalog")

    models = sub.add_parser("models", help="the local model catalog: status, add, switch")
    models_sub = models.add_subparsers(dest="action", required=True)
    sp = command(models_sub, "status", cmd_models_status, "per role: selected, effective, previous")
    where_arg(sp)
    sp = command(models_sub, "list", cmd_models_list, "every model in the catalog, with digests")
    where_arg(sp)
    sp.add_argument("--role", choices=ROLES)
    sp.add_argument("--all", action="store_true", help="every role, not only this node's")
    sp = command(models_sub, "add", cmd_models_add, "record a model file (it is not selected)")
    where_arg(sp)
    sp.add_argument("--role", choices=ROLES, required=True)
    sp.add_argument("--name", required=True)
    sp.add_argument("--path", type=Path, required=True, help="the model file or folder")
    sp.add_argument("--version", default="1")
    sp.add_argument("--runtime", choices=sorted(RUNTIMES), default="onnxruntime")
    sp.add_argument("--sha256", help="the digest you expect (default: computed now)")
    sp.add_argument("--source", help="where it came from (shown by list)")
    sp.add_argument("--extra", action="append", help="LABEL=PATH of a file that goes with it")
    sp = command(
        models_sub, "switch", cmd_models_switch, "select a model (confirmed by an owner device)"
    )
    sp.add_argument("role", choices=ROLES)
    sp.add_argument("name")
    where_arg(sp)
    sp.add_argument(
        "--confirm-with", type=Path, required=True, help="an owner device's bundle that signs"
    )
    sp = command(models_sub, "prepare", cmd_models_prepare, "verify and convert models now")
    where_arg(sp)
    sp.add_argument("--role", choices=ROLES, action="append")
