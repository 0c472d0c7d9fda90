"""``yimi home init|rotate-key``: create a home — root keys, group key, hub configuration —
and make a new mesh group key epoch."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cli.common import EXIT_OK, Command


def cmd_home_init(args: argparse.Namespace) -> int:
    from provisioning.home import Home
    from provisioning.identity import short_fingerprint

    home = Home.init(
        args.home,
        force=args.force,
        mqtt_port=args.mqtt_port,
        grpc_port=args.grpc_port,
        hub_host=args.hub_host,
    )
    print(f"home id:          {home.home_id}")
    print(f"hub fingerprint:  {home.fingerprint}")
    print(f"                  ({short_fingerprint(home.fingerprint)})")
    print(f"TLS CA (SHA-256): {home.tls().fingerprint}")
    print(f"home folder:      {home.path}")
    return EXIT_OK


def cmd_home_rotate_key(args: argparse.Namespace) -> int:
    from provisioning.epochs import home_keys
    from provisioning.home import Home

    home = Home.load(args.home)
    ring = home_keys(home.path, home.group_key)
    before = ring.current.number
    epoch = ring.rotate()
    print(f"mesh group key epoch {epoch.number} made (was {before})")
    if (home.path / "hub.pid").exists():
        print("the running hub sends it to every enrolled device now")
    else:
        print("the hub sends it to each device when it next comes online")
    return EXIT_OK


def add_commands(sub: Any, command: Command) -> None:
    """Register ``yimi home …``."""
    home = sub.add_parser("home", help="the home: root keys and hub configuration")
    home_sub = home.add_subparsers(dest="action", required=True)
    sp = command(home_sub, "init", cmd_home_init, "create a home: keys, group key, hub config")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--force", action="store_true", help="overwrite an existing home")
    sp.add_argument("--mqtt-port", type=int, default=18883)
    sp.add_argument("--grpc-port", type=int, default=18884)
    sp.add_argument("--hub-host", default="", help="address devices try before zeroconf")
    sp = command(home_sub, "rotate-key", cmd_home_rotate_key, "make a new mesh group key epoch now")
    sp.add_argument("--home", type=Path, required=True)
