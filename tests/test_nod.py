"""Nod and shake from recorded IMU streams (issue 19): the detector on the glasses, and what
a gesture may answer — a nod approves an allowed ``send`` card, a shake dismisses a card, a
payment card ignores both.

The recordings (``tests/data/imu/*.csv``, FAKE hardware: 100 Hz gyroscope traces of a nod,
a shake and walking, synthesised with sensor noise) play through :class:`CsvImuSource`.

The hub's side: glasses (``approve.gesture``) answer only the cards whose effect the owner
allowed for glasses, never a payment; the mesh path is ``test_nod_mesh.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from nacl.signing import SigningKey

from edge_agent.nod import Gesture, HeadGestures, answer_for
from hardware.errors import ImuError
from hardware.imu import CsvImuSource, ImuSample, open_imu
from hub.gateway.consent import Answer, Card, ConsentAuthority, gesture_effects
from hub.gateway.ledger import Ledger
from protos import consent_pb2, mesh_pb2, signed
from protos.clock import now_ms
from sync.envelope import Opened
from sync.scopes import GESTURE_SCOPE, kind_refusal
from tests.waiting import poll

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


def test_imu_device_has_no_driver_yet_and_a_missing_recording_is_named(tmp_path: Path) -> None:
    with pytest.raises(ImuError) as no_driver:
        open_imu("device")
    assert no_driver.value.key == "imu.no_driver"
    with pytest.raises(ImuError, match=r"nope\.csv"):
        open_imu(str(tmp_path / "nope.csv"))
    assert isinstance(open_imu(str(DATA / "nod.csv")), CsvImuSource)


# ---------------------------------------------------------------- the hub's rule (issue 19)


def issue(authority: ConsentAuthority, effect: str, target: str) -> Card:
    card, _ = authority.issue(
        task_id=f"t-{effect}",
        call_id="c",
        owner="owner",
        package="p",
        tool=effect,
        args={},
        effect=effect,
        target=target,
        task_type="t",
        title="t",
        preview="p",
        action_hash=bytes(32),
        context={},
    )
    return card


def test_the_hub_takes_a_glasses_answer_only_for_the_effects_allowed_for_glasses(
    tmp_path: Path,
) -> None:
    key = SigningKey.generate()
    ledger = Ledger(tmp_path / "g.db", synchronous="OFF")
    try:
        authority = ConsentAuthority(ledger, gesture_effects={"send"})

        def answer(card: Card, scopes: tuple[str, ...]) -> Answer:
            approval = signed.approval(
                key, card.to_proto(), consent_pb2.APPROVE, device_id="g", signed_ms=now_ms()
            )
            return authority.answer(
                approval, device_id="g", sign_pk=bytes(key.verify_key), scopes=scopes
            )

        gesture = ("utter", "ack", GESTURE_SCOPE)
        unasked = issue(authority, "owner_data", "notes")
        refused = answer(unasked, gesture)
        assert refused.outcome == "refused" and "'owner_data'" in refused.reason
        nameless = answer(issue(authority, "send", ""), gesture)
        assert nameless.outcome == "refused" and "named recipient" in nameless.reason
        spend = answer(issue(authority, "spend", "Corner Café"), gesture)
        assert spend.outcome == "refused" and "owner's phone" in spend.reason
        assert answer(issue(authority, "send", "ann@example.org"), gesture).outcome == "approved"
        assert answer(unasked, ("ack",)).reason == "this device may not answer cards"
        assert answer(unasked, ("approve",)).outcome == "approved"  # the phone may
    finally:
        ledger.close()


def test_home_yaml_names_what_glasses_may_answer_and_never_payments() -> None:
    assert gesture_effects({}) == {"send"}
    assert gesture_effects({"glasses": {"nod_effects": ["send", "owner_data"]}}) == {
        "send",
        "owner_data",
    }
    bads: list[object] = [{"nod_effects": ["send", "spend"]}, {"nod_effects": "send"}, {"nod": []}]
    for bad in [*bads, []]:
        with pytest.raises(ValueError):
            gesture_effects({"glasses": bad})


def test_an_approval_from_glasses_passes_the_wire_check_only_with_its_narrow_scope() -> None:
    opened = Opened(
        kind=mesh_pb2.APPROVAL,
        sender="g",
        recipient="hub",
        counter=1,
        time_ms=0,
        trace_id="",
        payload=consent_pb2.Approval(),
    )
    assert kind_refusal(opened, ("utter", "ack", GESTURE_SCOPE)) is None
    assert kind_refusal(opened, ("approve",)) is None
    refusal = kind_refusal(opened, ("utter", "ack"))
    assert refusal is not None and "'approve'" in refusal[1]


async def test_the_hud_answers_a_full_card_with_the_head_and_never_a_notice(
    tmp_path: Path,
) -> None:
    from edge_agent.errors import EdgeError
    from edge_agent.gesture import HudAnswers
    from tests.pay_kit import make_home

    _, phone, glasses = make_home(tmp_path)
    with pytest.raises(EdgeError):
        HudAnswers(phone, CsvImuSource(DATA / "nod.csv"), None)  # type: ignore[arg-type]
    sent: list[consent_pb2.Approval] = []

    async def send(kind: int, payload: Any, *, trace_id: str | None = None) -> None:
        assert kind == mesh_pb2.APPROVAL
        sent.append(payload)

    def incoming(kind: int, msg: Any) -> Opened:
        return Opened("hub", 1, 0, kind, glasses.device_id, "", msg)

    def full(card_id: str, effect: str) -> consent_pb2.ConfirmCard:
        return consent_pb2.ConfirmCard(
            card_id=card_id,
            effect=effect,
            target="ann@example.org",
            title="t",
            expires_ms=now_ms() + 60_000,
            nonce=b"n" * 16,
            action_hash=b"h" * 32,
        )

    handlers: dict[int, Any] = {}
    answers = HudAnswers(glasses, CsvImuSource(DATA / "nod.csv"), send)
    answers.wrap(handlers)
    async with answers:
        notice = consent_pb2.ConfirmCard(card_id="c-0", effect="send", title="t", short_form=True)
        await handlers[mesh_pb2.CARD](incoming(mesh_pb2.CARD, notice))
        await handlers[mesh_pb2.CARD](incoming(mesh_pb2.CARD, full("c-pay", "spend")))
        mail = full("c-1", "send")
        await handlers[mesh_pb2.CARD](incoming(mesh_pb2.CARD, mail))
        await poll(lambda: sent, 10, "the nod's approval")
    (approval,) = sent
    body = signed.read_approval(approval)
    assert body is not None and body.card_id == "c-1" and body.decision == consent_pb2.APPROVE
    assert body.action_hash == mail.action_hash and body.nonce == mail.nonce
    assert signed.verify(
        glasses.keys.sign.verify_key.encode(),
        signed.APPROVAL_CONTEXT,
        approval.body,
        approval.signature,
    )
