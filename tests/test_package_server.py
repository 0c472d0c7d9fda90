"""The built-in packages' lean MCP server (``hub.capabilities.package_server``) answers as the
MCP SDK's ``MCPServer`` does: every package server is run twice, once as it is and once with
the SDK's class in its place, on the same requests (both protocol eras: the ``initialize``
handshake and the ``2026-07-28`` envelope), and every answer must be the same. Then what
only the lean server promises: bad lines get a clear error and change nothing, a call is
cancelled by its client, calls run concurrently, and the SDK's own client works with it.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hub.capabilities import package_server
from hub.capabilities.package_server import MAX_LINE, MCPServer
from tests.waiting import poll_sync

REPO = Path(__file__).resolve().parent.parent
PROBE = REPO / "tests" / "packages" / "probe" / "server" / "server.py"
SERVERS = sorted(
    [
        *REPO.glob("packages/*/server/server.py"),
        PROBE,
        REPO / "tests" / "packages" / "hostile" / "server" / "server.py",
    ]
)
"""every built-in package's server (its fake declares the same tools: ``yimi package test``)"""
SDK_SHIM = (
    "import runpy, sys\n"
    "import mcp.server.mcpserver as sdk\n"
    "import hub.capabilities.package_server as lean\n"
    "lean.MCPServer = sdk.MCPServer\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)
"""runs a package server with the SDK's ``MCPServer`` in place of the lean one"""
ANSWER_S = 20.0
"""seconds a server has to answer every request of a script"""
ENVELOPE: dict[str, Any] = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
HANDSHAKE: list[dict[str, Any]] = [
    {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
]


def request(
    rid: int | str, method: str, params: dict[str, Any] | None = None, *, era: str = "old"
) -> dict[str, Any]:
    """A JSON-RPC request; ``era="new"`` adds the 2026-07-28 envelope."""
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if era == "new":
        msg["params"] = {**(params or {}), "_meta": ENVELOPE}
    elif params is not None:
        msg["params"] = params
    return msg


def exchange(server: Path, messages: list[dict[str, Any]], tmp: Path, *, sdk: bool) -> dict:
    """Send ``messages`` (one line each) to ``server``; its answers by request id (a request
    left unanswered for :data:`ANSWER_S` fails the test, naming it)."""
    cmd = [sys.executable, *(("-c", SDK_SHIM) if sdk else ()), str(server)]
    env = {**os.environ, "YIMI_STATE_DIR": str(tmp), "YIMI_SANDBOX": "off"}
    wanted = {m["id"] for m in messages if "id" in m}
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=tmp,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
        proc.stdin.flush()
        answers: dict[Any, Any] = {}
        pending = b""
        deadline = time.monotonic() + ANSWER_S
        while not wanted <= answers.keys():
            left = deadline - time.monotonic()
            ready, _, _ = select.select([proc.stdout], [], [], max(left, 0))
            assert ready, f"{server} (sdk={sdk}) left {wanted - answers.keys()} unanswered"
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            assert chunk, f"{server} (sdk={sdk}) ended before answering {wanted - answers.keys()}"
            *lines, pending = (pending + chunk).split(b"\n")
            for raw in lines:
                msg = json.loads(raw)
                answers[msg["id"]] = msg
        return answers
    finally:
        proc.stdin.close()
        if sdk:  # how the SDK's server ends is not what is compared
            proc.kill()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"{server} did not end when its stdin closed") from None


def same(server: Path, messages: list[dict[str, Any]], tmp: Path) -> dict:
    sdk = exchange(server, messages, tmp, sdk=True)
    lean = exchange(server, messages, tmp, sdk=False)
    assert lean == sdk
    return lean


def probe_script(era: str) -> list[dict[str, Any]]:
    calls = [
        ("echo", {"text": "你好"}),
        ("echo", {"text": "hi", "extra": 1}),
        ("echo", {"owner_requested": "true"}),
        ("echo", {"text": ["a"]}),
        ("progress", {"step": "2"}),
        ("progress", {"step": "x"}),
        ("progress", {}),
        ("slow", {"seconds": "0.01"}),
        ("garbage", {}),
        ("nope", {}),
    ]
    msgs = [] if era == "new" else list(HANDSHAKE)
    if era == "new":
        msgs.append(request("d", "server/discover", era=era))
    msgs += [
        request("p", "ping", era=era),
        request("t", "tools/list", era=era),
        request("r", "resources/list", era=era),
        request("rt", "resources/templates/list", era=era),
        request("pr", "prompts/list", era=era),
        request("b", "bogus/method", era=era),
        request("bad", "tools/call", {"name": "echo", "arguments": "zz"}, era=era),
        request("noname", "tools/call", {}, era=era),
        request("noargs", "tools/call", {"name": "echo"}, era=era),
    ]
    msgs += [
        request(i, "tools/call", {"name": n, "arguments": a}, era=era)
        for i, (n, a) in enumerate(calls, 1)
    ]
    return msgs


@pytest.mark.parametrize("era", ["old", "new"])
def test_the_probe_package_answers_every_request_as_the_sdk_does(era: str, tmp_path: Path) -> None:
    answers = same(PROBE, probe_script(era), tmp_path)
    assert (
        answers[1]["result"]["structuredContent"]["effects"][0]["fields"]["received"]["text"]
        == "你好"
    )
    assert "你好" in answers[1]["result"]["content"][0]["text"]  # not escaped
    assert answers[6]["result"]["isError"] is True
    assert "validation error for progressArguments" in answers[6]["result"]["content"][0]["text"]
    assert answers[10]["result"]["content"] == [{"type": "text", "text": "Unknown tool: nope"}]
    assert answers[10]["result"]["isError"] is True
    assert answers["b"]["error"]["code"] == -32601


HALF = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
FUTURE = {**ENVELOPE, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
ERA_SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "handshake era, gate closed until initialize": [
        request(1, "tools/list"),
        request(2, "ping"),
        request(3, "tools/list", era="new"),
        request(4, "server/discover"),
        {**HANDSHAKE[0], "id": 5, "params": {**HANDSHAKE[0]["params"], "protocolVersion": "1999"}},
        request(6, "tools/list"),
        request(7, "tools/call", {"name": "echo", "arguments": [1]}),
    ],
    "handshake era opened by a bare initialized notification": [
        HANDSHAKE[1],
        request(1, "tools/list"),
        request(2, "server/discover", era="new"),
    ],
    "enveloped era": [
        request(1, "tools/list", era="new"),
        request(2, "tools/list"),
        {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": HALF}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": FUTURE}},
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/list",
            "params": {"_meta": {**ENVELOPE, "io.modelcontextprotocol/protocolVersion": 7}},
        },
        request(6, "ping", era="new"),
        HANDSHAKE[0],
        {**HANDSHAKE[0], "id": 8, "params": {"protocolVersion": 3}},
        request(9, "server/discover", era="new"),
        request(10, "bogus", era="new"),
    ],
    "enveloped era opened by a half-built envelope": [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": HALF}},
        request(2, "tools/list", era="new"),
    ],
}


@pytest.mark.parametrize("script", ERA_SCRIPTS, ids=lambda k: k.replace(" ", "-"))
def test_the_first_request_decides_the_era_as_with_the_sdk(script: str, tmp_path: Path) -> None:
    answers = same(PROBE, ERA_SCRIPTS[script], tmp_path)
    assert any("error" in a for a in answers.values())
    assert any("result" in a for a in answers.values())


@pytest.mark.parametrize("server", SERVERS, ids=lambda p: "/".join(p.parts[-3:-1]))
def test_every_built_in_package_lists_and_refuses_its_tools_as_the_sdk_does(
    server: Path, tmp_path: Path
) -> None:
    """Every built-in package server: the same tools with the same schemas, and the same
    refusal of a call with no arguments (nothing runs). In the era the hub's client speaks;
    the handshake era is the probe's tests' (the listing does not depend on the era)."""
    listing = exchange(server, [request("t", "tools/list", era="new")], tmp_path, sdk=False)
    tools = listing["t"]["result"]["tools"]
    assert tools
    needy = [t["name"] for t in tools if t["inputSchema"].get("required")]
    msgs = [
        request("t", "tools/list", era="new"),
        *(request(n, "tools/call", {"name": n, "arguments": {}}, era="new") for n in needy),
    ]
    answers = same(server, msgs, tmp_path)
    assert answers["t"]["result"]["tools"] == tools
    for n in needy:
        assert answers[n]["result"]["isError"] is True
        assert answers[n]["result"]["content"][0]["text"].startswith(f"Error executing tool {n}: ")


def test_the_sdk_client_lists_and_calls_the_tools_of_a_lean_server(tmp_path: Path) -> None:
    import mcp

    async def main() -> tuple[Any, Any, Any]:
        params = mcp.StdioServerParameters(
            command=sys.executable, args=[str(PROBE)], env={"YIMI_STATE_DIR": str(tmp_path)}
        )
        async with mcp.Client(params, raise_exceptions=False) as client:
            listed = await client.list_tools()
            ok = await client.call_tool("save_note", {"title": "t", "text": "买菜"})
            bad = await client.call_tool("progress", {"step": "x"})
            return listed, ok, bad

    listed, ok, bad = asyncio.run(main())
    assert {t.name for t in listed.tools} >= {"save_note", "echo", "slow", "progress"}
    assert ok.is_error is False
    assert ok.structured_content["effects"][0]["fields"] == {"title": "t"}
    assert json.loads((tmp_path / "notes.jsonl").read_text())["text"] == "买菜"
    assert bad.is_error is True


class Lines:
    """A lean server run in this process on pipes: lines in, answers out."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        r_in, self._w_in = os.pipe()
        self._r_out, w_out = os.pipe()
        self._stdin = os.fdopen(r_in, "rb")
        self._stdout = os.fdopen(w_out, "wb")
        self.out = os.fdopen(self._r_out, "rb")
        self.thread = threading.Thread(
            target=lambda: asyncio.run(server.serve(self._stdin, self._stdout)), name="lean-server"
        )

    def __enter__(self) -> Lines:
        self.thread.start()
        return self

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._w_in, view) :]

    def answer(self) -> dict[str, Any]:
        return json.loads(self.out.readline())

    def rest(self) -> list[dict[str, Any]]:
        """Close the server's stdin; every answer it writes until it ends."""
        os.close(self._w_in)
        self._w_in = -1
        self.thread.join(10)
        assert not self.thread.is_alive()
        self._stdout.close()
        return [json.loads(raw) for raw in self.out.read().splitlines()]

    def __exit__(self, *exc: object) -> None:
        if self._w_in >= 0:
            os.close(self._w_in)
        self.thread.join(10)
        assert not self.thread.is_alive()
        self._stdin.close()
        if not self._stdout.closed:
            self._stdout.close()
        self.out.close()


@dataclass
class Toy:
    """A lean server with tools that wait, block, fail and count, and what a test watches."""

    server: MCPServer = field(default_factory=lambda: MCPServer("toy"))
    release: threading.Event = field(default_factory=threading.Event)
    """lets ``blocking`` return"""
    cancelled: threading.Event = field(default_factory=threading.Event)
    """set when a ``wait`` call was cancelled"""

    def __post_init__(self) -> None:
        server, release, cancelled = self.server, self.release, self.cancelled

        @server.tool()
        async def wait(seconds: float) -> dict[str, Any]:
            """Waits."""
            try:
                await asyncio.sleep(seconds)
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return {"waited": seconds}

        @server.tool()
        def blocking() -> str:
            """Blocks its worker thread until released."""
            release.wait(10)
            return "released"

        @server.tool()
        def fail(kind: str) -> dict[str, Any]:
            """Fails."""
            if kind == "tool":
                raise package_server.ToolError("the shop is closed")
            raise RuntimeError("secret detail")

        @server.tool()
        def count() -> int:
            """A number."""
            return 3


def line(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg).encode() + b"\n"


def call(rid: int, name: str, **args: Any) -> bytes:
    return line(request(rid, "tools/call", {"name": name, "arguments": args}, era="new"))


def test_bad_lines_get_a_clear_error_and_the_next_request_is_answered() -> None:
    with Lines(Toy().server) as s:
        s.send(b"not json\n")
        assert s.answer()["error"] == {
            "code": -32700,
            "message": "Parse error",
            "data": "Expecting value: line 1 column 1 (char 0)",
        }
        for bad in (b"[1, 2]\n", b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}\n'):
            s.send(bad)
            assert s.answer() == {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": -32600, "message": "Invalid Request", "data": ""},
            }
        s.send(line({"jsonrpc": "2.0", "id": 7, "method": 5}))
        assert s.answer()["error"]["code"] == -32600
        s.send(b"{" + b" " * MAX_LINE + b"\n")  # over the cap: cut, and its rest skipped
        assert s.answer()["error"] == {
            "code": -32700,
            "message": "Parse error",
            "data": "line too long",
        }
        s.send(call(1, "count"))
        got = s.answer()
        assert got["id"] == 1
        assert got["result"]["structuredContent"] == {"result": 3}
        assert got["result"]["content"] == [{"type": "text", "text": "3"}]


def test_a_tool_error_keeps_its_text_and_a_crash_does_not() -> None:
    with Lines(Toy().server) as s:
        s.send(call(1, "fail", kind="tool"))
        assert s.answer()["result"]["content"][0]["text"] == (
            "Error executing tool fail: the shop is closed"
        )
        s.send(call(2, "fail", kind="crash"))
        got = s.answer()["result"]
        assert got["isError"] is True
        assert got["content"][0]["text"] == "Error executing tool fail"


def test_calls_run_concurrently_and_a_cancelled_call_is_never_answered() -> None:
    toy = Toy()
    with Lines(toy.server) as s:
        s.send(call(1, "blocking"))  # holds a worker thread
        s.send(call(2, "wait", seconds=30))
        s.send(call(3, "wait", seconds=0))
        assert s.answer()["id"] == 3  # neither the thread nor the waiting call holds it up
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}}
        s.send(line(cancel))
        poll_sync(toy.cancelled.is_set, 10, "the cancelled call to stop")
        toy.release.set()
        assert s.answer()["id"] == 1
        s.send(call(4, "count"))
        assert s.answer()["id"] == 4
        assert [m["id"] for m in s.rest()] == []  # 2 never answered


def test_a_tool_the_server_cannot_describe_is_refused_when_it_is_registered() -> None:
    server = MCPServer("toy")
    with pytest.raises(TypeError, match="return type"):

        @server.tool()
        def listy() -> list[str]:
            """A list."""
            return []

    with pytest.raises(TypeError, match="needs a type"):

        @server.tool()
        def untyped(x) -> str:  # type: ignore[no-untyped-def]
            """Untyped."""
            return ""
