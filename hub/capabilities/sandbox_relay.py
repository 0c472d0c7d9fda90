"""Inside a package's sandbox: relays for its declared egress, then the server itself.

``python -I -S sandbox_relay.py SOCKET ADDR:PORT=HOST:PORT ... -- COMMAND ARGS`` forks a
relay that listens on each ``ADDR:PORT`` (a loopback address of the sandbox's own network
namespace; ``/etc/hosts`` maps ``HOST`` to it) and hands every connection to the hub's
egress proxy over the unix ``SOCKET``, asking for ``HOST:PORT``; then it becomes
``COMMAND`` (the MCP server keeps the relay's stdin/stdout). Standard library only: it runs
before the package's own imports, with ``-I -S``.
"""

from __future__ import annotations

import asyncio
import os
import sys


async def _pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    try:
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
    except OSError:
        pass
    finally:
        try:
            w.write_eof()
        except OSError:
            pass


def _handler(sock: str, target: str):  # type: ignore[no-untyped-def]
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_unix_connection(sock)
            up_w.write(f"{target}\n".encode())
            await up_w.drain()
            answer = await up_r.readline()
            if not answer.startswith(b"OK"):
                writer.close()
                up_w.close()
                return
            await asyncio.gather(_pipe(reader, up_w), _pipe(up_r, writer))
            up_w.close()
        except OSError:
            pass
        finally:
            writer.close()

    return handle


async def _relay(sock: str, routes: list[tuple[str, int, str]], ready: int) -> None:
    for addr, port, target in routes:
        try:
            await asyncio.start_server(_handler(sock, target), addr, port)
        except OSError as exc:  # that route is not served; the others and the server are
            print(f"egress relay: {addr}:{port} for {target}: {exc}", file=sys.stderr)
    os.write(ready, b"1")
    os.close(ready)
    # forever: when the server (our parent, the sandbox's main process) ends, bwrap ends
    # and the kernel kills everything left in the sandbox's pid namespace, this relay too
    await asyncio.Event().wait()


def main(argv: list[str]) -> None:
    split = argv.index("--")
    sock, specs, command = argv[0], argv[1:split], argv[split + 1 :]
    routes = []
    for spec in specs:
        listen, _, target = spec.partition("=")
        addr, _, port = listen.rpartition(":")
        routes.append((addr, int(port), target))
    ready_r, ready_w = os.pipe()
    if os.fork() == 0:
        os.close(ready_r)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        asyncio.run(_relay(sock, routes, ready_w))
        os._exit(0)
    os.close(ready_w)
    os.read(ready_r, 1)  # the relay listens before the server starts
    os.close(ready_r)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
