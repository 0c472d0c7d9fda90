"""Audio in and out: 16 kHz mono int16 inside, whatever comes from outside converted.

Conversion and files
    ``to_mono16k`` turns any rate, channel count and sample type into 16 kHz mono int16
    (channels averaged, soxr resampling, floats clipped to full scale). NaN or infinite
    samples are refused; clipping is allowed but measurable (``clipped_fraction``).
    ``read_wav`` reads anything libsndfile reads (WAV, FLAC, OGG, …) in blocks, so memory
    stays bounded; an empty, truncated or non-audio file is an :class:`AudioError` with its
    own key. ``encode_flac`` / ``decode_flac`` carry utterances over the mesh;
    ``decode_flac`` takes untrusted bytes and raises nothing but :class:`AudioError`, with
    the decoded length capped.

Sources (async context managers)
    ``async with source: async for frame in source.frames(): ...`` yields :class:`Frame`
    objects of ``FRAME_SAMPLES`` samples (32 ms); ``start_ms`` is the wall clock of a frame's
    first sample. :class:`WavSource` (a file; optionally paced in real time; its start time
    can be set), :class:`StdinPcmSource` (raw s16le PCM on a pipe), :class:`MicSource`
    (sounddevice). The last partial frame of a file or pipe is padded with silence.

Sinks (async context managers)
    ``await sink.play(samples)`` returns when the samples were played (or written);
    ``sink.playing`` is true meanwhile. :class:`SpeakerSink` (sounddevice), :class:`WavSink`
    (appends to a WAV file), :class:`NullSink`. File and null sinks can simulate the
    playing time (``realtime=True``) so that "while a reply plays" behaves as on a device.

``open_source(spec)`` / ``open_sink(spec)`` parse the command line's ``--audio`` and
``--out``: ``mic`` (or ``mic:DEVICE``), ``-`` (stdin), a path; ``speaker`` (or
``speaker:DEVICE``), ``null``, a path. A missing PortAudio library or audio device is an
:class:`AudioError` whose one line names the fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import math
import queue
import struct
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, BinaryIO, Self

import numpy as np
import numpy.typing as npt
import soundfile as sf
import soxr

from hardware.errors import AudioError
from hardware.pcm import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE, Frame, Samples
from protos.clock import now_ms

log = logging.getLogger(__name__)

MIN_RATE, MAX_RATE = 8_000, 384_000
"""Hz: rates accepted from files, pipes and devices"""
MAX_CHANNELS = 32
MAX_FILE_SECONDS = 4 * 3600.0
"""``read_wav`` / ``WavSource`` default length cap (a file longer than this is refused)"""
FLAC_MAX_RATE = 48_000
FLAC_MAX_CHANNELS = 2
"""untrusted FLAC (``decode_flac``): larger rates or channel counts are refused"""
FLAC_SLACK_BYTES = 64 * 1024
"""FLAC bytes allowed above the raw PCM size of ``max_seconds`` (headers, worst-case frames)"""
SILENCE_DBFS = -120.0
"""what ``level_dbfs`` returns for digital silence or no samples"""
BLOCK_SECONDS = 0.5
"""how much a file or pipe reader converts at a time"""
PLAY_CHUNK = 1024
"""samples written to a speaker at a time (a play can stop between chunks)"""
QUEUE_BLOCKS = 64
"""blocks a pipe or microphone reader buffers before it waits (pipe) or drops (mic)"""

PORTAUDIO_FIX = "sudo apt-get install -y libportaudio2"


# ------------------------------------------------------------------ conversion


def to_mono16k(data: npt.NDArray[Any], rate: int, *, what: str = "audio") -> Samples:
    """``data`` (``(n,)`` or ``(n, channels)``; int16, int32, uint8 or float in -1..1) at
    ``rate`` Hz as 16 kHz mono int16. NaN/inf → AudioError ``audio.invalid``."""
    mono = _mono_float(data, rate, what=what)
    if rate != SAMPLE_RATE and len(mono):
        mono = soxr.resample(mono, rate, SAMPLE_RATE)
    return _to_int16(mono)


def _check_rate(rate: object, what: str) -> int:
    if isinstance(rate, bool) or not isinstance(rate, int | np.integer):
        raise AudioError("audio.rate", what=what, rate=rate, low=MIN_RATE, high=MAX_RATE)
    if not MIN_RATE <= int(rate) <= MAX_RATE:
        raise AudioError("audio.rate", what=what, rate=rate, low=MIN_RATE, high=MAX_RATE)
    return int(rate)


def _mono_float(data: npt.NDArray[Any], rate: int, *, what: str) -> npt.NDArray[np.float32]:
    """Channels averaged, scaled to -1..1 float32; rate and values checked."""
    _check_rate(rate, what)
    arr = np.asarray(data)
    if arr.ndim == 2:
        if not 1 <= arr.shape[1] <= MAX_CHANNELS:
            raise AudioError("audio.channels", what=what, channels=arr.shape[1], max=MAX_CHANNELS)
    elif arr.ndim != 1:
        raise AudioError(
            "audio.channels", what=what, channels=f"shape {arr.shape}", max=MAX_CHANNELS
        )
    kind = arr.dtype
    if kind == np.int16:
        x = arr.astype(np.float32) / 32768.0
    elif kind == np.int32:
        x = (arr.astype(np.float64) / 2147483648.0).astype(np.float32)
    elif kind == np.uint8:
        x = (arr.astype(np.float32) - 128.0) / 128.0
    elif np.issubdtype(kind, np.floating):
        x = arr.astype(np.float32, copy=False)
        if not np.isfinite(x).all():
            raise AudioError("audio.invalid", what=what)
    else:
        raise AudioError("audio.format", what=what, reason=f"sample type {kind} is not supported")
    if x.ndim == 2:
        x = x[:, 0] if x.shape[1] == 1 else x.mean(axis=1, dtype=np.float32)
    return np.ascontiguousarray(x, dtype=np.float32)


def _to_int16(x: npt.NDArray[np.floating[Any]]) -> Samples:
    return np.clip(np.round(x * 32768.0), -32768, 32767).astype(np.int16)


def level_dbfs(samples: Samples) -> float:
    """RMS level in dB below full scale (``SILENCE_DBFS`` for silence or no samples)."""
    if len(samples) == 0:
        return SILENCE_DBFS
    rms = math.sqrt(float(np.mean(np.square(samples, dtype=np.float64))))
    if rms <= 0.0:
        return SILENCE_DBFS
    return max(SILENCE_DBFS, 20.0 * math.log10(rms / 32768.0))


def clipped_fraction(samples: Samples) -> float:
    """The fraction of samples at full scale (0..1); clipped audio is kept but measurable."""
    if len(samples) == 0:
        return 0.0
    return float(np.count_nonzero((samples >= 32767) | (samples <= -32767)) / len(samples))


class _Resampler:
    """Streaming conversion of float blocks at ``rate`` to 16 kHz int16."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._stream = (
            None if rate == SAMPLE_RATE else soxr.ResampleStream(rate, SAMPLE_RATE, 1, "float32")
        )

    def push(self, mono: npt.NDArray[np.float32], last: bool = False) -> Samples:
        if self._stream is None:
            return _to_int16(mono)
        return _to_int16(self._stream.resample_chunk(mono, last=last))


class _Framer:
    """Cuts a stream of 16 kHz samples into frames stamped from a start time."""

    def __init__(self, start_ms: int) -> None:
        self.start_ms = start_ms
        self._pending = np.zeros(0, dtype=np.int16)
        self._count = 0
        """samples already framed"""

    def push(self, samples: Samples) -> list[Frame]:
        buf = np.concatenate((self._pending, samples)) if len(self._pending) else samples
        n = len(buf) // FRAME_SAMPLES
        frames = [self._frame(buf[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES]) for i in range(n)]
        self._pending = buf[n * FRAME_SAMPLES :].copy()
        return frames

    def flush(self) -> Frame | None:
        """The last partial frame, padded with silence (``None`` if nothing is pending)."""
        if not len(self._pending):
            return None
        padded = np.zeros(FRAME_SAMPLES, dtype=np.int16)
        padded[: len(self._pending)] = self._pending
        self._pending = np.zeros(0, dtype=np.int16)
        return self._frame(padded)

    def _frame(self, samples: Samples) -> Frame:
        start = self.start_ms + self._count * 1000 // SAMPLE_RATE
        self._count += len(samples)
        return Frame(np.ascontiguousarray(samples, dtype=np.int16), start)


# ------------------------------------------------------------------ files


def _check_riff(path: Path) -> None:
    """Refuse a RIFF/WAVE file whose header promises more data than the file holds.

    libsndfile reads such a file silently (the missing part just isn't there); a
    streamed WAV's placeholder sizes (0 or 0xFFFFFFFF) are accepted.
    """
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(12)
        if not head.startswith(b"RIFF"):
            return
        if len(head) < 12:
            raise AudioError("audio.truncated", what=str(path), reason="the WAV header is cut off")
        if head[8:12] != b"WAVE":
            return
        pos = 12
        while True:
            chunk = f.read(8)
            if len(chunk) < 8:
                raise AudioError("audio.truncated", what=str(path), reason="no data chunk")
            ident, length = chunk[:4], struct.unpack("<I", chunk[4:])[0]
            pos += 8
            if ident == b"data":
                if length in (0, 0xFFFFFFFF):
                    return
                have = size - pos
                if length > have:
                    raise AudioError(
                        "audio.truncated",
                        what=str(path),
                        reason=f"the header declares {length} data bytes, the file holds {have}",
                    )
                return
            pos += length + (length & 1)
            if pos > size:
                raise AudioError(
                    "audio.truncated", what=str(path), reason=f"chunk {ident!r} runs past the end"
                )
            f.seek(pos)


def _open_soundfile(path: Path) -> sf.SoundFile:
    what = str(path)
    if not path.exists():
        raise AudioError("audio.missing", path=path)
    if path.is_dir():
        raise AudioError("audio.not_audio", what=what, reason="it is a folder")
    if path.stat().st_size == 0:
        raise AudioError("audio.empty", what=what)
    _check_riff(path)
    try:
        f = sf.SoundFile(str(path))
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise AudioError("audio.not_audio", what=what, reason=_sf_reason(exc)) from None
    try:
        _check_rate(f.samplerate, what)
        if not 1 <= f.channels <= MAX_CHANNELS:
            raise AudioError("audio.channels", what=what, channels=f.channels, max=MAX_CHANNELS)
    except AudioError:
        f.close()
        raise
    return f


def _sf_reason(exc: BaseException) -> str:
    text = str(exc)
    if ": " in text and text.startswith("Error opening"):
        text = text.rsplit(": ", 1)[-1]
    return text.strip().rstrip(".") or type(exc).__name__


def _blocks(f: sf.SoundFile, what: str, max_seconds: float) -> Iterator[Samples]:
    """16 kHz int16 blocks of an open file; checks values, length and decode errors."""
    rate = f.samplerate
    block = max(1, int(rate * BLOCK_SECONDS))
    cap = int(max_seconds * rate)
    resampler = _Resampler(rate)
    read = 0
    while True:
        try:
            data = f.read(block, dtype="float32", always_2d=True)
        except (sf.LibsndfileError, RuntimeError, ValueError) as exc:
            declared = f.frames
            if read and 0 < declared and read < declared:
                raise AudioError(
                    "audio.truncated",
                    what=what,
                    reason=f"decoded {read} of {declared} frames ({_sf_reason(exc)})",
                ) from None
            raise AudioError("audio.unreadable", what=what, reason=_sf_reason(exc)) from None
        n = len(data)
        read += n
        if read > cap:
            raise AudioError("audio.too_long", what=what, seconds=_fmt_seconds(max_seconds))
        last = n < block
        mono = _mono_float(data, rate, what=what) if n else np.zeros(0, dtype=np.float32)
        out = resampler.push(mono, last=last)
        if len(out):
            yield out
        if last:
            break
    if read == 0:
        raise AudioError("audio.empty", what=what)


def _fmt_seconds(seconds: float) -> str:
    return f"{seconds:g}"


def read_wav(path: Path | str, *, max_seconds: float = MAX_FILE_SECONDS) -> Samples:
    """A whole audio file (any rate, channels, subtype libsndfile reads) as 16 kHz mono int16.

    AudioError keys: ``audio.missing``, ``audio.empty``, ``audio.truncated``,
    ``audio.not_audio``, ``audio.unreadable``, ``audio.invalid`` (NaN/inf),
    ``audio.too_long``, ``audio.rate``, ``audio.channels``.
    """
    path = Path(path)
    with _open_soundfile(path) as f:
        parts = list(_blocks(f, str(path), max_seconds))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)


def write_wav(path: Path | str, samples: Samples) -> Path:
    """Write 16 kHz mono int16 ``samples`` as a PCM_16 WAV file."""
    path = Path(path)
    sf.write(str(path), np.asarray(samples, dtype=np.int16), SAMPLE_RATE, subtype="PCM_16")
    return path


def encode_flac(samples: Samples) -> bytes:
    """16 kHz mono int16 ``samples`` as FLAC bytes (lossless, about half the size)."""
    arr = np.asarray(samples)
    if arr.ndim != 1 or arr.dtype != np.int16:
        raise AudioError("audio.format", what="FLAC input", reason="expected mono int16 samples")
    if len(arr) == 0:
        raise AudioError("audio.empty", what="FLAC input")
    out = io.BytesIO()
    sf.write(out, arr, SAMPLE_RATE, format="FLAC", subtype="PCM_16")
    return out.getvalue()


def decode_flac(data: bytes, max_seconds: float, *, what: str = "FLAC audio") -> Samples:
    """Untrusted FLAC bytes as 16 kHz mono int16, at most ``max_seconds`` long.

    Raises nothing but AudioError. Refused: not bytes, empty, not FLAC, more than
    ``FLAC_MAX_CHANNELS`` channels or ``FLAC_MAX_RATE`` Hz, longer than ``max_seconds`` (in
    bytes or in decoded samples), undecodable.
    """
    try:
        return _decode_flac(data, max_seconds, what)
    except AudioError:
        raise
    except Exception as exc:  # libsndfile, numpy and soxr each raise their own types
        raise AudioError("audio.unreadable", what=what, reason=_sf_reason(exc)) from None


def _decode_flac(data: bytes, max_seconds: float, what: str) -> Samples:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise AudioError("audio.unreadable", what=what, reason=f"got {type(data).__name__}")
    if not max_seconds > 0 or not math.isfinite(max_seconds):
        raise AudioError("audio.unreadable", what=what, reason="bad length limit")
    data = bytes(data)
    if not data:
        raise AudioError("audio.empty", what=what)
    max_bytes = int(max_seconds * FLAC_MAX_RATE * FLAC_MAX_CHANNELS * 2) + FLAC_SLACK_BYTES
    if len(data) > max_bytes:
        raise AudioError("audio.too_long", what=what, seconds=_fmt_seconds(max_seconds))
    if not data.startswith(b"fLaC"):
        raise AudioError("audio.not_audio", what=what, reason="no FLAC signature")
    try:
        f = sf.SoundFile(io.BytesIO(data))
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise AudioError("audio.not_audio", what=what, reason=_sf_reason(exc)) from None
    with f:
        if f.format != "FLAC":
            raise AudioError("audio.not_audio", what=what, reason=f"format {f.format}")
        rate = f.samplerate
        if not MIN_RATE <= rate <= FLAC_MAX_RATE:
            raise AudioError("audio.rate", what=what, rate=rate, low=MIN_RATE, high=FLAC_MAX_RATE)
        if not 1 <= f.channels <= FLAC_MAX_CHANNELS:
            raise AudioError(
                "audio.channels", what=what, channels=f.channels, max=FLAC_MAX_CHANNELS
            )
        parts = list(_blocks(f, what, max_seconds))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)


# ------------------------------------------------------------------ sounddevice


def sounddevice() -> ModuleType:
    """The ``sounddevice`` module; AudioError naming the fix if it or PortAudio is missing."""
    try:
        import sounddevice as sd
    except OSError:  # the Python package is there, the PortAudio library is not
        raise AudioError("audio.portaudio", fix=PORTAUDIO_FIX) from None
    except ImportError:
        raise AudioError("audio.sounddevice") from None
    return sd


def _device_label(device: int | str | None) -> str:
    return "" if device is None else f" {device!r}"


def _query_device(sd: ModuleType, device: int | str | None, kind: str) -> dict[str, Any]:
    """The device's info; AudioError ``audio.no_input`` / ``audio.no_output`` if none."""
    key = "audio.no_input" if kind == "input" else "audio.no_output"
    try:
        info = sd.query_devices(device, kind=kind)
    except (sd.PortAudioError, ValueError) as exc:
        reason = str(exc) or "none"
        with contextlib.suppress(sd.PortAudioError, ValueError, TypeError):
            if len(sd.query_devices()) == 0:
                reason = "this machine has no audio devices"
        raise AudioError(key, device=_device_label(device), reason=reason) from None
    if not isinstance(info, dict) or int(info.get(f"max_{kind}_channels", 0)) < 1:
        raise AudioError(key, device=_device_label(device), reason=f"it has no {kind} channels")
    return info


# ------------------------------------------------------------------ sources


class _Opened:
    """An async context manager around ``open()`` / ``close()`` (no-ops by default)."""

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None


class Source(_Opened):
    """An async context manager yielding :class:`Frame` s from ``frames()``."""

    what = "audio source"

    def frames(self) -> AsyncIterator[Frame]:
        raise NotImplementedError


class WavSource(Source):
    """An audio file as frames; ``realtime`` paces them to the wall clock.

    ``start_ms`` stamps the first frame (default: the wall clock when the source opens);
    frame ``i`` starts at ``start_ms + 32 * i``. With ``realtime`` frame ``i`` is yielded
    no earlier than 32 ms·(i+1) after the source started (as a microphone would), and a
    ``start_ms`` still ahead is waited for: hearing starts then, so devices started apart
    that were given the same ``start_ms`` hear the file together, as two microphones in one
    room hear one voice.
    """

    def __init__(
        self,
        path: Path | str,
        realtime: bool = False,
        start_ms: int | None = None,
        *,
        max_seconds: float = MAX_FILE_SECONDS,
    ) -> None:
        self.path = Path(path)
        self.realtime = realtime
        self.start_ms = start_ms
        self.max_seconds = max_seconds
        self.what = str(self.path)
        self._file: sf.SoundFile | None = None

    async def open(self) -> None:
        self._file = _open_soundfile(self.path)
        if self.start_ms is None:
            self.start_ms = now_ms()

    async def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    async def frames(self) -> AsyncIterator[Frame]:
        if self._file is None:
            raise RuntimeError("WavSource.frames() outside 'async with'")
        assert self.start_ms is not None
        framer = _Framer(self.start_ms)
        if self.realtime:
            await self._start_at(self.start_ms)
        t0 = time.monotonic()
        index = 0
        for block in _blocks(self._file, self.what, self.max_seconds):
            for frame in framer.push(block):
                index += 1
                await self._pace(t0, index)
                yield frame
        last = framer.flush()
        if last is not None:
            await self._pace(t0, index + 1)
            yield last

    async def _start_at(self, start_ms: int) -> None:
        """Wait until the wall clock reaches ``start_ms``, if it is still ahead (a scheduled
        start, not a wait on another task)."""
        ahead_s = (start_ms - now_ms()) / 1000
        if ahead_s > 0:
            log.info("%s: heard from its start time, in %.1f s", self.what, ahead_s)
            await asyncio.sleep(ahead_s)

    async def _pace(self, t0: float, index: int) -> None:
        if self.realtime:
            delay = t0 + index * FRAME_MS / 1000 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
                return
        await asyncio.sleep(0)  # let the rest of the loop run between frames


class _ThreadQueue:
    """Blocks handed from a reader thread to the event loop.

    The thread's ``put`` waits while the queue is full (a pipe is back-pressured) unless
    ``drop_when_full`` (a microphone drops its oldest block instead, counted).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, *, drop_when_full: bool) -> None:
        self._loop = loop
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=QUEUE_BLOCKS)
        self._ready = asyncio.Event()
        self._drop = drop_when_full
        self.dropped = 0
        self.stopped = threading.Event()

    def put(self, item: Any) -> None:
        """From the reader thread: ``item`` (a block, or ``None`` for end, or an exception)."""
        while not self.stopped.is_set():
            try:
                if self._drop:
                    self._queue.put_nowait(item)
                else:
                    self._queue.put(item, timeout=0.1)
                break
            except queue.Full:
                if self._drop:
                    with contextlib.suppress(queue.Empty):
                        self._queue.get_nowait()
                        self.dropped += 1
        with contextlib.suppress(RuntimeError):  # the loop already closed
            self._loop.call_soon_threadsafe(self._ready.set)

    async def get(self) -> Any:
        while True:
            self._ready.clear()
            try:
                return self._queue.get_nowait()
            except queue.Empty:
                await self._ready.wait()


class StdinPcmSource(Source):
    """Raw little-endian int16 PCM on a pipe (``-``: stdin), ``rate`` Hz, ``channels``
    interleaved. Frames are stamped from the wall clock of the first bytes plus the sample
    count. A daemon thread reads (stdin cannot be read without blocking portably)."""

    what = "raw PCM on stdin"

    def __init__(
        self,
        rate: int = SAMPLE_RATE,
        channels: int = 1,
        *,
        stream: BinaryIO | None = None,
        start_ms: int | None = None,
    ) -> None:
        self.rate = _check_rate(rate, self.what)
        if not 1 <= channels <= MAX_CHANNELS:
            raise AudioError("audio.channels", what=self.what, channels=channels, max=MAX_CHANNELS)
        self.channels = channels
        self.stream = stream
        self.start_ms = start_ms
        self._queue: _ThreadQueue | None = None
        self._thread: threading.Thread | None = None

    async def open(self) -> None:
        import sys

        stream = self.stream if self.stream is not None else sys.stdin.buffer
        self._queue = _ThreadQueue(asyncio.get_running_loop(), drop_when_full=False)
        self._thread = threading.Thread(
            target=self._read, args=(stream, self._queue), name="stdin-pcm", daemon=True
        )
        self._thread.start()

    async def close(self) -> None:
        if self._queue is not None:
            self._queue.stopped.set()

    def _read(self, stream: BinaryIO, q: _ThreadQueue) -> None:
        size = int(self.rate * BLOCK_SECONDS) * 2 * self.channels
        read = getattr(stream, "read1", stream.read)
        try:
            while not q.stopped.is_set():
                data = read(size)
                if not data:
                    break
                q.put(bytes(data))
        except (OSError, ValueError) as exc:
            q.put(AudioError("audio.unreadable", what=self.what, reason=str(exc)))
            return
        q.put(None)

    async def frames(self) -> AsyncIterator[Frame]:
        if self._queue is None:
            raise RuntimeError("StdinPcmSource.frames() outside 'async with'")
        width = 2 * self.channels
        resampler = _Resampler(self.rate)
        framer: _Framer | None = None
        carry = b""
        while True:
            item = await self._queue.get()
            if isinstance(item, AudioError):
                raise item
            if framer is None:
                framer = _Framer(self.start_ms if self.start_ms is not None else now_ms())
            if item is None:
                tail = resampler.push(np.zeros(0, dtype=np.float32), last=True)
                for frame in framer.push(tail):
                    yield frame
                last = framer.flush()
                if last is not None:
                    yield last
                if carry:
                    log.warning(
                        "%s: %d trailing bytes of a partial sample dropped", self.what, len(carry)
                    )
                return
            buf = carry + item
            whole = len(buf) - len(buf) % width
            carry = buf[whole:]
            pcm = np.frombuffer(buf[:whole], dtype="<i2").reshape(-1, self.channels)
            mono = _mono_float(pcm, self.rate, what=self.what)
            for frame in framer.push(resampler.push(mono)):
                yield frame


class MicSource(Source):
    """A microphone through sounddevice (PortAudio), 16 kHz mono int16 frames.

    The device is opened at 16 kHz if it takes that rate, else at its own default rate and
    resampled. Frames are stamped from the wall clock of the first block plus the sample
    count; if the reader falls behind, the oldest blocks are dropped (``dropped``) and the
    clock is re-anchored.
    """

    what = "microphone"

    def __init__(self, device: int | str | None = None) -> None:
        self.device = device
        self.rate = SAMPLE_RATE
        self._stream: Any = None
        self._queue: _ThreadQueue | None = None

    @property
    def dropped(self) -> int:
        return self._queue.dropped if self._queue is not None else 0

    async def open(self) -> None:
        sd = sounddevice()
        info = _query_device(sd, self.device, "input")
        self._queue = _ThreadQueue(asyncio.get_running_loop(), drop_when_full=True)
        q = self._queue

        def callback(indata: Any, frames: int, _time: Any, status: Any) -> None:
            if status:
                log.debug("microphone: %s", status)
            q.put((now_ms(), indata[:, 0].copy()))

        try:
            sd.check_input_settings(device=self.device, channels=1, samplerate=SAMPLE_RATE)
        except (sd.PortAudioError, ValueError):
            self.rate = int(info.get("default_samplerate") or 48_000)
        try:
            self._stream = sd.InputStream(
                device=self.device,
                channels=1,
                samplerate=self.rate,
                dtype="float32",
                blocksize=int(self.rate * FRAME_MS / 1000),
                callback=callback,
            )
            self._stream.start()
        except (sd.PortAudioError, ValueError) as exc:
            self._stream = None
            raise AudioError(
                "audio.device", device=info.get("name", self.device), reason=str(exc)
            ) from None

    async def close(self) -> None:
        if self._queue is not None:
            self._queue.stopped.set()
        if self._stream is not None:
            with contextlib.suppress(Exception):  # PortAudio errors on close change nothing
                self._stream.stop()
                self._stream.close()
            self._stream = None

    async def frames(self) -> AsyncIterator[Frame]:
        if self._queue is None:
            raise RuntimeError("MicSource.frames() outside 'async with'")
        resampler = _Resampler(self.rate)
        framer: _Framer | None = None
        dropped = 0
        while True:
            stamp, block = await self._queue.get()
            block_ms = len(block) * 1000 // self.rate
            if framer is None or self._queue.dropped != dropped:
                dropped = self._queue.dropped
                if framer is not None:
                    log.warning("microphone: %d blocks dropped; clock re-anchored", dropped)
                framer = _Framer(stamp - block_ms)
            for frame in framer.push(resampler.push(block.astype(np.float32))):
                yield frame


# ------------------------------------------------------------------ sinks


class Sink(_Opened):
    """Where replies are spoken. ``await play(samples)`` returns when they were played;
    ``playing`` is true meanwhile. One play at a time, in call order."""

    def __init__(self, *, realtime: bool = False) -> None:
        self.realtime = realtime
        """file and null sinks: take as long as the audio lasts (as a speaker would)"""
        self._playing = 0
        self._lock: asyncio.Lock | None = None

    @property
    def playing(self) -> bool:
        return self._playing > 0

    async def play(self, samples: Samples) -> None:
        """Play 16 kHz mono int16 ``samples``; returns when they were played."""
        arr = np.asarray(samples)
        if arr.ndim != 1 or arr.dtype != np.int16:
            raise AudioError("audio.format", what="playback", reason="expected mono int16 samples")
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            self._playing += 1
            try:
                t0 = time.monotonic()
                await self._play(arr)
                if self.realtime:
                    delay = t0 + len(arr) / SAMPLE_RATE - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
            finally:
                self._playing -= 1

    async def _play(self, samples: Samples) -> None:
        return None


class NullSink(Sink):
    """Discards what it is given (after its playing time if ``realtime``)."""


class WavSink(Sink):
    """Appends every play to a 16 kHz mono PCM_16 WAV file (created if missing)."""

    def __init__(self, path: Path | str, *, realtime: bool = False) -> None:
        super().__init__(realtime=realtime)
        self.path = Path(path)

    async def _play(self, samples: Samples) -> None:
        await asyncio.to_thread(self._append, samples)

    def _append(self, samples: Samples) -> None:
        path = self.path
        if not (path.exists() and path.stat().st_size > 0):
            write_wav(path, samples)
            return
        try:
            with sf.SoundFile(str(path), "r+") as f:
                if f.samplerate != SAMPLE_RATE or f.channels != 1:
                    raise AudioError(
                        "audio.format",
                        what=str(path),
                        reason=f"{f.samplerate} Hz, {f.channels} channels: cannot append",
                    )
                f.seek(0, sf.SEEK_END)
                f.write(samples)
        except (sf.LibsndfileError, RuntimeError) as exc:
            raise AudioError("audio.not_audio", what=str(path), reason=_sf_reason(exc)) from None


class SpeakerSink(Sink):
    """A speaker through sounddevice (PortAudio); ``open`` checks that there is one."""

    def __init__(self, device: int | str | None = None) -> None:
        super().__init__()
        self.device = device
        self._stream: Any = None
        self._stop = threading.Event()

    async def open(self) -> None:
        sd = sounddevice()
        info = _query_device(sd, self.device, "output")
        try:
            self._stream = sd.OutputStream(
                device=self.device, channels=1, samplerate=SAMPLE_RATE, dtype="int16"
            )
            self._stream.start()
        except (sd.PortAudioError, ValueError) as exc:
            self._stream = None
            raise AudioError(
                "audio.device", device=info.get("name", self.device), reason=str(exc)
            ) from None

    async def close(self) -> None:
        self._stop.set()
        if self._stream is not None:
            with contextlib.suppress(Exception):  # PortAudio errors on close change nothing
                self._stream.stop()
                self._stream.close()
            self._stream = None

    async def _play(self, samples: Samples) -> None:
        if self._stream is None:
            self._stop.clear()
            await self.open()
        stream = self._stream
        for start in range(0, len(samples), PLAY_CHUNK):
            if self._stop.is_set():
                return
            chunk = samples[start : start + PLAY_CHUNK].reshape(-1, 1)
            await asyncio.to_thread(stream.write, chunk)
        # what was written last is still in the device's buffer
        await asyncio.sleep(float(getattr(stream, "latency", 0.0) or 0.0))


# ------------------------------------------------------------------ command-line specs


def open_source(
    spec: str,
    *,
    realtime: bool = False,
    start_ms: int | None = None,
    rate: int = SAMPLE_RATE,
    channels: int = 1,
    stdin: BinaryIO | None = None,
) -> Source:
    """``--audio``: ``mic`` / ``mic:DEVICE``, ``-`` (raw s16le PCM on stdin), or a file."""
    if not spec:
        raise AudioError("audio.spec", what="source", spec=spec, reason=SOURCE_SPECS)
    if spec == "mic" or spec.startswith("mic:"):
        return MicSource(_device_of(spec))
    if spec == "-":
        return StdinPcmSource(rate, channels, stream=stdin, start_ms=start_ms)
    return WavSource(Path(spec), realtime, start_ms)


def open_sink(spec: str, *, realtime: bool = False) -> Sink:
    """``--out``: ``speaker`` / ``speaker:DEVICE``, ``null``, or a WAV file to append to."""
    if not spec:
        raise AudioError("audio.spec", what="sink", spec=spec, reason=SINK_SPECS)
    if spec == "speaker" or spec.startswith("speaker:"):
        return SpeakerSink(device=_device_of(spec))
    if spec == "null":
        return NullSink(realtime=realtime)
    return WavSink(Path(spec), realtime=realtime)


SOURCE_SPECS = "use mic, mic:DEVICE, - (raw 16-bit PCM on stdin) or a file"
SINK_SPECS = "use speaker, speaker:DEVICE, null or a WAV file"


def _device_of(spec: str) -> int | str | None:
    _, _, rest = spec.partition(":")
    if not rest:
        return None
    return int(rest) if rest.isdigit() else rest
