"""The glasses see (issue 19) on the real mesh: the hub in this process (mosquitto, gRPC, the
rule-based brain, the archive), the glasses' and the phone's edge daemons and ``yimi say`` /
``yimi people`` / ``yimi photos`` as processes; the glasses' camera is the simulated folder
camera (FAKE hardware: real photographs from scikit-image and rendered signs, one frame per
snapshot).

- "Yimi, take a picture" typed on the glasses → the hub asks the glasses, the JPEG comes up
  in sealed pieces, lands in the L5 archive (digest checked) and a ``photo`` entry reaches
  every device; a person named with ``yimi people add`` from augmented photos is recognised
  on a new photo of her and not on ``camera.png``; ``yimi people forget`` shows what it
  would delete, and with ``--yes`` removes her face data, her name from the photos and the
  hub's reply that named her (hub.db, recall, every device's replica);
- "what was that sign?" answers from OCR, in English and in Chinese."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from edge_agent.timeline import device_timeline
from hub.archive.settings import open_archive
from hub.mesh.daemon import HubDaemon
from hub.vision.store import PhotoRecord
from provisioning.bundle import Bundle
from storage.sqlite import read_rows
from tests import vision_kit as kit
from tests.mesh_harness import Mesh
from tests.waiting import poll

pytestmark = pytest.mark.slow


def photos_on(bundle: Path) -> list[str]:
    """The photo entries a device's replicas hold."""
    return [e.text for e in device_timeline(Bundle.load(bundle)) if e.kind == "photo"]


def replies_on(bundle: Path) -> list[str]:
    """The reply entries a device's replicas hold."""
    return [e.text for e in device_timeline(Bundle.load(bundle)) if e.kind == "reply"]


@asynccontextmanager
async def glasses_seeing(
    mesh: Mesh, frames: list[tuple[str, Any]], tmp_path: Path
) -> AsyncIterator[tuple[HubDaemon, Path, Path]]:
    """The hub, the glasses (camera: ``frames`` in order) and a phone."""
    folder = tmp_path / "frames"
    folder.mkdir()
    for name, rgb in frames:
        kit.write_png(rgb, folder / name)
    glasses = mesh.add_device("specs", "glasses")
    phone = mesh.add_device("phone1", "phone")
    async with mesh.hub_in_process() as hub:
        await asyncio.to_thread(
            mesh.start_edge, glasses, "--camera", str(folder), hub=mesh.hub_target
        )
        await asyncio.to_thread(mesh.start_edge, phone, hub=mesh.hub_target)
        yield hub, glasses, phone


async def snapshot(mesh: Mesh, hub: HubDaemon, glasses: Path, words: str) -> PhotoRecord:
    """Ask for a picture on the glasses; the photo the hub kept."""
    count = len(hub.vision.store.photos())
    out = await mesh.say_answered(glasses, words)
    assert "Taking a picture." in out or "好的，拍照。" in out, out
    await poll(lambda: len(hub.vision.store.photos()) > count, 30, f"photo {count + 1}")
    return hub.vision.store.photos()[0]


async def test_a_named_person_is_recognised_on_a_new_snapshot_and_forgotten(
    mesh: Mesh, tmp_path: Path
) -> None:
    enrol = kit.enrolment_files(tmp_path / "enrol")
    add = ["people", "add", kit.ASTRONAUT, "--home", str(mesh.home), "--photo"]
    added = await asyncio.to_thread(mesh.yimi, *add, *map(str, enrol), check=True)
    assert f"{kit.ASTRONAUT}: 4 face samples" in added.stdout, added.stdout
    frames = [("1-eileen.png", kit.new_photo()), ("2-cameraman.png", kit.cameraman())]
    async with glasses_seeing(mesh, frames, tmp_path) as (hub, glasses, phone):
        first = await snapshot(mesh, hub, glasses, "Yimi, take a picture")
        edge = next(p for p in mesh.procs if p.name == f"edge-{glasses.name}")
        assert "● camera" in edge.text()  # the HUD's capture indicator
        assert first.people == (kit.ASTRONAUT,), first
        with open_archive(mesh.home) as archive:
            info = archive.info(first.archive_id)
            data = archive.read(first.archive_id)
        assert info.kind == "image" and info.meta["sensitivity"] == "high"
        assert hashlib.sha256(data).hexdigest() == first.sha256 == info.sha256
        assert cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) is not None
        kinds = [kind for _, _, kind, _ in mesh.hub_timeline()]
        assert kinds.count("photo") == 1, kinds
        await poll(lambda: photos_on(glasses) and photos_on(phone), 20, "the photo everywhere")

        second = await snapshot(mesh, hub, glasses, "remember this")  # camera.png
        assert second.people == (), second
        out = await mesh.say_answered(glasses, "who did I meet today?")
        assert kit.ASTRONAUT in out, out

        # the hub's reply that named her, on the hub and on every device
        seen = f"On your photos: {kit.ASTRONAUT}."
        await poll(lambda: seen in replies_on(phone), 20, "the reply on the phone")
        forget = ["people", "forget", "--home", str(mesh.home), kit.ASTRONAUT]
        plan = await asyncio.to_thread(mesh.yimi, *forget, check=True)
        assert "delete their 4 face samples" in plan.stdout and seen in plan.stdout, plan.stdout
        assert "(--yes)" in plan.stdout and kit.ASTRONAUT in hub.vision.store.people()
        gone = await asyncio.to_thread(mesh.yimi, *forget, "--yes", check=True)
        assert "4 face samples deleted" in gone.stdout, gone.stdout
        assert "1 timeline entries deleted" in gone.stdout, gone.stdout
        texts = [text for _, _, kind, text in mesh.hub_timeline() if kind == "reply"]
        assert not any(kit.ASTRONAUT in t for t in texts), texts
        await poll(lambda: seen not in replies_on(phone), 20, "the reply gone from the phone")
        assert seen not in replies_on(glasses)
        assert hub.vision.store.people() == {}
        assert all(not p.people for p in hub.vision.store.photos())
        assert read_rows(mesh.home / "vision.db", "SELECT count(*) FROM samples") == [(0,)]
        search = ["memory", "search", "--home", str(mesh.home), "--json", "photo", kit.ASTRONAUT]
        found = await asyncio.to_thread(mesh.yimi, *search, check=True)
        assert '"photo:' in found.stdout and kit.ASTRONAUT not in found.stdout, found.stdout


async def test_what_was_that_sign_answers_from_ocr_in_english_and_chinese(
    mesh: Mesh, tmp_path: Path
) -> None:
    frames = [
        ("1-sign-en.png", kit.sign(kit.SIGN_EN, kit.FONT_EN)),
        ("2-sign-zh.png", kit.sign(kit.SIGN_ZH, kit.FONT_ZH)),
    ]
    async with glasses_seeing(mesh, frames, tmp_path) as (hub, glasses, phone):
        first = await snapshot(mesh, hub, glasses, "take a photo")
        assert kit.SIGN_EN in first.text, first
        out = await mesh.say_answered(glasses, "what was that sign?")
        assert kit.SIGN_EN in out, out
        second = await snapshot(mesh, hub, glasses, "拍张照")
        assert kit.SIGN_ZH in second.text, second
        out = await mesh.say_answered(glasses, "那个牌子上写的是什么")
        assert kit.SIGN_ZH in out and "照片上写着" in out, out
        listed = await asyncio.to_thread(mesh.yimi, "photos", "--bundle", str(phone), check=True)
        assert listed.stdout.count("photo · 照片 (specs)") == 2, listed.stdout
        hub_list = await asyncio.to_thread(mesh.yimi, "photos", "--home", str(mesh.home))
        assert kit.SIGN_EN in hub_list.stdout and kit.SIGN_ZH in hub_list.stdout, hub_list.stdout
        # recall finds the snapshot by what was read on it
        search = ["memory", "search", "--home", str(mesh.home), "--json", "bookshop"]
        found = await asyncio.to_thread(mesh.yimi, *search, check=True)
        # the photo item is the best hit (the reply that quoted it ranks below: a reply's
        # importance is lower), and the one item of the snapshot: its timeline entry (a
        # reference) is not indexed beside it
        first_hit = found.stdout.splitlines()[0]
        assert f'"photo:{first.id}"' in first_hit and kit.SIGN_EN in first_hit, found.stdout
        assert '"timeline:photo-' not in found.stdout, found.stdout
