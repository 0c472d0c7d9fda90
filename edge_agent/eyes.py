"""The glasses' camera on the mesh: one snapshot for each ``CAPTURE_REQUEST`` of the hub.

The hub asks only when the owner did ("take a picture", "记住这个"); the device never captures
on its own. While it captures the HUD shows an indicator (a line ``[NAME] ● camera`` on the
daemon's output). The JPEG goes up in ``PHOTO_CHUNK`` pieces (sealed like every envelope),
then the ``PHOTO`` with its size and SHA-256; a device without a camera (``--camera`` not
given) answers with the error instead.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging

from edge_agent.port import Handlers, SendToHub
from hardware.camera import Camera
from protos import mesh_pb2, vision_pb2
from protos.clock import now_ms
from protos.errors import YimiError
from sync.envelope import Opened

log = logging.getLogger(__name__)

PIECE_BYTES = 192 * 1024


def pieces(data: bytes, size: int = PIECE_BYTES) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


class Eyes:
    def __init__(self, name: str, camera: Camera | None, send: SendToHub) -> None:
        self.name = name
        self.camera = camera
        self._send = send
        self._lock = asyncio.Lock()

    def handlers(self) -> Handlers:
        return {mesh_pb2.CAPTURE_REQUEST: self.on_request}

    async def on_request(self, opened: Opened) -> None:
        request = opened.payload
        assert isinstance(request, vision_pb2.CaptureRequest)
        async with self._lock:  # one capture at a time
            await self._capture(request, opened.trace_id)

    async def _capture(self, request: vision_pb2.CaptureRequest, trace_id: str) -> None:
        photo = vision_pb2.Photo(photo_id=request.request_id, turn_id=request.turn_id)
        if self.camera is None:
            photo.error = "no camera on this device (yimi edge run --camera)"
            await self._send(mesh_pb2.PHOTO, photo, trace_id=trace_id)
            return
        print(f"[{self.name}] ● camera", flush=True)
        try:
            shot = await asyncio.to_thread(self.camera.capture)
        except YimiError as exc:
            log.warning("capture failed: %s", exc)
            photo.error = str(exc)[:300]
            await self._send(mesh_pb2.PHOTO, photo, trace_id=trace_id)
            return
        parts = pieces(shot.jpeg)
        for index, data in enumerate(parts):
            chunk = vision_pb2.PhotoChunk(
                photo_id=request.request_id, index=index, total=len(parts), data=data
            )
            await self._send(mesh_pb2.PHOTO_CHUNK, chunk, trace_id=trace_id)
        photo.taken_ms = now_ms()
        photo.width, photo.height = shot.width, shot.height
        photo.chunks = len(parts)
        photo.size = len(shot.jpeg)
        photo.sha256 = hashlib.sha256(shot.jpeg).digest()
        photo.camera = shot.camera
        await self._send(mesh_pb2.PHOTO, photo, trace_id=trace_id)
        log.info("photo %s sent: %d bytes in %d pieces", photo.photo_id, photo.size, len(parts))
