"""systemd's readiness protocol (``sd_notify``) without a new dependency.

A service of ``Type=notify`` is started when it says so: a datagram ``READY=1`` to the
AF_UNIX socket named by ``$NOTIFY_SOCKET`` (a name starting with ``@`` is in the abstract
namespace). The hub says it at the moment it logs "hub … up" (subscribed to every device's
uplink), then ``STOPPING=1`` on its way out; with ``$WATCHDOG_USEC`` set (``WatchdogSec=``)
it sends ``WATCHDOG=1`` every half of that period while its event loop runs.

The hub takes these variables out of its environment when it starts (:func:`take_env`), so
no child inherits them: mosquitto (built with systemd support) would say ``READY=1`` itself
at its own start, long before the hub is subscribed.

Without ``$NOTIFY_SOCKET`` (not started by systemd: a terminal, a test) nothing is sent. A
notification that cannot be sent is logged and the hub goes on: readiness is the service
manager's business, never a reason to stop serving.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Mapping
from types import TracebackType

from sync.tasks import TaskOwner

log = logging.getLogger(__name__)

NOTIFY_SOCKET = "NOTIFY_SOCKET"
WATCHDOG_USEC = "WATCHDOG_USEC"
WATCHDOG_PID = "WATCHDOG_PID"


NOTIFY_VARIABLES = (NOTIFY_SOCKET, WATCHDOG_USEC, WATCHDOG_PID)


def take_env() -> dict[str, str]:
    """The service manager's variables, removed from this process's environment (like
    ``sd_notify``'s ``unset_environment``): only this process speaks to it."""
    return {name: os.environ.pop(name) for name in NOTIFY_VARIABLES if name in os.environ}


def socket_address(name: str) -> str | bytes | None:
    """The address to send to for ``$NOTIFY_SOCKET`` = ``name``: a path, or the abstract
    name (``@x`` → ``b"\\0x"``); ``None`` for an empty or unusable one."""
    if not name:
        return None
    if name.startswith("@"):
        return b"\0" + name[1:].encode()
    if name.startswith("/"):
        return name
    return None  # systemd only hands out absolute paths and abstract names (vsock: not here)


def notify(state: str, env: Mapping[str, str] | None = None) -> bool:
    """Send ``state`` (newline-separated ``KEY=value`` lines) to the service manager; whether
    it was sent (``False`` without ``$NOTIFY_SOCKET``). Never raises."""
    address = socket_address((os.environ if env is None else env).get(NOTIFY_SOCKET, ""))
    if address is None:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(state.encode(), address)
    except OSError as exc:
        log.warning("systemd notification %r not sent: %s", state.split("\n", 1)[0], exc)
        return False
    return True


def watchdog_interval(env: Mapping[str, str] | None = None) -> float | None:
    """Seconds between ``WATCHDOG=1`` pings (half the watchdog period), or ``None`` when no
    watchdog is asked for this process (``$WATCHDOG_PID`` names another one)."""
    env = os.environ if env is None else env
    try:
        usec = int(env.get(WATCHDOG_USEC, "0"))
        pid = int(env.get(WATCHDOG_PID, "0") or "0")
    except ValueError:
        return None
    if usec <= 0 or (pid and pid != os.getpid()):
        return None
    return usec / 2_000_000


class ServiceNotifier:
    """An async context manager for the service's side of the protocol: :meth:`ready` once
    serving, the watchdog task (owned: cancelled on exit), ``STOPPING=1`` on exit."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = dict(env)
        self._tasks = TaskOwner("notify")
        self.sent: list[str] = []
        """every notification sent (what systemd was told)"""

    @property
    def active(self) -> bool:
        """Whether a service manager listens (``$NOTIFY_SOCKET`` is set)."""
        return socket_address(self._env.get(NOTIFY_SOCKET, "")) is not None

    def send(self, state: str) -> bool:
        if not self.active:
            return False
        sent = notify(state, self._env)
        if sent:
            self.sent.append(state)
        return sent

    async def __aenter__(self) -> ServiceNotifier:
        interval = watchdog_interval(self._env)
        if interval is not None and self.active:
            self._tasks.spawn(self._watchdog(interval), "watchdog")
        return self

    def ready(self, status: str) -> None:
        """The service is up: ``READY=1`` with a one-line ``STATUS=``."""
        self.send(f"READY=1\nSTATUS={_one_line(status)}")

    def status(self, status: str) -> None:
        self.send(f"STATUS={_one_line(status)}")

    async def _watchdog(self, interval: float) -> None:
        while True:
            self.send("WATCHDOG=1")
            await asyncio.sleep(interval)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.send("STOPPING=1\nSTATUS=stopping")
        await self._tasks.close()


def _one_line(text: str) -> str:
    return " ".join(text.split())
