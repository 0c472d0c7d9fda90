"""Nod and shake on the glasses: a head gesture from the IMU, and what it may answer.

:class:`HeadGestures` is a pure detector with the samples' own clock: a **nod** is at least
``SWINGS`` alternating pitch swings faster than ``RATE`` rad/s within ``WINDOW_MS`` while yaw
stays below half of them; a **shake** the same on yaw. After a gesture it is deaf for
``REFRACTORY_MS`` (the head coming to rest is not a second gesture).

:func:`answer_for` is the rule of what a gesture answers on a card shown on the HUD: a nod
approves only a card whose effect the owner allowed for glasses (default: ``send``, to a
named recipient), a shake dismisses (denies) one; a payment (``spend``) card is never answered
by the head, neither way — it waits for the phone.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field

from hardware.imu import ImuSample
from protos import consent_pb2

RATE = 1.2
"""rad/s: a swing counts above this angular rate"""
SWINGS = 3
"""alternating swings (down-up-down) that make one gesture"""
WINDOW_MS = 1500
REFRACTORY_MS = 1000
DEFAULT_ALLOWED = frozenset({"send"})
"""effects a nod may approve unless the owner allowed others for glasses"""
NEVER = frozenset({"spend"})
"""effects no head gesture ever answers"""


class Gesture(enum.StrEnum):
    NOD = "nod"
    SHAKE = "shake"


@dataclass
class _Axis:
    swings: deque[tuple[int, int]] = field(default_factory=deque)
    """(t_ms, sign) of the swings in the window, alternating"""
    peak: float = 0.0
    """the largest rate in the window"""


class HeadGestures:
    def __init__(self) -> None:
        self._pitch = _Axis()
        self._yaw = _Axis()
        self._deaf_until = -1

    def feed(self, s: ImuSample) -> Gesture | None:
        """One sample in; the gesture it completes, if any."""
        if s.t_ms < self._deaf_until:
            return None
        for axis, rate in ((self._pitch, s.pitch), (self._yaw, s.yaw)):
            self._swing(axis, s.t_ms, rate)
        for axis, other, gesture in (
            (self._pitch, self._yaw, Gesture.NOD),
            (self._yaw, self._pitch, Gesture.SHAKE),
        ):
            if len(axis.swings) >= SWINGS and other.peak < axis.peak / 2:
                self._pitch, self._yaw = _Axis(), _Axis()
                self._deaf_until = s.t_ms + REFRACTORY_MS
                return gesture
        return None

    @staticmethod
    def _swing(axis: _Axis, t_ms: int, rate: float) -> None:
        while axis.swings and t_ms - axis.swings[0][0] > WINDOW_MS:
            axis.swings.popleft()
        if not axis.swings:
            axis.peak = 0.0
        axis.peak = max(axis.peak, abs(rate))
        if abs(rate) < RATE:
            return
        sign = 1 if rate > 0 else -1
        if not axis.swings or axis.swings[-1][1] != sign:
            axis.swings.append((t_ms, sign))


def answer_for(
    card: consent_pb2.ConfirmCard,
    gesture: Gesture,
    allowed: Collection[str] = DEFAULT_ALLOWED,
) -> int | None:
    """The decision ``gesture`` gives ``card`` (``consent_pb2.APPROVE`` / ``DENY``), or
    ``None``: the head does not answer this card."""
    if card.effect in NEVER:
        return None
    if gesture is Gesture.SHAKE:
        return consent_pb2.DENY
    if (
        card.effect in allowed
        and card.effect not in NEVER
        and (card.effect != "send" or card.target)
    ):
        return consent_pb2.APPROVE
    return None
