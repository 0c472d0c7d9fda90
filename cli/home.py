"""``yimi home init``: create a home — root keys, group key, hub configuration."""

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
    print(f"home folder:      {home.path}")
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
