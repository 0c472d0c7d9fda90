"""Forgetting whole over the real mesh (issue 22): a hub and two devices as processes; the
plan carried out at the hub's console; the entries leave every device's replica — list,
history and files — and the hub's stores."""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path

import pytest

from provisioning.bundle import Bundle
from tests.mesh_harness import Mesh
from tests.waiting import poll

SAID = "my dentist moved the filling to Wednesday at nine"
KEPT = "buy oat milk on the way home"


def device_files_holding(bundle: Path, needle: str) -> list[str]:
    folder = Bundle.load(bundle).state_dir / "replicas"
    raw = needle.encode()
    return sorted(p.name for p in folder.iterdir() if p.is_file() and raw in p.read_bytes())


def timeline_of(mesh: Mesh, bundle: Path) -> str:
    return mesh.yimi("timeline", "--bundle", str(bundle)).stdout


def shows(mesh: Mesh, bundle: Path, text: str) -> bool:
    return text in timeline_of(mesh, bundle)


def forgotten_on(bundle: Path, needle: str) -> bool:
    return device_files_holding(bundle, needle) == []


@pytest.mark.slow
async def test_forgetting_reaches_every_devices_replica(mesh: Mesh) -> None:
    mac = mesh.add_device("mac1", "mac")
    phone = mesh.add_device("phone1", "phone")
    mesh.env["YIMI_CATCHUP_INTERVAL_S"] = "1"
    async with mesh.hub_in_process() as hub:
        edges = [
            await asyncio.to_thread(mesh.start_edge, b, hub=mesh.hub_target) for b in (mac, phone)
        ]
        await mesh.say_answered(mac, SAID)
        await mesh.say_answered(mac, KEPT)
        for bundle in (mac, phone):
            await poll(partial(shows, mesh, bundle, SAID), 30, f"{bundle.name} timeline")
            assert device_files_holding(bundle, "dentist")
        recall_dir = mesh.home / "recall"
        await poll(
            lambda: any(b"dentist" in p.read_bytes() for p in recall_dir.glob("*.db*")),
            60,
            "the timeline in the recall index",
        )

        shown = await asyncio.to_thread(
            mesh.yimi, "memory", "forget", "--about", "dentist", "--home", str(mesh.home)
        )
        assert "timeline entry" in shown.stdout and "(--yes)" in shown.stdout, shown
        assert SAID in timeline_of(mesh, phone)  # shown, not approved: nothing deleted
        done = await asyncio.to_thread(
            mesh.yimi, "memory", "forget", "--about", "dentist", "--home", str(mesh.home), "--yes"
        )
        assert done.returncode == 0 and "Deleted" in done.stdout, (done.stdout, done.stderr)

        for bundle in (mac, phone):
            await poll(
                partial(forgotten_on, bundle, "dentist"),
                60,
                f"the entry gone from {bundle.name}'s replica files",
            )
            view = timeline_of(mesh, bundle)
            assert SAID not in view and KEPT in view, view
        rows = mesh.hub_query("SELECT text FROM timeline WHERE text LIKE '%dentist%'")
        assert rows == []
        assert not any(
            b"dentist" in p.read_bytes() for p in (mesh.home / "replicas").iterdir() if p.is_file()
        )
        archive = mesh.home / "archive"
        held = [p.name for p in archive.rglob("*") if p.is_file() and b"dentist" in p.read_bytes()]
        assert held == [], held  # the typed original (L5) went too
        assert any(b"oat milk" in p.read_bytes() for p in archive.rglob("*") if p.is_file())
        assert hub.replicas.timeline() and SAID not in [e.text for e in hub.replicas.timeline()]
        for edge in edges:
            mesh.stop(edge)
