"""The executor role on a device (the owner's Mac): allow-listed commands and file reads
the hub asks for over the mesh, under the device's own rules.

The device is the last word on what runs on it:

- ``BUNDLE/executor.yaml`` (the owner edits it on the Mac) lists the allowed commands with
  their effect class and the folders that may be read or written::

      commands: {ls: observe, df: observe, date: observe, uname: observe,
                 mkdir: owner_data, touch: owner_data}
      roots: [~/Documents, ~/Desktop]
      timeout_s: 20
      max_output_bytes: 65536

  A command not listed is refused (``NOT_ALLOWED``); a file read, and every path argument
  of an ``owner_data`` command, must resolve (symlinks followed) inside a root
  (``OUTSIDE_ROOTS``). Commands run without a shell, with a timeout.
- **Worldlines**: a command that writes (any effect but ``observe``) never writes the
  allowed folder itself. Its paths must lie in one root; the executor forks that root
  (:class:`storage.worldlines.Worldlines`: Btrfs snapshot, reflink or copy, from the root's
  current generation), runs the command on the fork (its path arguments rewritten into the
  fork, the fork its working directory) and answers the fork's id and diff. The fork
  becomes the folder only on ``worldline.commit`` (an ``owner_data`` call the hub's gateway
  gates: ``mac`` package, ``worldline_commit``); ``worldline.show`` / ``.discard`` /
  ``.keep`` / ``.rollback`` work as on the hub; a fork whose base is no longer current is
  refused (``STALE_BASE``).
- **Pause switch**: ``yimi executor pause --bundle MAC`` (a file ``state/executor.paused``)
  refuses everything (``PAUSED``) until ``yimi executor resume``.
- **Log**: every request, run or refused, is one JSON line in ``state/executor.log``.

Only the hub may ask (envelopes from anyone else never open on a device), and only a
bundle whose profile has the ``executor`` role and whose certificate holds ``execute``
serves requests at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from edge_agent.port import Handlers, SendToHub
from protos import executor_pb2, mesh_pb2
from protos.clock import now_ms
from provisioning.bundle import Bundle
from storage.worldlines import Diff, WorldlineError, Worldlines
from sync.envelope import HUB, Opened

log = logging.getLogger(__name__)

DEFAULT_COMMANDS = {
    "ls": "observe",
    "df": "observe",
    "date": "observe",
    "uname": "observe",
    "uptime": "observe",
    "whoami": "observe",
    "mkdir": "owner_data",
    "touch": "owner_data",
}
MAX_ARGS = 32
MAX_ARG_CHARS = 1024
MAX_DIFF_BYTES = 16 * 1024


@dataclass
class Policy:
    commands: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_COMMANDS))
    roots: list[Path] = field(default_factory=lambda: [Path("~/Documents").expanduser()])
    timeout_s: float = 20.0
    max_output_bytes: int = 64 * 1024

    @classmethod
    def load(cls, path: Path) -> Policy:
        if not path.exists():
            return cls()
        data = yaml.safe_load(path.read_text()) or {}
        p = cls()
        if "commands" in data:
            p.commands = {str(k): str(v) for k, v in dict(data["commands"]).items()}
        if "roots" in data:
            p.roots = [Path(str(r)).expanduser() for r in data["roots"]]
        p.timeout_s = float(data.get("timeout_s", p.timeout_s))
        p.max_output_bytes = int(data.get("max_output_bytes", p.max_output_bytes))
        return p

    def inside(self, path: str) -> Path | None:
        found = self.root_of(path)
        return None if found is None else found[1]

    def root_of(self, path: str) -> tuple[Path, Path] | None:
        """The allowed root ``path`` resolves inside, and the resolved path (both real)."""
        real = Path(os.path.realpath(Path(path).expanduser()))
        for root in self.roots:
            r = Path(os.path.realpath(root))
            if real == r or r in real.parents:
                return r, real
        return None


@dataclass(frozen=True)
class Plan:
    """Where a write command runs: a fork of one allowed root, its arguments moved into it."""

    lines: Worldlines
    fork_id: str
    fork: Path
    args: list[str]


def _with_diff(res: executor_pb2.ExecResult, lines: Worldlines, fork_id: str, d: Diff) -> None:
    res.worldline_id = fork_id
    res.worldline_root = str(lines.workspace)
    res.generation = lines.generation
    res.added.extend(d.added)
    res.changed.extend(d.changed)
    res.removed.extend(d.removed)
    res.diff = d.text.encode()[:MAX_DIFF_BYTES]


def _wl_show(lines: Worldlines, req: executor_pb2.ExecRequest) -> executor_pb2.ExecResult:
    res = executor_pb2.ExecResult(status="done")
    _with_diff(res, lines, req.worldline_id, lines.diff(req.worldline_id))
    return res


def _wl_commit(lines: Worldlines, req: executor_pb2.ExecRequest) -> executor_pb2.ExecResult:
    c = lines.commit(req.worldline_id)
    return executor_pb2.ExecResult(
        status="done", worldline_id=req.worldline_id, commit_id=c.id, generation=c.generation
    )


def _wl_rollback(lines: Worldlines, req: executor_pb2.ExecRequest) -> executor_pb2.ExecResult:
    c = lines.rollback(req.worldline_id)
    return executor_pb2.ExecResult(
        status="done", worldline_id=req.worldline_id, commit_id=c.id, generation=c.generation
    )


def _wl_discard(lines: Worldlines, req: executor_pb2.ExecRequest) -> executor_pb2.ExecResult:
    lines.discard(req.worldline_id)
    return executor_pb2.ExecResult(
        status="done", worldline_id=req.worldline_id, generation=lines.generation
    )


def _wl_keep(lines: Worldlines, req: executor_pb2.ExecRequest) -> executor_pb2.ExecResult:
    lines.keep(req.worldline_id)
    return executor_pb2.ExecResult(
        status="done", worldline_id=req.worldline_id, generation=lines.generation
    )


WORLDLINE_OPS = {
    "worldline.show": _wl_show,
    "worldline.commit": _wl_commit,
    "worldline.rollback": _wl_rollback,
    "worldline.discard": _wl_discard,
    "worldline.keep": _wl_keep,
}
"""``ExecRequest.op`` → what it does to the worldlines of the root ``ExecRequest.path``"""


class Executor:
    """Runs what the policy allows; everything it is asked is logged."""

    def __init__(self, state_dir: Path, policy_file: Path) -> None:
        self.state = state_dir
        self.policy_file = policy_file
        self.log_path = state_dir / "executor.log"
        self.pause_path = state_dir / "executor.paused"

    @property
    def paused(self) -> bool:
        return self.pause_path.exists()

    def _log(self, req: executor_pb2.ExecRequest, res: executor_pb2.ExecResult) -> None:
        line = {
            "ts_ms": now_ms(),
            "request_id": req.request_id,
            "op": req.op,
            "command": req.command,
            "args": list(req.args),
            "path": req.path,
            "task_id": req.task_id,
            "call_id": req.call_id,
            "worldline_id": res.worldline_id or req.worldline_id,
            "status": res.status,
            "error_code": res.error_code,
            "exit_code": res.exit_code,
        }
        fd = os.open(self.log_path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as fh:
            fh.write(json.dumps(line) + "\n")

    async def handle(self, req: executor_pb2.ExecRequest) -> executor_pb2.ExecResult:
        res = await self._handle(req)
        res.request_id = req.request_id
        self._log(req, res)
        return res

    async def _handle(self, req: executor_pb2.ExecRequest) -> executor_pb2.ExecResult:
        if self.paused:
            return _refused("PAUSED", "the executor is paused on this device")
        policy = Policy.load(self.policy_file)
        if req.op == "read":
            return self._read(req, policy)
        if req.op == "run":
            return await self._run(req, policy)
        if req.op in WORLDLINE_OPS:
            return await asyncio.to_thread(self._worldline, req, policy)
        return _refused("BAD_REQUEST", f"unknown operation {req.op[:20]!r}")

    def _worldline(self, req: executor_pb2.ExecRequest, policy: Policy) -> executor_pb2.ExecResult:
        found = policy.root_of(req.path)
        if found is None or found[0] != found[1]:
            return _refused("OUTSIDE_ROOTS", f"{req.path} is not an allowed folder")
        try:
            return WORLDLINE_OPS[req.op](Worldlines(found[0]), req)
        except WorldlineError as exc:
            return executor_pb2.ExecResult(status="failed", error_code=exc.code, error=exc.text())

    def _plan(
        self, req: executor_pb2.ExecRequest, policy: Policy
    ) -> Plan | executor_pb2.ExecResult:
        """Fork the one root a write command's paths lie in; its paths moved into the fork."""
        placed: list[tuple[Path, Path] | None] = []
        for a in req.args:
            where = None if a.startswith("-") else policy.root_of(a)
            if where is None and not a.startswith("-"):
                return _refused("OUTSIDE_ROOTS", f"{a} is outside the allowed folders")
            placed.append(where)
        roots = {w[0] for w in placed if w is not None}
        if len(roots) > 1:
            return _refused("BAD_REQUEST", "a command that writes may touch one allowed folder")
        if not roots:
            if not policy.roots:
                return _refused("OUTSIDE_ROOTS", "no allowed folder to write in")
            roots = {Path(os.path.realpath(policy.roots[0]))}
        lines = Worldlines(roots.pop())
        f = lines.fork(f"{req.command} {req.task_id}".strip())
        fork = lines.path(f.id)
        args = [
            a if w is None else str(fork / w[1].relative_to(w[0]))
            for a, w in zip(req.args, placed, strict=True)
        ]
        return Plan(lines, f.id, fork, args)

    def _read(self, req: executor_pb2.ExecRequest, policy: Policy) -> executor_pb2.ExecResult:
        real = policy.inside(req.path)
        if real is None:
            return _refused("OUTSIDE_ROOTS", f"{req.path} is outside the allowed folders")
        try:
            size = real.stat().st_size
            with real.open("rb") as fh:
                data = fh.read(policy.max_output_bytes)
        except FileNotFoundError:
            return executor_pb2.ExecResult(
                status="failed", error_code="NOT_FOUND", error=f"no file {req.path}"
            )
        except OSError as exc:
            return executor_pb2.ExecResult(
                status="failed", error_code="READ_FAILED", error=str(exc)[:300]
            )
        return executor_pb2.ExecResult(
            status="done", content=data, size=size, truncated=size > len(data)
        )

    async def _run(self, req: executor_pb2.ExecRequest, policy: Policy) -> executor_pb2.ExecResult:
        effect = policy.commands.get(req.command)
        if effect is None or "/" in req.command:
            return _refused("NOT_ALLOWED", f"{req.command[:40]!r} is not allowed on this device")
        if len(req.args) > MAX_ARGS or any(len(a) > MAX_ARG_CHARS for a in req.args):
            return _refused("BAD_REQUEST", "too many or too long arguments")
        plan: Plan | None = None
        if effect != "observe":
            planned = await asyncio.to_thread(self._plan, req, policy)
            if isinstance(planned, executor_pb2.ExecResult):
                return planned
            plan = planned
        res = await self._spawn(req, policy, plan)
        if plan is not None:
            d = await asyncio.to_thread(plan.lines.diff, plan.fork_id)
            _with_diff(res, plan.lines, plan.fork_id, d)
        return res

    async def _spawn(
        self, req: executor_pb2.ExecRequest, policy: Policy, plan: Plan | None
    ) -> executor_pb2.ExecResult:
        timeout = min(float(req.timeout_s or policy.timeout_s), policy.timeout_s)
        cwd: str | None
        if plan is not None:
            args, cwd = plan.args, str(plan.fork)
        else:
            args = list(req.args)
            cwd = str(policy.roots[0]) if policy.roots and policy.roots[0].is_dir() else None
        try:
            proc = await asyncio.create_subprocess_exec(
                req.command,
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd,
            )
        except OSError as exc:
            return executor_pb2.ExecResult(
                status="failed", error_code="NOT_FOUND", error=str(exc)[:300]
            )
        try:
            async with asyncio.timeout(timeout):
                out, err = await proc.communicate()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            return executor_pb2.ExecResult(
                status="failed", error_code="TIMEOUT", error=f"no exit within {timeout:g} s"
            )
        cap = policy.max_output_bytes
        return executor_pb2.ExecResult(
            status="done",
            exit_code=proc.returncode or 0,
            stdout=out[:cap],
            stderr=err[:cap],
            truncated=len(out) > cap or len(err) > cap,
        )


def _refused(code: str, why: str) -> executor_pb2.ExecResult:
    return executor_pb2.ExecResult(status="refused", error_code=code, error=why)


def executor_for(bundle: Bundle) -> Executor:
    return Executor(bundle.state_dir, bundle.path / "executor.yaml")


def executor_handlers(bundle: Bundle, send: SendToHub) -> Handlers:
    """EXEC_REQUEST handling for a bundle with the executor role (and ``execute`` scope)."""
    if "executor" not in bundle.profile.roles or "execute" not in bundle.certificate.scopes:
        return {}
    executor = executor_for(bundle)
    running: set[asyncio.Task[None]] = set()

    async def serve(opened: Opened) -> None:
        req = opened.payload
        assert isinstance(req, executor_pb2.ExecRequest)
        res = await executor.handle(req)
        with contextlib.suppress(Exception):  # offline or gone: the hub times the request out
            await send(mesh_pb2.EXEC_RESULT, res, trace_id=opened.trace_id)

    async def on_request(opened: Opened) -> None:
        if opened.sender != HUB:
            return
        task = asyncio.create_task(serve(opened), name="executor")
        running.add(task)
        task.add_done_callback(running.discard)

    return {mesh_pb2.EXEC_REQUEST: on_request}
