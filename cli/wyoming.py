"""``yimi wyoming serve``: the hub with its Wyoming server, for Home Assistant.

The Wyoming services (speech-to-text, wake word, text-to-speech, intent handling) live in
the hub process (``hub/voice/wyoming.py``): the hub alone owns the timeline, the recogniser
and the brain. So ``yimi wyoming serve`` runs the hub (as ``yimi hub run`` does) with the
Wyoming port open; ``wyoming:`` in home.yaml does the same for ``yimi hub run``.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from cli.common import EXIT_OK, Command, run_service, setup_logging

DEFAULT_PORT = 10700


def cmd_wyoming_serve(args: argparse.Namespace) -> int:
    from hub.mesh.daemon import HubDaemon, HubOptions
    from provisioning.home import Home

    setup_logging(args.verbose)
    home = Home.load(args.home)
    options = HubOptions(
        mqtt_port=args.mqtt_port or home.mqtt_port,
        grpc_port=args.grpc_port or home.grpc_port,
        bind=args.bind,
        advertise=not args.no_advertise,
        wyoming_port=args.port,
    )

    async def serve() -> int:
        async with HubDaemon(home, options):
            await asyncio.Event().wait()
        return EXIT_OK

    return run_service(serve)


def add_commands(sub: Any, command: Command) -> None:
    """Register ``yimi wyoming …``."""
    wyoming = sub.add_parser("wyoming", help="Home Assistant's voice protocol")
    wyoming_sub = wyoming.add_subparsers(dest="action", required=True)
    sp = command(
        wyoming_sub,
        "serve",
        cmd_wyoming_serve,
        "run the hub with its Wyoming server (speech-to-text, wake word, text-to-speech, "
        "intent handling) advertised as _wyoming._tcp",
    )
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--port", type=int, default=DEFAULT_PORT, help="the Wyoming port")
    sp.add_argument("--mqtt-port", type=int)
    sp.add_argument("--grpc-port", type=int)
    sp.add_argument("--bind", default="0.0.0.0", help="listen address (127.0.0.1 for local only)")
    sp.add_argument("--no-advertise", action="store_true", help="no zeroconf advertisement")
