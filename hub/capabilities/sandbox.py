"""Every package server in a sandbox: one profile per package, built from its manifest.

A :class:`SandboxProfile` says what a package's server may see and do; :func:`profile_for`
builds it from the manifest and the environment the hub hands the server, and
:func:`wrap_command` turns a server's command into one that runs under ``bubblewrap``:

- a new user, pid, ipc, uts, cgroup and **network** namespace (only ``lo``), every
  capability dropped, no new privileges (bwrap always sets it), a new session, killed when
  the hub dies, a temporary numeric uid (:func:`sandbox_uid`);
- a read-only view of the system's ``/usr`` (and a few ``/etc`` files), the Python runtime
  and virtualenv it needs, the source packages on ``sys.path`` and its own folder — never
  the hub's home (keys, databases, other packages' state) unless the manifest's ``sandbox``
  declares entries of it (core packages only: the memory package's database);
- one private writable folder, its state folder (``YIMI_STATE_DIR``), plus the workspace
  it is given (``YIMI_WORKSPACE``: a worldline fork) and the unix sockets its config names;
- rlimits (CPU seconds, address space, open files, processes) and, where the pids cgroup
  is writable, a ``pids.max`` of its own (a root-owned process ignores ``RLIMIT_NPROC``);
- declared ``egress`` enforced: the package's netns has no route anywhere; each declared
  ``host:port`` is served inside it by a relay (:mod:`hub.capabilities.sandbox_relay`)
  that reaches the hub's :class:`EgressProxy` over a unix socket, which connects only to
  the allow-list and refuses and audits anything else.

Without ``bwrap`` the host refuses to start packages (``package.sandbox_missing``) unless
the operator opted out (``YIMI_SANDBOX=off``), and says so in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import json
import logging
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from hub.capabilities.errors import CapabilityError
from hub.capabilities.manifest import Manifest

log = logging.getLogger(__name__)

RELAY = Path(__file__).with_name("sandbox_relay.py")
INSIDE_SOCKET = "/run/yimi/egress.sock"
"""where the egress proxy's socket appears inside the sandbox"""
OPT_OUT_ENV = "YIMI_SANDBOX"
"""``off``: run package servers without a sandbox (the operator's explicit choice)"""
ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "ssl",
    "ca-certificates",
    "mime.types",
    "os-release",
    "alternatives",
    "gitconfig",
)
"""the system configuration a server may read (``/etc/passwd``, ``shadow`` and the rest never)"""
SOURCE_EXCLUDED = frozenset({"tests"})
"""packages of a source checkout no server imports (a test package brings its own folder)"""
PIDS_CGROUP_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))
SIGNALS = {9: "SIGKILL", 24: "SIGXCPU", 25: "SIGXFSZ", 6: "SIGABRT", 11: "SIGSEGV", 15: "SIGTERM"}

Audit = Callable[[str, dict[str, Any]], object]
"""(kind, data) → an audit record (``AuditLog.append``)"""


@dataclass(frozen=True)
class Limits:
    """rlimits of a package's server (the manifest's ``sandbox.limits`` may lower or raise)."""

    cpu_s: int = 900
    memory_mb: int = 4096
    processes: int = 128
    open_files: int = 512


@dataclass(frozen=True)
class Endpoint:
    """One declared egress target and where the package reaches it inside its netns."""

    host: str
    port: int
    inside: str
    """the loopback address the relay listens on (``/etc/hosts`` maps ``host`` to it)"""

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class SandboxProfile:
    package: str
    uid: int
    read_only: tuple[str, ...]
    read_write: tuple[str, ...]
    home: str = ""
    """the hub's home, read-write, for a core package that declares entries of it"""
    masked: tuple[str, ...] = ()
    """entries of that home hidden from the package (everything it did not declare)"""
    sockets: tuple[str, ...] = ()
    egress: tuple[Endpoint, ...] = ()
    unresolved: tuple[str, ...] = ()
    """declared egress whose placeholders have no value: not reachable"""
    env_rewrites: tuple[tuple[str, str], ...] = ()
    """settings naming a declared IP address, handed to the server as the relay's address"""
    limits: Limits = field(default_factory=Limits)

    @property
    def network(self) -> str:
        return "egress relay only" if self.egress else "none (loopback only)"

    def describe(self) -> list[str]:
        """The lines ``yimi package show`` prints."""
        lim = self.limits
        lines = [
            "sandbox: bubblewrap (user, pid, ipc, uts, cgroup, network namespaces)",
            f"  uid inside: {self.uid}; capabilities: none; no new privileges; new session",
            f"  network: {self.network}",
        ]
        lines += [f"  egress allowed: {e.target}" for e in self.egress]
        lines += [f"  egress unresolved (not reachable): {u}" for u in self.unresolved]
        lines += [f"  {k} inside: {v} (the relay)" for k, v in self.env_rewrites]
        lines.append(
            f"  limits: cpu {lim.cpu_s} s, memory {lim.memory_mb} MiB, "
            f"processes {lim.processes}, open files {lim.open_files}"
        )
        lines += [f"  read-only: {p}" for p in self.read_only]
        lines += [f"  read-write: {p}" for p in self.read_write]
        if self.home:
            lines.append(f"  read-write: {self.home} (the hub's home, only what it declared)")
        lines += [f"  socket: {p}" for p in self.sockets]
        lines += [f"  hidden: {p}" for p in self.masked]
        return lines


def bwrap() -> str | None:
    """The ``bwrap`` executable, or ``None``."""
    return shutil.which("bwrap")


def opted_out(env: Mapping[str, str] | None = None) -> bool:
    return (env if env is not None else os.environ).get(OPT_OUT_ENV, "").lower() in {"off", "0"}


def sandbox_uid(package: str) -> int:
    """A temporary numeric uid for the package, the same for each of its starts."""
    return 60_000 + int(hashlib.sha256(package.encode()).hexdigest(), 16) % 5000


def _code_roots() -> list[Path]:
    """Folders the Python runtime imports from: the interpreter's prefixes, the venv, and
    for a source checkout on ``sys.path`` (it has a ``pyproject.toml``) only its importable
    packages — not its tests, ``.git`` or anything else."""
    roots: list[Path] = []
    roots += [Path(x) for x in (sys.base_prefix, sys.prefix, sys.exec_prefix)]
    for entry in sys.path:
        p = Path(entry or ".").resolve()
        if not p.is_dir():
            continue
        if (p / "pyproject.toml").is_file():
            roots += [
                c
                for c in sorted(p.iterdir())
                if (c / "__init__.py").is_file() and c.name not in SOURCE_EXCLUDED
            ]
        else:
            roots.append(p)
    return roots


def _home_of(env: Mapping[str, str], m: Manifest) -> Path | None:
    spec = m.raw.get("extensions", {}).get("ai.yimi.capability", {}).get("sandbox", {})
    explicit = spec.get("home_env")
    if explicit and env.get(f"YIMI_{explicit}"):
        return Path(env[f"YIMI_{explicit}"]).resolve()
    state = env.get("YIMI_STATE_DIR")
    if state:
        s = Path(state).resolve()
        if s.parent.name == "package-state":
            return s.parent.parent
    return None


def _fill(text: str, env: Mapping[str, str]) -> str | None:
    """``${NAME}`` from the server's environment (``NAME`` or ``YIMI_NAME``); ``None`` when
    one has no value."""
    out = text
    while "${" in out:
        start = out.index("${")
        end = out.find("}", start)
        if end < 0:
            return None
        name = out[start + 2 : end]
        value = env.get(name) or env.get(f"YIMI_{name}")
        if not value:
            return None
        out = out[:start] + value + out[end + 1 :]
    return out


def parse_endpoint(text: str) -> tuple[str, int] | None:
    """``host:port`` or a URL → (host, port); ``None`` if it names neither."""
    if "://" in text:
        u = urlsplit(text)
        port = u.port or {"http": 80, "https": 443, "smtp": 25, "mqtt": 1883}.get(u.scheme)
        return (u.hostname, port) if u.hostname and port else None
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        return None
    return host.strip("[]"), int(port_text)


_HOST_VAR = re.compile(r"^\$\{([A-Z][A-Z0-9_]*)\}:")


def _endpoints(
    m: Manifest, env: Mapping[str, str]
) -> tuple[list[Endpoint], list[str], list[tuple[str, str]]]:
    """(endpoints, declarations with no value, environment rewrites): a declared host that
    is an IP address outside loopback cannot be named in ``/etc/hosts``, so the setting it
    came from (``${MQTT_HOST}:…``) is handed to the server as the relay's address instead."""
    out: list[Endpoint] = []
    unresolved: list[str] = []
    rewrites: list[tuple[str, str]] = []
    n = 10
    for declared in m.egress:
        filled = _fill(declared, env)
        parsed = parse_endpoint(filled) if filled is not None else None
        if parsed is None:
            unresolved.append(declared)
            continue
        host, port = parsed
        try:
            literal: bool | None = ipaddress.ip_address(host).is_loopback
        except ValueError:
            literal = None  # a name: /etc/hosts maps it
        inside = host if literal else f"127.0.0.{n}"
        n += 1
        if literal is False:
            var = _HOST_VAR.match(declared)
            if var is None:
                unresolved.append(declared)
                continue
            name = var.group(1)
            rewrites.append((name if name in env else f"YIMI_{name}", inside))
        out.append(Endpoint(host, port, inside))
    return out, unresolved, rewrites


def profile_for(m: Manifest, env: Mapping[str, str]) -> SandboxProfile:
    """The sandbox of ``m``'s server, given the environment the hub hands it."""
    spec = m.raw.get("extensions", {}).get("ai.yimi.capability", {}).get("sandbox", {})
    ro: list[Path] = [*_code_roots(), m.root.resolve(), RELAY]
    rw: list[Path] = []
    masked: list[str] = []
    for key in ("YIMI_STATE_DIR", "YIMI_WORKSPACE"):
        if env.get(key):
            rw.append(Path(env[key]).resolve())
    if spec.get("workspace_parent") and env.get("YIMI_WORKSPACE") and m.maintainer == "core":
        # the worldlines authority: the workspace and its forks, one mount (commits rename)
        rw.append(Path(env["YIMI_WORKSPACE"]).resolve().parent)
    home = _home_of(env, m)
    granted = tuple(spec.get("home", ()))
    shared_home = ""
    if granted and home is not None and home.is_dir() and m.maintainer == "core":
        # the home, read-write, with every entry it did not declare hidden (its own state
        # folder, inside the hidden package-state, is bound again on top)
        shared_home = str(home)
        masked += [str(e) for e in sorted(home.iterdir()) if e.name not in set(granted)]
    sockets = tuple(
        str(Path(v).resolve())
        for k, v in sorted(env.items())
        if k.endswith("_SOCKET") and v and Path(v).exists()
    )
    limits_spec = spec.get("limits", {})
    limits = Limits(**{k: int(v) for k, v in limits_spec.items()})
    endpoints, unresolved, rewrites = _endpoints(m, env)
    return SandboxProfile(
        package=m.name,
        uid=sandbox_uid(m.name),
        read_only=tuple(dict.fromkeys(str(p) for p in ro if p.exists())),
        read_write=tuple(dict.fromkeys(str(p) for p in rw)),
        home=shared_home,
        masked=tuple(masked),
        sockets=sockets,
        egress=tuple(endpoints),
        unresolved=tuple(unresolved),
        env_rewrites=tuple(rewrites),
        limits=limits,
    )


# --------------------------------------------------------------------------- the command
@dataclass
class Prepared:
    """One server start's sandbox files: its private run folder and what it holds."""

    run_dir: Path
    status: Path
    cgroup: Path | None
    _events: int | None = field(default=None, init=False, repr=False, compare=False)
    """the cgroup's ``pids.events``, open: read again at offset 0 after every tool call"""

    def exit_code(self) -> int | None:
        """bwrap's report of how the server ended (``128 + signal`` when it was killed)."""
        try:
            lines = self.status.read_text().splitlines()
        except OSError:
            return None
        for line in reversed(lines):
            with contextlib.suppress(ValueError):
                data = json.loads(line)
                if "exit-code" in data:
                    return int(data["exit-code"])
        return None

    def pids_refused(self) -> int:
        """How many forks the pids cgroup refused so far (0 without one). Asked after every
        tool call: the file stays open and is read again from its start (one ``pread``,
        where opening it each time cost an open, a read and a close through pathlib)."""
        if self.cgroup is None:
            return 0
        with contextlib.suppress(OSError, ValueError):
            if self._events is None:
                self._events = os.open(self.cgroup / "pids.events", os.O_RDONLY | os.O_CLOEXEC)
            for line in os.pread(self._events, 4096, 0).decode().splitlines():
                name, _, value = line.partition(" ")
                if name == "max":
                    return int(value)
        return 0

    def close(self) -> None:
        if self._events is not None:
            os.close(self._events)
            self._events = None
        if self.cgroup is not None:
            deadline = time.monotonic() + 2
            while True:
                try:
                    self.cgroup.rmdir()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        log.warning("sandbox cgroup %s not removed", self.cgroup)
                        break
                    time.sleep(0.02)  # its last processes are exiting (bounded)
        shutil.rmtree(self.run_dir, ignore_errors=True)


def _pids_cgroup(name: str, limit: int) -> Path | None:
    for root in PIDS_CGROUP_ROOTS:
        if not (root / "pids.max").exists() and not (root / "cgroup.procs").exists():
            continue
        if root == Path("/sys/fs/cgroup") and not (root / "cgroup.controllers").exists():
            continue
        try:
            d = root / f"yimi-{name}-{os.getpid()}-{time.monotonic_ns()}"
            d.mkdir()
            (d / "pids.max").write_text(str(limit))
        except OSError:
            continue
        return d
    return None


def prepare(profile: SandboxProfile) -> Prepared:
    import tempfile

    run_dir = Path(tempfile.mkdtemp(prefix=f"yimi-sbx-{profile.package}-"))
    cg = _pids_cgroup(profile.package, profile.limits.processes)
    hosts = ["127.0.0.1 localhost", "::1 localhost"]
    hosts += [f"{e.inside} {e.host}" for e in profile.egress if e.inside != e.host]
    (run_dir / "hosts").write_text("\n".join(hosts) + "\n")
    (run_dir / "passwd").write_text(
        f"root:x:0:0::/:/bin/false\nyimi:x:{profile.uid}:{profile.uid}::/tmp:/bin/false\n"
    )
    (run_dir / "group").write_text(f"root:x:0:\nyimi:x:{profile.uid}:\n")
    return Prepared(run_dir, run_dir / "status.json", cg)


def bwrap_args(profile: SandboxProfile, prepared: Prepared, cwd: str) -> list[str]:
    """bwrap's options for the profile (without the command)."""
    low = any(e.port < 1024 for e in profile.egress)
    """a declared port below 1024: the relay binds it as the namespace's own root, with
    only CAP_NET_BIND_SERVICE, which counts only in the sandbox's empty netns"""
    a = [
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        # a declared port below 1024 is served by the relay inside: binding it needs this
        # capability, which only counts in the sandbox's own (empty) network namespace
        *(["--cap-add", "CAP_NET_BIND_SERVICE"] if low else []),
        "--uid",
        str(0 if low else profile.uid),
        "--gid",
        str(0 if low else profile.uid),
        "--hostname",
        f"yimi-{profile.package}",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for link in ("bin", "lib", "lib64", "sbin", "lib32"):
        p = Path("/") / link
        if p.is_symlink():
            a += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            a += ["--ro-bind", str(p), str(p)]
    a += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/run"]
    for name in ETC_FILES:
        p = Path("/etc") / name
        if p.exists():
            a += ["--ro-bind", str(p), str(p)]
    for name in ("hosts", "passwd", "group"):
        a += ["--ro-bind", str(prepared.run_dir / name), f"/etc/{name}"]
    for ro in profile.read_only:
        a += ["--ro-bind", ro, ro]
    if profile.home:
        a += ["--bind", profile.home, profile.home]
    for hidden in profile.masked:
        if Path(hidden).is_dir():
            a += ["--tmpfs", hidden]
        else:
            a += ["--ro-bind", "/dev/null", hidden]
    for rw in profile.read_write:  # after the home: its own state goes back on top
        Path(rw).mkdir(parents=True, exist_ok=True)
        a += ["--bind", rw, rw]
    for sock in profile.sockets:
        a += ["--bind", sock, sock]
    if profile.egress:
        a += ["--bind", str(prepared.run_dir / "egress.sock"), INSIDE_SOCKET]
    a += ["--setenv", "TMPDIR", "/tmp", "--setenv", "YIMI_SANDBOXED", "1"]
    if profile.read_write:
        a += ["--setenv", "HOME", profile.read_write[0]]
    if profile.egress:
        a += ["--setenv", "YIMI_EGRESS_SOCKET", INSIDE_SOCKET]
    a += ["--chdir", cwd if Path(cwd).exists() else "/"]
    return a


def wrap_command(
    profile: SandboxProfile, prepared: Prepared, command: str, args: list[str], cwd: str
) -> tuple[str, list[str]]:
    """(command, args) that start ``command args`` inside the sandbox, its rlimits set and,
    where there is one, in its own pids cgroup; bwrap writes how it ended to the status file."""
    lim = profile.limits
    inner = [command, *args]
    if profile.egress:
        relay = [sys.executable, "-I", "-S", str(RELAY), INSIDE_SOCKET]
        relay += [f"{e.inside}:{e.port}={e.target}" for e in profile.egress]
        inner = [*relay, "--", *inner]
    # a server script its manifest names outside the package's folder is readable too
    files = [str(Path(x).resolve()) for x in args if "/" in x and Path(x).is_file()]
    named = [o for f in files for o in ("--ro-bind", f, f)]
    bw = [bwrap() or "bwrap", "--json-status-fd", "3", *bwrap_args(profile, prepared, cwd)]
    bw += [*named, "--"]
    # the rlimits are set inside the sandbox's user namespace: RLIMIT_NPROC then counts the
    # sandbox's own processes, not every process of the hub's user
    limits = [
        "/usr/bin/prlimit",
        f"--cpu={lim.cpu_s}:{lim.cpu_s + 2}",
        f"--as={lim.memory_mb * 1024 * 1024}",
        f"--nofile={lim.open_files}",
        f"--nproc={lim.processes}",
        "--",
    ]
    script = 'exec 3>"$0"; '
    if prepared.cgroup is not None:
        script += f'echo $$ > "{prepared.cgroup}/cgroup.procs" || exit 97; '
    script += 'exec "$@"'
    return "/bin/sh", ["-c", script, str(prepared.status), *bw, *limits, *inner]


# --------------------------------------------------------------------------- egress proxy
class EgressProxy:
    """The hub's side of a sandbox's egress: a unix socket the relay inside connects to,
    asking for ``host:port``; only the profile's endpoints are connected, everything else
    is refused and audited (``sandbox.egress_refused``)."""

    def __init__(self, path: Path, profile: SandboxProfile, audit: Audit | None) -> None:
        self.path = path
        self.allowed = frozenset((e.host, e.port) for e in profile.egress)
        self.package = profile.package
        self._audit = audit
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self.refused: list[str] = []
        self.connected: list[str] = []

    async def __aenter__(self) -> EgressProxy:
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path))
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._conns):
            t.cancel()
        if self._conns:
            await asyncio.wait(self._conns, timeout=5)

    def _note(self, kind: str, target: str, reason: str = "") -> None:
        if self._audit is not None:
            self._audit(kind, {"package": self.package, "target": target, "reason": reason})

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._conns.add(task)
        try:
            await self._relay(reader, writer)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
            pass
        finally:
            writer.close()
            if task is not None:
                self._conns.discard(task)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with asyncio.timeout(10):
            line = (await reader.readline()).decode("utf-8", "replace").strip()[:300]
        parsed = parse_endpoint(line)
        if parsed is None or parsed not in self.allowed:
            self.refused.append(line)
            log.warning("package %s: egress to %r refused (not declared)", self.package, line)
            self._note("sandbox.egress_refused", line, "not declared")
            writer.write(b"REFUSED not declared\n")
            await writer.drain()
            return
        try:
            async with asyncio.timeout(10):
                up_r, up_w = await asyncio.open_connection(*parsed)
        except (OSError, TimeoutError) as exc:
            writer.write(f"FAILED {type(exc).__name__}\n".encode())
            await writer.drain()
            return
        self.connected.append(line)
        self._note("sandbox.egress", line)
        writer.write(b"OK\n")
        await writer.drain()

        async def pump(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            finally:
                with contextlib.suppress(OSError):
                    w.write_eof()

        try:
            await asyncio.gather(pump(reader, up_w), pump(up_r, writer))
        finally:
            up_w.close()


def refuse_unsandboxed(package: str) -> CapabilityError:
    return CapabilityError("package.sandbox_missing", package=package, env=OPT_OUT_ENV)
