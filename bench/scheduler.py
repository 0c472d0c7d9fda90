"""Bench: the hub scheduler's capacity (issue 17) — start-up, firing accuracy, idle CPU.

Run::

    .venv/bin/python bench/scheduler.py [--jobs 10000] [--firing 500] [--idle 10] [--quick]

Everything runs in a temporary folder that is removed afterwards, on the real clock.

1. **Start-up**: ``--jobs`` pending jobs (one-shot reminders spread over the next 30 days,
   one in ten a weekly RRULE in the owner's zone) are in ``schedule.db``; timed: opening
   the store, entering the :class:`Scheduler` (its task starts) and its first pass over the
   due jobs (none due). Median of 5.
2. **Firing accuracy**: with those jobs still pending, ``--firing`` more come due spread
   evenly over the next 5 seconds; each handler notes how late it ran (wall clock at the
   handler minus the occurrence's due time). p50 / p99 / max in ms.
3. **Idle CPU**: with every job pending and none due, the process's CPU time over
   ``--idle`` seconds, as a share of one core.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script

from bench.stats import median, percentile
from hub.schedule import Job, JobStore, Occurrence, Scheduler
from hub.schedule.store import PENDING

DAY_MS = 24 * 3600 * 1000
TZ = "Europe/London"


def fill(path: Path, jobs: int) -> None:
    store = JobStore(path, synchronous="NORMAL")
    now = int(time.time() * 1000)
    rows = []
    for i in range(jobs):
        at = now + 60_000 + (i * 30 * DAY_MS) // jobs
        rule = "FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0;BYSECOND=0" if i % 10 == 0 else ""
        rows.append(
            Job(
                id=f"job-{i}",
                kind="reminder",
                spec={"what": f"thing {i}", "device": "mac1", "lang": "en"},
                start_ms=now if rule else at,
                next_ms=at,
                grace_ms=3600_000,
                rule=rule,
                tz=TZ,
                state=PENDING,
                created_ms=now,
                updated_ms=now,
            )
        )
    store.put_many(rows)
    store.close()


async def startup(path: Path) -> float:
    t0 = time.perf_counter()
    store = JobStore(path)
    s = Scheduler(store, tz=TZ)
    async with s:
        await s.run_due()
        took = time.perf_counter() - t0
    store.close()
    return took


async def firing(path: Path, n: int) -> list[float]:
    late: list[float] = []
    store = JobStore(path)
    all_fired = asyncio.Event()

    async def note(occ: Occurrence) -> None:
        late.append(time.time() * 1000 - occ.occurrence_ms)
        if len(late) >= n:
            all_fired.set()

    s = Scheduler(store, handlers={"bench": note}, tz=TZ)
    async with s:
        now = s.now_ms()
        store.put_many(  # one transaction: the bench's own writes stay out of the window
            [
                Job(f"fire-{i}", "bench", {}, at, at, 60_000, created_ms=now, updated_ms=now)
                for i in range(n)
                for at in [now + 500 + (i * 5000) // n]
            ]
        )
        s.poke()
        try:
            await asyncio.wait_for(all_fired.wait(), 30)
        except TimeoutError:
            pass  # printed as fewer than all
    store.close()
    return late


async def idle(path: Path, seconds: float) -> float:
    store = JobStore(path)
    s = Scheduler(store, tz=TZ)
    async with s:
        await asyncio.sleep(0.5)  # past the start pass
        c0, t0 = time.process_time(), time.monotonic()
        await asyncio.sleep(seconds)
        share = (time.process_time() - c0) / (time.monotonic() - t0)
    store.close()
    return share


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--firing", type=int, default=500)
    ap.add_argument("--idle", type=float, default=10.0)
    ap.add_argument("--quick", action="store_true", help="1,000 jobs, 100 firings, 3 s idle")
    args = ap.parse_args()
    if args.quick:
        args.jobs, args.firing, args.idle = 1000, 100, 3.0
    with tempfile.TemporaryDirectory(prefix="yimi-bench-sched-") as tmp:
        path = Path(tmp) / "schedule.db"
        t0 = time.perf_counter()
        fill(path, args.jobs)
        print(f"{args.jobs} pending jobs written in {time.perf_counter() - t0:.2f} s")
        starts = [await startup(path) for _ in range(5)]
        print(
            f"start-up (open, enter, first pass): median {median(starts) * 1000:.1f} ms "
            f"(min {min(starts) * 1000:.1f}, max {max(starts) * 1000:.1f})"
        )
        late = await firing(path, args.firing)
        print(
            f"firing accuracy, {len(late)}/{args.firing} jobs due over 5 s among "
            f"{args.jobs} pending: p50 {percentile(late, 0.5):.1f} ms, "
            f"p99 {percentile(late, 0.99):.1f} ms, max {max(late, default=float('nan')):.1f} ms"
        )
        share = await idle(path, args.idle)
        print(
            f"CPU while idle ({args.jobs} pending, {args.idle:g} s): {share * 100:.3f} % of a core"
        )


if __name__ == "__main__":
    asyncio.run(main())
