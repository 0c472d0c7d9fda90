"""``yimi memory`` subcommands: the hub's L3 assertions, as the operator sees them.

| command | what it does |
|---|---|
| ``yimi memory show ID --home DIR [--json]`` | the assertion's head: value, status, sources |
| ``yimi memory explain ID --home DIR`` | provenance: sources, versions, dependencies |
| ``yimi memory commit --home DIR …`` | write a version (compare-and-swap on ``--expect``) |
| ``yimi memory forget ID --home DIR`` | forget it and all derived; print what was deleted |
| ``yimi memory forget --about TEXT --home DIR`` | plan forgetting all said about TEXT |
| ``… --about TEXT --yes`` | the owner approves: carry the plan out, report |
| ``yimi memory reapply-deletions --home DIR`` | after restoring any store from a backup |

The memory lives in ``HOME/memory.db`` (its deletion log beside it); the recall index in
``HOME/recall/<embedding model>.db``; the L2 profile in ``HOME/profile/``. Bad input is refused with
one ``yimi: …`` line and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from cli.common import EXIT_ERROR, EXIT_OK, Command, fmt_ms
from hub.memory.errors import MemoryStoreError
from hub.memory.sensitivity import LEVELS, format_source


def _open(args: argparse.Namespace, *, with_index: bool) -> Any:
    from hub.memory.home import open_memory
    from provisioning.errors import ProvisioningError

    if not (args.home / "home.yaml").exists():
        raise ProvisioningError("home.missing", path=args.home)
    return open_memory(args.home, with_index=with_index)


def _number(text: str, field: str, *, integer: bool = False) -> Any:
    try:
        value: float | int = int(text) if integer else float(text)
    except ValueError:
        kind = "a whole number" if integer else "a number"
        raise MemoryStoreError(
            "memory.invalid", field=field, reason=f"{text!r} is not {kind}"
        ) from None
    if not math.isfinite(value):
        raise MemoryStoreError("memory.invalid", field=field, reason=f"{text!r} is not finite")
    return value


def _dependency(text: str) -> tuple[str, int]:
    ident, sep, version = text.rpartition("@")
    if not sep or not ident:
        raise MemoryStoreError(
            "memory.invalid", field="--depends", reason=f"{text!r} is not ID@VERSION"
        )
    return ident, _number(version, "--depends", integer=True)


def _value(text: str, as_json: bool) -> Any:
    if not as_json:
        return text
    try:
        return json.loads(text)
    except ValueError as exc:
        raise MemoryStoreError(
            "memory.invalid", field="--value", reason=f"not JSON: {exc}"
        ) from None


def _sources(version: Any) -> str:
    return ", ".join(format_source(s) for s in version.sources) or "(none)"


def cmd_memory_show(args: argparse.Namespace) -> int:
    store = _open(args, with_index=False)
    try:
        a = store.get(args.id)
    finally:
        store.close()
    h = a.head
    if args.json:
        print(
            json.dumps(
                {
                    "id": a.id,
                    "version": a.version,
                    "status": a.status,
                    "subject": h.subject,
                    "predicate": h.predicate,
                    "value": h.value,
                    "confidence": h.confidence,
                    "sensitivity": h.sensitivity,
                    "importance": h.importance,
                    "sources": [list(s) for s in h.sources],
                    "depends_on": [list(d) for d in h.depends_on],
                    "created_ms": h.created_ms,
                },
                ensure_ascii=False,
                sort_keys=True,
            )
        )
        return EXIT_OK
    print(f"{a.id}  v{a.version}  {a.status}")
    if a.status == "forgotten":
        print("  forgotten: every version's payload was erased; only this tombstone is left")
        return EXIT_OK
    print(f"  {h.subject} · {h.predicate} · {json.dumps(h.value, ensure_ascii=False)}")
    print(
        f"  confidence {h.confidence} · sensitivity {h.sensitivity} · importance {h.importance}"
        f" · committed {fmt_ms(h.created_ms)}"
    )
    print(f"  sources: {_sources(h)}")
    if h.depends_on:
        print("  depends on: " + ", ".join(f"{d} v{v}" for d, v in h.depends_on))
    return EXIT_OK


def cmd_memory_explain(args: argparse.Namespace) -> int:
    from hub.memory.derived import DerivedStore

    store = _open(args, with_index=False)
    try:
        a = store.get(args.id)
        history = store.history(args.id)
        dependents = store.dependents(args.id)
        dependent_status = {d: store.get(d).status for d, _, _ in dependents}
        upstream = {dep: store.find(dep) for v in history for dep, _ in v.depends_on}
        derived = DerivedStore(store)
        citing = [
            derived.get(str(r[0]))
            for r in store.conn.execute(
                "SELECT derived_id FROM derived_source WHERE kind='assertion' AND source_id=? "
                "ORDER BY derived_id",
                (args.id,),
            )
        ]
        source_levels = {s: store.source_sensitivity(s) for s in a.head.sources}
    finally:
        store.close()
    print(f"assertion {a.id}: {a.status}, head v{a.version}, sensitivity {a.sensitivity}")
    print("sources:")
    for s, level in source_levels.items():
        print(f"  {format_source(s)} ({level})")
    if not source_levels:
        print("  (none recorded)" if a.status != "forgotten" else "  (erased)")
    print("version chain:")
    for v in history:
        body = (
            "(payload erased)"
            if v.erased
            else f"{v.subject} · {v.predicate} · {json.dumps(v.value, ensure_ascii=False)}"
        )
        print(f"  v{v.version}  {v.status:<18} {fmt_ms(v.created_ms)}  {body}")
    print("depends on:")
    shown = False
    for v in history:
        for dep, dep_version in v.depends_on:
            up = upstream.get(dep)
            now = "gone" if up is None else f"now v{up.version} {up.status}"
            stale = up is None or up.version != dep_version or up.status != "current"
            flag = "  ← stale" if stale and v.version == a.version else ""
            print(f"  v{v.version} → {dep} v{dep_version} ({now}){flag}")
            shown = True
    if not shown:
        print("  (nothing)")
    print("dependents:")
    for dep_id, dep_version, on_version in dependents:
        print(f"  {dep_id} v{dep_version} (on v{on_version}), {dependent_status[dep_id]}")
    if not dependents:
        print("  (none)")
    print("derived from it:")
    for item in citing:
        print(f"  {item.id} {item.kind}, {item.status}, sensitivity {item.sensitivity}")
    if not citing:
        print("  (none)")
    return EXIT_OK


def cmd_memory_commit(args: argparse.Namespace) -> int:
    expected = _number(args.expect, "--expect", integer=True)
    value = _value(args.value, args.json_value)
    confidence = _number(args.confidence, "--confidence")
    importance = _number(args.importance, "--importance")
    depends = [_dependency(d) for d in args.depends]
    store = _open(args, with_index=not args.no_index)
    try:
        r = store.commit(
            args.id,
            expected,
            subject=args.subject,
            predicate=args.predicate,
            value=value,
            confidence=confidence,
            sources=list(args.source),
            sensitivity=args.sensitivity,
            depends_on=depends,
            importance=importance,
            request_id=args.request_id,
            erase_previous=args.erase_previous,
        )
    finally:
        store.close()
    print(f"committed {r.id} v{r.version} ({r.status}, sensitivity {r.sensitivity})")
    if r.marked:
        print("needs re-evaluation now: " + ", ".join(r.marked))
    if r.erased_versions:
        print("erased earlier versions: " + ", ".join(f"v{v}" for v in r.erased_versions))
    if r.forgotten:
        print("forgotten with them: " + ", ".join(r.forgotten))
    return EXIT_OK


NOT_CLAIMED = (
    "not deleted by this command: timeline entries (L4), archived originals (L5) and "
    "backups; restoring a backup re-applies this deletion (yimi memory reapply-deletions)"
)


def _erasure(args: argparse.Namespace, store: Any) -> Any:
    """Forgetting whole over the home's stores (safe beside a running hub)."""
    from hub.archive.settings import open_archive
    from hub.memory.erasure import Erasure
    from hub.timeline import HubStore
    from sync.replicas import ReplicaSet

    home = args.home
    return Erasure(
        home,
        memory=store,
        index=store.index,
        timeline=HubStore(home / "hub.db"),
        replicas=ReplicaSet(home / "replicas") if (home / "replicas").exists() else None,
        archive=open_archive(home) if (home / "archive").exists() else None,
    )


def _close_erasure(erasure: Any) -> None:
    erasure.timeline.close()
    if erasure.archive is not None:
        erasure.archive.close()


def cmd_memory_forget_about(args: argparse.Namespace) -> int:
    """Plan; show it; execute only with ``--yes`` (the owner at the hub's console)."""
    from hub.brain.replies import say

    lang = args.lang
    store = _open(args, with_index=True)
    erasure = _erasure(args, store)
    try:
        plan = erasure.plan(args.about)
        if plan.empty:
            print(say("erase.nothing", lang, about=plan.about))
            return EXIT_OK
        for line in plan.lines(lang):
            print(line)
        if not args.yes:
            print(say("erase.ask", lang) + " (--yes)")
            return EXIT_OK
        report = erasure.execute(plan)
    finally:
        _close_erasure(erasure)
        store.close()
    for line in report.lines(lang):
        print(line)
    if report.updates:
        print(f"({len(report.updates)} timeline documents purged; the hub sends the devices")
        print(" their tombstones as it sees them)")
    return EXIT_ERROR if report.not_deleted else EXIT_OK


def cmd_memory_forget(args: argparse.Namespace) -> int:
    if args.about:
        if args.id:
            raise MemoryStoreError(
                "memory.invalid", field="ID", reason="give an ID or --about, not both"
            )
        return cmd_memory_forget_about(args)
    if not args.id:
        raise MemoryStoreError("memory.invalid", field="ID", reason="give an ID or --about TEXT")
    store = _open(args, with_index=True)
    try:
        report = store.forget(args.id)
    finally:
        store.close()
    if report.empty:
        print(f"nothing deleted: {args.id} was already forgotten")
        return EXIT_OK
    print(f"forgot {args.id}; deleted:")
    for line in report.lines():
        print(f"  {line}")
    print(NOT_CLAIMED)
    return EXIT_ERROR if report.index_error else EXIT_OK


def cmd_memory_reapply(args: argparse.Namespace) -> int:
    from hub.memory.forget import reapply_deletions
    from hub.memory.home import memory_db_path
    from hub.memory.index import MemoryIndex
    from provisioning.errors import ProvisioningError

    if not (args.home / "home.yaml").exists():
        raise ProvisioningError("home.missing", path=args.home)
    index = MemoryIndex.for_home(args.home)
    try:
        report = reapply_deletions(memory_db_path(args.home), index=index)
    finally:
        index.close()
    store = _open(args, with_index=True)
    erasure = _erasure(args, store)
    try:
        whole = erasure.reapply()
    finally:
        _close_erasure(erasure)
        store.close()
    if report.empty and not whole.deleted and not whole.not_deleted:
        print("nothing to delete again: every store already honours the deletion logs")
        return EXIT_OK
    print("deleted again:")
    for line in report.lines():
        print(f"  {line}")
    for item in whole.deleted:
        print(f"  {item.layer} {item.id}")
    for item, why in whole.not_deleted:
        print(f"  not yet: {item.layer} {item.id}: {why}")
    return EXIT_ERROR if report.index_error or whole.not_deleted else EXIT_OK


def add_commands(sub: Any, command: Command) -> Any:
    """Register ``yimi memory …`` (``command`` is cli.main's helper); returns the subparsers
    so further memory commands (``search``) can be added beside these."""
    mem = sub.add_parser("memory", help="the hub's memory: assertions, provenance, forgetting")
    mem_sub = mem.add_subparsers(dest="action", required=True)

    sp = command(mem_sub, "show", cmd_memory_show, "show an assertion as it stands")
    sp.add_argument("id")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--json", action="store_true", help="one JSON object")

    sp = command(
        mem_sub, "explain", cmd_memory_explain, "provenance: sources, versions, dependencies"
    )
    sp.add_argument("id")
    sp.add_argument("--home", type=Path, required=True)

    sp = command(
        mem_sub,
        "forget",
        cmd_memory_forget,
        "forget an assertion and what came from it, or (--about) everything said about it",
    )
    sp.add_argument("id", nargs="?")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument(
        "--about",
        help="plan forgetting everything said about TEXT (timeline, archive, memories, "
        "summaries); shown, and carried out only with --yes",
    )
    sp.add_argument("--yes", action="store_true", help="the owner approves the plan shown")
    sp.add_argument("--lang", default="en", choices=("en", "zh"))

    sp = command(mem_sub, "reapply-deletions", cmd_memory_reapply, "after a restore from backup")
    sp.add_argument("--home", type=Path, required=True)

    sp = command(mem_sub, "commit", cmd_memory_commit, "write a version (compare-and-swap)")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--id", help="the assertion id (default: a new one)")
    sp.add_argument("--expect", default="0", help="the version you read (0: a new assertion)")
    sp.add_argument("--subject", required=True)
    sp.add_argument("--predicate", required=True)
    sp.add_argument("--value", required=True)
    sp.add_argument("--json-value", action="store_true", help="--value is JSON")
    sp.add_argument("--source", action="append", default=[], help="KIND:ID (repeatable)")
    sp.add_argument("--depends", action="append", default=[], help="ID@VERSION (repeatable)")
    sp.add_argument("--sensitivity", default="medium", help=f"one of {', '.join(LEVELS)}")
    sp.add_argument("--confidence", default="1.0")
    sp.add_argument("--importance", default="0.5")
    sp.add_argument("--request-id", help="retrying with the same id writes nothing twice")
    sp.add_argument(
        "--erase-previous", action="store_true", help="also erase the earlier versions' payload"
    )
    sp.add_argument("--no-index", action="store_true", help="do not index it for recall")
    return mem_sub
