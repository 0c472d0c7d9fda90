"""A ``wyoming-satellite`` (ESP32 or Pi) as this device's microphone and speaker.

``yimi edge run --wyoming-satellite HOST:PORT`` connects to the satellite as Home Assistant
would: ``describe`` (the answer must name a satellite), then ``run-satellite``; the
satellite then streams its microphone (``audio-chunk``). :class:`SatelliteLink` turns that
stream into the 32 ms frames the pipeline hears (:mod:`edge_agent.pipeline`: Yimi's own VAD,
wake word and voiceprint run here, not on the satellite) and is the pipeline's sink: a
reply is sent back as ``audio-start``/``-chunk``/``-stop`` and :meth:`SatelliteLink.play`
returns once the satellite says ``played`` — the pipeline listens for the owner again only
then (its own playback is not taken as the owner meanwhile).

``wyoming-satellite`` releases before 1.1 (1.0.0 is the one on PyPI) never send ``played``:
then :meth:`~SatelliteLink.play` waits for the audio's own length (plus a margin) instead,
and says so once in the log.

Every byte from the satellite is read by :mod:`sync.wyoming` (bounded, never raising); the
connection's reader is a task the link owns; when the satellite goes away the link connects
again with backoff (an ESP32 reboots), and a reply played meanwhile is shown, not spoken.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator
from types import TracebackType

import numpy as np
from wyoming.event import Event, async_write_event

from edge_agent.errors import EdgeError
from hardware.pcm import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE, Frame, Samples
from protos.clock import now_ms
from sync import wyoming as wy
from sync.backoff import Backoff
from sync.tasks import TaskOwner

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
DESCRIBE_TIMEOUT_S = 10.0
PLAYED_MARGIN_S = 2.0
"""seconds beyond the audio's length to wait for ``played``"""
PLAY_CHUNK_SAMPLES = 1024
STEADY_S = 5.0
"""a connection that lasted this long resets the reconnection backoff"""
MAX_QUEUED_FRAMES = 30 * 1000 // FRAME_MS
"""frames held for the pipeline (30 s); beyond that the oldest are dropped"""
_TARGET = re.compile(r"^\[?(?P<host>[^\[\]]+?)\]?:(?P<port>\d{1,5})$")


def parse_target(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) → (host, port); EdgeError if malformed."""
    m = _TARGET.match(value.strip())
    if m is None or not 1 <= int(m.group("port")) <= 65535:
        raise EdgeError("wyoming.satellite_address", value=value)
    return m.group("host"), int(m.group("port"))


class SatelliteLink:
    """The connection to one satellite: its microphone as frames, its speaker as a sink.
    An async context manager owning the reader task."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.target = f"{host}:{port}"
        self.name = ""
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._tasks = TaskOwner(f"satellite-{port}")
        self._frames: asyncio.Queue[Frame | None] = asyncio.Queue()
        self._pending = np.zeros(0, dtype=np.int16)
        self._clock_ms = 0
        self._played = asyncio.Event()
        self._playing = False
        self._told_no_played = False
        self.dropped_frames = 0
        self.played_events = 0
        self.connections = 0
        self._connected = False

    # -------------------------------------------------------------- lifecycle
    async def __aenter__(self) -> SatelliteLink:
        await self._connect()  # an unreachable satellite fails the start
        await self._tasks.__aenter__()
        self._tasks.spawn(self._run(), "reader")
        return self

    async def _connect(self) -> None:
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        except (OSError, TimeoutError) as exc:
            raise EdgeError(
                "wyoming.satellite_unreachable", target=self.target, reason=str(exc) or "timeout"
            ) from None
        try:
            await self._describe()
            await self._send(Event("run-satellite", {}))
        except BaseException:
            self._close_writer()
            raise
        self.connections += 1
        self._connected = True
        log.info("wyoming satellite %r at %s: streaming", self.name, self.target)

    async def _run(self) -> None:
        """Read the satellite; when it goes away (a reboot, the network), connect again with
        backoff — the pipeline's frames go on from where they were."""
        backoff = Backoff(initial=0.5, cap=15.0)
        try:
            while True:
                if self._reader is not None:
                    began = time.monotonic()
                    await self._read()
                    if time.monotonic() - began > STEADY_S:
                        backoff.reset()
                self._close_writer()
                self._reader = None
                await asyncio.sleep(backoff.next_delay())
                try:
                    await self._connect()
                except EdgeError as exc:
                    log.info("%s", exc)
        finally:
            self._frames.put_nowait(None)

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self._tasks.close()
        finally:
            self._close_writer()

    def _close_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()

    async def _describe(self) -> None:
        assert self._reader is not None
        await self._send(Event("describe", {}))
        try:
            async with asyncio.timeout(DESCRIBE_TIMEOUT_S):
                while True:
                    raw = await wy.read_event(self._reader)
                    if raw is None:
                        raise EdgeError(
                            "wyoming.satellite_unreachable",
                            target=self.target,
                            reason="closed before answering describe",
                        )
                    info = wy.decode_raw(raw)
                    if isinstance(info, wy.SatelliteInfo):
                        if not info.satellite:
                            raise EdgeError("wyoming.not_satellite", target=self.target)
                        self.name = info.name
                        return
        except TimeoutError:
            raise EdgeError(
                "wyoming.satellite_unreachable", target=self.target, reason="no answer to describe"
            ) from None

    async def _send(self, event: Event) -> None:
        if self._writer is None or self._writer.is_closing():
            raise EdgeError(
                "wyoming.satellite_unreachable", target=self.target, reason="not connected"
            )
        try:
            await async_write_event(event, self._writer)
        except (ConnectionError, OSError) as exc:
            raise EdgeError(
                "wyoming.satellite_unreachable", target=self.target, reason=str(exc)
            ) from None

    # -------------------------------------------------------------- microphone
    async def _read(self) -> None:
        assert self._reader is not None
        self._pending = np.zeros(0, dtype=np.int16)
        try:
            while True:
                raw = await wy.read_event(self._reader)
                if raw is None:
                    log.warning("wyoming satellite at %s: connection ended", self.target)
                    return
                event = wy.decode_raw(raw)
                if isinstance(event, wy.AudioChunk):
                    self._hear(event)
                elif isinstance(event, wy.Played):
                    self.played_events += 1
                    self._played.set()
                elif isinstance(event, wy.RunPipeline):
                    log.info(
                        "satellite asks for a pipeline %s → %s: Yimi hears it",
                        event.start_stage,
                        event.end_stage,
                    )
        except (ConnectionError, OSError) as exc:
            log.warning("wyoming satellite at %s: %s", self.target, exc)
        finally:
            self._connected = False
            self._played.set()  # a reply being played ends with the connection

    def _hear(self, chunk: wy.AudioChunk) -> None:
        samples = wy.to_pcm16k(chunk.fmt, chunk.audio)
        if samples is None or samples.size == 0:
            return
        if not self._clock_ms:
            self._clock_ms = now_ms()
        elif self._clock_ms < now_ms() - 2_000:  # back after a gap: the clock resumes now
            self._clock_ms = now_ms()
        self._pending = np.concatenate([self._pending, samples])
        while len(self._pending) >= FRAME_SAMPLES:
            frame = Frame(self._pending[:FRAME_SAMPLES].copy(), self._clock_ms)
            self._pending = self._pending[FRAME_SAMPLES:]
            self._clock_ms += FRAME_MS
            if self._frames.qsize() >= MAX_QUEUED_FRAMES:
                self._frames.get_nowait()
                self.dropped_frames += 1
                if self.dropped_frames % 100 == 1:
                    log.warning("satellite audio: the pipeline is behind; oldest frames dropped")
            self._frames.put_nowait(frame)

    async def frames(self) -> AsyncIterator[Frame]:
        """The satellite's microphone as 32 ms frames, across reconnections, until the link
        is closed."""
        while True:
            frame = await self._frames.get()
            if frame is None:
                return
            yield frame

    # -------------------------------------------------------------- speaker
    @property
    def playing(self) -> bool:
        return self._playing

    async def play(self, samples: Samples) -> None:
        """Play ``samples`` (16 kHz mono) on the satellite; returns when it said ``played``
        (or, from a satellite that never says it, when the audio has had time to play)."""
        fmt = {"rate": SAMPLE_RATE, "width": 2, "channels": 1}
        self._playing = True
        self._played.clear()
        try:
            await self._send(Event("audio-start", {**fmt, "timestamp": 0}))
            for i in range(0, len(samples), PLAY_CHUNK_SAMPLES):
                piece = np.asarray(samples[i : i + PLAY_CHUNK_SAMPLES], dtype="<i2")
                ts = i * 1000 // SAMPLE_RATE
                await self._send(Event("audio-chunk", {**fmt, "timestamp": ts}, piece.tobytes()))
            await self._send(Event("audio-stop", {"timestamp": len(samples) * 1000 // SAMPLE_RATE}))
            length_s = len(samples) / SAMPLE_RATE
            try:
                async with asyncio.timeout(length_s + PLAYED_MARGIN_S):
                    await self._played.wait()
                if not self._connected:
                    raise EdgeError(
                        "wyoming.satellite_unreachable",
                        target=self.target,
                        reason="the connection ended while it played",
                    )
                how = "its played event"
            except TimeoutError:
                how = "no played event: waited the audio's length"
                if not self._told_no_played:
                    self._told_no_played = True
                    log.warning(
                        "satellite %r sends no 'played' (wyoming-satellite before 1.1): "
                        "replies are taken as played after their length",
                        self.name,
                    )
            log.info("reply played through the satellite %r (%.1f s, %s)", self.name, length_s, how)
        finally:
            self._playing = False
