"""A FAKE OpenAI-compatible chat-completions server for tests: real HTTP on loopback,
scripted replies (text and tool calls). It is not a model and never pretends to be one.

    async with FakeOpenAI() as fake:
        fake.queue("brain-model", text("ok, I'll do it"))
        fake.queue("sub-model", calls(("memory__recall", {"query": "cilantro"})), text("done"))
        ... OpenAIProvider(base_url=fake.base_url, api_key="k") ...
        fake.requests[0].body["messages"]      # every request, as JSON, for assertions

Replies come from ``responder(request) -> Reply`` (sync or async; an async responder may
wait on an event to hold a reply back); the default responder pops the queue of the
request's ``model`` and answers "fake: no scripted reply" when it is empty. ``stream: true``
requests get server-sent events in the chat-completions chunk format.

A reply may misbehave like a runaway server: ``stall()`` never answers (the connection is
held until the client gives up), ``trickle()`` starts an answer and never finishes it (a
space every few milliseconds for a plain request, empty stream chunks for ``stream: true``).
``answering`` counts requests still being answered, so a test can see that the client
really hung up. ``GET …/models`` lists ``models`` (default: the queued model names, or
``fake-model``); ``models_status`` makes it answer an HTTP error instead.

``POST …/audio/transcriptions`` (multipart: ``file``, ``model``, ``language``, ``prompt``) is
answered the same way, ``{"text": reply.text}`` from the queue of the form's ``model``; the
form fields are the request's ``body``, the uploaded file its ``file`` — it does not
recognise speech.
"""

from __future__ import annotations

import asyncio
import email.parser
import email.policy
import inspect
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

MAX_BODY = 8 * 1024 * 1024


@dataclass(frozen=True)
class Call:
    name: str
    args: dict[str, Any]
    call_id: str = ""


@dataclass(frozen=True)
class Reply:
    text: str | None = None
    calls: tuple[Call, ...] = ()
    status: int = 200
    """an HTTP error status (429, 500...) answers with an OpenAI-style error body"""
    misbehave: str = ""
    """``stall`` (never answer) or ``trickle`` (an answer that never ends)"""


def text(t: str) -> Reply:
    return Reply(text=t)


def stall() -> Reply:
    return Reply(misbehave="stall")


def trickle() -> Reply:
    return Reply(misbehave="trickle")


def calls(*items: tuple[str, dict[str, Any]] | Call, text: str | None = None) -> Reply:
    out = tuple(i if isinstance(i, Call) else Call(i[0], i[1]) for i in items)
    return Reply(text=text, calls=out)


@dataclass
class Request:
    """One request as the fake received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw: bytes
    file: bytes = b""
    """the uploaded file of a multipart request (a transcription's WAV)"""

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def messages(self) -> list[dict[str, Any]]:
        msgs = self.body.get("messages", [])
        return msgs if isinstance(msgs, list) else []

    def message_text(self) -> str:
        """Every message's content (and tool-call arguments) joined, for searching."""
        parts = []
        for m in self.messages:
            content = m.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts += [str(c.get("text", "")) for c in content if isinstance(c, dict)]
            for tc in m.get("tool_calls") or []:
                parts.append(str(tc.get("function", {}).get("arguments", "")))
        return "\n".join(parts)

    @property
    def tool_names(self) -> list[str]:
        return [t.get("function", {}).get("name", "") for t in self.body.get("tools", []) or []]

    def last_user(self) -> str:
        for m in reversed(self.messages):
            if m.get("role") == "user":
                c = m.get("content")
                return c if isinstance(c, str) else json.dumps(c)
        return ""


Responder = Callable[[Request], "Reply | Awaitable[Reply]"]


@dataclass
class FakeOpenAI:
    """The fake server. Use as an async context manager; ``base_url`` ends in ``/v1``."""

    responder: Responder | None = None
    host: str = "127.0.0.1"
    requests: list[Request] = field(default_factory=list)
    queues: dict[str, deque[Reply]] = field(default_factory=dict)
    models: list[str] | None = None
    """what ``GET /models`` lists (``None``: the queued model names, or ``fake-model``)"""
    models_status: int = 200
    answering: int = 0
    """requests being answered right now (a stalled one counts until the client hangs up)"""
    _server: asyncio.Server | None = None
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _conns: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def queue(self, model: str, *replies: Reply) -> None:
        self.queues.setdefault(model, deque()).extend(replies)

    def transcription_requests(self, model: str | None = None) -> list[Request]:
        return [
            r
            for r in self.requests
            if r.path.endswith("/audio/transcriptions") and (model is None or r.model == model)
        ]

    def chat_requests(self, model: str | None = None) -> list[Request]:
        return [
            r
            for r in self.requests
            if r.path.endswith("/chat/completions") and (model is None or r.model == model)
        ]

    async def __aenter__(self) -> FakeOpenAI:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._conns):
            t.cancel()
        await asyncio.gather(*self._conns, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    # ------------------------------------------------------------------ HTTP
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                method, path, _ = line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = h.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                size = int(headers.get("content-length", "0") or 0)
                if size > MAX_BODY:
                    await self._send(writer, 413, {"error": {"message": "too large"}})
                    return
                raw = await reader.readexactly(size) if size else b""
                file = b""
                if headers.get("content-type", "").startswith("multipart/form-data"):
                    body, file = _form(headers["content-type"], raw)
                else:
                    try:
                        body = json.loads(raw) if raw else {}
                    except ValueError:
                        body = {}
                req = Request(method, path.split("?", 1)[0], headers, body, raw, file)
                self.requests.append(req)
                self.answering += 1
                try:
                    if not await self._answer(req, reader, writer):
                        return  # a misbehaving answer: the connection is spent
                finally:
                    self.answering -= 1
                if headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        except asyncio.CancelledError:
            # the server is closing: end this connection quietly (asyncio's stream callback
            # would log a cancelled handler task as an error)
            return
        finally:
            self._conns.discard(task)
            writer.close()

    async def _answer(
        self, req: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one request; ``False`` when the connection cannot carry another."""
        if req.method == "GET" and req.path.endswith("/models"):
            if self.models_status != 200:
                err = {"error": {"message": "fake: no models here", "code": self.models_status}}
                await self._send(writer, self.models_status, err)
                return True
            models = self.models if self.models is not None else sorted(self.queues)
            data = [
                {"id": m, "object": "model", "owned_by": "fake"} for m in models or ["fake-model"]
            ]
            await self._send(writer, 200, {"object": "list", "data": data})
            return True
        if req.method == "POST" and req.path.endswith("/audio/transcriptions"):
            reply = await self._reply(req)
            if reply.status != 200:
                err = {"error": {"message": "fake error", "type": "fake", "code": reply.status}}
                await self._send(writer, reply.status, err)
                return True
            await self._send(writer, 200, {"text": reply.text or ""})
            return True
        if not req.path.endswith("/chat/completions"):
            await self._send(writer, 404, {"error": {"message": f"fake: no route {req.path}"}})
            return True
        reply = await self._reply(req)
        if reply.misbehave == "stall":
            await reader.read()  # nothing, until the client hangs up
            return False
        if reply.misbehave == "trickle":
            await self._trickle(writer, bool(req.body.get("stream")))
            return False
        if reply.status != 200:
            err = {"error": {"message": "fake error", "type": "fake", "code": reply.status}}
            await self._send(writer, reply.status, err)
            return True
        n = next(self._ids)
        tool_calls = [
            {
                "id": c.call_id or f"call_fake_{n}_{i}",
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.args)},
            }
            for i, c in enumerate(reply.calls)
        ]
        finish = "tool_calls" if tool_calls else "stop"
        if req.body.get("stream"):
            await self._stream(writer, req, n, reply.text, tool_calls, finish)
            return True
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if tool_calls:
            message["tool_calls"] = tool_calls
        await self._send(
            writer,
            200,
            {
                "id": f"chatcmpl-fake-{n}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": req.model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            },
        )
        return True

    @staticmethod
    async def _trickle(writer: asyncio.StreamWriter, stream: bool) -> None:
        """An answer that never ends, until the client hangs up (a write then fails)."""
        kind = "text/event-stream" if stream else "application/json"
        head = f"HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ntransfer-encoding: chunked\r\n\r\n"
        writer.write(head.encode())
        if stream:
            event = {
                "id": "chatcmpl-fake-trickle",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": "trickle",
                "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": None}],
            }
            piece = f"data: {json.dumps(event)}\n\n".encode()
        else:
            piece = b" "  # whitespace before a JSON body that never comes
        while True:
            writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.02)

    async def _reply(self, req: Request) -> Reply:
        if self.responder is not None:
            out = self.responder(req)
            return await out if inspect.isawaitable(out) else out
        q = self.queues.get(req.model)
        if q:
            return q.popleft()
        return Reply(text="fake: no scripted reply")

    async def _stream(
        self,
        writer: asyncio.StreamWriter,
        req: Request,
        n: int,
        content: str | None,
        tool_calls: list[dict[str, Any]],
        finish: str,
    ) -> None:
        head = (
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            "transfer-encoding: chunked\r\n\r\n"
        )
        writer.write(head.encode())

        def chunk(delta: dict[str, Any], reason: str | None = None) -> None:
            event = {
                "id": f"chatcmpl-fake-{n}",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": req.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
            }
            data = f"data: {json.dumps(event)}\n\n".encode()
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

        chunk({"role": "assistant", "content": ""})
        words = content.split(" ") if content else []
        for i, word in enumerate(words):
            chunk({"content": word + (" " if i < len(words) - 1 else "")})
        for i, tc in enumerate(tool_calls):
            chunk({"tool_calls": [{"index": i, **tc}]})
        chunk({}, finish)
        done = b"data: [DONE]\n\n"
        writer.write(f"{len(done):x}\r\n".encode() + done + b"\r\n0\r\n\r\n")
        await writer.drain()

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, status: int, obj: dict[str, Any]) -> None:
        data = json.dumps(obj).encode()
        reason = {200: "OK", 404: "Not Found", 413: "Too Large"}.get(status, "Error")
        head = (
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(data)}\r\n\r\n"
        )
        writer.write(head.encode() + data)
        await writer.drain()


@contextmanager
def serving(fake: FakeOpenAI | None = None) -> Iterator[FakeOpenAI]:
    """``fake`` served from its own event loop in a thread, for a synchronous test (a CLI
    command that runs ``asyncio.run`` itself). Set ``models``/``queues`` before a request."""
    fake = fake or FakeOpenAI()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: asyncio.Event | None = None

    async def main() -> None:
        nonlocal stop
        stop = asyncio.Event()
        async with fake:
            ready.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    try:
        if not ready.wait(10):
            raise RuntimeError("the fake OpenAI server did not start")
        yield fake
    finally:
        assert stop is not None
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


def _form(content_type: str, raw: bytes) -> tuple[dict[str, Any], bytes]:
    """A multipart form's text fields and its (first) file."""
    head = f"Content-Type: {content_type}\r\n\r\n".encode()
    msg = email.parser.BytesParser(policy=email.policy.default).parsebytes(head + raw)
    fields: dict[str, Any] = {}
    file = b""
    for part in msg.iter_parts():
        payload = part.get_payload(decode=True)
        if not isinstance(payload, bytes):
            continue
        if part.get_filename():
            file = file or payload
        else:
            fields[str(part.get_param("name", header="content-disposition"))] = payload.decode()
    return fields, file
