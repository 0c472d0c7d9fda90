"""A stand-in microphone for ``wyoming-satellite --mic-command``: raw 16 kHz mono s16le PCM
from a file on stdout, paced like a microphone (real time), then silence, until stopped.

    python tests/pcm_mic.py FILE
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

CHUNK_BYTES = 2048
"""1,024 samples: 64 ms"""
CHUNK_S = CHUNK_BYTES / 2 / 16_000


def main(path: str) -> None:
    data = Path(path).read_bytes()
    out = sys.stdout.buffer
    start = time.monotonic()
    sent = 0
    silence = bytes(CHUNK_BYTES)
    while True:
        piece = data[sent * CHUNK_BYTES : (sent + 1) * CHUNK_BYTES] or silence
        out.write(piece.ljust(CHUNK_BYTES, b"\0"))
        out.flush()
        sent += 1
        delay = start + sent * CHUNK_S - time.monotonic()
        if delay > 0:  # pacing a device, not waiting for another process
            time.sleep(delay)


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    except (BrokenPipeError, KeyboardInterrupt):
        pass
