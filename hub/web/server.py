"""The web server: uvicorn's ``Server.serve()`` inside the hub's loop, on its own port.

:class:`WebServer` is an async context manager owning one named task. The listening socket
is bound before it is entered returns (a port in use fails the hub's start, as the broker's
and gRPC's do). With ``tls`` (certificate and key files, e.g. the home CA's leaf from
``provisioning/tls.py``) it serves HTTPS on ``host``; without, it serves plain HTTP on
127.0.0.1 only (browsers treat ``http://localhost`` as a secure context: WebCrypto and
WebAuthn work there, and nothing leaves the machine).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Generator
from types import TracebackType

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hub.web.errors import WebError
from hub.web.options import WebTls

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
STOP_S = 3.0
"""seconds the server has to finish open requests and streams when the hub stops"""


class _InLoopServer(uvicorn.Server):
    """uvicorn's server without its signal handlers: the hub owns the process's signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def durable_responses(app: ASGIApp, durable: Callable[[], Awaitable[None]]) -> ASGIApp:
    """``app``, whose every HTTP response starts only once ``durable`` returned: a page
    that says "done" (a typed request taken, a card answered) says it after the hub's
    writes are on disk (:meth:`storage.group_commit.GroupCommit.flush`). A stream (server
    events) waits once, before its headers."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def send_durably(message: Message) -> None:
            if message["type"] == "http.response.start":
                await durable()
            await send(message)

        await app(scope, receive, send_durably)

    return wrapped


class WebServer:
    """Serve ``app`` on ``host:port`` until the context is left."""

    def __init__(self, app: ASGIApp, *, host: str, port: int, tls: WebTls | None = None) -> None:
        if tls is None and host != LOOPBACK:
            log.warning("no TLS certificate for the web pages: serving on %s only", LOOPBACK)
            host = LOOPBACK
        self.host, self.port, self.tls = host, port, tls
        self.scheme = "https" if tls else "http"
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=int(STOP_S),
            ssl_certfile=str(tls.certfile) if tls else None,
            ssl_keyfile=str(tls.keyfile) if tls else None,
        )
        self._server = _InLoopServer(config)
        self._task: asyncio.Task[None] | None = None
        self._sock: socket.socket | None = None

    async def __aenter__(self) -> WebServer:
        try:
            self._server.config.load()  # a bad certificate or key fails the start, here
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise WebError("web.start_failed", host=self.host, port=self.port, reason=exc) from exc
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            raise WebError("port.in_use", port=self.port, host=self.host) from None
        sock.listen(128)
        sock.setblocking(False)
        self._sock = sock
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="web-server")
        self._task.add_done_callback(self._ended)
        log.info("web pages on %s://%s:%d", self.scheme, self.host, self.port)
        return self

    def _ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("the web pages stopped: %s", task.exception())

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task, self._task = self._task, None
        if task is not None:
            self._server.should_exit = True
            self._server.force_exit = True  # event streams never end by themselves
            try:
                await asyncio.wait_for(asyncio.shield(task), STOP_S + 2)
            except TimeoutError:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            except Exception:
                pass  # told by _ended
        if self._sock is not None:
            self._sock.close()
            self._sock = None
