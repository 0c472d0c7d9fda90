"""Head motion: an IMU's gyroscope as a stream of samples, behind one interface.

A sample is the angular rate around the head's three axes in rad/s — ``pitch`` (a nod turns
the head up and down), ``yaw`` (a shake turns it left and right), ``roll`` — with the sensor's
time in ms. A real sensor backend implements :class:`ImuSource`; no driver for the glasses'
sensor exists here yet. :class:`CsvImuSource` (FAKE hardware) replays a recording: a CSV with
the header ``t_ms,pitch,yaw,roll`` — optionally paced in real time.
"""

from __future__ import annotations

import asyncio
import csv
import math
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hardware.errors import ImuError

COLUMNS = ("t_ms", "pitch", "yaw", "roll")


@dataclass(frozen=True)
class ImuSample:
    t_ms: int
    pitch: float
    """rad/s"""
    yaw: float
    roll: float


class ImuSource(Protocol):
    def samples(self) -> AsyncIterator[ImuSample]: ...


def read_csv(path: Path) -> Iterator[ImuSample]:
    """The samples of a recording; :class:`ImuError` naming the line of a bad one."""
    if not path.is_file():
        raise ImuError("imu.missing", path=str(path))
    with path.open(newline="") as fh:
        rows = csv.reader(fh)
        header = next(rows, None)
        if header is None or tuple(h.strip() for h in header) != COLUMNS:
            raise ImuError("imu.malformed", path=str(path), line=1, reason="header")
        last = -1
        for n, row in enumerate(rows, start=2):
            try:
                t, p, y, r = int(row[0]), float(row[1]), float(row[2]), float(row[3])
            except (ValueError, IndexError) as exc:
                raise ImuError("imu.malformed", path=str(path), line=n, reason=str(exc)) from exc
            if t < last or not all(math.isfinite(v) for v in (p, y, r)):
                raise ImuError("imu.malformed", path=str(path), line=n, reason="time or value")
            last = t
            yield ImuSample(t, p, y, r)


class CsvImuSource:
    """FAKE hardware: a recorded IMU stream (see the module doc)."""

    def __init__(self, path: Path, *, realtime: bool = False) -> None:
        self.path = path
        self.realtime = realtime

    async def samples(self) -> AsyncIterator[ImuSample]:
        loop = asyncio.get_running_loop()
        start: tuple[float, int] | None = None
        for sample in read_csv(self.path):
            if self.realtime:
                if start is None:
                    start = (loop.time(), sample.t_ms)
                due = start[0] + (sample.t_ms - start[1]) / 1000
                await asyncio.sleep(max(0.0, due - loop.time()))
            yield sample


def open_imu(spec: str) -> ImuSource:
    """The IMU ``--imu`` names: ``device`` (the glasses' sensor: no driver yet,
    :class:`ImuError` ``imu.no_driver``) or a recording, paced like the sensor."""
    if spec == "device":
        raise ImuError("imu.no_driver")
    path = Path(spec)
    if not path.is_file():
        raise ImuError("imu.missing", path=spec)
    return CsvImuSource(path, realtime=True)
