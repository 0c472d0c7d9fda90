"""The L5 archive: hot copies on disk with a SQLite index, cold packs on a target.

Layout of ``ROOT`` (``HOME/archive``)::

    index.db                 objects, packs, refusals (apsw, WAL); small events' hot copies
    hot/YYYY/MM/DD/<id>.pcm  audio: raw 16-bit 16 kHz mono PCM
    hot/YYYY/MM/DD/<id>.bin  images and larger events: the bytes as given

An event of at most :data:`INLINE_MAX_BYTES` (a typed utterance's original, a wake event)
is kept hot in the index itself (table ``hot_inline``; its ``hot_path`` is :data:`INLINE`),
written in the batch's one transaction: a file of its own cost a create, a write, an fsync
and a rename per object — 1.5 ms of CPU per typed turn, measured here — where a row costs
a few microseconds and shares the batch's one sync. It is read, packed, released and
deleted like a hot file; a deleted one's bytes are overwritten in the index
(``secure_delete``).

Life of an object: written hot (after disk admission) → packed into a cold pack once older
than ``pack_after_s``; the pack is read back from the target, its SHA-256 checked and every
chunk decoded and checked before the index records where the object lives → the hot copy
is deleted after ``retention_s`` (2 days) only after the pack is fetched and verified again.
A pack that fails verification keeps every hot copy it holds (its objects are packed again).

``delete`` removes the hot copy at once and marks the cold chunk deleted; ``repack``
rewrites the packs that hold deleted chunks without them and removes the old packs.

Methods block (file and network I/O); async callers run them in a thread. One lock guards
the index and the hot files; network transfers run outside it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from hub.archive import pack as fmt
from hub.archive.admission import AdmissionPolicy, Decision, DiskReader, disk_space
from hub.archive.errors import ArchiveError, TargetUnavailable
from hub.archive.pacing import UploadPacer
from hub.archive.targets import ColdTarget, DirectoryTarget
from storage.private import open_private, private_dir
from storage.sqlite import open_db, transaction

log = logging.getLogger(__name__)

KINDS = ("audio", "image", "event")
DAY_S = 86_400.0
DEFAULT_RETENTION_S = 2 * DAY_S
DEFAULT_PACK_AFTER_S = 600.0
DEFAULT_PACK_TARGET_BYTES = 8 << 20
PACK_SUFFIX = ".l5p"
MAX_OBJECT_BYTES = fmt.MAX_DECODED_BYTES
MAX_META_BYTES = 4096
HEADER_BUDGET = 768 << 10
"""Estimated JSON header bytes a pack may take (the hard limit is 1 MiB)."""
CHUNK_ENTRY_BYTES = 320
INLINE_MAX_BYTES = 4096
"""bytes: an event at most this large is kept hot in the index, not in a file of its own"""
INLINE = ":inline"
"""the ``hot_path`` of a hot copy kept in the index (never a file's path: those are
``YYYY/MM/DD/<id>.<ext>``)"""

SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    id          TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    source      TEXT NOT NULL,
    trace_id    TEXT NOT NULL,
    ts_ms       INTEGER NOT NULL,
    stored_ms   INTEGER NOT NULL,
    size        INTEGER NOT NULL,
    sha256      TEXT NOT NULL,
    meta        TEXT NOT NULL DEFAULT '{}',
    hot_path    TEXT,
    pack_id     TEXT,
    codec       TEXT,
    chunk_offset INTEGER,
    chunk_size  INTEGER,
    deleted_ms  INTEGER,
    purged_ms   INTEGER,
    problem     TEXT
);
CREATE INDEX IF NOT EXISTS objects_pack ON objects(pack_id);
CREATE INDEX IF NOT EXISTS objects_trace ON objects(trace_id);
CREATE INDEX IF NOT EXISTS objects_unpacked ON objects(stored_ms) WHERE pack_id IS NULL;
CREATE TABLE IF NOT EXISTS packs (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    target       TEXT NOT NULL,
    created_ms   INTEGER NOT NULL,
    size         INTEGER NOT NULL,
    decoded_size INTEGER NOT NULL,
    objects      INTEGER NOT NULL,
    sha256       TEXT NOT NULL,
    state        TEXT NOT NULL,
    verified_ms  INTEGER,
    problem      TEXT
);
CREATE TABLE IF NOT EXISTS hot_inline (
    id   TEXT PRIMARY KEY,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS refusals (
    n        INTEGER PRIMARY KEY AUTOINCREMENT,
    ts_ms    INTEGER NOT NULL,
    kind     TEXT NOT NULL,
    source   TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    size     INTEGER NOT NULL,
    reason   TEXT NOT NULL
);
"""

# pack states
VERIFIED, FAILED, SUPERSEDED = "verified", "failed", "superseded"


# ------------------------------------------------------------------ values
@dataclass(frozen=True)
class NewObject:
    """One object to write hot: audio (a run of PCM frames), an image or an event."""

    kind: str
    data: bytes
    source: str
    trace_id: str
    ts_ms: int
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WriteResult:
    """Whether one object was stored. ``stored`` is False with a ``reason`` when it was not."""

    stored: bool
    kind: str
    size: int
    object_id: str | None = None
    sha256: str = ""
    reason: str = ""

    def __str__(self) -> str:
        if self.stored:
            return f"stored {self.kind} {self.object_id} ({self.size} bytes)"
        return str(
            ArchiveError("archive.not_stored", what=self.kind, size=self.size, reason=self.reason)
        )


@dataclass(frozen=True)
class ObjectInfo:
    id: str
    kind: str
    source: str
    trace_id: str
    ts_ms: int
    stored_ms: int
    size: int
    sha256: str
    meta: dict[str, Any]
    hot_path: str | None
    pack_id: str | None
    deleted_ms: int | None
    purged_ms: int | None
    problem: str | None


@dataclass(frozen=True)
class PackResult:
    pack_id: str
    ok: bool
    objects: int
    decoded_bytes: int
    pack_bytes: int
    problems: tuple[str, ...] = ()


@dataclass
class ReleaseReport:
    """Hot copies deleted (retention or reclaim) and the packs checked to allow it."""

    hot_deleted: int = 0
    bytes_freed: int = 0
    packs_verified: list[str] = field(default_factory=list)
    packs_failed: list[str] = field(default_factory=list)

    def add(self, other: ReleaseReport) -> None:
        self.hot_deleted += other.hot_deleted
        self.bytes_freed += other.bytes_freed
        self.packs_verified += other.packs_verified
        self.packs_failed += other.packs_failed


@dataclass(frozen=True)
class DeleteResult:
    object_id: str
    hot_deleted: bool
    cold_pack: str | None
    """The pack still holding the deleted chunk until ``repack`` (None: no cold bytes left)."""
    already_deleted: bool = False


@dataclass(frozen=True)
class RepackResult:
    old_pack: str
    new_pack: str | None
    kept: int
    purged: int
    ok: bool
    problem: str = ""


@dataclass(frozen=True)
class Status:
    hot_objects: int
    hot_bytes: int
    unpacked_objects: int
    unpacked_bytes: int
    packs: dict[str, int]
    cold_bytes: int
    deleted_awaiting_repack: int
    damaged: int
    refusals: int
    last_refusal: str | None
    admission: Decision
    target: str
    last_pack_ms: int | None = None
    """when the newest verified pack was made"""
    next_expiry_ms: int | None = None
    """when the next hot copy that is safely packed may be deleted (retention)"""
    headroom_bytes: int = 0
    """free bytes above the admission reserve (negative: writes are refused)"""


def _pack_name(pack_id: str) -> str:
    return pack_id + PACK_SUFFIX


def _new_id(kind: str) -> str:
    return f"{kind[:2]}-{secrets.token_hex(10)}"


# ------------------------------------------------------------------ the archive
class Archive:
    def __init__(
        self,
        root: Path,
        *,
        target: ColdTarget | None = None,
        policy: AdmissionPolicy | None = None,
        disk: DiskReader = disk_space,
        now: Callable[[], float] = time.time,
        retention_s: float = DEFAULT_RETENTION_S,
        pack_after_s: float = DEFAULT_PACK_AFTER_S,
        pack_target_bytes: int = DEFAULT_PACK_TARGET_BYTES,
        emergency_reclaim: bool = True,
        pacer: UploadPacer | None = None,
    ) -> None:
        self.root = root
        self.hot = root / "hot"
        private_dir(self.hot)
        self.target: ColdTarget = target or DirectoryTarget(root / "cold")
        self.policy = policy or AdmissionPolicy()
        self._disk = disk
        self._now = now
        self.retention_s = retention_s
        self.pack_after_s = pack_after_s
        self.pack_target_bytes = min(pack_target_bytes, fmt.MAX_DECODED_BYTES)
        self.emergency_reclaim = emergency_reclaim
        self.pacer = pacer
        """paces cold-pack uploads (``upload_bytes_per_s``); ``None``: as fast as they go"""
        self._lock = threading.RLock()
        self.db: apsw.Connection = open_db(root / "index.db", SCHEMA)
        # a deleted small event's bytes (:data:`INLINE`) are overwritten in the file, as a
        # deleted hot file is gone from the folder
        self.db.execute("PRAGMA secure_delete=ON").fetchall()

    def close(self) -> None:
        with self._lock:
            self.db.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rows(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        with self._lock:
            return [tuple(r) for r in self.db.execute(sql, args)]

    def _scalar(self, sql: str, *args: Any) -> Any:
        with self._lock:
            row = self.db.execute(sql, args).fetchone()
        return None if row is None else row[0]

    def now_ms(self) -> int:
        return int(self._now() * 1000)

    # -------------------------------------------------------------- admission
    def admit(self, write_bytes: int) -> Decision:
        return self.policy.check(self._disk(self.root), write_bytes)

    def reclaim(self, write_bytes: int) -> ReleaseReport:
        """Free hot space for a write: expired hot copies first (after re-verifying their
        packs); then, if still short and allowed, younger verified hot copies, oldest first."""
        report = self.expire()
        if self.admit(write_bytes).ok or not self.emergency_reclaim:
            return report
        for pack_id in self._packs_with_hot_copies(max_stored_ms=None):
            log.warning(
                "disk under reserve: deleting hot copies of pack %s before their retention",
                pack_id,
            )
            report.add(self._release_pack(pack_id, max_stored_ms=None))
            if self.admit(write_bytes).ok:
                break
        return report

    # -------------------------------------------------------------- writing
    def store(self, objects: Sequence[NewObject]) -> list[WriteResult]:
        """Write ``objects`` hot as one batch, after disk admission (reclaim and re-check
        once if refused). Every result says whether that object was stored."""
        results: list[WriteResult | None] = [None] * len(objects)
        admissible: list[int] = []
        for i, o in enumerate(objects):
            if o.kind not in KINDS:
                raise ValueError(f"unknown archive kind {o.kind!r}")
            problem = _object_problem(o)
            if problem:
                results[i] = self._refuse([o], problem, ReleaseReport())[0]
            else:
                admissible.append(i)
        batch = [objects[i] for i in admissible]
        if batch:
            total = sum(len(o.data) for o in batch)
            freed = ReleaseReport()
            decision = self.admit(total)
            if not decision.ok:
                log.info("admission refused %d bytes (%s): reclaiming", total, decision.reason)
                freed = self.reclaim(total)
                decision = self.admit(total)
            written = (
                self._write(batch) if decision.ok else self._refuse(batch, decision.reason, freed)
            )
            for i, r in zip(admissible, written, strict=True):
                results[i] = r
        return [r for r in results if r is not None]

    def _refuse(
        self, objects: Sequence[NewObject], reason: str, freed: ReleaseReport
    ) -> list[WriteResult]:
        now = self.now_ms()
        with self._lock, transaction(self.db):
            for o in objects:
                self.db.execute(
                    "INSERT INTO refusals (ts_ms, kind, source, trace_id, size, reason)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (now, o.kind, o.source, o.trace_id, len(o.data), reason),
                )
        log.warning(
            "NOT STORED: %d object(s), %d bytes: %s (reclaim freed %d bytes)",
            len(objects),
            sum(len(o.data) for o in objects),
            reason,
            freed.bytes_freed,
        )
        return [WriteResult(False, o.kind, len(o.data), reason=reason) for o in objects]

    def _write(self, objects: Sequence[NewObject]) -> list[WriteResult]:
        """Write a batch hot: each object's file synced, then the folder; then every row
        (and the small events' bytes, :data:`INLINE`) in one synced transaction."""
        now = self.now_ms()
        day = time.strftime("%Y/%m/%d", time.gmtime(now / 1000))
        folder = self.hot / day
        rows: list[tuple[Any, ...]] = []
        inline: list[tuple[str, bytes]] = []
        written: list[Path] = []
        try:
            for o in objects:
                oid = _new_id(o.kind)
                if _inline(o):
                    rel = INLINE
                    inline.append((oid, o.data))
                else:
                    if not written:
                        private_dir(folder)
                    rel = f"{day}/{oid}.{'pcm' if o.kind == 'audio' else 'bin'}"
                    path = self.hot / rel
                    tmp = path.with_name(f".{path.name}.tmp")
                    with open_private(tmp, "wb") as f:
                        f.write(o.data)
                        f.flush()
                        os.fsync(f.fileno())
                    os.replace(tmp, path)
                    written.append(path)
                digest = fmt.sha256_hex(o.data)
                rows.append(
                    (oid, o.kind, o.source, o.trace_id, o.ts_ms, now, len(o.data), digest,
                     json.dumps(o.meta, sort_keys=True), rel)
                )  # fmt: skip
            if written:
                fd = os.open(folder, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            with self._lock, transaction(self.db):
                self.db.executemany(
                    "INSERT INTO objects (id, kind, source, trace_id, ts_ms, stored_ms, size,"
                    " sha256, meta, hot_path) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
                if inline:
                    self.db.executemany("INSERT INTO hot_inline (id, data) VALUES (?, ?)", inline)
        except (OSError, apsw.Error) as exc:
            for p in written:
                with contextlib.suppress(OSError):
                    p.unlink()
            reason = f"write failed: {exc}"
            log.error("NOT STORED: %d object(s): %s", len(objects), reason)
            return [WriteResult(False, o.kind, len(o.data), reason=reason) for o in objects]
        return [
            WriteResult(True, o.kind, len(o.data), object_id=r[0], sha256=r[7])
            for o, r in zip(objects, rows, strict=True)
        ]

    # -------------------------------------------------------------- reading
    def info(self, object_id: str) -> ObjectInfo:
        with self._lock:
            row = self.db.execute(
                "SELECT id, kind, source, trace_id, ts_ms, stored_ms, size, sha256, meta,"
                " hot_path, pack_id, deleted_ms, purged_ms, problem FROM objects WHERE id = ?",
                (object_id,),
            ).fetchone()
        if row is None:
            raise ArchiveError("archive.unknown", id=object_id)
        return _info(row)

    def objects(
        self, *, trace_id: str | None = None, source: str | None = None
    ) -> list[ObjectInfo]:
        """Objects (deleted ones included, as tombstones) by trace id and/or source."""
        sql = (
            "SELECT id, kind, source, trace_id, ts_ms, stored_ms, size, sha256, meta,"
            " hot_path, pack_id, deleted_ms, purged_ms, problem FROM objects WHERE 1=1"
        )
        args: list[Any] = []
        if trace_id is not None:
            sql += " AND trace_id = ?"
            args.append(trace_id)
        if source is not None:
            sql += " AND source = ?"
            args.append(source)
        with self._lock:
            rows = self.db.execute(sql + " ORDER BY ts_ms, rowid", args).fetchall()
        return [_info(r) for r in rows]

    def objects_of_utterances(self, utterance_ids: Sequence[str]) -> list[ObjectInfo]:
        """The live objects (audio, typed originals, images) archived for these utterances
        (``meta.utterance_id``)."""
        out: list[ObjectInfo] = []
        with self._lock:
            for uid in dict.fromkeys(utterance_ids):
                out += [
                    _info(r)
                    for r in self.db.execute(
                        "SELECT id, kind, source, trace_id, ts_ms, stored_ms, size, sha256, meta,"
                        " hot_path, pack_id, deleted_ms, purged_ms, problem FROM objects"
                        " WHERE deleted_ms IS NULL AND json_extract(meta, '$.utterance_id') = ?"
                        " ORDER BY ts_ms, rowid",
                        (uid,),
                    )
                ]
        return out

    def hot_file(self, object_id: str) -> Path | None:
        """The file of an object's hot copy; ``None`` when it has none (released, deleted,
        or kept in the index: :data:`INLINE`; :meth:`read` reads any copy)."""
        info = self.info(object_id)
        return self.hot / info.hot_path if info.hot_path and info.hot_path != INLINE else None

    def _hot_bytes(self, object_id: str, hot_path: str, inline: bytes | None) -> bytes:
        """The bytes of a hot copy: ``inline`` (read with its row) for :data:`INLINE`, else
        its file's. Raises :class:`OSError` when there are none."""
        if hot_path != INLINE:
            return (self.hot / hot_path).read_bytes()
        if inline is None:
            raise FileNotFoundError(f"no inline hot copy of {object_id}")
        return bytes(inline)

    def _drop_hot(self, object_id: str, hot_path: str) -> bool:
        """Delete a hot copy (an inline one in the caller's transaction); ``False`` if it
        was already gone."""
        if hot_path == INLINE:
            gone = self.db.execute(
                "DELETE FROM hot_inline WHERE id = ? RETURNING id", (object_id,)
            ).fetchall()
            return bool(gone)
        try:
            (self.hot / hot_path).unlink()
        except FileNotFoundError:
            return False
        return True

    def read(self, object_id: str) -> bytes:
        """An object's bytes: the hot copy if there is one, else only its chunk of the cold
        pack (a range read), decoded and checked against the recorded SHA-256."""
        with self._lock:
            row = self.db.execute(
                "SELECT o.kind, o.size, o.sha256, o.hot_path, o.pack_id, o.codec,"
                " o.chunk_offset, o.chunk_size, o.deleted_ms, p.state, h.data FROM objects o"
                " LEFT JOIN packs p ON p.id = o.pack_id LEFT JOIN hot_inline h ON h.id = o.id"
                " WHERE o.id = ?",
                (object_id,),
            ).fetchone()
        if row is None:
            raise ArchiveError("archive.unknown", id=object_id)
        kind, size, sha, hot_path, pack_id, codec, offset, csize, deleted, state, inline = row
        if deleted is not None:
            raise ArchiveError("archive.deleted", id=object_id)
        if hot_path:
            try:
                data = self._hot_bytes(object_id, hot_path, inline)
            except OSError as exc:
                data = b""
                log.error("hot copy of %s unreadable: %s", object_id, exc)
            if fmt.sha256_hex(data) == sha:
                return data
            log.error("hot copy of %s does not match its SHA-256", object_id)
        if pack_id is None or state != VERIFIED:
            raise ArchiveError("archive.unreadable", id=object_id, reason="no intact copy")
        chunk = fmt.Chunk(object_id, kind, codec, 0, csize, size, sha)
        blob = self.target.get_range(_pack_name(pack_id), offset, csize)
        return fmt.decode_checked(chunk, blob, pack=pack_id)

    # -------------------------------------------------------------- cold packs
    def pack(self, *, max_packs: int | None = None) -> list[PackResult]:
        """Pack hot objects older than ``pack_after_s`` into verified cold packs."""
        results: list[PackResult] = []
        while max_packs is None or len(results) < max_packs:
            batch = self._pack_candidates()
            if not batch:
                break
            result = self._pack_one(batch)
            results.append(result)
            if not result.ok:
                break
        return results

    def _pack_candidates(self) -> list[tuple[Any, ...]]:
        cutoff = self.now_ms() - int(self.pack_after_s * 1000)
        chosen: list[tuple[Any, ...]] = []
        total = 0
        with self._lock:
            cursor = self.db.execute(
                "SELECT o.id, o.kind, o.source, o.trace_id, o.ts_ms, o.size, o.sha256, o.meta,"
                " o.hot_path, h.data FROM objects o LEFT JOIN hot_inline h ON h.id = o.id"
                " WHERE o.pack_id IS NULL AND o.deleted_ms IS NULL AND o.hot_path IS NOT NULL"
                " AND o.problem IS NULL AND o.stored_ms <= ? ORDER BY o.stored_ms, o.rowid",
                (cutoff,),
            )
            header = 0
            for row in cursor:
                size = row[5]
                entry = CHUNK_ENTRY_BYTES + len(row[2]) + len(row[3]) + len(row[7])
                if chosen and (
                    total + size > self.pack_target_bytes
                    or len(chosen) >= fmt.MAX_CHUNKS
                    or header + entry > HEADER_BUDGET
                ):
                    break
                chosen.append(row)
                total += size
                header += entry
        return chosen

    def _pack_one(self, batch: Sequence[tuple[Any, ...]]) -> PackResult:
        items: list[fmt.PackInput] = []
        for oid, kind, source, trace_id, ts_ms, _size, sha, meta, hot_path, inline in batch:
            try:
                data = self._hot_bytes(oid, hot_path, inline)
            except OSError as exc:
                self._mark_damaged(oid, f"hot copy unreadable: {exc}")
                continue
            if fmt.sha256_hex(data) != sha:
                self._mark_damaged(oid, "hot copy does not match its SHA-256")
                continue
            items.append(fmt.PackInput(oid, kind, data, source, trace_id, ts_ms, json.loads(meta)))
        pack_id = f"p-{time.strftime('%Y%m%d', time.gmtime(self._now()))}-{secrets.token_hex(6)}"
        if not items:
            return PackResult(pack_id, False, 0, 0, 0, ("no readable hot copies",))
        blob, header = fmt.build_pack(pack_id, items, created_ms=self.now_ms())
        return self._upload_verified(blob, header)

    def _upload_verified(self, blob: bytes, header: fmt.PackHeader) -> PackResult:
        """Upload, read back whole, check the pack's SHA-256 and every chunk; only then
        record where each object lives."""
        pack_id, name = header.pack_id, _pack_name(header.pack_id)
        digest = fmt.sha256_hex(blob)
        problems: tuple[str, ...]
        if self.pacer is not None:  # stopping: raises before anything is recorded
            waited = self.pacer.wait(len(blob))
            if waited:
                log.debug("cold pack %s waited %.1f s for its upload pace", pack_id, waited)
        try:
            self.target.put(name, blob)
            report = fmt.verify(self.target.get(name), name=name, expect_sha256=digest)
            problems = report.problems
        except ArchiveError as exc:
            problems = (str(exc),)
        ok = not problems
        now = self.now_ms()
        with self._lock, transaction(self.db):
            self.db.execute(
                "INSERT INTO packs (id, name, target, created_ms, size, decoded_size, objects,"
                " sha256, state, verified_ms, problem) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (pack_id, name, self.target.describe(), header.created_ms, len(blob),
                 header.decoded_size, len(header.chunks), digest, VERIFIED if ok else FAILED,
                 now if ok else None, "; ".join(problems) or None),
            )  # fmt: skip
            if ok:
                self.db.executemany(
                    "UPDATE objects SET pack_id = ?, codec = ?, chunk_offset = ?,"
                    " chunk_size = ?, purged_ms = NULL WHERE id = ?",
                    [
                        (pack_id, c.codec, header.data_start + c.offset, c.size, c.object_id)
                        for c in header.chunks
                    ],
                )
        if ok:
            log.info(
                "cold pack %s verified: %d objects, %d → %d bytes",
                pack_id, len(header.chunks), header.decoded_size, len(blob),
            )  # fmt: skip
        else:
            log.error("cold pack %s failed verification after upload: %s", pack_id, problems)
            with contextlib.suppress(ArchiveError):
                self.target.delete(name)
        return PackResult(pack_id, ok, len(header.chunks), header.decoded_size, len(blob), problems)

    def _mark_damaged(self, object_id: str, problem: str) -> None:
        with self._lock, transaction(self.db):
            if self._scalar("SELECT deleted_ms FROM objects WHERE id = ?", object_id) is not None:
                return  # deleted while being packed: nothing is damaged
            self.db.execute("UPDATE objects SET problem = ? WHERE id = ?", (problem, object_id))
        log.error("archived object %s: %s", object_id, problem)

    def packs(self) -> list[dict[str, Any]]:
        with self._lock:
            cur = self.db.execute(
                "SELECT id, name, target, created_ms, size, decoded_size, objects, sha256,"
                " state, verified_ms, problem FROM packs ORDER BY created_ms, id"
            )
            cols = [d[0] for d in cur.getdescription()]
            return [dict(zip(cols, r, strict=True)) for r in cur]

    def _pack_row(self, pack_id: str) -> tuple[str, str, str]:
        with self._lock:
            row = self.db.execute(
                "SELECT name, sha256, state FROM packs WHERE id = ?", (pack_id,)
            ).fetchone()
        if row is None:
            raise ArchiveError("archive.pack_unknown", pack=pack_id)
        return row[0], row[1], row[2]

    def verify_pack(self, pack_id: str) -> fmt.VerifyReport:
        """Fetch a pack from the target and verify it whole; record the outcome. A failure
        marks the pack failed: its hot copies are kept and its objects packed again."""
        name, sha, _state = self._pack_row(pack_id)
        try:
            report = fmt.verify(self.target.get(name), name=pack_id, expect_sha256=sha)
        except TargetUnavailable as exc:
            log.warning("cold pack %s not verified: %s; its hot copies are kept", pack_id, exc)
            return fmt.VerifyReport(pack_id, False, problems=(str(exc),))
        except ArchiveError as exc:
            report = fmt.VerifyReport(pack_id, False, problems=(str(exc),))
        if report.ok:
            with self._lock, transaction(self.db):
                self.db.execute(
                    "UPDATE packs SET verified_ms = ?, problem = NULL WHERE id = ?",
                    (self.now_ms(), pack_id),
                )
        else:
            self._pack_failed(pack_id, "; ".join(report.problems))
        return report

    def verify_all(self) -> list[fmt.VerifyReport]:
        with self._lock:
            ids = [
                r[0]
                for r in self.db.execute(
                    "SELECT id FROM packs WHERE state = ? ORDER BY created_ms, id", (VERIFIED,)
                )
            ]
        return [self.verify_pack(p) for p in ids]

    def _pack_failed(self, pack_id: str, problem: str) -> None:
        with self._lock, transaction(self.db):
            self.db.execute(
                "UPDATE packs SET state = ?, problem = ? WHERE id = ?", (FAILED, problem, pack_id)
            )
            lost = self._scalar(
                "SELECT count(*) FROM objects WHERE pack_id = ? AND hot_path IS NULL"
                " AND deleted_ms IS NULL",
                pack_id,
            )
            # objects with a hot copy go back to the queue: they will be packed again
            self.db.execute(
                "UPDATE objects SET pack_id = NULL, codec = NULL, chunk_offset = NULL,"
                " chunk_size = NULL WHERE pack_id = ? AND hot_path IS NOT NULL",
                (pack_id,),
            )
        log.error("cold pack %s FAILED verification: %s; its hot copies are kept", pack_id, problem)
        if lost:
            log.critical("cold pack %s held the only copy of %d object(s)", pack_id, lost)

    # -------------------------------------------------------------- retention / reclaim
    def _packs_with_hot_copies(self, *, max_stored_ms: int | None) -> list[str]:
        sql = (
            "SELECT o.pack_id, min(o.stored_ms) AS oldest FROM objects o"
            " JOIN packs p ON p.id = o.pack_id WHERE p.state = ? AND o.hot_path IS NOT NULL"
        )
        args: list[Any] = [VERIFIED]
        if max_stored_ms is not None:
            sql += " AND o.stored_ms <= ?"
            args.append(max_stored_ms)
        with self._lock:
            rows = self._rows(sql + " GROUP BY o.pack_id ORDER BY oldest", *args)
        return [str(r[0]) for r in rows]

    def expire(self) -> ReleaseReport:
        """Delete hot copies older than the retention whose pack verifies again now."""
        cutoff = self.now_ms() - int(self.retention_s * 1000)
        report = ReleaseReport()
        for pack_id in self._packs_with_hot_copies(max_stored_ms=cutoff):
            report.add(self._release_pack(pack_id, max_stored_ms=cutoff))
        return report

    def _release_pack(self, pack_id: str, *, max_stored_ms: int | None) -> ReleaseReport:
        report = ReleaseReport()
        verdict = self.verify_pack(pack_id)  # fetched from the target again, right now
        if not verdict.ok:
            report.packs_failed.append(pack_id)
            return report
        report.packs_verified.append(pack_id)
        sql = "SELECT id, hot_path, size FROM objects WHERE pack_id = ? AND hot_path IS NOT NULL"
        args: list[Any] = [pack_id]
        if max_stored_ms is not None:
            sql += " AND stored_ms <= ?"
            args.append(max_stored_ms)
        with self._lock:
            state = self._pack_row(pack_id)[2]
            if state != VERIFIED:
                return report
            rows = self._rows(sql, *args)
            with transaction(self.db):
                for oid, rel, size in rows:
                    self._drop_hot(oid, rel)
                    self.db.execute("UPDATE objects SET hot_path = NULL WHERE id = ?", (oid,))
                    report.hot_deleted += 1
                    report.bytes_freed += size
        if rows:
            log.info(
                "released %d hot copies (%d bytes) of verified pack %s",
                report.hot_deleted, report.bytes_freed, pack_id,
            )  # fmt: skip
        return report

    # -------------------------------------------------------------- deletion
    def delete(self, object_id: str) -> DeleteResult:
        """Forget one object: its hot copy goes now (one kept in the index is overwritten
        there, and the write-ahead log checkpointed and truncated); its cold chunk is marked
        deleted and goes at the next ``repack``. Metadata is cleared; a tombstone row
        stays."""
        with self._lock:
            row = self.db.execute(
                "SELECT hot_path, pack_id, deleted_ms FROM objects WHERE id = ?", (object_id,)
            ).fetchone()
            if row is None:
                raise ArchiveError("archive.unknown", id=object_id)
            hot_path, pack_id, deleted = row
            if deleted is not None:
                return DeleteResult(object_id, False, pack_id, already_deleted=True)
            with transaction(self.db):
                hot_deleted = bool(hot_path) and self._drop_hot(object_id, hot_path)
                self.db.execute(
                    "UPDATE objects SET deleted_ms = ?, hot_path = NULL, meta = '{}',"
                    " purged_ms = CASE WHEN pack_id IS NULL THEN ? END WHERE id = ?",
                    (self.now_ms(), self.now_ms(), object_id),
                )
            if hot_path == INLINE:  # its bytes out of the write-ahead log too
                self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        log.info("deleted archived object %s (cold chunk in %s)", object_id, pack_id or "none")
        return DeleteResult(object_id, hot_deleted, pack_id)

    def repack(self) -> list[RepackResult]:
        """Rewrite every verified pack that holds deleted chunks without them."""
        with self._lock:
            ids = [
                r[0]
                for r in self.db.execute(
                    "SELECT DISTINCT o.pack_id FROM objects o JOIN packs p ON p.id = o.pack_id"
                    " WHERE o.deleted_ms IS NOT NULL AND p.state = ?",
                    (VERIFIED,),
                )
            ]
        return [self._repack_one(p) for p in ids]

    def _repack_one(self, old: str) -> RepackResult:
        name, sha, _state = self._pack_row(old)
        try:
            blob = self.target.get(name)
        except TargetUnavailable as exc:
            return RepackResult(old, None, 0, 0, False, str(exc))
        except ArchiveError as exc:
            self._pack_failed(old, str(exc))
            return RepackResult(old, None, 0, 0, False, str(exc))
        report = fmt.verify(blob, name=old, expect_sha256=sha)
        if not report.ok:
            self._pack_failed(old, "; ".join(report.problems))
            return RepackResult(old, None, 0, 0, False, "; ".join(report.problems))
        header = fmt.parse_header(fmt.bytes_reader(blob), name=old)
        with self._lock:
            live = {
                r[0]
                for r in self.db.execute(
                    "SELECT id FROM objects WHERE pack_id = ? AND deleted_ms IS NULL", (old,)
                )
            }
        keep = [c for c in header.chunks if c.object_id in live]
        purged = len(header.chunks) - len(keep)
        new_id: str | None = None
        if keep:
            new_id = f"p-{time.strftime('%Y%m%d', time.gmtime(self._now()))}-{secrets.token_hex(6)}"
            blobs = [
                blob[header.data_start + c.offset : header.data_start + c.offset + c.size]
                for c in keep
            ]
            new_blob, new_header = fmt.assemble(new_id, keep, blobs, created_ms=self.now_ms())
            result = self._upload_verified(new_blob, new_header)
            if not result.ok:
                return RepackResult(old, None, 0, 0, False, "; ".join(result.problems))
        now = self.now_ms()
        with self._lock, transaction(self.db):
            self.db.execute(
                "UPDATE objects SET pack_id = NULL, codec = NULL, chunk_offset = NULL,"
                " chunk_size = NULL, purged_ms = ? WHERE pack_id = ? AND deleted_ms IS NOT NULL",
                (now, old),
            )
            self.db.execute(
                "UPDATE packs SET state = ?, problem = ? WHERE id = ?",
                (SUPERSEDED, f"repacked into {new_id}" if new_id else "all chunks deleted", old),
            )
        with contextlib.suppress(ArchiveError):
            self.target.delete(name)
        log.info("repacked %s → %s: kept %d, purged %d", old, new_id, len(keep), purged)
        return RepackResult(old, new_id, len(keep), purged, True)

    # -------------------------------------------------------------- status
    def status(self) -> Status:
        def one(sql: str, *args: Any) -> Any:
            return self.db.execute(sql, args).fetchone()

        with self._lock:
            hot = one(
                "SELECT count(*), coalesce(sum(size), 0) FROM objects WHERE hot_path IS NOT NULL"
            )
            unpacked = one(
                "SELECT count(*), coalesce(sum(size), 0) FROM objects WHERE pack_id IS NULL"
                " AND deleted_ms IS NULL AND hot_path IS NOT NULL"
            )
            packs = dict(self.db.execute("SELECT state, count(*) FROM packs GROUP BY state"))
            cold = one("SELECT coalesce(sum(size), 0) FROM packs WHERE state = ?", VERIFIED)[0]
            awaiting = one(
                "SELECT count(*) FROM objects WHERE deleted_ms IS NOT NULL AND pack_id IS NOT NULL"
            )[0]
            damaged = one("SELECT count(*) FROM objects WHERE problem IS NOT NULL")[0]
            refusals = one("SELECT count(*) FROM refusals")[0]
            last = one("SELECT ts_ms, kind, size, reason FROM refusals ORDER BY n DESC LIMIT 1")
            last_pack = one("SELECT max(created_ms) FROM packs WHERE state = ?", VERIFIED)[0]
            oldest_packed = one(
                "SELECT min(o.stored_ms) FROM objects o JOIN packs p ON p.id = o.pack_id"
                " WHERE o.hot_path IS NOT NULL AND p.state = ?",
                VERIFIED,
            )[0]
        last_text = None
        if last:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(last[0] / 1000))
            last_text = f"{when} {last[1]} ({last[2]} bytes): {last[3]}"
        return Status(
            hot_objects=hot[0],
            hot_bytes=hot[1],
            unpacked_objects=unpacked[0],
            unpacked_bytes=unpacked[1],
            packs=packs,
            cold_bytes=cold,
            deleted_awaiting_repack=awaiting,
            damaged=damaged,
            refusals=refusals,
            last_refusal=last_text,
            admission=(admission := self.admit(0)),
            target=self.target.describe(),
            last_pack_ms=last_pack,
            next_expiry_ms=(
                None if oldest_packed is None else int(oldest_packed + self.retention_s * 1000)
            ),
            headroom_bytes=admission.space.free_bytes - self.policy.reserve_bytes,
        )

    def iter_hot_files(self) -> Iterator[Path]:
        for p in self.hot.rglob("*"):
            if p.is_file() and not p.name.startswith("."):
                yield p


def _inline(o: NewObject) -> bool:
    """Whether ``o``'s hot copy is kept in the index (:data:`INLINE_MAX_BYTES`)."""
    return o.kind == "event" and len(o.data) <= INLINE_MAX_BYTES


def _object_problem(o: NewObject) -> str:
    if len(o.data) > MAX_OBJECT_BYTES:
        return f"larger than {MAX_OBJECT_BYTES >> 20} MiB"
    if len(json.dumps(o.meta)) + len(o.source) + len(o.trace_id) > MAX_META_BYTES:
        return f"metadata over {MAX_META_BYTES} bytes"
    return ""


def _info(row: Sequence[Any]) -> ObjectInfo:
    return ObjectInfo(
        id=row[0],
        kind=row[1],
        source=row[2],
        trace_id=row[3],
        ts_ms=row[4],
        stored_ms=row[5],
        size=row[6],
        sha256=row[7],
        meta=json.loads(row[8]),
        hot_path=row[9],
        pack_id=row[10],
        deleted_ms=row[11],
        purged_ms=row[12],
        problem=row[13],
    )
