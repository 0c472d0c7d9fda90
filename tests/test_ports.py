"""worlds.ports: per-worker port ranges for servers that must be told their port."""

from __future__ import annotations

import socket

import pytest

from worlds import ports


def test_worker_ranges_are_disjoint_and_below_the_ephemeral_range() -> None:
    ranges = [ports.worker_range(""), *(ports.worker_range(f"gw{n}") for n in range(11))]
    seen: set[int] = set()
    for r in ranges:
        assert len(r) == ports.SPAN
        assert not seen & set(r)
        seen |= set(r)
    assert max(seen) < 32768  # Linux's ephemeral ports start there
    assert ports.worker_range("gw11") == ports.worker_range("gw0")  # wraps, never leaves


def test_a_process_takes_its_workers_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    assert ports.worker_range() == range(ports.BASE + 4 * ports.SPAN, ports.BASE + 5 * ports.SPAN)
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert ports.worker_range() == range(ports.BASE, ports.BASE + ports.SPAN)


def test_ports_are_not_handed_out_twice_and_taken_ones_are_skipped() -> None:
    first = ports.port()
    assert first in ports.worker_range()
    with socket.socket() as squatter:
        squatter.bind((ports.HOST, first + 1 if first + 1 in ports.worker_range() else first - 1))
        squatter.listen()
        taken = squatter.getsockname()[1]
        got = [ports.port() for _ in range(20)]
    assert first not in got and len(set(got)) == len(got)
    assert taken not in got
    assert all(p in ports.worker_range() and not ports.in_use(p) for p in got)
