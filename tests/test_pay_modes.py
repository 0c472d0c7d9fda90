"""The two optional modes, default off: voice pay and small-amount auto-pay. Each unmet
condition falls back to the phone card (one test per condition); the daily cap holds
across a hub restart; the 5-second undo cancels; changing the options needs the owner's
phone's signature."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hub.payments import PaymentError, PayOptions, VoiceEvidence
from hub.payments.cards import STATE_NAMES
from packages.errands.sandbox import SandboxShop
from protos.signed import options_change
from tests.pay_kit import PayWorld, make_home, now_ms, owner_ctx, pay_world
from tests.waiting import poll

KNOWN = "Lotus Kitchen,Green Bowl,Corner Bakery,Tea House,Grand Hotel"


def said(w: PayWorld, **kw: Any) -> VoiceEvidence:
    """ "pay it", as admission saw it: verified by voiceprint on the glasses."""
    fields: dict[str, Any] = {
        "device_id": w.glasses.device_id,
        "utterance_id": f"u-{now_ms()}",
        "verdict": "verified",
        "basis": "voiceprint",
        "heard_ms": now_ms(),
        "score": 0.82,
        "text": "pay it",
    }
    fields.update(kw)
    return VoiceEvidence(**fields)


def fallbacks(w: PayWorld, step: str) -> list[list[str]]:
    return [
        rec["data"]["reasons"]
        for rec in w.audit_ok()
        if rec["kind"] == "payment" and rec["data"]["step"] == step
    ]


# ---------------------------------------------------------------- defaults and options
async def test_both_options_are_off_by_default(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        o = w.pay.options
        assert (o.voice_pay, o.auto_pay) == (False, False)
        assert (o.voice_pay_limit, o.auto_pay_limit, o.auto_pay_daily) == (20000, 5000, 15000)
        assert (o.same_payee_minutes, o.undo_seconds) == (30, 5)
        assert o == PayOptions()
        w.lease()
        w.options(known_payees=KNOWN)
        p = w.intent("t1")
        r = await w.checkout("t1")
        assert r.status == "waiting"  # no auto-pay
        v = await w.pay.voice_confirm(p.payment_id, said(w), owner_ctx())
        assert not v.authorised and v.reason == "voice pay is off"
        assert w.shop.charges() == []


async def test_changing_the_options_needs_the_owners_phone(tmp_path: Path) -> None:
    from hub.payments.phone import change_options

    async with pay_world(tmp_path) as w:
        store, audit = w.pay.store, w.gw.audit

        def change(bundle: Any, rec_of: Any, **kw: Any) -> Any:
            body, sig = options_change(bundle.keys.sign, bundle.device_id, {"auto_pay": "on"}, **kw)
            return change_options(store, audit, body, sig, w.device(rec_of))

        with pytest.raises(PaymentError, match="only on the owner's phone"):
            change(w.glasses, w.glasses)
        with pytest.raises(PaymentError, match="bad signature"):
            change(w.glasses, w.phone)  # the glasses' key claiming to be the phone
        with pytest.raises(PaymentError, match="not fresh"):
            change(w.phone, w.phone, signed_ms=now_ms() - 5 * 60_000)
        body, sig = options_change(w.phone.keys.sign, w.phone.device_id, {"auto_pay": "on"})
        assert change_options(store, audit, body, sig, w.device(w.phone)).auto_pay
        with pytest.raises(PaymentError, match="already applied"):
            change_options(store, audit, body, sig, w.device(w.phone))  # replayed
        with pytest.raises(PaymentError) as err:
            w.options(tip="10")
        assert err.value.key == "pay.option_unknown"
        with pytest.raises(PaymentError, match="larger than the daily"):
            w.options(auto_pay_limit="200")
        w.revoke(w.phone)
        with pytest.raises(PaymentError, match="revoked"):
            change(w.phone, w.phone)
        assert store.options().auto_pay and not store.options().voice_pay
        steps = [r["data"]["step"] for r in w.audit_ok() if r["kind"] == "payment"]
        assert steps.count("options_changed") == 1 and steps.count("options_refused") == 7


def test_yimi_pay_options_set_is_signed_by_the_phone(tmp_path: Path) -> None:
    home, phone, glasses = make_home(tmp_path)

    def yimi(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cli", "pay", "options", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    shown = yimi("show", "--home", str(home.path))
    assert shown.returncode == 0 and "voice pay:          off" in shown.stdout, shown.stderr
    ok = yimi(
        "set",
        "--home",
        str(home.path),
        "--bundle",
        str(phone.path),
        "voice_pay=on",
        "voice_pay_limit=150",
        "known_payees=Lotus Kitchen",
    )
    assert ok.returncode == 0, ok.stderr
    assert "voice pay:          on (≤ 150.00 EUR per payment)" in ok.stdout
    refused = yimi("set", "--home", str(home.path), "--bundle", str(glasses.path), "auto_pay=on")
    assert refused.returncode == 1 and "only on the owner's phone" in refused.stderr
    shown = yimi("show", "--home", str(home.path))
    assert "auto-pay:           off" in shown.stdout and "Lotus Kitchen" in shown.stdout
    audit = subprocess.run(
        [sys.executable, "-m", "cli", "audit", "verify", "--home", str(home.path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert audit.returncode == 0, audit.stderr


async def test_unlock_leases_only_from_a_fresh_phone(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        ok, reason, _ = w.lease(bundle=w.glasses)
        assert not ok and "only on the owner's phone" in reason
        ok, reason, until = w.lease(minutes=60)
        assert ok and until <= now_ms() + 15 * 60_000, "capped at 15 min"
        assert w.pay.valid_lease() is not None
        w.revoke(w.phone)
        assert w.pay.valid_lease() is None, "a revoked phone's lease is worth nothing"


# ---------------------------------------------------------------- voice pay
async def voice_ready(
    w: PayWorld,
    *,
    voice: bool = True,
    known: str = KNOWN,
    lease: bool = True,
    budget: str | None = "30",
    shop: str = "lotus-kitchen",
    items: tuple[tuple[str, int], ...] = (("noodles", 2),),
) -> tuple[str, str]:
    changes: dict[str, Any] = {"voice_pay": "on" if voice else "off"}
    if known:
        changes["known_payees"] = known
    w.options(**changes)
    if lease:
        assert w.lease()[0]
    p = w.intent("t1", budget=budget)
    r = await w.checkout("t1", shop=shop, items=items)
    assert r.status == "waiting", r
    return p.payment_id, r.card_id


async def test_voice_pay_when_every_condition_holds(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        pid, card_id = await voice_ready(w)
        v = await w.pay.voice_confirm(pid, said(w), owner_ctx("trace-t1"))
        assert v.authorised and v.receipt is not None and v.receipt.status == "succeeded", v
        assert [c["amount_minor"] for c in w.shop.charges()] == [2500]
        p = w.pay.store.get(pid)
        assert p is not None and p.state == "paid" and p.mode == "voice"
        card = w.gw.consent.card(card_id)
        assert card is not None and card.state == "voided", "the phone card is withdrawn"
        # the same utterance cannot pay anything again
        v2 = await w.pay.voice_confirm(pid, said(w, utterance_id="u-x"), owner_ctx())
        assert not v2.authorised
        assert len(w.shop.charges()) == 1


VOICE_CASES: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    # name: (voice_ready kwargs, evidence kwargs, expected reason)
    "voice pay off": ({"voice": False}, {}, "voice pay is off"),
    "not verified": ({}, {"verdict": "uncertain"}, "not verified as the owner's"),
    "trust window": ({}, {"basis": "trust_window"}, "never use trust windows"),
    "call anchor": ({}, {"basis": "call_anchor"}, "never use trust windows"),
    "another device": ({}, {"device_id": "phone-other"}, "not said on the device"),
    "unknown payee": ({"known": "Green Bowl"}, {}, "Lotus Kitchen is not a known payee"),
    "over 200": (
        {"budget": "400", "shop": "grand-hotel", "items": (("dinner", 2),)},
        {},
        "over the voice pay limit of 200.00 EUR",
    ),
    "over budget": ({"budget": "20"}, {}, "over the request's budget of 20.00 EUR"),
    "no budget": ({"budget": None}, {}, "the request named no budget"),
    "no unlock lease": ({"lease": False}, {}, "no valid unlock lease"),
    "said before the read-back": ({}, {"heard_ms": 1_000}, "said before the amount"),
}


@pytest.mark.parametrize("case", list(VOICE_CASES))
async def test_voice_pay_falls_back_to_the_card(tmp_path: Path, case: str) -> None:
    ready, ev, reason = VOICE_CASES[case]
    async with pay_world(tmp_path) as w:
        pid, card_id = await voice_ready(w, **ready)
        v = await w.pay.voice_confirm(pid, said(w, **ev), owner_ctx("trace-t1"))
        assert not v.authorised and reason in v.reason, v
        assert v.card_id == card_id
        assert w.shop.charges() == []
        (unmet,) = fallbacks(w, "voice_pay_fallback")
        assert len(unmet) == 1 and reason in unmet[0], unmet
        # the card on the phone is still the way to pay
        card = w.gw.consent.card(card_id)
        assert card is not None and card.state == "pending"
        ans, done = await w.answer(w.sign(card))
        assert ans.outcome == "approved" and done is not None and done.status == "succeeded"
        assert len(w.shop.charges()) == 1


# ---------------------------------------------------------------- auto-pay
async def auto_ready(
    w: PayWorld,
    *,
    auto: bool = True,
    known: str = KNOWN,
    lease: bool = True,
    undo: int | None = 1,
) -> None:
    changes: dict[str, Any] = {"auto_pay": "on" if auto else "off"}
    if known:
        changes["known_payees"] = known
    if undo is not None:
        changes["undo_seconds"] = str(undo)
    w.options(**changes)
    if lease:
        assert w.lease()[0]


async def auto_pay(
    w: PayWorld, task: str, shop: str, items: tuple[tuple[str, int], ...], **kw: Any
) -> tuple[str, Any]:
    p = w.intent(task, budget=kw.pop("budget", "100"), **kw)
    r = await w.checkout(task, shop=shop, items=items)
    return p.payment_id, r


async def paid(w: PayWorld, pid: str) -> None:
    """Wait until ``pid`` is settled as paid: the payment turns ``paid`` first, then its
    receipt is stored, then its phone card is closed (an await lies between)."""

    def settled() -> bool:
        cards = [w.pay.cards.of(a) for a in w.pay.store.auths(pid)]
        return w.pay.store.get(pid).state == "paid" and all(  # type: ignore[union-attr]
            c is None or c.state in STATE_NAMES.values() for c in cards
        )

    await poll(settled, 15, f"{pid} to be paid after its undo window, its card closed")


async def test_auto_pay_when_every_condition_holds(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        # 3 s: the checks below run inside the undo window even on a loaded machine
        await auto_ready(w, undo=3)
        pid, r = await auto_pay(w, "t1", "lotus-kitchen", (("noodles", 4),))  # 50.00: ≤ 50
        assert r.status == "running" and r.next.waiting_for == "undo", r
        assert "paying in 3 s unless you undo" in r.error
        # no approval card: a notice that it pays by itself, which the phone may deny (undo)
        (notice,) = w.courier.shown
        assert notice.title == "auto-pay: 50.00 EUR to Lotus Kitchen in 3 s" and r.card_id
        assert notice.card_id == r.card_id and f"payment: {pid}" in notice.preview
        assert w.shop.charges() == [], "nothing paid inside the undo window"
        await paid(w, pid)
        assert [c["amount_minor"] for c in w.shop.charges()] == [5000]
        card = w.gw.consent.card(notice.card_id)
        assert card is not None and card.state == "executed"
        assert w.courier.updates[-1].card_id == notice.card_id
        assert "Paid 50.00 EUR" in w.courier.updates[-1].summary
        p = w.pay.store.get(pid)
        assert p is not None and p.mode == "auto"
        last = w.gw.ledger.call("t1", "t1-co")
        assert last is not None and last.status == "succeeded"
        w.audit_ok()


async def test_the_5_second_undo_cancels(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        await auto_ready(w, undo=None)  # the default: 5 s
        pid, r = await auto_pay(w, "t1", "lotus-kitchen", (("noodles", 2),))
        assert r.status == "running" and "paying in 5 s unless you undo" in r.error
        p = w.pay.store.get(pid)
        assert p is not None and p.undo_until_ms is not None
        assert 4_900 <= p.undo_until_ms - now_ms() <= 5_000
        assert await w.pay.execute(pid) is None, "not before the undo window ends"
        assert await w.pay.undo(pid, owner_ctx())
        assert w.pay.store.get(pid).state == "cancelled"  # type: ignore[union-attr]
        # after the window nothing can revive it
        real = w.pay.clock
        w.pay.clock = lambda: real() + 6_000
        assert await w.pay.execute(pid) is None
        await w.pay.sweep()
        assert w.shop.charges() == [] and w.pay_posts() == 0
        last = w.gw.ledger.call("t1", "t1-co")
        assert last is not None and last.status == "cancelled"


async def test_an_undo_after_the_window_is_too_late(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        await auto_ready(w)
        pid, _ = await auto_pay(w, "t1", "lotus-kitchen", (("noodles", 2),))
        await paid(w, pid)
        assert not await w.pay.undo(pid, owner_ctx())
        assert len(w.shop.charges()) == 1


AUTO_CASES: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    # name: (auto_ready kwargs, intent kwargs + items, expected reason)
    "auto-pay off": ({"auto": False}, {}, "auto-pay is off"),
    "over 50": ({}, {"items": (("noodles", 5),)}, "over the auto-pay limit of 50.00 EUR"),
    "unknown payee": ({"known": "Green Bowl"}, {}, "Lotus Kitchen is not a known payee"),
    "request not voice-verified": ({}, {"verified": False}, "not voice-verified"),
    "no unlock lease": ({"lease": False}, {}, "no valid unlock lease"),
    "over the request's budget": ({}, {"budget": "10"}, "over the request's budget"),
}


@pytest.mark.parametrize("case", list(AUTO_CASES))
async def test_auto_pay_falls_back_to_the_card(tmp_path: Path, case: str) -> None:
    ready, intent, reason = AUTO_CASES[case]
    async with pay_world(tmp_path) as w:
        await auto_ready(w, **ready)
        items = intent.pop("items", (("noodles", 2),))
        _, r = await auto_pay(w, "t1", "lotus-kitchen", items, **intent)
        assert r.status == "waiting" and r.card_id, r
        assert w.shop.charges() == []
        if case != "auto-pay off":
            (unmet,) = fallbacks(w, "auto_pay_fallback")
            assert len(unmet) == 1 and reason in unmet[0], unmet
        done = await w.approve(r)
        assert done.status == "succeeded" and len(w.shop.charges()) == 1


async def test_auto_pay_falls_back_when_the_payee_was_paid_within_30_min(tmp_path: Path) -> None:
    async with pay_world(tmp_path) as w:
        await auto_ready(w, auto=False)
        _, r = await auto_pay(w, "t1", "lotus-kitchen", (("noodles", 1),))
        assert (await w.approve(r)).status == "succeeded"  # paid on the card just now
        w.options(auto_pay="on")
        _, r = await auto_pay(w, "t2", "lotus-kitchen", (("tea", 1),))
        assert r.status == "waiting", r
        (unmet,) = fallbacks(w, "auto_pay_fallback")
        first = w.pay.store.for_task("t1")[0].payment_id
        assert unmet == [f"another payment to Lotus Kitchen within 30 min ({first})"]
        # another payee is fine
        pid, r = await auto_pay(w, "t3", "green-bowl", (("soup", 1),))
        assert r.status == "running"
        await paid(w, pid)


async def test_the_daily_auto_pay_cap_holds_across_a_hub_restart(tmp_path: Path) -> None:
    made = make_home(tmp_path)
    async with SandboxShop(pay_timeout=1.0) as shop:
        async with pay_world(tmp_path, made=made, shop=shop) as w:
            await auto_ready(w)
            for task, shop_id, items in (
                ("t1", "lotus-kitchen", (("noodles", 4),)),  # 50.00
                ("t2", "green-bowl", (("salad", 4), ("soup", 1))),  # 48.50
                ("t3", "corner-bakery", (("cake", 2),)),  # 48.00
            ):
                pid, r = await auto_pay(w, task, shop_id, items)
                assert r.status == "running", r
                await paid(w, pid)
            assert sum(c["amount_minor"] for c in shop.charges()) == 14650
            # 146.50 + 5.00 > 150: the card
            _, r = await auto_pay(w, "t4", "tea-house", (("mooncake", 1),))
            assert r.status == "waiting", r
            (unmet,) = fallbacks(w, "auto_pay_fallback")
            assert unmet == ["over today's auto-pay cap of 150.00 EUR (146.50 EUR already)"]
        # the hub restarts: the cap is in the database, not in memory
        async with pay_world(tmp_path, made=made, shop=shop) as w2:
            _, r = await auto_pay(w2, "t5", "tea-house", (("mooncake", 1),))
            assert r.status == "waiting", r
            assert fallbacks(w2, "auto_pay_fallback")[-1] == [
                "over today's auto-pay cap of 150.00 EUR (146.50 EUR already)"
            ]
            # and it is exact: 146.50 + 3.00 = 149.50 still fits
            pid, r = await auto_pay(w2, "t6", "tea-house", (("oolong", 1),))
            assert r.status == "running", r
            await paid(w2, pid)
            assert sum(c["amount_minor"] for c in shop.charges()) == 14950
            w2.audit_ok()
