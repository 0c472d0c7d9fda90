"""A guarded wrapper over one loro document.

loro is Rust: malformed input raises exceptions that derive from ``BaseException`` directly
(``pyo3_runtime.PanicException`` and loro's own decode errors), so ``except Exception``
misses them. Every call into loro with untrusted input goes through :func:`guard`, which
turns them into :class:`CrdtError` and lets real interpreter exits through.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from loro import ExportMode, LoroDoc, VersionVector

from sync.errors import SyncError

T = TypeVar("T")

PASS_THROUGH = (KeyboardInterrupt, SystemExit, GeneratorExit, asyncio.CancelledError, MemoryError)


class CrdtError(SyncError):
    """loro refused an operation (bad bytes, a panic inside the library, …)."""

    def __init__(self, doc: str, reason: str) -> None:
        super().__init__("crdt.refused", doc=doc, reason=reason[:200])


def guard(doc_id: str, fn: Callable[[], T]) -> T:
    """Run ``fn``; any loro failure (even a Rust panic) becomes :class:`CrdtError`."""
    try:
        return fn()
    except PASS_THROUGH:
        raise
    except BaseException as exc:
        raise CrdtError(doc_id, f"{type(exc).__name__}: {exc}") from None


def version(doc: LoroDoc) -> bytes:
    return bytes(doc.oplog_vv.encode())


def decode_version(doc_id: str, data: bytes) -> VersionVector:
    return guard(doc_id, lambda: VersionVector.decode(data))


def updates_since(doc_id: str, doc: LoroDoc, since: bytes) -> tuple[bytes, bool]:
    """What a peer at version ``since`` lacks: ``(blob, is_snapshot)``.

    A peer behind this document's shallow (compaction) point cannot take a delta; it gets
    a snapshot of the whole document instead.
    """
    vv = decode_version(doc_id, since) if since else VersionVector()
    if doc.is_shallow() and not vv.includes_vv(doc.shallow_since_vv):
        return guard(doc_id, lambda: bytes(doc.export(ExportMode.Snapshot()))), True
    return guard(doc_id, lambda: bytes(doc.export(ExportMode.Updates(vv)))), False


def lacks(doc: LoroDoc, peer_version: bytes) -> bool:
    """True if ``doc`` has operations the peer (at ``peer_version``) does not."""
    try:
        peer = VersionVector.decode(peer_version) if peer_version else VersionVector()
    except PASS_THROUGH:
        raise
    except BaseException:
        return True
    return not peer.includes_vv(doc.oplog_vv)
