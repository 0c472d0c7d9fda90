"""One CRDT document on disk: a snapshot plus an append-only update log.

Files in the replica folder, per document ``D`` and generation ``N``::

    D.gN.snap   b"YIMISNP1" | crc32 (4) | length (8) | loro snapshot      (atomic, fsynced)
    D.gN.log    records: length (4) | crc32 (4) | loro update blob        (append, fsynced)
    D.lock      flock: one writer at a time across processes

Every change (local or imported) is appended to the log and fsynced before it is
acknowledged or broadcast. Compaction writes generation ``N+1`` as a shallow snapshot and
keeps generation ``N`` as the fallback. Loading takes the newest snapshot that verifies; a
damaged snapshot falls back to the previous generation and its logs; a damaged log record
ends the replay there and the unread tail is moved aside to ``*.damaged.*`` — both are
reported in :attr:`Replica.problems` and logged, never silently dropped, and the peers'
catch-up refills what was lost. Several processes may share one folder (``yimi edge run``
and ``yimi note add``): writers take the lock, and :meth:`Replica.refresh` imports what
others appended.
"""

from __future__ import annotations

import ctypes
import fcntl
import logging
import os
import re
import struct
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from loro import ExportMode, LoroDoc, VersionVector

from protos.clock import now_ms
from storage.group_commit import GroupCommit
from storage.private import open_private, open_private_fd, private_dir, private_file
from sync.crdt import PASS_THROUGH, CrdtError, guard, version

log = logging.getLogger(__name__)

SNAP_MAGIC = b"YIMISNP1"
SNAP_HEADER = struct.Struct(">4sQ")  # crc32 as 4 raw bytes, length
REC_HEADER = struct.Struct(">II")  # length, crc32
MAX_RECORD_BYTES = 64 * 1024 * 1024
"""bytes: a log record longer than this is treated as damage"""
DOC_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
PURGED = "purged"
"""a map a replica writes when it purges history with concurrent heads (joins them)"""
MAX_POISONED_KEPT = 16
"""documents a Rust panic poisoned that are never freed: loro panics again when one is
dropped (noise in the log, even at exit), so the first few are leaked on purpose"""
_poisoned_kept = 0


@dataclass(frozen=True)
class Applied:
    """Outcome of importing an update."""

    changed: bool
    """the document learned something new"""
    pending: bool
    """part of the update depends on operations this replica lacks (ask for a catch-up)"""
    base: VersionVector | None = field(default=None, compare=False)
    """the document's version just before the update was imported, after what other
    processes had appended to the folder: what lies between it and the document now came
    with the update alone (None: the document was replaced by a snapshot)"""


def _crc(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Replica:
    """A loro document persisted in ``folder`` under ``doc_id``."""

    def __init__(
        self,
        folder: Path,
        doc_id: str,
        *,
        compact_at: int | None = None,
        group: GroupCommit | None = None,
    ) -> None:
        if not DOC_ID_RE.match(doc_id):
            raise CrdtError(doc_id, "invalid document id")
        self.folder = folder
        self.group = group
        """with a group, an append is synced by the group's next flush (before anything
        that tells a peer about it is sent), not by itself"""
        self.doc_id = doc_id
        self.compact_at = compact_at
        """bytes of update log after which the document is compacted (None: never by itself)"""
        self.doc = LoroDoc()
        self.gen = 0
        self._offset = 0  # bytes of the current log already imported
        self._lock_path = os.path.join(folder, f"{doc_id}.lock")
        self._paths: tuple[int, str, str] = (-1, "", "")
        """(generation, its log, the next generation's snapshot) as strings: the paths every
        apply looks at, made once per generation rather than twice per update"""
        self.problems: list[str] = []
        self._unreported: list[bytes] = []
        """what other processes appended, imported (by any read of the log: an
        :meth:`apply` or :meth:`change` reads it first) and not yet returned by
        :meth:`refresh`"""
        private_dir(folder)
        with self._locked():
            self._load()

    # ------------------------------------------------------------------ files
    def _snap(self, gen: int) -> Path:
        return self.folder / f"{self.doc_id}.g{gen}.snap"

    def _log(self, gen: int) -> Path:
        return self.folder / f"{self.doc_id}.g{gen}.log"

    def _hot_paths(self) -> tuple[str, str]:
        """This generation's log and the next generation's snapshot (as strings)."""
        gen, log_path, next_snap = self._paths
        if gen != self.gen:
            base = os.path.join(self.folder, self.doc_id)
            log_path, next_snap = f"{base}.g{self.gen}.log", f"{base}.g{self.gen + 1}.snap"
            self._paths = (self.gen, log_path, next_snap)
        return log_path, next_snap

    def _generations(self) -> list[int]:
        pattern = re.compile(rf"^{re.escape(self.doc_id)}\.g(\d+)\.(snap|log)$")
        gens = {int(m.group(1)) for name in os.listdir(self.folder) if (m := pattern.match(name))}
        return sorted(gens)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self._lock_path, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ loading
    def _load(self) -> None:
        gens = self._generations()
        self.doc = LoroDoc()
        self._offset = 0
        if not gens:
            self.gen = 0
            return
        newest = gens[-1]
        base = None
        for gen in reversed(gens):
            snap = self._snap(gen)
            if not snap.exists():
                if gen == gens[0]:
                    base = gen  # generation 0 has no snapshot: start empty
                    break
                continue
            data = self._read_snapshot(snap)
            if data is not None:
                try:
                    guard(self.doc_id, partial(self.doc.import_, data))
                    base = gen
                    break
                except CrdtError as exc:
                    self._damaged(snap, f"snapshot unreadable ({exc.fields['reason']})")
                    self.doc = LoroDoc()
        if base is None:
            base = gens[0]
            self._problem(f"no usable snapshot; replaying the logs from generation {base}")
        for gen in range(base, newest + 1):
            offset = self._replay(self._log(gen))
            if gen == newest:
                self._offset = offset
        self.gen = newest

    def _read_snapshot(self, path: Path) -> bytes | None:
        raw = path.read_bytes()
        head = len(SNAP_MAGIC) + SNAP_HEADER.size
        if len(raw) < head or not raw.startswith(SNAP_MAGIC):
            self._damaged(path, "snapshot header damaged")
            return None
        crc, length = SNAP_HEADER.unpack_from(raw, len(SNAP_MAGIC))
        body = raw[head:]
        if len(body) != length or _crc(body).to_bytes(4, "big") != crc:
            self._damaged(path, "snapshot checksum mismatch")
            return None
        return body

    def _replay(self, path: Path, start: int = 0) -> int:
        """Import the records of ``path`` from ``start``; return the offset after the good ones."""
        if not path.exists():
            return start
        with path.open("rb") as fh:
            fh.seek(start)
            data = fh.read()
        pos = 0
        while pos < len(data):
            if len(data) - pos < REC_HEADER.size:
                return self._cut(path, start + pos, "truncated record header")
            length, crc = REC_HEADER.unpack_from(data, pos)
            body = data[pos + REC_HEADER.size : pos + REC_HEADER.size + length]
            if length > MAX_RECORD_BYTES or len(body) != length:
                return self._cut(path, start + pos, "truncated record")
            if _crc(body) != crc:
                return self._cut(path, start + pos, "record checksum mismatch")
            try:
                guard(self.doc_id, partial(self.doc.import_, body))
            except CrdtError as exc:
                self._problem(f"{path.name}: record at byte {start + pos} refused: {exc}")
            pos += REC_HEADER.size + length
        return start + pos

    def _cut(self, path: Path, offset: int, reason: str) -> int:
        """Move a damaged log tail aside and truncate the log to its last good record."""
        size = path.stat().st_size
        aside = path.with_name(f"{path.name}.damaged.{now_ms()}")
        with path.open("rb") as src:
            src.seek(offset)
            with open_private(aside, "wb") as out:
                out.write(src.read())
        with path.open("r+b") as fh:
            fh.truncate(offset)
            fh.flush()
            os.fsync(fh.fileno())
        self._problem(
            f"{path.name}: {reason} at byte {offset}; {size - offset} bytes moved to {aside.name}"
        )
        return offset

    def _damaged(self, path: Path, reason: str) -> None:
        aside = path.with_name(f"{path.name}.damaged.{now_ms()}")
        path.replace(aside)
        self._problem(f"{path.name}: {reason}; moved to {aside.name}, using the previous state")

    def _problem(self, text: str) -> None:
        self.problems.append(text)
        log.error("replica %s in %s: %s", self.doc_id, self.folder, text)

    # ------------------------------------------------------------------ changes
    def refresh(self) -> list[bytes]:
        """Import what other processes appended since we last looked; returns those blobs
        (with those an :meth:`apply` or :meth:`change` imported meanwhile: a node broadcasts
        them as its own changes, so none may be taken in silently)."""
        with self._locked():
            self._refresh_locked()
            blobs, self._unreported = self._unreported, []
            return blobs

    def _refresh_locked(self) -> None:
        """Import what other processes appended since we last looked (every read of the
        document does this first); what it brought is kept for :meth:`refresh`."""
        if blob := self._imported_from_disk():
            self._unreported.append(blob)

    def _imported_from_disk(self) -> bytes | None:
        path, next_snap = self._hot_paths()
        try:
            size: int | None = os.stat(path).st_size
        except FileNotFoundError:
            size = None
        if size is None or os.path.exists(next_snap):
            # maybe a newer generation (another process compacted): look at them all. With
            # our log still there and no snapshot N+1, there is none: generations are made
            # one after the other (N+1's snapshot before its log) and removed oldest first,
            # all under the lock we hold — two stats instead of listing the folder
            gens = self._generations()
            if gens and gens[-1] != self.gen:
                before = version(self.doc)
                self._load()
                return self._export_since(before) if version(self.doc) != before else None
        if size is None or size == self._offset:
            return None
        before = version(self.doc)
        self._offset = self._replay(Path(path), self._offset)
        return self._export_since(before) if version(self.doc) != before else None

    def _export_since(self, before: bytes) -> bytes:
        return bytes(self.doc.export(ExportMode.Updates(VersionVector.decode(before))))

    def change(self, mutate: Callable[[LoroDoc], None]) -> bytes:
        """Apply a local change, persist it (fsynced), and return the update to broadcast."""
        with self._locked():
            self._refresh_locked()
            before = version(self.doc)
            mutate(self.doc)
            self.doc.commit()
            blob = self._export_since(before)
            self._append(blob)
            return blob

    def apply(self, blob: bytes) -> Applied:
        """Import a peer's update; persist it if it taught us anything. Raises CrdtError."""
        with self._locked():
            self._refresh_locked()
            base = self.doc.oplog_vv
            before = bytes(base.encode())
            try:
                status = guard(self.doc_id, lambda: self.doc.import_(blob))
            except CrdtError:
                self._reload_if_damaged(before)
                raise
            changed = version(self.doc) != before
            if changed:  # what became part of the document: with earlier pending parts, more
                self._append(self._export_since(before))
            return Applied(changed=changed, pending=status.pending is not None, base=base)

    def _reload_if_damaged(self, before: bytes) -> None:
        """After a refused import: a Rust panic poisons the document (every later call on it
        panics); rebuild it from disk, where nothing of the refused update was written."""
        try:
            intact = version(self.doc) == before
        except PASS_THROUGH:
            raise
        except BaseException:
            intact = False
        if not intact:
            log.warning("replica %s: a refused update damaged the document; reloading", self.doc_id)
            global _poisoned_kept
            if _poisoned_kept < MAX_POISONED_KEPT:
                _poisoned_kept += 1
                ctypes.pythonapi.Py_IncRef(ctypes.py_object(self.doc))  # never dropped
            self._load()

    def replace_with_snapshot(
        self, blob: bytes, reapply: Callable[[LoroDoc, LoroDoc], None]
    ) -> Applied:
        """Take a peer's (shallow) snapshot when we are behind its compaction point.

        Our own history is merged into it where loro can; where it cannot (our changes
        depend on operations before the peer's compaction point), ``reapply(old, new)``
        re-expresses what ``old`` has and ``new`` lacks as fresh changes on ``new``.
        """
        with self._locked():
            self._refresh_locked()
            mine = self.doc
            fresh = LoroDoc()
            guard(self.doc_id, partial(fresh.import_, blob))
            before = version(mine)
            try:
                extra = guard(self.doc_id, lambda: bytes(mine.export(ExportMode.Snapshot())))
                status = guard(self.doc_id, partial(fresh.import_, extra))
                merged = status.pending is None
            except CrdtError:
                merged = False
            if not merged:
                fresh = LoroDoc()
                guard(self.doc_id, partial(fresh.import_, blob))
                reapply(mine, fresh)
                fresh.commit()
            self.doc = fresh
            self._write_generation(self.gen + 1, bytes(fresh.export(ExportMode.Snapshot())))
            return Applied(changed=version(fresh) != before, pending=False)

    def _append(self, blob: bytes) -> None:
        self._append_only(blob)
        if self.compact_at is not None and self._offset > self.compact_at:
            self._compact_locked()

    def _append_only(self, blob: bytes) -> None:
        path, _ = self._hot_paths()
        fd = open_private_fd(path)
        try:
            start = os.lseek(fd, 0, os.SEEK_END)
            record = REC_HEADER.pack(len(blob), _crc(blob)) + blob
            try:
                written = 0
                while written < len(record):  # os.write may write less (a full disk)
                    written += os.write(fd, record[written:])
            except OSError:
                # no half record left behind: the next append would follow it, and a replay
                # stops at the first damaged record
                os.ftruncate(fd, start)
                raise
            if self.group is None:
                os.fdatasync(fd)  # an append: the new size is flushed with the data
            self._offset = start + len(record)
        finally:
            os.close(fd)
        if self.group is not None:
            self.group.wrote(path)

    # ------------------------------------------------------------------ compaction
    def compact(self) -> int:
        """Write a shallow snapshot as a new generation; returns its size in bytes."""
        with self._locked():
            self._refresh_locked()
            return self._compact_locked()

    def _compact_locked(self) -> int:
        frontiers = self.doc.oplog_frontiers
        data = guard(
            self.doc_id, lambda: bytes(self.doc.export(ExportMode.ShallowSnapshot(frontiers)))
        )
        self._write_generation(self.gen + 1, data)
        log.info("replica %s compacted: generation %d, %d bytes", self.doc_id, self.gen, len(data))
        return len(data)

    def purge_history(self) -> int:
        """Keep only the current state: a shallow snapshot as a new generation, and no
        fallback generation (what was deleted from the document — a forgotten entry's text —
        is then in no file). Returns the snapshot's size."""
        with self._locked():
            self._refresh_locked()
            # with concurrent heads a shallow snapshot keeps history back to where they part:
            # one small local change joins them into one head first
            before = version(self.doc)
            self.doc.get_map(PURGED).insert("at", now_ms())
            self.doc.commit()
            self._append_only(self._export_since(before))
            size = self._compact_locked()
            for g in self._generations():
                if g < self.gen:
                    self._snap(g).unlink(missing_ok=True)
                    self._log(g).unlink(missing_ok=True)
            for damaged in self.folder.glob(f"{self.doc_id}.g*.damaged.*"):
                damaged.unlink(missing_ok=True)
            _fsync_dir(self.folder)
            log.info("replica %s: history purged (generation %d)", self.doc_id, self.gen)
            return size

    def _write_generation(self, gen: int, snapshot: bytes) -> None:
        tmp = self.folder / f".{self.doc_id}.g{gen}.snap.tmp"
        with open_private(tmp, "wb") as fh:
            fh.write(
                SNAP_MAGIC + SNAP_HEADER.pack(_crc(snapshot).to_bytes(4, "big"), len(snapshot))
            )
            fh.write(snapshot)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(self._snap(gen))
        private_file(self._log(gen))
        _fsync_dir(self.folder)
        old_gens = [g for g in self._generations() if g < gen - 1]
        for g in old_gens:  # keep one previous generation as the fallback
            self._snap(g).unlink(missing_ok=True)
            self._log(g).unlink(missing_ok=True)
        self.gen = gen
        self._offset = 0

    @property
    def log_bytes(self) -> int:
        """bytes of update log written since the last snapshot (this process's view)"""
        return self._offset

    @property
    def size_on_disk(self) -> int:
        return sum(
            p.stat().st_size for p in (self._snap(self.gen), self._log(self.gen)) if p.exists()
        )
