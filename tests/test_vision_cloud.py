"""A configured ``vision`` endpoint describes a snapshot only when the owner's cloud rules
allow ``image:*`` (issue 19): a FAKE OpenAI-compatible server on loopback, configured as a
remote endpoint (``local: false``), through a confirmed model change in a real
``providers.db``; the hub's :class:`Vision` over a real archive, real face model and the
real recall index. Allowed → the model's words are in the stored description and recall
finds the photo by them; not allowed → the fake receives nothing and the local description
stands. What goes out is the JPEG and the fixed instruction: no face descriptor, no name."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path

import cv2
import numpy as np
import pytest
from google.protobuf.message import Message

from hardware.camera import encode_jpeg
from hub.archive.admission import DiskSpace
from hub.archive.archive import Archive
from hub.brain.providers import Endpoint, ProviderStore, vision_route
from hub.memory.index import MemoryIndex
from hub.vision.describe import PROMPT, ChatDescriber, provider_describer
from hub.vision.errors import VisionError
from hub.vision.service import Vision
from models.embed import shared_embedder
from protos import mesh_pb2, vision_pb2
from sync.envelope import Opened
from tests import vision_kit as kit
from tests.brain_kit import configure
from tests.fake_openai import FakeOpenAI, Reply, text

SEEN = "a red lighthouse on a rocky shore at sunset"


def providers(root: Path, base_url: str, *, allow_images: bool) -> ProviderStore:
    store = ProviderStore(root / "providers.db", hub_box_secret=b"\x07" * 32, home_id="h1")
    configure(
        store,
        {
            "roles": {"vision": [{"base_url": base_url, "model": "eyes-model", "local": False}]},
            "cloud_sources": ["image:*"] if allow_images else [],
        },
    )
    return store


def opened(kind: int, payload: Message) -> Opened:
    return Opened("glasses-1", 1, 0, kind, "hub", "trace-1", payload)


async def snapshot(root: Path, allow_images: bool, fake: FakeOpenAI) -> tuple[str, MemoryIndex]:
    """One snapshot through the hub's Vision; its stored description, and the index."""
    sent: list[vision_pb2.CaptureRequest] = []

    async def send(device: str, kind: int, msg: Message, trace_id: str | None = None) -> bool:
        assert isinstance(msg, vision_pb2.CaptureRequest)
        sent.append(msg)
        return True

    async def entry(eid: str, kind: str, words: str, trace: str, meta: dict[str, object]) -> bool:
        return True

    providers(root, fake.base_url, allow_images=allow_images).close()
    index = MemoryIndex.for_home(root, embedder=shared_embedder())
    vision = Vision(
        root,
        send=send,
        entry=entry,
        archive=lambda: Archive(root / "archive", disk=lambda _: DiskSpace(1 << 40, None)),
        drop=lambda *_: None,
        count=lambda _: None,
        ocr=lambda _: "",
        describer=provider_describer(
            lambda: ProviderStore(root / "providers.db", hub_box_secret=b"\x07" * 32, home_id="h1")
        ),
    )
    vision.index._index = index  # the real index, on the shared embedding model
    async with vision:
        assert await vision.capture("glasses-1", "u-1", "t-1")
        rgb = np.ascontiguousarray(kit.astronaut())
        data = encode_jpeg(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), "t").jpeg
        pid = sent[-1].request_id
        await vision.on_chunk(
            opened(mesh_pb2.PHOTO_CHUNK, vision_pb2.PhotoChunk(photo_id=pid, total=1, data=data))
        )
        photo = vision_pb2.Photo(
            photo_id=pid, chunks=1, size=len(data), sha256=hashlib.sha256(data).digest()
        )
        await vision.on_photo(opened(mesh_pb2.PHOTO, photo))
        # kept and indexed for recall (the photo row is written before the index is)
        await asyncio.wait_for(vision.stored.wait(), 60)
        (kept,) = vision.store.photos()
        vision.index._index = None  # the test closes it
    return kept.description, index


async def test_the_vision_model_sees_a_snapshot_only_when_the_owner_allows_images(
    tmp_path: Path,
) -> None:
    async with FakeOpenAI() as fake:
        (tmp_path / "no").mkdir()
        local, index = await snapshot(tmp_path / "no", False, fake)
        index.close()
        assert fake.requests == [], "not allowed: the endpoint receives nothing"
        assert "photo taken" in local and "seen" not in local

        fake.queue("eyes-model", text(SEEN))
        (tmp_path / "yes").mkdir()
        described, index = await snapshot(tmp_path / "yes", True, fake)
        try:
            assert SEEN in described and "photo taken" in described, described
            (request,) = fake.requests
            assert request.path.endswith("/v1/chat/completions")
            (message,) = request.body["messages"]
            parts = message["content"]
            assert [p["type"] for p in parts] == ["text", "image_url"]
            assert parts[0]["text"] == PROMPT
            url = parts[1]["image_url"]["url"]
            assert url.startswith("data:image/jpeg;base64,")
            assert base64.b64decode(url.split(",", 1)[1])[:2] == b"\xff\xd8"
            # only the image and the instruction: no face descriptor, no local findings
            assert set(request.body) == {"model", "max_tokens", "messages"}
            # recall finds the photo by the model's words
            hits = index.search("red lighthouse", 3)
            assert hits and hits[0].item_id.startswith("photo:") and SEEN in hits[0].text
        finally:
            index.close()


def test_the_route_skips_a_remote_vision_endpoint_without_image_sources(tmp_path: Path) -> None:
    store = providers(tmp_path, "http://203.0.113.9/v1", allow_images=False)
    try:
        endpoint, skipped = vision_route(store.current())
        assert endpoint is None and "image:* is in cloud_sources" in skipped[0]
    finally:
        store.close()


async def test_a_failing_vision_endpoint_says_why_and_the_local_description_stands(
    tmp_path: Path,
) -> None:
    async with FakeOpenAI() as fake:
        fake.queue("eyes-model", Reply(status=500))
        describer = ChatDescriber(Endpoint(fake.base_url, "eyes-model", local=False), None)
        with pytest.raises(VisionError) as failed:
            await asyncio.to_thread(describer, b"\xff\xd8 not really a jpeg")
        assert failed.value.key == "vision.describe_failed" and "HTTP 500" in str(failed.value)
        fake.queue("eyes-model", Reply(status=500))
        local, index = await snapshot(tmp_path, True, fake)
        index.close()
        assert len(fake.requests) == 2 and "photo taken" in local and "seen" not in local
