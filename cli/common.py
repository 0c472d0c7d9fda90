"""What every ``yimi`` command group shares: exit codes, the handler type, logging setup,
running a long-lived service, and how a time is shown."""

from __future__ import annotations

import argparse
import asyncio
import atexit
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_QUEUED, EXIT_LATE = 0, 1, 2, 3, 4
"""0 done; 1 a refused or failed operation (one line on stderr); 2 usage; 3 the hub was
unreachable and the utterance was queued (``yimi say``); 4 the hub admitted the utterance
but its reply is late: it will appear on the timeline (``yimi say``)"""

Handler = Callable[[argparse.Namespace], int]
"""a subcommand: parsed arguments in, exit status out"""

Command = Callable[..., argparse.ArgumentParser]
"""``command(subparsers, name, handler, help)``: add one subcommand (``cli.main``'s helper)"""


def exit_now(status: int) -> NoReturn:
    """End the ``yimi`` process with ``status``, skipping the interpreter's teardown.

    A command is done when its handler returns: its services were left (files closed,
    connections and servers stopped, tasks awaited). What remains is CPython freeing every
    module's objects one by one — the intent templates, the MCP types, gRPC: about a second
    of CPU in a hub, tenths in ``yimi say``, paid by whoever waits for the process to end.
    The atexit handlers still run (logging's flush among them) and stdout/stderr are
    flushed; with a non-daemon thread still running, the ordinary exit (which joins it)."""
    if any(not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(status)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more to say
            pass
    os._exit(status)


def fmt_ms(ms: int | None) -> str:
    """A wall-clock time in milliseconds as local ``YYYY-MM-DD HH:MM:SS`` (``-`` for none)."""
    if not ms:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def setup_logging(verbose: int, default: int = logging.INFO) -> None:
    level = logging.DEBUG if verbose > 0 else default
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    for noisy in ("grpc", "zeroconf", "aiomqtt", "mqtt"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))


def run_service(coro_factory: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run a long-lived service until SIGTERM/SIGINT; then leave its context cleanly."""

    async def main() -> int:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        try:
            return await coro_factory()
        except asyncio.CancelledError:
            return EXIT_OK

    return asyncio.run(main())
