"""The MCP stdio client host: starts package servers lazily, calls tools, reclaims idle ones.

:class:`PackageHost` is an async context manager that owns one runner task per live server
process. A server starts on the first call of one of its tools (``runtime.start: lazy``; or
when the host starts, ``eager``), and is stopped after ``runtime.idle_reclaim_s`` (900 s by
default) without calls. A ``shared`` package has one process for everyone; a
``dedicated`` one gets a process per task id. Leaving the host stops every server.

:meth:`PackageHost.call` never raises for what a server does: it returns a
:class:`ToolOutcome` whose ``error_code`` is ``TIMEOUT`` (no answer within the call
timeout) or ``DISCONNECTED`` (the server died or the pipe broke) — the gateway turns both
into ``unknown`` receipts. The ``variant`` picks the real server or the package's fake.

A third-party server's tool annotations are read when it starts: a call of a tool its
manifest declares ``observe`` but the server annotates destructive never reaches it
(``REFUSED``: the gateway's receipt is ``not_executed``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, TextIO

from hub.capabilities.errors import CapabilityError
from hub.capabilities.manifest import Manifest, ServerSpec
from hub.capabilities.sandbox import (
    SIGNALS,
    Audit,
    EgressProxy,
    Prepared,
    bwrap,
    opted_out,
    prepare,
    profile_for,
    refuse_unsandboxed,
    wrap_command,
)
from storage.private import private_dir, private_file
from sync.tasks import TaskOwner

if TYPE_CHECKING:
    from mcp import Client

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
"""seconds a server has to start and answer the MCP handshake"""
MAX_TEXT_CHARS = 64_000
"""characters of unstructured tool output kept"""

EnvFor = Callable[[Manifest, str], dict[str, str]]
"""(manifest, variant) → extra environment for its server: config, resolved secrets"""


async def _mcp() -> ModuleType:
    """The MCP client library, imported when the first server starts: it takes seconds to
    import and most processes that import the gateway (the CLI, a hub before its first tool
    call) never start one. Imported in a thread, so the event loop keeps running meanwhile."""
    return await asyncio.to_thread(importlib.import_module, "mcp")


REFUSED = "REFUSED"
"""the host did not run the call: a third-party server annotates a tool its manifest
declares ``observe`` destructive (``yimi package check`` says so too)"""


async def _destructive(client: Client, package: str) -> frozenset[str]:
    """The tools a server annotates destructive and not read-only (none if it cannot say)."""
    try:
        listed = await client.list_tools()
    except Exception as exc:  # its calls will tell: this is only a guard
        log.warning("package %s lists no tools: %s", package, exc)
        return frozenset()
    return frozenset(
        t.name
        for t in listed.tools
        if t.annotations is not None
        and t.annotations.destructive_hint
        and not t.annotations.read_only_hint
    )


@dataclass(frozen=True)
class ToolOutcome:
    """What came back from one MCP tool call, before the gateway judged it."""

    structured: dict[str, Any] | None = None
    text: str = ""
    is_error: bool = False
    error_code: str = ""
    """``TIMEOUT`` / ``DISCONNECTED`` / ``START_FAILED`` / ``REFUSED`` when the call did not
    complete (``REFUSED``: it never reached the server)"""
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class ServedTool:
    """One tool as the server lists it: its input schema and MCP's annotations (hints the
    server gives about itself, ``None`` when it says nothing)."""

    name: str
    input_schema: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    open_world: bool | None = None


@dataclass
class _Server:
    key: tuple[str, str, str]
    manifest: Manifest
    spec: ServerSpec
    client: Client | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    failed: str = ""
    inflight: int = 0
    last_used: float = field(default_factory=time.monotonic)
    activity: asyncio.Event = field(default_factory=asyncio.Event)
    """wakes the idle watcher to look again now (a retiring server's last call ended,
    :meth:`PackageHost.reclaim_idle`); a call does not set it: the watcher reads
    ``last_used`` when its own deadline comes"""
    task: asyncio.Task[None] | None = None
    stopping: bool = False
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    env: dict[str, str] = field(default_factory=dict)
    """what ``env_for`` gave this server at its start"""
    destructive: frozenset[str] = frozenset()
    """tools a third-party server annotates destructive (``destructiveHint``), read at start"""
    sandbox: Prepared | None = None
    pids_refused: int = 0
    died: bool = False
    """a call found the server dead (its pipe closed)"""


class PackageHost:
    def __init__(
        self,
        manifests: dict[str, Manifest],
        *,
        variant: str = "real",
        env_for: EnvFor | None = None,
        log_dir: Path | None = None,
        sandbox: bool | None = None,
        audit: Audit | None = None,
    ) -> None:
        if variant not in ("real", "fake"):
            raise ValueError(f"variant {variant!r} is not real or fake")
        self.manifests = dict(manifests)
        self.variant = variant
        self._env_for = env_for
        self._log_dir = log_dir
        self._servers: dict[tuple[str, str, str], _Server] = {}
        self._tasks = TaskOwner("package-host")
        self._lock = asyncio.Lock()
        self._logs: list[TextIO] = []
        self.starts = 0
        """server processes started so far"""
        self.sandbox = not opted_out() if sandbox is None else sandbox
        """every server starts inside its sandbox (``hub.capabilities.sandbox``); off only
        by the operator's explicit choice (``YIMI_SANDBOX=off`` or ``sandbox=False``)"""
        self._audit = audit
        if not self.sandbox:
            log.warning("package servers run WITHOUT a sandbox (the operator turned it off)")
        elif bwrap() is None:
            log.error(
                "bubblewrap (bwrap) is not installed: package servers will not start; "
                "install it, or set YIMI_SANDBOX=off to run them unsandboxed"
            )

    async def __aenter__(self) -> PackageHost:
        for m in self.manifests.values():
            if m.runtime.start == "eager":
                await self._server(m, "")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for s in list(self._servers.values()):
            s.stop.set()
        tasks = [s.task for s in self._servers.values() if s.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=10)
        await self._tasks.close()
        for fh in self._logs:
            fh.close()

    def running(self) -> list[str]:
        """Names of packages with a live server process."""
        return sorted({k[0] for k, s in self._servers.items() if s.client is not None})

    def failures(self) -> dict[str, str]:
        """Package → why its latest server failed (could not start, died, no handshake in
        time); a package whose server started again since is not in it."""
        return {k[0]: s.failed for k, s in sorted(self._servers.items()) if s.failed}

    # ------------------------------------------------------------------ servers
    def _spec(self, m: Manifest) -> ServerSpec:
        if self.variant == "fake":
            if m.fake is None:
                raise CapabilityError("package.no_fake", package=m.name)
            return m.fake
        return m.server

    async def _server(self, m: Manifest, task_id: str, *, hold: bool = False) -> _Server:
        """The live server for ``m`` (started if needed); ``hold`` counts a call in flight
        from now on, so the server is not reclaimed while the call waits for it."""
        key = (m.name, self.variant, task_id if m.runtime.host == "dedicated" else "")
        env = self._env_for(m, self.variant) if self._env_for is not None else {}
        async with self._lock:
            s = self._servers.get(key)
            if s is not None and not s.stopping and s.env != env:
                # e.g. the owner switched to a cloud model: what the package may show changed.
                # New calls go to a new server; this one ends when its calls are done.
                log.info("package %s: its environment changed: restarting it", m.name)
                s.stopping = True
                s.activity.set()
            if s is None or s.task is None or s.task.done() or s.stopping:
                s = _Server(key, m, self._spec(m), env=env)
                self._servers[key] = s
                s.task = self._tasks.spawn(self._run(s), f"{m.name}:{self.variant}:{key[2]}")
                self.starts += 1
            if hold:
                s.inflight += 1
        if s.ready.is_set():  # the usual call: the server is up already
            return s
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                await s.ready.wait()
        except TimeoutError:
            s.failed = s.failed or "no MCP handshake in time"
        return s

    def _errlog(self, name: str) -> TextIO:
        if self._log_dir is None:
            return sys.stderr
        private_dir(self._log_dir)
        path = private_file(self._log_dir / f"{name}.{self.variant}.stderr.log")
        fh = path.open("a")
        self._logs.append(fh)
        return fh

    async def _run(self, s: _Server) -> None:
        m = s.manifest
        command, args, env, cwd = s.spec.resolved(m.root)
        extra = dict(env)
        extra.setdefault("PYTHONUNBUFFERED", "1")
        extra.update(s.env)
        for name in ("PYTHONPATH", "LANG", "LC_ALL", "TMPDIR"):
            if name in os.environ and name not in extra:
                extra[name] = os.environ[name]
        mcp = await _mcp()
        try:
            async with contextlib.AsyncExitStack() as stack:
                if self.sandbox:
                    command, args = await self._sandboxed(s, stack, command, args, extra, cwd)
                params = mcp.StdioServerParameters(command=command, args=args, env=extra, cwd=cwd)
                client = await stack.enter_async_context(mcp.Client(params, raise_exceptions=False))
                if m.maintainer == "third_party" or m.receipts == "mcp":
                    s.destructive = await _destructive(client, m.name)
                s.client = client
                s.last_used = time.monotonic()
                s.ready.set()
                log.info("package %s (%s) started", m.name, self.variant)
                await self._idle(s)
        except CapabilityError as exc:
            s.failed = exc.text()
            log.error("package %s (%s) not started: %s", m.name, self.variant, s.failed)
        except Exception as exc:  # a server that cannot start or dies: its calls fail
            s.failed = f"{type(exc).__name__}: {exc}"
            log.warning("package %s (%s) server ended: %s", m.name, self.variant, s.failed)
        finally:
            s.client = None
            s.ready.set()
            if s.sandbox is not None:
                self._ended_sandbox(s)
            s.ended.set()
            log.info("package %s (%s) stopped", m.name, self.variant)

    async def _sandboxed(
        self,
        s: _Server,
        stack: contextlib.AsyncExitStack,
        command: str,
        args: list[str],
        env: dict[str, str],
        cwd: str,
    ) -> tuple[str, list[str]]:
        """The server's command wrapped in its sandbox; its egress proxy started."""
        if bwrap() is None:
            raise refuse_unsandboxed(s.manifest.name)
        profile = profile_for(s.manifest, env)
        env.update(profile.env_rewrites)
        prepared = await asyncio.to_thread(prepare, profile)
        s.sandbox = prepared
        if profile.egress:
            proxy = EgressProxy(prepared.run_dir / "egress.sock", profile, self._audit)
            await stack.enter_async_context(proxy)
        return wrap_command(profile, prepared, command, args, cwd)

    def _ended_sandbox(self, s: _Server) -> None:
        """Audit how a sandboxed server ended if it was not asked to; reclaim its files."""
        assert s.sandbox is not None
        self._check_pids(s)
        code = s.sandbox.exit_code()
        asked = (s.stop.is_set() or s.stopping) and not s.died
        if code is not None and code != 0 and not asked and self._audit is not None:
            signal = SIGNALS.get(code - 128, f"signal {code - 128}") if code > 128 else ""
            kind = "sandbox.killed" if signal else "sandbox.ended"
            self._audit(kind, {"package": s.manifest.name, "exit_code": code, "signal": signal})
            log.warning("package %s: its sandboxed server ended: %s", s.manifest.name, code)
        s.sandbox.close()
        s.sandbox = None

    def _check_pids(self, s: _Server) -> None:
        """Audit forks the sandbox's pids limit refused since the last look."""
        if s.sandbox is None:
            return
        refused = s.sandbox.pids_refused()
        if refused > s.pids_refused and self._audit is not None:
            self._audit(
                "sandbox.pids_limit",
                {"package": s.manifest.name, "refused_forks": refused - s.pids_refused},
            )
        s.pids_refused = refused

    async def _idle(self, s: _Server) -> None:
        idle = s.manifest.runtime.idle_reclaim_s
        while not s.stop.is_set():
            s.activity.clear()
            wait = idle - (time.monotonic() - s.last_used)
            if s.inflight == 0 and s.stopping:
                return  # retired (its environment changed): its last call is done
            if s.inflight == 0 and wait <= 0:
                s.stopping = True
                log.info("package %s idle for %d s: reclaimed", s.manifest.name, idle)
                return
            stop = asyncio.ensure_future(s.stop.wait())
            act = asyncio.ensure_future(s.activity.wait())
            try:
                await asyncio.wait(
                    {stop, act}, timeout=max(wait, 0.05), return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                stop.cancel()
                act.cancel()

    async def reclaim_idle(self) -> None:
        """Wake every runner so it re-checks its idle time now (tests, shutdown paths)."""
        for s in self._servers.values():
            s.activity.set()

    # ------------------------------------------------------------------ calls
    async def call(
        self,
        package: str,
        tool: str,
        args: dict[str, Any],
        *,
        task_id: str = "",
        timeout: float | None = None,
    ) -> ToolOutcome:
        m = self.manifests.get(package)
        if m is None:
            raise CapabilityError("package.unknown", package=package)
        started = time.monotonic()
        s = await self._server(m, task_id, hold=True)
        client = s.client
        if client is None:
            s.inflight -= 1
            return ToolOutcome(text=s.failed, is_error=True, error_code="START_FAILED")
        spec = m.tools.get(tool)
        if spec is not None and spec.effect == "observe" and tool in s.destructive:
            s.inflight -= 1
            return ToolOutcome(
                text=f"{tool} is declared observe, but its server annotates it destructive",
                is_error=True,
                error_code=REFUSED,
            )
        s.last_used = time.monotonic()
        limit = timeout if timeout is not None else m.runtime.call_timeout_s
        try:
            async with asyncio.timeout(limit):
                result = await client.call_tool(tool, args)
        except TimeoutError:
            return ToolOutcome(
                text=f"no answer within {limit} s",
                is_error=True,
                error_code="TIMEOUT",
                elapsed_s=time.monotonic() - started,
            )
        except Exception as exc:
            # the server died or its pipe broke: the next call starts a new one
            s.died = True
            s.stopping = True
            return ToolOutcome(
                text=f"{type(exc).__name__}: {exc}",
                is_error=True,
                error_code="DISCONNECTED",
                elapsed_s=time.monotonic() - started,
            )
        finally:
            s.inflight -= 1
            s.last_used = time.monotonic()
            if s.stopping:  # retired or died: its runner ends once no call is in flight
                s.activity.set()
            self._check_pids(s)
        text = "".join(getattr(c, "text", "") for c in result.content)[:MAX_TEXT_CHARS]
        structured = result.structured_content
        return ToolOutcome(
            structured=structured if isinstance(structured, dict) else None,
            text=text,
            is_error=bool(result.is_error),
            elapsed_s=time.monotonic() - started,
        )

    async def list_tools(self, package: str) -> dict[str, dict[str, Any]]:
        """Tool name → input schema, as the package's server reports them."""
        return {n: t.input_schema for n, t in (await self.served_tools(package)).items()}

    async def served_tools(self, package: str) -> dict[str, ServedTool]:
        """Every tool the package's server lists, with its annotations."""
        m = self.manifests.get(package)
        if m is None:
            raise CapabilityError("package.unknown", package=package)
        s = await self._server(m, "")
        if s.client is None:
            raise CapabilityError("package.start_failed", package=package, reason=s.failed)
        s.last_used = time.monotonic()
        listed = await s.client.list_tools()
        out: dict[str, ServedTool] = {}
        for t in listed.tools:
            a = t.annotations
            out[t.name] = ServedTool(
                name=t.name,
                input_schema=dict(t.input_schema or {}),
                description=t.description or "",
                read_only=getattr(a, "read_only_hint", None),
                destructive=getattr(a, "destructive_hint", None),
                idempotent=getattr(a, "idempotent_hint", None),
                open_world=getattr(a, "open_world_hint", None),
            )
        return out

    async def ended(self, package: str) -> None:
        """Return once no server of ``package`` is running (stopped or reclaimed)."""
        for s in [s for k, s in self._servers.items() if k[0] == package]:
            await s.ended.wait()

    async def stop(self, package: str) -> None:
        """Stop a package's servers now (the next call starts them again)."""
        for key, s in list(self._servers.items()):
            if key[0] == package:
                s.stop.set()
                if s.task is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait({s.task}, timeout=10)
