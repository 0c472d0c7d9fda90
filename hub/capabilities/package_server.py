"""The package side of MCP: a lean stdio server for the built-in capability packages.

A package's server declares its tools as typed functions and serves them over stdio::

    server = MCPServer("errands")

    @server.tool()
    def view_cart(cart_id: str) -> dict[str, Any]:
        \"\"\"What the cart holds and its total.\"\"\"

    server.run("stdio")

the same surface, schemas and answers as the MCP SDK's ``MCPServer`` (the SDK the hub's
client is), without importing the SDK: its import alone costs ~0.6 s of CPU, most of a
package server's start (~0.9 s on this 2-core machine, several seconds on a Raspberry-class
hub), paid at each package's first call after the hub starts or after an idle stop.
Here a start costs the interpreter, pydantic and the package's own code.

What is served, as the SDK serves it (``tests/test_package_server.py`` sends the same
requests to both and compares every answer):

- both protocol eras: the ``initialize`` handshake (``2024-11-05`` … ``2025-11-25``,
  with ``ping``) and the per-request envelope of ``2026-07-28`` (``server/discover``, each
  request's ``_meta`` carrying the version and the client's capabilities);
- ``tools/list``: each tool's name, description (its docstring), input schema (pydantic's
  schema of its parameters, model ``<name>Arguments``) and output schema (``<name>DictOutput``
  for a ``dict[str, Any]`` result, ``<name>Output`` with one ``result`` field for a ``str``,
  ``int``, ``float`` or ``bool`` result);
- ``tools/call``: arguments validated by pydantic (lax, with the SDK's pre-parse of JSON
  text for non-text parameters); the result as structured content and as its JSON text
  (indented); a validation error or a :class:`ToolError` as an ``isError`` result with its
  text, any other exception as ``Error executing tool NAME`` (its text stays here, on
  stderr); an unknown tool as ``Unknown tool: NAME``;
- empty resource, resource-template and prompt lists; anything else ``Method not found``;
- ``notifications/cancelled`` cancels the call it names (no answer is sent for it).

Requests are handled concurrently (an ``async`` tool on the event loop, a plain one on a
worker thread, as the SDK does). A ``lifespan`` (an async context manager factory, as the
SDK's) runs beside the tools: the home package's broker connection. The server ends when
stdin closes. One difference, deliberate: a line that is not a JSON-RPC request (not JSON,
longer than :data:`MAX_LINE`, no ``jsonrpc: "2.0"``) is answered with the JSON-RPC parse or
invalid-request error, where the SDK drops it without a word; either way nothing changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import logging
import sys
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar, get_args, get_origin

import pydantic_core
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

log = logging.getLogger(__name__)

HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""protocol revisions reached through ``initialize``, oldest to newest"""
ENVELOPE_VERSIONS = ("2026-07-28",)
"""protocol revisions with the per-request ``_meta`` envelope"""
VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
MAX_LINE = 16 * 1024 * 1024
"""bytes: the longest request line read (a longer one is answered with a parse error)"""

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
UNSUPPORTED_VERSION = -32022
BEFORE_HANDSHAKE = frozenset({"ping"})
"""what a handshake-era client may ask before ``initialize``"""

F = TypeVar("F", bound=Callable[..., Any])


class ToolError(Exception):
    """Raised by a tool: its text reaches the caller (``Error executing tool NAME: TEXT``)."""


class _Args(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)


@dataclass(frozen=True)
class _Tool:
    name: str
    description: str
    fn: Callable[..., Any]
    is_async: bool
    args: type[BaseModel]
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    output: type[BaseModel] | None
    """a primitive result's model (``result``: answered as ``{"result": value}``); ``None``
    for a ``dict[str, Any]`` result"""

    def listed(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "outputSchema": self.output_schema,
        }


@dataclass(eq=False)
class _RpcError(Exception):
    """A request refused with a JSON-RPC error (raised and caught inside this module)."""

    code: int
    message: str
    data: Any = None


PRIMITIVES = (str, int, float, bool)


def _tool(fn: Callable[..., Any]) -> _Tool:
    """A tool from a typed function (a signature this server cannot serve as the SDK does
    raises ``TypeError`` at registration, not at the first call)."""
    name = fn.__name__
    sig = inspect.signature(fn, eval_str=True)
    fields: dict[str, Any] = {}
    for p in sig.parameters.values():
        if p.annotation is inspect.Parameter.empty or p.name.startswith("_"):
            raise TypeError(f"tool {name}: parameter {p.name} needs a type and a public name")
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or hasattr(BaseModel, p.name):
            raise TypeError(f"tool {name}: parameter {p.name} is not supported")
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[p.name] = (p.annotation, default)
    args = create_model(f"{name}Arguments", __base__=_Args, **fields)
    ret = sig.return_annotation
    output: type[BaseModel] | None = None
    if ret in PRIMITIVES:
        output = create_model(f"{name}Output", result=(ret, ...))
        output_schema = output.model_json_schema()
    elif get_origin(ret) is dict and get_args(ret) == (str, Any):
        output_schema = {
            "additionalProperties": True,
            "title": f"{name}DictOutput",
            "type": "object",
        }
    else:
        raise TypeError(f"tool {name}: return type {ret!r} is not supported")
    return _Tool(
        name=name,
        description=fn.__doc__ or "",
        fn=fn,
        is_async=inspect.iscoroutinefunction(fn),
        args=args,
        input_schema=args.model_json_schema(),
        output_schema=output_schema,
        output=output,
    )


def _pre_parse(args: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """The SDK's leniency: a JSON array or object sent as text for a parameter that is not
    text is parsed first (a JSON number, string or boolean sent as text is left to pydantic)."""
    out = dict(data)
    for key, value in data.items():
        info = args.model_fields.get(key)
        if info is None or not isinstance(value, str) or info.annotation is str:
            continue
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            continue
        if not isinstance(parsed, str | int | float):
            out[key] = parsed
    return out


def _error_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


class MCPServer:
    """A capability package's MCP server (see the module doc)."""

    def __init__(
        self,
        name: str,
        version: str = "",
        *,
        lifespan: Callable[[MCPServer], contextlib.AbstractAsyncContextManager[Any]] | None = None,
    ) -> None:
        self.name = name
        self.version = version
        self._lifespan = lifespan
        """entered before the first request is read, left after the last answer (what a
        package runs beside its tools: the home package's MQTT connection)"""
        self._tools: dict[str, _Tool] = {}
        self._modern: bool | None = None
        """the connection's era, decided by its first request (``None``: none yet)"""
        self._initialized = False
        """the handshake era's gate: ``initialize`` answered, or ``notifications/initialized``"""
        self._calls: dict[Any, asyncio.Task[None]] = {}

    def tool(self) -> Callable[[F], F]:
        """Serve the decorated function as a tool (named after it, described by its
        docstring)."""

        def register(fn: F) -> F:
            t = _tool(fn)
            self._tools[t.name] = t
            return fn

        return register

    def run(self, transport: str = "stdio") -> None:
        """Serve on stdin/stdout until stdin closes."""
        if transport != "stdio":
            raise ValueError(f"transport {transport!r}: only stdio is served")
        asyncio.run(self.serve(sys.stdin.buffer, sys.stdout.buffer))

    async def serve(self, stdin: Any, stdout: Any) -> None:
        """Answer the JSON-RPC lines of ``stdin`` on ``stdout`` (binary files) until EOF."""
        loop = asyncio.get_running_loop()
        self._stdout = stdout
        life = self._lifespan(self) if self._lifespan is not None else contextlib.nullcontext()
        # its own thread: tools running on the shared worker threads never hold up reading
        # (a cancellation among them)
        reader = ThreadPoolExecutor(1, thread_name_prefix="mcp-stdin")
        try:
            async with life, asyncio.TaskGroup() as tg:
                while True:
                    line = await loop.run_in_executor(reader, _read_line, stdin)
                    if line is None:
                        break
                    if line.strip():
                        self._dispatch(tg, line)
                for task in list(self._calls.values()):  # stdin closed: the client is gone
                    task.cancel()
        finally:
            reader.shutdown(wait=False)

    def _send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        self._stdout.write(data)  # from the event loop only: one whole line at a time
        self._stdout.flush()

    def _dispatch(self, tg: asyncio.TaskGroup, line: bytes) -> None:
        if len(line) > MAX_LINE:  # cut by _read_line
            self._send(_rpc_error(None, PARSE_ERROR, "Parse error", "line too long"))
            return
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError) as exc:
            self._send(_rpc_error(None, PARSE_ERROR, "Parse error", str(exc)))
            return
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
            self._send(_rpc_error(None, INVALID_REQUEST, "Invalid Request", ""))
            return
        method = msg.get("method")
        if "id" not in msg:  # a notification (or an answer to a request we never sent)
            self._notified(method, msg.get("params"))
            return
        rid = msg["id"]
        if not isinstance(rid, str | int) or not isinstance(method, str):
            valid_id = rid if isinstance(rid, str | int) else None
            self._send(_rpc_error(valid_id, INVALID_REQUEST, "Invalid Request", ""))
            return
        try:  # decided here, in arrival order: the era, the handshake's gate
            run, modern = self._route(method, msg.get("params"))
        except _RpcError as exc:
            self._send(_rpc_error(rid, exc.code, exc.message, exc.data))
            return
        task = tg.create_task(self._answer(rid, method, run, modern), name=f"mcp-{method}-{rid}")
        self._calls[rid] = task
        task.add_done_callback(functools.partial(self._forget, rid))

    def _notified(self, method: Any, params: Any) -> None:
        if method == "notifications/initialized":
            self._initialized = True
        elif method == "notifications/cancelled":
            target = params.get("requestId") if isinstance(params, dict) else None
            task = self._calls.get(target) if isinstance(target, str | int) else None
            if task is not None:
                task.cancel()

    def _forget(self, rid: str | int, _task: asyncio.Task[None]) -> None:
        self._calls.pop(rid, None)

    def _route(
        self, method: str, params: Any
    ) -> tuple[Callable[[], Awaitable[dict[str, Any]]], bool]:
        """The request's handler and whether it is served in the enveloped era, or the
        :class:`_RpcError` it is refused with. The first request decides the connection's
        era, once: an enveloped request (not ``initialize``) opens the ``2026-07-28`` era,
        anything else the handshake era."""
        if self._modern is None:
            self._modern = method != "initialize" and _has_envelope(params)
        if params is not None and not isinstance(params, dict):
            raise _RpcError(INVALID_PARAMS, "Invalid request parameters", "")
        args: dict[str, Any] = params or {}
        if self._modern:
            if method == "initialize":
                asked = args.get("protocolVersion")
                data: dict[str, Any] = {"supported": list(ENVELOPE_VERSIONS)}
                if isinstance(asked, str):
                    data["requested"] = asked
                raise _RpcError(
                    UNSUPPORTED_VERSION,
                    "connection is serving the 2026-07-28 protocol; the initialize handshake "
                    "is not accepted",
                    data,
                )
            _check_envelope(args)
        elif method != "initialize" and _has_envelope(args):
            raise _RpcError(
                INVALID_REQUEST,
                "this connection serves the handshake protocol era; requests carrying the "
                "2026-07-28 envelope are not accepted on it",
            )
        if method == "tools/call" and not _call_shape(args):
            raise _RpcError(INVALID_PARAMS, "Invalid request parameters", "")
        if method == "initialize":
            result = self._initialize(args)
            return _ready(result), False
        handler = (_ENVELOPE_HANDLERS if self._modern else _HANDSHAKE_HANDLERS).get(method)
        if handler is None:
            raise _RpcError(METHOD_NOT_FOUND, "Method not found", method)
        if not self._modern and not self._initialized and method not in BEFORE_HANDSHAKE:
            raise _RpcError(INVALID_PARAMS, "Invalid request parameters", "")
        return functools.partial(handler, self, args), self._modern

    async def _answer(
        self,
        rid: str | int,
        method: str,
        run: Callable[[], Awaitable[dict[str, Any]]],
        modern: bool,
    ) -> None:
        result = await run()
        if modern:
            result["resultType"] = "complete"
            result["_meta"] = {SERVER_INFO_KEY: self._info()}
            if method != "tools/call":
                result["cacheScope"] = "private"
                result["ttlMs"] = 0
        self._send({"jsonrpc": "2.0", "id": rid, "result": result})

    def _info(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version}

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        asked = params.get("protocolVersion")
        version = asked if asked in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
        self._initialized = True
        return {
            "capabilities": {
                "prompts": {"listChanged": False},
                "resources": {"listChanged": False, "subscribe": False},
                "tools": {"listChanged": False},
            },
            "protocolVersion": version,
            "serverInfo": self._info(),
        }

    async def _discover(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "capabilities": {
                "prompts": {"listChanged": True},
                "resources": {"listChanged": True, "subscribe": True},
                "tools": {"listChanged": True},
            },
            "supportedVersions": list(ENVELOPE_VERSIONS),
        }

    async def _ping(self, params: dict[str, Any]) -> dict[str, Any]:
        return {}

    async def _list_tools(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"tools": [t.listed() for t in self._tools.values()]}

    async def _call(self, params: dict[str, Any]) -> dict[str, Any]:
        name, arguments = params["name"], params.get("arguments") or {}
        tool = self._tools.get(name)
        if tool is None:
            return _error_result(f"Unknown tool: {name}")
        try:
            validated = tool.args.model_validate(_pre_parse(tool.args, arguments))
        except ValidationError as exc:
            log.info("tool %r rejected arguments: %s", name, [e["loc"] for e in exc.errors()])
            return _error_result(f"Error executing tool {name}: {exc}")
        kwargs = {k: getattr(validated, k) for k in type(validated).model_fields}
        try:
            if tool.is_async:
                result = await tool.fn(**kwargs)
            else:
                result = await asyncio.to_thread(tool.fn, **kwargs)
            return _result(tool, result)
        except ToolError as exc:
            return _error_result(f"Error executing tool {name}: {exc}")
        except Exception:  # a crash: its text stays on the server's stderr
            log.exception("tool %r failed", name)
            return _error_result(f"Error executing tool {name}")


def _result(tool: _Tool, result: Any) -> dict[str, Any]:
    """A tool's return value as the SDK answers it (raises for a value its type refuses)."""
    text = (
        result
        if isinstance(result, str)
        else pydantic_core.to_json(result, fallback=str, indent=2).decode()
    )
    if tool.output is not None:
        structured = tool.output.model_validate({"result": result}).model_dump(mode="json")
    else:
        if not isinstance(result, dict) or not all(isinstance(k, str) for k in result):
            raise TypeError(f"tool {tool.name} returned {type(result).__name__}, not an object")
        structured = pydantic_core.to_jsonable_python(result)
    return {
        "content": [{"type": "text", "text": text}],
        "isError": False,
        "structuredContent": structured,
    }


def _has_envelope(params: Any) -> bool:
    """Whether a request carries the ``2026-07-28`` envelope's version key (what decides the
    era: a half-built envelope is still one, and is refused for what it lacks)."""
    if not isinstance(params, dict):
        return False
    meta = params.get("_meta")
    return isinstance(meta, dict) and VERSION_KEY in meta


def _check_envelope(params: dict[str, Any]) -> None:
    """Refuse an enveloped-era request whose envelope is missing, incomplete or of a version
    not served, as the SDK does (first failure wins)."""
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        raise _RpcError(
            INVALID_PARAMS,
            f"params._meta must be an object carrying the required {VERSION_KEY!r} and "
            f"{CAPABILITIES_KEY!r} envelope keys",
        )
    missing = [k for k in (VERSION_KEY, CAPABILITIES_KEY) if k not in meta]
    if missing:
        raise _RpcError(
            INVALID_PARAMS,
            f"params._meta is missing the required envelope key(s): {', '.join(missing)}",
        )
    version = meta[VERSION_KEY]
    if not isinstance(version, str):
        raise _RpcError(INVALID_PARAMS, "the protocol-version envelope value must be a string")
    if version not in ENVELOPE_VERSIONS:
        raise _RpcError(
            UNSUPPORTED_VERSION,
            "Unsupported protocol version",
            {"supported": list(ENVELOPE_VERSIONS), "requested": version},
        )


def _call_shape(params: dict[str, Any]) -> bool:
    """A ``tools/call``'s parameters: a tool name and, if any, an object of arguments."""
    return isinstance(params.get("name"), str) and isinstance(
        params.get("arguments", {}), dict | None
    )


def _ready(result: dict[str, Any]) -> Callable[[], Awaitable[dict[str, Any]]]:
    async def answer() -> dict[str, Any]:
        return result

    return answer


def _read_line(stdin: Any) -> bytes | None:
    """The next line of ``stdin`` (``None`` at its end); a line longer than
    :data:`MAX_LINE` is read to its end and returned cut, one byte over the limit."""
    line: bytes = stdin.readline(MAX_LINE + 1)
    if not line:
        return None
    if len(line) > MAX_LINE and not line.endswith(b"\n"):
        while True:
            rest = stdin.readline(MAX_LINE)
            if not rest or rest.endswith(b"\n"):
                break
    return line


def _rpc_error(rid: str | int | None, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": rid, "error": error}


Handler = Callable[[MCPServer, dict[str, Any]], Awaitable[dict[str, Any]]]


def _empty(key: str) -> Handler:
    """A listing this server has nothing in (resources, templates, prompts)."""

    async def listing(server: MCPServer, params: dict[str, Any]) -> dict[str, Any]:
        return {key: []}

    return listing


_HANDLERS: dict[str, Handler] = {
    "tools/list": MCPServer._list_tools,
    "tools/call": MCPServer._call,
    "resources/list": _empty("resources"),
    "resources/templates/list": _empty("resourceTemplates"),
    "prompts/list": _empty("prompts"),
}
"""method → handler in both eras (``initialize`` is answered before the envelope check)"""
_HANDSHAKE_HANDLERS: dict[str, Handler] = {**_HANDLERS, "ping": MCPServer._ping}
_ENVELOPE_HANDLERS: dict[str, Handler] = {**_HANDLERS, "server/discover": MCPServer._discover}
