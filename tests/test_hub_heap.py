"""The hub's own process freezes what its start made (cli/hub.py ``freeze_start_heap``): one
collection first, so no garbage is frozen, then the live heap out of later collections'
reach (what that saves is measured by ``bench/mesh_roundtrip.py``'s 10-device p99)."""

from __future__ import annotations

import gc
import weakref

from cli.hub import freeze_start_heap


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_garbage_is_collected_and_the_live_heap_frozen() -> None:
    kept = _Node()
    dropped = _Node()
    gone = weakref.ref(dropped)
    del dropped
    gc.disable()  # no collection of its own between here and the call
    try:
        assert gone() is not None  # still there: only a collection frees a cycle
        freeze_start_heap()
        assert gone() is None  # collected before the freeze, not kept forever
        frozen = gc.get_freeze_count()
        assert frozen > 0
        assert not any(o is kept for o in gc.get_objects())  # out of the collector's lists
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
        gc.enable()
    assert any(o is kept for o in gc.get_objects())  # back in its generation
