"""Transient broker logins (sync/mqtt.py): names, and slot leases by lock file."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from sync.mqtt import TRANSIENT_SLOTS, SlotLease, transient_username


def test_transient_usernames() -> None:
    assert transient_username("a1b2", 0) == "a1b2.t0"
    assert transient_username("hub", TRANSIENT_SLOTS - 1) == f"hub.t{TRANSIENT_SLOTS - 1}"
    with pytest.raises(ValueError):
        transient_username("hub", TRANSIENT_SLOTS)


def test_leases_in_one_folder_never_share_a_slot(tmp_path: Path) -> None:
    leases = [SlotLease(tmp_path) for _ in range(TRANSIENT_SLOTS + 1)]
    slots = [lease.acquire() for lease in leases]
    assert slots == [*range(TRANSIENT_SLOTS), None]  # every slot held: none left
    leases[3].release()
    assert leases[-1].acquire() == 3  # a released slot is free again
    for lock in tmp_path.iterdir():
        assert stat.S_IMODE(lock.stat().st_mode) == 0o600, lock
    for lease in leases:
        lease.release()
    again = SlotLease(tmp_path)
    assert again.acquire() == 0
    again.release()
