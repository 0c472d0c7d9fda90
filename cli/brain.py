"""``yimi brain …``: the hub operator's view of the model providers, and model switches.

- ``yimi brain status --home DIR``: the applied configuration (endpoints per role, local or
  remote, cloud-eligible sources), the recogniser hub speech recognition uses (an ``asr``
  endpoint, or local faster-whisper and why a remote endpoint is skipped), stored API keys
  by id and fingerprint (never the key), and recent changes with their state. ``vision``
  endpoints are accepted but marked "not used yet": nothing looks at images yet.
- ``yimi brain key set --home DIR --id ID (--from-file F | --stdin)``: store an API key
  encrypted with the hub's key; prints its fingerprint. The key never reaches a model, a
  log or this command's output.
- ``yimi brain use --home DIR (--config FILE | --rule-based | --endpoint URL --model NAME
  [--key-id ID]) --confirm-with BUNDLE``: propose
  a configuration and confirm it with an owner device's signature (its bundle on this
  machine); the hub's brain applies it between turns. The confirming device must be in the
  home's registry, not revoked, and hold the ``approve`` scope; memory is untouched.
  Before anything is proposed, every endpoint of the configuration is probed
  (:mod:`hub.brain.probe`: ``GET /v1/models`` lists the model, and a one-token completion
  works for the chat roles); the first failure is one line naming it, and nothing changes.
  ``--probe-timeout`` bounds each probe request (default 10 s).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import yaml

from cli.common import EXIT_OK, EXIT_USAGE, Command
from hub.errors import HubError


def _store(home_dir: Path) -> Any:
    from hub.brain.providers import ProviderStore
    from provisioning.home import Home

    return ProviderStore.for_home(Home.load(home_dir))


def _prefer_local(cfg: Any) -> str:
    if cfg.prefer_local:
        return "on: confidently matched commands run locally at once, the rest go to the LLM"
    return "off: every turn goes to the LLM"


def brain_mode(cfg: Any) -> str:
    """One line: which brain answers (a ``ProviderConfig``), as ``hub status`` shows it."""
    endpoints = cfg.endpoints("brain")
    if not endpoints:
        return "the built-in rule-based model (no endpoint configured)"
    local = "commands handled locally first" if cfg.prefer_local else "every turn to the LLM"
    return f"LLM {endpoints[0].label()}; {local}"


def cmd_brain_status(args: argparse.Namespace) -> int:
    from hub.brain.providers import asr_route
    from hub.memory.sensitivity import format_source

    store = _store(args.home)
    try:
        cfg = store.current()
        print(f"configuration version {cfg.version}")
        if not cfg.endpoints("brain"):
            print(f"  brain: {brain_mode(cfg)}")
        else:
            print(f"  prefer handling commands locally: {_prefer_local(cfg)}")
        for role, endpoints in sorted(cfg.roles.items()):
            for e in endpoints:
                key = f", key {e.key_id}" if e.key_id else ""
                unused = " — not used yet: nothing looks at images" if role == "vision" else ""
                limits = (
                    f"; max_tokens {e.token_limit}, timeout {e.call_timeout_s:g} s"
                    if role in ("brain", "subagent")
                    else ""
                )
                print(f"  {role}: {e.label()}{key}{limits}{unused}")
        print(f"  speech recognition: {asr_route(cfg).describe()}")
        sources = ", ".join(sorted(format_source(s) for s in cfg.cloud_sources)) or "none"
        print(f"  cloud-eligible sources: {sources}")
        keys = list(store.db.execute("SELECT key_id, fingerprint FROM api_keys ORDER BY key_id"))
        for key_id, fp in keys:
            print(f"  key {key_id}: fingerprint {fp}")
        rows = store.db.execute(
            "SELECT change_id, state, device_id, reason FROM changes "
            "ORDER BY created_ms DESC LIMIT 5"
        )
        for change_id, state, device, reason in rows:
            by = f" by {device}" if device else ""
            why = f": {reason}" if reason else ""
            print(f"  change {change_id}: {state}{by}{why}")
    finally:
        store.close()
    return EXIT_OK


def cmd_brain_key_set(args: argparse.Namespace) -> int:
    secret = sys.stdin.read() if args.stdin else Path(args.from_file).read_text()
    store = _store(args.home)
    try:
        fp = store.set_key(args.id, secret.strip())
    finally:
        store.close()
    print(f"stored key {args.id} (fingerprint {fp})")
    return EXIT_OK


def _confirming_device(home_dir: Path, bundle_dir: Path) -> tuple[Any, Any]:
    """The owner device's bundle and its registry record (the registry is the authority:
    a revoked or unknown device, or one whose key differs, cannot confirm)."""
    from provisioning.bundle import Bundle
    from provisioning.registry import Registry

    bundle = Bundle.load(bundle_dir)
    registry = Registry(home_dir / "registry.db")
    try:
        records = {r.device_id: r for r in registry.devices()}
    finally:
        registry.close()
    record = records.get(bundle.device_id)
    if record is None or record.revoked or record.sign_pk != bytes(bundle.keys.sign_pk):
        raise HubError(
            "brain.confirm_device", name=bundle.name, reason="not an enrolled, unrevoked device"
        )
    return bundle, record


def cmd_brain_use(args: argparse.Namespace) -> int:
    from hub.brain.providers import sign_change

    if args.endpoint is not None and not args.model:
        print("yimi: brain use --endpoint needs --model", file=sys.stderr)
        return EXIT_USAGE

    if args.rule_based:
        config: Any = {}
    elif args.endpoint is not None:
        config = None  # the current configuration with this brain endpoint (below)
    else:
        try:
            config = yaml.safe_load(Path(args.config).read_text()) or {}
        except yaml.YAMLError as exc:
            raise HubError("brain.config_file", path=args.config, reason=str(exc)[:200]) from None
    bundle, record = _confirming_device(args.home, args.confirm_with)
    store = _store(args.home)
    try:
        from hub.brain.probe import probe_config
        from hub.brain.providers import ProviderConfig

        if config is None:
            config = store.current().to_dict()
            ep: dict[str, Any] = {"base_url": args.endpoint, "model": args.model}
            if args.key_id:
                ep["key_id"] = args.key_id
            config["roles"]["brain"] = [ep]
        parsed = ProviderConfig.from_dict(config)
        for p in asyncio.run(probe_config(parsed, store.api_key, timeout_s=args.probe_timeout)):
            what = "models listed, one-token completion ok" if p.completion else "model listed"
            print(f"probed {p.role}: {p.endpoint.label()}: {what}")
        change = store.propose(parsed)
        print(f"{bundle.name} ({record.profile}) confirms: {change.summary()}")
        done = store.confirm(
            change.change_id,
            sign_change(change.body, bundle.keys.sign),
            device_id=record.device_id,
            sign_pk=record.sign_pk,
            scopes=record.scopes,
        )
    finally:
        store.close()
    print(f"change {done.change_id}: {done.state}; the hub applies it before its next turn")
    return EXIT_OK


def add_commands(sub: Any, command: Command) -> None:
    """Register ``yimi brain …`` on ``yimi``'s subparsers (``command`` is cli.main's helper)."""
    brain = sub.add_parser("brain", help="model providers of the hub's brain")
    brain_sub = brain.add_subparsers(dest="action", required=True)
    sp = command(brain_sub, "status", cmd_brain_status, "endpoints, keys and recent changes")
    sp.add_argument("--home", type=Path, required=True)
    key = brain_sub.add_parser("key", help="API keys, stored encrypted on the hub")
    key_sub = key.add_subparsers(dest="key_action", required=True)
    sp = command(key_sub, "set", cmd_brain_key_set, "store an API key under an id")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--id", required=True)
    src = sp.add_mutually_exclusive_group(required=True)
    src.add_argument("--from-file", type=Path)
    src.add_argument("--stdin", action="store_true")
    sp = command(brain_sub, "use", cmd_brain_use, "switch models (an owner device confirms)")
    sp.add_argument("--home", type=Path, required=True)
    what = sp.add_mutually_exclusive_group(required=True)
    what.add_argument("--config", type=Path, help="YAML: roles, cloud_sources, tool_levels")
    what.add_argument("--rule-based", action="store_true", help="back to the built-in model")
    what.add_argument(
        "--endpoint",
        help="URL of an OpenAI-compatible server (…/v1) for the brain role; the rest of the "
        "current configuration is kept (needs --model)",
    )
    sp.add_argument("--model", help="with --endpoint: the model to use")
    sp.add_argument("--key-id", help="with --endpoint: a stored API key's id")
    sp.add_argument("--confirm-with", type=Path, required=True, help="an owner device's bundle")
    sp.add_argument(
        "--probe-timeout",
        type=float,
        default=10.0,
        help="seconds each probe request of an endpoint may take (default 10)",
    )
