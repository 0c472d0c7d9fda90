"""``yimi device add|list|revoke|pair``: enrol, list and revoke devices."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from cli.common import EXIT_OK, Command, fmt_ms


def cmd_device_add(args: argparse.Namespace) -> int:
    from provisioning.bundle import flash
    from provisioning.home import Home

    home = Home.load(args.home)
    bundle = flash(
        home, profile_name=args.profile, name=args.name, out=args.out, hub_host=args.hub_host
    )
    print(f"device {bundle.name} ({bundle.profile.name}) enrolled as {bundle.device_id}")
    print(f"bundle written to {bundle.path}")
    if args.user_data:
        from provisioning.firstboot import user_data
        from provisioning.identity import write_secret

        text = user_data(bundle.path, hostname=f"yimi-{bundle.name}", source=args.source)
        write_secret(args.user_data, text.encode())
        print(
            f"cloud-init user-data (holds the device keys, mode 0600) written to {args.user_data}"
        )
    return EXIT_OK


def cmd_device_list(args: argparse.Namespace) -> int:
    from hub.timeline import HubStore
    from provisioning.home import Home

    home = Home.load(args.home)
    registry = home.registry()
    store = HubStore(home.path / "hub.db")
    try:
        presence = store.presence()
        devices = registry.devices()
    finally:
        registry.close()
        store.close()
    print(f"{'NAME':<16} {'PROFILE':<8} {'DEVICE ID':<17} {'STATE':<8} {'LAST SEEN':<20} ENROLLED")
    for d in devices:
        p = presence.get(d.device_id)
        state = "revoked" if d.revoked else (p.state if p else "never")
        print(
            f"{d.name:<16} {d.profile:<8} {d.device_id:<17} {state:<8} "
            f"{fmt_ms(p.last_seen_ms if p else None):<20} {d.enrolled_by} {fmt_ms(d.created_ms)}"
        )
    return EXIT_OK


def cmd_device_revoke(args: argparse.Namespace) -> int:
    from provisioning.home import Home

    home = Home.load(args.home)
    registry = home.registry()
    try:
        rec = registry.revoke(args.name)
    finally:
        registry.close()
    print(f"device {rec.name} ({rec.device_id}) revoked at {fmt_ms(rec.revoked_ms)}")
    return EXIT_OK


def cmd_device_pair(args: argparse.Namespace) -> int:
    from provisioning.pairing import PairAttempt, pair_over_grpc
    from sync.locate import parse_target

    host, port = parse_target(args.hub, 18884)
    attempt = PairAttempt.make(args.code, profile=args.profile, name=args.name)
    response, leaf = asyncio.run(pair_over_grpc(host, port, attempt.request))
    bundle = attempt.finish(response, out=args.out, hub_host=host, seen_leaf=leaf)
    print(f"paired: device {bundle.name} ({bundle.profile.name}) is {bundle.device_id}")
    print(f"hub fingerprint pinned: {bundle.pinned_fingerprint}")
    print(f"hub TLS CA pinned: {bundle.tls_ca_fingerprint}")
    print(f"bundle written to {bundle.path}")
    return EXIT_OK


def add_commands(sub: Any, command: Command) -> None:
    """Register ``yimi device …``."""
    dev = sub.add_parser("device", help="enrol, list and revoke devices")
    dev_sub = dev.add_subparsers(dest="action", required=True)
    sp = command(dev_sub, "add", cmd_device_add, "flash a device bundle (keys made here)")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--profile", required=True, help="glasses, mac, phone, watch or a YAML path")
    sp.add_argument("--name", required=True)
    sp.add_argument("--out", type=Path, required=True, help="bundle folder to create")
    sp.add_argument("--hub-host", default=None, help="hub address to pin as a hint")
    sp.add_argument("--user-data", type=Path, help="also write a cloud-init user-data file")
    sp.add_argument("--source", help="git URL the first boot clones the software from")
    sp = command(dev_sub, "list", cmd_device_list, "list enrolled devices")
    sp.add_argument("--home", type=Path, required=True)
    sp = command(dev_sub, "revoke", cmd_device_revoke, "revoke a device (refused within 1 s)")
    sp.add_argument("name")
    sp.add_argument("--home", type=Path, required=True)
    sp = command(dev_sub, "pair", cmd_device_pair, "enrol this device with a pairing code")
    sp.add_argument("--code", required=True)
    sp.add_argument("--profile", required=True)
    sp.add_argument("--name", required=True)
    sp.add_argument("--out", type=Path, required=True)
    sp.add_argument("--hub", default="127.0.0.1:18884", help="HOST[:PORT] of the hub's gRPC")
