from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mesh_harness import Mesh, mosquitto_pids


@pytest.fixture
def mesh(tmp_path: Path) -> Iterator[Mesh]:
    """A fresh home on free loopback ports; every process it started is gone afterwards."""
    m = Mesh(tmp_path)
    m.init()
    try:
        yield m
    finally:
        m.close()
        assert mosquitto_pids(str(tmp_path)) == [], "a mosquitto was left behind"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the files of multi-process tests (marked ``slow``) first, each file's tests kept
    together and in order. ``scripts/test`` hands whole files to its workers in this order
    (``--dist loadfile --no-loadscope-reorder``): the long files start at once and the many
    short ones fill in behind them, so both workers finish together instead of one running a
    two-minute file alone at the end."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: order within kept
