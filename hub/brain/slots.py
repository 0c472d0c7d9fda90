"""The intent engine's slot lists from live data, and the engine that uses them.

- **contacts** — the address book (canonical name; aliases such as "my colleague", 同事);
- **devices** and **areas** — ``home.list_devices`` through the gateway (a read, audited
  like every call), cached: read again for a device request when the cache is
  :data:`STALE_S` old, and for a request not understood when it is :data:`RETRY_S` old (a
  device added since the last read);
- **shops** — ``errands.list_shops`` when the errands package offers it;
- **lists** — the hub's lists (shopping, to-do; the engine's defaults).

:meth:`LiveSlots.recognize` recognises the sentence, reads the devices and shops again when
the request needs them and they are stale, and calls ``engine.update()`` only when the
lists changed.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hub.brain.errors import BrainError
from hub.brain.intents import DEFAULT_LISTS, IntentEngine, Lang, Match, Named, SlotLists
from hub.gateway import CallContext, Gateway, Receipt, ToolCall

log = logging.getLogger(__name__)

STALE_S = 30.0
"""seconds after which the device and shop lists are read again"""
RETRY_S = 2.0
"""a request not understood reads the devices again if they are older than this"""
SLOW_READ_MS = 250.0
"""a read of the slot lists slower than this is logged at INFO (a turn may wait for it)"""
LIVE_INTENTS = frozenset(
    {
        "HassTurnOn",
        "HassTurnOff",
        "HassLightSet",
        "HassSetPosition",
        "HassSetVolume",
        "HassGetState",
        "YimiOrder",
    }
)
"""requests whose slots come from the device and shop lists"""
SLOTS_TASK = "brain.slots#lookup"
DECLARED_SHOPS = Path(__file__).resolve().parents[2] / "packages" / "errands" / "shops.json"
"""where the errands package declares its sandbox shops (read as data, never imported)"""
"""the ledger task the slot-list reads are recorded under"""


@dataclass(frozen=True)
class SlotSettings:
    """``slot_lists:`` in ``home.yaml``::

    slot_lists:
      at_start: true    # read the device and shop lists as the hub starts (the home
                        # and errands packages start then); false: at the first request
                        # that needs them (a hub short of memory, or a test home)
    """

    at_start: bool = True
    """read the lists (start their packages) at start, not in the owner's first such turn"""

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> SlotSettings:
        """Raises BrainError ``slot_lists.config`` for anything but the one boolean key."""
        raw = (config or {}).get("slot_lists")
        if raw is None:
            return cls()
        if (
            not isinstance(raw, Mapping)
            or set(raw) - {"at_start"}
            or not isinstance(raw.get("at_start", True), bool)
        ):
            raise BrainError("slot_lists.config", found=repr(raw)[:200])
        return cls(at_start=raw.get("at_start", True))


class ContactLike(Protocol):
    name: str
    email: str
    aliases: tuple[str, ...]


class ContactSource(Protocol):
    def find(self, name: str) -> Any: ...


@dataclass(frozen=True)
class Device:
    """One device of the ``home`` listing."""

    entity: str
    name: str
    domain: str
    area: str = ""
    aliases: tuple[str, ...] = ()
    area_names: tuple[str, ...] = ()
    """the area's own spoken names, when the listing gives them (``area_name``)"""


def devices_of(listing: Receipt) -> list[Device]:
    """The devices of a ``home.list_devices`` receipt: its effects (switchable devices, with
    ``name``, optional ``area``, ``domain``, ``aliases``) and its sensor values (whose
    ``source`` is the entity id when no state topic is known)."""
    out: dict[str, Device] = {}
    for e in listing.effects:
        entity = e.target or str(e.fields.get("entity", ""))
        if not entity:
            continue
        domain = str(e.fields.get("domain") or entity.split(".", 1)[0])
        aliases = e.fields.get("aliases") or ()
        area_name = e.fields.get("area_name") or ()
        out[entity] = Device(
            entity,
            str(e.fields.get("name") or entity),
            domain,
            str(e.fields.get("area") or ""),
            tuple(str(a) for a in aliases) if isinstance(aliases, list | tuple) else (),
            (str(area_name),) if isinstance(area_name, str) else tuple(map(str, area_name)),
        )
    for v in listing.values:
        entity = str(getattr(v, "entity", "") or v.source or "")
        if "." not in entity or "/" in entity or entity in out or v.name == "devices":
            continue
        out[entity] = Device(entity, v.name, entity.split(".", 1)[0])
    return list(out.values())


def declared_shops(path: Path = DECLARED_SHOPS) -> list[Named]:
    """The shops the errands package declares (its sandbox's), before ``list_shops`` has
    been read — and for an engine without live lists; none if the file is absent."""
    try:
        rows = json.loads(path.read_text(encoding="utf-8")).get("shops", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [
        Named(
            str(r["shop"]), tuple(dict.fromkeys([str(r["name"]), *map(str, r.get("aliases", []))]))
        )
        for r in rows
        if isinstance(r, dict) and r.get("shop") and r.get("name")
    ]


AREA_NAMES: dict[str, tuple[str, ...]] = {
    "kitchen": ("厨房",),
    "living_room": ("客厅", "起居室"),
    "bedroom": ("卧室", "睡房"),
    "study": ("书房",),
    "hall": ("门厅", "玄关"),
    "hallway": ("走廊", "过道"),
    "bathroom": ("浴室", "卫生间", "洗手间"),
    "dining_room": ("餐厅", "饭厅"),
    "office": ("办公室",),
    "garage": ("车库",),
    "garden": ("花园",),
    "balcony": ("阳台",),
    "kids_room": ("儿童房",),
    "guest_room": ("客房",),
}
"""spoken names of common area ids in Chinese (an area's own names come first)"""


def _area_names(area: str, given: Sequence[str] = ()) -> tuple[str, ...]:
    """``given``, the area id spoken, and its Chinese names: an id as Home Assistant's
    ``suggested_area`` gives it ("Kitchen", "Living room") finds them too."""
    key = "_".join(area.casefold().replace("-", " ").split())
    return tuple(dict.fromkeys([*given, area.replace("_", " "), *AREA_NAMES.get(key, ())]))


@dataclass
class LiveSlots:
    """The brain's intent engine over live slot lists (see the module doc)."""

    gateway: Gateway
    contacts: ContactSource | None = None
    engine: IntentEngine | None = None
    clock: Callable[[], float] = time.monotonic
    devices: list[Device] = field(default_factory=list)
    shops: list[Named] = field(default_factory=declared_shops)
    _done_at: float | None = None
    """when the last read ended (``clock``)"""
    _reading: asyncio.Lock = field(default_factory=asyncio.Lock)
    _lists: SlotLists | None = None
    _calls: Iterator[int] = field(default_factory=itertools.count)
    _failures: dict[tuple[str, str], str] = field(default_factory=dict)
    """(package, tool) → why its last read failed (said once at WARNING)"""
    _contacts_from: list[Any] | None = None
    _contacts_named: tuple[Named, ...] = ()
    """the address book's contacts as the engine names them, made from ``_contacts_from``"""
    _devices_from: list[Device] | None = None
    _devices_named: tuple[tuple[Named, ...], tuple[Named, ...]] = ((), ())
    """(devices, areas) as the engine names them, made from ``_devices_from``"""

    def __post_init__(self) -> None:
        if self.engine is None:
            self.engine = IntentEngine()

    # ------------------------------------------------------------------ recognise
    async def recognize(self, text: str, lang: Lang | None = None) -> Match | None:
        """The request in ``text`` (``None``: not understood), over fresh slot lists.

        The devices and shops are read only for requests that need them: a device or
        order request when they are :data:`STALE_S` old, or one not understood when they
        are :data:`RETRY_S` old (a device added since) — then recognised again."""
        engine = self.engine
        assert engine is not None
        self._update()  # the address book may have changed
        match = engine.recognize(text, lang)
        if match is not None and match.intent not in LIVE_INTENTS:
            return match
        age = float("inf") if self._done_at is None else self.clock() - self._done_at
        if age >= (STALE_S if match is not None else RETRY_S):
            await self.refresh()
            match = engine.recognize(text, lang)
        return match

    async def refresh(self) -> None:
        """Read the devices and shops through the gateway, then update the engine. One read
        at a time: a refresh asked while another runs (the hub's warm-up at start, say)
        waits for it and reads nothing more."""
        asked = self.clock()
        async with self._reading:
            if self._done_at is not None and self._done_at >= asked:
                return  # read while this one waited
            started = time.perf_counter()
            await self._refresh()
            self._done_at = self.clock()
            took_ms = (time.perf_counter() - started) * 1000
            (log.info if took_ms >= SLOW_READ_MS else log.debug)(
                "slot lists read in %.0f ms", took_ms
            )

    async def _refresh(self) -> None:
        # both at once: each may start its package's server (seconds), independently
        listing, shops = await asyncio.gather(
            self._read("home", "list_devices"), self._read("errands", "list_shops")
        )
        if listing is not None:
            self.devices = devices_of(listing)
        if shops is not None:
            self.shops = [
                Named(
                    e.target,
                    tuple(
                        dict.fromkeys(
                            [str(e.fields.get("name") or e.target), *e.fields.get("aliases", [])]
                        )
                    ),
                )
                for e in shops.effects
                if e.target
            ]
        self._update()

    async def _read(self, package: str, tool: str) -> Receipt | None:
        m = self.gateway.catalog.get(package)
        if m is None or tool not in m.tools:
            return None
        call_id = f"slots-{int(time.time() * 1000)}-{next(self._calls)}"
        call = ToolCall(package, tool, {}, call_id, SLOTS_TASK)
        ctx = CallContext(owner="owner", scope="owner", session_id="brain", run_id="slots")
        try:
            r = await self.gateway.call(call, ctx)
        except Exception as exc:
            self._failed(package, tool, f"not read: {exc}")
            return None
        if r.status != "succeeded":
            self._failed(package, tool, f"{r.status} {r.error}")
            return None
        if self._failures.pop((package, tool), None) is not None:
            log.info("slot list %s.%s read again", package, tool)
        return r

    def _failed(self, package: str, tool: str, why: str) -> None:
        """A failed read: at WARNING when it is new, at DEBUG while it stays the same (a
        package whose service is down fails every :data:`RETRY_S`)."""
        again = self._failures.get((package, tool)) == why
        self._failures[(package, tool)] = why
        (log.debug if again else log.warning)("slot list %s.%s: %s", package, tool, why)

    # ------------------------------------------------------------------ lists
    def slot_lists(self) -> SlotLists:
        """The lists as they are now. Asked before every request: the named contacts,
        devices and areas are made again only when the address book or the devices changed
        (a thousand contacts took milliseconds a turn; comparing them takes microseconds)."""
        every = getattr(self.contacts, "all", None)
        listed: list[Any] = list(every()) if callable(every) else []
        if listed != self._contacts_from:
            self._contacts_named = self._named_contacts(listed)
            self._contacts_from = listed
        if self.devices != self._devices_from:
            self._devices_named = self._named_devices()
            self._devices_from = list(self.devices)
        devices, areas = self._devices_named
        return SlotLists(
            contacts=self._contacts_named,
            devices=devices,
            areas=areas,
            shops=tuple(self.shops),
            lists=DEFAULT_LISTS,
        )

    def _named_devices(self) -> tuple[tuple[Named, ...], tuple[Named, ...]]:
        areas: dict[str, Named] = {}
        for d in self.devices:
            if d.area and d.area not in areas:
                areas[d.area] = Named(d.area, _area_names(d.area, d.area_names))
        devices = tuple(
            Named(d.entity, tuple(dict.fromkeys([d.name, *d.aliases])), d.domain, d.area)
            for d in self.devices
        )
        return devices, tuple(areas.values())

    @staticmethod
    def _named_contacts(listed: Sequence[ContactLike]) -> tuple[Named, ...]:
        out = []
        for c in listed:
            first = c.name.split()[:1]
            mine = [f"my {a}" for a in c.aliases if a.isascii() and not a.lower().startswith("my ")]
            names = dict.fromkeys([c.name, *c.aliases, *mine, *first])
            out.append(Named(c.name, tuple(n for n in names if n)))
        return tuple(out)

    def _update(self) -> None:
        lists = self.slot_lists()
        if lists != self._lists:
            assert self.engine is not None
            self.engine.update(lists)
            self._lists = lists

    # ------------------------------------------------------------------ look-ups
    def device(self, entity: str) -> Device | None:
        return next((d for d in self.devices if d.entity == entity), None)

    def in_area(self, area: str, domain: str = "") -> list[Device]:
        return [d for d in self.devices if d.area == area and (not domain or d.domain == domain)]

    def shop_name(self, shop: str) -> str:
        found = next((s for s in self.shops if s.value == shop), None)
        return found.names[0] if found is not None and found.names else shop
