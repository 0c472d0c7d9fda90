"""``yimi``: the one console command. Each command group is a module of this package with an
``add_commands(subparsers, command)``; this module assembles the parser and runs a handler.

Exit status: 0 done; 1 a refused or failed operation (one line on stderr); 2 usage;
3 the hub was unreachable and the utterance was queued (``yimi say``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

# gRPC's core logs a refused TLS handshake at info level on stderr (a line per attempt):
# the refusal is said once, as a YimiError (sync/tls.py)
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from cli import (
    archive,
    brain,
    device,
    edge,
    gateway,
    home,
    hub,
    memory,
    models,
    pay,
    recall,
    timeline,
    vision,
    voice,
    wake,
    worldline,
    wyoming,
)
from cli.common import EXIT_ERROR, EXIT_LATE, EXIT_OK, EXIT_QUEUED, EXIT_USAGE, Handler, exit_now
from demo import narrated
from protos.errors import YimiError

__all__ = [
    "EXIT_ERROR",
    "EXIT_LATE",
    "EXIT_OK",
    "EXIT_QUEUED",
    "EXIT_USAGE",
    "build_parser",
    "main",
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="yimi", description="Yimi Mesh: your own assistant, on your own devices."
    )
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    sub = p.add_subparsers(dest="command", required=True)

    def command(parent: Any, name: str, handler: Handler, help_: str) -> argparse.ArgumentParser:
        sp: argparse.ArgumentParser = parent.add_parser(name, help=help_, description=help_)
        sp.set_defaults(handler=handler)
        return sp

    for group in (home, device, hub, edge, timeline, gateway, archive):
        group.add_commands(sub, command)
    memory_sub = memory.add_commands(sub, command)
    recall.add_search_command(memory_sub, command)
    for group in (pay, models, brain, voice, vision, wake, wyoming, worldline, narrated):
        group.add_commands(sub, command)
    return p


def main(argv: list[str] | None = None) -> int:
    """The ``yimi`` process (``argv`` ``None``: the command line, the console script and
    ``python -m cli``; then the process umask is made private, 0o077, so whatever a command
    or a library writes in HOME or a bundle is 0600/0700 — see :mod:`storage.private` — and
    the process ends through :func:`exit_now` once the command is done). Called with
    ``argv`` (tests, in-process) the caller's umask is left alone and the status returned."""
    if argv is not None:
        return _command(argv)
    from storage.private import private_umask

    private_umask()
    exit_now(_command(None))


def _command(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except YimiError as exc:
        print(f"yimi: {exc.text(os.environ.get('YIMI_LANG', 'en'))}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        print(f"yimi: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
