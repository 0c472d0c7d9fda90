"""Faces in an image: where they are and a 128-d descriptor of each.

Detection is OpenCV's bundled frontal-face Haar cascade (``opencv-python-headless`` < 5);
each box is aligned with dlib's 5-point landmark predictor (not the 68-point one, whose
training data is not licensed for commercial use) into a 150 x 150 chip, and dlib's ResNet
(``dlib_face_recognition_resnet_model_v1`` from ``face-recognition-models``, CC0) turns the
chip into a 128-d descriptor; two descriptors of one person are usually closer than 0.6
(Euclidean). The models load on first use; their files are found without importing
``face_recognition_models`` (it needs ``pkg_resources``).
"""

from __future__ import annotations

import importlib.util
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hub.vision.errors import VisionError

Vector = npt.NDArray[np.float64]

MIN_FACE_PX = 40
"""pixels: smaller faces are not looked for"""
MAX_FACES = 16
"""faces described per image at most (the largest ones)"""
CASCADE = "haarcascade_frontalface_default.xml"


@dataclass(frozen=True)
class Face:
    box: tuple[int, int, int, int]
    """x, y, width, height in the image"""
    embedding: Vector


def model_dir() -> Path:
    spec = importlib.util.find_spec("face_recognition_models")
    if spec is None or not spec.submodule_search_locations:
        raise VisionError("vision.unavailable", reason="face-recognition-models is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "models"


class FaceModel:
    """The detector, the aligner and the descriptor, loaded once (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded: tuple[Any, Any, Any, Any, Any] | None = None

    def _models(self) -> tuple[Any, Any, Any, Any, Any]:
        with self._lock:
            if self._loaded is None:
                try:
                    import cv2
                    import dlib
                except ImportError as exc:
                    raise VisionError("vision.unavailable", reason=str(exc)) from exc
                models = model_dir()
                haar = Path(cv2.data.haarcascades)  # type: ignore[attr-defined]
                cascade = cv2.CascadeClassifier(str(haar / CASCADE))
                if cascade.empty():
                    raise VisionError("vision.unavailable", reason=f"no {CASCADE} in OpenCV")
                shape = dlib.shape_predictor(str(models / "shape_predictor_5_face_landmarks.dat"))
                net = dlib.face_recognition_model_v1(
                    str(models / "dlib_face_recognition_resnet_model_v1.dat")
                )
                self._loaded = (cv2, dlib, cascade, shape, net)
            return self._loaded

    def decode(self, image: bytes) -> Any:
        """JPEG/PNG bytes as an RGB array; :class:`VisionError` if they are not an image."""
        cv2 = self._models()[0]
        frame = cv2.imdecode(np.frombuffer(image, np.uint8), cv2.IMREAD_COLOR)
        if frame is None:
            raise VisionError("vision.photo_refused", id="?", reason="not an image")
        return cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)

    def faces(self, image: bytes | Any) -> list[Face]:
        """Every face in ``image`` (bytes or an RGB array), largest first."""
        cv2, dlib, cascade, shape, net = self._models()
        rgb = self.decode(bytes(image)) if isinstance(image, bytes | bytearray) else image
        rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
        gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
        boxes = cascade.detectMultiScale(gray, 1.1, 5, minSize=(MIN_FACE_PX, MIN_FACE_PX))
        found = sorted((tuple(int(v) for v in b) for b in boxes), key=lambda b: -b[2] * b[3])
        out: list[Face] = []
        for x, y, w, h in found[:MAX_FACES]:
            points = shape(rgb, dlib.rectangle(x, y, x + w, y + h))
            chip = dlib.get_face_chip(rgb, points, size=150, padding=0.25)
            vec = np.asarray(net.compute_face_descriptor(chip), dtype=np.float64)
            out.append(Face((x, y, w, h), vec))
        return out
