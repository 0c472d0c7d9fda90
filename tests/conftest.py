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
