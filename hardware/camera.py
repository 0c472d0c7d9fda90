"""Cameras: one interface, a real backend (OpenCV ``VideoCapture``) and simulated ones.

``open_camera(spec)`` parses ``yimi edge run --camera``: ``cam`` (or ``cam:INDEX``) is the
real camera through OpenCV; an image file, a folder of frames (taken in name order, one per
capture, the last one repeated) or a video file (one frame per capture, the last repeated)
are the simulated ones. ``camera.capture()`` returns one :class:`Snapshot`: a JPEG of at most
``MAX_SIDE`` pixels on its longer side and at most ``MAX_JPEG_BYTES`` bytes (the quality is
lowered until it fits). Nothing captures on its own: a device calls ``capture`` only when
the owner asked.

OpenCV is imported when a camera is opened (``opencv-python-headless``, the ``vision``
extra); without it, opening one is a :class:`CameraError` naming the fix.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hardware.errors import CameraError

log = logging.getLogger(__name__)

MAX_SIDE = 1280
"""pixels: a snapshot's longer side at most"""
MAX_JPEG_BYTES = 512 * 1024
"""bytes: a snapshot's JPEG at most"""
QUALITIES = (90, 80, 70, 60, 50, 40)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
VIDEO_SUFFIXES = (".mp4", ".avi", ".mkv", ".mov", ".webm", ".mjpeg")


@dataclass(frozen=True)
class Snapshot:
    jpeg: bytes
    width: int
    height: int
    camera: str
    """which backend took it: ``cam:0``, ``file``, ``dir``, ``video``"""


class Camera(Protocol):
    name: str

    def capture(self) -> Snapshot: ...

    def close(self) -> None: ...


def _cv2() -> Any:
    try:
        import cv2
    except ImportError as exc:
        raise CameraError("camera.no_opencv", reason=str(exc)) from exc
    return cv2


def encode_jpeg(frame: Any, camera: str) -> Snapshot:
    """A BGR frame (numpy, H x W x 3) as a bounded :class:`Snapshot`."""
    cv2 = _cv2()
    if frame is None or getattr(frame, "ndim", 0) not in (2, 3) or frame.size == 0:
        raise CameraError("camera.no_frame", camera=camera)
    h, w = frame.shape[:2]
    scale = min(1.0, MAX_SIDE / max(h, w))
    if scale < 1.0:
        frame = cv2.resize(
            frame, (round(w * scale), round(h * scale)), interpolation=cv2.INTER_AREA
        )
        h, w = frame.shape[:2]
    for quality in QUALITIES:
        ok, buf = cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, quality])
        if ok and len(buf) <= MAX_JPEG_BYTES:
            return Snapshot(bytes(buf), int(w), int(h), camera)
    raise CameraError("camera.too_large", camera=camera, limit=MAX_JPEG_BYTES)


def read_image(path: Path) -> Any:
    """An image file as a BGR frame; :class:`CameraError` if missing or not an image."""
    cv2 = _cv2()
    if not path.is_file():
        raise CameraError("camera.missing", path=str(path))
    frame = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if frame is None:
        raise CameraError("camera.not_image", path=str(path))
    return frame


class FileCamera:
    """FAKE hardware: every capture is the same image file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = "file"
        read_image(path)  # refuse a bad file at start, not at the first request

    def capture(self) -> Snapshot:
        return encode_jpeg(read_image(self.path), self.name)

    def close(self) -> None:
        pass


class FolderCamera:
    """FAKE hardware: the images of a folder in name order, one per capture; the last one
    is repeated once they are used up."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.name = "dir"
        self._next = 0
        self._lock = threading.Lock()
        if not self._frames():
            raise CameraError("camera.empty", path=str(folder))

    def _frames(self) -> list[Path]:
        return sorted(p for p in self.folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)

    def capture(self) -> Snapshot:
        with self._lock:
            frames = self._frames()
            if not frames:
                raise CameraError("camera.empty", path=str(self.folder))
            path = frames[min(self._next, len(frames) - 1)]
            self._next += 1
        log.info("camera: frame %s", path.name)
        return encode_jpeg(read_image(path), self.name)

    def close(self) -> None:
        pass


class VideoCamera:
    """A ``cv2.VideoCapture``: a real camera (``cam:INDEX``) or, as FAKE hardware, a video
    file read one frame per capture (the last frame repeated at its end)."""

    def __init__(self, source: int | Path, name: str) -> None:
        cv2 = _cv2()
        self.name = name
        self._lock = threading.Lock()
        self._last: Any = None
        self._cap = cv2.VideoCapture(source if isinstance(source, int) else str(source))
        if not self._cap.isOpened():
            raise CameraError("camera.unavailable", camera=name)

    def capture(self) -> Snapshot:
        with self._lock:
            ok, frame = self._cap.read()
            if ok:
                self._last = frame
            elif self._last is None:
                raise CameraError("camera.no_frame", camera=self.name)
            return encode_jpeg(self._last, self.name)

    def close(self) -> None:
        self._cap.release()


def open_camera(spec: str) -> Camera:
    """The camera ``--camera SPEC`` names (see the module doc)."""
    if spec == "cam" or spec.startswith("cam:"):
        index = spec.partition(":")[2] or "0"
        if not index.isdigit():
            raise CameraError("camera.spec", spec=spec)
        return VideoCamera(int(index), f"cam:{index}")
    path = Path(spec)
    if path.is_dir():
        return FolderCamera(path)
    if not path.exists():
        raise CameraError("camera.missing", path=spec)
    if path.suffix.lower() in VIDEO_SUFFIXES:
        return VideoCamera(path, "video")
    return FileCamera(path)
