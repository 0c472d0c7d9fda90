"""L5 archive: batching, disk admission and reclaim, cold packs (FLAC/gzip-1), verification
before deleting hot copies, retention, range reads, WebDAV, deletion and repack, CLI.

Time is an injectable clock (no sleeps); the disk is real files with an injectable
``statvfs`` reading that models a nearly full disk; speech is real (espeak-ng + sox);
the WebDAV server is a real wsgidav on cheroot on a free loopback port.
"""

from __future__ import annotations

import asyncio
import gzip
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hub.archive import pack as fmt
from hub.archive.admission import AdmissionPolicy, DiskSpace
from hub.archive.archive import (
    DAY_S,
    FAILED,
    INLINE,
    INLINE_MAX_BYTES,
    SUPERSEDED,
    VERIFIED,
    Archive,
    NewObject,
)
from hub.archive.errors import ArchiveError
from hub.archive.targets import DirectoryTarget, WebDavTarget
from hub.archive.writer import ArchiveWriter

FRAME = 640  # 20 ms of 16 kHz 16-bit mono
GiB = 1 << 30
T0 = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class Disk:
    """A disk of fixed capacity whose use is the real hot files (plus the index and packs
    written under the archive folder): deleting files really frees "space"."""

    def __init__(self, capacity: int = 100 * GiB, inodes: int = 10_000_000) -> None:
        self.capacity = capacity
        self.inodes = inodes
        self.readings = 0

    def __call__(self, root: Path) -> DiskSpace:
        self.readings += 1
        files = [p for p in (root / "hot").rglob("*") if p.is_file()]
        used = sum(p.stat().st_size for p in files)
        return DiskSpace(self.capacity - used, self.inodes - len(files))


def frame(i: int) -> bytes:
    return bytes([i % 256, (i * 7) % 256]) * (FRAME // 2)


def make_archive(root: Path, clock: Clock, disk: Disk | None = None, **kw: Any) -> Archive:
    kw.setdefault("pack_after_s", 60.0)
    return Archive(root / "archive", disk=disk or Disk(), now=clock, **kw)


def hot_files(archive: Archive) -> list[Path]:
    return sorted(archive.iter_hot_files())


def hot_copies(archive: Archive) -> list[str]:
    """The ids of the objects that have a hot copy — a file, or a small event's bytes in
    the index — each checked to be there, with no file or inline row left over."""
    files = set(archive.iter_hot_files())
    rows = {r[0] for r in archive.db.execute("SELECT id FROM hot_inline")}
    ids: list[str] = []
    for o in archive.objects():
        if o.hot_path is None:
            continue
        if o.hot_path == INLINE:
            assert o.id in rows, f"{o.id}: no inline hot copy"
            rows.discard(o.id)
        else:
            path = archive.hot / o.hot_path
            assert path in files, f"{o.id}: no hot file"
            files.discard(path)
        ids.append(o.id)
    assert not files and not rows, f"left over: {files or rows}"
    return sorted(ids)


# ------------------------------------------------------------------ speech (espeak-ng + sox)
SENTENCES = [
    ("en-us", "Remind me to buy coriander and oat milk on the way home."),
    ("en-gb+f3", "The meeting with Doctor Lin moved to Thursday at half past three."),
    ("zh", "明天早上八点提醒我给妈妈打电话。"),
]


@pytest.fixture(scope="session")
def speech(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    """Real synthesised speech as 16 kHz 16-bit mono PCM, one clip per voice."""
    for tool in ("espeak-ng", "sox"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (scripts/setup installs it)")
    import soundfile as sf

    folder = tmp_path_factory.mktemp("speech")
    clips = []
    for i, (voice, text) in enumerate(SENTENCES):
        raw, wav = folder / f"{i}-raw.wav", folder / f"{i}.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-w", str(raw), text], check=True)
        subprocess.run(
            ["sox", "-q", "-G", "-D", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(wav)],
            check=True,
        )
        samples, rate = sf.read(wav, dtype="int16")
        assert rate == 16_000 and samples.ndim == 1 and len(samples) > 8_000
        clips.append(samples.astype("<i2").tobytes())
    return clips


# ------------------------------------------------------------------ WebDAV (wsgidav + cheroot)
class DavServer:
    def __init__(self, root: Path) -> None:
        from cheroot import wsgi
        from wsgidav.wsgidav_app import WsgiDAVApp

        self.root = root
        app = WsgiDAVApp(
            {
                "provider_mapping": {"/": str(root)},
                "http_authenticator": {
                    "accept_basic": True,
                    "accept_digest": False,
                    "default_to_digest": False,
                },
                "simple_dc": {"user_mapping": {"*": {"yimi": {"password": "s3cret"}}}},
                "verbose": 1,
                "logging": {"enable": False},
            }
        )
        self.server = wsgi.Server(("127.0.0.1", 0), app)
        self.server.prepare()
        self.port: int = self.server.bind_addr[1]
        self.thread = threading.Thread(target=self.server.serve, name="wsgidav", daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path.strip('/')}/"

    def stop(self) -> None:
        self.server.stop()
        self.thread.join(10)


@pytest.fixture
def dav(tmp_path: Path) -> Iterator[DavServer]:
    root = tmp_path / "dav-root"
    root.mkdir()
    server = DavServer(root)
    try:
        yield server
    finally:
        server.stop()
        assert not server.thread.is_alive(), "the WebDAV server thread did not stop"


# ------------------------------------------------------------------ batching
async def test_flush_after_500_ms(tmp_path: Path) -> None:
    clock = Clock()
    with make_archive(tmp_path, clock) as archive:
        async with ArchiveWriter(archive, clock=clock) as writer:
            fut = writer.add_audio(frame(1), trace_id="t1", source="glasses")
            clock.advance(0.499)
            assert await writer.poll() is None
            assert not fut.done() and writer.pending == 1
            clock.advance(0.001)
            await writer.poll()
            result = await asyncio.wait_for(fut, 10)
            assert writer.flushes[-1].reason == "age"
        assert result.stored and result.object_id
        assert archive.read(result.object_id) == frame(1)
        assert archive.info(result.object_id).meta["frames"] == 1


async def test_flush_at_20_frames(tmp_path: Path) -> None:
    clock = Clock()
    with make_archive(tmp_path, clock) as archive:
        async with ArchiveWriter(archive, clock=clock) as writer:
            futures = [
                writer.add_audio(frame(i), trace_id="t1", source="glasses") for i in range(19)
            ]
            assert await writer.poll() is None
            assert not any(f.done() for f in futures)
            futures.append(writer.add_audio(frame(19), trace_id="t1", source="glasses"))
            results = await asyncio.wait_for(asyncio.gather(*futures), 10)
            record = writer.flushes[-1]
            assert (record.reason, record.items, record.objects) == ("frames", 20, 1)
        # 20 frames of one stream became one audio object, in order
        assert len({r.object_id for r in results}) == 1
        oid = results[0].object_id
        assert oid is not None
        assert archive.read(oid) == b"".join(frame(i) for i in range(20))
        assert archive.info(oid).meta == {
            "sample_rate": 16000,
            "channels": 1,
            "format": "s16le",
            "frames": 20,
            "duration_ms": 400,
        }


async def test_flush_at_64_kib(tmp_path: Path) -> None:
    clock = Clock()
    with make_archive(tmp_path, clock) as archive:
        async with ArchiveWriter(archive, clock=clock) as writer:
            image = writer.add_image(b"\x89PNG" + b"i" * 40_000, trace_id="t2", source="cam")
            assert await writer.poll() is None
            event = writer.add_event(
                b'{"door":"open"}' + b" " * 25_536, trace_id="t2", source="hall"
            )
            await asyncio.wait_for(asyncio.gather(image, event), 10)
            record = writer.flushes[-1]
            assert (record.reason, record.items, record.objects) == ("bytes", 2, 2)
            assert record.bytes >= 64 * 1024
        assert image.result().stored and event.result().stored
        assert image.result().object_id != event.result().object_id


async def test_streams_become_separate_objects_and_close_flushes(tmp_path: Path) -> None:
    clock = Clock()
    with make_archive(tmp_path, clock) as archive:
        async with ArchiveWriter(archive, clock=clock) as writer:
            a = [writer.add_audio(frame(i), trace_id="ta", source="glasses") for i in range(3)]
            b = [writer.add_audio(frame(50 + i), trace_id="tb", source="phone") for i in range(2)]
            e = writer.add_event(b"wake word", trace_id="ta", source="glasses", meta={"n": 1})
        # leaving the block flushed what was pending
        assert writer.flushes[-1].reason == "close"
        assert all(f.result().stored for f in [*a, *b, e])
        oid_a, oid_b = a[0].result().object_id, b[0].result().object_id
        assert oid_a and oid_b and oid_a != oid_b
        assert archive.read(oid_a) == b"".join(frame(i) for i in range(3))
        assert archive.read(oid_b) == b"".join(frame(50 + i) for i in range(2))
        assert [o.id for o in archive.objects(trace_id="tb")] == [oid_b]
        with pytest.raises(ArchiveError, match="closed"):
            writer.add_audio(frame(0), trace_id="ta", source="glasses")
        with pytest.raises(ArchiveError, match="16-bit"):
            ArchiveWriter(archive).add_audio(b"\x00\x01\x02", trace_id="x", source="y")


async def test_frames_added_at_once_are_cut_at_the_limit_with_their_meta(tmp_path: Path) -> None:
    """45 frames handed over without a pause (an utterance's audio): batches of 20, 20, 5 —
    never one over the limit — each one object carrying the first frame's meta; a waiter
    learns "stored" only once its batch is written (fsynced and indexed)."""
    clock = Clock()
    with make_archive(tmp_path, clock) as archive:
        async with ArchiveWriter(archive, clock=clock) as writer:
            futures = [
                writer.add_audio(
                    frame(i), trace_id="t", source="g", meta={"utterance_id": "u-1", "offset_ms": i}
                )
                for i in range(45)
            ]
            assert writer.pending == 45 and not any(f.done() for f in futures)
            results = await asyncio.wait_for(asyncio.gather(*futures[:40]), 10)
            assert not futures[40].done()  # 5 frames: under every limit until 500 ms pass
            for r in results:
                assert r.stored and r.object_id and archive.info(r.object_id).size > 0
            clock.advance(0.5)
            await writer.poll()
            rest = await asyncio.wait_for(asyncio.gather(*futures[40:]), 10)
        assert [(f.reason, f.items) for f in writer.flushes] == [
            ("frames", 20), ("frames", 20), ("age", 5)
        ]  # fmt: skip
        ids = list(dict.fromkeys(r.object_id for r in [*results, *rest]))
        assert len(ids) == 3
        objs = archive.objects_of_utterances(["u-1"])
        assert [o.id for o in objs] == ids
        assert [o.meta["offset_ms"] for o in objs] == [0, 20, 40]
        assert b"".join(archive.read(i) for i in ids if i) == b"".join(frame(i) for i in range(45))


# ------------------------------------------------------------------ admission
def test_admission_formula() -> None:
    policy = AdmissionPolicy()
    write = 8 << 20
    assert policy.check(DiskSpace(4 * GiB + write, 500_000), write).ok
    short = policy.check(DiskSpace(4 * GiB + write - 1, 10**9), write)
    assert not short.ok and "reserve" in short.reason
    # 5 GiB free but too few inodes: still refused
    inodes = policy.check(DiskSpace(5 * GiB, 499_999), write)
    assert not inodes.ok and "inodes" in inodes.reason and "free space" not in inodes.reason
    assert policy.check(DiskSpace(5 * GiB, None), write).ok  # no inode table (btrfs)


@pytest.mark.parametrize(
    ("disk", "phrase"),
    [
        (Disk(capacity=4 * GiB + 1_000), "free space"),  # bytes under reserve + write
        (Disk(inodes=499_999), "free inodes"),
    ],
    ids=["bytes", "inodes"],
)
async def test_admission_refuses_without_pretending(
    tmp_path: Path, disk: Disk, phrase: str
) -> None:
    clock = Clock()
    with make_archive(tmp_path, clock, disk) as archive:
        async with ArchiveWriter(archive, clock=clock) as writer:
            futures = [writer.add_audio(frame(i), trace_id="t", source="g") for i in range(20)]
            results = await asyncio.wait_for(asyncio.gather(*futures), 10)
        assert all(not r.stored and r.object_id is None for r in results)
        assert phrase in results[0].reason
        assert str(results[0]).startswith("not stored: audio (12800 bytes)")
        assert writer.not_stored == 20 and writer.stored == 0
        assert writer.flushes[-1].stored == 0
        assert hot_files(archive) == [] and archive.objects() == []
        status = archive.status()
        assert status.refusals == 1 and status.last_refusal and phrase in status.last_refusal
        assert status.admission.ok is (phrase == "free space")  # a 0-byte write still fits


async def test_reclaim_frees_space_then_the_write_succeeds(tmp_path: Path) -> None:
    clock = Clock()
    disk = Disk()
    with make_archive(tmp_path, clock, disk, emergency_reclaim=False) as archive:
        old = archive.store([NewObject("audio", frame(i) * 100, "g", "old", 0) for i in range(4)])
        assert all(r.stored for r in old)
        clock.advance(120)
        [result] = archive.pack()
        assert result.ok and result.objects == 4
        clock.advance(2 * DAY_S)
        # the disk is now nearly full: 64,000 bytes of hot copies keep a new write out
        disk.capacity = 4 * GiB + 4 * 64_000 + 10_000
        assert not archive.admit(20_000).ok
        [new] = archive.store([NewObject("image", b"j" * 20_000, "cam", "new", 0)])
        assert new.stored, new.reason
        # the old hot copies went (after re-verifying their pack); their bytes are cold
        assert [p.name for p in hot_files(archive)] == [f"{new.object_id}.bin"]
        for r in old:
            assert r.object_id and archive.hot_file(r.object_id) is None
            assert archive.read(r.object_id) == frame(old.index(r)) * 100
        assert archive.status().refusals == 0


async def test_reclaim_never_deletes_unpacked_hot_copies(tmp_path: Path) -> None:
    clock = Clock()
    disk = Disk()
    with make_archive(tmp_path, clock, disk) as archive:
        [kept] = archive.store([NewObject("event", b"e" * 50_000, "hall", "t", 0)])
        clock.advance(3 * DAY_S)  # old, but never packed: nothing may be reclaimed
        disk.capacity = 4 * GiB + 50_000 + 100
        [refused] = archive.store([NewObject("event", b"f" * 1_000, "hall", "t", 0)])
        assert not refused.stored and "free space" in refused.reason
        assert kept.object_id and archive.read(kept.object_id) == b"e" * 50_000


async def test_emergency_reclaim_of_young_verified_copies(tmp_path: Path) -> None:
    clock = Clock()
    disk = Disk()
    with make_archive(tmp_path, clock, disk) as archive:
        [young] = archive.store([NewObject("event", b"y" * 30_000, "hall", "t", 0)])
        clock.advance(120)
        assert archive.pack()[0].ok
        disk.capacity = 4 * GiB + 30_000 + 5_000
        [new] = archive.store([NewObject("event", b"z" * 10_000, "hall", "t", 0)])
        assert new.stored  # retention not reached, but the cold copy verified again first
        assert young.object_id and archive.hot_file(young.object_id) is None
        assert archive.read(young.object_id) == b"y" * 30_000


# ------------------------------------------------------------------ cold packs
def test_flac_round_trip_is_bit_exact(speech: list[bytes]) -> None:
    for pcm in speech:
        blob = fmt.encode(fmt.CODEC_FLAC, pcm)
        assert blob[:4] == b"fLaC"
        assert len(blob) < len(pcm)
        assert fmt.decode(fmt.CODEC_FLAC, blob) == pcm
    # extremes of the sample range survive too
    edge = b"".join(v.to_bytes(2, "little", signed=True) for v in (-32768, 32767, 0, -1, 1))
    assert fmt.decode(fmt.CODEC_FLAC, fmt.encode(fmt.CODEC_FLAC, edge)) == edge


def _objects(speech: list[bytes]) -> list[NewObject]:
    meta = {"sample_rate": 16000, "channels": 1, "format": "s16le"}
    return [
        NewObject("audio", speech[0], "glasses", "t-a", 1, meta),
        NewObject("event", b'{"kind":"wake","word":"yimi"}', "glasses", "t-a", 2),
        NewObject("audio", speech[1], "phone", "t-b", 3, meta),
        NewObject("image", bytes(range(256)) * 64, "cam", "t-c", 4, {"mime": "image/raw"}),
        NewObject("audio", speech[2], "glasses", "t-d", 5, meta),
    ]


def test_pack_header_and_codecs(tmp_path: Path, speech: list[bytes]) -> None:
    clock = Clock()
    with make_archive(tmp_path, clock) as archive:
        stored = archive.store(_objects(speech))
        clock.advance(61)
        [result] = archive.pack()
        assert result.ok and result.objects == 5
        blob = (archive.root / "cold" / f"{result.pack_id}.l5p").read_bytes()
        assert blob[:4] == b"L5P1"
        header = fmt.parse_header(fmt.bytes_reader(blob))
        assert header.version == 1 and header.pack_id == result.pack_id
        assert [c.codec for c in header.chunks] == ["flac", "gzip1", "flac", "gzip1", "flac"]
        for c, r, o in zip(header.chunks, stored, _objects(speech), strict=True):
            assert c.object_id == r.object_id and c.decoded_size == len(o.data)
            assert c.sha256 == fmt.sha256_hex(o.data)
        gz = header.chunks[1]
        start = header.data_start + gz.offset
        assert gzip.decompress(blob[start : start + gz.size]) == _objects(speech)[1].data
        assert fmt.verify(blob).ok


class CountingTarget(DirectoryTarget):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.ranges: list[tuple[int, int]] = []
        self.whole_reads = 0

    def get(self, name: str) -> bytes:
        self.whole_reads += 1
        return super().get(name)

    def get_range(self, name: str, offset: int, length: int) -> bytes:
        self.ranges.append((offset, length))
        return super().get_range(name, offset, length)


def test_range_read_of_a_middle_chunk(tmp_path: Path, speech: list[bytes]) -> None:
    clock = Clock()
    target = CountingTarget(tmp_path / "cold")
    with make_archive(tmp_path, clock, target=target) as archive:
        stored = archive.store(_objects(speech))
        clock.advance(61)
        [result] = archive.pack()
        clock.advance(2 * DAY_S)
        assert archive.expire().hot_deleted == 5
        target.ranges.clear()
        target.whole_reads = 0
        middle = stored[2].object_id
        assert middle
        assert archive.read(middle) == speech[1]
        pack_size = (tmp_path / "cold" / f"{result.pack_id}.l5p").stat().st_size
        assert target.whole_reads == 0 and len(target.ranges) == 1
        assert target.ranges[0][1] < pack_size / 2
        # without the index: prefix, header, then only that chunk
        reads: list[tuple[int, int]] = []

        def reader(offset: int, length: int) -> bytes:
            reads.append((offset, length))
            return target.get_range(f"{result.pack_id}.l5p", offset, length)

        header = fmt.parse_header(reader)
        assert fmt.read_chunk(reader, header, middle) == speech[1]
        assert sum(n for _, n in reads) < pack_size / 2 and len(reads) == 3


@pytest.mark.parametrize("where", ["header", "flac-chunk", "gzip-chunk", "last-byte"])
def test_flipped_byte_fails_verification_and_hot_copy_is_kept(
    tmp_path: Path, speech: list[bytes], where: str
) -> None:
    clock = Clock()
    with make_archive(tmp_path, clock) as archive:
        stored = archive.store(_objects(speech))
        clock.advance(61)
        [result] = archive.pack()
        assert result.ok and archive.verify_pack(result.pack_id).ok
        path = archive.root / "cold" / f"{result.pack_id}.l5p"
        blob = bytearray(path.read_bytes())
        header = fmt.parse_header(fmt.bytes_reader(bytes(blob)))
        flac, gz = header.chunks[2], header.chunks[3]
        pos = {
            "header": 8 + 10,
            "flac-chunk": header.data_start + flac.offset + flac.size // 2,
            "gzip-chunk": header.data_start + gz.offset + gz.size // 2,
            "last-byte": len(blob) - 1,
        }[where]
        blob[pos] ^= 0x01
        path.write_bytes(bytes(blob))

        report = archive.verify_pack(result.pack_id)
        assert not report.ok and report.problems
        assert archive.packs()[0]["state"] == FAILED
        # two days later the hot copies are still there and intact
        clock.advance(3 * DAY_S)
        released = archive.expire()
        assert released.hot_deleted == 0
        for r, o in zip(stored, _objects(speech), strict=True):
            assert r.object_id in hot_copies(archive)
            assert archive.read(r.object_id) == o.data
        # the objects are packed again into a good pack
        [again] = archive.pack()
        assert again.ok and again.objects == 5 and again.pack_id != result.pack_id


def test_failure_found_at_expiry_keeps_every_hot_copy(tmp_path: Path, speech: list[bytes]) -> None:
    clock = Clock()
    with make_archive(tmp_path, clock) as archive:
        stored = archive.store(_objects(speech))
        clock.advance(61)
        [result] = archive.pack()
        path = archive.root / "cold" / f"{result.pack_id}.l5p"
        blob = bytearray(path.read_bytes())
        blob[len(blob) // 2] ^= 0x40
        path.write_bytes(bytes(blob))  # damaged after the upload check passed
        clock.advance(2 * DAY_S)
        released = archive.expire()
        assert released.packs_failed == [result.pack_id] and released.hot_deleted == 0
        assert hot_copies(archive) == sorted(str(r.object_id) for r in stored)


def test_retention_two_days_then_reverified(tmp_path: Path, speech: list[bytes]) -> None:
    clock = Clock()
    target = CountingTarget(tmp_path / "cold")
    with make_archive(tmp_path, clock, target=target) as archive:
        stored = archive.store(_objects(speech)[:2])
        clock.advance(61)
        [result] = archive.pack()
        clock.t = T0 + 2 * DAY_S - 1
        assert archive.expire().hot_deleted == 0
        assert hot_copies(archive) == sorted(str(r.object_id) for r in stored)
        reads_before = target.whole_reads
        clock.t = T0 + 2 * DAY_S
        released = archive.expire()
        assert released.hot_deleted == 2 and released.packs_verified == [result.pack_id]
        assert target.whole_reads == reads_before + 1  # fetched and verified again first
        assert archive.packs()[0]["verified_ms"] == int(clock.t * 1000)
        assert hot_copies(archive) == []
        for r, o in zip(stored, _objects(speech)[:2], strict=True):
            assert r.object_id and archive.read(r.object_id) == o.data


def test_pack_limits(tmp_path: Path) -> None:
    clock = Clock()
    with make_archive(tmp_path, clock, pack_target_bytes=100_000) as archive:
        archive.store([NewObject("event", b"x" * 30_000, "s", "t", i) for i in range(7)])
        clock.advance(59)
        assert archive.pack() == []  # younger than pack_after_s
        clock.advance(1)
        results = archive.pack()
        assert [r.objects for r in results] == [3, 3, 1]
        assert all(r.ok for r in results)


# ------------------------------------------------------------------ WebDAV
def test_webdav_upload_verify_download(
    tmp_path: Path, speech: list[bytes], dav: DavServer, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    target = WebDavTarget(dav.url("yimi/packs"), username="yimi", password="s3cret")
    with make_archive(tmp_path, clock, target=target) as archive:
        stored = archive.store(_objects(speech))
        clock.advance(61)
        [result] = archive.pack()
        assert result.ok, result.problems
        on_server = dav.root / "yimi" / "packs" / f"{result.pack_id}.l5p"
        assert on_server.stat().st_size == result.pack_bytes
        assert archive.verify_pack(result.pack_id).ok
        # downloaded whole, it verifies; by range, one object comes back bit-exact
        assert fmt.verify(target.get(f"{result.pack_id}.l5p")).ok
        clock.advance(2 * DAY_S)
        assert archive.expire().hot_deleted == 5
        for r, o in zip(stored, _objects(speech), strict=True):
            assert r.object_id and archive.read(r.object_id) == o.data
        header = fmt.parse_header(lambda off, n: target.get_range(f"{result.pack_id}.l5p", off, n))
        c = header.chunks[2]
        part = target.get_range(f"{result.pack_id}.l5p", header.data_start + c.offset, c.size)
        assert len(part) == c.size and fmt.decode(c.codec, part) == speech[1]
        assert "ignored a range request" not in caplog.text  # HTTP 206 every time
        # a flipped byte on the server fails verification
        blob = bytearray(on_server.read_bytes())
        blob[-3] ^= 0xFF
        on_server.write_bytes(bytes(blob))
        assert not archive.verify_pack(result.pack_id).ok


def test_webdav_wrong_password_is_reported(tmp_path: Path, dav: DavServer) -> None:
    target = WebDavTarget(dav.url("packs"), username="yimi", password="wrong")
    with pytest.raises(ArchiveError, match="HTTP 401"):
        target.put("x.l5p", b"data")


# ------------------------------------------------------------------ deletion
def test_delete_then_repack(tmp_path: Path, speech: list[bytes]) -> None:
    clock = Clock()
    with make_archive(tmp_path, clock) as archive:
        stored = archive.store(_objects(speech))
        ids = [r.object_id for r in stored]
        assert all(ids)
        clock.advance(61)
        [result] = archive.pack()
        # not yet packed objects are deleted outright
        [fresh] = archive.store([NewObject("event", b"fresh", "s", "t", 9)])
        assert fresh.object_id
        gone = archive.delete(fresh.object_id)
        assert gone.hot_deleted and gone.cold_pack is None
        # a packed one: hot copy now, cold chunk marked until repack
        victim = ids[2]
        assert victim
        d = archive.delete(victim)
        assert d.hot_deleted and d.cold_pack == result.pack_id
        assert archive.delete(victim).already_deleted
        with pytest.raises(ArchiveError, match="deleted"):
            archive.read(victim)
        info = archive.info(victim)
        assert info.deleted_ms and info.meta == {} and info.hot_path is None
        assert archive.status().deleted_awaiting_repack == 1
        with pytest.raises(ArchiveError, match="no archived object"):
            archive.delete("au-missing")

        [rep] = archive.repack()
        assert rep.ok and rep.old_pack == result.pack_id and rep.purged == 1 and rep.kept == 4
        assert not (archive.root / "cold" / f"{result.pack_id}.l5p").exists()
        assert rep.new_pack
        new_blob = (archive.root / "cold" / f"{rep.new_pack}.l5p").read_bytes()
        assert fmt.verify(new_blob).ok
        header = fmt.parse_header(fmt.bytes_reader(new_blob))
        assert victim not in {c.object_id for c in header.chunks}
        assert fmt.sha256_hex(speech[1]) not in {c.sha256 for c in header.chunks}
        assert archive.info(victim).purged_ms is not None
        states = {p["id"]: p["state"] for p in archive.packs()}
        assert states == {result.pack_id: SUPERSEDED, rep.new_pack: VERIFIED}
        assert archive.status().deleted_awaiting_repack == 0
        clock.advance(2 * DAY_S)
        archive.expire()
        for oid, o in zip(ids, _objects(speech), strict=True):
            if oid != victim:
                assert oid and archive.read(oid) == o.data


def test_repack_of_a_fully_deleted_pack(tmp_path: Path) -> None:
    clock = Clock()
    with make_archive(tmp_path, clock) as archive:
        [r] = archive.store([NewObject("event", b"only", "s", "t", 0)])
        clock.advance(61)
        assert archive.pack()[0].ok
        assert r.object_id
        archive.delete(r.object_id)
        [rep] = archive.repack()
        assert rep.ok and rep.new_pack is None and rep.purged == 1
        assert list((archive.root / "cold").glob("*.l5p")) == []


# ------------------------------------------------------------------ small events in the index
def test_small_events_are_kept_in_the_index_and_live_like_hot_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events up to INLINE_MAX_BYTES: no file and no fsync of their own (one transaction for
    the batch); read, packed, released after the retention and read from the pack, like
    the audio and the larger event written as files beside them."""
    clock = Clock()
    small = [b"typed %d " % i + bytes(range(256)) * i for i in range(4)]
    small.append(b"e" * INLINE_MAX_BYTES)
    large = b"L" * (INLINE_MAX_BYTES + 1)
    syncs: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        syncs.append(fd)
        real_fsync(fd)

    with make_archive(tmp_path, clock) as archive:
        monkeypatch.setattr(os, "fsync", counting_fsync)
        events = archive.store([NewObject("event", d, "mac", "t", i) for i, d in enumerate(small)])
        assert syncs == [] and hot_files(archive) == []  # no file, no fsync: the index's sync
        others = archive.store(
            [NewObject("event", large, "mac", "t", 9), NewObject("audio", frame(1), "mac", "t", 9)]
        )
        assert len(syncs) == 3  # each file, then their folder
        monkeypatch.undo()
        assert all(r.stored for r in events + others)
        for r, data in zip(events, small, strict=True):
            assert r.object_id and archive.info(r.object_id).hot_path == INLINE
            assert archive.hot_file(r.object_id) is None and archive.read(r.object_id) == data
        assert sorted(p.suffix for p in hot_files(archive)) == [".bin", ".pcm"]
        everything = sorted(str(r.object_id) for r in events + others)
        assert hot_copies(archive) == everything
        assert archive.status().hot_objects == 7

        clock.advance(61)
        [packed] = archive.pack()
        assert packed.ok and packed.objects == 7
        clock.advance(2 * DAY_S)
        assert archive.expire().hot_deleted == 7
        assert hot_copies(archive) == []  # no inline row left either
        for r, data in zip(events + others, [*small, large, frame(1)], strict=True):
            assert r.object_id and archive.read(r.object_id) == data  # from the cold pack


def test_a_deleted_small_event_is_gone_from_the_index_file(tmp_path: Path) -> None:
    clock = Clock()
    secret = b"the door code is 48151623"
    with make_archive(tmp_path, clock) as archive:
        [kept, gone] = archive.store(
            [NewObject("event", b"kept", "mac", "t", 0), NewObject("event", secret, "mac", "t", 1)]
        )
        assert gone.object_id and kept.object_id
        archive.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        files = [archive.root / "index.db", archive.root / "index.db-wal"]
        assert any(secret in f.read_bytes() for f in files if f.exists())
        d = archive.delete(gone.object_id)
        assert d.hot_deleted and not archive.delete(gone.object_id).hot_deleted
        with pytest.raises(ArchiveError, match="deleted"):
            archive.read(gone.object_id)
        assert not any(secret in f.read_bytes() for f in files if f.exists())
        assert hot_copies(archive) == [kept.object_id] and archive.read(kept.object_id) == b"kept"


def test_a_damaged_or_missing_small_event_is_never_read_nor_packed(tmp_path: Path) -> None:
    clock = Clock()
    with make_archive(tmp_path, clock) as archive:
        good, bent, lost = archive.store(
            [NewObject("event", b"%d" % i * 10, "mac", "t", i) for i in range(3)]
        )
        assert good.object_id and bent.object_id and lost.object_id
        archive.db.execute("UPDATE hot_inline SET data = ? WHERE id = ?", (b"x", bent.object_id))
        archive.db.execute("DELETE FROM hot_inline WHERE id = ?", (lost.object_id,))
        for r in (bent, lost):
            with pytest.raises(ArchiveError, match="no intact copy"):
                archive.read(str(r.object_id))
        clock.advance(61)
        [result] = archive.pack()
        assert result.ok and result.objects == 1  # only the intact one
        assert archive.info(bent.object_id).problem == "hot copy does not match its SHA-256"
        assert (archive.info(lost.object_id).problem or "").startswith("hot copy unreadable")
        assert archive.status().damaged == 2
        assert archive.read(good.object_id) == b"0" * 10


# ------------------------------------------------------------------ CLI
def test_cli_status_pack_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cli.main import main
    from hub.archive.settings import open_archive
    from provisioning.home import Home

    home = tmp_path / "home"
    Home.init(home)
    (home / "archive.yaml").write_text("reserve_bytes: 1024\nreserve_inodes: 10\n")
    with open_archive(home) as archive:
        archive.store([NewObject("event", b"e" * 1000, "s", "t", i) for i in range(3)])
    assert main(["archive", "status", "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert "hot:      3 objects" in out and "writes admitted" in out
    assert main(["archive", "pack", "--home", str(home)]) == 0
    assert "nothing to pack" in capsys.readouterr().out  # younger than pack_after_s
    assert main(["archive", "pack", "--home", str(home), "--all"]) == 0
    assert "3 objects" in capsys.readouterr().out
    assert main(["archive", "verify", "--home", str(home)]) == 0
    assert ": OK (3 chunks" in capsys.readouterr().out
    [pack_file] = (home / "archive" / "cold").glob("*.l5p")
    blob = bytearray(pack_file.read_bytes())
    blob[-1] ^= 1
    pack_file.write_bytes(bytes(blob))
    assert main(["archive", "verify", "--home", str(home)]) == 1
    assert "FAILED" in capsys.readouterr().out
    assert main(["archive", "status", "--home", str(tmp_path / "nohome")]) == 1
    assert "no home" in capsys.readouterr().err


def test_unreachable_webdav_keeps_hot_copies_without_failing_the_pack(
    tmp_path: Path, dav: DavServer
) -> None:
    clock = Clock()
    target = WebDavTarget(dav.url("packs"), username="yimi", password="s3cret")
    with make_archive(tmp_path, clock, target=target) as archive:
        stored = archive.store([NewObject("event", b"ev-%d" % i, "s", "t", i) for i in range(3)])
        clock.advance(61)
        [result] = archive.pack()
        assert result.ok
        dav.stop()  # the NAS is down when the retention comes
        clock.advance(2 * DAY_S)
        released = archive.expire()
        assert released.hot_deleted == 0 and released.packs_failed == [result.pack_id]
        assert archive.packs()[0]["state"] == VERIFIED  # unknown, not failed: nothing re-packed
        assert hot_copies(archive) == sorted(str(r.object_id) for r in stored)
        # back on line (same files, new port): re-verified, then the hot copies go
        again = DavServer(dav.root)
        try:
            archive.target = WebDavTarget(again.url("packs"), username="yimi", password="s3cret")
            assert archive.expire().hot_deleted == 3
            assert hot_copies(archive) == []
            for i, r in enumerate(stored):
                assert r.object_id and archive.read(r.object_id) == b"ev-%d" % i
        finally:
            again.stop()


def test_oversized_metadata_is_not_stored_and_others_are(tmp_path: Path) -> None:
    clock = Clock()
    with make_archive(tmp_path, clock) as archive:
        ok, big = archive.store(
            [
                NewObject("event", b"fine", "s", "t", 0),
                NewObject("event", b"x", "s", "t", 0, {"blob": "a" * 5000}),
            ]
        )
        assert ok.stored and not big.stored and "metadata over" in big.reason
        assert [o.id for o in archive.objects()] == [ok.object_id]


def test_settings_file(tmp_path: Path) -> None:
    from hub.archive.settings import ArchiveSettings, open_archive

    (tmp_path / "archive.yaml").write_text(
        "hot_retention_days: 3\nreserve_inodes: 1000\nemergency_reclaim: false\n"
        f"cold_target: {tmp_path / 'nas'}\n"
    )
    s = ArchiveSettings.load(tmp_path)
    assert (s.hot_retention_days, s.reserve_inodes, s.emergency_reclaim) == (3.0, 1000, False)
    with open_archive(tmp_path) as archive:
        assert archive.retention_s == 3 * DAY_S and archive.policy.reserve_inodes == 1000
        assert archive.target.describe() == str(tmp_path / "nas")
    (tmp_path / "archive.yaml").write_text("reserve_byte: 5\n")
    with pytest.raises(ArchiveError, match="unknown keys reserve_byte"):
        ArchiveSettings.load(tmp_path)
    (tmp_path / "archive.yaml").write_text("emergency_reclaim: maybe\n")
    with pytest.raises(ArchiveError, match="not true or false"):
        ArchiveSettings.load(tmp_path)


async def test_maintainer_round(tmp_path: Path) -> None:
    from hub.archive.maintainer import ArchiveMaintainer

    clock = Clock()
    with make_archive(tmp_path, clock) as archive:
        [kept, gone] = archive.store([NewObject("event", b"k" * 100, "s", "t", i) for i in (0, 1)])
        clock.advance(61)
        async with ArchiveMaintainer(archive, interval_s=3600) as upkeep:
            first = await upkeep.run_once()
            assert [p.objects for p in first.packed] == [2] and first.released.hot_deleted == 0
            assert gone.object_id
            archive.delete(gone.object_id)
            clock.advance(2 * DAY_S)
            second = await upkeep.run_once()
        assert [(r.kept, r.purged) for r in second.repacked] == [(1, 1)]
        assert second.released.hot_deleted == 1
        assert kept.object_id and archive.read(kept.object_id) == b"k" * 100
