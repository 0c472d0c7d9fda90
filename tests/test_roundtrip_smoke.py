from __future__ import annotations

import pytest

from tests.mesh_harness import Mesh
from tests.waiting import poll_sync

pytestmark = pytest.mark.slow


def test_say_from_two_devices_lands_in_order_and_is_acked(mesh: Mesh) -> None:
    g = mesh.add_device("glasses1", "glasses")
    p = mesh.add_device("phone1", "phone")
    mesh.start_hub()
    for i in range(3):
        for bundle in (g, p):
            r = mesh.say(bundle, f"hello {i} from {bundle.name}")
            assert r.returncode == 0, r.stderr
            assert f"I heard: hello {i} from {bundle.name}" in r.stdout
    rows = mesh.hub_timeline()
    utterances = [text for _, _, kind, text in rows if kind == "utterance"]
    assert utterances == [
        f"hello {i} from {b}" for i in range(3) for b in ("bundle-glasses1", "bundle-phone1")
    ]
    poll_sync(lambda: len(mesh.hub_query("SELECT * FROM deliveries")) == 6, 10, "6 ACKs")
