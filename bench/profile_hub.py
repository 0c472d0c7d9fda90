"""Run ``python -m cli ARGS`` under cProfile and write the profile at exit (bench helper).

``bench/hubproc.py`` starts the hub through this module when ``YIMI_BENCH_PROFILE`` names an
output file; read the result with ``python -m pstats FILE``. Only the main thread (the
hub's event loop) is profiled. The profile is written by an atexit handler, which
``cli.common.exit_now`` still runs.
"""

from __future__ import annotations

import atexit
import cProfile
import os
import sys

from cli.main import main


def run() -> None:
    out = os.environ["YIMI_BENCH_PROFILE"]
    profiler = cProfile.Profile()

    def dump() -> None:
        profiler.disable()
        profiler.dump_stats(out)

    atexit.register(dump)
    profiler.enable()
    sys.argv = ["yimi", *sys.argv[1:]]
    main()


if __name__ == "__main__":
    run()
