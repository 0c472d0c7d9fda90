"""Vision pieces on their own (issue 19): enrolment rules, the simulated cameras and their
errors, the glasses answering a capture request, and the hub refusing photos it did not ask
for or whose digest is wrong — with real JPEGs, a real archive and real face models."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from google.protobuf.message import Message

from edge_agent.eyes import Eyes
from hardware.camera import MAX_JPEG_BYTES, MAX_SIDE, FolderCamera, encode_jpeg, open_camera
from hardware.errors import CameraError
from hub.archive.admission import DiskSpace
from hub.archive.archive import Archive
from hub.vision.errors import VisionError
from hub.vision.faces import Face
from hub.vision.people import LOO_LINE, Person, Sample, enrol, one_face, recognise
from hub.vision.service import Vision
from protos import mesh_pb2, vision_pb2
from sync.envelope import DropReason, Opened
from tests import vision_kit as kit
from tests.waiting import poll


def vec(*head: float) -> Any:
    v = np.zeros(128)
    v[: len(head)] = head
    return v


def test_enrolment_needs_three_consistent_photos_with_one_face_each() -> None:
    near = [Sample(f"p{i}", vec(0.5, 0.01 * i)) for i in range(3)]
    done = enrol("Ann", near)
    assert len(done.loo) == 3 and max(done.loo) < LOO_LINE
    with pytest.raises(VisionError, match="at least 3"):
        enrol("Ann", near[:2])
    with pytest.raises(VisionError, match=r"stranger\.png does not look like"):
        enrol("Ann", [*near, Sample("stranger.png", vec(0.5, 0.0, 1.5))])
    with pytest.raises(VisionError, match="no face"):
        one_face("empty.png", [])
    two = [Face((0, 0, 9, 9), vec(1.0)), Face((20, 0, 9, 9), vec(2.0))]
    with pytest.raises(VisionError, match="2 faces"):
        one_face("group.png", two)
    people = {"Ann": Person("Ann", vec(0.5), 3), "Bo": Person("Bo", vec(-0.5), 3)}
    assert recognise(vec(0.45), people) == ("Ann", pytest.approx(0.05))
    assert recognise(vec(0.0, 2.0), people) is None


def test_the_folder_camera_takes_its_frames_in_order_then_repeats_the_last(
    tmp_path: Path,
) -> None:
    for name, level in (("b.png", 200), ("a.png", 50)):
        kit.write_png(np.full((40, 60, 3), level, np.uint8), tmp_path / name)
    cam = open_camera(str(tmp_path))
    assert isinstance(cam, FolderCamera)

    def shade() -> int:
        gray = cv2.imdecode(np.frombuffer(cam.capture().jpeg, np.uint8), cv2.IMREAD_GRAYSCALE)
        assert gray is not None
        return int(gray.mean())

    shades = [shade() for _ in "xyz"]
    assert shades[0] == pytest.approx(50, abs=3) and shades[1:] == [shades[1]] * 2
    assert shades[1] == pytest.approx(200, abs=3)


def test_a_camera_that_cannot_be_used_says_why(tmp_path: Path) -> None:
    with pytest.raises(CameraError, match="no image, folder or video"):
        open_camera(str(tmp_path / "nope.png"))
    (tmp_path / "notes.png").write_text("not an image")
    with pytest.raises(CameraError, match="not an image"):
        open_camera(str(tmp_path / "notes.png"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CameraError, match="holds no images"):
        open_camera(str(tmp_path / "empty"))
    with pytest.raises(CameraError, match="cam:INDEX"):
        open_camera("cam:front")


def test_a_snapshot_is_bounded() -> None:
    noise = np.random.default_rng(19).integers(0, 255, (3000, 4000, 3), dtype=np.uint8)
    shot = encode_jpeg(noise, "test")
    assert max(shot.width, shot.height) == MAX_SIDE and len(shot.jpeg) <= MAX_JPEG_BYTES


class Sent:
    def __init__(self) -> None:
        self.items: list[tuple[int, Message]] = []

    async def __call__(self, kind: int, payload: Message, *, trace_id: str | None = None) -> None:
        self.items.append((kind, payload))


def opened(kind: int, payload: Message, sender: str = "glasses-1") -> Opened:
    return Opened(sender, 1, 0, kind, "hub", "trace-1", payload)


async def test_glasses_answer_a_capture_request_with_pieces_and_a_digest(tmp_path: Path) -> None:
    kit.write_png(kit.astronaut(), tmp_path / "a.png")
    sent = Sent()
    eyes = Eyes("specs", open_camera(str(tmp_path / "a.png")), sent)
    request = vision_pb2.CaptureRequest(request_id="ph-1", turn_id="u-1")
    await eyes.on_request(opened(mesh_pb2.CAPTURE_REQUEST, request, "hub"))
    *chunks, (kind, photo) = sent.items
    assert kind == mesh_pb2.PHOTO and isinstance(photo, vision_pb2.Photo)
    data = b"".join(c.data for _, c in chunks)  # type: ignore[attr-defined]
    assert photo.chunks == len(chunks) and photo.sha256 == hashlib.sha256(data).digest()
    blind = Sent()
    await Eyes("specs", None, blind).on_request(opened(mesh_pb2.CAPTURE_REQUEST, request, "hub"))
    ((_, answer),) = blind.items
    assert "no camera" in answer.error  # type: ignore[attr-defined]


async def test_the_hub_keeps_only_photos_it_asked_for_with_the_right_digest(
    tmp_path: Path,
) -> None:
    drops: list[str] = []
    entries: list[str] = []
    to_device: list[Message] = []

    async def send(device: str, kind: int, msg: Message, trace_id: str | None = None) -> bool:
        to_device.append(msg)
        return True

    async def entry(eid: str, kind: str, text: str, trace: str, meta: dict[str, object]) -> bool:
        entries.append(text)
        return True

    def archive() -> Archive:
        return Archive(tmp_path / "archive", disk=lambda _: DiskSpace(1 << 40, None))

    def drop(reason: DropReason, sender: str, detail: str) -> None:
        drops.append(detail)

    shot = encode_jpeg(cv2.cvtColor(kit.sign(kit.SIGN_EN, kit.FONT_EN), cv2.COLOR_RGB2BGR), "t")

    def photo(pid: str, data: bytes = shot.jpeg) -> vision_pb2.Photo:
        return vision_pb2.Photo(
            photo_id=pid, chunks=1, size=len(data), sha256=hashlib.sha256(data).digest()
        )

    def chunk(pid: str, data: bytes = shot.jpeg) -> vision_pb2.PhotoChunk:
        return vision_pb2.PhotoChunk(photo_id=pid, index=0, total=1, data=data)

    async with Vision(
        tmp_path, send=send, entry=entry, archive=archive, drop=drop, count=lambda _: None
    ) as vision:
        vision.index.put = lambda photos: None  # type: ignore[method-assign]  # no text model here
        # nobody asked: refused
        await vision.on_chunk(opened(mesh_pb2.PHOTO_CHUNK, chunk("ph-x")))
        await vision.on_photo(opened(mesh_pb2.PHOTO, photo("ph-x")))
        assert drops == ["photo ph-x not asked for"] * 2
        # asked, but the digest is another image's
        assert await vision.capture("glasses-1", "u-1", "trace-1")
        pid = to_device[-1].request_id  # type: ignore[attr-defined]
        await vision.on_chunk(opened(mesh_pb2.PHOTO_CHUNK, chunk(pid, shot.jpeg[:-1] + b"x")))
        await vision.on_photo(opened(mesh_pb2.PHOTO, photo(pid)))
        assert drops[-1] == f"photo {pid}: digest or size mismatch"
        # asked of the glasses, answered by another device: refused
        assert await vision.capture("glasses-1", "u-2", "trace-2")
        pid = to_device[-1].request_id  # type: ignore[attr-defined]
        await vision.on_photo(opened(mesh_pb2.PHOTO, photo(pid), sender="watch-1"))
        assert drops[-1] == f"photo {pid} not asked for"
        # the right one: stored, read, on the timeline
        await vision.on_chunk(opened(mesh_pb2.PHOTO_CHUNK, chunk(pid)))
        await vision.on_photo(opened(mesh_pb2.PHOTO, photo(pid)))
        await poll(lambda: vision.store.photos(), 30, "the photo kept")
        (kept,) = vision.store.photos()
        assert kept.sha256 == hashlib.sha256(shot.jpeg).hexdigest()
        assert kit.SIGN_EN in kept.text and entries == ["photo · 照片 (glasses-1)"]


class HubEyes:
    """A :class:`Vision` over a real archive in ``root``, its device side played here."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.asked: list[vision_pb2.CaptureRequest] = []
        self.entries: list[str] = []

    async def send(self, device: str, kind: int, msg: Message, trace_id: str | None = None) -> bool:
        assert isinstance(msg, vision_pb2.CaptureRequest)
        self.asked.append(msg)
        return True

    async def entry(
        self, eid: str, kind: str, text: str, trace: str, meta: dict[str, object]
    ) -> bool:
        self.entries.append(text)
        return True

    def vision(self) -> Vision:
        v = Vision(
            self.root,
            send=self.send,
            entry=self.entry,
            archive=lambda: Archive(self.root / "archive", disk=lambda _: DiskSpace(1 << 40, None)),
            drop=lambda *_: None,
            count=lambda _: None,
            ocr=lambda _: "",
        )
        v.index.put = lambda photos: None  # type: ignore[method-assign]  # no text model here
        return v

    async def snap(self, vision: Vision, rgb: Any) -> None:
        """The owner asks, the glasses send ``rgb``; returns once the hub has read it."""
        count = len(vision.store.photos())
        assert await vision.capture("glasses-1", f"u-{count}", f"t-{count}")
        data = encode_jpeg(cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2BGR), "t").jpeg
        pid = self.asked[-1].request_id
        await vision.on_chunk(
            opened(mesh_pb2.PHOTO_CHUNK, vision_pb2.PhotoChunk(photo_id=pid, total=1, data=data))
        )
        photo = vision_pb2.Photo(
            photo_id=pid, chunks=1, size=len(data), sha256=hashlib.sha256(data).digest()
        )
        await vision.on_photo(opened(mesh_pb2.PHOTO, photo))
        await poll(lambda: len(vision.store.photos()) > count, 30, "the photo read")


async def test_this_is_my_sister_names_the_face_on_the_latest_photos(tmp_path: Path) -> None:
    eyes = HubEyes(tmp_path)
    async with eyes.vision() as vision:
        with pytest.raises(VisionError, match="no photo in the last 10 minutes"):
            await vision.name_last("sister")
        for rgb in kit.enrolment_variants()[:3]:
            await eyes.snap(vision, rgb)
            assert vision.store.photos()[0].people == ()
            count, needed = await vision.name_last("sister")
        assert (count, needed) == (3, 3)
        assert vision.store.photos()[0].people == ("sister",)  # the photo named
        await eyes.snap(vision, kit.new_photo())
        assert vision.store.photos()[0].people == ("sister",)  # recognised on a new one
        await eyes.snap(vision, kit.cameraman())
        with pytest.raises(VisionError, match="no face"):
            await vision.name_last("sister")
