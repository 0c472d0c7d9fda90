"""mDNS hub discovery over real zeroconf on loopback (no mocks).

Every test uses fresh random fingerprints and home ids, so adverts from other tests or
processes on the same host cannot be confused with ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

from sync.discovery import (
    INTERFACES_ENV,
    SERVICE_TYPE,
    HubAdvert,
    HubAdvertiser,
    browse_hubs,
    mdns_interfaces,
)

pytestmark = pytest.mark.timeout(60)

LOOPBACK = ["127.0.0.1"]
GONE_WINDOW = 1.5
"""seconds a browse waits to show an advert is gone; the same window finds a live one"""
REPO = Path(__file__).resolve().parents[1]

# Advertises until its stdin reaches EOF or it gets SIGTERM; prints "ready <name>" once
# the advert is registered. Interfaces come from $YIMI_MDNS_INTERFACES.
CHILD = """
import asyncio, signal, sys
from sync.discovery import HubAdvertiser

async def main() -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    advertiser = HubAdvertiser(
        home_id=sys.argv[1], fingerprint=sys.argv[2], grpc_port=50051, mqtt_port=8883,
        version="9.9.9",
    )
    async with advertiser:
        print("ready", advertiser.name, flush=True)
        waits = [asyncio.ensure_future(reader.read()), asyncio.ensure_future(stop.wait())]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for waiting in waits:
            waiting.cancel()
        await asyncio.gather(*waits, return_exceptions=True)

asyncio.run(main())
"""


def new_fingerprint() -> str:
    return secrets.token_hex(32)


def new_home() -> str:
    return secrets.token_hex(8)


def advertiser(home_id: str, fingerprint: str, **kwargs: object) -> HubAdvertiser:
    options: dict[str, object] = {
        "grpc_port": 50051,
        "mqtt_port": 8883,
        "version": "1.2.3",
        "interfaces": LOOPBACK,
    }
    options.update(kwargs)
    return HubAdvertiser(home_id=home_id, fingerprint=fingerprint, **options)  # type: ignore[arg-type]


async def test_finds_advertiser_in_same_process() -> None:
    home, fp = new_home(), new_fingerprint()
    async with advertiser(home, fp, grpc_port=41001, mqtt_port=41002, version="0.1.0") as hub:
        loop = asyncio.get_running_loop()
        started = loop.time()
        hubs = await browse_hubs(timeout=10.0, fingerprint=fp, interfaces=LOOPBACK)
        elapsed = loop.time() - started

    assert hubs == [
        HubAdvert(
            home_id=home,
            fingerprint=fp,
            host="127.0.0.1",
            grpc_port=41001,
            mqtt_port=41002,
            version="0.1.0",
            name=hub.name,
        )
    ]
    assert hub.name == f"yimi-hub-{fp[:12]}.{SERVICE_TYPE}"
    assert elapsed < 5.0, "the browse should return as soon as the pinned hub resolves"


@contextlib.asynccontextmanager
async def child_advertiser(home: str, fp: str) -> AsyncIterator[asyncio.subprocess.Process]:
    env = {**os.environ, INTERFACES_ENV: "127.0.0.1"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CHILD,
        home,
        fp,
        cwd=REPO,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def test_finds_advertiser_in_another_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # Both sides take loopback from the environment: proves real multicast between processes.
    monkeypatch.setenv(INTERFACES_ENV, "127.0.0.1")
    home, fp = new_home(), new_fingerprint()
    async with child_advertiser(home, fp) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line.startswith(b"ready "), line
        name = line.decode().split(" ", 1)[1].strip()

        hubs = await browse_hubs(timeout=10.0, fingerprint=fp)
        assert hubs == [
            HubAdvert(
                home_id=home,
                fingerprint=fp,
                host="127.0.0.1",
                grpc_port=50051,
                mqtt_port=8883,
                version="9.9.9",
                name=name,
            )
        ]

        # Closing stdin makes the child withdraw its advert (goodbye) and exit cleanly.
        proc.stdin.close()
        assert await asyncio.wait_for(proc.wait(), 15) == 0

    assert await browse_hubs(timeout=GONE_WINDOW, fingerprint=fp) == []


async def test_fingerprint_filter_is_exact() -> None:
    home = new_home()
    fp_a = new_fingerprint()
    # Same first 63 characters: a prefix or fuzzy match would confuse the two.
    fp_b = fp_a[:-1] + ("0" if fp_a[-1] != "0" else "1")
    # Default instance names derive from the fingerprint's start: name these explicitly.
    hub_a = advertiser(home, fp_a, grpc_port=42001, instance=f"hub a {home}")
    hub_b = advertiser(home, fp_b, grpc_port=42002, instance=f"hub b {home}")
    try:
        async with asyncio.TaskGroup() as group:  # probing takes ~1 s each: overlap it
            group.create_task(hub_a.start())
            group.create_task(hub_b.start())
        assert (hub_a.name, hub_b.name) == (
            f"hub a {home}.{SERVICE_TYPE}",
            f"hub b {home}.{SERVICE_TYPE}",
        )
        # Both are visible...
        both = await browse_hubs(timeout=1.5, home_id=home, interfaces=LOOPBACK)
        assert sorted((h.fingerprint, h.grpc_port) for h in both) == sorted(
            [(fp_a, 42001), (fp_b, 42002)]
        )
        # ...but a fingerprint selects exactly one.
        only_a = await browse_hubs(timeout=10.0, fingerprint=fp_a, interfaces=LOOPBACK)
        assert [(h.fingerprint, h.grpc_port, h.name) for h in only_a] == [(fp_a, 42001, hub_a.name)]
        only_b = await browse_hubs(timeout=10.0, fingerprint=fp_b, interfaces=LOOPBACK)
        assert [(h.fingerprint, h.grpc_port, h.name) for h in only_b] == [(fp_b, 42002, hub_b.name)]
        # A prefix, or different case, of a fingerprint matches nothing.
        for partial in (fp_a[:-1], fp_a.upper()):
            assert await browse_hubs(timeout=0.5, fingerprint=partial, interfaces=LOOPBACK) == []
        # Filters combine: the right fingerprint in the wrong home matches nothing.
        assert (
            await browse_hubs(
                timeout=0.5, fingerprint=fp_a, home_id=new_home(), interfaces=LOOPBACK
            )
            == []
        )
    finally:
        await asyncio.gather(hub_a.close(), hub_b.close())


async def test_malformed_adverts_are_skipped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="sync.discovery")
    home, fp = new_home(), new_fingerprint()
    good = {"home": home, "fp": fp, "grpc": "43001", "mqtt": "43002", "ver": "1.0"}
    tag = secrets.token_hex(3)
    bad_txt: dict[str, dict[bytes, bytes] | dict[str, str]] = {
        "no-txt": {},
        "missing-fp": {k: v for k, v in good.items() if k != "fp"},
        "missing-mqtt": {k: v for k, v in good.items() if k != "mqtt"},
        "grpc-not-int": {**good, "grpc": "abc"},
        "grpc-signed": {**good, "grpc": "+4300"},
        "mqtt-out-of-range": {**good, "mqtt": "70000"},
        "long-home": {**good, "home": "h" * 200},
        "long-version": {**good, "ver": "v" * 100},
        "short-fp": {**good, "fp": fp[:32]},
        "not-utf8": {
            b"home": b"\xff\xfe",
            **{k.encode(): v.encode() for k, v in good.items() if k != "home"},
        },
    }
    infos = [
        AsyncServiceInfo(
            SERVICE_TYPE,
            f"bad-{label}-{tag}.{SERVICE_TYPE}",
            port=43001,
            properties=props,
            server=f"bad-{tag}.local.",
            addresses=[socket.inet_aton("127.0.0.1")],
        )
        for label, props in bad_txt.items()
    ]
    raw = AsyncZeroconf(interfaces=LOOPBACK)
    try:
        announcing = await asyncio.gather(
            *(raw.async_register_service(info, allow_name_change=True) for info in infos)
        )
        async with advertiser(home, fp, grpc_port=43001, mqtt_port=43002, version="1.0") as hub:
            # No fingerprint: browse the whole window so every advert gets resolved.
            hubs = await browse_hubs(timeout=2.0, home_id=home, interfaces=LOOPBACK)
        await asyncio.gather(*announcing)
    finally:
        await raw.async_close()

    assert [(h.fingerprint, h.name) for h in hubs] == [(fp, hub.name)]
    skipped = {
        record.args[0]
        for record in caplog.records
        if isinstance(record.args, tuple) and record.msg.startswith("skipping advert")
    }
    assert {info.name for info in infos} <= skipped


async def test_advert_gone_after_advertiser_exits() -> None:
    home, fp = new_home(), new_fingerprint()
    async with advertiser(home, fp) as hub:
        found = await browse_hubs(timeout=GONE_WINDOW, fingerprint=fp, interfaces=LOOPBACK)
        assert [h.name for h in found] == [hub.name]
    assert await browse_hubs(timeout=GONE_WINDOW, fingerprint=fp, interfaces=LOOPBACK) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"fingerprint": "abc"},
        {"fingerprint": "A" * 64},
        {"home_id": ""},
        {"home_id": "x" * 65},
        {"home_id": "has space"},
        {"grpc_port": 0},
        {"mqtt_port": 65536},
        {"version": ""},
        {"version": "v" * 33},
        {"addresses": []},
        {"addresses": ["not-an-ip"]},
        {"instance": "a.b"},
        {"instance": "x" * 64},
        {"interfaces": []},
        {"interfaces": ["eth0"]},
    ],
)
def test_advertiser_rejects_what_a_browser_would_skip(kwargs: dict[str, object]) -> None:
    options: dict[str, object] = {"home_id": new_home(), "fingerprint": new_fingerprint()}
    options.update(kwargs)
    home_id = options.pop("home_id")
    fingerprint = options.pop("fingerprint")
    with pytest.raises(ValueError):
        advertiser(home_id, fingerprint, **options)  # type: ignore[arg-type]


def test_interfaces_default_to_all_and_honour_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from zeroconf import InterfaceChoice

    monkeypatch.delenv(INTERFACES_ENV, raising=False)
    assert mdns_interfaces() is InterfaceChoice.All
    monkeypatch.setenv(INTERFACES_ENV, " 127.0.0.1 , ::1,")
    assert mdns_interfaces() == ["127.0.0.1", "::1"]
    assert mdns_interfaces(["192.0.2.2"]) == ["192.0.2.2"]  # an explicit argument wins
    monkeypatch.setenv(INTERFACES_ENV, "")
    assert mdns_interfaces() is InterfaceChoice.All
    monkeypatch.setenv(INTERFACES_ENV, "lo")
    with pytest.raises(ValueError, match=INTERFACES_ENV):
        mdns_interfaces()
