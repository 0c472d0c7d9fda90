"""A stand-in microphone for ``wyoming-satellite --mic-command``: raw 16 kHz mono s16le PCM
from a file on stdout, paced like a microphone (real time), then silence, until stopped.

    python tests/pcm_mic.py FILE [CUE]

With ``CUE`` (a path) the microphone hears silence until that file exists, then ``FILE``: the
test says when the person starts speaking (the satellite drops what its microphone hears
before someone streams from it).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

CHUNK_BYTES = 2048
"""1,024 samples: 64 ms"""
CHUNK_S = CHUNK_BYTES / 2 / 16_000


def main(path: str, cue: str | None) -> None:
    data = Path(path).read_bytes()
    out = sys.stdout.buffer
    start = time.monotonic()
    sent = 0
    spoken = 0
    silence = bytes(CHUNK_BYTES)
    while True:
        piece = silence
        if cue is None or Path(cue).exists():
            piece = data[spoken * CHUNK_BYTES : (spoken + 1) * CHUNK_BYTES] or silence
            spoken += 1
        out.write(piece.ljust(CHUNK_BYTES, b"\0"))
        out.flush()
        sent += 1
        delay = start + sent * CHUNK_S - time.monotonic()
        if delay > 0:  # pacing a device, not waiting for another process
            time.sleep(delay)


if __name__ == "__main__":
    try:
        main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
    except (BrokenPipeError, KeyboardInterrupt):
        pass
