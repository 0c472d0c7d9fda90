"""The hub's eyes on the mesh: snapshots on request, into the archive and onto the timeline.

1. ``capture(device, turn_id)`` sends a ``CAPTURE_REQUEST`` to a device with the camera
   role (only ever for the owner's request: the brain calls it for "take a picture");
2. the device answers with ``PHOTO_CHUNK`` pieces and a ``PHOTO``; a photo nobody asked for,
   from another device than the one asked, with pieces missing or a digest that does not
   match is refused (dropped, counted, logged) — nothing is stored;
3. the JPEG goes to the L5 archive as an ``image`` (``sensitivity: high``) within the photos'
   own budget (``vision.budget_mb``, default 2048), faces are described and recognised, text
   is read (Tesseract); a ``photo`` entry (a reference: the archive id and digest, never
   the image, nor the names or text found on it) is put on the timeline as soon as the JPEG
   is stored, and the timeline replicates it to every device.

Face descriptors are never stored for a snapshot: only the names recognised on it. A
configured ``vision`` model adds its description of the JPEG when the owner's cloud rules
let it see snapshots (:mod:`hub.vision.describe`); it gets the image only, never the face
descriptors, names or text found on it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from google.protobuf.message import Message

from hub.archive.archive import Archive, NewObject
from hub.vision.errors import VisionError
from hub.vision.faces import FaceModel
from hub.vision.ocr import read_text
from hub.vision.people import MIN_PHOTOS, check_name, enrol, one_face, recognise
from hub.vision.recall import PhotoIndex
from hub.vision.store import Analysis, PhotoRecord, VisionStore, describe
from protos import mesh_pb2, vision_pb2
from protos.clock import now_ms
from sync.envelope import DropReason, Opened, random_id
from sync.tasks import TaskOwner

log = logging.getLogger(__name__)

PHOTO_KIND = "photo"
MAX_PIECES = 4
MAX_PIECE_BYTES = 192 * 1024
REQUEST_TTL_MS = 60_000
"""a capture request older than this is no longer answered"""
DEFAULT_BUDGET_MB = 2048
NAMING_MS = 10 * 60_000
"""how recent a snapshot "this is my sister" names"""


class Send(Protocol):
    async def __call__(
        self, device: str, kind: int, msg: Message, trace_id: str | None = None
    ) -> bool: ...


EntryFn = Callable[[str, str, str, str, dict[str, object]], Awaitable[bool]]
"""(entry id, kind, text, trace id, meta) → put a hub entry on the timeline once"""


@dataclass
class _Pending:
    device: str
    turn_id: str
    trace_id: str
    asked_ms: int
    pieces: dict[int, bytes] = field(default_factory=dict)
    total: int = 0


def entry_text(device: str) -> str:
    """The timeline words of a photo (a reference, not the image; what was read or
    recognised on it stays on the hub, in vision.db)."""
    return f"photo · 照片 ({device})"


class Vision:
    def __init__(
        self,
        home: Path,
        *,
        send: Send,
        entry: EntryFn,
        archive: Callable[[], Archive],
        drop: Callable[[DropReason, str, str], None],
        count: Callable[[str], None],
        config: Mapping[str, Any] | None = None,
        faces: FaceModel | None = None,
        ocr: Callable[[bytes], str] = read_text,
        clock: Callable[[], int] = now_ms,
        name_of: Callable[[str], str] = str,
        describer: Callable[[bytes], str | None] | None = None,
    ) -> None:
        self.home = home
        self._describer = describer
        """JPEG → the ``vision`` model's words (``None``: no model may see it; blocking)"""
        self._name_of = name_of
        """device id → the name the owner gave it (for the entry's words)"""
        self.store = VisionStore.for_home(home)
        self._send = send
        self._entry = entry
        self._archive_source = archive
        self._archive: Archive | None = None
        self._drop = drop
        self._count = count
        cfg = config or {}
        self.budget_bytes = int(float(cfg.get("budget_mb", DEFAULT_BUDGET_MB)) * (1 << 20))
        self.faces = faces or FaceModel()
        self._ocr = ocr
        self._clock = clock
        self._pending: dict[str, _Pending] = {}
        self._tasks: TaskOwner | None = None
        self.index = PhotoIndex(home)
        """the snapshots' items in the recall index (opened on first use)"""
        self.stored = asyncio.Event()
        """set each time a photo was stored (tests and the bench wait on it)"""

    async def __aenter__(self) -> Vision:
        self._tasks = await TaskOwner("vision").__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tasks, self._tasks = self._tasks, None
        try:
            if tasks is not None:
                await tasks.__aexit__(exc_type, exc, tb)
        finally:
            if self._archive is not None:
                self._archive.close()
            self.index.close()
            self.store.close()

    # ------------------------------------------------------------------ asking
    async def capture(self, device: str, turn_id: str, trace_id: str) -> bool:
        """Ask ``device`` for one snapshot now; ``False`` if it could not be asked."""
        now = self._clock()
        self._pending = {
            k: p for k, p in self._pending.items() if now - p.asked_ms < REQUEST_TTL_MS
        }
        request = vision_pb2.CaptureRequest(
            request_id=random_id("ph-"), turn_id=turn_id, asked_ms=now
        )
        self._pending[request.request_id] = _Pending(device, turn_id, trace_id, now)
        try:
            sent = await self._send(device, mesh_pb2.CAPTURE_REQUEST, request, trace_id)
        except Exception as exc:
            log.warning("capture request to %s not sent: %s", device, exc)
            sent = False
        if not sent:
            self._pending.pop(request.request_id, None)
        return sent

    # ------------------------------------------------------------------ receiving
    def _asked(self, opened: Opened, photo_id: str) -> _Pending | None:
        pending = self._pending.get(photo_id)
        if pending is None or pending.device != opened.sender:
            self._drop(DropReason.MALFORMED, opened.sender, f"photo {photo_id[:64]} not asked for")
            return None
        return pending

    async def on_chunk(self, opened: Opened) -> None:
        chunk = opened.payload
        assert isinstance(chunk, vision_pb2.PhotoChunk)
        pending = self._asked(opened, chunk.photo_id)
        if pending is None:
            return
        if (
            not 0 < chunk.total <= MAX_PIECES
            or chunk.index >= chunk.total
            or len(chunk.data) > MAX_PIECE_BYTES
            or (pending.total and pending.total != chunk.total)
        ):
            self._drop(DropReason.MALFORMED, opened.sender, f"photo piece of {chunk.photo_id}")
            return
        pending.total = chunk.total
        pending.pieces[chunk.index] = bytes(chunk.data)

    async def on_photo(self, opened: Opened) -> None:
        photo = opened.payload
        assert isinstance(photo, vision_pb2.Photo)
        pending = self._asked(opened, photo.photo_id)
        if pending is None:
            return
        del self._pending[photo.photo_id]
        if photo.error:
            log.warning(
                "%s could not take photo %s: %s", opened.sender, photo.photo_id, photo.error
            )
            self._count("vision.capture_failed")
            return
        data = b"".join(pending.pieces[i] for i in sorted(pending.pieces))
        problem = ""
        if len(pending.pieces) != photo.chunks or pending.total != photo.chunks:
            problem = f"{len(pending.pieces)} of {photo.chunks} pieces"
        elif len(data) != photo.size or hashlib.sha256(data).digest() != photo.sha256:
            problem = "digest or size mismatch"
        if problem:
            self._drop(DropReason.MALFORMED, opened.sender, f"photo {photo.photo_id}: {problem}")
            return
        assert self._tasks is not None
        self._tasks.spawn(
            self._keep(opened.sender, pending, photo, data), f"photo-{photo.photo_id}"
        )

    # ------------------------------------------------------------------ keeping
    def analyse(self, jpeg: bytes) -> Analysis:
        """Faces (and who they are) and text in one JPEG (blocking)."""
        faces = self.faces.faces(jpeg)
        people = self.store.people()
        names = []
        for face in faces:
            who = recognise(face.embedding, people)
            if who is not None and who[0] not in names:
                names.append(who[0])
        return Analysis(len(faces), tuple(names), self._ocr(jpeg))

    def _get_archive(self) -> Archive:
        if self._archive is None:
            self._archive = self._archive_source()
        return self._archive

    def _store_image(self, device: str, photo: vision_pb2.Photo, data: bytes, trace: str) -> str:
        archive = self._get_archive()
        used = sum(o.size for o in archive.objects() if o.kind == "image" and o.deleted_ms is None)
        if used + len(data) > self.budget_bytes:
            raise VisionError("vision.budget", budget=self.budget_bytes)
        meta = {
            "format": "jpeg",
            "photo_id": photo.photo_id,
            "width": photo.width,
            "height": photo.height,
            "sensitivity": "high",
            "camera": photo.camera,
        }
        obj = NewObject("image", data, device, trace, photo.taken_ms or self._clock(), meta)
        result = archive.store([obj])[0]
        if not result.stored or result.object_id is None:
            raise VisionError("vision.photo_refused", id=photo.photo_id, reason=result.reason)
        return result.object_id

    async def _keep(
        self, device: str, pending: _Pending, photo: vision_pb2.Photo, data: bytes
    ) -> None:
        try:
            archive_id = await asyncio.to_thread(
                self._store_image, device, photo, data, pending.trace_id
            )
        except Exception as exc:  # the archive's refusal, or its budget: nothing is kept
            log.error("photo %s from %s not kept: %s", photo.photo_id, device, exc)
            self._count("vision.not_stored")
            return
        # the entry first (a reference: archive id and digest), so every device shows the
        # snapshot at once; faces and text follow into vision.db (seconds of CPU)
        await self._entry(
            f"photo-{photo.photo_id}",
            PHOTO_KIND,
            entry_text(self._name_of(device)),
            pending.trace_id,
            {
                "photo": photo.photo_id,
                "archive": archive_id,
                "sha256": photo.sha256.hex(),
                "device": device,
                "sensitivity": "high",
            },
        )
        try:
            analysis = await asyncio.to_thread(self.analyse, data)
        except VisionError as exc:  # kept, not read: no face model or no Tesseract here
            log.error("photo %s from %s kept but not analysed: %s", photo.photo_id, device, exc)
            self._count("vision.not_analysed")
            analysis = Analysis(0, (), "")
        taken = photo.taken_ms or self._clock()
        description = describe(self._name_of(device), taken, analysis)
        seen = await self._describe(photo.photo_id, data)
        if seen:
            description += f"; seen / 看到: {seen}"
        record = PhotoRecord(
            id=photo.photo_id,
            device=device,
            turn_id=pending.turn_id,
            taken_ms=taken,
            archive_id=archive_id,
            sha256=photo.sha256.hex(),
            size=len(data),
            width=photo.width,
            height=photo.height,
            faces=analysis.faces,
            people=analysis.people,
            text=analysis.text,
            description=description,
            device_name=self._name_of(device),
        )
        await asyncio.to_thread(self.store.add_photo, record)
        try:  # recall finds it by its text, people and description
            await asyncio.to_thread(self.index.put, [record])
        except Exception as exc:
            log.error("photo %s not indexed for recall: %s", photo.photo_id, exc)
            self._count("vision.not_indexed")
        self._count("vision.stored")
        log.info("photo %s from %s: %s", photo.photo_id, device, record.description)
        self.stored.set()

    async def _describe(self, photo_id: str, jpeg: bytes) -> str | None:
        """The ``vision`` model's description (``None``: not allowed, none configured, or
        it failed — the local description stands)."""
        if self._describer is None:
            return None
        try:
            seen = await asyncio.to_thread(self._describer, jpeg)
        except Exception as exc:
            log.warning("photo %s: no model description: %s", photo_id, exc)
            self._count("vision.not_described")
            return None
        if seen:
            self._count("vision.described")
        return seen

    # ------------------------------------------------------------------ naming
    async def name_last(self, name: str) -> tuple[int, int]:
        """The owner's "this is my sister" on the latest snapshot (within ``NAMING_MS``): its
        one face becomes a sample of ``name`` (checked against the others as enrolment is);
        returns (samples now, samples needed to recognise)."""
        name = check_name(name)
        since = self._clock() - NAMING_MS
        photo = next(iter(self.store.photos(since_ms=since, limit=1)), None)
        if photo is None:
            raise VisionError("vision.no_recent_photo", minutes=NAMING_MS // 60_000)

        def add() -> int:
            data = self._get_archive().read(photo.archive_id)
            sample = one_face(f"photo {photo.id}", self.faces.faces(data))
            existing = self.store.samples(name)
            if len(existing) + 1 >= MIN_PHOTOS:
                enrol(name, [sample], existing)
            count = self.store.add_samples(name, [sample])
            record = self.store.add_person_to(photo.id, name)
            if record is not None:
                self.index.put([record])
            return count

        return await asyncio.to_thread(add), MIN_PHOTOS

    # ------------------------------------------------------------------ recall
    def last_text(self, since_ms: int = 0) -> PhotoRecord | None:
        """The latest photo with text on it."""
        return next((p for p in self.store.photos(since_ms=since_ms) if p.text), None)

    def people_seen(self, since_ms: int = 0) -> list[PhotoRecord]:
        """Photos with recognised people, newest first."""
        return [p for p in self.store.photos(since_ms=since_ms) if p.people]
