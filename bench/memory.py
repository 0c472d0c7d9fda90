"""Memory benchmarks (issue: memory L1–L5): recall, commits, and the L5 cold archive.

Run: ``.venv/bin/python bench/memory.py [--quick]``. Each section prints its own table:
``bench/memory_recall.py`` (recall p50/p99 at 10k and 100k memories against a brute-force
numpy baseline measured in the same run, commit throughput) and ``bench/memory_archive.py``
(cold-pack pack/verify MB/s and FLAC compression ratio on speech synthesised by espeak-ng).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import memory_archive, memory_recall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args()
    memory_recall.run(quick=args.quick)
    memory_archive.run(quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
