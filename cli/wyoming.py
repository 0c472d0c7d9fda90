"""``yimi wyoming serve``: the hub with its Wyoming server, for Home Assistant.

The Wyoming services (speech-to-text, wake word, text-to-speech, intent handling) live in
the hub process (``hub/voice/wyoming.py``): the hub alone owns the timeline, the recogniser
and the brain. So ``yimi wyoming serve`` runs the hub (as ``yimi hub run`` does) with the
Wyoming port open; ``wyoming:`` in home.yaml does the same for ``yimi hub run``.
"""

from __future__ import annotations

import argparse
from typing import Any

from cli.common import Command
from cli.hub import add_run_arguments, serve_hub

DEFAULT_PORT = 10700


def cmd_wyoming_serve(args: argparse.Namespace) -> int:
    return serve_hub(args, wyoming_port=args.port)


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
    add_run_arguments(sp)
    sp.add_argument("--port", type=int, default=DEFAULT_PORT, help="the Wyoming port")
