"""The hub's per-device publish rate (hub/mesh/ratelimit.py) on a fake clock."""

from __future__ import annotations

import logging

import pytest

from hub.mesh.ratelimit import MAX_TRACKED, PublishRate, RateLimits


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def admitted(rate: PublishRate, device: str, n: int, size: int = 10) -> int:
    return sum(rate.admit(device, size) for _ in range(n))


def test_a_burst_then_the_sustained_rate_per_device() -> None:
    clock = FakeClock()
    rate = PublishRate(RateLimits(messages_per_s=50, burst_messages=200), clock=clock)
    assert admitted(rate, "a", 1000) == 200  # the burst, then nothing at the same instant
    assert admitted(rate, "b", 10) == 10  # another device has its own bucket
    clock.now += 1.0
    assert admitted(rate, "a", 1000) == 50
    clock.now += 60.0  # refills up to the burst, not beyond
    assert admitted(rate, "a", 1000) == 200


def test_bytes_are_limited_too() -> None:
    clock = FakeClock()
    limits = RateLimits(bytes_per_s=1000, burst_bytes=10_000)
    rate = PublishRate(limits, clock=clock)
    assert admitted(rate, "a", 100, size=1000) == 10
    clock.now += 2.0
    assert admitted(rate, "a", 100, size=1000) == 2
    assert rate.admit("a", 0) is True  # an empty message costs only a message token


def test_drops_are_logged_once_per_period(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    rate = PublishRate(RateLimits(burst_messages=1, messages_per_s=0.001), clock=clock)
    with caplog.at_level(logging.WARNING, logger="hub.mesh.ratelimit"):
        assert admitted(rate, "a", 1001) == 1
        clock.now += 11.0
        assert admitted(rate, "a", 5) == 0
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert (
        "1 message(s) dropped" in lines[0] and "1000 message(s) dropped" in lines[1]
    )  # 999 unreported + 1


def test_the_tracked_devices_are_bounded() -> None:
    rate = PublishRate(clock=FakeClock())
    for i in range(MAX_TRACKED + 10):
        assert rate.admit(f"d{i}", 1)
    assert len(rate._buckets) == MAX_TRACKED


def test_the_limits_come_from_home_yaml_and_bad_ones_are_named() -> None:
    assert RateLimits.of(None) == RateLimits()
    got = RateLimits.of({"messages_per_s": 500, "burst_messages": 1000})
    assert (got.messages_per_s, got.burst_messages) == (500.0, 1000.0)
    assert got.bytes_per_s == RateLimits().bytes_per_s
    for bad, named in (
        ({"messages_per_s": 0}, "messages_per_s"),
        ({"burst_bytes": "lots"}, "burst_bytes"),
        ({"messages_per_s": True}, "messages_per_s"),
        ({"per_minute": 5}, "per_minute"),
        (["messages_per_s"], "mapping"),
    ):
        with pytest.raises(ValueError, match=named):
            RateLimits.of(bad)
