"""The audit log: append-only, hash-chained, one JSON record per line.

Every decision, card, approval and receipt leaves a record with its trace id::

    {"data":{...},"hash":"…","kind":"decision","prev":"…","seq":7,"trace_id":"…","ts_ms":…}

``hash = SHA-256("yimi.audit.v1" || 0x00 || canonical JSON of the record without hash)``
and ``prev`` is the previous record's hash (64 zeros for the first). Lines are canonical
JSON (sorted keys, no spaces), so *every* byte of the file is covered: changing one breaks
the line's canonical form, its hash, or the chain. A head file (``audit.head``: last seq
and hash) is rewritten after every append, so removing the last record is detected too.
On the hub the head is signed with the hub's Ed25519 key (``"yimi.audit-head.v1" || 0x00
|| {seq, hash}``): a writer who re-computes the whole chain after an edit still cannot
sign the new head, and ``verify`` with the hub's public key refuses it. Rolling the log
*and* the head back to an older signed state is caught by a witness (:mod:`sync.audit_head`):
devices keep the highest signed head the hub sent them, and ``verify(..., witness=head)``
fails when the log ends before it or holds another record at its seq.

Trace ids attribute; they never authorise. Writers take an exclusive ``flock``; appends
are ``fsync``'d when ``durable`` (the default), or made durable through the gateway's
ledger (below).

Group commit: :meth:`AuditLog.stage` only queues a record (no I/O);
:meth:`AuditLog.take_staged` hands the queue to the gateway's group commit
(:mod:`hub.gateway.commit`), which chains and encodes the batch and signs its head once
(:meth:`AuditLog.prepare`), records the batch's lines and that signed head in the gateway's
ledger with the batch's rows (:meth:`Ledger.stage_audit`), and has
:meth:`AuditLog.write_prepared` write the records *without a sync of their own*, then wait
for the ledger's WAL sync (one fsync per batch: the ledger's copy is the durable one), then
rewrite the head file, also unsynced. The file is synced later in the background
(:meth:`AuditLog.sync_file`, every :data:`hub.gateway.commit.CHECKPOINT_S`) and at close;
only then does the ledger drop its copy of the records (:meth:`Ledger.prune_audit`; it
keeps the newest head, the head file being synced only at close). A record written on
its own (:meth:`AuditLog.append`) is synced at once with its head, as is a batch chained
again because another writer came first (its lines in the ledger no longer match).

After a crash, :meth:`AuditLog.recover` (at open) re-appends the records the ledger holds
that the file lost (they must chain on the file's last record and end at the ledger's
signed head: nothing is appended that the head's signature does not cover), syncs them,
writes the head back if the file lost it, and cuts off what follows the head when nobody
was told about it (a torn line, records of a batch whose ledger transaction never became
durable). A batch whose write fails leaves the file as it was (the bytes written are cut
off again) and the head untouched.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from hub.gateway.errors import GatewayError
from hub.gateway.receipts import canonical, canonical_object
from protos.clock import now_ms
from protos.codec import signing_input
from storage.private import private_dir
from sync.audit_head import HEAD_CONTEXT, SignedHead, compare

AUDIT_CONTEXT = b"yimi.audit.v1"
__all__ = ["HEAD_CONTEXT", "AuditLog", "Verdict", "records", "verify"]
GENESIS = "0" * 64
HEAD_BYTES = 512

log = logging.getLogger(__name__)
MAX_LINE = 1024 * 1024
RESTORE_SCAN = 8 * MAX_LINE
"""bytes at the log's end :meth:`AuditLog.recover` looks at (a batch or two)"""


def record_hash(record: dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k != "hash"}
    return hashlib.sha256(AUDIT_CONTEXT + b"\x00" + canonical(body)).hexdigest()


@dataclass(frozen=True)
class Staged:
    """A record queued for the next batch: chained (seq, prev, hash) when it is written."""

    kind: str
    data: dict[str, Any]
    trace_id: str
    ts_ms: int
    encoded: bytes = b""
    """:func:`canonical` of ``data`` when the stager had it (else encoded when written)"""


@dataclass(frozen=True)
class Prepared:
    """A batch chained onto ``tail`` (seq, hash) and encoded, ready to be written."""

    batch: tuple[Staged, ...]
    tail: tuple[int, str]
    records: list[dict[str, Any]]
    blob: bytes
    head: bytes = b""
    """the signed head naming the batch's last record (canonical JSON)"""


@dataclass(frozen=True)
class Verdict:
    ok: bool
    records: int
    problem: str = ""
    line: int = 0


class AuditLog:
    """Appends records to ``directory/audit.jsonl``; :func:`verify` checks a log."""

    def __init__(
        self, directory: Path, *, durable: bool = True, signer: SigningKey | None = None
    ) -> None:
        self.dir = private_dir(Path(directory))
        self.path = self.dir / "audit.jsonl"
        self.head_path = self.dir / "audit.head"
        self.durable = durable
        self.signer = signer
        self._fd = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_APPEND, 0o600)
        self._head_fd = os.open(self.head_path, os.O_CREAT | os.O_RDWR, 0o600)
        self._staged: list[Staged] = []
        self._staged_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._head_unsynced = False
        """the head file was rewritten without a sync (its copy is durable elsewhere)"""
        self._file_unsynced = False
        """records were written without a sync (their copy is durable elsewhere)"""
        self._written: tuple[int, str] | None = None
        """(seq, hash) this object last wrote: where :meth:`prepare` chains on without
        reading the head file (only a guess: :meth:`write_prepared` checks the real tail
        under the lock and chains again if another writer came first)"""

    def close(self) -> None:
        """Write what is still queued, sync what was written unsynced, then close."""
        try:
            self.write(self.take_staged())
        finally:
            with self._write_lock:
                try:
                    if self._file_unsynced:
                        os.fdatasync(self._fd)
                        self._file_unsynced = False
                    if self._head_unsynced:
                        os.fdatasync(self._head_fd)
                finally:
                    os.close(self._fd)
                    os.close(self._head_fd)

    def sync_file(self) -> int:
        """Make every record written so far durable in the file (one ``fdatasync``, without
        the write lock: batches go on meanwhile) and return the seq of the last record it
        covers (0 when this object wrote nothing). The gateway then drops the ledger's copy
        of the records up to it (:meth:`Ledger.prune_audit`)."""
        written = self._written  # before the sync: whatever was written by then is covered
        if self.durable:
            os.fdatasync(self._fd)
        return written[0] if written is not None else 0

    def _tail(self) -> tuple[int, str]:
        """(seq, hash) to chain onto: the head, else the log's last line, else genesis."""
        try:
            head = json.loads(os.pread(self._head_fd, HEAD_BYTES, 0))
            return int(head["seq"]), str(head["hash"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        try:
            with self.path.open("rb") as fh:
                fh.seek(max(0, self.path.stat().st_size - MAX_LINE))
                lines = fh.read().splitlines()
            last = json.loads(lines[-1]) if lines else None
            if isinstance(last, dict):
                return int(last["seq"]), str(last["hash"])
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("audit log %s: no head and no readable last record", self.path)
        return 0, GENESIS

    def append(self, kind: str, data: dict[str, Any], *, trace_id: str = "") -> dict[str, Any]:
        """Write one record now (durable when this returns, with ``durable``)."""
        return self.write([Staged(kind, data, trace_id[:128], now_ms())])[-1]

    def stage(
        self, kind: str, data: dict[str, Any], *, trace_id: str = "", encoded: bytes = b""
    ) -> None:
        """Queue a record for the next group commit (no I/O; durable once its batch is).
        ``encoded``: ``canonical(data)``, if the caller has it (it is not encoded again)."""
        with self._staged_lock:
            self._staged.append(Staged(kind, data, trace_id[:128], now_ms(), encoded))

    def take_staged(self) -> list[Staged]:
        """The records queued so far (a batch takes them all; the queue starts again)."""
        with self._staged_lock:
            out, self._staged = self._staged, []
        return out

    def write(self, batch: Sequence[Staged]) -> list[dict[str, Any]]:
        """Chain ``batch`` onto the log, write it in one go, sync it (and every record
        written unsynced before it), then rewrite (and sign) the head once and sync it
        (:meth:`prepare` then :meth:`write_prepared`)."""
        return self.write_prepared(self.prepare(batch))

    def prepare(self, batch: Sequence[Staged]) -> Prepared:
        """Chain ``batch`` onto the current tail and encode it: the CPU part of a write, for
        the caller's thread (the group commit's event loop), so the writing thread only
        makes system calls."""
        seq, prev = expected = self._written or self._tail()
        recs: list[dict[str, Any]] = []
        lines: list[bytes] = []
        for st in batch:
            seq += 1
            record: dict[str, Any] = {
                "seq": seq,
                "ts_ms": st.ts_ms,
                "kind": st.kind,
                "trace_id": st.trace_id,
                "data": st.data,
                "prev": prev,
            }
            # each member encoded once, for both the hash (the record without it) and the
            # line: the same bytes as canonical(record) (see record_hash)
            members = {
                "seq": b"%d" % seq,
                "ts_ms": b"%d" % st.ts_ms,
                "kind": canonical(st.kind),
                "trace_id": canonical(st.trace_id),
                "data": st.encoded or canonical(st.data),
                "prev": canonical(prev),
            }
            body = canonical_object(members)
            record["hash"] = prev = hashlib.sha256(AUDIT_CONTEXT + b"\x00" + body).hexdigest()
            members["hash"] = canonical(prev)
            recs.append(record)
            lines.append(canonical_object(members))
        lines.append(b"")
        head = self._signed_head(seq, prev) if recs else b""
        return Prepared(tuple(batch), expected, recs, b"\n".join(lines), head)

    def write_prepared(
        self, p: Prepared, *, ready: Callable[[], None] | None = None
    ) -> list[dict[str, Any]]:
        """Write a prepared batch and its head. Thread-safe (one writer at a time, also
        across processes by ``flock``; a batch prepared on a tail that moved since is
        chained again). On failure the file is cut back to where it was, the head is
        untouched and :class:`GatewayError` ``audit.write_failed`` is raised.

        ``ready``: the batch's records and head (``p.blob``, ``p.head``) are being made
        durable elsewhere (the gateway's ledger records them with the batch); it is called
        once the records are written, *not synced*, and must return once that copy is
        durable (or raise: the records are cut off again). The head file is then rewritten
        without a sync either (the records are synced by :meth:`sync_file`, both at close;
        the ledger keeps the newest head; :meth:`recover` restores them from that copy
        after a crash). A batch chained
        again (its copy elsewhere no longer matches) is synced here with its head, as
        without ``ready``."""
        if not p.records:
            return []
        with self._write_lock:
            fd = self._fd
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                moved = self._tail() != p.tail  # another writer came first
                if moved:
                    self._written = None  # chained on the real tail, read again
                    p = self.prepare(p.batch)
                size = os.fstat(fd).st_size
                try:
                    view = memoryview(p.blob)
                    while view:
                        view = view[os.write(fd, view) :]
                    if self.durable and (ready is None or moved):
                        os.fdatasync(fd)  # also covers records written unsynced before
                        self._file_unsynced = False
                    else:
                        self._file_unsynced = self.durable
                except OSError as exc:
                    self._cut(size)
                    raise GatewayError(
                        "audit.write_failed", path=str(self.path), reason=str(exc)
                    ) from exc
                if ready is not None:
                    try:
                        ready()  # no head names the records before its copy is durable
                    except BaseException:
                        self._cut(size)
                        raise
                old_head = os.pread(self._head_fd, HEAD_BYTES, 0)
                try:
                    self._put_head(p.head, sync=ready is None or moved)
                except OSError as exc:
                    # no head names the records: cut them off again and put the old head
                    # back, so the log still ends where its head says
                    self._cut(size)
                    with contextlib.suppress(OSError):
                        os.pwrite(self._head_fd, old_head.ljust(HEAD_BYTES), 0)
                    raise GatewayError(
                        "audit.write_failed", path=str(self.path), reason=str(exc)
                    ) from exc
                self._written = (p.records[-1]["seq"], p.records[-1]["hash"])
                return p.records
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _cut(self, size: int) -> None:
        """Drop whatever a failed write left past ``size``."""
        try:
            os.ftruncate(self._fd, size)
            if self.durable:
                os.fdatasync(self._fd)
        except OSError:
            log.exception("audit log %s: a failed write could not be cut off", self.path)

    def head(self) -> SignedHead | None:
        """The current signed head (``None``: unsigned log, or nothing written yet)."""
        try:
            data = json.loads(os.pread(self._head_fd, HEAD_BYTES, 0))
        except (OSError, ValueError):
            return None
        return SignedHead.from_json(data) if isinstance(data, dict) and "sig" in data else None

    def _signed_head(self, seq: int, digest: str) -> bytes:
        """The head naming (seq, hash), signed when the log has a signer (canonical JSON)."""
        head: dict[str, object] = {"seq": seq, "hash": digest}
        if self.signer is not None:
            sig = self.signer.sign(signing_input(HEAD_CONTEXT, canonical(head))).signature
            head["sig"] = sig.hex()
        return canonical(head)

    def _put_head(self, head: bytes, *, sync: bool) -> None:
        # one fixed-size block rewritten in place (smaller than a disk sector): no rename,
        # so no directory entry to make durable; JSON ignores the padding
        os.pwrite(self._head_fd, head.ljust(HEAD_BYTES), 0)
        if self.durable and sync:
            os.fdatasync(self._head_fd)
        self._head_unsynced = self.durable and not sync

    def recover(
        self, recorded: bytes | None, batches: Sequence[tuple[int, bytes]] = ()
    ) -> tuple[str, int]:
        """At open, after a crash: bring the file and its head back in line with what was
        durable. Returns (what was done: ``"appended"``, ``"restored"``, ``"cut"`` or
        ``""``; the seq the file now ends at, synced).

        ``recorded``: the last head written with a batch to the gateway's ledger; ``batches``:
        the (first seq, lines) the ledger still holds (:meth:`Ledger.audit_batches`), all
        durable before their batch was acknowledged. When that head (signed by this log's
        key) is past the file's last whole record, the ledger's records from there up to
        it are re-appended — only if they chain on that record and end at the head's hash,
        so the head's signature covers every one — and synced with the head:
        ``"appended"``. Otherwise a head newer than the file's, naming a record the log
        holds with that hash, is written back and synced: ``"restored"``. Then records
        past the head, when the ledger names no later head, are ones nobody was told about
        (their batch never became durable): they are cut off so the chain goes on from the
        head, as is a torn last line: ``"cut"``. A later head in the ledger that the log
        cannot be brought to hold is left as it is (for :func:`verify` to report)."""
        done = ""
        with self._write_lock:
            self._written = None  # the head may change here: read it again
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                tail, complete = self._last_records()
                candidate = _head_of(recorded or b"")
                signed = candidate is not None and self._signed_by_us(recorded or b"")
                if candidate is not None and signed:
                    lost = self._lost_records(tail, complete, candidate, batches)
                    if lost:
                        self._cut(complete)  # a torn last line first
                        view = memoryview(b"".join(lost))
                        while view:
                            view = view[os.write(self._fd, view) :]
                        if self.durable:
                            os.fdatasync(self._fd)
                        self._put_head(recorded or b"", sync=True)
                        done = "appended"
                        log.warning(
                            "audit log %s: %d record(s) the file lost re-appended from the "
                            "ledger, up to seq %d",
                            self.path,
                            len(lost),
                            candidate[0],
                        )
                        tail, complete = self._last_records()
                current = _head_of(os.pread(self._head_fd, HEAD_BYTES, 0))
                if (
                    candidate is not None
                    and (current is None or candidate[0] > current[0])
                    and tail.get(candidate[0], ("", 0))[0] == candidate[1]
                    and signed
                ):
                    self._put_head(recorded or b"", sync=True)
                    current, done = candidate, done or "restored"
                    log.warning("audit log %s: head restored to seq %d", self.path, current[0])
                size = os.fstat(self._fd).st_size
                end = complete
                if (
                    current is not None
                    and current[0] in tail
                    and (candidate is None or candidate[0] <= current[0])
                ):
                    # the ledger claims nothing past the head: what follows it was never
                    # acknowledged
                    end = tail[current[0]][1]
                elif candidate is not None and candidate[0] > (current or (0, ""))[0]:
                    log.error(
                        "audit log %s: the ledger names head seq %d, which the log does not "
                        "hold as signed: left as it is",
                        self.path,
                        candidate[0],
                    )
                if size > end:  # a torn last line is never a record: always cut
                    log.warning(
                        "audit log %s: %d bytes past its head cut off", self.path, size - end
                    )
                    self._cut(end)
                    done = done or "cut"
                if self.durable:  # what the file holds now is durable: the ledger's copy
                    os.fdatasync(self._fd)  # of it may go
                last = max((s for s, (_, off) in tail.items() if off <= end), default=0)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        return done, last

    def _lost_records(
        self,
        tail: dict[int, tuple[str, int]],
        complete: int,
        head: tuple[int, str],
        batches: Sequence[tuple[int, bytes]],
    ) -> list[bytes]:
        """The ledger's lines (each with its newline) of the records past the file's last
        whole one up to ``head``: each a canonical record with its hash, chained on the
        previous one, the last with the head's hash; ``[]`` when the file is not behind the
        head or the ledger's records do not lead there."""
        if tail:
            last = max(tail)
            prev = tail[last][0]
        elif complete == 0:  # an empty log (or only a torn line)
            last, prev = 0, GENESIS
        else:
            return []  # no readable record at the end: nothing to chain on
        if head[0] <= last:
            return []
        lines: dict[int, bytes] = {}
        for first, blob in batches:  # by first seq: a later batch replaces what it covers
            for k, line in enumerate(blob.split(b"\n")[:-1]):
                lines[first + k] = line
        out: list[bytes] = []
        for seq in range(last + 1, head[0] + 1):
            line = lines.get(seq, b"")
            try:
                rec = json.loads(line)
                ok = (
                    isinstance(rec, dict)
                    and canonical(rec) == line
                    and rec.get("seq") == seq
                    and rec.get("prev") == prev
                    and rec.get("hash") == record_hash(rec)
                )
            except ValueError:
                ok = False
            if not ok:
                log.error(
                    "audit log %s: the ledger's record %d does not chain on the log's end "
                    "(seq %d): nothing re-appended",
                    self.path,
                    seq,
                    last,
                )
                return []
            prev = rec["hash"]
            out.append(line + b"\n")
        if prev != head[1]:
            log.error(
                "audit log %s: the ledger's records do not end at its head: nothing re-appended",
                self.path,
            )
            return []
        return out

    def _signed_by_us(self, head: bytes) -> bool:
        if self.signer is None:
            return True
        try:
            data = json.loads(head)
            body = canonical({"seq": data["seq"], "hash": data["hash"]})
            self.signer.verify_key.verify(
                signing_input(HEAD_CONTEXT, body), bytes.fromhex(str(data["sig"]))
            )
        except (BadSignatureError, ValueError, TypeError, KeyError):
            return False
        return True

    def _last_records(self) -> tuple[dict[int, tuple[str, int]], int]:
        """seq → (hash, offset just past its line) for the records in the log's last
        :data:`RESTORE_SCAN` bytes (a torn last line is left out), and the offset just past
        the last whole line."""
        size = os.fstat(self._fd).st_size
        start = max(0, size - RESTORE_SCAN)
        data = os.pread(self._fd, size - start, start)
        out: dict[int, tuple[str, int]] = {}
        offset = start
        lines = data.split(b"\n")
        for k, line in enumerate(lines[:-1]):  # the last piece has no newline: torn or empty
            offset += len(line) + 1
            if k == 0 and start > 0:
                continue  # may begin mid-line
            try:
                rec = json.loads(line)
                out[int(rec["seq"])] = (str(rec["hash"]), offset)
            except (ValueError, KeyError, TypeError):
                continue
        return out, offset if (start == 0 or len(lines) > 1) else size


def _head_of(raw: bytes) -> tuple[int, str] | None:
    try:
        head = json.loads(raw)
        return int(head["seq"]), str(head["hash"])
    except (ValueError, KeyError, TypeError):
        return None


def records(directory: Path) -> Iterator[dict[str, Any]]:
    """Every parsable record in order (for ``yimi audit show``; use :func:`verify` to trust)."""
    path = Path(directory) / "audit.jsonl"
    if not path.exists():
        return
    with path.open("rb") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                yield rec


def verify(
    directory: Path, verify_key: bytes | None = None, *, witness: SignedHead | None = None
) -> Verdict:
    """Check every line, the chain and the head (and the head's signature when
    ``verify_key`` — the hub's public key — is given); with ``witness`` (the highest head a
    device kept), also that the log has not been rolled back or forked before it (problem
    starting ``rollback:``). Never raises on a damaged log."""
    directory = Path(directory)
    path, head_path = directory / "audit.jsonl", directory / "audit.head"
    if not path.exists():
        return Verdict(False, 0, "no audit log here")
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        return Verdict(False, 0, "the last line is incomplete", data.count(b"\n") + 1)
    prev, n, hash_at = GENESIS, 0, None
    for n, line in enumerate(data.splitlines(), start=1):
        if len(line) > MAX_LINE:
            return Verdict(False, n - 1, "line too long", n)
        try:
            rec = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            return Verdict(False, n - 1, "not JSON", n)
        if not isinstance(rec, dict) or canonical(rec) != line:
            return Verdict(False, n - 1, "not a canonical record", n)
        if rec.get("seq") != n:
            return Verdict(False, n - 1, f"seq {rec.get('seq')!r} where {n} belongs", n)
        if rec.get("prev") != prev:
            return Verdict(False, n - 1, "chain broken: prev is not the previous hash", n)
        if rec.get("hash") != record_hash(rec):
            return Verdict(False, n - 1, "hash does not match the record", n)
        prev = rec["hash"]
        if witness is not None and n == witness.seq:
            hash_at = prev
    try:
        head = json.loads(head_path.read_text())
    except (OSError, ValueError):
        return Verdict(False, n, "head file missing or unreadable")
    if verify_key is not None:
        try:
            body = canonical({"seq": head.get("seq"), "hash": head.get("hash")})
            VerifyKey(verify_key).verify(
                signing_input(HEAD_CONTEXT, body), bytes.fromhex(str(head.get("sig", "")))
            )
        except (BadSignatureError, ValueError, TypeError, AttributeError):
            return Verdict(False, n, "the head is not signed by the hub")
    if not isinstance(head, dict) or head.get("seq") != n or head.get("hash") != prev:
        return Verdict(
            False,
            n,
            f"head names seq {head.get('seq') if isinstance(head, dict) else '?'}"
            f" but the log ends at {n}: records removed or appended past the head",
        )
    if witness is not None and (problem := compare(n, hash_at, witness)):
        return Verdict(False, n, f"rollback: {problem}")
    return Verdict(True, n)
