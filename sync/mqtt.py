"""One MQTT session kept alive: connect, subscribe, dispatch, reconnect with backoff.

:class:`MqttSession` is an async context manager that owns its connection task. Each
connection gets a fresh last will (so the will can carry a fresh signed envelope) and runs
``on_connect`` as a task of that connection; message handlers never take the loop down.

The hub's broker binds the client id to the login (``use_username_as_clientid``,
:mod:`hub.mesh.broker`): whatever id a client sends, its session is its username's, so one
device cannot take over (and disconnect) the hub's or another device's session. The one
long-lived session of a node (the hub, a device's ``edge run``) logs in as the node itself;
short-lived clients of the same node (``yimi say``, tools, tests) log in as one of its
:data:`TRANSIENT_SLOTS` transient logins (:func:`transient_username`, same password, same
ACL), so they never take over the node's own session; the one a process holds by a lock file
(:class:`SlotLease`, in the bundle's state folder) so that they do not take over each other's
either (without a free slot or a lock folder: a random slot per connection).

aiomqtt makes the connection and its subscriptions; the session reads messages from the
connection's queue itself (not ``client.messages``, which makes a task and an
``asyncio.wait`` per message), writes packets from the loop (:class:`WriteSoon`) and waits
for acknowledgements itself (:class:`Acks`) — three places that reach into aiomqtt's client
(its paho client and its ``_disconnected`` future), kept to this module.

Every session speaks TLS to the broker, verified against the home CA (``tls``, a
:class:`~sync.tls.ClientTls`; plaintext only as that allows: to loopback, when asked) —
except the hub's own session to its own broker over a unix socket (:data:`LOCAL_PORT`).
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import secrets
import socket
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, cast

import aiomqtt
import paho.mqtt.client as paho

from sync.backoff import Backoff
from sync.errors import SyncError
from sync.tasks import stop_tasks
from sync.tls import ClientTls, tls_refusal

log = logging.getLogger(__name__)

Target = tuple[str, int]
"""(host, port) of the broker; with port :data:`LOCAL_PORT`, host is a unix socket's path"""
LOCAL_PORT = 0
"""the port of a :data:`Target` that is a unix socket: the hub's own broker on its own
machine (:attr:`hub.mesh.broker.Broker.local_socket`), reached without TCP or TLS — only
the hub's user can reach the socket, and the broker asks for the same login"""
SOCKET_OPTIONS = ((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),)
"""No Nagle: with it, a small publish waits for the ACK of the previous small packet, which
the peer delays (~40 ms) — every hop of a round trip stalled. The broker sets it too."""
TRANSIENT_SLOTS = 8
"""transient logins per broker account (the broker writes them all, same hash and ACL)"""
TRANSIENT_SEPARATOR = ".t"
REFUSALS = frozenset({"hub.tls_untrusted", "tls.plaintext_not_loopback"})
"""errors that retrying will not cure: the session says them once (``refused``)"""


def transient_username(username: str, slot: int) -> str:
    """The ``slot``-th transient login of ``username`` (e.g. ``hub.t3``)."""
    if not 0 <= slot < TRANSIENT_SLOTS:
        raise ValueError(f"transient slot {slot} is not in 0..{TRANSIENT_SLOTS - 1}")
    return f"{username}{TRANSIENT_SEPARATOR}{slot}"


def random_transient_username(username: str) -> str:
    return transient_username(username, secrets.randbelow(TRANSIENT_SLOTS))


class SlotLease:
    """One transient slot held by this process: an exclusive ``flock`` on
    ``<folder>/mqtt-slot-<k>.lock`` (released when the process ends, however it ends), so
    concurrent clients of one node on one machine never share a login."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._fd: int | None = None
        self.slot: int | None = None

    def acquire(self) -> int | None:
        """The first free slot, now held; ``None`` when every slot is held."""
        for slot in range(TRANSIENT_SLOTS):
            path = self._folder / f"mqtt-slot-{slot}.lock"
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self._fd, self.slot = fd, slot
            return slot
        return None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # drops the lock
        self._fd = self.slot = None


class WriteSoon:
    """Outgoing packets written by the loop itself, not through a thread-safe wake-up.

    paho asks its host to watch the socket for writing whenever it queues a packet, and
    aiomqtt answers every such ask as if it came from another thread: a
    ``call_soon_threadsafe`` (a byte through the loop's self-pipe, read back in the next
    iteration), then ``add_writer`` and, once written, ``remove_writer`` (two ``epoll``
    changes) — for every publish and every PUBACK, which was about a tenth of the hub's CPU
    on a turn. Asked on the loop's own thread, this writes everything queued with one
    ``call_soon`` instead (packets queued in the same iteration go out together); a socket
    that cannot take all of it, a failed write, or an ask from another thread (paho's
    connect, in an executor) goes to aiomqtt's way, which waits until the socket is writable
    and reports a broken connection."""

    def __init__(self, client: paho.Client, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.get_ident()
        self._fallback = client.on_socket_register_write
        self._pending = False
        self.batches = 0
        """writes done by the loop (for tests)"""
        self.waited = 0
        """writes the socket could not take whole, left to aiomqtt's writer (for tests)"""
        self._unregister_fallback = client.on_socket_unregister_write
        self._delegated = False
        """aiomqtt's writer is on the socket (:meth:`_wait`) until paho unregisters it"""
        if self._fallback is not None:  # (aiomqtt always sets one; without, paho writes)
            client.on_socket_register_write = self._register
            client.on_socket_unregister_write = self._unregister

    def _register(self, client: paho.Client, userdata: Any, sock: Any) -> None:
        if threading.get_ident() != self._thread:
            self._wait(client, userdata, sock)
        elif not self._pending:
            self._pending = True
            self._loop.call_soon(self._write, client, userdata, sock)

    def _write(self, client: paho.Client, userdata: Any, sock: Any) -> None:
        self._pending = False
        if client.socket() is None:  # closed since: nothing to write to
            return
        self.batches += 1
        try:
            client.loop_write()  # unregisters (aiomqtt's remove_writer) once all is out
        except Exception as exc:  # a broken connection: aiomqtt's writer meets it again
            log.debug("mqtt write: %s", exc)
        else:
            if not client.want_write():
                return
        self.waited += 1
        self._wait(client, userdata, sock)  # still registered: written when writable

    def _wait(self, client: paho.Client, userdata: Any, sock: Any) -> None:
        """aiomqtt's way: a writer on the socket, from any thread."""
        assert self._fallback is not None  # installed only with one
        self._delegated = True
        self._fallback(client, userdata, sock)

    def _unregister(self, client: paho.Client, userdata: Any, sock: Any) -> None:
        """paho wrote everything: aiomqtt's writer comes off the socket, if it was put on
        (a write by the loop never put one on: nothing to take off)."""
        if self._delegated and self._unregister_fallback is not None:
            self._delegated = False
            self._unregister_fallback(client, userdata, sock)


class Acks:
    """Publishes waiting for their acknowledgement (a QoS 1 message's PUBACK; a QoS 0
    message's write), on one connection.

    aiomqtt's ``publish`` waits with an ``asyncio.Event`` under ``asyncio.wait_for`` — a task
    and a timer for every publish — and scans every pending call twice; the hub publishes
    about three messages per turn, so that was a few per cent of its CPU. Here a publish
    waits on one future, found by its message id when paho reports it published (paho's
    ``on_publish``, on the loop's thread), under ``asyncio.timeout`` (a timer, no task). When
    the connection ends (:meth:`close`) every publish still waiting fails at once, instead
    of after its timeout."""

    def __init__(self, client: paho.Client, loop: asyncio.AbstractEventLoop) -> None:
        self._client = client
        self._loop = loop
        self._waiting: dict[int, asyncio.Future[None]] = {}
        self._fallback: Callable[..., None] | None = client.on_publish
        """aiomqtt's (for its own publishes, if anything makes one; callback API 2)"""
        self._closed = False
        client.on_publish = self._published

    def _published(
        self, client: paho.Client, userdata: Any, mid: int, reason: Any, properties: Any
    ) -> None:
        waiter = self._waiting.pop(mid, None)
        if waiter is None:
            if self._fallback is not None:
                self._fallback(client, userdata, mid, reason, properties)
        elif not waiter.done():
            waiter.set_result(None)

    async def publish(
        self, topic: str, payload: bytes, *, qos: int, retain: bool, timeout: float
    ) -> None:
        """Publish and return once acknowledged; raise :class:`aiomqtt.MqttError` if paho
        refuses it, the connection ends first, or ``timeout`` (seconds) passes."""
        if self._closed:
            raise aiomqtt.MqttError("Disconnected")
        info = self._client.publish(topic, payload, qos, retain)
        if info.rc != paho.MQTT_ERR_SUCCESS:
            raise aiomqtt.MqttCodeError(info.rc, "Could not publish message")
        if info.is_published():
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._waiting[info.mid] = waiter
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            raise aiomqtt.MqttError("Operation timed out") from None
        finally:
            if self._waiting.get(info.mid) is waiter:
                del self._waiting[info.mid]

    def close(self) -> None:
        """The connection ended: every publish waiting fails now."""
        self._closed = True
        waiting, self._waiting = self._waiting, {}
        for waiter in waiting.values():
            if not waiter.done():
                waiter.set_exception(aiomqtt.MqttError("Disconnected while publishing"))


PUBLISH_TIMEOUT_S = 5.0
"""Seconds a publish waits for its acknowledgement before it fails (the broker hung)."""


HANDSHAKE_TIMEOUT_S = 5.0
"""Seconds the broker may take to take a connection (TCP connect and TLS handshake). paho
does both blocking, in an executor thread that cancelling the session cannot stop and that a
process waits for before it exits: a short-lived client (``yimi say --timeout 1``) sets it no
longer than its own deadline, or a hung broker keeps it alive 5 s past that deadline."""


def _given(inbox: asyncio.Queue[aiomqtt.Message | None]) -> type[asyncio.Queue[aiomqtt.Message]]:
    """``inbox`` as aiomqtt's ``queue_type`` (it makes its queue by calling it).

    A session reads its messages from the queue itself, not through ``client.messages``:
    that iterator makes a task and an ``asyncio.wait`` for every message, and the session
    needs neither — when the connection ends, ``None`` is put behind the last message."""

    def made(maxsize: int = 0) -> asyncio.Queue[aiomqtt.Message | None]:
        return inbox

    return cast("type[asyncio.Queue[aiomqtt.Message]]", made)


class MqttSession:
    def __init__(
        self,
        *,
        target: Callable[[], Awaitable[Target]],
        username: str,
        password: str,
        identifier: str,
        subscriptions: Sequence[str],
        on_message: Callable[[aiomqtt.Message], Awaitable[None]],
        tls: ClientTls,
        on_connect: Callable[[aiomqtt.Client], Awaitable[None]] | None = None,
        will: Callable[[], aiomqtt.Will | None] | None = None,
        clean_session: bool = True,
        backoff: Backoff | None = None,
        keepalive: int = 15,
        transient: bool = False,
        slot_locks: Path | None = None,
        connect_timeout: float = HANDSHAKE_TIMEOUT_S,
    ) -> None:
        """``identifier`` names the session in logs and tasks; the client id sent to the
        broker is the login (see the module doc). ``transient``: log in as a transient
        login of ``username`` (a short-lived client that must not take over the node's own
        session): the slot held in ``slot_locks`` (a :class:`SlotLease`), else a random
        one on every connection. ``connect_timeout``: see :data:`HANDSHAKE_TIMEOUT_S`."""
        self._target = target
        self._connect_timeout = connect_timeout
        self._tls = tls
        self._username = username
        self._password = password
        self._identifier = identifier
        self._subscriptions = list(subscriptions)
        self._on_message = on_message
        self._on_connect = on_connect
        self._will = will
        self._clean_session = clean_session
        self._backoff = backoff or Backoff(initial=0.2, cap=5.0)
        self._keepalive = keepalive
        self._transient = transient
        self._lease = SlotLease(slot_locks) if transient and slot_locks is not None else None
        self._acks: Acks | None = None
        """the current connection's publishes (``None`` between connections)"""
        self.writes: WriteSoon | None = None
        """how the current connection's packets are written"""
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        self.connections = 0
        """successful connections so far (1 + reconnects)"""
        self.last_error: str = ""
        self.refused = asyncio.Event()
        """set once the connection was refused for a :data:`REFUSALS` reason (``refusal``)"""
        self.refusal: SyncError | None = None
        self._login = ""
        self._where = ""

    async def __aenter__(self) -> MqttSession:
        if self._lease is not None:
            self._lease.acquire()
        self._task = asyncio.create_task(self._run(), name=f"mqtt:{self._identifier}")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            await stop_tasks([self._task], f"mqtt {self._identifier}")
            if self._task.done() and not self._task.cancelled() and self._task.exception():
                log.warning("mqtt %s ended: %s", self._identifier, self._task.exception())
        self.connected.clear()
        if self._lease is not None:
            self._lease.release()

    async def publish(
        self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False
    ) -> None:
        acks = self._acks
        if acks is None or not self.connected.is_set():
            raise SyncError("hub.unreachable", target="broker", reason="not connected")
        try:
            await acks.publish(topic, payload, qos=qos, retain=retain, timeout=PUBLISH_TIMEOUT_S)
        except aiomqtt.MqttError as exc:
            raise SyncError("hub.unreachable", target="broker", reason=exc) from None

    async def _run(self) -> None:
        while True:
            try:
                host, port = await self._target()
                await self._connect_once(host, port)
            except asyncio.CancelledError:
                raise
            except (aiomqtt.MqttError, SyncError, OSError) as exc:
                self.last_error = str(exc)
                if isinstance(exc, SyncError) and exc.key in REFUSALS:
                    self._refuse(exc)
                elif tls_refusal(self.last_error):
                    self._refuse(SyncError("hub.tls_untrusted", target=f"broker {self._where}"))
                else:
                    log.info("mqtt %s: %s", self._identifier, exc)
            finally:
                self.connected.clear()
                self._acks = None
            await asyncio.sleep(self._backoff.next_delay())

    def _refuse(self, exc: SyncError) -> None:
        """The hub reached is not the pinned one (or plaintext was asked for off loopback):
        said once, kept trying (the right hub may come)."""
        self.last_error = str(exc)
        if self.refusal is None:
            log.warning("mqtt %s: %s", self._identifier, exc)
        self.refusal = exc
        self.refused.set()

    @property
    def login(self) -> str:
        """The username (and so client id) of the current or last connection."""
        return self._login or self._username

    async def _connect_once(self, host: str, port: int) -> None:
        if not self._transient:
            login = self._username
        elif self._lease is not None and self._lease.slot is not None:
            login = transient_username(self._username, self._lease.slot)
        else:
            login = random_transient_username(self._username)
        self._login = login
        local = port == LOCAL_PORT
        self._where = host if local else f"{host}:{port}"
        inbox: asyncio.Queue[aiomqtt.Message | None] = asyncio.Queue()
        client = aiomqtt.Client(
            host,
            1883 if local else port,  # paho checks the port even of a unix socket
            transport="unix" if local else "tcp",
            username=login,
            password=self._password,
            identifier=login,
            will=self._will() if self._will else None,
            clean_session=self._clean_session,
            keepalive=self._keepalive,
            timeout=5.0,
            max_queued_outgoing_messages=10_000,
            queue_type=_given(inbox),
            socket_options=() if local else SOCKET_OPTIONS,
            tls_context=None if local else self._tls.ssl_context(host),
        )
        client._client.connect_timeout = self._connect_timeout  # paho's, in its thread
        loop = asyncio.get_running_loop()
        self.writes = WriteSoon(client._client, loop)
        acks = Acks(client._client, loop)
        async with client:
            ended = client._disconnected  # aiomqtt's: done when the connection ends

            def end(done: asyncio.Future[None]) -> None:
                if not done.cancelled():
                    done.exception()  # read below; retrieved here so asyncio never warns
                acks.close()
                inbox.put_nowait(None)

            ended.add_done_callback(end)
            for topic in self._subscriptions:
                await client.subscribe(topic, qos=1)
            self._acks = acks
            self.connections += 1
            self._backoff.reset()
            self.connected.set()
            log.debug("mqtt %s connected to %s", self._identifier, self._where)
            hook = (
                asyncio.create_task(
                    self._guarded_on_connect(client), name=f"on-connect:{self._identifier}"
                )
                if self._on_connect is not None
                else None
            )
            try:
                while (message := await inbox.get()) is not None:
                    try:
                        await self._on_message(message)
                    except (aiomqtt.MqttError, SyncError) as exc:  # the link dropped mid-handler
                        log.info("mqtt %s: handler stopped: %s", self._identifier, exc)
                    except Exception:  # a handler bug must not take the session down
                        log.exception(
                            "mqtt %s: handler failed on %s", self._identifier, message.topic
                        )
            finally:
                if hook is not None:
                    hook.cancel()
                    await asyncio.gather(hook, return_exceptions=True)
            cause = None if ended.cancelled() else ended.exception()
            raise aiomqtt.MqttError("Disconnected during message iteration") from cause

    async def _guarded_on_connect(self, client: aiomqtt.Client) -> None:
        assert self._on_connect is not None
        try:
            await self._on_connect(client)
        except (aiomqtt.MqttError, SyncError) as exc:
            log.info("mqtt %s: on-connect stopped: %s", self._identifier, exc)
        except Exception:
            log.exception("mqtt %s: on-connect failed", self._identifier)
