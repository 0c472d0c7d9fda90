"""The one shape of audio inside Yimi: 16 kHz mono int16 samples, heard in 32 ms frames.

Every layer that carries audio (``hardware`` sources and sinks, ``models`` runners,
``edge_agent``'s pipeline, the hub's hearing) uses these; whatever comes from outside is
converted to them at the edge (``hardware.audio.to_mono16k``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

SAMPLE_RATE = 16_000
"""Hz: every sample array inside Yimi is 16 kHz mono int16"""
FRAME_SAMPLES = 512
"""samples per frame (32 ms at 16 kHz; Silero VAD's chunk size)"""
FRAME_MS = FRAME_SAMPLES * 1000 // SAMPLE_RATE

Samples = npt.NDArray[np.int16]


@dataclass(frozen=True, eq=False)
class Frame:
    """``FRAME_SAMPLES`` int16 samples; ``start_ms`` is the wall clock of the first one."""

    samples: Samples
    start_ms: int

    @property
    def end_ms(self) -> int:
        return self.start_ms + FRAME_MS
