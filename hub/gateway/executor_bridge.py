"""The hub's executor bridge: how the ``mac`` package's MCP server reaches a device with
the executor role, without holding any key.

The bridge listens on a Unix socket (``HOME/run/executor.sock``, mode 0600; when that path
is longer than a socket address can hold, ``executor.sock`` in a private 0700 folder under
the system's temp dir instead — ``path`` says where) and speaks one JSON line each way::

    → {"device": "mac", "op": "run", "command": "ls", "args": ["-l"], "timeout_s": 20,
       "task_id": "...", "call_id": "..."}
    ← {"status": "done", "exit_code": 0, "stdout": "...", ...}      (edge_agent.executor)
    → {"device": "mac", "op": "worldline.commit", "path": ROOT, "worldline_id": "..."}
    ← {"status": "done", "worldline_id": "...", "generation": 1, ...}

A write command's answer names the fork it ran on (``worldline_id``, ``worldline_root``)
and its diff (``added`` / ``changed`` / ``removed`` / ``diff``).

It seals an ``EXEC_REQUEST`` to the named device (which must be enrolled with the
``execute`` scope), waits for the matching ``EXEC_RESULT`` from that device, and answers.
``UNREACHABLE`` means nothing was sent; ``TIMEOUT`` means it was sent and no answer came
(the gateway then reports ``unknown``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from protos import executor_pb2, mesh_pb2
from provisioning.registry import DeviceRecord
from sync.envelope import random_id

if TYPE_CHECKING:
    from sync.envelope import Opened

log = logging.getLogger(__name__)

MAX_REQUEST = 64 * 1024
EXTRA_WAIT_S = 5.0
MAX_SOCKET_PATH = 100
"""bytes: a Unix socket address holds 107 (Linux) or 103 (macOS) and a NUL"""

Send = Callable[[str, int, Any], Awaitable[bool]]


def result_dict(res: executor_pb2.ExecResult) -> dict[str, Any]:
    return {
        "status": res.status,
        "error_code": res.error_code,
        "error": res.error,
        "exit_code": res.exit_code,
        "stdout": res.stdout.decode(errors="replace"),
        "stderr": res.stderr.decode(errors="replace"),
        "content": res.content.decode(errors="replace"),
        "truncated": res.truncated,
        "size": res.size,
        "worldline_id": res.worldline_id,
        "worldline_root": res.worldline_root,
        "added": list(res.added),
        "changed": list(res.changed),
        "removed": list(res.removed),
        "diff": res.diff.decode(errors="replace"),
        "generation": res.generation,
        "commit_id": res.commit_id,
    }


class ExecutorBridge:
    def __init__(
        self,
        path: Path,
        devices: Callable[[], list[DeviceRecord]],
        send: Send,
        *,
        count: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        self._devices = devices
        self._send = send
        self._count = count
        """counts refusals (``rejected.exec_result_unexpected``)"""
        self._pending: dict[str, tuple[str, asyncio.Future[executor_pb2.ExecResult]]] = {}
        self._server: asyncio.AbstractServer | None = None
        self._short_dir: Path | None = None

    async def __aenter__(self) -> ExecutorBridge:
        if len(os.fsencode(self.path)) > MAX_SOCKET_PATH:  # a home deep in the tree
            self._short_dir = Path(tempfile.mkdtemp(prefix="yimi-exec-"))  # mode 0700
            log.info("%s is too long for a socket address: using %s", self.path, self._short_dir)
            self.path = self._short_dir / self.path.name
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self._server = await asyncio.start_unix_server(
            self._client, path=str(self.path), limit=MAX_REQUEST
        )
        os.chmod(self.path, 0o600)
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for _, fut in self._pending.values():
            fut.cancel()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        if self._short_dir is not None:
            shutil.rmtree(self._short_dir, ignore_errors=True)

    def _device(self, name: str) -> DeviceRecord | None:
        for rec in self._devices():
            if (rec.name == name or rec.device_id == name) and "execute" in rec.scopes:
                return rec
        return None

    async def request(self, body: dict[str, Any]) -> dict[str, Any]:
        rec = self._device(str(body.get("device", "")))
        if rec is None:
            return {
                "status": "failed",
                "error_code": "UNREACHABLE",
                "error": f"no executor device named {body.get('device')!r}",
            }
        timeout = max(1, min(int(body.get("timeout_s") or 20), 600))
        req = executor_pb2.ExecRequest(
            request_id=random_id("x-"),
            op=str(body.get("op", ""))[:32],
            command=str(body.get("command", ""))[:200],
            args=[str(a)[:1024] for a in list(body.get("args") or [])[:32]],
            path=str(body.get("path", ""))[:4096],
            timeout_s=timeout,
            task_id=str(body.get("task_id", ""))[:128],
            call_id=str(body.get("call_id", ""))[:128],
            worldline_id=str(body.get("worldline_id", ""))[:128],
        )
        fut: asyncio.Future[executor_pb2.ExecResult] = asyncio.get_running_loop().create_future()
        self._pending[req.request_id] = (rec.device_id, fut)
        try:
            if not await self._send(rec.device_id, mesh_pb2.EXEC_REQUEST, req):
                return {
                    "status": "failed",
                    "error_code": "UNREACHABLE",
                    "error": f"{rec.name} is not reachable now: nothing was sent",
                }
            try:
                async with asyncio.timeout(timeout + EXTRA_WAIT_S):
                    return result_dict(await fut)
            except TimeoutError:
                return {
                    "status": "failed",
                    "error_code": "TIMEOUT",
                    "error": f"sent to {rec.name}, no answer within {timeout} s",
                }
        finally:
            self._pending.pop(req.request_id, None)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            body = json.loads(line) if line else None
            if not isinstance(body, dict):
                raise ValueError("not a JSON object")
            answer = await self.request(body)
        except (ValueError, asyncio.LimitOverrunError) as exc:
            answer = {"status": "failed", "error_code": "BAD_REQUEST", "error": str(exc)[:200]}
        except Exception as exc:
            log.exception("executor bridge request failed")
            answer = {"status": "failed", "error_code": "UNREACHABLE", "error": str(exc)[:200]}
        with contextlib.suppress(ConnectionError):
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    async def on_result(self, opened: Opened) -> None:
        res = opened.payload
        assert isinstance(res, executor_pb2.ExecResult)
        waiting = self._pending.get(res.request_id)
        if waiting is None or waiting[0] != opened.sender:
            log.warning(
                "executor result %s from %s not expected", res.request_id[:40], opened.sender
            )
            if self._count is not None:
                self._count("rejected.exec_result_unexpected")
            return
        if not waiting[1].done():
            waiting[1].set_result(res)
