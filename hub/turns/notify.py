"""Notifications that find the owner: ordered devices, an ACK deadline, quiet hours (issue 17).

A notification goes first to the device the owner is using (the one they used most recently,
``last_used``), then to the one that asked, then along the ordered list of
``notifications.order`` (device profiles, default glasses → phone → watch → mac) to each
other device, one at a time: every attempt is a reply kept in
``hub.db`` until ACKed; when the attempt's device has not ACKed within
``notifications.ack_deadline_s`` the next device gets it. Each attempt is a scheduler job
(kind ``notify``) that first checks the previous attempt's ACK, so a hub restart loses none
and repeats none: an ACKed notification goes no further. Outside ``urgent``, a notification
that comes during ``notifications.quiet_hours`` ("22:00-07:00", the owner's zone) waits for
their end.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hub.schedule import Occurrence, Scheduler, recurrence
from hub.timeline import Admitted, HubStore
from hub.turns.delivery import HUB_BRAIN, Delivery, Piece

log = logging.getLogger(__name__)

NOTIFY = "notify"
DEFAULT_ORDER = ("glasses", "phone", "watch", "mac")
DEFAULT_DEADLINE_S = 60.0
GRACE_MS = 24 * 3600 * 1000
"""an attempt that came due while the hub was down is still made within this"""


@dataclass(frozen=True)
class NotifySettings:
    order: tuple[str, ...] = DEFAULT_ORDER
    """device profiles, most wanted first"""
    deadline_ms: int = int(DEFAULT_DEADLINE_S * 1000)
    quiet: tuple[dt.time, dt.time] | None = None
    """start and end of the quiet hours (local), ``None``: none"""

    @classmethod
    def of(cls, config: Mapping[str, Any] | None) -> NotifySettings:
        c = config or {}
        order = tuple(str(p) for p in c.get("order") or DEFAULT_ORDER)
        deadline = float(c.get("ack_deadline_s") or DEFAULT_DEADLINE_S)
        quiet = None
        if c.get("quiet_hours"):
            start, end = str(c["quiet_hours"]).split("-", 1)
            quiet = (dt.time.fromisoformat(start.strip()), dt.time.fromisoformat(end.strip()))
        return cls(order, int(deadline * 1000), quiet)


def in_quiet(at: dt.datetime, quiet: tuple[dt.time, dt.time] | None) -> bool:
    if quiet is None:
        return False
    start, end = quiet
    t = at.time()
    return start <= t < end if start <= end else (t >= start or t < end)


def reply_id(nid: str, attempt: int) -> str:
    return "nt-" + hashlib.sha256(f"{nid}#{attempt}".encode()).hexdigest()[:24]


class Notifier:
    """``devices``: (device id, profile) of every device not revoked; ``last_used``: the
    device the owner used most recently ("" if none)."""

    def __init__(
        self,
        store: HubStore,
        delivery: Delivery,
        scheduler: Scheduler,
        *,
        devices: Callable[[], Sequence[tuple[str, str]]],
        settings: NotifySettings,
        last_used: Callable[[], str] | None = None,
    ) -> None:
        self.store = store
        self._last_used = last_used or (lambda: "")
        self.delivery = delivery
        self.scheduler = scheduler
        self._devices = devices
        self.settings = settings

    def handlers(self) -> dict[str, Callable[[Occurrence], Awaitable[None]]]:
        return {NOTIFY: self.attempt}

    def order(self, first: str) -> list[str]:
        """Every device: the one used last, then ``first`` (the one that asked), then the
        others by profile as ``settings.order`` ranks them."""
        rank = {p: i for i, p in enumerate(self.settings.order)}
        known = sorted(self._devices(), key=lambda d: (rank.get(d[1], len(rank)), d[0]))
        ids = [d for d, _ in known]
        wanted = [d for d in dict.fromkeys((self._last_used(), first)) if d in ids]
        return wanted + [d for d in ids if d not in wanted]

    def notify(self, nid: str, text: str, *, first: str, urgent: bool, trace: str) -> None:
        """Send ``text`` (once per ``nid``) to ``first``, falling back along the order."""
        now_ms = self.scheduler.now_ms()
        at_ms = now_ms
        now = recurrence.local(now_ms, self.scheduler.tz)
        if not urgent and in_quiet(now, self.settings.quiet):
            assert self.settings.quiet is not None
            end = self.settings.quiet[1]
            rule = f"FREQ=DAILY;BYHOUR={end.hour};BYMINUTE={end.minute};BYSECOND=0"
            after = recurrence.next_after(rule, now_ms, self.scheduler.tz, now_ms)
            at_ms = after if after is not None else now_ms
            log.info("notification %s waits for the end of the quiet hours", nid)
        spec = {"nid": nid, "text": text, "order": self.order(first), "trace_id": trace}
        self.scheduler.add(
            f"notify-{nid}-0", NOTIFY, {**spec, "attempt": 0}, at_ms=at_ms, grace_ms=GRACE_MS
        )

    def acked(self, nid: str, attempt: int) -> bool:
        chunks = self.store.chunks(reply_id(nid, attempt))
        return bool(chunks) and all(c.acked for c in chunks)

    async def attempt(self, occ: Occurrence) -> None:
        spec = occ.job.spec
        nid, i = str(spec["nid"]), int(spec["attempt"])
        order = [str(d) for d in spec.get("order", [])]
        if i > 0 and self.acked(nid, i - 1):
            log.info("notification %s ACKed on %s", nid, order[i - 1])
            return
        if i >= len(order):
            log.warning("notification %s: no device ACKed it (%s)", nid, ", ".join(order))
            return
        if i > 0:
            log.info("notification %s: no ACK from %s, now to %s", nid, order[i - 1], order[i])
        # the deadline counts from now, however long the send takes
        self.scheduler.add(
            f"notify-{nid}-{i + 1}",
            NOTIFY,
            {**spec, "attempt": i + 1},
            at_ms=self.scheduler.now_ms() + self.settings.deadline_ms,
            grace_ms=GRACE_MS,
        )
        rid = reply_id(nid, i)
        if self.store.chunks(rid):
            await self.delivery.resend_chunks(rid)
        else:
            to = Admitted("", order[i], 0, "", str(spec.get("trace_id") or ""), {}, 0, False)
            await self.delivery.deliver(to, rid, [Piece(str(spec["text"]), True, nid, HUB_BRAIN)])
