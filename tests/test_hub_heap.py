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
    gc.disable()  # no automatic collection between here and the call
    try:
        kept = _Node()
        dropped = _Node()
        gone = weakref.ref(dropped)
        del dropped
        assert gone() is not None  # still there: only a collection frees a cycle
        freeze_start_heap()
        assert gone() is None  # collected before the freeze, not kept forever
        assert gc.get_freeze_count() > 0
        assert not any(o is kept for o in gc.get_objects())  # out of the collector's lists
        # A later collection does not reach it. (The frozen count itself may fall meanwhile:
        # another thread freeing a frozen object takes it out of the permanent generation.)
        gc.collect()
        assert not any(o is kept for o in gc.get_objects())
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.enable()
    assert any(o is kept for o in gc.get_objects())  # back in its generation
