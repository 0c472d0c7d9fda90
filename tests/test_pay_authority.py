"""The payment authority: the happy path pays exactly the approved amount once; replayed,
stale, foreign, locked and other-amount approvals are refused; a changing price re-issues
the card at most twice; a timeout ends in ``unknown`` and a status check, never a second
charge; 50 concurrent attempts to use one authorisation pay once.

Real ``errands`` package over MCP stdio against the sandbox provider (a real local HTTP
service); the phone's answers are signed with its real device key (a flashed bundle)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from hub.gateway import ToolCall
from hub.payments.model import AUTHORISED, binding
from hub.payments.store import PaymentStore
from packages.errands.sandbox import SandboxShop
from protos import consent_pb2
from tests.pay_kit import make_home, now_ms, owner_ctx, pay_world
from tests.waiting import poll


async def test_happy_path_pays_exactly_the_approved_amount_once(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        p = w.intent("t1", budget="30")
        r = await w.checkout("t1", items=(("noodles", 1), ("dumplings", 1)))
        # the executor stopped at the checkout: payee and amount read back, nothing paid
        assert r.status == "waiting" and r.next.waiting_for == "owner", r
        assert [(v.name, v.value, v.unit) for v in r.values] == [("amount", 21.0, "EUR")]
        assert w.shop.charges() == [] and w.pay_posts() == 0
        card = w.card(r)
        assert card.effect == "spend" and card.target == "Lotus Kitchen"
        assert card.title == "pay 21.00 EUR to Lotus Kitchen"
        assert 59_000 <= card.expires_ms - card.created_ms <= 60_000, "valid 60 s"
        assert w.courier.shown == [card]
        assert "amount: 21.00 EUR" in card.preview and "payee: Lotus Kitchen" in card.preview
        # the reply may not claim a payment that is only waiting
        checked = await w.gw.observe("t1", "Done! I paid 21 EUR to Lotus Kitchen for your lunch.")
        assert checked.removed and "paid" not in checked.text.split("Waiting")[0]
        assert "Waiting for your confirmation on your phone: pay (Lotus Kitchen)" in checked.text

        done = await w.approve(r)
        assert done.status == "succeeded", done
        assert done.summary.startswith("Paid 21.00 EUR to Lotus Kitchen.")
        checked = await w.gw.observe("t1", "I paid 21 EUR to Lotus Kitchen.")
        assert not checked.removed, checked
        charges = w.shop.charges()
        assert [(c["payee"], c["amount_minor"], c["currency"]) for c in charges] == [
            ("Lotus Kitchen", 2100, "EUR")
        ]
        assert w.pay_posts() == 1
        q = w.pay.store.get(p.payment_id)
        assert q is not None and q.state == "paid" and q.mode == "card"
        assert q.provider_ref == charges[0]["payment_ref"]
        # the authorisation was used once, bound to what the card showed
        (auth,) = w.pay.store.auths(p.payment_id)
        assert auth.state == "used" and auth.amount_minor == 2100 and auth.card_id == card.card_id
        assert charges[0]["idempotency_key"] == auth.auth_id
        # the ledger: the checkout call carries the payment's outcome as revisions
        last = w.gw.ledger.call("t1", "t1-co")
        assert last is not None and last.status == "succeeded" and last.revision == 2
        updates = [consent_pb2.CardState.Name(u.state) for u in w.courier.updates]
        assert updates == ["APPROVED", "EXECUTED"]
        # every step is in the audit log with the payment's trace id, and the log verifies
        steps = [
            (rec["data"]["step"], rec["trace_id"])
            for rec in w.audit_ok()
            if rec["kind"] == "payment"
        ]
        assert [s for s, _ in steps] == [
            "intent_opened",
            "checkout_read",
            "card_issued",
            "approval",
            "authorised",
            "paying",
            "paid",
        ]
        assert {t for _, t in steps} == {"trace-t1"}


async def test_an_approval_used_twice_is_refused(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        w.intent("t1")
        r = await w.checkout("t1")
        good = w.sign(w.card(r))
        ans, done = await w.answer(good)
        assert ans.outcome == "approved" and done is not None and done.status == "succeeded"
        # the very same signed approval again, then a fresh signature over the same card
        ans, again = await w.answer(good)
        assert ans.outcome == "refused" and again is None
        ans, again = await w.answer(w.sign(w.card(r)))
        assert ans.outcome == "refused" and "already" in ans.reason and again is None
        assert len(w.shop.charges()) == 1 and w.pay_posts() == 1
        # and the authorisation cannot pay anything else: executing again finds nothing
        (p,) = w.pay.store.for_task("t1")
        assert await w.pay.execute(p.payment_id) is None
        assert len(w.shop.charges()) == 1


async def test_an_approval_older_than_60_s_is_refused(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        p = w.intent("t1")
        r = await w.checkout("t1")
        card = w.card(r)
        # signed 61 s ago (held back and replayed later): refused, the card still waits
        ans, _ = await w.answer(w.sign(card, signed_ms=now_ms() - 61_000))
        assert ans.outcome == "refused" and "older than 60 s" in ans.reason
        assert w.gw.consent.card(card.card_id).state == "pending"  # type: ignore[union-attr]
        # the owner answers after the card's 60 s: refused, and the payment expires
        real = w.pay.clock
        w.pay.clock = lambda: real() + 61_000
        ans, receipt = await w.answer(w.sign(card, signed_ms=now_ms() + 61_000 - 10))
        assert ans.outcome == "refused" and ans.reason == "card expired"
        assert receipt is not None and receipt.status == "cancelled"
        assert w.pay.store.get(p.payment_id).state == "expired"  # type: ignore[union-attr]
        assert w.shop.charges() == [] and w.pay_posts() == 0
        w.audit_ok()


async def test_unanswered_card_expires_after_60_s(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        p = w.intent("t1")
        await w.checkout("t1")
        real = w.pay.clock
        w.pay.clock = lambda: real() + 61_000
        await w.pay.sweep()
        assert w.pay.store.get(p.payment_id).state == "expired"  # type: ignore[union-attr]
        (auth,) = w.pay.store.auths(p.payment_id)
        assert auth.state == "expired"
        assert w.shop.charges() == []


async def test_non_phone_locked_and_revoked_devices_are_refused(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        p = w.intent("t1")
        r = await w.checkout("t1")
        card = w.card(r)
        # glasses (no approve scope, not a phone) sign the right card with their own key
        ans, _ = await w.answer(w.sign(card, bundle=w.glasses), bundle=w.glasses)
        assert ans.outcome == "refused" and "only on the owner's phone" in ans.reason
        # the phone, locked
        ans, _ = await w.answer(w.sign(card, unlocked=False))
        assert ans.outcome == "refused" and "locked" in ans.reason
        # no lock sensor named
        ans, _ = await w.answer(w.sign(card, lock_sensor=""))
        assert ans.outcome == "refused" and "no lock state" in ans.reason
        # signed by the glasses' key but claiming to be the phone
        rec = w.device(w.phone)
        ans, _ = await w.gw.answer(
            w.sign(card, bundle=w.glasses, device_id=w.phone.device_id),
            device_id=rec.device_id,
            sign_pk=rec.sign_pk,
            scopes=rec.scopes,
            profile=rec.profile,
        )
        assert ans.outcome == "refused" and ans.reason == "bad signature"
        # the phone, revoked
        w.revoke(w.phone)
        ans, _ = await w.answer(w.sign(card))
        assert ans.outcome == "refused" and "revoked" in ans.reason
        assert w.shop.charges() == []
        assert w.pay.store.get(p.payment_id).state == "awaiting_approval"  # type: ignore[union-attr]
        refused = [
            rec["data"]["reason"]
            for rec in w.audit_ok()
            if rec["kind"] == "payment" and rec["data"]["step"] == "approval_refused"
        ]
        assert len(refused) == 5


async def test_an_approval_for_another_amount_is_refused(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        p = w.intent("t1")
        r = await w.checkout("t1")
        card = w.card(r)
        (auth,) = w.pay.store.auths(p.payment_id)
        for change in (
            {"amount_minor": auth.amount_minor + 100},
            {"amount_minor": auth.amount_minor - 100},
            {"payee": "Evil Shop"},
            {"currency": "USD"},
            {"nonce": b"\x00" * 16},
        ):
            fields = {
                "payment_id": auth.payment_id,
                "auth_id": auth.auth_id,
                "payee": auth.payee,
                "amount_minor": auth.amount_minor,
                "currency": auth.currency,
                "checkout_id": auth.checkout_id,
                "nonce": auth.nonce,
                "expires_ms": auth.expires_ms,
            }
            fields.update(change)
            other = binding(**fields)  # type: ignore[arg-type]
            ans, _ = await w.answer(w.sign(card, action_hash=other))
            assert ans.outcome == "refused" and "another payment" in ans.reason, (change, ans)
        assert w.shop.charges() == []
        done = await w.approve(r)
        assert done.status == "succeeded"
        assert [c["amount_minor"] for c in w.shop.charges()] == [auth.amount_minor]


async def test_a_price_change_reissues_the_card_at_most_twice_then_stops(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        p = w.intent("t1", budget="50")
        r = await w.checkout("t1")
        cards = [w.card(r)]
        checkout = w.pay.store.get(p.payment_id).checkout_id  # type: ignore[union-attr]
        for n, total in enumerate((2600, 2700, 2800), start=1):
            w.shop.set_price(checkout, total)  # the shop changes the price after the read-back
            r = await w.approve(r)
            if n <= 2:
                assert r.status == "waiting", r
                new = w.card(r)
                assert new.card_id != cards[-1].card_id and f"{total / 100:.2f} EUR" in new.title
                old = w.gw.consent.card(cards[-1].card_id)
                assert old is not None and old.state == "voided"
                cards.append(new)
            else:
                assert r.status == "cancelled" and "stopped after 2" in r.error, r
        q = w.pay.store.get(p.payment_id)
        assert q is not None and q.state == "cancelled" and q.reissues == 2
        assert [a.state for a in w.pay.store.auths(p.payment_id)] == ["voided"] * 3
        assert len(cards) == 3
        assert w.shop.charges() == [] and w.pay_posts() == 0, "never paid another amount"
        voided = [u for u in w.courier.updates if u.state == consent_pb2.VOIDED]
        assert len(voided) == 3
        steps = [rec["data"]["step"] for rec in w.audit_ok() if rec["kind"] == "payment"]
        assert steps.count("card_reissued") == 2 and steps[-1] == "stopped"


async def test_a_price_change_then_the_new_amount_is_paid_exactly(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        p = w.intent("t1", budget="50")
        r = await w.checkout("t1")
        checkout = w.pay.store.get(p.payment_id).checkout_id  # type: ignore[union-attr]
        w.shop.set_price(checkout, 2650)
        r = await w.approve(r)
        assert r.status == "waiting" and "26.50 EUR" in w.card(r).title
        done = await w.approve(r)
        assert done.status == "succeeded"
        assert [c["amount_minor"] for c in w.shop.charges()] == [2650]


async def test_a_provider_timeout_is_unknown_then_checked_never_charged_twice(
    tmp_path: Path,
) -> None:
    async with pay_world(tmp_path, pay_timeout=1.0) as w:
        p = w.intent("t1")
        r = await w.checkout("t1")
        w.shop.control(pay_mode="timeout", hang_s=3.0)  # held 3 s, then not charged
        done = await w.approve(r)
        # unknown, and a status check ran at once: the provider still holds the request
        assert done.status == "unknown" and done.next.check_with == "payment_status", done
        q = w.pay.store.get(p.payment_id)
        assert q is not None and q.state == "unknown"
        steps = [rec["data"]["step"] for rec in w.audit_ok() if rec["kind"] == "payment"]
        assert steps[-3:] == ["paying", "unknown", "status_check"]

        async def resolved() -> bool:
            await w.pay.check(p.payment_id)
            return w.pay.store.get(p.payment_id).state != "unknown"  # type: ignore[union-attr]

        await poll(resolved, 15, "the provider to answer the status check")
        q = w.pay.store.get(p.payment_id)
        assert q is not None and q.state == "failed" and "not charged" in q.reason, q
        states = [s for _, _, s, _ in w.pay.store.history(p.payment_id)]
        assert states[-3:] == ["paying", "unknown", "failed"]
        assert w.shop.charges() == [] and w.pay_posts() == 1, "one attempt, never retried"
        # the model may not pay it again; the ledger shows the check ran
        again = await w.gw.call(
            ToolCall(
                "errands",
                "pay",
                {"checkout_id": q.checkout_id, "amount_minor": 2500, "currency": "EUR"},
                "model-pay",
                "t1",
            ),
            owner_ctx("trace-t1"),
        )
        assert again.status == "rejected"
        assert w.gw.ledger.pending_check("t1", "errands", "pay") is None
        steps = [rec["data"]["step"] for rec in w.audit_ok() if rec["kind"] == "payment"]
        assert steps[-3:] == ["status_check", "failed", "pay_call_refused"]
        assert steps.count("paying") == 1


async def test_a_late_success_is_found_by_status_checks_and_paid_once(tmp_path: Path) -> None:
    async with pay_world(tmp_path, pay_timeout=1.0) as w:
        p = w.intent("t1")
        r = await w.checkout("t1")
        w.shop.control(pay_mode="late", hang_s=2.5)  # the client gives up; it succeeds later
        done = await w.approve(r)
        assert done.status == "unknown" and done.next.check_with == "payment_status", done
        q = w.pay.store.get(p.payment_id)
        assert q is not None and q.state == "unknown"
        # before anything else: a status check; until it resolves nothing else may happen
        ans, _ = await w.answer(w.sign(w.card(r)))
        assert ans.outcome == "refused"
        assert await w.pay.execute(p.payment_id) is None

        async def resolved() -> bool:
            await w.pay.check(p.payment_id)
            return w.pay.store.get(p.payment_id).state == "paid"  # type: ignore[union-attr]

        await poll(resolved, 15, "the late payment to be found")
        assert len(w.shop.charges()) == 1 and w.pay_posts() == 1
        last = w.gw.ledger.call("t1", "t1-co")
        assert last is not None and last.status == "succeeded"
        w.audit_ok()


async def test_a_declined_payment_fails_and_is_never_retried(tmp_path: Path) -> None:
    async with pay_world(tmp_path, sweep=True) as w:
        p = w.intent("t1")
        r = await w.checkout("t1")
        w.shop.control(pay_mode="fail")
        done = await w.approve(r)
        assert done.status == "failed" and "DECLINED" in done.error
        assert w.pay.store.get(p.payment_id).state == "failed"  # type: ignore[union-attr]
        w.shop.control(pay_mode="ok")
        await w.pay.sweep()
        assert w.pay_posts() == 1 and w.shop.charges() == []


async def test_deny_cancels(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        p = w.intent("t1")
        r = await w.checkout("t1")
        ans, receipt = await w.answer(w.sign(w.card(r), consent_pb2.DENY, unlocked=False))
        assert ans.outcome == "denied" and receipt is not None and receipt.status == "cancelled"
        assert w.pay.store.get(p.payment_id).state == "cancelled"  # type: ignore[union-attr]
        assert w.shop.charges() == []


async def test_50_concurrent_attempts_to_use_one_authorisation_pay_once(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        # (1) the compare-and-set itself: 50 threads, each with its own connection
        p1 = w.intent("t1")
        r1 = await w.checkout("t1")
        auth1 = w.pay.store.current_auth(p1.payment_id)
        assert auth1 is not None
        assert w.pay.store.approve(auth1.auth_id, by="phone", method="card", at_ms=now_ms())
        won: list[str] = []
        barrier = threading.Barrier(50)
        db = w.state_dir / "payments.db"

        def attempt() -> None:
            store = PaymentStore(db, synchronous="OFF")
            try:
                barrier.wait()
                a = store.claim(p1.payment_id, at_ms=now_ms())
                if a is not None:
                    won.append(a.auth_id)
            finally:
                store.close()

        threads = [threading.Thread(target=attempt) for _ in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert won == [auth1.auth_id]
        assert r1.status == "waiting"

        # (2) the whole path: 50 concurrent executions of one authorised payment
        p2 = w.intent("t2")
        await w.checkout("t2", shop="green-bowl", items=(("salad", 2),))
        auth2 = w.pay.store.current_auth(p2.payment_id)
        assert auth2 is not None
        assert w.pay.store.approve(auth2.auth_id, by="phone", method="card", at_ms=now_ms())
        assert w.pay.store.get(p2.payment_id).state == AUTHORISED  # type: ignore[union-attr]
        results = await asyncio.gather(*(w.pay.execute(p2.payment_id) for _ in range(50)))
        paid = [r for r in results if r is not None]
        assert len(paid) == 1 and paid[0].status == "succeeded"
        assert [c["payee"] for c in w.shop.charges()] == ["Green Bowl"]
        assert w.pay_posts() == 1
        w.audit_ok()


async def test_a_hub_stopped_while_paying_finds_out_with_a_status_check(tmp_path: Path) -> None:
    made = make_home(tmp_path)
    async with SandboxShop(pay_timeout=1.0) as shop:
        async with pay_world(tmp_path, made=made, shop=shop) as w:
            p = w.intent("t1")
            await w.checkout("t1")
            auth = w.pay.store.current_auth(p.payment_id)
            assert auth is not None
            assert w.pay.store.approve(auth.auth_id, by="phone", method="card", at_ms=now_ms())
            # the hub claims the authorisation and stops before the provider heard of it
            assert w.pay.store.claim(p.payment_id, at_ms=now_ms()) is not None
        async with pay_world(tmp_path, made=made, shop=shop) as w2:
            q = w2.pay.store.get(p.payment_id)
            assert q is not None and q.state == "failed" and "not charged" in q.reason, q
            assert shop.charges() == [] and w2.pay_posts() == 0
            steps = [rec["data"]["step"] for rec in w2.audit_ok() if rec["kind"] == "payment"]
            assert steps[-3:] == ["unknown", "status_check", "failed"]
