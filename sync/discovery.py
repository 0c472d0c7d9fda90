"""Finding the home hub on the local network by mDNS / DNS-SD.

The hub runs a :class:`HubAdvertiser`, which registers one ``_yimi._tcp.local.`` service.
Its SRV port is the gRPC port and its TXT record carries short values only:

======  ==============================================
key     value
======  ==============================================
home    the home id (``[A-Za-z0-9._-]``, at most 64 characters)
fp      the hub's key fingerprint: 64 lowercase hex characters
grpc    the gRPC port, decimal
mqtt    the MQTT port, decimal
ver     the hub's version (printable ASCII, at most 32 characters)
======  ==============================================

A device calls :func:`browse_hubs` with the fingerprint its bundle pins; the browse returns
as soon as a hub advertising exactly that fingerprint has been resolved. An advert is only
a hint: the device still checks the hub's identity over gRPC before trusting it. Adverts
whose TXT record is malformed are skipped (logged at debug level), never raised.

Interfaces. Both sides choose where to speak mDNS the same way: an explicit ``interfaces``
argument (a list of IP addresses) wins; otherwise the environment variable
``YIMI_MDNS_INTERFACES`` (comma-separated IP addresses, e.g. ``127.0.0.1``) is used when set
and non-empty; otherwise every IPv4 interface is used, which is what a real LAN deployment
wants. Tests and multi-process test setups force loopback by passing
``interfaces=["127.0.0.1"]`` or by exporting ``YIMI_MDNS_INTERFACES=127.0.0.1`` to every
process. Loopback multicast works on Linux as is (no ``MULTICAST`` flag needed on ``lo``).

Queries are always sent as QM ("multicast response") questions, so answers are multicast and
every process listening on port 5353 on the host sees them; QU answers would be unicast to
port 5353, where the kernel hands them to just one of the processes sharing that port.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from zeroconf import (
    DNSQuestionType,
    InterfaceChoice,
    IPVersion,
    ServiceStateChange,
    Zeroconf,
)
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

log = logging.getLogger(__name__)

SERVICE_TYPE = "_yimi._tcp.local."
INTERFACES_ENV = "YIMI_MDNS_INTERFACES"
"""environment variable: comma-separated IP addresses to speak mDNS on (default: all)"""

TXT_HOME = "home"
TXT_FINGERPRINT = "fp"
TXT_GRPC = "grpc"
TXT_MQTT = "mqtt"
TXT_VERSION = "ver"

MAX_HOME_CHARS = 64
MAX_VERSION_CHARS = 32
MAX_INSTANCE_BYTES = 63
"""a DNS label"""

_HOME_RE = re.compile(rf"[A-Za-z0-9._-]{{1,{MAX_HOME_CHARS}}}")
_FINGERPRINT_RE = re.compile(r"[0-9a-f]{64}")
_VERSION_RE = re.compile(rf"[\x21-\x7e]{{1,{MAX_VERSION_CHARS}}}")
_PORT_RE = re.compile(r"[0-9]{1,5}")
_QM = DNSQuestionType.QM


@dataclass(frozen=True)
class HubAdvert:
    """One resolved hub advert. ``name`` is the full mDNS service name."""

    home_id: str
    fingerprint: str
    host: str
    grpc_port: int
    mqtt_port: int
    version: str
    name: str


class MalformedAdvert(ValueError):
    """A TXT record (or advertiser argument) that does not follow the format above."""


def mdns_interfaces(interfaces: Sequence[str] | None = None) -> list[str] | InterfaceChoice:
    """The interfaces to use: ``interfaces``, else ``$YIMI_MDNS_INTERFACES``, else all.

    Raises ValueError for an empty explicit list or an entry that is not an IP address.
    """
    if interfaces is None:
        raw = os.environ.get(INTERFACES_ENV, "")
        chosen = [part.strip() for part in raw.split(",") if part.strip()]
        if not chosen:
            return InterfaceChoice.All
        source = INTERFACES_ENV
    else:
        chosen = list(interfaces)
        if not chosen:
            raise ValueError("interfaces must name at least one IP address")
        source = "interfaces"
    for address in chosen:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise ValueError(f"{source}: {address!r} is not an IP address") from None
    return chosen


def _new_zeroconf(interfaces: Sequence[str] | None) -> AsyncZeroconf:
    chosen = mdns_interfaces(interfaces)
    if isinstance(chosen, InterfaceChoice):
        # A LAN deployment: IPv4 on every interface (adverts carry IPv4 addresses).
        return AsyncZeroconf(interfaces=chosen, ip_version=IPVersion.V4Only)
    # A list of addresses: zeroconf picks the IP version from it.
    return AsyncZeroconf(interfaces=chosen)


def _port(key: str, value: str) -> int:
    if not _PORT_RE.fullmatch(value) or not 1 <= int(value) <= 65535:
        raise MalformedAdvert(f"{key}={value[:16]!r} is not a port")
    return int(value)


def _check(key: str, value: str, pattern: re.Pattern[str]) -> str:
    if not pattern.fullmatch(value):
        raise MalformedAdvert(f"{key}={value[:16]!r}{'…' if len(value) > 16 else ''} is invalid")
    return value


def _txt_value(properties: Mapping[bytes, bytes | None], key: str) -> str:
    raw = properties.get(key.encode())
    if raw is None:
        raise MalformedAdvert(f"missing {key}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedAdvert(f"{key} is not UTF-8") from None


def parse_advert(name: str, host: str, properties: Mapping[bytes, bytes | None]) -> HubAdvert:
    """Build a :class:`HubAdvert` from a TXT record; raises :class:`MalformedAdvert`."""
    return HubAdvert(
        home_id=_check(TXT_HOME, _txt_value(properties, TXT_HOME), _HOME_RE),
        fingerprint=_check(
            TXT_FINGERPRINT, _txt_value(properties, TXT_FINGERPRINT), _FINGERPRINT_RE
        ),
        host=host,
        grpc_port=_port(TXT_GRPC, _txt_value(properties, TXT_GRPC)),
        mqtt_port=_port(TXT_MQTT, _txt_value(properties, TXT_MQTT)),
        version=_check(TXT_VERSION, _txt_value(properties, TXT_VERSION), _VERSION_RE),
        name=name,
    )


def _host_of(info: AsyncServiceInfo) -> str | None:
    """The first advertised address, preferring IPv4."""
    for version in (IPVersion.V4Only, IPVersion.V6Only):
        addresses = info.parsed_scoped_addresses(version)
        if addresses:
            return addresses[0]
    return None


async def _cancel_and_wait(task: asyncio.Future[object] | None) -> None:
    if task is None or task.done():
        return
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


class HubAdvertiser:
    """Advertises the hub while entered (``async with``); withdraws the advert on exit.

    ``addresses`` are the addresses put in the advert (the hub's LAN addresses in a real
    deployment); ``interfaces`` chooses where mDNS is spoken (see the module docstring).
    Raises ValueError for arguments that a browser would reject as malformed.
    """

    def __init__(
        self,
        *,
        home_id: str,
        fingerprint: str,
        grpc_port: int,
        mqtt_port: int,
        version: str,
        addresses: Sequence[str] = ("127.0.0.1",),
        instance: str | None = None,
        interfaces: Sequence[str] | None = None,
    ) -> None:
        properties = {
            TXT_HOME: home_id,
            TXT_FINGERPRINT: fingerprint,
            TXT_GRPC: str(grpc_port),
            TXT_MQTT: str(mqtt_port),
            TXT_VERSION: version,
        }
        # The advert must round-trip through the browser's parser.
        parse_advert("", "", {k.encode(): v.encode() for k, v in properties.items()})
        if not addresses:
            raise ValueError("addresses must name at least one IP address")
        packed = [ipaddress.ip_address(address).packed for address in addresses]
        if instance is None:
            instance = f"yimi-hub-{fingerprint[:12]}"
        if not instance or "." in instance or len(instance.encode()) > MAX_INSTANCE_BYTES:
            raise ValueError(f"instance {instance!r} is not a DNS label without dots")
        mdns_interfaces(interfaces)  # validate now rather than on entry
        self._interfaces = None if interfaces is None else list(interfaces)
        self._info = AsyncServiceInfo(
            SERVICE_TYPE,
            f"{instance}.{SERVICE_TYPE}",
            port=grpc_port,
            properties=properties,
            server=f"yimi-hub-{fingerprint[:12]}.local.",
            addresses=packed,
        )
        self._zc: AsyncZeroconf | None = None
        self._announcing: asyncio.Future[object] | None = None

    @property
    def name(self) -> str:
        """The registered service name (zeroconf renames it if the name is already taken)."""
        return self._info.name

    async def start(self) -> None:
        if self._zc is not None:
            raise RuntimeError("HubAdvertiser already started")
        zc = _new_zeroconf(self._interfaces)
        try:
            announcing = await zc.async_register_service(self._info, allow_name_change=True)
        except BaseException:
            await zc.async_close()
            raise
        self._zc = zc
        self._announcing = asyncio.ensure_future(announcing)
        log.info(
            "advertising hub %s (home %s) on mDNS as %s at %s",
            self._info.decoded_properties[TXT_FINGERPRINT],
            self._info.decoded_properties[TXT_HOME],
            self.name,
            self._info.parsed_addresses(),
        )

    async def close(self) -> None:
        zc, self._zc = self._zc, None
        if zc is None:
            return
        try:
            await _cancel_and_wait(self._announcing)
            self._announcing = None
            goodbye = await zc.async_unregister_service(self._info)
            await goodbye
        finally:
            await zc.async_close()
        log.info("withdrew mDNS advert %s", self.name)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


async def browse_hubs(
    *,
    timeout: float = 3.0,
    fingerprint: str | None = None,
    home_id: str | None = None,
    interfaces: Sequence[str] | None = None,
) -> list[HubAdvert]:
    """Browse for hubs for up to ``timeout`` seconds; return those matching every filter.

    ``fingerprint`` and ``home_id`` are compared exactly. With ``fingerprint`` given, the
    browse returns as soon as a matching hub has been resolved. Results are in the order
    they were resolved; a hub that says goodbye during the browse is dropped.
    """
    if timeout < 0:
        raise ValueError("timeout must not be negative")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    found: dict[str, HubAdvert] = {}
    matched = asyncio.Event()
    latest: dict[str, asyncio.Task[None]] = {}
    tasks: set[asyncio.Task[None]] = set()
    zc = _new_zeroconf(interfaces)

    async def resolve(name: str) -> None:
        info = AsyncServiceInfo(SERVICE_TYPE, name)
        remaining_ms = max(0.0, deadline - loop.time()) * 1000
        if not await info.async_request(zc.zeroconf, remaining_ms, question_type=_QM):
            log.debug("could not resolve %s in time", name)
            return
        host = _host_of(info)
        try:
            if host is None:
                raise MalformedAdvert("no address")
            advert = parse_advert(name, host, info.properties)
        except MalformedAdvert as exc:
            found.pop(name, None)
            log.debug("skipping advert %s: %s", name, exc)
            return
        if (fingerprint is not None and advert.fingerprint != fingerprint) or (
            home_id is not None and advert.home_id != home_id
        ):
            found.pop(name, None)
            log.debug("ignoring hub %s: not the one asked for", name)
            return
        log.debug("resolved hub %s", advert)
        found[name] = advert
        if fingerprint is not None:
            matched.set()

    async def guarded_resolve(name: str) -> None:
        try:
            await resolve(name)
        except Exception as exc:  # a bad advert must never break the browse
            log.debug("skipping advert %s: %r", name, exc)

    def forget(name: str, task: asyncio.Task[None]) -> None:
        tasks.discard(task)
        if latest.get(name) is task:
            del latest[name]

    def on_change(
        zeroconf: Zeroconf, service_type: str, name: str, state_change: ServiceStateChange
    ) -> None:
        previous = latest.pop(name, None)
        if previous is not None:
            previous.cancel()
        if state_change is ServiceStateChange.Removed:
            if found.pop(name, None) is not None:
                log.debug("hub %s said goodbye", name)
            return
        task = loop.create_task(guarded_resolve(name), name=f"resolve {name}")
        latest[name] = task
        tasks.add(task)
        task.add_done_callback(functools.partial(forget, name))

    try:
        browser = AsyncServiceBrowser(
            zc.zeroconf, SERVICE_TYPE, handlers=[on_change], question_type=_QM
        )
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline):
                    await matched.wait()
        finally:
            await browser.async_cancel()
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await zc.async_close()
    return list(found.values())
