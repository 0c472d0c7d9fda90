"""``yimi`` subcommands for capability packages, cards and the audit log.

| command | what it does |
|---|---|
| ``yimi package check DIR [--no-start]`` | validate a package's manifest (fields named) and
  layout; start its server and compare its tools (missing, extra, renamed; annotations) |
| ``yimi package add DIR|DIST --home H`` | add a package folder, or a wrapper for an installed
  MCP server (a PyPI distribution), to ``H/packages.yaml`` |
| ``yimi package list --home H`` | every package the hub runs (or not): tools and effects |
| ``yimi package test DIR [--variant fake|real]`` | run ``tests/contract.yaml`` on fake and real |
| ``yimi package show NAME|DIR [--home H]`` | a package's sandbox profile: what it may read, write,
  reach, and its limits |
| ``yimi cards --bundle PHONE`` | the cards waiting for the owner (synced from the hub) |
| ``yimi approve --bundle PHONE [CARD_ID]`` | approve a card, signed with the phone's key |
| ``yimi deny --bundle PHONE [CARD_ID]`` | deny it |
| ``yimi executor pause|resume|log --bundle MAC`` | the Mac's local pause switch and log |
| ``yimi audit verify --home DIR [--witness B]`` | records, chain, signed head; not behind B |
| ``yimi audit show --home DIR [--limit N]`` | list audit records |
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli.common import EXIT_ERROR, EXIT_OK, Command

if TYPE_CHECKING:
    from sync.audit_head import SignedHead


def _effect_text(t: Any) -> str:
    return t.effect or (f"by {t.effect_arg}: " + ", ".join(f"{k}→{v}" for k, v in t.effect_values))


def cmd_package_check(args: argparse.Namespace) -> int:
    from hub.capabilities.check import check_server, hints
    from hub.capabilities.errors import CapabilityError
    from hub.capabilities.manifest import check_layout, load

    m = load(args.dir)
    result = None if args.no_start else asyncio.run(check_server(m))
    print(
        f"ok: {m.name} {m.version} ({m.maintainer}, receipts {m.receipts}), {len(m.tools)} tools:"
    )
    suggested = {s.tool: s for s in result.suggestions} if result else {}
    for t in m.tools.values():
        extra = f", target {t.target}" if t.target else ""
        extra += f", retry {t.retry}" + (f", check with {t.check_with}" if t.check_with else "")
        served = result.served.get(t.name) if result else None
        if served is not None:
            extra += f"; server: {hints(served)}"
            s = suggested.get(t.name)
            if s is not None and s.effect != t.effect:
                extra += f"; suggested effect {s.effect} ({s.why})"
        print(f"  {t.name}: {_effect_text(t)}{extra}")
    if m.maintainer != "third_party":
        for problem in check_layout(m):
            print(f"warning: {problem}")
    if result is None:
        return EXIT_OK
    for p in result.problems:
        print(f"error: {p.text(_lang())}", file=sys.stderr)
    if result.problems:
        raise CapabilityError("package.check_failed", package=m.name, count=len(result.problems))
    print(f"server: {len(result.served)} tools, as declared")
    return EXIT_OK


def _lang() -> str:
    import os

    return os.environ.get("YIMI_LANG", "en")


def cmd_package_add(args: argparse.Namespace) -> int:
    from hub.capabilities.check import check_server, served_tools
    from hub.capabilities.errors import CapabilityError
    from hub.capabilities.manifest import load, parse
    from hub.capabilities.settings import add_package, ensure_new
    from hub.capabilities.wrap import package_name, server_for, wrapper
    from storage.private import private_dir, write_private

    folder = Path(args.what).expanduser()
    if (folder / "plugin.json").is_file():
        m = load(folder)
        ensure_new(args.home, m.name)
        result = asyncio.run(check_server(m))
        for p in result.problems:
            print(f"error: {p.text(_lang())}", file=sys.stderr)
        if result.problems:
            raise CapabilityError(
                "package.check_failed", package=m.name, count=len(result.problems)
            )
        entry: dict[str, Any] = {"path": str(m.root)}
    else:
        server = server_for(args.what)
        name = args.name or package_name(server.distribution)
        ensure_new(args.home, name)
        root = private_dir(args.home / "packages" / name)
        extra = tuple(args.arg or ())
        probe = parse(wrapper(name, server, _placeholder(), extra_args=extra), root)
        served = asyncio.run(served_tools(probe))
        data = wrapper(name, server, served, extra_args=extra)
        write_private(root / "plugin.json", json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        m = load(root)
        entry = {"path": str(Path("packages") / name)}
    file = add_package(args.home, m.name, entry)
    print(f"added {m.name} ({m.maintainer}, receipts {m.receipts}) to {file}:")
    for t in m.tools.values():
        print(f"  {t.name}: {_effect_text(t)}")
    if m.maintainer == "third_party":
        print(f"review each tool's effect in {m.root / 'plugin.json'}; the hub uses it on start")
    return EXIT_OK


def _placeholder() -> dict[str, Any]:
    from hub.capabilities.host import ServedTool

    return {"placeholder": ServedTool("placeholder")}


def cmd_package_list(args: argparse.Namespace) -> int:
    from hub.capabilities.manifest import load
    from hub.capabilities.settings import read_settings
    from protos.errors import YimiError

    for name, s in read_settings(args.home).items():
        state = "enabled" if s.enabled else "disabled"
        kind = "built-in" if s.builtin and not s.path else str(s.root)
        try:
            m = load(s.root)
        except YimiError as exc:
            print(f"{name}  {state}  {kind}  not loadable: {exc.text(_lang())}")
            continue
        print(f"{name} {m.version}  {state}  {m.maintainer}, receipts {m.receipts}  {kind}")
        for t in m.tools.values():
            print(f"  {t.name}: {_effect_text(t)}")
    return EXIT_OK


def cmd_package_show(args: argparse.Namespace) -> int:
    import os

    from hub.capabilities.manifest import load
    from hub.capabilities.sandbox import bwrap, opted_out, profile_for
    from hub.capabilities.settings import read_settings

    root = Path(args.name)
    state = Path("/HOME/package-state")
    if not (root / "plugin.json").is_file():
        settings = read_settings(args.home) if args.home else {}
        if args.name not in settings:
            from hub.capabilities.errors import CapabilityError

            raise CapabilityError("package.unknown", package=args.name)
        root = settings[args.name].root
    m = load(root)
    state = (args.home.resolve() if args.home else state.parent) / "package-state" / m.name
    env = {k: v for k, v in os.environ.items() if k.startswith("YIMI_")}
    env["YIMI_STATE_DIR"] = str(state)
    print(f"{m.name} {m.version}  {m.maintainer}  {m.root}")
    if opted_out():
        print("sandbox: OFF (YIMI_SANDBOX=off: the operator runs packages unsandboxed)")
    elif bwrap() is None:
        print("sandbox: bubblewrap is not installed: the hub will not start this package")
    for line in profile_for(m, env).describe():
        print(line)
    return EXIT_OK


def cmd_package_test(args: argparse.Namespace) -> int:
    from hub.capabilities.contract import run_contract
    from worlds.fakes import WORLDS

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    variants = tuple(args.variant) if args.variant else ("fake", "real")
    report = asyncio.run(run_contract(args.dir, worlds=WORLDS, variants=variants))
    for variant, case, passed, detail in report.results:
        mark = "PASS" if passed else "FAIL"
        print(f"{mark} [{variant}] {case}" + (f": {detail}" if detail else ""))
    failed = sum(1 for r in report.results if not r[2])
    print(f"{len(report.results) - failed} passed, {failed} failed")
    return EXIT_OK if report.ok else EXIT_ERROR


def _answer(args: argparse.Namespace, approve: bool) -> int:
    from edge_agent.approve import answer_card
    from provisioning.bundle import Bundle

    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    bundle = Bundle.load(args.bundle)
    print(
        asyncio.run(
            answer_card(bundle, args.card_id, approve=approve, hub=args.hub, timeout=args.timeout)
        )
    )
    return EXIT_OK


def cmd_approve(args: argparse.Namespace) -> int:
    return _answer(args, True)


def cmd_deny(args: argparse.Namespace) -> int:
    return _answer(args, False)


def cmd_cards(args: argparse.Namespace) -> int:
    from edge_agent.approve import list_cards
    from provisioning.bundle import Bundle

    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    bundle = Bundle.load(args.bundle)
    print(asyncio.run(list_cards(bundle, hub=args.hub, timeout=args.timeout, offline=args.offline)))
    return EXIT_OK


def _audit_dir(home: Path) -> Path:
    return home / "gateway" / "audit"


def cmd_audit_verify(args: argparse.Namespace) -> int:
    import yaml

    from hub.gateway.audit import verify
    from hub.gateway.errors import GatewayError

    where = _audit_dir(args.home)
    hub_pk = None
    if args.unsigned:
        print("warning: the head's signature is not checked", file=sys.stderr)
    else:
        try:
            hub_pk = bytes.fromhex(
                yaml.safe_load((args.home / "home.yaml").read_text())["hub_sign_pk"]
            )
        except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as exc:
            raise GatewayError(
                "audit.broken",
                path=args.home / "home.yaml",
                line=0,
                problem=f"no hub public key to check the head with: {exc}",
            ) from None
    witness, witnessed = None, ""
    for bundle_dir in args.witness or []:
        seen = _witness_head(bundle_dir, hub_pk)
        if seen is not None and (witness is None or seen[1].seq > witness[1].seq):
            witness = seen
    verdict = verify(where, hub_pk, witness=witness[1] if witness else None)
    if not verdict.ok and witness is not None and verdict.problem.startswith("rollback:"):
        raise GatewayError(
            "audit.rolled_back",
            path=where / "audit.jsonl",
            witness=witness[0],
            problem=verdict.problem.removeprefix("rollback:").strip(),
        )
    if not verdict.ok:
        raise GatewayError(
            "audit.broken", path=where / "audit.jsonl", line=verdict.line, problem=verdict.problem
        )
    signed = "" if args.unsigned else ", head signed by the hub"
    if witness is not None:
        witnessed = f", not behind {witness[0]}'s head (seq {witness[1].seq})"
    print(f"ok: {verdict.records} records, hash chain and head intact{signed}{witnessed}")
    return EXIT_OK


def _witness_head(bundle_dir: Path, hub_pk: bytes | None) -> tuple[str, SignedHead] | None:
    """(device name, the highest signed head it kept) of a witness bundle (``None``: it
    has kept none yet — said on stderr)."""
    from provisioning.bundle import Bundle
    from sync.audit_head import Witness

    bundle = Bundle.load(bundle_dir)
    if hub_pk is not None and hub_pk != bundle.hub_sign_pk:
        from hub.gateway.errors import GatewayError

        raise GatewayError(
            "audit.broken",
            path=bundle_dir,
            line=0,
            problem="the witness bundle belongs to another hub",
        )
    head = Witness(bundle.state_dir, bundle.hub_sign_pk).highest()
    if head is None:
        print(f"warning: witness {bundle.name} holds no audit head yet", file=sys.stderr)
        return None
    return bundle.name, head


def _brief(data: dict[str, Any]) -> str:
    if "receipt" in data:
        r = data["receipt"]
        return (
            f"{r.get('package')}.{r.get('tool')} {r.get('status')} rev {r.get('revision')}: "
            f"{r.get('summary', '')}"
        )
    keys = ("package", "tool", "outcome", "reason", "card_id", "device", "effect", "target")
    return " ".join(f"{k}={data[k]}" for k in keys if data.get(k))


def cmd_audit_show(args: argparse.Namespace) -> int:
    from hub.gateway.audit import records

    rows = list(records(_audit_dir(args.home)))[-args.limit :]
    for rec in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(rec.get("ts_ms", 0) / 1000))
        if args.json:
            print(json.dumps(rec, ensure_ascii=False))
        else:
            print(
                f"{rec.get('seq', '?'):>6}  {when}  {rec.get('kind', '?'):<9} "
                f"trace {str(rec.get('trace_id', ''))[:12]:<12}  {_brief(rec.get('data', {}))}"
            )
    return EXIT_OK


def cmd_executor(args: argparse.Namespace) -> int:
    from edge_agent.executor import executor_for
    from provisioning.bundle import Bundle

    bundle = Bundle.load(args.bundle)
    ex = executor_for(bundle)
    if args.action == "pause":
        ex.pause_path.touch(mode=0o600)
        print(f"executor on {bundle.name} paused: every request is refused until resumed")
    elif args.action == "resume":
        ex.pause_path.unlink(missing_ok=True)
        print(f"executor on {bundle.name} resumed")
    else:
        state = "paused" if ex.paused else "running"
        print(f"executor on {bundle.name}: {state}; policy {ex.policy_file}")
        lines = ex.log_path.read_text().splitlines() if ex.log_path.exists() else []
        for line in lines[-args.limit :]:
            e = json.loads(line)
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["ts_ms"] / 1000))
            what = e["path"] if e["op"] == "read" else " ".join([e["command"], *e["args"]])
            code = f" {e['error_code']}" if e["error_code"] else f" exit {e['exit_code']}"
            print(f"{when}  {e['op']:<4} {e['status']:<8}{code:<16} {what}")
    return EXIT_OK


def add_commands(sub: Any, command: Command) -> None:
    """Register the subcommands on ``yimi``'s subparsers (``command`` is cli.main's helper)."""
    pkg = sub.add_parser("package", help="capability packages: check, test, add, list")
    pkg_sub = pkg.add_subparsers(dest="action", required=True)
    sp = command(
        pkg_sub, "check", cmd_package_check, "validate a package folder and compare its server"
    )
    sp.add_argument("dir", type=Path)
    sp.add_argument(
        "--no-start", action="store_true", help="only the manifest: do not start the server"
    )
    sp = command(pkg_sub, "add", cmd_package_add, "add a package folder or an installed MCP server")
    sp.add_argument("what", help="a package folder, or an installed distribution (PyPI name)")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--name", help="the package's name (default: from the distribution's)")
    sp.add_argument(
        "--arg", action="append", help="an argument for the server's command (repeatable)"
    )
    sp = command(pkg_sub, "list", cmd_package_list, "the hub's packages: tools and effects")
    sp.add_argument("--home", type=Path, required=True)
    sp = command(pkg_sub, "show", cmd_package_show, "a package's sandbox profile")
    sp.add_argument("name", help="a package's name (with --home) or folder")
    sp.add_argument("--home", type=Path)
    sp = command(pkg_sub, "test", cmd_package_test, "run a package's contract (fake and real)")
    sp.add_argument("dir", type=Path)
    sp.add_argument("--variant", action="append", choices=["fake", "real"])

    for name, handler, text in (
        ("approve", cmd_approve, "approve a confirmation card (phone bundle)"),
        ("deny", cmd_deny, "deny a confirmation card (phone bundle)"),
    ):
        sp = command(sub, name, handler, text)
        sp.add_argument("--bundle", type=Path, required=True)
        sp.add_argument("--hub", help="HOST:PORT of the hub's gRPC (default: zeroconf)")
        sp.add_argument("--timeout", type=float, default=30.0)
        sp.add_argument("card_id", nargs="?", help="the card (default: the only pending one)")
    sp = command(sub, "cards", cmd_cards, "list the cards waiting for the owner (phone bundle)")
    sp.add_argument("--bundle", type=Path, required=True)
    sp.add_argument("--hub", help="HOST:PORT of the hub's gRPC (default: zeroconf)")
    sp.add_argument("--timeout", type=float, default=10.0)
    sp.add_argument("--offline", action="store_true", help="only what the phone already has")

    ex = sub.add_parser("executor", help="the executor role on this device (the Mac)")
    ex_sub = ex.add_subparsers(dest="action", required=True)
    for name, text in (
        ("pause", "refuse every executor request until resumed (local switch)"),
        ("resume", "serve executor requests again"),
        ("log", "the executor's state and its log of every request"),
    ):
        sp = command(ex_sub, name, cmd_executor, text)
        sp.add_argument("--bundle", type=Path, required=True)
        sp.add_argument("--limit", type=int, default=50)

    audit = sub.add_parser("audit", help="the hub's hash-chained audit log")
    audit_sub = audit.add_subparsers(dest="action", required=True)
    sp = command(audit_sub, "verify", cmd_audit_verify, "verify every record and the chain")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument(
        "--unsigned",
        action="store_true",
        help="a log kept without the hub's key (tests, other tools)",
    )
    sp.add_argument(
        "--witness",
        type=Path,
        action="append",
        metavar="BUNDLE",
        help="a device bundle (phone, Mac) whose kept audit head the log must not be behind",
    )
    sp = command(audit_sub, "show", cmd_audit_show, "list audit records")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--limit", type=int, default=100)
    sp.add_argument("--json", action="store_true", help="one JSON record per line")
