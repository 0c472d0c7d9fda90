"""Untrusted inputs at the gateway's boundaries never raise and only ever downgrade."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hub.gateway.audit import verify
from hub.gateway.consent import ConsentAuthority
from hub.gateway.ledger import Ledger
from hub.gateway.receipts import STATUSES, enforce, parse_receipt
from protos import consent_pb2

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
effect = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["email.sent", "x", ""]),
        "state": st.sampled_from(["verified", "service_ack", "not_verified", "unknown", "bogus"]),
    }
)
value = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["t", ""]),
        "value": st.one_of(
            st.integers(), st.floats(allow_nan=False), st.text(max_size=5), st.booleans()
        ),
    },
    optional={"unit": st.one_of(st.none(), st.sampled_from(["°C", "%"]), st.integers())},
)
receiptish = st.fixed_dictionaries(
    {
        "receipt_version": st.sampled_from([1, 1, 2, "1"]),
        "status": st.sampled_from([*STATUSES, "done", ""]),
    },
    optional={
        "effects": st.lists(effect, max_size=3),
        "values": st.lists(value, max_size=3),
        "error": st.one_of(
            st.fixed_dictionaries({"code": st.sampled_from(["TIMEOUT", "X"])}), json_values
        ),
        "next": st.one_of(
            st.fixed_dictionaries({"retry": st.sampled_from(["safe", "forbidden", "never"])}),
            json_values,
        ),
        "revision": st.one_of(st.integers(-2, 5), json_values),
        "unknowns": st.one_of(st.lists(st.text(max_size=5), max_size=3), json_values),
    },
)


@given(st.one_of(json_values, receiptish))
@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
def test_receipts_parse_without_raising_and_only_downgrade(raw: Any) -> None:
    r = parse_receipt(raw)
    if r is None:
        return
    out = enforce(r, retry="safe", check_with="check")
    assert out.status in STATUSES
    assert out.status != "rejected", "only the gateway writes rejected"
    if out.status != r.status:
        assert out.status in ("unknown", "partial")
    if out.status == "succeeded":
        assert all(e.state in ("verified", "service_ack") for e in out.effects)
    assert all(v.unit is not None or isinstance(v.value, str) or v.flagged for v in out.values)


@given(body=st.binary(max_size=300), sig=st.binary(max_size=80), sync=st.booleans())
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_hostile_approvals_are_refused_not_raised(
    tmp_path: Path, body: bytes, sig: bytes, sync: bool
) -> None:
    ledger = Ledger(tmp_path / "g.db", synchronous="OFF")
    try:
        ans = ConsentAuthority(ledger).answer(
            consent_pb2.Approval(body=body, signature=sig, sync=sync),
            device_id="d",
            sign_pk=b"\x01" * 32,
            scopes=("approve",),
        )
        assert ans.outcome == "refused"
    finally:
        ledger.close()


@given(data=st.binary(max_size=400), head=st.binary(max_size=200))
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_audit_verify_never_raises_on_garbage(tmp_path: Path, data: bytes, head: bytes) -> None:
    (tmp_path / "audit.jsonl").write_bytes(data)
    (tmp_path / "audit.head").write_bytes(head)
    v = verify(tmp_path, b"\x02" * 32)
    assert v.ok is False or data == b""
