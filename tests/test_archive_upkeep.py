"""The archive keeps itself (issue 22): a simulated week of voice traffic under the hub's
upkeep — packed and expired on schedule, admission never refusing while something can be
reclaimed, a really full disk reported "not stored" — and upkeep yielding to requests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hub.archive.archive import DAY_S, Archive, NewObject
from hub.archive.errors import ArchiveError
from hub.archive.maintainer import ArchiveMaintainer
from hub.archive.pacing import UploadPacer
from hub.archive.settings import ArchiveSettings
from tests.test_archive import Clock, Disk, GiB
from tests.waiting import poll

HOUR_S = 3600.0
PER_HOUR = 4
"""utterances an hour, each a second of speech-like audio (32,000 bytes)"""


def utterance(n: int) -> bytes:
    t = np.arange(16_000) / 16_000
    tone = 3000 * np.sin(2 * np.pi * (180 + n % 40) * t) * (1 + np.sin(2 * np.pi * 3 * t))
    noise = np.random.default_rng(n).integers(-3, 4, 16_000)
    return (tone + noise).astype("<i2").tobytes()


@pytest.mark.slow
async def test_a_simulated_week_is_packed_expired_and_never_refused(tmp_path: Path) -> None:
    clock = Clock()
    week_bytes = 7 * 24 * PER_HOUR * 32_000
    # room for ~3 days of hot audio above the 4 GiB reserve: a week fits only if upkeep runs
    disk = Disk(capacity=4 * GiB + week_bytes * 3 // 7)
    with Archive(tmp_path / "archive", disk=disk, now=clock, pack_after_s=600.0) as archive:
        upkeep = ArchiveMaintainer(archive, max_packs=1_000)
        stored = refused = 0
        for hour in range(7 * 24):
            results = archive.store(
                [
                    NewObject(
                        "audio",
                        utterance(hour * PER_HOUR + i),
                        "glasses",
                        f"t-{hour}-{i}",
                        int(clock() * 1000),
                        {"utterance_id": f"u-{hour}-{i}"},
                    )
                    for i in range(PER_HOUR)
                ]
            )
            stored += sum(r.stored for r in results)
            refused += sum(not r.stored for r in results)
            clock.advance(HOUR_S)
            report = await upkeep.run_once()
            assert not any(not p.ok for p in report.packed)
            # on schedule: nothing hot is older than the retention plus one round
            now_ms = clock() * 1000
            for o in archive.objects():
                if o.hot_path is not None and o.stored_ms < now_ms - (2 * DAY_S + HOUR_S) * 1000:
                    raise AssertionError(
                        f"{o.id} still hot after {(now_ms - o.stored_ms) / 3.6e6:.0f} h"
                    )
        assert refused == 0 and stored == 7 * 24 * PER_HOUR
        status = archive.status()
        assert status.refusals == 0 and status.cold_bytes > 0
        assert status.hot_bytes <= (2 * 24 + 2) * PER_HOUR * 32_000
        assert status.last_pack_ms is not None and status.next_expiry_ms is not None
        assert status.headroom_bytes > 0
        # every object of the week reads back, from hot or from its cold pack
        for o in archive.objects()[::97]:
            assert len(archive.read(o.id)) == 32_000

        # the disk really full (nothing left to reclaim): refused and said so, never claimed
        disk.capacity = 4 * GiB + status.hot_bytes + 1000
        archive.emergency_reclaim = False
        [fresh] = archive.store([NewObject("audio", utterance(0), "glasses", "t-x", 0)])
        assert not fresh.stored and fresh.object_id is None
        assert str(fresh).startswith("not stored: audio (32000 bytes)")
        assert archive.status().refusals == 1


async def test_upkeep_yields_while_a_request_window_is_open(tmp_path: Path) -> None:
    clock = Clock()
    windows = [True, True, True, False]
    with Archive(tmp_path / "archive", disk=Disk(), now=clock) as archive:
        archive.store([NewObject("audio", utterance(1), "g", "t", 0)])
        clock.advance(700)
        async with ArchiveMaintainer(
            archive, interval_s=0.01, busy=lambda: windows.pop(0) if windows else False
        ) as upkeep:
            await poll(lambda: upkeep.rounds > 0, 20, "an upkeep round")
        assert upkeep.deferred >= 1 and windows == []  # waited for the window to close
        assert [p["state"] for p in archive.packs()] == ["verified"]


async def test_cold_pack_uploads_are_paced(tmp_path: Path) -> None:
    """``upload_bytes_per_s``: a pack of n bytes takes n / rate seconds of the budget before
    the next may go (the first goes at once), across rounds; the clock and sleep are
    injected, so nothing waits for real. A stopping maintainer ends a wait at once."""
    clock = Clock()
    pace = Clock()
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        pace.advance(s)

    pacer = UploadPacer(100_000, clock=pace, sleep=sleep)
    with Archive(
        tmp_path / "archive",
        disk=Disk(),
        now=clock,
        pack_after_s=600.0,
        pack_target_bytes=64_000,  # two utterances a pack
        pacer=pacer,
    ) as archive:
        archive.store([NewObject("audio", utterance(i), "glasses", f"t-{i}", 0) for i in range(6)])
        clock.advance(HOUR_S)
        upkeep = ArchiveMaintainer(archive, max_packs=2)
        first = await upkeep.run_once()
        second = await upkeep.run_once()
        packs = [*first.packed, *second.packed]
        assert len(packs) == 3 and all(p.ok for p in packs)
        sizes = [p.pack_bytes for p in packs]
        # the first upload at once; each next one waits out the previous one's share
        assert slept == pytest.approx([s / 100_000 for s in sizes[:2]], rel=1e-6)
        assert pacer.waited_s == pytest.approx(sum(sizes[:2]) / 100_000)
        # the hub stopping: a waiting upload gives up (raises; the objects stay hot)
        archive.store([NewObject("audio", utterance(9), "glasses", "t-9", 0)])
        clock.advance(HOUR_S)
        pacer.stop()
        with pytest.raises(ArchiveError) as err:
            archive.pack()
        assert err.value.key == "archive.stopping"
        assert archive.objects(trace_id="t-9")[0].pack_id is None
    assert ArchiveSettings().upload_bytes_per_s == 0  # unpaced unless configured
