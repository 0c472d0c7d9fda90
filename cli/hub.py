"""``yimi hub run|status|pair-code``: run and inspect the hub.

:func:`loopback_hub_args` and :func:`hub_is_up` are how the demo, the test harness and the
benches start a hub process and know it is serving.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from pathlib import Path
from typing import Any

from cli.common import EXIT_OK, Command, fmt_ms, run_service, setup_logging
from cli.device import cmd_device_list


def loopback_hub_args(home: Path, mqtt_port: int, grpc_port: int) -> list[str]:
    """``yimi`` arguments that run the hub of ``home`` on 127.0.0.1 with these ports (the
    demo, the test harness and the benches start hub processes with them)."""
    return [
        "hub",
        "run",
        "--home",
        str(home),
        "--bind",
        "127.0.0.1",
        "--mqtt-port",
        str(mqtt_port),
        "--grpc-port",
        str(grpc_port),
    ]


HUB_UP = re.compile(r"\bhub [0-9a-f]+ up: ")
"""the line a hub process logs once it is subscribed and serving (``HubDaemon``)"""


def hub_is_up(log_text: str) -> bool:
    """Whether a hub process's log says it is up (subscribed to every device's uplink)."""
    return HUB_UP.search(log_text) is not None


def cmd_hub_run(args: argparse.Namespace) -> int:
    from hub.mesh.daemon import HubDaemon, HubOptions
    from hub.web.options import WebTls
    from provisioning.home import Home

    setup_logging(args.verbose)
    home = Home.load(args.home)
    options = HubOptions(
        mqtt_port=args.mqtt_port or home.mqtt_port,
        grpc_port=args.grpc_port or home.grpc_port,
        bind=args.bind,
        advertise=not args.no_advertise,
        plaintext=args.plaintext,
        web_port=args.web_port,
        web_tls=WebTls(args.web_cert, args.web_key) if args.web_cert and args.web_key else None,
    )

    async def serve() -> int:
        async with HubDaemon(home, options):
            await asyncio.Event().wait()
        return EXIT_OK

    return run_service(serve)


def cmd_hub_status(args: argparse.Namespace) -> int:
    from hub.mesh.daemon import hub_pid
    from hub.timeline import HubStore

    pid = hub_pid(args.home)
    print(f"hub: running (pid {pid})" if pid else "hub: not running")
    _print_group_key(args.home)
    _print_tls(args.home)
    cmd_device_list(args)
    store = HubStore(args.home / "hub.db")
    try:
        counters = store.counters()
    finally:
        store.close()
    print("\nmessages:")
    if not counters:
        print("  (none yet)")
    for name, value in counters.items():
        print(f"  {name:<32} {value}")
    return EXIT_OK


def _print_group_key(home: Path) -> None:
    from provisioning.epochs import HOME_FILE, GroupKeys

    path = home / HOME_FILE
    if not path.exists():
        print("mesh group key: epoch 0 (the key in every bundle; never rotated)")
        return
    current = GroupKeys.load(path, legacy=b"").current
    print(f"mesh group key: epoch {current.number}, made {fmt_ms(current.made_ms)}")


def _print_tls(home: Path) -> None:
    from provisioning import tls

    fingerprint, until = tls.status(home)
    if not fingerprint:
        print("TLS: no home CA yet (made at the hub's next start)")
        return
    leaves = f"leaves valid until {until:%Y-%m-%d}" if until else "no leaves yet"
    print(f"TLS: home CA {fingerprint[:16]}…, {leaves} (renewed at start when near expiry)")


def cmd_hub_pair_code(args: argparse.Namespace) -> int:
    from provisioning.home import Home
    from provisioning.pairing import issue_code

    home = Home.load(args.home)
    code, expires = issue_code(home, ttl_s=args.ttl)
    print(code)
    print(
        f"valid once, until {fmt_ms(expires)}; hub fingerprint {home.fingerprint}", file=sys.stderr
    )
    return EXIT_OK


def add_commands(sub: Any, command: Command) -> None:
    """Register ``yimi hub …``."""
    hub = sub.add_parser("hub", help="run and inspect the hub")
    hub_sub = hub.add_subparsers(dest="action", required=True)
    sp = command(hub_sub, "run", cmd_hub_run, "run the hub: broker, gRPC, zeroconf, timeline")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--mqtt-port", type=int)
    sp.add_argument("--grpc-port", type=int)
    sp.add_argument("--bind", default="0.0.0.0", help="listen address (127.0.0.1 for local only)")
    sp.add_argument("--no-advertise", action="store_true", help="no zeroconf advertisement")
    sp.add_argument(
        "--plaintext",
        action="store_true",
        help="no TLS (debugging; only with --bind 127.0.0.1; devices need YIMI_PLAINTEXT=1)",
    )
    sp.add_argument(
        "--web-port", type=int, help="serve the phone companion and dashboard pages on this port"
    )
    sp.add_argument("--web-cert", type=Path, help="the pages' HTTPS certificate (PEM)")
    sp.add_argument("--web-key", type=Path, help="the pages' HTTPS key (PEM)")
    sp = command(hub_sub, "status", cmd_hub_status, "devices, presence and message counts")
    sp.add_argument("--home", type=Path, required=True)
    sp = command(hub_sub, "pair-code", cmd_hub_pair_code, "print a one-time pairing code")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--ttl", type=int, default=600, help="seconds the code stays valid")
