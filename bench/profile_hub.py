"""Run ``python -m cli ARGS`` under a profiler and write the profile at exit (bench helper).

``bench/hubproc.py`` starts the hub through this module when ``YIMI_BENCH_PROFILE`` names an
output file. Two profilers, chosen by the file's name:

- ``*.folded``: a sampler — a thread that looks at the hub's loop thread every
  :data:`SAMPLE_S` and counts its stacks; the file has one ``frame;frame;… count`` line per
  stack (flame-graph "folded" format) and ``python bench/profile_hub.py --top FILE`` prints
  the functions by the share of samples they were on the stack (inclusive) and on top of it
  (self). It barely slows the hub, so shares are close to the real ones;
- any other name: cProfile (exact call counts, but Python-heavy code looks slower than it
  is); read the result with ``python -m pstats FILE``.

Only the main thread (the hub's event loop) is profiled. The profile is written by an
atexit handler, which ``cli.common.exit_now`` still runs.
"""

from __future__ import annotations

import atexit
import collections
import cProfile
import os
import sys
import threading
import time
from pathlib import Path
from types import FrameType

SAMPLE_S = 0.001
"""seconds between two samples of the loop thread's stack"""
SWITCH_S = 0.00005
"""the interpreter's thread switch interval while sampling (default 0.005)"""
IDLE = ("select", "poll", "_run_once")
"""a stack whose top frame is one of these is the loop waiting: counted as idle"""


def _stack(frame: FrameType | None) -> str:
    names: list[str] = []
    while frame is not None:
        code = frame.f_code
        names.append(f"{Path(code.co_filename).stem}:{code.co_name}")
        frame = frame.f_back
    return ";".join(reversed(names))


class Sampler:
    """Counts the stacks of one thread, sampled every :data:`SAMPLE_S` by its own thread."""

    def __init__(self, thread_id: int) -> None:
        self.thread_id = thread_id
        self.stacks: collections.Counter[str] = collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            frame = sys._current_frames().get(self.thread_id)
            if frame is not None:
                self.stacks[_stack(frame)] += 1

    def stop(self, out: str) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)
        with open(out, "w", encoding="utf-8") as fh:
            for stack, n in self.stacks.most_common():
                fh.write(f"{stack} {n}\n")


def top(path: str, limit: int = 60) -> None:
    """Print functions by inclusive and self share of the busy (non-idle) samples."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    busy = idle = 0
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        n = int(count)
        if frames[-1].split(":")[-1] in IDLE:
            idle += n
            continue
        busy += n
        own[frames[-1]] += n
        for f in set(frames):
            inclusive[f] += n
    print(f"samples: {busy} busy, {idle} idle ({busy / max(1, busy + idle):.0%} busy)")
    print(f"{'incl':>6} {'self':>6}  function")
    for f, n in inclusive.most_common(limit):
        print(f"{n / busy:6.1%} {own[f] / busy:6.1%}  {f}")
    print("-- by self")
    for f, n in own.most_common(limit // 2):
        print(f"{inclusive[f] / busy:6.1%} {n / busy:6.1%}  {f}")


def run() -> None:
    from cli.main import main

    out = os.environ["YIMI_BENCH_PROFILE"]
    if out.endswith(".folded"):
        # the sampler gets the GIL within this, not only when the loop releases it (which
        # would over-count I/O and C calls that release it)
        sys.setswitchinterval(SWITCH_S)
        sampler = Sampler(threading.get_ident())
        atexit.register(sampler.stop, out)
        sampler.start()
    else:
        profiler = cProfile.Profile()

        def dump() -> None:
            profiler.disable()
            profiler.dump_stats(out)

        atexit.register(dump)
        profiler.enable()
    sys.argv = ["yimi", *sys.argv[1:]]
    started = time.monotonic()
    try:
        main()
    finally:
        print(f"profiled for {time.monotonic() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--top"]:
        top(sys.argv[2])
    else:
        run()
