"""The L5 cold pack format (``L5P1``): lossless, self-describing, readable by range.

Layout::

    0   4 bytes   magic ``L5P1``
    4   4 bytes   length H of the compressed header (unsigned, big-endian)
    8   H bytes   gzip of the canonical JSON header (sorted keys, no spaces, UTF-8)
    8+H ...       the chunks, one per object, back to back

The header (``version`` 1) lists every chunk with its codec, ``offset`` (from the start of
the data section, so an object is ``8 + H + offset`` … ``+ size`` in the file), encoded
``size``, ``decoded_size`` and the SHA-256 of the decoded bytes, plus the object's kind,
source, trace id, capture time and metadata: a pack alone is enough to rebuild the index.

Codecs are lossless: ``flac`` for 16-bit PCM audio (16 kHz mono, via soundfile/libsndfile)
and ``gzip1`` (gzip level 1) for everything else. Limits: a header at most 1 MiB before and
after compression, at most 2,048 chunks, at most 64 MiB decoded and 80 MiB encoded a pack.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import struct
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hub.archive.errors import ArchiveError

MAGIC = b"L5P1"
PREFIX = struct.Struct(">4sI")
HEADER_VERSION = 1
MAX_HEADER_BYTES = 1 << 20
MAX_CHUNKS = 2048
MAX_DECODED_BYTES = 64 << 20
MAX_PACK_BYTES = 80 << 20

CODEC_FLAC = "flac"
CODEC_GZIP1 = "gzip1"
CODECS = (CODEC_FLAC, CODEC_GZIP1)

AUDIO_RATE = 16_000
AUDIO_CHANNELS = 1
AUDIO_FORMAT = "s16le"

RangeReader = Callable[[int, int], bytes]
"""Reads ``length`` bytes at ``offset`` of one pack (a file seek or an HTTP range request)."""


@dataclass(frozen=True)
class PackInput:
    """One object going into a pack: its decoded bytes and what the header records."""

    object_id: str
    kind: str
    data: bytes
    source: str = ""
    trace_id: str = ""
    ts_ms: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Chunk:
    object_id: str
    kind: str
    codec: str
    offset: int
    size: int
    decoded_size: int
    sha256: str
    source: str = ""
    trace_id: str = ""
    ts_ms: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.object_id,
            "kind": self.kind,
            "codec": self.codec,
            "offset": self.offset,
            "size": self.size,
            "decoded_size": self.decoded_size,
            "sha256": self.sha256,
            "source": self.source,
            "trace_id": self.trace_id,
            "ts_ms": self.ts_ms,
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Chunk:
        return cls(
            object_id=str(d["id"]),
            kind=str(d["kind"]),
            codec=str(d["codec"]),
            offset=int(d["offset"]),
            size=int(d["size"]),
            decoded_size=int(d["decoded_size"]),
            sha256=str(d["sha256"]),
            source=str(d.get("source", "")),
            trace_id=str(d.get("trace_id", "")),
            ts_ms=int(d.get("ts_ms", 0)),
            meta=dict(d.get("meta") or {}),
        )


@dataclass(frozen=True)
class PackHeader:
    pack_id: str
    created_ms: int
    data_start: int
    chunks: tuple[Chunk, ...]
    version: int = HEADER_VERSION

    @property
    def data_size(self) -> int:
        return sum(c.size for c in self.chunks)

    @property
    def decoded_size(self) -> int:
        return sum(c.decoded_size for c in self.chunks)

    def chunk(self, object_id: str) -> Chunk:
        for c in self.chunks:
            if c.object_id == object_id:
                return c
        raise ArchiveError("archive.unknown", id=object_id)


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of decoding every chunk of a pack and checking its SHA-256."""

    pack_id: str
    ok: bool
    chunks: int = 0
    decoded_bytes: int = 0
    pack_bytes: int = 0
    sha256: str = ""
    problems: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.ok:
            return f"{self.pack_id}: OK ({self.chunks} chunks, {self.decoded_bytes} bytes decoded)"
        return f"{self.pack_id}: FAILED: {'; '.join(self.problems)}"


# ------------------------------------------------------------------ codecs
def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_pcm_audio(kind: str, data: bytes, meta: dict[str, Any]) -> bool:
    """FLAC applies to 16-bit 16 kHz mono PCM audio with at least one sample."""
    return (
        kind == "audio"
        and len(data) >= 2
        and len(data) % 2 == 0
        and meta.get("sample_rate", AUDIO_RATE) == AUDIO_RATE
        and meta.get("channels", AUDIO_CHANNELS) == AUDIO_CHANNELS
        and meta.get("format", AUDIO_FORMAT) == AUDIO_FORMAT
    )


def codec_for(kind: str, data: bytes, meta: dict[str, Any]) -> str:
    return CODEC_FLAC if is_pcm_audio(kind, data, meta) else CODEC_GZIP1


def encode(codec: str, data: bytes) -> bytes:
    if codec == CODEC_FLAC:
        import numpy as np
        import soundfile as sf

        samples = np.frombuffer(data, dtype="<i2")
        out = io.BytesIO()
        sf.write(out, samples, AUDIO_RATE, format="FLAC", subtype="PCM_16")
        return out.getvalue()
    if codec == CODEC_GZIP1:
        return gzip.compress(data, compresslevel=1, mtime=0)
    raise ValueError(f"unknown codec {codec!r}")


def decode(codec: str, blob: bytes) -> bytes:
    """The decoded bytes of one chunk; raises ``ValueError`` when the chunk is damaged."""
    if codec == CODEC_FLAC:
        import soundfile as sf

        try:
            samples, rate = sf.read(io.BytesIO(blob), dtype="int16", always_2d=False)
        except (RuntimeError, sf.LibsndfileError) as exc:
            raise ValueError(f"FLAC decode failed: {exc}") from exc
        if rate != AUDIO_RATE or samples.ndim != 1:
            raise ValueError(f"FLAC stream is {rate} Hz with shape {samples.shape}")
        return bytes(samples.astype("<i2", copy=False).tobytes())
    if codec == CODEC_GZIP1:
        try:
            return gzip.decompress(blob)
        except (OSError, EOFError, zlib.error) as exc:
            raise ValueError(f"gzip decode failed: {exc}") from exc
    raise ValueError(f"unknown codec {codec!r}")


# ------------------------------------------------------------------ writing
def _header_bytes(header: dict[str, Any]) -> bytes:
    raw = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    if len(raw) > MAX_HEADER_BYTES:
        raise ArchiveError(
            "archive.pack_invalid", pack=header["pack_id"], reason="header over 1 MiB"
        )
    packed = gzip.compress(raw, compresslevel=6, mtime=0)
    if len(packed) > MAX_HEADER_BYTES:
        raise ArchiveError(
            "archive.pack_invalid", pack=header["pack_id"], reason="compressed header over 1 MiB"
        )
    return packed


def build_pack(
    pack_id: str, items: Iterable[PackInput], *, created_ms: int
) -> tuple[bytes, PackHeader]:
    """Encode ``items`` into one pack: (the pack's bytes, its header)."""
    chunks: list[Chunk] = []
    blobs: list[bytes] = []
    offset = 0
    for item in items:
        codec = codec_for(item.kind, item.data, item.meta)
        blob = encode(codec, item.data)
        chunks.append(
            Chunk(
                object_id=item.object_id,
                kind=item.kind,
                codec=codec,
                offset=offset,
                size=len(blob),
                decoded_size=len(item.data),
                sha256=sha256_hex(item.data),
                source=item.source,
                trace_id=item.trace_id,
                ts_ms=item.ts_ms,
                meta=item.meta,
            )
        )
        blobs.append(blob)
        offset += len(blob)
    return assemble(pack_id, chunks, blobs, created_ms=created_ms)


def assemble(
    pack_id: str, chunks: Sequence[Chunk], blobs: Sequence[bytes], *, created_ms: int
) -> tuple[bytes, PackHeader]:
    """Lay out already-encoded chunks (re-offset in order) into a pack."""
    if len(chunks) > MAX_CHUNKS:
        raise ArchiveError(
            "archive.pack_invalid", pack=pack_id, reason=f"{len(chunks)} chunks > {MAX_CHUNKS}"
        )
    laid: list[Chunk] = []
    offset = 0
    for c, blob in zip(chunks, blobs, strict=True):
        laid.append(replace(c, offset=offset, size=len(blob)))
        offset += len(blob)
    decoded = sum(c.decoded_size for c in laid)
    if decoded > MAX_DECODED_BYTES:
        raise ArchiveError(
            "archive.pack_invalid", pack=pack_id, reason=f"{decoded} bytes decoded > 64 MiB"
        )
    header = {
        "version": HEADER_VERSION,
        "pack_id": pack_id,
        "created_ms": created_ms,
        "chunks": [c.to_json() for c in laid],
    }
    hdr = _header_bytes(header)
    out = PREFIX.pack(MAGIC, len(hdr)) + hdr + b"".join(blobs)
    if len(out) > MAX_PACK_BYTES:
        raise ArchiveError(
            "archive.pack_invalid", pack=pack_id, reason=f"{len(out)} bytes > 80 MiB"
        )
    return out, PackHeader(pack_id, created_ms, PREFIX.size + len(hdr), tuple(laid))


# ------------------------------------------------------------------ reading
def parse_header(read: RangeReader, *, name: str = "?") -> PackHeader:
    """The header of a pack, read with two range reads (prefix, then header)."""
    prefix = read(0, PREFIX.size)
    if len(prefix) != PREFIX.size:
        raise ArchiveError("archive.pack_invalid", pack=name, reason="shorter than its prefix")
    magic, hlen = PREFIX.unpack(prefix)
    if magic != MAGIC:
        raise ArchiveError("archive.pack_invalid", pack=name, reason=f"bad magic {magic!r}")
    if hlen > MAX_HEADER_BYTES:
        raise ArchiveError("archive.pack_invalid", pack=name, reason=f"header length {hlen}")
    packed = read(PREFIX.size, hlen)
    try:
        raw = gzip.decompress(packed)
        if len(raw) > MAX_HEADER_BYTES:
            raise ValueError("header over 1 MiB")
        doc = json.loads(raw)
        if doc.get("version") != HEADER_VERSION:
            raise ValueError(f"unsupported header version {doc.get('version')!r}")
        chunks = tuple(Chunk.from_json(c) for c in doc["chunks"])
        header = PackHeader(
            pack_id=str(doc["pack_id"]),
            created_ms=int(doc["created_ms"]),
            data_start=PREFIX.size + hlen,
            chunks=chunks,
        )
    except (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError) as exc:
        raise ArchiveError("archive.pack_invalid", pack=name, reason=f"header: {exc}") from exc
    expected = 0
    for c in chunks:
        if c.codec not in CODECS or c.offset != expected or c.size < 0:
            raise ArchiveError(
                "archive.pack_invalid", pack=name, reason=f"chunk {c.object_id} is misplaced"
            )
        expected += c.size
    return header


def read_chunk(read: RangeReader, header: PackHeader, object_id: str) -> bytes:
    """One object's decoded bytes, fetching only its chunk; checked against its SHA-256."""
    c = header.chunk(object_id)
    blob = read(header.data_start + c.offset, c.size)
    return decode_checked(c, blob, pack=header.pack_id)


def decode_checked(c: Chunk, blob: bytes, *, pack: str) -> bytes:
    if len(blob) != c.size:
        raise ArchiveError(
            "archive.pack_invalid", pack=pack, reason=f"chunk {c.object_id} is truncated"
        )
    try:
        data = decode(c.codec, blob)
    except ValueError as exc:
        raise ArchiveError(
            "archive.pack_invalid", pack=pack, reason=f"chunk {c.object_id}: {exc}"
        ) from exc
    if len(data) != c.decoded_size or sha256_hex(data) != c.sha256:
        raise ArchiveError(
            "archive.pack_invalid", pack=pack, reason=f"chunk {c.object_id}: SHA-256 mismatch"
        )
    return data


def bytes_reader(blob: bytes) -> RangeReader:
    return lambda offset, length: blob[offset : offset + length]


def verify(blob: bytes, *, name: str = "?", expect_sha256: str | None = None) -> VerifyReport:
    """Decode every chunk of a whole pack and check each SHA-256 (and the pack's, if given)."""
    digest = sha256_hex(blob)
    problems: list[str] = []
    if expect_sha256 is not None and digest != expect_sha256:
        problems.append(f"pack SHA-256 {digest[:12]}… is not the recorded {expect_sha256[:12]}…")
    try:
        header = parse_header(bytes_reader(blob), name=name)
    except ArchiveError as exc:
        return VerifyReport(name, False, pack_bytes=len(blob), sha256=digest, problems=(str(exc),))
    if header.data_start + header.data_size != len(blob):
        problems.append(
            f"size {len(blob)} is not header + chunks ({header.data_start + header.data_size})"
        )
    decoded = 0
    for c in header.chunks:
        start = header.data_start + c.offset
        try:
            decoded += len(decode_checked(c, blob[start : start + c.size], pack=header.pack_id))
        except ArchiveError as exc:
            problems.append(str(exc.fields.get("reason", exc)))
    return VerifyReport(
        pack_id=header.pack_id,
        ok=not problems,
        chunks=len(header.chunks),
        decoded_bytes=decoded,
        pack_bytes=len(blob),
        sha256=digest,
        problems=tuple(problems),
    )
