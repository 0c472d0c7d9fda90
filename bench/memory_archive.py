"""Bench: the L5 cold archive — pack and verify throughput, FLAC vs gzip-1 on speech.

Run alone with ``.venv/bin/python bench/memory_archive.py [--quick]`` or as part of
``bench/memory.py``. Everything runs in a temporary folder, removed afterwards:

1. **speech** — espeak-ng says the same paragraph in several voices (English, British,
   German, French, Mandarin; male and female variants), sox resamples each to
   16 kHz 16-bit mono. Each clip is encoded with FLAC (soundfile) and with gzip level 1 in
   the same run: compression ratio = PCM bytes / encoded bytes, and the FLAC round trip is
   checked bit-exact. Synthetic speech is cleaner than a microphone's, so a second set of
   rows adds a ±3 LSB noise floor to the same speech.
2. **pack / verify** — ``build_pack`` over about 8 MiB of objects (the usual pack size):
   speech audio with the noise floor (FLAC chunks) and, separately, events and images
   (gzip-1 chunks).
   *pack MB/s* = decoded bytes / time to encode and lay out the pack;
   *verify MB/s* = decoded bytes / time to parse, decode every chunk and check every
   SHA-256 (what runs after each upload and before deleting hot copies).
3. **archive end to end** — ``Archive.store`` of the audio objects then ``Archive.pack``
   into a directory target: upload (write + fsync), read back whole, verify, index.
4. **upkeep under voice traffic** — one hub upkeep round (``run_round``: pack, upload, read
   back, verify, repack, expire) over the same backlog in a worker thread while four
   real-time audio streams (20 ms frames) go through the batching writer: upkeep MB/s of
   its own CPU time, its CPU share of one core while voice runs, and the voice frames'
   median add → stored latency alone and during upkeep (same run, ratio).

MB = 10^6 bytes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hub.archive import pack as fmt
from hub.archive.admission import DiskSpace
from hub.archive.archive import Archive, NewObject

PARAGRAPH = (
    "Good morning. Remind me to call my mother at eight, and buy oat milk and coriander "
    "on the way home. The meeting with Doctor Lin moved to Thursday at half past three, "
    "room four hundred and twelve. Please turn the heating down two degrees tonight."
)
PARAGRAPH_ZH = (
    "早上好。八点提醒我给妈妈打电话，回家路上买燕麦奶和香菜。"
    "林医生的会议改到周四下午三点半，四一二房间。今晚把暖气调低两度。"
)
VOICES = [
    ("en-us", PARAGRAPH),
    ("en-gb+f3", PARAGRAPH),
    ("en-us+m7", PARAGRAPH),
    ("de", PARAGRAPH),
    ("fr+f2", PARAGRAPH),
    ("cmn", PARAGRAPH_ZH),
]
MB = 1e6
PACK_BYTES = 8 << 20


def speech_clips(folder: Path, voices: list[tuple[str, str]]) -> list[tuple[str, bytes]]:
    import soundfile as sf

    clips = []
    for i, (voice, text) in enumerate(voices):
        raw, wav = folder / f"{i}-raw.wav", folder / f"{i}.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-w", str(raw), text], check=True)
        subprocess.run(
            ["sox", "-q", "-G", "-D", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(wav)],
            check=True,
        )
        samples, rate = sf.read(wav, dtype="int16")
        assert rate == 16_000 and samples.ndim == 1
        clips.append((voice, samples.astype("<i2").tobytes()))
    return clips


def with_noise_floor(pcm: bytes, seed: int) -> bytes:
    import numpy as np

    rng = np.random.default_rng(seed)
    x = np.frombuffer(pcm, dtype="<i2").astype(np.int32)
    x += rng.integers(-3, 4, size=x.shape)
    return bytes(np.clip(x, -32768, 32767).astype("<i2").tobytes())


def ratios(clips: list[tuple[str, bytes]]) -> tuple[list[tuple[str, float, int, int, int]], int]:
    rows = []
    checked = 0
    for voice, pcm in clips:
        flac = fmt.encode(fmt.CODEC_FLAC, pcm)
        assert fmt.decode(fmt.CODEC_FLAC, flac) == pcm, "FLAC round trip not bit-exact"
        checked += 1
        gz = gzip.compress(pcm, compresslevel=1)
        rows.append((voice, len(pcm) / 32_000, len(pcm), len(flac), len(gz)))
    return rows, checked


def timed(fn: Callable[[], None], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def audio_items(clips: list[tuple[str, bytes]], target: int) -> list[fmt.PackInput]:
    meta = {"sample_rate": 16000, "channels": 1, "format": "s16le"}
    items: list[fmt.PackInput] = []
    total = i = 0
    while total < target:
        voice, pcm = clips[i % len(clips)]
        items.append(fmt.PackInput(f"au-{i}", "audio", pcm, "bench", voice, i, meta))
        total += len(pcm)
        i += 1
    return items


def other_items(target: int) -> list[fmt.PackInput]:
    items: list[fmt.PackInput] = []
    total = i = 0
    while total < target:
        if i % 4 == 3:  # an already-compressed image: incompressible bytes
            data = os.urandom(120_000)
            kind = "image"
        else:
            data = json.dumps(
                {"kind": "sensor", "seq": i, "room": "hall", "readings": list(range(i, i + 400))}
            ).encode()
            kind = "event"
        items.append(fmt.PackInput(f"ob-{i}", kind, data, "bench", f"t{i}", i))
        total += len(data)
        i += 1
    return items


def pack_verify(items: list[fmt.PackInput], repeat: int) -> tuple[float, float, int, int]:
    decoded = sum(len(i.data) for i in items)
    out: dict[str, bytes] = {}

    def build() -> None:
        out["blob"] = fmt.build_pack("p-bench", items, created_ms=0)[0]

    t_pack = timed(build, repeat)
    blob = out["blob"]

    def check() -> None:
        assert fmt.verify(blob).ok

    t_verify = timed(check, repeat)
    return decoded / t_pack / MB, decoded / t_verify / MB, decoded, len(blob)


def end_to_end(folder: Path, items: list[fmt.PackInput]) -> tuple[float, float, int]:
    clock = [time.time()]
    archive = Archive(
        folder / "archive",
        disk=lambda _p: DiskSpace(1 << 50, 1 << 40),
        now=lambda: clock[0],
        pack_after_s=0.0,
    )
    try:
        objects = [NewObject(i.kind, i.data, i.source, i.trace_id, i.ts_ms, i.meta) for i in items]
        decoded = sum(len(o.data) for o in objects)
        t = time.perf_counter()
        results = archive.store(objects)
        t_store = time.perf_counter() - t
        assert all(r.stored for r in results)
        t = time.perf_counter()
        packs = archive.pack()
        t_pack = time.perf_counter() - t
        assert packs and all(p.ok for p in packs)
        return decoded / t_store / MB, decoded / t_pack / MB, len(packs)
    finally:
        archive.close()


FRAME_BYTES = 640
"""20 ms of 16 kHz 16-bit mono audio: what a device sends"""
STREAMS = 4


async def _voice(writer: Any, pcm: bytes, seconds: float, latencies: list[float]) -> int:
    """``STREAMS`` real-time audio streams through the batching writer for ``seconds``;
    each frame's latency (add → stored) into ``latencies``; returns the frames stored."""
    import asyncio

    frames = [pcm[i : i + FRAME_BYTES] for i in range(0, len(pcm) - FRAME_BYTES, FRAME_BYTES)]
    stored = 0

    async def one(stream: int) -> None:
        nonlocal stored
        loop = asyncio.get_running_loop()
        start = loop.time()
        n = 0
        pending: list[Any] = []
        while loop.time() - start < seconds:
            t = time.perf_counter()
            fut = writer.add_audio(frames[n % len(frames)], trace_id=f"s{stream}", source="bench")
            # a frame's latency: from its add to its batch being written
            fut.add_done_callback(lambda _f, t=t: latencies.append(time.perf_counter() - t))
            pending.append(fut)
            n += 1
            await asyncio.sleep(max(0.0, start + n * 0.02 - loop.time()))
        for fut in pending:
            result = await asyncio.wait_for(fut, 30)
            stored += result.stored

    await asyncio.gather(*(one(i) for i in range(STREAMS)))
    return stored


def upkeep_under_voice(folder: Path, items: list[fmt.PackInput], seconds: float) -> None:
    """Upkeep rounds (pack + upload + read back + verify, repack, expire) over a backlog of
    speech while four live audio streams are written through the batching writer."""
    import asyncio
    import statistics

    from hub.archive.maintainer import run_round
    from hub.archive.writer import ArchiveWriter

    archive = Archive(
        folder / "upkeep",
        disk=lambda _p: DiskSpace(1 << 50, 1 << 40),
        pack_after_s=0.0,
    )
    pcm = items[0].data
    try:
        backlog = [NewObject(i.kind, i.data, i.source, i.trace_id, i.ts_ms, i.meta) for i in items]
        assert all(r.stored for r in archive.store(backlog))
        decoded = sum(len(o.data) for o in backlog)

        async def measure() -> tuple[list[float], list[float], float, float]:
            base: list[float] = []
            busy: list[float] = []
            async with ArchiveWriter(archive) as writer:
                await _voice(writer, pcm, seconds, base)
                cpu: dict[str, float] = {}

                def round_() -> None:
                    c = time.thread_time()
                    run_round(archive, max_packs=None)
                    cpu["s"] = time.thread_time() - c

                t = time.perf_counter()
                upkeep = asyncio.create_task(asyncio.to_thread(round_))
                await _voice(writer, pcm, seconds, busy)
                await upkeep
                wall = time.perf_counter() - t
            return base, busy, wall, cpu["s"]

        base, busy, round_wall, cpu_s = asyncio.run(measure())
        packed = decoded
        print(
            f"\nupkeep while {STREAMS} live audio streams are written (batched 500 ms / 20 frames"
            f" / 64 KiB), {seconds:.0f} s of traffic each phase"
        )
        print(
            f"  backlog packed + uploaded + read back + verified: {packed / MB:.1f} MB in "
            f"{round_wall:.2f} s (incl. waiting for the traffic) — upkeep CPU {cpu_s:.2f} s"
        )
        print(
            f"  upkeep throughput {packed / cpu_s / MB:.1f} MB/s of its own CPU time; "
            f"CPU share while voice runs: {cpu_s / round_wall:.0%} of one core "
            f"({os.cpu_count()} cores)"
        )
        mb, mu = statistics.median(base) * 1000, statistics.median(busy) * 1000
        print(
            f"  voice frame add → stored latency, median: {mb:.0f} ms alone, {mu:.0f} ms during "
            f"upkeep (× {mu / mb:.2f}); frames stored {len(base)} + {len(busy)}"
        )
    finally:
        archive.close()


def run(quick: bool) -> None:
    print("\n== L5 cold archive ==")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} CPUs, load average {load} (1, 5, 15 min) at start")
    missing = [t for t in ("espeak-ng", "sox") if shutil.which(t) is None]
    if missing:
        print(f"skipped: {', '.join(missing)} not installed (scripts/setup installs them)")
        return
    voices = VOICES[:3] if quick else VOICES
    repeat = 1 if quick else 3
    pack_target = (2 << 20) if quick else PACK_BYTES
    with tempfile.TemporaryDirectory(prefix="yimi-bench-archive-") as tmp:
        folder = Path(tmp)
        clips = speech_clips(folder, voices)
        noisy = [(f"{v} +noise", with_noise_floor(pcm, n)) for n, (v, pcm) in enumerate(clips)]
        rows, checked = ratios(clips)
        noisy_rows, checked_noisy = ratios(noisy)

        print(f"\ncompression on espeak-ng speech, 16 kHz 16-bit mono ({len(clips)} voices)")
        print(f"{'voice':<26} {'seconds':>8} {'PCM bytes':>11} {'FLAC':>10} {'gzip-1':>10}"
              f" {'FLAC ×':>7} {'gzip-1 ×':>9}")  # fmt: skip
        for label, group in (("speech", rows), ("speech + ±3 LSB noise", noisy_rows)):
            for voice, secs, pcm, flac, gz in group:
                print(f"{voice:<26} {secs:>8.1f} {pcm:>11,} {flac:>10,} {gz:>10,}"
                      f" {pcm / flac:>7.2f} {pcm / gz:>9.2f}")  # fmt: skip
            tp = sum(r[2] for r in group)
            tf = sum(r[3] for r in group)
            tg = sum(r[4] for r in group)
            print(f"{'all: ' + label:<26} {tp / 32_000:>8.1f} {tp:>11,} {tf:>10,} {tg:>10,}"
                  f" {tp / tf:>7.2f} {tp / tg:>9.2f}")  # fmt: skip
        print(f"FLAC round trip bit-exact on {checked + checked_noisy} clips")

        audio = audio_items(noisy, pack_target)
        other = other_items(pack_target)
        print(f"\ncold pack throughput (best of {repeat}; MB = 10^6 decoded bytes)")
        print(f"{'pack of':<34} {'objects':>8} {'decoded':>10} {'packed':>10}"
              f" {'pack MB/s':>10} {'verify MB/s':>12}")  # fmt: skip
        for label, items in (
            ("speech + noise floor (FLAC chunks)", audio),
            ("events + images (gzip-1 chunks)", other),
        ):
            p, v, decoded, size = pack_verify(items, repeat)
            print(f"{label:<34} {len(items):>8} {decoded:>10,} {size:>10,} {p:>10.1f} {v:>12.1f}")
        s, p_all, n = end_to_end(folder, audio)
        print(
            f"\narchive end to end, speech audio into a directory target: store (hot, fsync) "
            f"{s:.1f} MB/s; pack + upload + read back + verify + index {p_all:.1f} MB/s "
            f"({n} pack{'s' if n != 1 else ''})"
        )
        upkeep_under_voice(folder, audio, 3.0 if quick else 6.0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    run(quick=parser.parse_args().quick)
