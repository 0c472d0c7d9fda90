"""gRPC flood bench: a real hub's resident memory under rounds of 8 concurrent maximum-size
unauthenticated requests, and ``yimi say`` latency meanwhile.

1. a home is made, one device flashed, and a real hub started on loopback;
2. ``yimi say`` (the CLI, a process per utterance) is timed ``--says`` times with nothing
   else going on: the same-run baseline; then the hub's warm-up is let end (its recall
   index takes the says in and loads its embedding model once, about 100 MB it keeps) and
   its RSS steady, and that RSS is the memory baseline;
3. the flood: rounds of 8 concurrent calls from one attacker address, each with a
   ``--mib`` MiB body and no valid authentication (a unary ``Identify``, ``Pair``,
   ``Sync`` and ``Enrol``; a streamed ``Sync`` without authentication; one with a forged
   one; one with a garbage one; a streamed ``Enrol`` without), while ``yimi say`` is timed
   again ``--says`` times. The hub's RSS is sampled every 50 ms;
4. after the flood: seconds until the hub's RSS is back within 8 MB of its baseline.

It prints the RSS before, the peak during, and after (growth in MB; goal ≤ 64 MB, back
within 10 s), the say latency medians with and without the flood (and their ratio), and
the refusals the hub counted by reason (hub.db ``counters``, read once the hub stopped). Run:
``.venv/bin/python bench/grpc_flood.py [--mib 60] [--says 5] [--quick]`` (or as
``python -m bench.grpc_flood``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script

import grpc
from nacl.signing import SigningKey

from bench.hubproc import HubProcess, child_env, cpu_seconds, finish
from bench.stats import median
from protos import mesh_pb2
from provisioning.bundle import Bundle, flash
from provisioning.home import Home
from storage.sqlite import read_rows
from sync.envelope import Sealer
from sync.hub_rpc import AUTH_METADATA, CHUNK_BYTES, rpc_auth
from sync.tls import ClientTls
from worlds import ports

SAMPLE_S = 0.05
BACK_WITHIN_MB = 8.0
"""MB: 'back to baseline' is an RSS at most this much over the one before the flood"""
BACK_TIMEOUT_S = 30.0
WARM_TIMEOUT_S = 30.0
"""seconds the hub gets to finish its warm-up before the baseline is taken anyway"""
STEADY_S = 1.0
STEADY_MB = 2.0
"""the baseline is taken once the RSS stayed within this many MB for :data:`STEADY_S`"""
RECALL_INDEXED = "recall index:"
"""the hub's log line once the recall index took in timeline entries (the first time, it
loads its embedding model: memory the hub keeps, not growth under the flood)"""
CONCURRENT = 8
SEND_OPTIONS = [("grpc.max_send_message_length", 100 * 1024 * 1024)]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@dataclass
class Sampler:
    """The hub's RSS every :data:`SAMPLE_S`, while running."""

    pid: int
    samples: list[tuple[float, float]] = field(default_factory=list)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.samples.append((time.monotonic(), rss_mb(self.pid)))
            await asyncio.sleep(SAMPLE_S)

    def peak(self, since: float, until: float) -> float:
        return max((mb for t, mb in self.samples if since <= t <= until), default=float("nan"))


async def say(bundle: Path, text: str) -> float:
    """Seconds for ``yimi say`` (a process, as a person runs it) to return."""
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli",
        "say",
        "--bundle",
        str(bundle),
        text,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=child_env(),
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"yimi say failed ({proc.returncode}): {out.decode(errors='replace')}")
    return time.monotonic() - started


async def says(bundle: Path, count: int, tag: str) -> list[float]:
    return [await say(bundle, f"what time is it {tag} {i}") for i in range(count)]


async def stream_of(body: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(body), CHUNK_BYTES):
        yield mesh_pb2.EnvelopeBytes(data=body[start : start + CHUNK_BYTES]).SerializeToString()


def flood_calls(
    channel: grpc.aio.Channel, body: bytes, forger: Sealer
) -> list[Callable[[], Awaitable[object]]]:
    """8 calls to start (a grpc.aio call starts when it is made), each carrying ``body`` (a
    serialized message of the method's request type: field 1 holds the bytes, so it parses
    as any of them) and no valid authentication."""

    def unary(method: str) -> Awaitable[object]:
        return channel.unary_unary(f"/yimi.mesh.v1.Hub/{method}", None, None)(body, timeout=60)

    def streamed(method: str, metadata: tuple[tuple[str, bytes], ...] = ()) -> Awaitable[object]:
        call = channel.stream_unary(f"/yimi.mesh.v1.Hub/{method}", None, None)
        return call(stream_of(body), timeout=60, metadata=metadata)

    return [
        lambda: unary("Identify"),
        lambda: unary("Pair"),
        lambda: unary("Sync"),
        lambda: unary("Enrol"),
        lambda: streamed("Sync"),
        lambda: streamed("Sync", rpc_auth(forger, "Sync", body)),
        lambda: streamed("Sync", ((AUTH_METADATA, os.urandom(200)),)),
        lambda: streamed("Enrol"),
    ]


async def outcome(call: Awaitable[object]) -> str:
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code().name
    return "OK"


async def flood(
    tls: ClientTls, port: int, body: bytes, forger: Sealer, stop: asyncio.Event
) -> list[str]:
    """Rounds of :data:`CONCURRENT` calls (one channel each) until ``stop``; every outcome."""
    outcomes: list[str] = []
    while not stop.is_set():
        channels = [tls.channel("127.0.0.1", port, SEND_OPTIONS) for _ in range(8)]
        try:
            calls = [flood_calls(ch, body, forger)[i]() for i, ch in enumerate(channels)]
            outcomes += await asyncio.gather(*map(outcome, calls))
        finally:
            for ch in channels:
                await ch.close(None)
    return outcomes


@dataclass
class Results:
    base_mb: float = 0.0
    peak_mb: float = 0.0
    after_mb: float = 0.0
    back_s: float = float("nan")
    quiet: list[float] = field(default_factory=list)
    flooded: list[float] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)
    flood_s: float = 0.0
    warm_s: float = 0.0
    """seconds waited after the quiet says for the hub's warm-up to end (:func:`warm`)"""
    hub_cpu_s: float = 0.0
    """CPU seconds the hub spent during the flood"""
    attacker_cpu_s: float = 0.0
    """CPU seconds the attacker (this process) spent during the flood"""


async def warm(hub: HubProcess, sampler: Sampler) -> float:
    """Seconds until the hub's warm-up after the first says is over: the recall index has
    taken the says' timeline entries in (:data:`RECALL_INDEXED`) and the RSS has stayed within
    :data:`STEADY_MB` for :data:`STEADY_S`; at most :data:`WARM_TIMEOUT_S`, then the baseline
    is taken anyway (a hub whose timeline recall is off never logs it)."""
    started = time.monotonic()
    deadline = started + WARM_TIMEOUT_S
    indexed = False
    while (now := time.monotonic()) < deadline:
        if not indexed:
            with contextlib.suppress(OSError):
                indexed = RECALL_INDEXED in hub.log.read_text(errors="replace")
        recent = [mb for t, mb in sampler.samples if t >= now - STEADY_S]
        if (
            indexed
            and now - started >= STEADY_S
            and recent
            and max(recent) - min(recent) <= STEADY_MB
        ):
            break
        await asyncio.sleep(SAMPLE_S)
    return time.monotonic() - started


async def run_bench(hub: HubProcess, bundle: Bundle, args: argparse.Namespace) -> Results:
    assert hub.pid is not None
    res = Results()
    sampler = Sampler(hub.pid)
    stop_sampling = asyncio.Event()
    sampling = asyncio.create_task(sampler.run(stop_sampling))
    try:
        await says(bundle.path, 1, "warm-up")
        res.quiet = await says(bundle.path, args.says, "quiet")
        res.warm_s = await warm(hub, sampler)
        res.base_mb = rss_mb(hub.pid)
        size = args.mib * 1024 * 1024 - 16
        body = b"\x0a" + _varint(size) + bytes(size)  # field 1: bytes, in every request type
        forger = replace(Sealer.for_device(bundle, lambda: 1), sign_key=SigningKey.generate())
        stop_flood = asyncio.Event()
        started = time.monotonic()
        cpu_hub, cpu_us = cpu_seconds(hub.pid), time.process_time()
        tls = ClientTls.for_bundle(bundle)
        flooding = asyncio.create_task(flood(tls, hub.grpc_port, body, forger, stop_flood))
        try:
            await asyncio.sleep(1.0)  # the flood is under way before the says start
            res.flooded = await says(bundle.path, args.says, "flooded")
        finally:
            stop_flood.set()
            res.outcomes = await flooding
        ended = time.monotonic()
        res.hub_cpu_s = cpu_seconds(hub.pid) - cpu_hub
        res.attacker_cpu_s = time.process_time() - cpu_us
        res.flood_s = ended - started
        res.peak_mb = sampler.peak(started, ended)
        deadline = ended + BACK_TIMEOUT_S
        while time.monotonic() < deadline:
            if rss_mb(hub.pid) <= res.base_mb + BACK_WITHIN_MB:
                res.back_s = time.monotonic() - ended
                break
            await asyncio.sleep(SAMPLE_S)
        res.after_mb = rss_mb(hub.pid)
    finally:
        stop_sampling.set()
        await sampling
    return res


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def report(res: Results, home: Path, args: argparse.Namespace) -> None:
    counted = {
        str(k): int(v)  # type: ignore[call-overload]
        for k, v in read_rows(home / "hub.db", "SELECT name, value FROM counters")
        if str(k).startswith("rejected.")
    }
    rounds = len(res.outcomes) // CONCURRENT
    ok = [o for o in res.outcomes if o == "OK"]
    growth = res.peak_mb - res.base_mb
    print(
        f"flood: {rounds} rounds x {CONCURRENT} concurrent {args.mib} MiB unauthenticated "
        f"calls in {res.flood_s:.1f} s; accepted: {len(ok)}; outcomes: "
        + ", ".join(f"{o} {res.outcomes.count(o)}" for o in sorted(set(res.outcomes)))
        + f"; CPU during it: hub {res.hub_cpu_s:.1f} s, attacker {res.attacker_cpu_s:.1f} s"
    )
    print(
        f"hub warm-up before the baseline: {res.warm_s:.1f} s (the recall index took the "
        "quiet says in and loaded its embedding model: memory the hub keeps)"
    )
    print(
        f"hub RSS: before {res.base_mb:.0f} MB, peak during {res.peak_mb:.0f} MB "
        f"(growth {growth:+.0f} MB, goal <= 64), after {res.after_mb:.0f} MB; "
        f"back within {BACK_WITHIN_MB:g} MB of the baseline "
        + (
            f"{res.back_s:.2f} s after the flood (goal <= 10)"
            if res.back_s == res.back_s
            else f"NOT within {BACK_TIMEOUT_S:g} s"
        )
    )
    q, f = median(res.quiet), median(res.flooded)
    print(
        f"yimi say (process, median of {args.says}): without flood {q * 1000:.0f} ms, "
        f"during flood {f * 1000:.0f} ms (x{f / q:.2f})"
    )
    print(
        "refusals counted by the hub: " + ", ".join(f"{k} {v}" for k, v in sorted(counted.items()))
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--mib", type=int, default=60, help="MiB per request (default 60)")
    p.add_argument("--says", type=int, default=5, help="yimi say runs each way (default 5)")
    p.add_argument("--dir", type=Path, default=None, help="where the temporary home goes")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    p.add_argument("--quick", action="store_true", help="smoke run: 8 MiB requests, 3 says")
    args = p.parse_args(argv)
    if args.quick:
        args.mib, args.says = min(args.mib, 8), min(args.says, 3)
    root = Path(tempfile.mkdtemp(prefix="yimi-flood-", dir=args.dir))
    hub: HubProcess | None = None
    status = 0
    started = time.monotonic()
    try:
        print(f"gRPC flood bench: {os.cpu_count()} CPUs, grpcio {grpc.__version__}; data in {root}")
        mqtt_port, grpc_port = ports.port(), ports.port()
        home = Home.init(
            root / "home", mqtt_port=mqtt_port, grpc_port=grpc_port, hub_host="127.0.0.1"
        )
        bundle = flash(home, profile_name="phone", name="flood-phone", out=root / "bundle")
        hub = HubProcess(root, home.path, mqtt_port, grpc_port)
        hub.start()
        print(f"hub up (pid {hub.pid}) on grpc {grpc_port}", flush=True)
        res = asyncio.run(run_bench(hub, bundle, args))
        for w in hub.stop():  # the hub flushes its counters as it stops
            print(f"warning: {w}", file=sys.stderr)
        report(res, home.path, args)
    except KeyboardInterrupt:
        status = 130
    except Exception as exc:
        print(f"bench failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        if hub is not None:
            print(f"hub log (last lines):\n{hub.log_tail()}", file=sys.stderr)
        status = 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if hub is not None:
            for w in hub.stop():
                print(f"warning: {w}", file=sys.stderr)
    return finish(root, keep=args.keep, started=started, status=status)


if __name__ == "__main__":
    sys.exit(main())
