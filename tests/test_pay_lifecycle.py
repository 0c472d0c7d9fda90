"""The payment lifecycle tables and the pure payment rules (no gateway, no shop)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from hub.gateway import CallContext
from hub.payments import lifecycle, policy
from hub.payments.model import (
    AWAITING,
    FINAL,
    INTENT,
    PAID,
    STATES,
    Payment,
    PaymentRequest,
    VoiceEvidence,
    new_authorisation,
)
from hub.payments.options import PayOptions
from hub.payments.store import PaymentStore


def payment(**kw: object) -> Payment:
    voice = VoiceEvidence("phone-1", "u1", "verified", "voiceprint", 1_000)
    base = Payment(
        payment_id="pay-1",
        task_id="t1",
        owner="owner",
        trace_id="tr",
        request=PaymentRequest("owner_voice", "u1", "phone-1", voice=voice),
        description="lunch",
        budget_minor=3000,
        currency="EUR",
        state=AWAITING,
        payee="Lotus Kitchen",
        amount_minor=1850,
        checkout_id="co-1",
        created_ms=1_000,
        updated_ms=1_000,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_the_tables_cover_every_state_and_final_states_go_nowhere() -> None:
    assert set(lifecycle.TRANSITIONS) == set(STATES)
    assert all(not lifecycle.TRANSITIONS[s] for s in FINAL)
    assert all(t in STATES for targets in lifecycle.TRANSITIONS.values() for t in targets)
    with pytest.raises(ValueError, match="paid → paying"):
        lifecycle.check([PAID], "paying")
    with pytest.raises(ValueError):
        lifecycle.check(["used"], "approved", lifecycle.AUTH_TRANSITIONS)


def test_the_store_refuses_a_move_the_lifecycle_does_not_have(tmp_path: Path) -> None:
    store = PaymentStore(tmp_path / "payments.db", synchronous="OFF")
    try:
        store.insert(payment(state=INTENT))
        with pytest.raises(ValueError):
            store.move("pay-1", INTENT, PAID, "skipping the owner")
        assert store.get("pay-1").state == INTENT  # type: ignore[union-attr]
        assert store.move("pay-1", INTENT, AWAITING, "checkout read back")
        assert not store.move("pay-1", INTENT, AWAITING, "twice")  # compare-and-set
    finally:
        store.close()


def test_auto_pay_rules_take_their_facts_and_time_explicitly() -> None:
    opts = PayOptions(auto_pay=True)
    ok = policy.Standing(known_payee=True, lease=True)
    p = payment(amount_minor=1850)
    assert policy.auto_unmet(p, opts, ok) == []
    assert policy.auto_unmet(p, PayOptions(), ok) == ["auto-pay is off"]
    unmet = policy.auto_unmet(
        p, opts, replace(ok, lease=False, spent_today=14000, recent_to_payee=("pay-0",))
    )
    assert [u.split(" ")[0] for u in unmet] == ["over", "no", "another"], unmet


def test_voice_pay_rules_take_their_facts_and_time_explicitly() -> None:
    opts = PayOptions(voice_pay=True)
    ok = policy.Standing(known_payee=True, lease=True)
    p = payment()
    auth = new_authorisation(p, "card", 2_000)
    ev = VoiceEvidence("phone-1", "u2", "verified", "voiceprint", 2_500)
    ctx = CallContext()
    assert policy.voice_unmet(p, auth, ev, ctx, opts, ok, 3_000) == []
    late = auth.expires_ms + 1
    assert "not waiting" in policy.voice_unmet(p, auth, ev, ctx, opts, ok, late)[0]
    early = replace(ev, heard_ms=1_500)
    assert policy.voice_unmet(p, auth, early, ctx, opts, ok, 3_000) == [
        "said before the amount was read back"
    ]
