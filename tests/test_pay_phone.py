"""The phone's side of the two options, in process: an auto-payment's notice card (deny it
inside the undo window = undo; it cannot be approved), and the phone daemon's lock watch
(unlocked → a signed unlock lease, locked → the lease ends). The mesh path is in
``test_pay_mesh.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edge_agent.pay import LockWatcher, lock_sensor, sign_lease
from hardware.lock_sensor import FakeLockSensor, LockState
from protos import consent_pb2
from tests.pay_kit import PayWorld, now_ms, pay_world
from tests.waiting import poll

KNOWN = "Lotus Kitchen,Green Bowl"


def _state(w: PayWorld, pid: str) -> str:
    p = w.pay.store.get(pid)
    return p.state if p is not None else ""


async def auto_checkout(w: PayWorld, undo: int) -> tuple[str, Any]:
    w.options(auto_pay="on", known_payees=KNOWN, undo_seconds=str(undo))
    assert w.lease()[0]
    p = w.intent("t1", budget="100")
    r = await w.checkout("t1")
    assert r.status == "running" and r.card_id, r
    card = w.card(r)
    assert card.title.startswith("auto-pay: 25.00 EUR to Lotus Kitchen")
    return p.payment_id, card


async def test_the_phone_undoes_an_auto_payment_by_denying_its_notice(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        pid, card = await auto_checkout(w, undo=30)
        # approving a notice is refused: it pays by itself
        ans, r = await w.answer(w.sign(card))
        assert ans.outcome == "refused" and "deny its card to undo" in ans.reason
        # a locked phone may still undo (stopping a payment needs no unlock)
        ans, r = await w.answer(w.sign(card, consent_pb2.DENY, unlocked=False))
        assert ans.outcome == "denied" and r is not None and r.status == "cancelled", ans
        assert w.pay.store.get(pid).state == "cancelled"  # type: ignore[union-attr]
        assert w.gw.consent.card(card.card_id).state == "denied"  # type: ignore[union-attr]
        assert w.courier.updates[-1].state == consent_pb2.DENIED
        # a replayed undo changes nothing, and nothing is ever paid
        ans, _ = await w.answer(w.sign(card, consent_pb2.DENY))
        assert ans.outcome == "refused"
        real = w.pay.clock
        w.pay.clock = lambda: real() + 60_000
        await w.pay.sweep()
        assert w.shop.charges() == [] and w.pay_posts() == 0
        steps = [r["data"] for r in w.audit_ok() if r["kind"] == "payment"]
        undone = [s for s in steps if s["step"] == "undone"]
        assert len(undone) == 1 and undone[0]["by"] == w.phone.device_id


async def test_an_undo_from_the_phone_after_the_window_is_too_late(tmp_path: Path) -> None:
    async with pay_world(tmp_path, sweep=True) as w:
        pid, card = await auto_checkout(w, undo=1)
        await poll(lambda: _state(w, pid) == "paid", what="the auto-payment")
        ans, _ = await w.answer(w.sign(card, consent_pb2.DENY))
        assert ans.outcome == "refused" and "too late to undo: the payment is paid" in ans.reason
        assert len(w.shop.charges()) == 1


async def test_an_undo_signed_by_another_device_or_for_another_card_is_refused(
    tmp_path: Path,
) -> None:
    async with pay_world(tmp_path) as w:
        pid, card = await auto_checkout(w, undo=30)
        ans, _ = await w.answer(w.sign(card, consent_pb2.DENY, bundle=w.glasses), w.glasses)
        assert ans.outcome == "refused" and "only on the owner's phone" in ans.reason
        ans, _ = await w.answer(w.sign(card, consent_pb2.DENY, nonce=b"x" * 16))
        assert ans.outcome == "refused" and "another payment" in ans.reason
        assert w.pay.store.get(pid).state == "authorised"  # type: ignore[union-attr]


async def test_a_locked_phone_ends_its_lease(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        assert w.lease()[0] and w.pay.valid_lease() is not None
        locked = LockState(False, now_ms(), "fake-lock-sensor")
        ok, reason, until = w.pay.report_lease(sign_lease(w.phone, locked, 0), w.device(w.phone))
        assert ok and until == 0, reason
        assert w.pay.valid_lease() is None
        # the glasses cannot end (or make) the phone's lease
        assert w.lease()[0]
        ok, reason, _ = w.pay.report_lease(sign_lease(w.glasses, locked, 0), w.device(w.glasses))
        assert not ok and w.pay.valid_lease() is not None
        steps = [r["data"]["step"] for r in w.audit_ok() if r["kind"] == "payment"]
        assert steps.count("unlock_lease_ended") == 1


async def test_the_phone_daemon_reports_its_lock_sensor(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        sensor = lock_sensor(w.phone)
        assert isinstance(sensor, FakeLockSensor)
        reachable = {"up": True}
        sent: list[consent_pb2.Approval] = []

        async def send(approval: consent_pb2.Approval) -> bool:
            if not reachable["up"]:
                return False
            sent.append(approval)
            w.pay.report_lease(approval, w.device(w.phone))
            return True

        watcher = LockWatcher(w.phone, send, minutes=5)
        await watcher.tick()
        assert sent == [] and w.pay.valid_lease() is None, "locked since start: nothing"
        sensor.set(True)
        await watcher.tick()
        lease = w.pay.valid_lease()
        assert lease is not None and lease.device_id == w.phone.device_id
        assert lease.sensor == "fake-lock-sensor"
        await watcher.tick()
        assert len(sent) == 1, "one lease while the phone stays unlocked"
        # renewed before it runs out
        watcher.sent = (True, sensor.read().since_ms, now_ms() - 1)
        await watcher.tick()
        assert len(sent) == 2
        # locked while the hub is unreachable: told as soon as it is reachable again
        sensor.set(False)
        reachable["up"] = False
        await watcher.tick()
        assert w.pay.valid_lease() is not None
        reachable["up"] = True
        await watcher.tick()
        assert len(sent) == 3 and w.pay.valid_lease() is None
        await watcher.tick()
        assert len(sent) == 3
