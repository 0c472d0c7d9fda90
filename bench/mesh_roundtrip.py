"""Bench: the full signed+sealed round trip device → hub → reply → ACK, against raw MQTT.

Run::

    .venv/bin/python bench/mesh_roundtrip.py [--trips 1000] [--devices 50] [--quick]
        [--requests bench|owner|owner-zh] [--counts]

Everything runs on loopback, in a temporary folder that is removed afterwards:

1. a home is made and devices are flashed (in process, exactly as ``yimi device add``);
2. a real hub is started in its own process (``python -m cli hub run``), which starts
   its own mosquitto; the bench waits until the hub's log says it is up (``cli.hub.hub_is_up``);
3. **ours** — one device drives trips one after the other through
   :class:`edge_agent.node.DeviceNode`, the code path of ``yimi say``. A trip is timed from
   the start of the outbox flush (the utterance is sealed, signed and published, QoS 1)
   until the hub's reply was received and opened and the sealed ACK was published (QoS 1,
   PUBACK received). The outbox commit before it is reported as a separate line;
4. **raw** — on the same mosquitto, an aiomqtt client publishes (QoS 1) to a topic, an echo
   client in another process republishes it (QoS 1) to a reply topic, the first client
   receives it. Ours and raw run in alternating blocks, so drift of a noisy machine hits
   both alike; the ratio of their medians is printed per block and overall. After the
   warm-up trips the bench waits for the hub's recall index to take them in: its first
   pass loads the embedding model (about 1.3 s of CPU, once per hub), which would otherwise
   be counted in a measured block's CPU per trip. Indexing each turn after that is counted;
5. **concurrent** — ``--devices`` devices (DeviceNodes spread over ``--procs`` worker
   processes) each drive ``--per-device`` trips at the same time, each its next trip once
   its last is ACKed (a closed loop). They share this machine's cores with the hub and open
   every timeline update the hub broadcasts, as real devices do on their own hardware, so
   the line ``closed loop`` prints what the cores allow: CPU ms per trip (everything) →
   the throughput they can carry → the mean latency that gives by Little's law
   (devices / throughput), against what was measured.

What the trips say (``--requests``, :data:`REQUESTS`): by default a sentence the hub does
not understand, the cheapest turn there is (the issue's targets were set on it); ``owner``
(``owner-zh`` in Chinese) cycles through four requests an owner makes, each acted on — a
timer, a shopping-list item, a memory, the time — and times the sequential trips by kind
too. At the end the bench reads from ``hub.db`` what the replies were understood as.

The hub (and with it its mosquitto) is stopped on every exit path — Ctrl-C, SIGTERM, an
error — and the bench checks that no mosquitto of its home is left. Child processes also
get ``PR_SET_PDEATHSIG``, so even a ``kill -9`` of the bench takes them down.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType

import aiomqtt
import apsw

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script

import edge_agent.node as node_module
from bench.hubproc import HubProcess, child_env, cpu_seconds, die_with_parent, finish
from bench.stats import percentile
from edge_agent.node import DeviceNode, NodeOptions
from protos import mesh_pb2
from provisioning.bundle import Bundle, flash
from provisioning.home import Home
from sync.envelope import Opened
from sync.mqtt import SOCKET_OPTIONS, transient_username
from sync.tls import ClientTls
from worlds import ports

node_module.REPLY_TIMEOUT_S = 60.0
"""the first turn after the hub's start also starts its packages (10 s and more on a loaded
machine): the bench waits for it rather than failing; timed trips are far below either"""

SCRIPT = Path(__file__).resolve()
REPO = SCRIPT.parent.parent
CONNECT_TIMEOUT_S = 20.0
TRIP_TIMEOUT_S = 30.0
"""seconds one trip may take before the bench gives up"""
CHILD_READY_TIMEOUT_S = 90.0
DRAIN_TIMEOUT_S = 20.0
"""seconds the hub gets after the last trip to record the last ACKs"""
RECALL_WARM_TIMEOUT_S = 60.0
"""seconds the warm-up waits for the hub's recall index to take in the warm-up turns"""
FLOOD_RATE = {"messages_per_s": 20_000, "burst_messages": 20_000}
"""messages per second and burst a bench device may send (see :func:`allow_flood`)"""
RAW_PAYLOAD_BYTES = 400
"""bytes per raw message: about the size of a sealed utterance envelope"""
REQUESTS: dict[str, tuple[tuple[str, str], ...]] = {
    "bench": (("not understood", "bench {tag} trip {i}"),),
    "owner": (
        ("a timer", "set a timer for {m} minutes"),
        ("a shopping-list item", "add {i} eggs to the shopping list"),
        ("a memory", "remember that my locker number is {i}"),
        ("the time", "what time is it"),
    ),
    "owner-zh": (
        ("a timer", "设一个{m}分钟的计时器"),
        ("a shopping-list item", "把{i}个鸡蛋加到购物清单"),
        ("a memory", "记住我的柜子号码是{i}"),
        ("the time", "现在几点"),
    ),
}
"""what a trip says, by ``--requests``, in turn (``{i}``: the trip's number in its run,
``{m}``: 1–59 from it, ``{tag}``: its run). ``bench``: a sentence the hub does not
understand — the cheapest turn there is (recognised in about 0.06 ms, answered honestly, no
action). ``owner``/``owner-zh``: what an owner asks, each acted on: a timer (the scheduler),
a shopping-list item (an in-hub tool through the gateway), a memory (the ``memory`` package
over MCP, through the gateway) and the time (the hub's clock) — each recognised in 0.2–1.7
ms, new words every time"""


# ---------------------------------------------------------------------------- statistics
@dataclass
class Series:
    label: str
    ms: list[float] = field(default_factory=list)

    def row(self) -> str:
        v = self.ms
        # padded to 44 columns as a terminal shows it: a Chinese character takes two
        wide = sum(unicodedata.east_asian_width(c) in "WF" for c in self.label)
        label = self.label + " " * max(0, 44 - len(self.label) - wide)
        if not v:
            return f"{label} {0:>6}" + "       -" * 5
        cells = [percentile(v, q) for q in (0.5, 0.9, 0.99)] + [max(v), statistics.fmean(v)]
        return f"{label} {len(v):>6}" + "".join(f" {c:>7.2f}" for c in cells)


TABLE_HEAD = f"{'':<44} {'n':>6} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7} {'mean':>7}   (ms)"


# ---------------------------------------------------------------------------- processes
async def spawn_child(mode: str, *args: str, log: Path) -> asyncio.subprocess.Process:
    """This script in ``--echo`` or ``--worker`` mode, in its own session."""
    with log.open("ab") as err:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            str(SCRIPT),
            mode,
            "--parent",
            str(os.getpid()),
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
            env=child_env(),
            cwd=REPO,
            start_new_session=True,
        )


def file_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


async def read_line(
    proc: asyncio.subprocess.Process, what: str, log: Path, timeout: float = CHILD_READY_TIMEOUT_S
) -> str:
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout)
    except TimeoutError:
        line = b""
    if not line:
        raise RuntimeError(f"{what} (pid {proc.pid}) gave no answer; its log:\n{file_tail(log)}")
    return line.decode().strip()


async def stop_children(procs: Sequence[asyncio.subprocess.Process]) -> None:
    for proc in procs:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
    for proc in procs:
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


# ---------------------------------------------------------------------------- our round trip
@dataclass(frozen=True)
class Trip:
    queued: float
    sealed: float
    replied: float
    acked: float
    kind: int = 0
    """which of its mix's sentences it said (an index into :data:`REQUESTS`' tuple)"""

    @property
    def seal_to_ack_ms(self) -> float:
        return (self.acked - self.sealed) * 1000

    @property
    def seal_to_reply_ms(self) -> float:
        return (self.replied - self.sealed) * 1000

    @property
    def queue_to_ack_ms(self) -> float:
        return (self.acked - self.queued) * 1000


class TripDriver:
    """One device on the mesh, driven trip by trip through DeviceNode (``yimi say``'s path).

    ``queue_utterance`` commits the utterance to the outbox; ``flush`` seals, signs and
    publishes it and returns when the reply arrived; the reply handler (as in ``yimi say``)
    publishes a sealed ACK per chunk, and the trip ends when the final chunk's ACK publish is
    acknowledged.
    """

    def __init__(self, bundle: Bundle, hub: str, requests: str = "bench") -> None:
        self.bundle = bundle
        self.hub = hub
        self.requests = requests
        """what its trips say (:data:`REQUESTS`)"""
        self.node: DeviceNode | None = None
        self._acked: dict[str, asyncio.Future[tuple[float, float]]] = {}
        self._first: dict[str, float] = {}
        """perf_counter when a reply's first chunk arrived, by utterance id"""
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> TripDriver:
        try:
            node = await self._stack.enter_async_context(
                DeviceNode(self.bundle, NodeOptions(mode="say", hub=self.hub), self._on_reply)
            )
            self.node = node
            assert node.mqtt is not None
            try:
                await asyncio.wait_for(node.mqtt.connected.wait(), CONNECT_TIMEOUT_S)
            except TimeoutError:
                raise RuntimeError(
                    f"{self.bundle.name} did not connect: {node.mqtt.last_error}"
                ) from None
            # A device keeps its replicas in step with the hub (``yimi edge run`` catches up
            # on every connection, then every CATCHUP_INTERVAL_S): without that a fresh
            # bundle's replica lacks the hub's history, and every live timeline update would
            # be a pending import kept in memory and tried again at each later one — a cost
            # (growing with the run) that no real device pays, and none of the log appends
            # and syncs that a real device does pay.
            await self._stack.enter_async_context(node.replication)
            node.replication.wake()
            try:
                await asyncio.wait_for(node.replication.caught_up.wait(), CONNECT_TIMEOUT_S)
            except TimeoutError:
                raise RuntimeError(f"{self.bundle.name} did not catch up") from None
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stack.aclose()

    async def _on_reply(self, reply: mesh_pb2.Reply, opened: Opened, fresh: bool) -> None:
        """ACK every chunk; the trip ends with the ACK of the reply's final chunk (a reply
        is delivered only when all its chunks are ACKed), timed from its first chunk."""
        replied = self._first.setdefault(reply.utterance_id, time.perf_counter())
        assert self.node is not None
        await self.node.ack(reply, mesh_pb2.RENDERED)
        if not reply.final:
            return
        acked = time.perf_counter()
        self._first.pop(reply.utterance_id, None)
        fut = self._acked.pop(reply.utterance_id, None)
        if fut is not None and not fut.done():
            fut.set_result((replied, acked))

    async def trip(self, text: str, kind: int = 0) -> Trip:
        node = self.node
        assert node is not None
        queued = time.perf_counter()
        utterance_id, _ = node.queue_utterance(text)
        fut = asyncio.get_running_loop().create_future()
        self._acked[utterance_id] = fut
        sealed = time.perf_counter()
        try:
            async with asyncio.timeout(TRIP_TIMEOUT_S):
                await node.flush(stop_after=utterance_id)
                replied, acked = await fut
        finally:
            self._acked.pop(utterance_id, None)
        return Trip(queued, sealed, replied, acked, kind)

    async def trips(self, count: int, tag: str) -> list[Trip]:
        """``count`` trips, one after the other, saying the sentences of :data:`REQUESTS`
        in turn (the ``i``-th trip's kind is ``i`` modulo their number)."""
        mix = REQUESTS[self.requests]
        done = []
        for i in range(count):
            kind = i % len(mix)
            text = mix[kind][1].format(tag=tag, i=i, m=1 + i % 59)
            done.append(await self.trip(text, kind))
        return done


# ---------------------------------------------------------------------------- raw baseline
def raw_topics(home_id: str) -> tuple[str, str]:
    return f"yimi/{home_id}/bench/ping", f"yimi/{home_id}/bench/pong"


class RawLoop:
    """Publish → echo (another process) → receive, on the hub's mosquitto, as the hub user."""

    def __init__(self, home: Home, port: int) -> None:
        self.home = home
        self.port = port
        self.ping, self.pong = raw_topics(home.home_id)
        self._waiting: dict[bytes, asyncio.Future[float]] = {}
        self._client: aiomqtt.Client | None = None
        self._stack = contextlib.AsyncExitStack()
        self._seq = 0

    async def __aenter__(self) -> RawLoop:
        try:
            client = aiomqtt.Client(
                "127.0.0.1",
                self.port,
                username=transient_username("hub", 0),
                password=self.home.broker_password,
                identifier=transient_username("hub", 0),
                timeout=5.0,
                socket_options=SOCKET_OPTIONS,
                tls_context=ClientTls.for_home(self.home).ssl_context(),
            )
            self._client = await self._stack.enter_async_context(client)
            await client.subscribe(self.pong, qos=1)
            reader = asyncio.create_task(self._read(client), name="raw-reader")
            self._stack.push_async_callback(_cancel, reader)
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stack.aclose()

    async def _read(self, client: aiomqtt.Client) -> None:
        async for message in client.messages:
            payload = message.payload if isinstance(message.payload, bytes) else b""
            fut = self._waiting.pop(payload[:16], None)
            if fut is not None and not fut.done():
                fut.set_result(time.perf_counter())

    async def trip(self) -> float:
        assert self._client is not None
        self._seq += 1
        key = f"{self._seq:016d}".encode()
        payload = key + secrets.token_bytes(RAW_PAYLOAD_BYTES - len(key))
        fut = asyncio.get_running_loop().create_future()
        self._waiting[key] = fut
        start = time.perf_counter()
        async with asyncio.timeout(TRIP_TIMEOUT_S):
            await self._client.publish(self.ping, payload, qos=1)
            end = await fut
        return (end - start) * 1000

    async def trips(self, count: int) -> list[float]:
        return [await self.trip() for _ in range(count)]


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
        await task


async def echo_main(home_path: Path, port: int) -> int:
    """``--echo``: republish every ping as a pong until terminated."""
    home = Home.load(home_path)
    ping, pong = raw_topics(home.home_id)
    async with aiomqtt.Client(
        "127.0.0.1",
        port,
        username=transient_username("hub", 1),
        password=home.broker_password,
        identifier=transient_username("hub", 1),
        timeout=5.0,
        socket_options=SOCKET_OPTIONS,
        tls_context=ClientTls.for_home(home).ssl_context(),
    ) as client:
        await client.subscribe(ping, qos=1)
        print("ready", flush=True)
        async for message in client.messages:
            payload = message.payload if isinstance(message.payload, bytes) else b""
            await client.publish(pong, payload, qos=1)
    return 0


# ---------------------------------------------------------------------------- concurrent
async def worker_main(
    hub: str, bundles: Sequence[Path], trips: int, warmup: int, requests: str
) -> int:
    """``--worker``: drive several devices at once; report latencies as one JSON line."""
    loaded = [Bundle.load(p) for p in bundles]
    async with contextlib.AsyncExitStack() as stack:
        drivers = [await stack.enter_async_context(TripDriver(b, hub, requests)) for b in loaded]
        await asyncio.gather(*(d.trips(warmup, "warm-up") for d in drivers))
        print("ready", flush=True)
        go = await asyncio.to_thread(sys.stdin.readline)
        if go.strip() != "go":
            return 1
        cpu0, start = time.process_time(), time.monotonic()
        done = await asyncio.gather(*(d.trips(trips, "concurrent") for d in drivers))
        end, cpu1 = time.monotonic(), time.process_time()
        flat = [t for per_device in done for t in per_device]
        print(
            json.dumps(
                {
                    "seal_to_ack": [t.seal_to_ack_ms for t in flat],
                    "seal_to_reply": [t.seal_to_reply_ms for t in flat],
                    "queue_to_ack": [t.queue_to_ack_ms for t in flat],
                    "start": start,
                    "end": end,
                    "cpu": cpu1 - cpu0,
                }
            ),
            flush=True,
        )
    return 0


# ---------------------------------------------------------------------------- the run
@dataclass(frozen=True)
class Config:
    trips: int
    warmup: int
    blocks: int
    devices: int
    per_device: int
    device_warmup: int
    procs: int
    requests: str = "bench"
    """what the trips say (:data:`REQUESTS`)"""

    @property
    def expected(self) -> int:
        """utterances (and ACKs) the hub should have recorded at the end"""
        return self.warmup + self.trips + self.devices * (self.per_device + self.device_warmup)


@dataclass
class CpuMeter:
    """CPU seconds spent by the hub, its mosquitto and the bench's own side of a phase."""

    hub: HubProcess
    others: Callable[[], float] = lambda: 0.0
    totals: dict[str, float] = field(default_factory=dict)

    def sample(self) -> dict[str, float]:
        return {
            "hub": cpu_seconds(self.hub.pid),
            "mosquitto": cpu_seconds(self.hub.mosquitto_pid()),
            "devices": time.process_time() + self.others(),
            # the hub's event loop alone: the rest of "hub" is its worker threads (syncs,
            # archive writes, the recall index's embeddings)
            "hub-loop": cpu_seconds(self.hub.pid, self.hub.pid),
        }

    def add(self, before: dict[str, float], after: dict[str, float], extra: float = 0.0) -> None:
        for k in before:
            self.totals[k] = self.totals.get(k, 0.0) + after[k] - before[k]
        self.totals["devices"] = self.totals.get("devices", 0.0) + extra

    def per_trip(self, trips: int) -> str:
        if trips <= 0:
            return "-"
        return ", ".join(f"{k} {v * 1000 / trips:.2f}" for k, v in self.totals.items())


Counts = dict[str, dict[str, int]]
"""the hub's work counters: ``statements`` and ``begins`` by database file, ``syncs``"""


@dataclass
class WorkMeter:
    """The hub's counted work over the sequential trips (``--counts``, see
    ``bench/counting/sitecustomize.py``): exact, so it shows what a change removed from a
    turn however noisy the machine's timings are."""

    hub: HubProcess
    totals: dict[str, Counter[str]] = field(
        default_factory=lambda: {k: Counter() for k in ("statements", "begins", "syncs")}
    )

    async def sample(self) -> Counts | None:
        if self.hub.counts is None:
            return None
        return await asyncio.to_thread(self.hub.count_snapshot)

    def add(self, before: Counts | None, after: Counts | None) -> None:
        if before is None or after is None:
            return
        for kind, total in self.totals.items():
            for key, n in after.get(kind, {}).items():
                total[key] += n - before.get(kind, {}).get(key, 0)

    def per_trip(self, trips: int) -> str:
        """Empty when nothing was counted (a hub started without ``--counts``)."""
        statements = self.totals["statements"]
        if trips <= 0 or not statements:
            return ""
        by_db = ", ".join(
            f"{k} {n / trips:.1f}" for k, n in statements.most_common() if n / trips >= 0.05
        )
        return (
            f"SQL statements {statements.total() / trips:.1f} ({by_db}); "
            f"transactions {self.totals['begins'].total() / trips:.1f}; "
            f"syncs {self.totals['syncs'].total() / trips:.1f}"
        )


@dataclass
class Results:
    ours: Series = field(default_factory=lambda: Series("ours: seal → reply opened → ACK sent"))
    ours_reply: Series = field(default_factory=lambda: Series("  of which seal → reply opened"))
    ours_queue: Series = field(
        default_factory=lambda: Series("  queue → ACK sent (+ outbox commit)")
    )
    raw: Series = field(default_factory=lambda: Series("raw aiomqtt: publish → echo → receive"))
    conc: Series = field(default_factory=lambda: Series(""))
    conc_reply: Series = field(default_factory=lambda: Series("  of which seal → reply opened"))
    conc_queue: Series = field(
        default_factory=lambda: Series("  queue → ACK sent (+ outbox commit)")
    )
    by_kind: dict[int, Series] = field(default_factory=dict)
    """the sequential trips (seal → ACK sent) by what they said, with more than one kind"""
    block_ratios: list[tuple[float, float]] = field(default_factory=list)
    conc_seconds: float = 0.0
    cpu_ours: str = "-"
    cpu_raw: str = "-"
    cpu_conc: str = "-"
    work_ours: str = ""
    """the hub's counted work per sequential trip (``--counts``)"""
    hub_cpu_ms: float | None = None
    """the hub's CPU ms per sequential trip"""
    conc_cpu_ms: float = 0.0
    """CPU ms per concurrent trip, everything on this machine: hub, mosquitto and the
    bench's own devices"""
    drain_seconds: float = 0.0

    @property
    def conc_rate(self) -> float:
        """concurrent trips per second (0 without a concurrent phase)"""
        return len(self.conc.ms) / self.conc_seconds if self.conc_seconds > 0 else 0.0


async def run_bench(
    cfg: Config, home: Home, hub: HubProcess, solo: Bundle, fleet: Sequence[Bundle], root: Path
) -> Results:
    res = Results()
    res.conc.label = f"{len(fleet)} devices at once: seal → ACK sent"
    echo_log = root / "echo.log"
    echo = await spawn_child(
        "--echo", "--home", str(home.path), "--port", str(hub.mqtt_port), log=echo_log
    )
    try:
        if await read_line(echo, "the echo client", echo_log) != "ready":
            raise RuntimeError("the echo client did not start")
        cpu_ours, cpu_raw = CpuMeter(hub), CpuMeter(hub, lambda: cpu_seconds(echo.pid))
        work = WorkMeter(hub)
        async with (
            TripDriver(solo, hub.target, cfg.requests) as driver,
            RawLoop(home, hub.mqtt_port) as raw,
        ):
            print(f"warm-up: {cfg.warmup} trips each", flush=True)
            await driver.trips(cfg.warmup, "warm-up")
            await raw.trips(cfg.warmup)
            waited = await recall_warm(home)
            if waited is not None:
                print(
                    f"warm-up: the hub's recall index took in the warm-up turns in {waited:.1f} s "
                    "(its embedding model loaded: once per hub, not a turn's cost)",
                    flush=True,
                )
            sizes = [
                cfg.trips // cfg.blocks + (i < cfg.trips % cfg.blocks) for i in range(cfg.blocks)
            ]
            for i, n in enumerate(sizes):
                counted = await work.sample()
                before = cpu_ours.sample()
                trips = await driver.trips(n, f"block {i}")
                cpu_ours.add(before, cpu_ours.sample())
                work.add(counted, await work.sample())
                before = cpu_raw.sample()
                raw_ms = await raw.trips(n)
                cpu_raw.add(before, cpu_raw.sample())
                ours_ms = [t.seal_to_ack_ms for t in trips]
                res.ours.ms += ours_ms
                for t in trips:
                    kind = res.by_kind.setdefault(
                        t.kind, Series(f"  of which {REQUESTS[cfg.requests][t.kind][0]}")
                    )
                    kind.ms.append(t.seal_to_ack_ms)
                res.ours_reply.ms += [t.seal_to_reply_ms for t in trips]
                res.ours_queue.ms += [t.queue_to_ack_ms for t in trips]
                res.raw.ms += raw_ms
                ratio = (
                    percentile(ours_ms, 0.5) / percentile(raw_ms, 0.5),
                    percentile(ours_ms, 0.99) / percentile(raw_ms, 0.99),
                )
                res.block_ratios.append(ratio)
                print(
                    f"  block {i + 1}/{cfg.blocks}: ours p50 {percentile(ours_ms, 0.5):.2f} ms, "
                    f"raw p50 {percentile(raw_ms, 0.5):.2f} ms, ratio {ratio[0]:.1f}x",
                    flush=True,
                )
        res.cpu_ours = cpu_ours.per_trip(len(res.ours.ms))
        res.work_ours = work.per_trip(len(res.ours.ms))
        if res.ours.ms:
            res.hub_cpu_ms = cpu_ours.totals.get("hub", 0.0) * 1000 / len(res.ours.ms)
        res.cpu_raw = cpu_raw.per_trip(len(res.raw.ms))
    finally:
        await stop_children([echo])

    # concurrent devices, spread over worker processes
    procs = max(1, min(cfg.procs, len(fleet)))
    groups = [fleet[i::procs] for i in range(procs)]
    print(
        f"concurrent: {len(fleet)} devices in {procs} processes, "
        f"{cfg.per_device} trips each (+{cfg.device_warmup} warm-up)",
        flush=True,
    )
    workers: list[asyncio.subprocess.Process] = []
    logs: list[Path] = []
    try:
        for i, group in enumerate(groups):
            logs.append(root / f"worker-{i}.log")
            workers.append(
                await spawn_child(
                    "--worker",
                    "--hub",
                    hub.target,
                    "--per-device",
                    str(cfg.per_device),
                    "--device-warmup",
                    str(cfg.device_warmup),
                    "--requests",
                    cfg.requests,
                    *[str(b.path) for b in group],
                    log=logs[-1],
                )
            )
        for proc, log in zip(workers, logs, strict=True):
            if await read_line(proc, "a worker", log) != "ready":
                raise RuntimeError("a worker did not get ready")
        results_timeout = CHILD_READY_TIMEOUT_S + cfg.per_device * TRIP_TIMEOUT_S
        meter = CpuMeter(hub)
        before = meter.sample()
        for proc in workers:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
        await asyncio.gather(*(p.stdin.drain() for p in workers if p.stdin is not None))
        reports = [
            json.loads(await read_line(p, "a worker", log, timeout=results_timeout))
            for p, log in zip(workers, logs, strict=True)
        ]
        meter.add(before, meter.sample(), extra=sum(r["cpu"] for r in reports))
        for r in reports:
            res.conc.ms += r["seal_to_ack"]
            res.conc_reply.ms += r["seal_to_reply"]
            res.conc_queue.ms += r["queue_to_ack"]
        res.conc_seconds = max(r["end"] for r in reports) - min(r["start"] for r in reports)
        res.cpu_conc = meter.per_trip(len(res.conc.ms))
        if res.conc.ms:
            every = sum(v for k, v in meter.totals.items() if k != "hub-loop")  # part of hub
            res.conc_cpu_ms = every * 1000 / len(res.conc.ms)
    finally:
        await stop_children(workers)
    return res


@dataclass(frozen=True)
class HubCheck:
    """What the hub recorded, read from its ``hub.db`` after a run."""

    utterances: int
    """utterances on the timeline"""
    deliveries: int
    """ACKs recorded"""
    rejected: dict[str, int]
    """the ``rejected.*`` counters"""


def hub_check(home: Path) -> HubCheck:
    """What the hub recorded (see :class:`HubCheck`), from hub.db."""
    conn = apsw.Connection(str(home / "hub.db"), flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(5000)
    try:
        utterances = conn.execute("SELECT count(*) FROM timeline WHERE kind='utterance'").fetchone()
        deliveries = conn.execute("SELECT count(*) FROM deliveries").fetchone()
        rejected = {
            str(r[0]): int(r[1])
            for r in conn.execute("SELECT name, value FROM counters WHERE name LIKE 'rejected.%'")
        }
    finally:
        conn.close()
    return HubCheck(
        int(utterances[0] if utterances else 0),
        int(deliveries[0] if deliveries else 0),
        rejected,
    )


def reply_intents(home: Path) -> Counter[str]:
    """Replies on the timeline by what they were understood as (``?``: not understood), from
    hub.db once the run is over (not in :func:`hub_check`, which the drain polls)."""
    conn = apsw.Connection(str(home / "hub.db"), flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(5000)
    try:
        sql = "SELECT json_extract(meta, '$.intent') FROM timeline WHERE kind='reply'"
        return Counter(str(r[0]) for r in conn.execute(sql))
    finally:
        conn.close()


async def recall_warm(home: Home, timeout: float = RECALL_WARM_TIMEOUT_S) -> float | None:
    """Wait until the hub's recall index has taken in the timeline so far — its first pass
    loads the embedding model (about 1.3 s of CPU here), which would otherwise land in a
    measured block; returns the seconds waited (``None``: timeline recall is off)."""
    from hub.memory.timeline_recall import cursor_path, timeline_recall_on

    if not timeline_recall_on(home.config):
        return None
    conn = apsw.Connection(str(home.path / "hub.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        row = conn.execute("SELECT max(seq) FROM timeline").fetchone()
    finally:
        conn.close()
    last = int(row[0]) if row and row[0] is not None else 0
    cursor = cursor_path(home.path)
    start = time.monotonic()
    while True:
        try:
            if int(cursor.read_text(encoding="utf-8").strip() or 0) >= last:
                return time.monotonic() - start
        except (FileNotFoundError, ValueError):  # not written yet, or being replaced
            pass
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"the hub's recall index did not catch up in {timeout:g} s")
        await asyncio.sleep(0.1)


def wait_for_hub(home: Path, expected: int, timeout: float = DRAIN_TIMEOUT_S) -> float:
    """Wait until the hub recorded every utterance and ACK (the last ACKs may still be in
    flight when the devices are done); returns the seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        check = hub_check(home)
        if check.utterances >= expected and check.deliveries >= expected:
            break
        time.sleep(0.05)
    return time.monotonic() - start


def report(cfg: Config, res: Results, check: HubCheck, intents: Counter[str]) -> None:
    print()
    print(TABLE_HEAD)
    print(
        f"-- one device, {len(res.ours.ms)} sequential trips (after {cfg.warmup} warm-up), "
        f"interleaved with raw in {cfg.blocks} blocks"
    )
    kinds = [s for _, s in sorted(res.by_kind.items())] if len(res.by_kind) > 1 else []
    for s in (res.ours, res.ours_reply, res.ours_queue, *kinds, res.raw):
        print(s.row())
    print(f"-- {cfg.devices} devices concurrently, {cfg.per_device} trips each")
    for s in (res.conc, res.conc_reply, res.conc_queue):
        print(s.row())
    print()
    ours50, raw50 = percentile(res.ours.ms, 0.5), percentile(res.raw.ms, 0.5)
    ours99, raw99 = percentile(res.ours.ms, 0.99), percentile(res.raw.ms, 0.99)
    print(f"ratio ours/raw   p50 {ours50 / raw50:.1f}x   p99 {ours99 / raw99:.1f}x   (pooled)")
    if res.block_ratios:
        p50s = [r[0] for r in res.block_ratios]
        p99s = [r[1] for r in res.block_ratios]
        print(
            f"                 p50 {statistics.median(p50s):.1f}x"
            f"   p99 {statistics.median(p99s):.1f}x   (median of {len(p50s)} blocks;"
            " p50 per block: " + " ".join(f"{r:.1f}" for r in p50s) + ")"
        )
    if res.conc_seconds > 0:
        print(
            f"concurrent       {res.conc_rate:.0f} trips/s "
            f"({len(res.conc.ms)} trips in {res.conc_seconds:.2f} s), "
            f"p50 {percentile(res.conc.ms, 0.5):.2f} ms, p99 {percentile(res.conc.ms, 0.99):.2f} ms"
        )
    print(f"CPU ms per trip  ours: {res.cpu_ours}")
    print(
        f"                 raw:  {res.cpu_raw}   (devices = bench + echo client;"
        " hub-loop = the hub's event-loop thread, part of hub)"
    )
    print(f"                 {cfg.devices} devices: {res.cpu_conc}")
    if res.work_ours:
        print(f"work per trip    hub, counted: {res.work_ours}")
    print_closed_loop(cfg, res)
    print_targets(cfg, res)
    expected = cfg.expected
    utterances, deliveries, rejected = check.utterances, check.deliveries, check.rejected
    verdict = "ok" if utterances == expected == deliveries and not rejected else "MISMATCH"
    print(
        f"hub check        {utterances} utterances on the timeline (expected {expected}), "
        f"{deliveries} ACKs recorded, rejected: {rejected or 'none'} -> {verdict}"
        + (
            f" (after {res.drain_seconds:.1f} s for the last ACKs)"
            if res.drain_seconds > 0.2
            else ""
        )
    )
    replies = sum(intents.values())
    heard = ", ".join(f"{k} {v}" for k, v in sorted(intents.items()) if k != "?")
    print(
        f"replies          {replies} on the timeline ({cfg.requests!r} requests): "
        f"understood {replies - intents['?']}{f' ({heard})' if heard else ''}, "
        f"not understood {intents['?']}"
    )


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def print_closed_loop(cfg: Config, res: Results) -> None:
    """What the concurrent phase can reach on this machine. Each device sends its next trip
    once the last is ACKed (a closed loop), so by Little's law the mean latency is devices
    / throughput; and the throughput is bounded by the cores over the CPU a trip costs here,
    the bench's own devices included (each of them opens every timeline update of every
    other device's trips, as a real device does on its own hardware)."""
    rate = res.conc_rate
    if not rate or res.conc_cpu_ms <= 0:
        return
    cores = os.cpu_count() or 1
    bound = cores * 1000 / res.conc_cpu_ms
    print(
        f"closed loop      {cfg.devices} devices: {res.conc_cpu_ms:.2f} CPU ms per trip on "
        f"{cores} cores bounds throughput at about {bound:.0f}/s, so the mean latency "
        f"at best about {cfg.devices * 1000 / bound:.1f} ms; measured {rate:.0f}/s "
        f"({rate / bound:.0%} of the bound), mean {statistics.fmean(res.conc.ms):.1f} ms"
    )


def print_targets(cfg: Config, res: Results) -> None:
    """The issue-21 targets against this run's figures (and its raw baseline)."""
    if not res.ours.ms or not res.raw.ms:
        return
    p50, raw50 = percentile(res.ours.ms, 0.5), percentile(res.raw.ms, 0.5)
    print(
        f"target (#21)     one device p50 ≤ 5 ms and ≤ 7x raw: {p50:.2f} ms, "
        f"{p50 / raw50:.1f}x -> {_verdict(p50 <= 5.0 and p50 / raw50 <= 7.0)}"
    )
    if res.hub_cpu_ms is not None:
        print(
            f"                 hub CPU ≤ 3 ms per turn: {res.hub_cpu_ms:.2f} ms"
            f" -> {_verdict(res.hub_cpu_ms <= 3.0)}"
        )
    if res.conc_rate:
        rate = res.conc_rate
        p99 = percentile(res.conc.ms, 0.99)
        if cfg.devices >= 50:
            print(
                f"                 {cfg.devices} devices p99 ≤ 150 ms: {p99:.2f} ms"
                f" -> {_verdict(p99 <= 150.0)}"
            )
        else:
            print(
                f"                 {cfg.devices} devices ≥ 300 turns/s, p99 ≤ 50 ms: "
                f"{rate:.0f}/s, {p99:.2f} ms -> {_verdict(rate >= 300 and p99 <= 50.0)}"
            )


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def allow_flood(home_path: Path) -> None:
    """Raise the hub's per-device publish rate (``publish_rate:`` in ``home.yaml``; 50 msg/s,
    a burst of 200, by default) above what the bench's back-to-back trips send: a message
    dropped by the limit would stall a trip until its timeout."""
    import yaml

    from storage.private import write_private

    path = home_path / "home.yaml"
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    config["publish_rate"] = FLOOD_RATE
    write_private(path, yaml.safe_dump(config, sort_keys=False))
    print(f"publish rate for the bench: {FLOOD_RATE}", flush=True)


def bench(args: argparse.Namespace) -> int:
    if args.quick:
        trips, devices = args.trips or 200, args.devices or 10
    else:
        trips, devices = args.trips or 1000, args.devices or 50
    cfg = Config(
        trips=trips,
        warmup=args.warmup,
        blocks=max(1, min(args.blocks, trips)),
        devices=devices,
        per_device=args.per_device,
        device_warmup=args.device_warmup,
        procs=args.procs,
        requests=args.requests,
    )
    signal.signal(signal.SIGTERM, _raise_interrupt)
    root = Path(tempfile.mkdtemp(prefix="yimi-bench-", dir=args.dir))
    hub: HubProcess | None = None
    status = 0
    started = time.monotonic()
    try:
        mosq = subprocess.run(
            ["/usr/sbin/mosquitto", "-h"], capture_output=True, text=True, check=False
        ).stdout.splitlines()[:1]
        print(
            f"Yimi Mesh round-trip bench: {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}, {(mosq or ['mosquitto ?'])[0]}, "
            f"aiomqtt {aiomqtt.__version__}; data in {root}",
            flush=True,
        )
        mqtt_port, grpc_port = ports.port(), ports.port()
        home = Home.init(
            root / "home", mqtt_port=mqtt_port, grpc_port=grpc_port, hub_host="127.0.0.1"
        )
        profiles = ("glasses", "phone", "watch", "mac")
        solo = flash(home, profile_name="glasses", name="bench-solo", out=root / "bundle-solo")
        fleet = [
            flash(
                home,
                profile_name=profiles[i % len(profiles)],
                name=f"bench-{i:03d}",
                out=root / f"bundle-{i:03d}",
            )
            for i in range(cfg.devices)
        ]
        print(f"home {home.home_id}: {len(fleet) + 1} devices flashed", flush=True)
        said = " | ".join(text for _, text in REQUESTS[cfg.requests])
        print(f"requests: {cfg.requests}: {said}", flush=True)
        allow_flood(home.path)
        hub = HubProcess(root, home.path, mqtt_port, grpc_port, counts=args.counts)
        hub.start()
        print(
            f"hub up (pid {hub.pid}, mosquitto pid {hub.mosquitto_pid()}) on "
            f"mqtt {mqtt_port}, grpc {grpc_port}",
            flush=True,
        )
        res = asyncio.run(run_bench(cfg, home, hub, solo, fleet, root))
        res.drain_seconds = wait_for_hub(home.path, cfg.expected)
        warnings = hub.stop()
        report(cfg, res, hub_check(home.path), reply_intents(home.path))
        for w in warnings:
            print(f"warning: {w}")
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--trips", type=int, default=0, help="sequential trips (default 1000)")
    p.add_argument("--devices", type=int, default=0, help="concurrent devices (default 50)")
    p.add_argument("--quick", action="store_true", help="smoke run: 200 trips, 10 devices")
    p.add_argument("--warmup", type=int, default=20, help="warm-up trips (not measured)")
    p.add_argument("--blocks", type=int, default=5, help="alternating ours/raw blocks")
    p.add_argument("--per-device", type=int, default=20, help="trips per concurrent device")
    p.add_argument("--device-warmup", type=int, default=2, help="warm-up trips per device")
    p.add_argument("--procs", type=int, default=2, help="worker processes for the devices")
    p.add_argument(
        "--requests",
        choices=sorted(REQUESTS),
        default="bench",
        help="what the trips say: bench (not understood, the default), owner or owner-zh "
        "(a timer, a shopping-list item, a memory, the time: each acted on)",
    )
    p.add_argument("--dir", type=Path, default=None, help="where the temporary home goes")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    p.add_argument(
        "--counts",
        action="store_true",
        help="also count the hub's work per trip: SQL statements, transactions, syncs",
    )
    # internal: child processes
    p.add_argument("--echo", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--parent", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--hub", default="", help=argparse.SUPPRESS)
    p.add_argument("bundles", nargs="*", type=Path, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.echo or args.worker:
        die_with_parent(args.parent)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if args.echo:
            return asyncio.run(echo_main(args.home, args.port))
        return asyncio.run(
            worker_main(args.hub, args.bundles, args.per_device, args.device_warmup, args.requests)
        )
    return bench(args)


if __name__ == "__main__":
    sys.exit(main())
