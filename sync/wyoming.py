"""Wyoming events from an untrusted peer, decoded into this package's own records.

The Wyoming protocol (Home Assistant's voice protocol) frames each event as a JSON header
line (``type``, ``data``, ``data_length``, ``payload_length``), an optional JSON data block
and an optional binary payload. The ``wyoming`` library writes events; they are read here
(:func:`read_event`: bounded header, data and payload — the library's reader trusts the
lengths and raises on some malformed headers). What the fields say is checked too:
:func:`decode` turns an event's type, data and payload into one of the request records
below, or ``None`` for anything malformed or unknown. It never raises
(``tests/test_wyoming.py`` fuzzes it).

Audio arrives as raw PCM in any rate/width/channel layout the peer announces;
:func:`to_pcm16k` makes it 16 kHz mono int16 (what every model here hears) or gives up
(``None``) on a layout it cannot convert.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from hardware.pcm import SAMPLE_RATE, Samples

MAX_TEXT = 4_000
"""characters of a text a peer may send (to transcribe, synthesise or handle)"""
MAX_CHUNK_BYTES = 1 << 20
"""bytes of one audio chunk"""
RATES = (8_000, 11_025, 16_000, 22_050, 24_000, 32_000, 44_100, 48_000)
WIDTHS = (2,)
"""sample widths in bytes (16-bit PCM: what Home Assistant and every satellite send)"""
MAX_CHANNELS = 8


@dataclass(frozen=True)
class Describe:
    pass


@dataclass(frozen=True)
class Ping:
    text: str


@dataclass(frozen=True)
class Transcribe:
    language: str
    """"" when the peer named none"""


@dataclass(frozen=True)
class Detect:
    pass


@dataclass(frozen=True)
class AudioFormat:
    rate: int
    width: int
    channels: int


@dataclass(frozen=True)
class AudioStart:
    fmt: AudioFormat


@dataclass(frozen=True)
class AudioChunk:
    fmt: AudioFormat
    audio: bytes


@dataclass(frozen=True)
class AudioStop:
    pass


@dataclass(frozen=True)
class Synthesize:
    text: str
    language: str


@dataclass(frozen=True)
class HandleText:
    """A ``transcript`` sent to the handle service: what the person said, to be answered."""

    text: str
    language: str


@dataclass(frozen=True)
class Played:
    """A satellite finished playing what it was sent."""


@dataclass(frozen=True)
class RunPipeline:
    """A satellite asks for a voice pipeline (it streams audio next)."""

    start_stage: str
    end_stage: str


@dataclass(frozen=True)
class SatelliteInfo:
    """An ``info`` answer: whether the peer is a satellite, and its name."""

    satellite: bool
    name: str


Request = (
    Describe
    | Ping
    | Transcribe
    | Detect
    | AudioStart
    | AudioChunk
    | AudioStop
    | Synthesize
    | HandleText
    | Played
    | RunPipeline
    | SatelliteInfo
)


def _text(data: Mapping[str, object], key: str, limit: int = MAX_TEXT) -> str | None:
    value = data.get(key)
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > limit:
        return None
    return value


def _int(data: Mapping[str, object], key: str, choices: tuple[int, ...] | range) -> int | None:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value not in choices:
        return None
    return value


def _format(data: Mapping[str, object]) -> AudioFormat | None:
    rate = _int(data, "rate", RATES)
    width = _int(data, "width", WIDTHS)
    channels = _int(data, "channels", range(1, MAX_CHANNELS + 1))
    if rate is None or width is None or channels is None:
        return None
    return AudioFormat(rate, width, channels)


def _language(data: Mapping[str, object]) -> str:
    lang = _text(data, "language", 16)
    return (lang or "").strip().lower()


def _describe(data: Mapping[str, object], payload: bytes) -> Request | None:
    return Describe()


def _ping(data: Mapping[str, object], payload: bytes) -> Request | None:
    text = _text(data, "text", 256)
    return None if text is None else Ping(text)


def _transcribe(data: Mapping[str, object], payload: bytes) -> Request | None:
    return Transcribe(_language(data))


def _detect(data: Mapping[str, object], payload: bytes) -> Request | None:
    return Detect()


def _audio_start(data: Mapping[str, object], payload: bytes) -> Request | None:
    fmt = _format(data)
    return None if fmt is None else AudioStart(fmt)


def _audio_chunk(data: Mapping[str, object], payload: bytes) -> Request | None:
    fmt = _format(data)
    if fmt is None or len(payload) > MAX_CHUNK_BYTES:
        return None
    return AudioChunk(fmt, payload)


def _audio_stop(data: Mapping[str, object], payload: bytes) -> Request | None:
    return AudioStop()


def _synthesize(data: Mapping[str, object], payload: bytes) -> Request | None:
    text = _text(data, "text")
    if not text or not text.strip():
        return None
    voice = data.get("voice")
    language = _language(voice) if isinstance(voice, Mapping) else ""
    return Synthesize(text.strip(), language)


def _transcript(data: Mapping[str, object], payload: bytes) -> Request | None:
    text = _text(data, "text")
    if text is None:
        return None
    return HandleText(text.strip(), _language(data))


def _played(data: Mapping[str, object], payload: bytes) -> Request | None:
    return Played()


def _run_pipeline(data: Mapping[str, object], payload: bytes) -> Request | None:
    start = _text(data, "start_stage", 32)
    end = _text(data, "end_stage", 32)
    if start is None or end is None:
        return None
    return RunPipeline(start, end)


def _info(data: Mapping[str, object], payload: bytes) -> Request | None:
    sat = data.get("satellite")
    if not isinstance(sat, Mapping):
        return SatelliteInfo(False, "")
    name = _text(sat, "name", 256)
    return SatelliteInfo(True, name or "")


DECODERS: dict[str, Callable[[Mapping[str, object], bytes], Request | None]] = {
    "describe": _describe,
    "ping": _ping,
    "transcribe": _transcribe,
    "detect": _detect,
    "audio-start": _audio_start,
    "audio-chunk": _audio_chunk,
    "audio-stop": _audio_stop,
    "synthesize": _synthesize,
    "transcript": _transcript,
    "played": _played,
    "run-pipeline": _run_pipeline,
    "info": _info,
}
"""event type → its decoder (the request types this package understands)"""

MAX_HEADER_BYTES = 64 * 1024
MAX_DATA_BYTES = 64 * 1024
MAX_PAYLOAD_BYTES = MAX_CHUNK_BYTES


@dataclass(frozen=True)
class Header:
    """The JSON line that starts an event."""

    type: str
    data: Mapping[str, object]
    data_length: int
    payload_length: int


@dataclass(frozen=True)
class RawEvent:
    type: str
    data: Mapping[str, object]
    payload: bytes


def _length(raw: Mapping[str, object], key: str, limit: int) -> int | None:
    value = raw.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        return None
    return value


def parse_header(line: bytes) -> Header | None:
    """An event's header line, or ``None`` when it is not a well-formed, bounded one.
    Never raises."""
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(raw, dict):
        return None
    kind = raw.get("type")
    if not isinstance(kind, str) or not kind or len(kind) > 64:
        return None
    data = raw.get("data")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return None
    data_length = _length(raw, "data_length", MAX_DATA_BYTES)
    payload_length = _length(raw, "payload_length", MAX_PAYLOAD_BYTES)
    if data_length is None or payload_length is None:
        return None
    return Header(kind, data, data_length, payload_length)


def merge_data(header: Header, data_bytes: bytes) -> Mapping[str, object] | None:
    """The header's data with the separate data block merged in (``None``: malformed)."""
    if not data_bytes:
        return header.data
    try:
        extra = json.loads(data_bytes)
    except (ValueError, RecursionError):
        return None
    if not isinstance(extra, dict):
        return None
    return {**header.data, **extra}


async def read_event(reader: asyncio.StreamReader) -> RawEvent | None:
    """The next event from a peer, or ``None`` at the end of the stream or on anything
    malformed or oversized (then the connection is to be closed). Never raises for what
    the peer sent."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError:
        return None
    except asyncio.LimitOverrunError:
        return None
    if len(line) > MAX_HEADER_BYTES:
        return None
    header = parse_header(line)
    if header is None:
        return None
    try:
        data_bytes = await reader.readexactly(header.data_length) if header.data_length else b""
        payload = await reader.readexactly(header.payload_length) if header.payload_length else b""
    except asyncio.IncompleteReadError:
        return None
    data = merge_data(header, data_bytes)
    if data is None:
        return None
    return RawEvent(header.type, data, payload)


def decode_raw(event: RawEvent) -> Request | None:
    return decode(event.type, event.data, event.payload)


def decode(event_type: object, data: object, payload: object) -> Request | None:
    """The request an event carries, or ``None`` (malformed or not understood). Never
    raises."""
    if not isinstance(event_type, str):
        return None
    decoder = DECODERS.get(event_type)
    if decoder is None:
        return None
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        return None
    if payload is None:
        payload = b""
    if not isinstance(payload, bytes | bytearray):
        return None
    try:
        return decoder(data, bytes(payload))
    except Exception:  # a decoder bug must not end the connection's loop
        return None


def to_pcm16k(fmt: AudioFormat, audio: bytes) -> Samples | None:
    """``audio`` in ``fmt`` as 16 kHz mono int16 (a trailing partial frame dropped), or
    ``None`` when it cannot be converted. Never raises."""
    try:
        frame = fmt.width * fmt.channels
        usable = len(audio) - len(audio) % frame
        if fmt.width != 2 or usable <= 0:
            return np.zeros(0, dtype=np.int16) if fmt.width == 2 else None
        samples = np.frombuffer(audio[:usable], dtype="<i2").astype(np.float32)
        if fmt.channels > 1:
            samples = samples.reshape(-1, fmt.channels).mean(axis=1)
        if fmt.rate != SAMPLE_RATE:
            import soxr

            samples = soxr.resample(samples, fmt.rate, SAMPLE_RATE)
        if not all(math.isfinite(float(x)) for x in samples[:1]):
            return None
        return np.clip(np.round(samples), -32768, 32767).astype(np.int16)
    except Exception:
        return None
