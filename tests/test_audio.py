"""hardware/audio.py: conversion, files, FLAC, sources and sinks, and every bad input.

Real audio throughout (espeak-ng speech from tests/speech.py, sines, noise). The only fakes
are for hardware this machine does not have: a fake ``sounddevice`` module with no devices
and an import hook that makes PortAudio missing (both named as fakes below).
"""

from __future__ import annotations

import asyncio
import importlib.abc
import io
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hardware import audio
from hardware.audio import (
    FRAME_MS,
    FRAME_SAMPLES,
    SAMPLE_RATE,
    AudioError,
    Frame,
    MicSource,
    NullSink,
    SpeakerSink,
    StdinPcmSource,
    WavSink,
    WavSource,
    clipped_fraction,
    decode_flac,
    encode_flac,
    level_dbfs,
    open_sink,
    open_source,
    read_wav,
    to_mono16k,
)
from protos.clock import now_ms
from tests.speech import OWNER, say


def sine(freq: float, seconds: float, rate: int, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def peak_hz(samples: np.ndarray, rate: int = SAMPLE_RATE) -> float:
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64)))
    return float(np.argmax(spectrum) * rate / len(samples))


def key_of(excinfo: pytest.ExceptionInfo[AudioError]) -> str:
    text = str(excinfo.value)
    assert "\n" not in text and text, "an audio error is one non-empty line"
    return excinfo.value.key


async def collect(source: audio.Source) -> list[Frame]:
    async with source:
        return [f async for f in source.frames()]


# ------------------------------------------------------------------ conversion


def test_stereo_48k_float_becomes_16k_mono_int16() -> None:
    left = sine(440, 1.0, 48_000)
    stereo = np.stack([left, np.zeros_like(left)], axis=1)
    out = to_mono16k(stereo, 48_000)
    assert out.dtype == np.int16 and out.ndim == 1
    assert abs(len(out) - SAMPLE_RATE) <= 2
    assert abs(peak_hz(out) - 440) < 2
    # channels are averaged: half the amplitude of the left channel
    assert 0.23 < np.abs(out).max() / 32768 < 0.27


@pytest.mark.parametrize("rate", [8_000, 11_025, 22_050, 44_100, 96_000])
def test_other_rates_are_resampled(rate: int) -> None:
    out = to_mono16k(sine(1000, 0.5, rate), rate)
    assert abs(len(out) - SAMPLE_RATE // 2) <= 2
    assert abs(peak_hz(out) - 1000) < 3


def test_int_types_are_scaled() -> None:
    x16 = np.array([0, 16384, -32768], dtype=np.int16)
    assert np.array_equal(to_mono16k(x16, SAMPLE_RATE), x16)
    x32 = x16.astype(np.int32) << 16
    assert np.array_equal(to_mono16k(x32, SAMPLE_RATE), x16)
    x8 = np.array([128, 192, 0], dtype=np.uint8)
    assert np.array_equal(to_mono16k(x8, SAMPLE_RATE), np.array([0, 16384, -32768], np.int16))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_are_refused(bad: float) -> None:
    x = sine(440, 0.1, SAMPLE_RATE)
    x[100] = bad
    with pytest.raises(AudioError) as e:
        to_mono16k(x, SAMPLE_RATE)
    assert key_of(e) == "audio.invalid"


def test_clipping_is_kept_and_measurable() -> None:
    x = sine(440, 1.0, SAMPLE_RATE, amp=2.0)  # twice full scale
    out = to_mono16k(x, SAMPLE_RATE)
    frac = clipped_fraction(out)
    assert 0.5 < frac < 0.8  # most of a 2x sine sits at the rails
    assert clipped_fraction(to_mono16k(sine(440, 1.0, SAMPLE_RATE, amp=0.5), SAMPLE_RATE)) == 0
    assert level_dbfs(out) > -3.0


def test_levels() -> None:
    assert level_dbfs(np.zeros(100, np.int16)) == audio.SILENCE_DBFS
    assert level_dbfs(np.zeros(0, np.int16)) == audio.SILENCE_DBFS
    assert clipped_fraction(np.zeros(0, np.int16)) == 0.0
    half = to_mono16k(sine(440, 1.0, SAMPLE_RATE, amp=0.5), SAMPLE_RATE)
    assert abs(level_dbfs(half) - (20 * np.log10(0.5 / np.sqrt(2)))) < 0.1


@pytest.mark.parametrize(
    ("data", "rate", "key"),
    [
        (np.zeros(10, np.float32), 0, "audio.rate"),
        (np.zeros(10, np.float32), 1_000_000, "audio.rate"),
        (np.zeros((10, 2, 2), np.float32), SAMPLE_RATE, "audio.channels"),
        (np.zeros((10, 64), np.float32), SAMPLE_RATE, "audio.channels"),
        (np.zeros(10, np.complex64), SAMPLE_RATE, "audio.format"),
    ],
)
def test_bad_shapes_rates_and_types(data: np.ndarray, rate: int, key: str) -> None:
    with pytest.raises(AudioError) as e:
        to_mono16k(data, rate)
    assert key_of(e) == key


# ------------------------------------------------------------------ files


@pytest.mark.parametrize(
    ("rate", "channels", "subtype"),
    [
        (44_100, 2, "PCM_16"),
        (8_000, 1, "PCM_U8"),
        (48_000, 2, "PCM_24"),
        (22_050, 1, "FLOAT"),
        (16_000, 6, "PCM_32"),
    ],
)
def test_read_wav_converts_any_rate_channels_subtype(
    tmp_path: Path, rate: int, channels: int, subtype: str
) -> None:
    speech = say("Yimi, what is on my calendar today?", OWNER)
    x = to_mono16k(speech, SAMPLE_RATE).astype(np.float32) / 32768
    if rate != SAMPLE_RATE:
        import soxr

        x = soxr.resample(x, SAMPLE_RATE, rate).astype(np.float32)
    data = np.repeat(x[:, None], channels, axis=1)
    path = tmp_path / f"in-{rate}-{channels}.wav"
    sf.write(str(path), data, rate, subtype=subtype)
    out = read_wav(path)
    assert out.dtype == np.int16 and out.ndim == 1
    assert abs(len(out) - len(speech)) <= max(4, len(speech) // 500)
    n = min(len(out), len(speech))
    corr = np.corrcoef(out[:n].astype(np.float64), speech[:n].astype(np.float64))[0, 1]
    assert corr > (0.9 if rate > 8000 else 0.6)


def test_read_wav_mixes_stereo_to_mono(tmp_path: Path) -> None:
    speech = say("stereo check", OWNER)
    path = tmp_path / "stereo.wav"
    sf.write(str(path), np.stack([speech, np.zeros_like(speech)], axis=1), SAMPLE_RATE)
    out = read_wav(path)
    assert np.abs(out.astype(np.int32) - speech.astype(np.int32) // 2).max() <= 1


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(AudioError) as e:
        read_wav(tmp_path / "nope.wav")
    assert key_of(e) == "audio.missing"


def test_empty_files(tmp_path: Path) -> None:
    zero = tmp_path / "zero.wav"
    zero.write_bytes(b"")
    with pytest.raises(AudioError) as e:
        read_wav(zero)
    assert key_of(e) == "audio.empty"
    header_only = tmp_path / "header-only.wav"
    sf.write(str(header_only), np.zeros(0, np.int16), SAMPLE_RATE)
    with pytest.raises(AudioError) as e:
        read_wav(header_only)
    assert key_of(e) == "audio.empty"


def test_truncated_wav(tmp_path: Path) -> None:
    good = tmp_path / "good.wav"
    sf.write(str(good), say("this file will be cut in half", OWNER), SAMPLE_RATE)
    data = good.read_bytes()
    for name, cut in (("half", len(data) // 2), ("header", 30), ("riff", 8)):
        path = tmp_path / f"{name}.wav"
        path.write_bytes(data[:cut])
        with pytest.raises(AudioError) as e:
            read_wav(path)
        assert key_of(e) == "audio.truncated", name
        assert "truncated" in str(e.value)


def test_truncated_flac_file(tmp_path: Path) -> None:
    data = encode_flac(say("a flac file cut short", OWNER))
    path = tmp_path / "cut.flac"
    path.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(AudioError) as e:
        read_wav(path)
    assert key_of(e) in ("audio.truncated", "audio.unreadable")


@pytest.mark.parametrize(
    "content",
    [
        b"hello, this is a text file, not audio\n" * 20,
        bytes(range(256)) * 8,
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 200,
        b"RIFF\x24\x00\x00\x00AVI LIST" + b"\x00" * 100,
    ],
)
def test_not_audio(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.wav"
    path.write_bytes(content)
    with pytest.raises(AudioError) as e:
        read_wav(path)
    assert key_of(e) == "audio.not_audio"


def test_folder_is_not_audio(tmp_path: Path) -> None:
    with pytest.raises(AudioError) as e:
        read_wav(tmp_path)
    assert key_of(e) == "audio.not_audio"


def test_nan_in_float_wav(tmp_path: Path) -> None:
    x = sine(440, 2.0, 22_050)
    x[30_000] = np.nan
    path = tmp_path / "nan.wav"
    sf.write(str(path), x, 22_050, subtype="FLOAT")
    with pytest.raises(AudioError) as e:
        read_wav(path)
    assert key_of(e) == "audio.invalid"


def test_clipped_float_wav_is_read(tmp_path: Path) -> None:
    path = tmp_path / "clipped.wav"
    sf.write(str(path), sine(300, 1.0, SAMPLE_RATE, amp=1.8), SAMPLE_RATE, subtype="FLOAT")
    out = read_wav(path)
    assert len(out) == SAMPLE_RATE and clipped_fraction(out) > 0.4


def test_length_cap(tmp_path: Path) -> None:
    path = tmp_path / "long.wav"
    sf.write(str(path), np.zeros(3 * SAMPLE_RATE, np.int16), SAMPLE_RATE)
    with pytest.raises(AudioError) as e:
        read_wav(path, max_seconds=2.0)
    assert key_of(e) == "audio.too_long"
    assert len(read_wav(path, max_seconds=3.0)) == 3 * SAMPLE_RATE


# ------------------------------------------------------------------ FLAC


def test_flac_round_trip_is_exact() -> None:
    speech = say("Yimi, remind me to call mum at six.", OWNER)
    data = encode_flac(speech)
    assert data.startswith(b"fLaC") and len(data) < speech.nbytes
    assert np.array_equal(decode_flac(data, 30.0), speech)


def test_flac_other_rate_and_stereo_converted() -> None:
    x = np.stack([sine(500, 1.0, 44_100), sine(500, 1.0, 44_100)], axis=1)
    buf = io.BytesIO()
    sf.write(buf, x, 44_100, format="FLAC", subtype="PCM_16")
    out = decode_flac(buf.getvalue(), 5.0)
    assert abs(len(out) - SAMPLE_RATE) <= 2 and abs(peak_hz(out) - 500) < 3


def flac_bytes(x: np.ndarray, rate: int) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, rate, format="FLAC", subtype="PCM_16")
    return buf.getvalue()


@pytest.mark.parametrize(
    ("data", "key"),
    [
        (b"", "audio.empty"),
        (b"RIFF....WAVEfmt ", "audio.not_audio"),
        (b"fLaC", "audio.not_audio"),
        (b"fLaC" + b"\x00" * 64, "audio.not_audio"),
    ],
)
def test_flac_bad_bytes(data: bytes, key: str) -> None:
    with pytest.raises(AudioError) as e:
        decode_flac(data, 10.0)
    assert key_of(e) == key


def test_flac_refusals() -> None:
    speech = say("three seconds or so of speech for the cap", OWNER)
    data = encode_flac(speech)
    with pytest.raises(AudioError) as e:
        decode_flac(data, 0.5)
    assert key_of(e) == "audio.too_long"
    with pytest.raises(AudioError) as e:
        decode_flac(data[: len(data) // 2], 30.0)
    assert key_of(e) in ("audio.truncated", "audio.unreadable")
    with pytest.raises(AudioError) as e:
        decode_flac("not bytes", 30.0)  # type: ignore[arg-type]
    assert key_of(e) == "audio.unreadable"
    with pytest.raises(AudioError) as e:
        decode_flac(flac_bytes(np.zeros((1600, 4), np.float32), SAMPLE_RATE), 30.0)
    assert key_of(e) == "audio.channels"
    with pytest.raises(AudioError) as e:
        decode_flac(flac_bytes(np.zeros(9600, np.float32), 96_000), 30.0)
    assert key_of(e) == "audio.rate"
    with pytest.raises(AudioError) as e:
        decode_flac(b"fLaC" + b"\x00" * (audio.FLAC_SLACK_BYTES + 200_000), 1.0)
    assert key_of(e) == "audio.too_long"
    with pytest.raises(AudioError) as e:
        encode_flac(np.zeros(0, np.int16))
    assert key_of(e) == "audio.empty"
    with pytest.raises(AudioError) as e:
        encode_flac(np.zeros(10, np.float32))  # type: ignore[arg-type]
    assert key_of(e) == "audio.format"


_FLAC = encode_flac(say("fuzz me", OWNER))
_FLAC_STEREO = flac_bytes(np.stack([sine(300, 0.4, 22_050)] * 2, axis=1), 22_050)
FUZZ_SECONDS = 1.0


def _mutate(seed: bytes, edits: list[tuple[int, int]], cut: int) -> bytes:
    b = bytearray(seed)
    for pos, val in edits:
        b[pos % len(b)] = val
    return bytes(b[: max(0, cut)] if cut < len(b) else b)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(
    st.one_of(
        st.binary(max_size=2048),
        st.binary(max_size=2048).map(lambda b: b"fLaC" + b),
        st.builds(
            _mutate,
            st.sampled_from([_FLAC, _FLAC_STEREO]),
            st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=12),
            st.integers(0, 1 << 16),
        ),
    )
)
def test_fuzz_decode_flac_raises_only_audio_error_and_caps_length(data: bytes) -> None:
    try:
        out = decode_flac(data, FUZZ_SECONDS)
    except AudioError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert out.dtype == np.int16 and out.ndim == 1
    assert len(out) <= FUZZ_SECONDS * SAMPLE_RATE + FRAME_SAMPLES


def test_fuzz_decode_flac_header_claims_huge_length() -> None:
    """A STREAMINFO that claims hours of audio is capped by what is decoded, not trusted."""
    b = bytearray(_FLAC)
    # STREAMINFO: total samples live in the low 36 bits of bytes 8+13..8+17 of the block
    b[8 + 13] = (b[8 + 13] & 0xF0) | 0x0F
    b[8 + 14 : 8 + 18] = b"\xff\xff\xff\xff"
    try:
        out = decode_flac(bytes(b), FUZZ_SECONDS)
    except AudioError:
        return
    assert len(out) <= FUZZ_SECONDS * SAMPLE_RATE + FRAME_SAMPLES


# ------------------------------------------------------------------ sources


def test_wav_source_frames_and_times(tmp_path: Path) -> None:
    speech = say("frames of thirty two milliseconds", OWNER)
    path = tmp_path / "in.wav"
    sf.write(str(path), speech, SAMPLE_RATE)
    frames = asyncio.run(collect(WavSource(path, start_ms=1_000_000)))
    assert all(f.samples.shape == (FRAME_SAMPLES,) and f.samples.dtype == np.int16 for f in frames)
    assert [f.start_ms for f in frames] == [1_000_000 + i * FRAME_MS for i in range(len(frames))]
    joined = np.concatenate([f.samples for f in frames])
    assert len(frames) == -(-len(speech) // FRAME_SAMPLES)
    assert np.array_equal(joined[: len(speech)], speech)
    assert not joined[len(speech) :].any()  # the last frame is padded with silence


def test_wav_source_converts_and_stamps_from_the_clock(tmp_path: Path) -> None:
    path = tmp_path / "stereo44.wav"
    sf.write(str(path), np.stack([sine(440, 1.0, 44_100)] * 2, axis=1), 44_100)
    before = now_ms()
    frames = asyncio.run(collect(WavSource(path)))
    assert before <= frames[0].start_ms <= now_ms()
    assert abs(len(frames) * FRAME_SAMPLES - SAMPLE_RATE) < 2 * FRAME_SAMPLES


def test_wav_source_realtime_pacing(tmp_path: Path) -> None:
    path = tmp_path / "half.wav"
    sf.write(str(path), np.zeros(SAMPLE_RATE // 2, np.int16), SAMPLE_RATE)

    async def run() -> list[float]:
        got = []
        async with WavSource(path, realtime=True) as src:
            t0 = time.monotonic()
            async for _ in src.frames():
                got.append(time.monotonic() - t0)
        return got

    times = asyncio.run(run())
    for i, t in enumerate(times):
        assert t >= (i + 1) * FRAME_MS / 1000 - 0.01  # never ahead of the wall clock
    assert times[-1] < 0.5 + 1.0  # and not much behind it (a loaded machine is slow)


def test_wav_source_realtime_starts_hearing_at_its_start_time(tmp_path: Path) -> None:
    """``--audio-start-ms`` with ``--realtime``: a start time still ahead is waited for (the
    first frame, stamped with it, comes no earlier); one already past starts at once."""
    path = tmp_path / "short.wav"
    sf.write(str(path), np.zeros(SAMPLE_RATE // 10, np.int16), SAMPLE_RATE)

    async def first_frame(start_ms: int) -> tuple[int, int]:
        async with WavSource(path, realtime=True, start_ms=start_ms) as src:
            async for frame in src.frames():
                return frame.start_ms, now_ms()
        raise AssertionError("no frame")

    start = now_ms() + 400
    stamped, heard = asyncio.run(first_frame(start))
    assert stamped == start and heard >= start  # never heard before it was said
    before = now_ms()
    stamped, heard = asyncio.run(first_frame(before - 60_000))
    assert stamped == before - 60_000 and heard - before < 5_000  # not a minute's wait


def test_wav_source_bad_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    with pytest.raises(AudioError) as e:
        asyncio.run(collect(WavSource(empty)))
    assert key_of(e) == "audio.empty"
    nan = tmp_path / "nan.wav"
    x = sine(200, 3.0, SAMPLE_RATE)
    x[-1000] = np.nan
    sf.write(str(nan), x, SAMPLE_RATE, subtype="FLOAT")
    with pytest.raises(AudioError) as e:
        asyncio.run(collect(WavSource(nan)))
    assert key_of(e) == "audio.invalid"


def test_stdin_pcm_from_a_pipe_stereo_48k() -> None:
    x = np.stack([sine(440, 1.0, 48_000), sine(440, 1.0, 48_000)], axis=1)
    pcm = (x * 32767).astype("<i2").tobytes() + b"\x01"  # a stray trailing byte
    r, w = os.pipe()

    def feed() -> None:
        with os.fdopen(w, "wb") as f:
            for i in range(0, len(pcm), 7001):  # odd-sized writes split samples
                f.write(pcm[i : i + 7001])
                f.flush()

    writer = threading.Thread(target=feed)
    writer.start()
    with os.fdopen(r, "rb") as stream:
        frames = asyncio.run(collect(StdinPcmSource(48_000, 2, stream=stream, start_ms=5)))
    writer.join()
    joined = np.concatenate([f.samples for f in frames])
    assert frames[0].start_ms == 5 and frames[1].start_ms == 5 + FRAME_MS
    assert abs(len(joined) - SAMPLE_RATE) < FRAME_SAMPLES
    assert abs(peak_hz(joined[:SAMPLE_RATE]) - 440) < 3


def test_stdin_pcm_16k_mono_is_exact() -> None:
    speech = say("raw pcm on standard input", OWNER)
    frames = asyncio.run(collect(StdinPcmSource(stream=io.BytesIO(speech.tobytes()))))
    joined = np.concatenate([f.samples for f in frames])
    assert np.array_equal(joined[: len(speech)], speech)


def test_stdin_pcm_bad_settings() -> None:
    with pytest.raises(AudioError) as e:
        StdinPcmSource(rate=100)
    assert key_of(e) == "audio.rate"
    with pytest.raises(AudioError) as e:
        StdinPcmSource(channels=0)
    assert key_of(e) == "audio.channels"


# ------------------------------------------------------------------ sinks


def test_wav_sink_appends(tmp_path: Path) -> None:
    path = tmp_path / "out.wav"
    a, b = say("first reply", OWNER), say("second reply", OWNER)

    async def run() -> None:
        async with WavSink(path) as sink:
            await sink.play(a)
        async with WavSink(path) as sink:
            await sink.play(b)

    asyncio.run(run())
    assert np.array_equal(read_wav(path), np.concatenate([a, b]))


def test_sinks_report_playing_and_refuse_bad_samples() -> None:
    async def run() -> tuple[bool, bool, float]:
        sink = NullSink(realtime=True)
        async with sink:
            t0 = time.monotonic()
            task = asyncio.create_task(sink.play(np.zeros(SAMPLE_RATE // 5, np.int16)))
            await asyncio.sleep(0)  # the task runs up to its wait for the playing time
            during = sink.playing
            await task
            return during, sink.playing, time.monotonic() - t0

    during, after, took = asyncio.run(run())
    assert during and not after and took >= 0.19
    with pytest.raises(AudioError) as e:
        asyncio.run(NullSink().play(np.zeros(10, np.float32)))  # type: ignore[arg-type]
    assert key_of(e) == "audio.format"


def test_wav_sink_refuses_a_non_wav_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not audio")
    with pytest.raises(AudioError) as e:
        asyncio.run(WavSink(path).play(np.zeros(100, np.int16)))
    assert key_of(e) == "audio.not_audio"


# ------------------------------------------------------------------ specs


def test_specs(tmp_path: Path) -> None:
    assert isinstance(open_source("mic"), MicSource)
    assert open_source("mic:2").device == 2  # type: ignore[attr-defined]
    assert open_source("mic:USB Audio").device == "USB Audio"  # type: ignore[attr-defined]
    assert isinstance(open_source("-"), StdinPcmSource)
    src = open_source(str(tmp_path / "a.wav"), realtime=True, start_ms=7)
    assert isinstance(src, WavSource) and src.realtime and src.start_ms == 7
    assert isinstance(open_sink("speaker"), SpeakerSink)
    assert isinstance(open_sink("null"), NullSink)
    sink = open_sink(str(tmp_path / "o.wav"), realtime=True)
    assert isinstance(sink, WavSink) and sink.realtime
    for bad in (lambda: open_source(""), lambda: open_sink("")):
        with pytest.raises(AudioError) as e:
            bad()
        assert key_of(e) == "audio.spec"


# ------------------------------------------------------------------ missing hardware


class FakeSoundDevice(ModuleType):
    """A fake ``sounddevice`` for a machine with PortAudio but no audio devices at all."""

    class PortAudioError(Exception):
        pass

    def __init__(self) -> None:
        super().__init__("sounddevice")

    def query_devices(self, device: Any = None, kind: str | None = None) -> Any:
        if kind is None and device is None:
            return []
        raise self.PortAudioError("Error querying device -1")


@pytest.fixture
def fake_no_devices(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(sys.modules, "sounddevice", FakeSoundDevice())
    yield


class _FakeNoPortAudio(importlib.abc.MetaPathFinder):
    """A fake import hook: ``import sounddevice`` fails as it does without libportaudio2."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name == "sounddevice":
            raise OSError("PortAudio library not found")
        return None


@pytest.fixture
def fake_no_portaudio(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delitem(sys.modules, "sounddevice", raising=False)
    finder = _FakeNoPortAudio()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def test_no_input_device(fake_no_devices: None) -> None:
    with pytest.raises(AudioError) as e:
        asyncio.run(collect(MicSource()))
    assert key_of(e) == "audio.no_input"
    assert "--audio FILE" in str(e.value)


def test_no_output_device(fake_no_devices: None) -> None:
    async def run() -> None:
        async with SpeakerSink():
            pass

    with pytest.raises(AudioError) as e:
        asyncio.run(run())
    assert key_of(e) == "audio.no_output"
    assert "--out FILE" in str(e.value)


def test_no_portaudio(fake_no_portaudio: None) -> None:
    with pytest.raises(AudioError) as e:
        asyncio.run(collect(MicSource()))
    assert key_of(e) == "audio.portaudio"
    assert "sudo apt-get install -y libportaudio2" in str(e.value)
    with pytest.raises(AudioError) as e:
        asyncio.run(SpeakerSink().play(np.zeros(10, np.int16)))
    assert key_of(e) == "audio.portaudio"


def test_sounddevice_package_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sounddevice", None)
    with pytest.raises(AudioError) as e:
        audio.sounddevice()
    assert key_of(e) == "audio.sounddevice"


def test_real_machine_without_devices_gives_the_one_line_error() -> None:
    """On this machine (PortAudio installed, no sound card) the real path gives the fix."""
    sd = audio.sounddevice()
    if len(sd.query_devices()) > 0:
        pytest.skip("this machine has audio devices")
    with pytest.raises(AudioError) as e:
        asyncio.run(collect(MicSource()))
    assert key_of(e) == "audio.no_input"
