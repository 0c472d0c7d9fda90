"""Bench: what the sandbox costs a package server, and what a worldline fork costs.

Run::

    .venv/bin/python bench/sandbox.py [--rounds 5] [--files 10000]

1. **Start-up per package call**: ``tests/packages/probe`` (a real MCP stdio server) is
   started and called once (``echo``) by a fresh :class:`~hub.capabilities.host.PackageHost`,
   sandboxed (bubblewrap, rlimits, pids cgroup) and plain, alternating, ``--rounds`` times;
   then ``--rounds``×10 calls on the live server (the sandbox costs nothing per call once
   the server runs: it is the same stdio pipe). Printed: medians and sandboxed/plain ratios.
   And the bare process cost: ``python -c pass`` plain and wrapped the same way (prlimit,
   pids cgroup, bwrap with the probe's profile), ``--rounds``×3 each — the sandbox's own
   start-up, without the MCP server's imports.
2. **Fork cost** of a ``--files``-file workspace (1 KiB each, 100 folders) per method the
   machine offers: plain copy, ``cp --reflink=always`` (only where the filesystem shares
   extents), a Btrfs snapshot (a loop-mounted image, when mkfs.btrfs and mounting work).
   Printed: median of ``--rounds`` forks, ratio to the plain copy.

The machine's load average is printed: other processes share the cores, so wall times are
upper bounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hub.capabilities.host import PackageHost
from hub.capabilities.manifest import load
from hub.worldlines.store import Worldlines


async def _start_and_call(sandbox: bool, state: Path, calls: int) -> tuple[float, float]:
    m = load(REPO / "tests" / "packages" / "probe")
    t0 = time.perf_counter()
    async with PackageHost(
        {m.name: m}, env_for=lambda *_: {"YIMI_STATE_DIR": str(state)}, sandbox=sandbox
    ) as host:
        out = await host.call("probe", "echo", {"text": "x"})
        assert not out.error_code, out
        first = time.perf_counter() - t0
        t1 = time.perf_counter()
        for _ in range(calls):
            await host.call("probe", "echo", {"text": "x"})
        per_call = (time.perf_counter() - t1) / calls
    return first, per_call


def bench_start(rounds: int) -> None:
    firsts: dict[bool, list[float]] = {True: [], False: []}
    calls: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for sandbox in (False, True):
                f, c = asyncio.run(_start_and_call(sandbox, Path(tmp), 10))
                firsts[sandbox].append(f)
                calls[sandbox].append(c)
    print("package start + first call (probe, s):")
    plain, boxed = statistics.median(firsts[False]), statistics.median(firsts[True])
    print(f"  plain      median {plain:.3f}")
    print(f"  sandboxed  median {boxed:.3f}  ratio {boxed / plain:.2f}  (+{boxed - plain:.3f} s)")
    plain, boxed = statistics.median(calls[False]), statistics.median(calls[True])
    print("call on a live server (ms):")
    print(f"  plain      median {plain * 1000:.2f}")
    print(f"  sandboxed  median {boxed * 1000:.2f}  ratio {boxed / plain:.2f}")


def bench_spawn(rounds: int) -> None:
    from hub.capabilities.sandbox import prepare, profile_for, wrap_command

    m = load(REPO / "tests" / "packages" / "probe")
    with tempfile.TemporaryDirectory() as tmp:
        profile = profile_for(m, {"YIMI_STATE_DIR": tmp})

        def once(sandbox: bool) -> float:
            cmd, args = sys.executable, ["-c", "pass"]
            prepared = prepare(profile) if sandbox else None
            if prepared is not None:
                cmd, args = wrap_command(profile, prepared, cmd, args, str(m.root))
            t0 = time.perf_counter()
            subprocess.run([cmd, *args], check=True)
            took = time.perf_counter() - t0
            if prepared is not None:
                prepared.close()
            return took

        once(True), once(False)
        plain = statistics.median(once(False) for _ in range(rounds * 3))
        boxed = statistics.median(once(True) for _ in range(rounds * 3))
    print("bare process, python -c pass (ms):")
    print(f"  plain      median {plain * 1000:.1f}")
    extra = (boxed - plain) * 1000
    print(f"  sandboxed  median {boxed * 1000:.1f}  ratio {boxed / plain:.2f}  (+{extra:.1f} ms)")


def _seed(ws: Path, files: int) -> None:
    blob = os.urandom(1024)
    for i in range(files):
        d = ws / f"d{i % 100:03d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:05d}.txt").write_bytes(blob)


def _btrfs(tmp: Path) -> tuple[Path, Path] | None:
    if shutil.which("mkfs.btrfs") is None:
        return None
    image, mnt = tmp / "b.img", tmp / "mnt"
    mnt.mkdir()
    with image.open("wb") as fh:
        fh.truncate(512 * 1024 * 1024)
    if subprocess.run(["mkfs.btrfs", "-q", str(image)], capture_output=True).returncode:
        return None
    if subprocess.run(
        ["mount", "-o", "loop", str(image), str(mnt)], capture_output=True
    ).returncode:
        return None
    subprocess.run(["btrfs", "subvolume", "create", str(mnt / "ws")], capture_output=True)
    return mnt, mnt / "ws"


def bench_fork(rounds: int, files: int) -> None:
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        plain_ws = tmp / "plain" / "ws"
        _seed(plain_ws, files)
        w = Worldlines(plain_ws)
        methods = ["copy"] + (["reflink"] if w.method() == "reflink" else [])
        for method in methods:
            times = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                f = w.fork(method=method)
                times.append(time.perf_counter() - t0)
                w.discard(f.id)
                w.gc()
            results[method] = statistics.median(times)
        mounted = _btrfs(tmp)
        if mounted is None:
            print("btrfs: not measured (no mkfs.btrfs or loop mount here)")
        else:
            mnt, ws = mounted
            try:
                _seed(ws, files)
                wb = Worldlines(ws)
                for method in ("btrfs", "reflink", "copy"):
                    times = []
                    for _ in range(rounds):
                        t0 = time.perf_counter()
                        f = wb.fork(method=method)
                        times.append(time.perf_counter() - t0)
                        wb.discard(f.id)
                        wb.gc()
                    results[f"{method} (on btrfs)"] = statistics.median(times)
            finally:
                subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
    base = results["copy"]
    print(f"fork of a {files}-file workspace (s, median of {rounds}):")
    for name, v in results.items():
        print(f"  {name:<20} {v:.3f}  ratio to plain copy {v / base:.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--files", type=int, default=10_000)
    p.add_argument("--quick", action="store_true", help="smoke run: 2 rounds, 1,000 files")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.files = min(args.rounds, 2), min(args.files, 1000)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    bench_spawn(args.rounds)
    bench_start(args.rounds)
    bench_fork(args.rounds, args.files)


if __name__ == "__main__":
    main()
