"""Disk admission for L5 writes: free bytes AND free inodes must stay above a reserve.

A write of ``n`` bytes is admitted when ``free_bytes ≥ reserve_bytes + n`` and
``free_inodes ≥ reserve_inodes`` (defaults 4 GiB and 500,000), read with ``os.statvfs`` of
the archive folder. A filesystem that reports no inode table (``f_files == 0``, e.g. btrfs)
has no inode limit. The reading is injectable so tests can simulate a nearly full disk.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_RESERVE_BYTES = 4 << 30
DEFAULT_RESERVE_INODES = 500_000


@dataclass(frozen=True)
class DiskSpace:
    free_bytes: int
    free_inodes: int | None
    """``None``: the filesystem has no inode limit."""


DiskReader = Callable[[Path], DiskSpace]


def disk_space(path: Path) -> DiskSpace:
    """What an unprivileged writer may still use on the filesystem holding ``path``."""
    st = os.statvfs(path)
    inodes = None if st.f_files == 0 else st.f_favail
    return DiskSpace(free_bytes=st.f_bavail * st.f_frsize, free_inodes=inodes)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Decision:
    ok: bool
    space: DiskSpace
    write_bytes: int
    reason: str = ""


@dataclass(frozen=True)
class AdmissionPolicy:
    reserve_bytes: int = DEFAULT_RESERVE_BYTES
    reserve_inodes: int = DEFAULT_RESERVE_INODES

    def check(self, space: DiskSpace, write_bytes: int) -> Decision:
        problems: list[str] = []
        need = self.reserve_bytes + write_bytes
        if space.free_bytes < need:
            problems.append(
                f"free space {space.free_bytes:,} B ({human_bytes(space.free_bytes)}) is under "
                f"the {self.reserve_bytes:,} B reserve + the {write_bytes:,} B write"
            )
        if space.free_inodes is not None and space.free_inodes < self.reserve_inodes:
            problems.append(
                f"free inodes {space.free_inodes:,} are under the {self.reserve_inodes:,} reserve"
            )
        return Decision(not problems, space, write_bytes, "; ".join(problems))
