"""hostile: a test package whose tools try what a sandbox must refuse.

Each tool reports what happened as plain text (``receipts: mcp``): ``OK …`` when the attempt
worked, ``REFUSED …`` with the error when it did not. ``burn_cpu`` never answers: its
server is killed by the CPU limit.
"""

from __future__ import annotations

import os
import socket
import sqlite3

from hub.capabilities.package_server import MCPServer

mcp = MCPServer("hostile")


def refused(exc: BaseException) -> str:
    return f"REFUSED {type(exc).__name__}: {exc}"


@mcp.tool()
def read_file(path: str) -> str:
    """Read a file."""
    try:
        with open(path, "rb") as fh:
            return f"OK {len(fh.read())} bytes"
    except OSError as exc:
        return refused(exc)


@mcp.tool()
def open_db(path: str) -> str:
    """Open an SQLite database and count its tables."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True)
        n = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        conn.close()
        return f"OK {n} tables"
    except sqlite3.Error as exc:
        return refused(exc)


@mcp.tool()
def write_file(path: str, text: str = "x") -> str:
    """Write a file."""
    try:
        with open(path, "w") as fh:
            fh.write(text)
        return "OK written"
    except OSError as exc:
        return refused(exc)


@mcp.tool()
def connect(host: str, port: int, text: str = "ping") -> str:
    """Connect straight to host:port, send text, return the answer."""
    try:
        with socket.create_connection((host, port), timeout=5) as s:
            s.sendall(text.encode() + b"\n")
            return "OK " + s.recv(1024).decode().strip()
    except OSError as exc:
        return refused(exc)


@mcp.tool()
def connect_configured(text: str = "ping") -> str:
    """Connect to the configured YIMI_ALLOWED_HOST:YIMI_ALLOWED_PORT (as a real package
    reads its broker's address from its settings)."""
    host, port = os.environ["YIMI_ALLOWED_HOST"], int(os.environ["YIMI_ALLOWED_PORT"])
    return connect(host, port, text)


@mcp.tool()
def via_proxy(target: str, text: str = "ping") -> str:
    """Ask the hub's egress proxy for target (host:port) directly."""
    path = os.environ.get("YIMI_EGRESS_SOCKET", "")
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(path)
            s.sendall(target.encode() + b"\n")
            answer = s.makefile("rb").readline().decode().strip()
            if not answer.startswith("OK"):
                return f"REFUSED {answer}"
            s.sendall(text.encode() + b"\n")
            return "OK " + s.recv(1024).decode().strip()
    except OSError as exc:
        return refused(exc)


@mcp.tool()
def fork_many(n: int) -> str:
    """Fork n children that wait until told to exit."""
    r, w = os.pipe()
    children = []
    error = ""
    try:
        for _ in range(n):
            pid = os.fork()
            if pid == 0:
                os.close(w)
                os.read(r, 1)
                os._exit(0)
            children.append(pid)
    except OSError as exc:
        error = refused(exc)
    finally:
        os.close(w)
        os.close(r)
        for pid in children:
            os.waitpid(pid, 0)
    return error + f" after {len(children)} forks" if error else f"OK {len(children)} forks"


@mcp.tool()
def allocate(mb: int) -> str:
    """Allocate mb MiB."""
    try:
        block = bytearray(mb * 1024 * 1024)
        return f"OK {len(block) // (1024 * 1024)} MiB"
    except MemoryError as exc:
        return refused(exc)


@mcp.tool()
def burn_cpu() -> str:
    """Spin until killed."""
    x = 0
    while True:
        x += 1


@mcp.tool()
def whoami() -> str:
    """The uid, the interfaces and the environment's HOME."""
    ifaces = sorted(name for _, name in socket.if_nameindex())
    return f"OK uid={os.getuid()} ifaces={','.join(ifaces)} home={os.environ.get('HOME')}"


if __name__ == "__main__":
    mcp.run("stdio")
