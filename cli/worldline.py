"""``yimi worldline``: forks of a workspace folder (``hub.worldlines``).

| command | what it does |
|---|---|
| ``yimi worldline fork --workspace W [--label L] [--count N]`` | fork it (N forks, one base) |
| ``yimi worldline list --workspace W`` | open and kept forks, and the commit history |
| ``yimi worldline show ID --workspace W`` | a fork's diff against the current workspace |
| ``yimi worldline commit ID --workspace W`` | the fork becomes current (a stale base: refused) |
| ``yimi worldline discard ID --workspace W`` | move the fork aside; the workspace is untouched |
| ``yimi worldline keep ID --workspace W`` | leave it open (never reclaimed) |
| ``yimi worldline rollback ID --workspace W`` | restore the state before commit ID |
| ``yimi worldline gc --workspace W`` | reclaim discarded forks and trimmed history |
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cli.common import EXIT_OK, Command


def _lines(args: argparse.Namespace) -> Any:
    from storage.worldlines import Worldlines

    return Worldlines(args.workspace)


def cmd_fork(args: argparse.Namespace) -> int:
    w = _lines(args)
    for f in w.fork_many(args.count, args.label or ""):
        print(f"{f.id}  {f.method}  base {f.base}  {w.path(f.id)}")
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    w = _lines(args)
    print(f"workspace {w.workspace}  generation {w.generation}  forked by {w.method()}")
    for f in w.forks():
        stale = "" if f.base == w.generation else "  (stale base)"
        print(f"  {f.id}  {f.status}  base {f.base}  {f.method}  {f.label}{stale}")
    for c in w.history():
        note = f"  rollback of {c.rollback_of}" if c.rollback_of else ""
        print(f"  commit {c.id}  generation {c.generation}{note}")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    d = _lines(args).diff(args.id)
    for label, names in (("added", d.added), ("changed", d.changed), ("removed", d.removed)):
        for n in names:
            print(f"{label}: {n}")
    if d.empty:
        print("no changes")
    print(d.text, end="")
    return EXIT_OK


def cmd_commit(args: argparse.Namespace) -> int:
    c = _lines(args).commit(args.id)
    print(f"committed {c.id}: generation {c.generation}")
    return EXIT_OK


def cmd_discard(args: argparse.Namespace) -> int:
    _lines(args).discard(args.id)
    print(f"discarded {args.id}")
    return EXIT_OK


def cmd_keep(args: argparse.Namespace) -> int:
    _lines(args).keep(args.id)
    print(f"kept {args.id}")
    return EXIT_OK


def cmd_rollback(args: argparse.Namespace) -> int:
    c = _lines(args).rollback(args.id)
    print(f"rolled back {args.id}: generation {c.generation}")
    return EXIT_OK


def cmd_gc(args: argparse.Namespace) -> int:
    print(f"reclaimed {_lines(args).gc()}")
    return EXIT_OK


def add_commands(sub: Any, command: Command) -> None:
    wl = sub.add_parser("worldline", help="forks of a workspace: show, commit, discard, rollback")
    wl_sub = wl.add_subparsers(dest="action", required=True)
    for name, handler, text, takes_id in (
        ("fork", cmd_fork, "fork the workspace", False),
        ("list", cmd_list, "forks and history", False),
        ("show", cmd_show, "a fork's diff against the current workspace", True),
        ("commit", cmd_commit, "make the fork current", True),
        ("discard", cmd_discard, "move the fork aside", True),
        ("keep", cmd_keep, "leave the fork open", True),
        ("rollback", cmd_rollback, "restore the state before a commit", True),
        ("gc", cmd_gc, "reclaim discarded forks and trimmed history", False),
    ):
        sp = command(wl_sub, name, handler, text)
        sp.add_argument("--workspace", type=Path, required=True)
        if takes_id:
            sp.add_argument("id")
        if name == "fork":
            sp.add_argument("--label")
            sp.add_argument("--count", type=int, default=1, help="forks from the same base")
