"""Nod and shake from recorded IMU streams (issue 19): the detector on the glasses, and what
a gesture may answer — a nod approves an allowed ``send`` card, a shake dismisses a card, a
payment card ignores both.

The recordings (``tests/data/imu/*.csv``, FAKE hardware: 100 Hz gyroscope traces of a nod,
a shake and walking, synthesised with sensor noise) play through :class:`CsvImuSource`."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_agent.nod import Gesture, HeadGestures, answer_for
from hardware.errors import ImuError
from hardware.imu import CsvImuSource, ImuSample
from protos import consent_pb2

DATA = Path(__file__).parent / "data" / "imu"


async def gestures(name: str) -> list[Gesture]:
    detector = HeadGestures()
    found = []
    async for sample in CsvImuSource(DATA / f"{name}.csv").samples():
        g = detector.feed(sample)
        if g is not None:
            found.append(g)
    return found


async def test_a_nod_a_shake_and_walking_are_told_apart() -> None:
    assert await gestures("nod") == [Gesture.NOD]
    assert await gestures("shake") == [Gesture.SHAKE]
    assert await gestures("walking") == []


def card(effect: str, target: str = "") -> consent_pb2.ConfirmCard:
    return consent_pb2.ConfirmCard(card_id="c-1", effect=effect, target=target, title="t")


async def test_the_nod_answers_an_allowed_card_and_a_payment_card_ignores_it() -> None:
    (nod,) = await gestures("nod")
    (shake,) = await gestures("shake")
    mail = card("send", "sister@example.org")
    assert answer_for(mail, nod) == consent_pb2.APPROVE
    assert answer_for(mail, shake) == consent_pb2.DENY
    payment = card("spend", "Corner Café")
    assert answer_for(payment, nod) is None
    assert answer_for(payment, shake) is None
    assert answer_for(card("send"), nod) is None  # no named recipient
    assert answer_for(card("owner_data"), nod) is None  # not allowed for glasses
    assert answer_for(card("owner_data"), nod, {"send", "owner_data"}) == consent_pb2.APPROVE


def test_a_second_gesture_needs_the_head_at_rest_first() -> None:
    d = HeadGestures()
    swings = [
        ImuSample(t, 2.0 if i % 2 else -2.0, 0.0, 0.0) for i, t in enumerate(range(0, 400, 100))
    ]
    assert [d.feed(s) for s in swings][2] is Gesture.NOD
    assert d.feed(ImuSample(500, 2.0, 0, 0)) is None  # refractory


async def test_a_bad_recording_names_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("t_ms,pitch,yaw,roll\n0,0.1,0.2,0.3\n10,x,0,0\n")
    with pytest.raises(ImuError, match="line 3"):
        [s async for s in CsvImuSource(bad).samples()]
