"""The hub's MQTT broker: a supervised mosquitto process with per-device accounts and ACLs.

The broker is untrusted transport (ARCHITECTURE.md § "Mesh security"): every account has
its own password, anonymous clients are refused, and the ACL lets a device publish and
subscribe only under ``yimi/<home>/dev/<own id>/`` and read ``yimi/<home>/mesh``; the hub's
account reads and writes ``yimi/<home>/#``. Topic names come from :mod:`sync.topics`.

:class:`Broker` is an async context manager. On enter it writes ``mosquitto.conf``,
``passwd`` and ``acl`` into its work directory (mode 0700, files 0600), stops a stale
broker left by a crashed hub, starts ``mosquitto -c mosquitto.conf`` in the foreground
with ``PR_SET_PDEATHSIG=SIGTERM`` (a ``kill -9`` of the hub takes the broker with it) and
waits until the port accepts connections. A supervisor task restarts the broker with
capped, jittered backoff if it dies. :meth:`Broker.update_accounts` rewrites the account
files and sends ``SIGHUP``: mosquitto reloads them in place and disconnects clients whose
account was removed. On exit the broker gets ``SIGTERM`` (it saves its persistence
database, so queued QoS 1 messages survive), then ``SIGKILL`` after 5 s.

Limits against a hostile device (issue 15; every one is a line of ``mosquitto.conf``):

- ``use_username_as_clientid true``: a client's id is its login, whatever it sends, so a
  device cannot take over (disconnect) the hub's or another device's session. Each account
  is written with :data:`sync.mqtt.TRANSIENT_SLOTS` extra logins (``<name>.t<k>``, same
  hash, same ACL) for a node's short-lived clients (``yimi say``), see :mod:`sync.mqtt`.
- ``retain_available false``: nobody stores retained messages on the hub's broker (the hub
  publishes none; presence is not retained). A retained publish, or a last will with the
  retain flag, makes the broker drop that connection; nothing is stored.
- ``max_packet_size`` (:data:`MAX_PACKET_BYTES`): a larger packet drops the connection.
- ``max_queued_messages`` / ``max_queued_bytes`` (:data:`MAX_QUEUED_MESSAGES`,
  :data:`MAX_QUEUED_BYTES`): per client, what waits for a slow or offline session; QoS 1
  messages beyond are dropped by the broker (the sender's outbox retries).
- ``max_inflight_messages`` / ``max_inflight_bytes``: per client, unacknowledged outgoing
  QoS 1 messages.
- Mosquitto has no per-client publish rate: the hub counts each device's uplink messages
  itself and drops those over a rate before any cryptography (:mod:`hub.mesh.ratelimit`).

TLS (issue 15): the listener serves ``tls`` (:class:`BrokerTls`: the home CA and the MQTT
leaf of :mod:`provisioning.tls`; TLS 1.2 or later). Without it the listener is plaintext,
which only a loopback ``host`` may be (``tls.plaintext_not_loopback`` otherwise).

The hub's own session does not go through TLS and TCP to reach a broker on its own
machine: a second listener, a unix socket in the work directory (:attr:`Broker.local_socket`,
``mqtt.sock``), serves it. Only the hub's user can reach it (the directory is 0700), and it
asks for the same logins and applies the same ACL as the network listener. A work
directory whose path is too long for a unix socket gets no such listener (the hub then
connects over TCP, as devices do).

Note on the ACL file: ``topic`` lines before the first ``user`` line apply only to
*anonymous* clients in mosquitto 2.0 (checked against 2.0.11), so every grant here is
written under an explicit ``user`` line.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import logging
import os
import pwd
import re
import shutil
import signal
import socket
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from hub.errors import HubError
from provisioning.tls import is_loopback
from sync import topics
from sync.backoff import Backoff
from sync.mqtt import TRANSIENT_SLOTS, transient_username

log = logging.getLogger(__name__)

MOSQUITTO_BINARY = Path("/usr/sbin/mosquitto")
ROLES = ("hub", "device")

READY_TIMEOUT = 10.0
"""Seconds a freshly started mosquitto has to accept TCP connections."""
STOP_TIMEOUT = 5.0
"""Seconds between SIGTERM and SIGKILL."""
BACKOFF_INITIAL = 0.1
BACKOFF_CAP = 5.0
STABLE_RUN = 30.0
"""A broker that ran this long before dying restarts with the initial backoff again."""
POLL_INTERVAL = 0.02
LOG_TAIL_LINES = 6
LOG_ROTATE_BYTES = 4 * 1024 * 1024
LOG_SCAN_BYTES = 1024 * 1024
"""at most this much new log is scanned for refusals per call"""
AUTOSAVE_INTERVAL = 10
"""Seconds between persistence saves, bounding what a crash (not a stop) can lose."""

PR_SET_PDEATHSIG = 1

REFUSALS = (
    ("disconnected due to oversize packet", "broker.refused.oversize"),
    ("retain not supported", "broker.refused.retain"),  # a will with the retain flag
    # a retained publish (mosquitto 2.0.11 logs no reason for it), or another protocol error
    (": Unknown error.", "broker.refused.protocol"),
    ("not authorised", "broker.refused.login"),
    # a TLS handshake that failed: a plaintext client, or one pinned to another home's CA.
    # mosquitto says it one of two ways: while it takes the connection, when the client's
    # whole handshake is in already ("Client connection from ADDRESS failed: error:…"), or
    # when a handshake it went on with later fails ("OpenSSL Error[N]: error:…")
    ("OpenSSL Error[", "broker.refused.tls"),
    ("failed: error:", "broker.refused.tls"),
)
"""(line fragment of mosquitto's log, counter name): the refusals the hub only sees there"""
NOT_REFUSALS = ("unexpected eof while reading",)
"""log fragments that match a refusal but are none: a connection closed before its TLS
handshake began (the hub's own readiness probe, :func:`accepts`) is no refused client"""

LOCAL_SOCKET = "mqtt.sock"
"""the hub's own listener, in the work directory (see the module doc)"""
MAX_SOCKET_PATH = 100
"""bytes a unix socket's path may have (the kernel's limit is 107)"""
MAX_PACKET_BYTES = 512 * 1024
"""The largest MQTT packet (topic + payload + headers): twice the hub's envelope limit
(:data:`sync.envelope.MAX_ENVELOPE_BYTES`), so an oversize envelope still reaches the hub and
is counted, and a larger one never costs the hub anything."""
MAX_QUEUED_MESSAGES = 1000
MAX_QUEUED_BYTES = 16 * 1024 * 1024
"""Per client: at most this many QoS 1 messages / bytes wait beyond those in flight."""
MAX_INFLIGHT_MESSAGES = 20
MAX_INFLIGHT_BYTES = 4 * 1024 * 1024
"""Per client: outgoing QoS 1 messages not yet acknowledged."""

_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_HOME_RE = re.compile(r"[0-9a-fA-F]{1,128}")
_HASH_RE = re.compile(r"\$[67]\$[0-9]+\$[A-Za-z0-9+/]+=*\$[A-Za-z0-9+/]+=*")


@dataclass(frozen=True)
class BrokerTls:
    """The files a TLS listener serves (PEM)."""

    cafile: Path
    certfile: Path
    keyfile: Path


@dataclass(frozen=True)
class BrokerAccount:
    """One broker login. ``password_hash`` is a mosquitto ``$7$`` hash, see
    :func:`provisioning.credentials.mosquitto_hash`; ``role`` is ``"hub"`` or ``"device"``.
    A device's username is its device id."""

    username: str
    password_hash: str
    role: str  # "hub" or "device"

    def __post_init__(self) -> None:
        if not _NAME_RE.fullmatch(self.username):
            raise ValueError(f"broker username {self.username!r} is not [A-Za-z0-9_.-]{{1,128}}")
        if not _HASH_RE.fullmatch(self.password_hash):
            raise ValueError(f"password hash for {self.username!r} is not a mosquitto hash")
        if self.role not in ROLES:
            raise ValueError(f"broker role {self.role!r} is not one of {ROLES}")


class Broker:
    """A supervised mosquitto process serving one home; use as ``async with``."""

    def __init__(
        self,
        workdir: Path,
        *,
        home_id: str,
        host: str = "127.0.0.1",
        port: int,
        accounts: Sequence[BrokerAccount],
        tls: BrokerTls | None = None,
    ) -> None:
        if not _HOME_RE.fullmatch(home_id):
            raise ValueError(f"home id {home_id!r} is not hex")
        if not 0 < port < 65536:
            raise ValueError(f"port {port} is out of range")
        if not host or any(c.isspace() for c in host):
            raise ValueError(f"host {host!r} is invalid")
        if tls is None and not is_loopback(host):
            raise HubError("tls.plaintext_not_loopback", host=host)
        self.tls = tls
        self.workdir = Path(workdir).absolute()
        if "\n" in str(self.workdir) or "\r" in str(self.workdir):
            raise ValueError("the broker work directory path must not contain line breaks")
        self.home_id = home_id
        self.host = host
        self.port = port
        self._accounts = _checked(accounts)
        self.restarts = 0
        self._binary: str | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._started_at = 0.0
        self._ready = asyncio.Event()
        self._stopping = False
        self._lock = asyncio.Lock()
        self._stack: contextlib.AsyncExitStack | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._refusal_offset = 0

    # -- paths -------------------------------------------------------------------------

    @property
    def conf_path(self) -> Path:
        return self.workdir / "mosquitto.conf"

    @property
    def passwd_path(self) -> Path:
        return self.workdir / "passwd"

    @property
    def acl_path(self) -> Path:
        return self.workdir / "acl"

    @property
    def pid_path(self) -> Path:
        return self.workdir / "mosquitto.pid"

    @property
    def log_path(self) -> Path:
        return self.workdir / "mosquitto.log"

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def local_socket(self) -> Path | None:
        """The unix socket the hub's own session connects to (see the module doc), or
        ``None`` when the work directory's path is too long for one."""
        path = self.workdir / LOCAL_SOCKET
        return path if len(os.fsencode(path)) <= MAX_SOCKET_PATH else None

    # -- state -------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The running mosquitto's pid, or ``None`` when none is running."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return None
        return proc.pid

    @property
    def ready(self) -> bool:
        """Whether the broker is running and was seen accepting connections."""
        return self._ready.is_set()

    @property
    def accounts(self) -> tuple[BrokerAccount, ...]:
        return self._accounts

    async def wait_ready(self) -> None:
        """Return once the broker accepts connections (e.g. after a restart)."""
        await self._ready.wait()

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> Broker:
        if self._stack is not None:
            raise RuntimeError("the broker is already running")
        self._binary = find_mosquitto()
        self._stopping = False
        self._prepare_workdir()
        await self._start()
        stack = contextlib.AsyncExitStack()
        try:
            tg = await stack.enter_async_context(asyncio.TaskGroup())
            self._supervisor = tg.create_task(
                self._supervise(), name=f"broker.supervise:{self.host}:{self.port}"
            )
        except BaseException:
            await stack.aclose()
            await self._stop_process()
            raise
        self._stack = stack
        self._ready.set()
        log.info("mosquitto running on %s:%d (pid %s)", self.host, self.port, self.pid)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stopping = True
        self._ready.clear()
        stack, self._stack = self._stack, None
        try:
            if self._supervisor is not None:
                self._supervisor.cancel()
            if stack is not None:
                await stack.__aexit__(exc_type, exc, tb)
        finally:
            self._supervisor = None
            await self._stop_process()
            with contextlib.suppress(FileNotFoundError):
                self.pid_path.unlink()

    async def update_accounts(self, accounts: Sequence[BrokerAccount]) -> None:
        """Replace the accounts: rewrite ``passwd`` and ``acl`` atomically and make the
        running mosquitto reload them (``SIGHUP``; same process, clients stay connected
        unless their account is gone)."""
        checked = _checked(accounts)
        async with self._lock:
            self._accounts = checked
            self._write_accounts()
            proc = self._proc
            # Under the lock the broker is either running and past its start (its signal
            # handlers are installed) or not running; a later start reads the new files.
            if proc is not None and proc.returncode is None and self._ready.is_set():
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGHUP)
                log.info("mosquitto reloading %d accounts (pid %d)", len(checked), proc.pid)

    # -- files -------------------------------------------------------------------------

    def _prepare_workdir(self) -> None:
        self.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.workdir, 0o700)
        self.data_dir.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.data_dir, 0o700)

    def _write_config(self) -> None:
        _write_private(self.conf_path, self._render_config())

    def _write_accounts(self) -> None:
        _write_private(self.passwd_path, self._render_passwd())
        _write_private(self.acl_path, self._render_acl())

    def _render_config(self) -> str:
        lines = [
            "# Generated by the Yimi hub on every start; edits are overwritten.",
            "per_listener_settings false",
            # Run as the hub's own user: the 0600 files are readable only by it (as root,
            # mosquitto would otherwise switch to the 'mosquitto' user and fail to read them).
            f"user {_current_user()}",
            "allow_anonymous false",
            f"password_file {self.passwd_path}",
            f"acl_file {self.acl_path}",
            "persistence true",
            f"persistence_location {self.data_dir}/",
            f"autosave_interval {AUTOSAVE_INTERVAL}",
            "persistent_client_expiration 30d",
            f"log_dest file {self.log_path}",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            "connection_messages true",
            # issue 15: see the module doc
            "retain_available false",
            f"max_packet_size {MAX_PACKET_BYTES}",
            f"max_queued_messages {MAX_QUEUED_MESSAGES}",
            f"max_queued_bytes {MAX_QUEUED_BYTES}",
            f"max_inflight_messages {MAX_INFLIGHT_MESSAGES}",
            f"max_inflight_bytes {MAX_INFLIGHT_BYTES}",
            # No Nagle on client sockets: otherwise each small message can wait ~40 ms for
            # the delayed ACK of the previous one (clients set TCP_NODELAY too, sync/mqtt.py).
            "set_tcp_nodelay true",
        ]
        local = self.local_socket
        if local is not None:  # first: the TLS lines below are the network listener's
            lines += [f"listener 0 {local}", "use_username_as_clientid true"]
        lines += [
            f"listener {self.port} {self.host}",
            # A listener setting: before the first 'listener' line it would open the
            # default listener on 1883.
            "use_username_as_clientid true",
        ]
        if self.tls is not None:
            for name, path in (
                ("cafile", self.tls.cafile),
                ("certfile", self.tls.certfile),
                ("keyfile", self.tls.keyfile),
            ):
                if "\n" in str(path) or "\r" in str(path):
                    raise ValueError("TLS file paths must not contain line breaks")
                lines.append(f"{name} {Path(path).absolute()}")
            lines.append("tls_version tlsv1.2")
        return "\n".join(lines) + "\n"

    def _render_passwd(self) -> str:
        return "".join(
            f"{login}:{a.password_hash}\n" for a in self._accounts for login in logins(a)
        )

    def _render_acl(self) -> str:
        home = self.home_id
        out = [
            "# Generated by the Yimi hub; edits are overwritten.",
            "# No topic line precedes the first 'user' line: such lines apply to anonymous",
            "# clients only, and anonymous clients are refused.",
        ]
        for a in self._accounts:
            for login in logins(a):
                out.append("")
                out.append(f"user {login}")
                if a.role == "hub":
                    out.append(f"topic readwrite {topics.ROOT}/{home}/#")
                else:
                    out.append(f"topic readwrite {topics.device_root(home, a.username)}/#")
                    out.append(f"topic read {topics.mesh(home)}")
        return "\n".join(out) + "\n"

    def refusals(self) -> Counter[str]:
        """What the broker refused since the last call (or since it started), counted by
        :data:`REFUSALS` from new complete lines of its log."""
        found: Counter[str] = Counter()
        try:
            with self.log_path.open("rb") as f:
                size = f.seek(0, os.SEEK_END)
                if size < self._refusal_offset:  # rotated
                    self._refusal_offset = 0
                f.seek(max(self._refusal_offset, size - LOG_SCAN_BYTES))
                data = f.read()
        except OSError:
            return found
        end = data.rfind(b"\n") + 1
        self._refusal_offset = size - len(data) + end
        for line in data[:end].decode("utf-8", "replace").splitlines():
            if any(fragment in line for fragment in NOT_REFUSALS):
                continue
            for fragment, name in REFUSALS:
                if fragment in line:
                    found[name] += 1
                    break
        return found

    def _log_tail(self, offset: int = 0) -> str:
        """The last lines mosquitto wrote since ``offset``, as one line."""
        try:
            with self.log_path.open("rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(offset, size - 8192))
                data = f.read()
        except OSError:
            return ""
        lines = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines()]
        return " | ".join([ln for ln in lines if ln][-LOG_TAIL_LINES:])

    def _rotate_log(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            if self.log_path.stat().st_size > LOG_ROTATE_BYTES:
                os.replace(self.log_path, self.log_path.with_name(self.log_path.name + ".1"))

    # -- process -----------------------------------------------------------------------

    async def _start(self) -> None:
        """Write the files, clear a stale broker, spawn mosquitto and wait until it listens."""
        async with self._lock:
            self._write_config()
            self._write_accounts()
            await self._stop_stale()
            self._check_port_free()
            self._rotate_log()
            offset = _file_size(self.log_path)
            if self.restarts == 0 or offset < self._refusal_offset:  # not older runs' lines
                self._refusal_offset = offset
            proc = await self._spawn()
            try:
                await self._wait_listening(proc, offset)
            except BaseException:
                await _kill(proc)
                raise
            self._started_at = asyncio.get_running_loop().time()

    async def _spawn(self) -> asyncio.subprocess.Process:
        assert self._binary is not None
        out = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            proc = await asyncio.create_subprocess_exec(
                self._binary,
                "-c",
                str(self.conf_path),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
                preexec_fn=die_with_parent(os.getpid()),
            )
        except OSError as exc:
            raise HubError("broker.failed", port=self.port, reason=str(exc)) from exc
        finally:
            os.close(out)
        self._proc = proc
        _write_private(self.pid_path, f"{proc.pid}\n")
        return proc

    async def _wait_listening(self, proc: asyncio.subprocess.Process, offset: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_TIMEOUT
        while True:
            if proc.returncode is not None:
                raise self._start_error(proc.returncode, offset)
            if await accepts(_connect_host(self.host), self.port):
                if proc.returncode is None:
                    return
                continue
            if loop.time() >= deadline:
                tail = self._log_tail(offset)
                raise HubError(
                    "broker.failed",
                    port=self.port,
                    reason=f"not listening after {READY_TIMEOUT:g} s; log: {tail or '(empty)'}",
                )
            await asyncio.sleep(POLL_INTERVAL)

    def _start_error(self, returncode: int, offset: int) -> HubError:
        tail = self._log_tail(offset)
        if "Address already in use" in tail:
            return HubError("port.in_use", host=self.host, port=self.port)
        return HubError("broker.failed", port=self.port, reason=tail or f"exit status {returncode}")

    def _check_port_free(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((self.host, self.port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise HubError("port.in_use", host=self.host, port=self.port) from None
                raise HubError(
                    "broker.failed", port=self.port, reason=f"cannot bind {self.host}: {exc}"
                ) from None

    async def _stop_stale(self) -> None:
        """Stop a mosquitto left running on our config by a hub that crashed."""
        try:
            pid = int(self.pid_path.read_text().strip())
        except (OSError, ValueError):
            return
        current = self._proc
        if current is not None and current.pid == pid and current.returncode is None:
            return
        if not _runs_conf(pid, self.conf_path):
            return
        log.warning("stopping stale mosquitto (pid %d) from a previous run", pid)
        loop = asyncio.get_running_loop()
        for sig, wait in ((signal.SIGTERM, STOP_TIMEOUT), (signal.SIGKILL, STOP_TIMEOUT)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            deadline = loop.time() + wait
            while _runs_conf(pid, self.conf_path):
                if loop.time() >= deadline:
                    break
                await asyncio.sleep(POLL_INTERVAL)
            else:
                return
        raise HubError("broker.failed", port=self.port, reason=f"stale mosquitto {pid} survives")

    async def _stop_process(self) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
                try:
                    await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
                except TimeoutError:
                    log.warning(
                        "mosquitto (pid %d) ignored SIGTERM for %g s; killing it",
                        proc.pid,
                        STOP_TIMEOUT,
                    )
                    await _kill(proc)
        except BaseException:
            await _kill(proc)
            raise
        finally:
            self._ready.clear()
        log.info("mosquitto (pid %d) stopped with status %s", proc.pid, proc.returncode)

    async def _supervise(self) -> None:
        """Wait for the broker process; restart it with backoff whenever it dies."""
        loop = asyncio.get_running_loop()
        backoff = Backoff(initial=BACKOFF_INITIAL, cap=BACKOFF_CAP)
        while True:
            proc = self._proc
            assert proc is not None
            returncode = await proc.wait()
            if self._stopping:
                return
            self._ready.clear()
            if loop.time() - self._started_at >= STABLE_RUN:
                backoff.reset()
            log.warning(
                "mosquitto (pid %d) exited unexpectedly with status %s; log: %s",
                proc.pid,
                returncode,
                self._log_tail() or "(empty)",
            )
            while True:
                await asyncio.sleep(backoff.next_delay())
                self.restarts += 1
                try:
                    await self._start()
                except (HubError, OSError) as exc:
                    log.error("mosquitto restart %d failed: %s; retrying", self.restarts, exc)
                    continue
                break
            self._ready.set()
            log.info("mosquitto restarted (pid %s, restart %d)", self.pid, self.restarts)


# -- helpers -------------------------------------------------------------------------------


def logins(account: BrokerAccount) -> tuple[str, ...]:
    """Every login of ``account``: its username, then its transient logins."""
    return (
        account.username,
        *(transient_username(account.username, k) for k in range(TRANSIENT_SLOTS)),
    )


def _checked(accounts: Sequence[BrokerAccount]) -> tuple[BrokerAccount, ...]:
    seen: set[str] = set()
    for a in accounts:
        for login in logins(a):
            if login in seen:
                raise ValueError(f"duplicate broker username {login!r}")
            seen.add(login)
    return tuple(accounts)


def find_mosquitto() -> str:
    if os.access(MOSQUITTO_BINARY, os.X_OK):
        return str(MOSQUITTO_BINARY)
    found = shutil.which("mosquitto")
    if found is None:
        raise HubError("broker.missing")
    return found


def _current_user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically with mode 0600."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    os.close(fd)
    os.replace(tmp, path)


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _runs_conf(pid: int, conf: Path) -> bool:
    """Whether ``pid`` is a live process whose command line names ``conf``."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return str(conf).encode() in raw.split(b"\0")


def _connect_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


async def accepts(host: str, port: int) -> bool:
    try:
        async with asyncio.timeout(1.0):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


def die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child receive SIGTERM when the hub dies."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def preexec() -> None:
        if prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent_pid:  # the hub died before prctl took effect
            os._exit(1)

    return preexec


def mosquitto_pids(fragment: str) -> list[int]:
    """Pids of live mosquitto processes whose command line mentions ``fragment``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "mosquitto" in cmd and fragment in cmd:
            pids.append(int(entry.name))
    return pids
