"""``slot_lists: {at_start: …}`` in ``home.yaml``: by default the hub reads the device and
shop lists as it starts (the home and errands packages are running before the owner's first
request); with ``at_start: false`` they start at the first request that needs them, and that
request reads them (and waits for them) before it is understood."""

from __future__ import annotations

import pytest

from hub.brain.errors import BrainError
from hub.brain.slots import SlotSettings
from hub.mesh.daemon import HubDaemon
from tests.mesh_harness import Mesh

SLOT_PACKAGES = ["errands", "home"]


def test_the_setting_is_read_and_anything_else_is_refused_in_both_languages() -> None:
    assert SlotSettings.from_config({}) == SlotSettings(at_start=True)
    assert SlotSettings.from_config(None).at_start is True
    assert SlotSettings.from_config({"slot_lists": {}}).at_start is True
    assert SlotSettings.from_config({"slot_lists": {"at_start": False}}).at_start is False
    bad: object
    for bad in ("no", [], {"at_start": "false"}, {"at_start": 0}, {"at_startup": False}):
        with pytest.raises(BrainError) as info:
            SlotSettings.from_config({"slot_lists": bad})
        assert info.value.key == "slot_lists.config"
        assert "at_start: true or false" in info.value.text("en")
        assert "at_start: true 或 false" in info.value.text("zh")


def running(hub: HubDaemon) -> list[str]:
    """The packages with a live server process now."""
    return list(hub.consent.packages()[1])


@pytest.mark.slow
async def test_the_lists_are_read_at_start_unless_the_home_says_at_first_need(
    mesh: Mesh,
) -> None:
    phone = mesh.add_device("phone1", "phone")
    mesh.configure(slot_lists={"at_start": True})
    async with mesh.hub_in_process() as hub:
        # the hub's start waited for the lists: both packages were started for them
        assert running(hub) == SLOT_PACKAGES

    mesh.configure(slot_lists={"at_start": False})
    async with mesh.hub_in_process() as hub:
        assert running(hub) == []
        await mesh.say_answered(phone, "what time is it")  # needs no list: nothing starts
        assert running(hub) == []
        # a device request reads the lists first (this home has no such light: the reply
        # says what the hub can do), starting both packages for it
        await mesh.say_answered(phone, "turn on the kitchen light")
        assert running(hub) == SLOT_PACKAGES
