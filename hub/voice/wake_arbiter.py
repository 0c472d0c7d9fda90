"""Wake arbitration: when several devices hear one wake word, one of them answers.

Claims (``WAKE_CLAIM``) whose ``heard_ms`` lie within :data:`WINDOW_MS` of the first claim
of an open group join that group. The group is decided :data:`WINDOW_MS` after its first
claim arrived at the hub: the claim with the best ``wake_score`` answers (ties: the louder
``level_dbfs``, then the earlier ``heard_ms``, then the device id); every claimant gets a
``WAKE_DECISION`` (``answer`` true for the winner, false with the winner's device id for the
others). A claim that arrives after its group was decided stands down at once.

Decisions are kept for :data:`KEEP_MS` so the utterance that follows a wake can be checked:
an utterance whose wake lost gets no reply (:mod:`hub.voice.hearing` records and logs it).

The core (:meth:`WakeArbiter.claim`, :meth:`WakeArbiter.due`) is pure with explicit times;
the async context manager owns the task that closes groups on time and sends decisions.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from types import TracebackType

from protos import voice_pb2
from protos.clock import now_ms
from sync.envelope import MAX_ID_CHARS, DropReason, Opened
from sync.tasks import TaskOwner, woken

log = logging.getLogger(__name__)

WINDOW_MS = 500
"""claims heard within this of a group's first claim are one wake; the group is decided
this long after its first claim arrived"""
KEEP_MS = 600_000
"""how long a decided group is remembered (utterances check their wake against it)"""
MAX_GROUPS = 1024
"""decided groups remembered at most (oldest forgotten first)"""
MAX_CLAIMS = 32
"""claimants in one group; more are stood down at once"""
MAX_CLOCK_SKEW_MS = 24 * 3600 * 1000
"""a claim heard further than this from the hub's clock is malformed"""


class Outcome(StrEnum):
    ANSWER = "answer"
    STAND_DOWN = "stand_down"
    PENDING = "pending"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Claim:
    device: str
    wake_id: str
    heard_ms: int
    wake_score: float
    level_dbfs: float

    def rank(self) -> tuple[float, float, int, str]:
        """sort key: best first"""
        return (-self.wake_score, -self.level_dbfs, self.heard_ms, self.device)


@dataclass(frozen=True)
class Decision:
    device: str
    wake_id: str
    answer: bool
    winner: str
    """device id of the claim that answers"""
    group: str
    """wake id of the group's first claim"""

    def message(self) -> voice_pb2.WakeDecision:
        return voice_pb2.WakeDecision(wake_id=self.wake_id, answer=self.answer, winner=self.winner)


@dataclass
class _Group:
    anchor_ms: int
    """heard_ms of the first claim"""
    deadline: float
    """hub monotonic seconds when the group is decided"""
    claims: list[Claim] = field(default_factory=list)
    decisions: dict[tuple[str, str], Decision] = field(default_factory=dict)
    decided_at: float | None = None
    done: asyncio.Event | None = None

    @property
    def name(self) -> str:
        return self.claims[0].wake_id

    def winner(self) -> Claim:
        return min(self.claims, key=Claim.rank)


def validate(claim: voice_pb2.WakeClaim, now_ms: int) -> str:
    """Why ``claim`` is malformed ("" if it is fine)."""
    if not claim.wake_id or len(claim.wake_id) > MAX_ID_CHARS:
        return "wake_id empty or too long"
    if claim.heard_ms <= 0 or abs(claim.heard_ms - now_ms) > MAX_CLOCK_SKEW_MS:
        return f"heard_ms {claim.heard_ms} is not a time near now"
    if not math.isfinite(claim.wake_score) or not 0.0 <= claim.wake_score <= 1.0:
        return f"wake_score {claim.wake_score} is not in 0..1"
    if not math.isfinite(claim.level_dbfs) or claim.level_dbfs > 1.0:
        return f"level_dbfs {claim.level_dbfs} is not a level"
    return ""


class WakeArbiter:
    """Groups wake claims and decides which device answers.

    ``send`` delivers one decision to its device (the hub daemon seals and publishes it);
    ``drop`` counts a malformed claim; ``clock`` is monotonic seconds (tests drive it).
    """

    def __init__(
        self,
        send: Callable[[Decision], Awaitable[None]] | None = None,
        *,
        drop: Callable[[DropReason, str, str], None] | None = None,
        window_ms: int = WINDOW_MS,
        keep_ms: int = KEEP_MS,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = now_ms,
    ) -> None:
        self.send = send
        self.drop = drop
        self.window_ms = window_ms
        self.keep_ms = keep_ms
        self._clock = clock
        self._wall_ms = wall_ms
        self._open: list[_Group] = []
        self._decided: OrderedDict[int, _Group] = OrderedDict()
        self._by_wake: dict[tuple[str, str], _Group] = {}
        self._wake = asyncio.Event()
        self._tasks: TaskOwner | None = None
        self.stats = {"claims": 0, "groups": 0, "stood_down": 0, "late": 0}

    # -------------------------------------------------------------- pure core
    def claim(self, claim: Claim, now: float | None = None) -> list[Decision]:
        """Take one claim; returns decisions due at once (a late or repeated claim)."""
        now = self._clock() if now is None else now
        key = (claim.device, claim.wake_id)
        known = self._by_wake.get(key)
        if known is not None:  # a repeated claim (QoS 1 redelivery)
            decision = known.decisions.get(key)
            return [decision] if decision is not None else []
        self.stats["claims"] += 1
        for group in self._open:
            if abs(claim.heard_ms - group.anchor_ms) <= self.window_ms:
                if len(group.claims) >= MAX_CLAIMS:
                    break
                group.claims.append(claim)
                self._by_wake[key] = group
                return []
        for group in reversed(self._decided.values()):
            if abs(claim.heard_ms - group.anchor_ms) <= self.window_ms:
                self._by_wake[key] = group
                self.stats["late"] += 1
                return [self._stand_down(group, claim, late=True)]
        group = _Group(anchor_ms=claim.heard_ms, deadline=now + self.window_ms / 1000)
        group.claims.append(claim)
        self._open.append(group)
        self._by_wake[key] = group
        self.stats["groups"] += 1
        self._wake.set()
        return []

    def due(self, now: float | None = None) -> list[Decision]:
        """Decide every open group whose window has passed; forget old decided groups."""
        now = self._clock() if now is None else now
        out: list[Decision] = []
        still_open: list[_Group] = []
        for group in self._open:
            if group.deadline > now:
                still_open.append(group)
                continue
            win = group.winner()
            for c in group.claims:
                if c is win:
                    d = Decision(c.device, c.wake_id, True, c.device, group.name)
                    group.decisions[(c.device, c.wake_id)] = d
                    out.append(d)
                else:
                    out.append(self._stand_down(group, c, late=False))
            group.decided_at = now
            self._decided[id(group)] = group
            if group.done is not None:
                group.done.set()
            if len(group.claims) > 1:
                log.info(
                    "wake %s: %d devices heard it; %s answers (score %.2f, %.1f dBFS)",
                    group.name,
                    len(group.claims),
                    win.device,
                    win.wake_score,
                    win.level_dbfs,
                )
        self._open = still_open
        self._forget(now)
        return out

    def _stand_down(self, group: _Group, claim: Claim, *, late: bool) -> Decision:
        winner = group.winner().device
        d = Decision(claim.device, claim.wake_id, False, winner, group.name)
        group.decisions[(claim.device, claim.wake_id)] = d
        self.stats["stood_down"] += 1
        log.info(
            "wake %s from %s stands down%s: %s answers",
            claim.wake_id,
            claim.device,
            " (claim arrived after the decision)" if late else "",
            winner,
        )
        return d

    def _forget(self, now: float) -> None:
        keep_s = self.keep_ms / 1000
        while self._decided:
            oldest = next(iter(self._decided.values()))
            decided_at = oldest.decided_at or now
            if now - decided_at <= keep_s and len(self._decided) <= MAX_GROUPS:
                break
            self._decided.popitem(last=False)
            for key in oldest.decisions:
                if self._by_wake.get(key) is oldest:
                    del self._by_wake[key]

    def next_deadline(self) -> float | None:
        return min((g.deadline for g in self._open), default=None)

    def outcome(self, device: str, wake_id: str) -> tuple[Outcome, Decision | None]:
        """What became of ``device``'s wake ``wake_id``."""
        group = self._by_wake.get((device, wake_id))
        if group is None:
            return Outcome.UNKNOWN, None
        decision = group.decisions.get((device, wake_id))
        if decision is None:
            return Outcome.PENDING, None
        return (Outcome.ANSWER if decision.answer else Outcome.STAND_DOWN), decision

    async def wait_outcome(
        self, device: str, wake_id: str, timeout_s: float
    ) -> tuple[Outcome, Decision | None]:
        """:meth:`outcome`, waiting up to ``timeout_s`` while it is pending."""
        state, decision = self.outcome(device, wake_id)
        if state is not Outcome.PENDING:
            return state, decision
        group = self._by_wake[(device, wake_id)]
        if group.done is None:
            group.done = asyncio.Event()
        await woken(group.done, timeout_s)
        return self.outcome(device, wake_id)

    # -------------------------------------------------------------- async shell
    async def __aenter__(self) -> WakeArbiter:
        self._tasks = TaskOwner("wake-arbiter")
        self._tasks.spawn(self._run(), "decide")
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._tasks is not None:
            await self._tasks.close()
            self._tasks = None

    async def on_claim(self, opened: Opened) -> None:
        """Handle a ``WAKE_CLAIM`` envelope (the caller committed its counter)."""
        msg = opened.payload
        assert isinstance(msg, voice_pb2.WakeClaim)
        problem = validate(msg, self._wall_ms())
        if problem:
            if self.drop is not None:
                self.drop(DropReason.MALFORMED, opened.sender, "wake claim: " + problem)
            return
        claim = Claim(
            opened.sender, msg.wake_id, msg.heard_ms, float(msg.wake_score), float(msg.level_dbfs)
        )
        log.debug("wake claim %s from %s: %.2f", claim.wake_id, claim.device, claim.wake_score)
        await self._deliver(self.claim(claim))

    async def _deliver(self, decisions: list[Decision]) -> None:
        if self.send is None:
            return
        for d in decisions:
            try:
                await self.send(d)
            except Exception as exc:  # the device learns it when its utterance arrives
                log.info("wake decision for %s not sent: %s", d.device, exc)

    async def _run(self) -> None:
        while True:
            deadline = self.next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - self._clock())
            await woken(self._wake, timeout)
            self._wake.clear()
            await self._deliver(self.due())
