"""Loopback ports for the servers the tests, the benches and the demo start.

Never "bind port 0, close, reuse the number": between the close and the server's own bind
another process (another pytest-xdist worker) can take the port. A server that can bind
port 0 and report what it got does that (gRPC's ``add_insecure_port`` returns the port,
asyncio and aiosmtpd servers report their sockets). What must be told its port before it
starts — mosquitto reads it from its config; a hub's MQTT and gRPC ports are written into the
home and the device bundles and stay the same across a restart — takes one from
:func:`port`.

:func:`port` hands out ports from a range owned by this process's xdist worker: worker
``gwN`` owns ``[BASE + (N+1)*SPAN, BASE + (N+2)*SPAN)``, a process outside xdist owns
``[BASE, BASE + SPAN)``. The ranges lie below the kernel's ephemeral range (32768–60999 on
Linux), so neither a server on port 0 nor an outgoing connection lands in one. Within its
range a process walks a counter from a start chosen by its pid (a subprocess of a test, or
another run on the same machine, starts elsewhere in the range), skipping ports found in use.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import threading

BASE = 20000
SPAN = 1000
MAX_WORKERS = 11
"""Worker ranges end at ``BASE + (MAX_WORKERS+1)*SPAN`` = 32000, below 32768 (``gw11`` shares
``gw0``'s range)."""
HOST = "127.0.0.1"

_WORKER_RE = re.compile(r"gw(\d+)")
_lock = threading.Lock()
_cursor: int | None = None


def worker_range(worker: str | None = None) -> range:
    """The ports owned by xdist worker ``worker`` (default: this process's, from
    ``PYTEST_XDIST_WORKER``; outside xdist the first range)."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "") if worker is None else worker
    m = _WORKER_RE.fullmatch(name)
    index = int(m.group(1)) % MAX_WORKERS + 1 if m else 0
    start = BASE + index * SPAN
    return range(start, start + SPAN)


def in_use(port: int, host: str = HOST) -> bool:
    """Whether something is bound to ``host:port`` (a listener; TIME_WAIT does not count, as
    servers bind with ``SO_REUSEADDR``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def port(host: str = HOST) -> int:
    """A port of this worker's range that nothing is bound to, never handed out before by this
    process (until the range wraps)."""
    global _cursor
    ports = worker_range()
    with _lock:
        if _cursor is None:
            _cursor = os.getpid() * 2654435761 % len(ports)  # neighbouring pids start far apart
        for _ in range(len(ports)):
            candidate = ports[_cursor]
            _cursor = (_cursor + 1) % len(ports)
            if not in_use(candidate, host):
                return candidate
    raise RuntimeError(f"every port in {ports.start}-{ports.stop - 1} is in use")
