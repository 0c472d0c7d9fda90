"""Group commit and the in-memory decide state (issue 21): concurrent receipts share one
durable batch (one ledger fsync, one audit write, one signed head); nobody is answered
before their batch is durable; a batch whose write fails fails every caller of it and
keeps what was committed before; a revoked first-send consent is refused on the very next
decide."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from nacl.signing import SigningKey

from hub.capabilities.host import ToolOutcome
from hub.gateway import CallContext, Decision, Gateway, Receipt, ToolCall, open_gateway
from hub.gateway import commit as commit_module
from hub.gateway.audit import AuditLog, Prepared, records, verify
from hub.gateway.errors import GatewayError
from hub.gateway.ledger import CallRow, Ledger
from storage.group_commit import GroupCommit
from storage.sqlite import read_rows
from tests.checkpoint_kit import held_checkpoints
from tests.gateway_kit import PACKAGES
from tests.waiting import poll

CTX = CallContext(owner="owner", scope="owner", session_id="s", run_id="r", trace_id="t")
SIGNER = SigningKey.generate()
VERIFY_KEY = bytes(SIGNER.verify_key)
ECHOED = ToolOutcome(
    structured={
        "receipt_version": 1,
        "status": "succeeded",
        "effects": [{"kind": "echo", "state": "verified", "fields": {"n": 1}}],
        "values": [{"name": "size", "value": 3, "unit": "items"}],
    }
)


@asynccontextmanager
async def gw_at(tmp: Path, *, settled_by_caller: bool = False) -> AsyncIterator[Gateway]:
    async with open_gateway(
        tmp / "gw",
        packages=[PACKAGES["probe"], PACKAGES["messaging"]],
        audit_signer=SIGNER,
        settled_by_caller=settled_by_caller,
    ) as gw:
        yield gw


async def decided(gw: Gateway, n: int, prefix: str) -> list[tuple[ToolCall, Decision]]:
    out = []
    for i in range(n):
        c = ToolCall("probe", "echo", {"text": str(i)}, f"{prefix}{i}", f"task-{prefix}")
        d = await gw.decide(c, CTX)
        assert d.runs
        out.append((c, d))
    return out


def ledger_receipts(tmp: Path) -> set[str]:
    """Call ids with a receipt, read by another connection (what is committed)."""
    rows = read_rows(
        tmp / "gw" / "gateway.db", "SELECT call_id FROM calls WHERE receipt IS NOT NULL"
    )
    return {str(r[0]) for r in rows}


def audited_seq(tmp: Path, call_id: str) -> int:
    return next(
        r["seq"]
        for r in records(tmp / "gw" / "audit")
        if r["kind"] == "receipt" and r["data"]["call_id"] == call_id
    )


def audited(tmp: Path) -> set[str]:
    return {r["data"]["call_id"] for r in records(tmp / "gw" / "audit") if r["kind"] == "receipt"}


def count_ledger_syncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The file descriptors the ledger ``fdatasync``s from now on (each still synced)."""
    from hub.gateway import ledger as ledger_module

    synced: list[int] = []
    real = ledger_module.os.fdatasync

    def counting(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(ledger_module.os, "fdatasync", counting)
    return synced


async def test_concurrent_receipts_share_a_batch_and_each_returns_only_once_durable(
    tmp_path: Path,
) -> None:
    async with gw_at(tmp_path) as gw:
        calls = await decided(gw, 8, "c")
        await gw.commits.drain()
        before = gw.commits.stats.batches
        seen: dict[str, tuple[bool, bool, bool]] = {}

        async def caller(c: ToolCall, d: Decision) -> Receipt:
            r = await gw.receipt(c, CTX, d, ECHOED)
            # at the moment this caller is answered, its batch is on disk: the ledger row
            # is committed, the audit record written and named by the signed head
            # (the next batch may be half written by now: verify() waits for the end)
            head = json.loads((tmp_path / "gw" / "audit" / "audit.head").read_bytes())
            seen[c.call_id] = (
                c.call_id in ledger_receipts(tmp_path),
                c.call_id in audited(tmp_path),
                audited_seq(tmp_path, c.call_id) <= head["seq"],
            )
            return r

        got = await asyncio.gather(*(caller(c, d) for c, d in calls))
        assert [r.status for r in got] == ["succeeded"] * 8
        assert seen == {c.call_id: (True, True, True) for c, _ in calls}
        sizes = gw.commits.stats.sizes[-(gw.commits.stats.batches - before) :]
        assert sum(sizes) == 8
        assert len(sizes) < 8 and max(sizes) > 1, f"8 callers, batches {sizes}: none shared"
    assert verify(tmp_path / "gw" / "audit", VERIFY_KEY).ok


async def test_a_failed_batch_fails_every_caller_and_keeps_what_was_committed(
    tmp_path: Path,
) -> None:
    async with gw_at(tmp_path) as gw:
        ok = await decided(gw, 3, "ok")
        for c, d in ok:
            assert (await gw.receipt(c, CTX, d, ECHOED)).status == "succeeded"
        doomed = await decided(gw, 8, "x")
        (lone, lone_d) = (await decided(gw, 1, "y"))[0]
        await gw.commits.drain()
        audit_dir = tmp_path / "gw" / "audit"
        log_before = (audit_dir / "audit.jsonl").read_bytes()
        fd = gw.audit._fd
        saved = os.dup(fd)
        full = os.open("/dev/full", os.O_WRONLY)
        os.dup2(full, fd)  # every write to the audit log now fails: ENOSPC
        try:
            results = await asyncio.gather(
                *(gw.receipt(c, CTX, d, ECHOED) for c, d in doomed), return_exceptions=True
            )
            with pytest.raises(GatewayError, match="not acknowledged"):  # a batch of one
                await gw.receipt(lone, CTX, lone_d, ECHOED)
        finally:
            os.dup2(saved, fd)
            os.close(saved)
            os.close(full)
        assert all(isinstance(r, GatewayError) for r in results), results
        errors = [r for r in results if isinstance(r, GatewayError)]
        assert {e.key for e in errors} == {"gateway.commit_failed"}
        assert "not acknowledged" in str(errors[0]) and "No space left" in str(errors[0])
        # what was committed before is whole, and the chain still verifies
        assert (audit_dir / "audit.jsonl").read_bytes() == log_before
        assert verify(audit_dir, VERIFY_KEY).ok
        assert {c.call_id for c, _ in ok} <= audited(tmp_path)
        assert {c.call_id for c, _ in ok} <= ledger_receipts(tmp_path)
        # the fault is gone: the same receipts again are recorded and audited once each
        again = await asyncio.gather(*(gw.receipt(c, CTX, d, ECHOED) for c, d in doomed))
        assert [r.status for r in again] == ["succeeded"] * 8
        assert (await gw.receipt(lone, CTX, lone_d, ECHOED)).status == "succeeded"
        assert {c.call_id for c, _ in [*doomed, (lone, lone_d)]} <= audited(tmp_path)
        receipts = [r for r in records(audit_dir) if r["kind"] == "receipt"]
        assert len(receipts) == len({r["data"]["call_id"] for r in receipts}) == 12
    assert verify(tmp_path / "gw" / "audit", VERIFY_KEY).ok


def send(call_id: str, to: str = "ann@example.org") -> ToolCall:
    args = {"to": to, "subject": "Lunch", "body": "noon", "owner_requested": True}
    return ToolCall("messaging", "send_email", args, call_id, f"task-{call_id}")


async def test_a_revoked_consent_is_refused_on_the_very_next_decide(tmp_path: Path) -> None:
    async with gw_at(tmp_path) as gw:
        assert (await gw.decide(send("s1"), CTX)).outcome == "confirm"  # first send: a card
        gw.consent.remember_send("owner", "Ann@example.org", "email")
        assert (await gw.decide(send("s2"), CTX)).runs  # remembered: no card
        assert gw.consent.forget_send("owner", "ann@example.org", "email")
        revoked = await gw.decide(send("s3"), CTX)
        assert revoked.outcome == "confirm" and revoked.card is not None
        assert not gw.consent.forget_send("owner", "ann@example.org", "email")
        gw.consent.remember_send("owner", "ann@example.org", "email")
    # the memory is the ledger's: a new gateway on the same state reads it back
    async with gw_at(tmp_path) as gw:
        assert (await gw.decide(send("s4"), CTX)).runs
        assert (await gw.decide(send("s5", "bob@example.org"), CTX)).outcome == "confirm"


async def test_an_effectful_decision_is_committed_before_decide_returns(tmp_path: Path) -> None:
    async with gw_at(tmp_path) as gw:
        gw.consent.remember_send("owner", "ann@example.org", "email")
        d = await gw.decide(send("e1"), CTX)
        assert d.runs
        rows = read_rows(tmp_path / "gw" / "gateway.db", "SELECT call_id FROM calls")
        assert ("e1",) in rows
        decisions = [r["data"]["call_id"] for r in records(tmp_path / "gw" / "audit")]
        assert "e1" in decisions


@pytest.mark.parametrize("n", [1, 20])
async def test_observe_decisions_are_durable_by_close_and_chain_verifies(
    tmp_path: Path, n: int
) -> None:
    async with gw_at(tmp_path) as gw:
        await decided(gw, n, "o")
    got = [r for r in records(tmp_path / "gw" / "audit") if r["kind"] == "decision"]
    assert len(got) == n
    assert verify(tmp_path / "gw" / "audit", VERIFY_KEY).ok


async def test_an_observe_decision_rides_with_its_receipt_or_is_written_by_itself(
    tmp_path: Path,
) -> None:
    async with gw_at(tmp_path) as gw:
        ((c, d),) = await decided(gw, 1, "ride")
        before = gw.commits.stats.batches
        r = await gw.receipt(c, CTX, d, ECHOED)
        assert r.status == "succeeded"
        # one batch made the decision and the receipt durable together
        assert gw.commits.stats.batches == before + 1
        kinds = [(x["kind"], x["data"]["call_id"]) for x in records(tmp_path / "gw" / "audit")]
        assert kinds[-2:] == [("decision", "ride0"), ("receipt", "ride0")]
        # a decision whose receipt does not come is written on its own, soon
        await decided(gw, 1, "alone")
        await poll(
            lambda: "alone0" in {x["data"]["call_id"] for x in records(tmp_path / "gw" / "audit")},
            what="the lone observe decision audited",
        )
        assert ("alone0",) in read_rows(tmp_path / "gw" / "gateway.db", "SELECT call_id FROM calls")
    assert verify(tmp_path / "gw" / "audit", VERIFY_KEY).ok


async def test_in_the_hub_an_observe_receipt_is_made_durable_by_the_next_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``settled_by_caller`` (the hub's gateway): an ``observe`` call's receipt returns at
    once, staged; the hub's group commit, which runs before anything leaves the hub, waits
    until it is committed and synced. Any other receipt still returns only once durable."""
    monkeypatch.setattr(commit_module, "LATER_S", 60.0)  # no batch unless one is awaited
    group = GroupCommit()
    settles: list[int] = []

    async def settle() -> None:
        settles.append(1)
        await gw.commits.settled()

    async with group, gw_at(tmp_path, settled_by_caller=True) as gw:
        remove = group.also(settle)
        ((c, d),) = await decided(gw, 1, "obs")
        before = gw.commits.stats.batches
        r = await gw.receipt(c, CTX, d, ECHOED)
        assert r.status == "succeeded"
        assert gw.commits.stats.batches == before  # not written yet: nothing waited
        assert "obs0" not in ledger_receipts(tmp_path)
        await group.flush()  # what every message, web response and gRPC answer awaits
        assert gw.commits.stats.batches == before + 1
        assert "obs0" in ledger_receipts(tmp_path)
        assert "obs0" in audited(tmp_path)
        await group.flush()  # nothing staged: no batch
        assert gw.commits.stats.batches == before + 1
        # a call with an effect: its receipt is durable when receipt() returns
        gw.consent.remember_send("owner", "ann@example.org", "email")
        sent = send("eff1")
        dec = await gw.decide(sent, CTX)
        assert dec.runs and dec.effect == "send"
        mailed = ToolOutcome(
            structured={
                "receipt_version": 1,
                "status": "succeeded",
                "effects": [{"kind": "email", "state": "verified", "fields": {}}],
            }
        )
        await gw.receipt(sent, CTX, dec, mailed)
        assert "eff1" in ledger_receipts(tmp_path)
        remove()
        asked = len(settles)
        await group.flush()  # no longer the group's: its flush does not ask
        assert len(settles) == asked
        # an observe receipt nobody flushes for is still written soon (LATER_S)
        monkeypatch.setattr(commit_module, "LATER_S", 0.05)
        ((c2, d2),) = await decided(gw, 1, "idle")
        await gw.receipt(c2, CTX, d2, ECHOED)
        await poll(lambda: "idle0" in ledger_receipts(tmp_path), what="the idle receipt")
    assert verify(tmp_path / "gw" / "audit", VERIFY_KEY).ok


async def test_delivered_facts_are_said_at_once_and_durable_with_the_next_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ACK of a reply that carried a receipt's facts marks them said: this gateway's
    reads see it at once, no sync runs on the caller's loop for it (the hub handles every
    ACK there), and the hub's flush — before anything it sends next — makes it durable."""
    monkeypatch.setattr(commit_module, "LATER_S", 60.0)  # no batch unless one is awaited
    group = GroupCommit()

    def said(task_id: str) -> list[object]:
        """Facts of ``task_id`` said, as another connection sees them (what is committed)."""
        rows = read_rows(
            tmp_path / "gw" / "gateway.db",
            "SELECT fact_id FROM facts WHERE task_id=? AND said_ms IS NOT NULL",
            task_id,
        )
        return [r[0] for r in rows]

    async with group, gw_at(tmp_path, settled_by_caller=True) as gw:
        group.also(gw.commits.settled)
        ((c, d),) = await decided(gw, 1, "said")
        r = await gw.receipt(c, CTX, d, ECHOED)
        await group.flush()
        assert r.new_facts and not r.said_facts and said(c.task_id) == []
        synced = count_ledger_syncs(monkeypatch)
        before = gw.commits.stats.batches
        gw.delivered(c.task_id, [r])
        assert synced == []  # nothing synced on the caller's loop
        again = await gw.receipt(c, CTX, d, ECHOED)  # the same receipt, read back
        assert set(again.said_facts) == set(r.new_facts) and not again.new_facts
        assert said(c.task_id) == []  # staged: another connection does not see it yet
        await group.flush()  # what the hub's next message, response or answer awaits
        assert gw.commits.stats.batches == before + 1 and len(synced) == 1
        assert sorted(map(str, said(c.task_id))) == sorted(r.new_facts)
        gw.delivered(c.task_id, [])  # no facts: nothing staged, no batch
        await group.flush()
        assert gw.commits.stats.batches == before + 1


async def test_settled_reports_a_batch_that_failed(tmp_path: Path) -> None:
    async with gw_at(tmp_path, settled_by_caller=True) as gw:
        await gw.commits.settled()  # nothing staged or written: at once
        ((c, d),) = await decided(gw, 1, "bad")
        await gw.commits.drain()
        await gw.receipt(c, CTX, d, ECHOED)
        fd = gw.audit._fd
        saved = os.dup(fd)
        full = os.open("/dev/full", os.O_WRONLY)
        os.dup2(full, fd)  # the batch's audit write fails: ENOSPC
        try:
            with pytest.raises(GatewayError) as err:
                await gw.commits.settled()
        finally:
            os.dup2(saved, fd)
            os.close(saved)
            os.close(full)
        assert err.value.key == "gateway.commit_failed"


async def test_a_caller_that_gives_up_leaves_its_batch_to_the_others(tmp_path: Path) -> None:
    async with gw_at(tmp_path) as gw:
        calls = await decided(gw, 4, "cx")
        await gw.commits.drain()
        release = threading.Event()
        write = gw.commits._write

        def held(prepared: Prepared) -> None:
            release.wait(20)
            write(prepared)

        gw.commits._write = held  # type: ignore[method-assign,assignment]
        tasks = [asyncio.ensure_future(gw.receipt(c, CTX, d, ECHOED)) for c, d in calls]
        await poll(lambda: gw.commits._writing is not None, what="the batch of 4 being written")
        tasks[0].cancel()  # its caller gives up while the batch is on its way to disk
        release.set()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(done[0], asyncio.CancelledError)
        assert [r.status for r in done[1:] if isinstance(r, Receipt)] == ["succeeded"] * 3
        assert gw.commits.stats.sizes[-1] == 4
    assert {c.call_id for c, _ in calls} <= audited(tmp_path)  # the batch was written whole


def test_a_ledger_transaction_that_changes_nothing_syncs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hub.gateway.ledger import Ledger

    ledger = Ledger(tmp_path / "gateway.db")
    synced = count_ledger_syncs(monkeypatch)
    try:
        ledger.mark_said("t-none", ["f-none"])  # no such fact: nothing written
        assert synced == []
        with ledger.transaction() as db:  # a real write: durable on return
            db.execute("UPDATE facts SET said_ms=1 WHERE task_id='nobody'")
            db.execute("CREATE TABLE IF NOT EXISTS scratch (x)")
            db.execute("INSERT INTO scratch VALUES (1)")
        assert len(synced) == 1
    finally:
        ledger.close()


def test_the_duplicate_rule_reads_no_more_as_a_task_gains_calls(tmp_path: Path) -> None:
    """The brain's slot-list reads are one ledger task that gains a call every few seconds
    for as long as the hub runs; the duplicate rule's look-up of a call's earlier twins
    costs the same SQLite work with 10 earlier calls as with 1000 (it read and parsed
    every one of them, on the event loop)."""
    from hub.gateway.ledger import Ledger

    ledger = Ledger(tmp_path / "gateway.db")
    steps = [0]

    def step() -> bool:
        steps[0] += 1
        return False

    def add(n: int, status: str | None, outcome: str = "allow") -> None:
        start = int(str(ledger.db.execute("SELECT count(*) FROM calls").fetchall()[0][0]))
        for i in range(start, start + n):
            ledger.record_decision(
                task_id="slots", call_id=f"c{i}", package="home", tool="list_devices",
                action_hash="h", args_fp="a", effect="read", target="", outcome=outcome,
                decision={"outcome": outcome, "receipt": "x" * 2000}, sync=False,
            )  # fmt: skip
            ledger.db.execute("UPDATE calls SET status=? WHERE call_id=?", (status, f"c{i}"))

    def work(statuses: tuple[str | None, ...]) -> tuple[int, str | None]:
        steps[0] = 0
        ledger.db.set_progress_handler(step, 1)
        try:
            row = ledger.same_action("slots", "h", "new", statuses)
        finally:
            ledger.db.set_progress_handler(None)
        return steps[0], None if row is None else row.call_id

    try:
        add(5, "succeeded")
        add(5, None, outcome="block")
        small = [work(("waiting",)), work(("waiting", None, "succeeded"))]
        add(500, "succeeded")
        add(500, None, outcome="block")
        large = [work(("waiting",)), work(("waiting", None, "succeeded"))]
        assert [c for _, c in small] == [c for _, c in large] == [None, "c0"]
        assert [n for n, _ in large] == [n for n, _ in small]
        add(1, "waiting")
        assert work(("waiting",))[1] == "c1010"
        assert work(("waiting", "succeeded"))[1] == "c0"  # the first of them, as before
    finally:
        ledger.close()


def test_a_new_call_and_its_first_receipt_are_written_without_reading_first(
    tmp_path: Path,
) -> None:
    """A decision is one INSERT and its first receipt one UPDATE (plus its facts): no read
    of the call before either (both ran on every tool call). A call decided again, other
    arguments, a receipt for an undecided call and a second receipt still take the checked
    path, with the same answers as before."""
    ledger = Ledger(tmp_path / "gateway.db")
    ran: list[str] = []

    def trace(_cursor: object, sql: str, _bindings: object) -> bool:
        ran.append(sql.split(None, 1)[0].upper())
        return True

    def decide(call_id: str, args_fp: str = "a", tool: str = "echo") -> CallRow:
        return ledger.record_decision(
            task_id="t", call_id=call_id, package="probe", tool=tool, action_hash="h",
            args_fp=args_fp, effect="observe", target="", outcome="allow",
            decision={"outcome": "allow"}, sync=False,
        )  # fmt: skip

    first = Receipt(status="succeeded", task_id="t", call_id="c1")
    try:
        ledger.db.exec_trace = trace
        row = decide("c1")
        stored, fresh = ledger.record_receipt("t", "c1", first, {"f1": "it ran"}, sync=False)
        ledger.db.exec_trace = None
        assert "SELECT" not in ran, ran
        assert ran.count("INSERT") == 2 and ran.count("UPDATE") == 1, ran
        assert row.decision == {"outcome": "allow"} and row.status is None
        assert fresh and stored is first
        again = decide("c1")  # the same call again: the row as first stored
        assert (again.call_id, again.args_fp, again.status) == ("c1", "a", "succeeded")
        assert again.receipt == json.loads(first.canonical_content)
        for other in ({"args_fp": "b"}, {"tool": "other"}):
            with pytest.raises(GatewayError) as err:
                decide("c1", **other)
            assert err.value.key == "ledger.conflict"
        with pytest.raises(GatewayError) as err:
            ledger.record_receipt("t", "nobody", first, sync=False)
        assert err.value.key == "ledger.no_decision"
        same, fresh = ledger.record_receipt("t", "c1", first, sync=False)
        assert not fresh and same.content() == first.content()
        with pytest.raises(GatewayError) as err:  # other content at the same revision
            ledger.record_receipt("t", "c1", Receipt(status="failed"), sync=False)
        assert err.value.key == "ledger.conflict"
        newer = Receipt(status="failed", revision=1)
        assert ledger.record_receipt("t", "c1", newer, sync=False) == (newer, True)
        ledger.commit_group()
        rows = ledger.db.execute("SELECT count(*), max(status) FROM calls").fetchall()
        assert rows == [(1, "failed")]
        facts = ledger.db.execute("SELECT fact_id, text FROM facts").fetchall()
        assert facts == [("f1", "it ran")]
    finally:
        ledger.db.exec_trace = None
        ledger.close()


async def test_a_head_lost_in_a_crash_is_restored_from_the_ledger_and_the_chain_goes_on(
    tmp_path: Path,
) -> None:
    head_path = tmp_path / "gw" / "audit" / "audit.head"
    async with gw_at(tmp_path) as gw:
        for c, d in await decided(gw, 2, "a"):
            await gw.receipt(c, CTX, d, ECHOED)
        old_head = head_path.read_bytes()
        for c, d in await decided(gw, 3, "b"):
            await gw.receipt(c, CTX, d, ECHOED)
    # the crash: the last head rewrite never reached the disk (it is not synced on its
    # own: the same signed head went to the ledger with the batch, and that was synced)
    head_path.write_bytes(old_head)
    assert not verify(tmp_path / "gw" / "audit", VERIFY_KEY).ok
    async with gw_at(tmp_path) as gw:
        assert verify(tmp_path / "gw" / "audit", VERIFY_KEY).ok  # restored at open
        for c, d in await decided(gw, 2, "c"):
            await gw.receipt(c, CTX, d, ECHOED)
    assert verify(tmp_path / "gw" / "audit", VERIFY_KEY).ok
    assert {f"b{i}" for i in range(3)} | {"c0", "c1"} <= audited(tmp_path)


async def test_records_past_the_head_nobody_was_told_about_are_cut_at_open(
    tmp_path: Path,
) -> None:
    from hub.gateway.ledger import Ledger

    audit_dir = tmp_path / "gw" / "audit"
    async with gw_at(tmp_path) as gw:
        for c, d in await decided(gw, 2, "a"):
            await gw.receipt(c, CTX, d, ECHOED)
        old_head = (audit_dir / "audit.head").read_bytes()
        old_log = (audit_dir / "audit.jsonl").read_bytes()
        for c, d in await decided(gw, 2, "b"):
            await gw.receipt(c, CTX, d, ECHOED)
    # the crash: the last batch's records reached the log, its ledger transaction (with
    # its head) did not; and a torn line after them
    (audit_dir / "audit.head").write_bytes(old_head)
    ledger = Ledger(tmp_path / "gw" / "gateway.db")
    try:
        with ledger.transaction() as db:
            db.execute("UPDATE audit_head SET head=?", (old_head.rstrip(),))
    finally:
        ledger.close()
    with (audit_dir / "audit.jsonl").open("ab") as fh:
        fh.write(b'{"data":{"call_id":"torn"')
    async with gw_at(tmp_path) as gw:
        assert (audit_dir / "audit.jsonl").read_bytes() == old_log
        assert verify(audit_dir, VERIFY_KEY).ok
        for c, d in await decided(gw, 1, "c"):
            await gw.receipt(c, CTX, d, ECHOED)
    assert verify(audit_dir, VERIFY_KEY).ok


async def test_a_head_not_signed_by_the_hub_is_never_restored(tmp_path: Path) -> None:
    from hub.gateway.ledger import Ledger

    audit_dir = tmp_path / "gw" / "audit"
    async with gw_at(tmp_path) as gw:
        for c, d in await decided(gw, 2, "a"):
            await gw.receipt(c, CTX, d, ECHOED)
        old_head = (audit_dir / "audit.head").read_bytes()
        for c, d in await decided(gw, 2, "b"):
            await gw.receipt(c, CTX, d, ECHOED)
    good = json.loads((audit_dir / "audit.head").read_bytes())
    forged = json.dumps({**good, "sig": SigningKey.generate().sign(b"x").signature.hex()})
    (audit_dir / "audit.head").write_bytes(old_head)
    ledger = Ledger(tmp_path / "gw" / "gateway.db")
    try:
        with ledger.transaction() as db:
            db.execute("UPDATE audit_head SET head=?", (forged.encode(),))
    finally:
        ledger.close()
    with (audit_dir / "audit.jsonl").open("ab") as fh:
        fh.write(b'{"data":{"call_id":"torn"')
    async with gw_at(tmp_path):  # not restored, nothing acknowledged cut: verify tells
        assert (audit_dir / "audit.head").read_bytes() == old_head
        assert (audit_dir / "audit.jsonl").read_bytes().endswith(b"\n")  # the torn line
    verdict = verify(audit_dir, VERIFY_KEY)
    assert not verdict.ok and "past the head" in verdict.problem
    assert {"b0", "b1"} <= audited(tmp_path)


# ---------------------------------------------------------------- one fsync per batch
# A batch's audit records are durable through the ledger's WAL (with its rows and its
# signed head); the audit file is written without a sync of its own. After a crash the
# file may lack the tail the ledger holds: at open it is re-appended from the ledger.


def snapshot(tmp: Path, name: str) -> Path:
    """What a crash right now would leave on disk, had the page cache kept the ledger's
    WAL (synced) and everything else as written: the gateway's folder copied while it is
    open and idle (SQLite rebuilds its shared-memory index from the WAL)."""
    dest = tmp / name
    shutil.copytree(tmp / "gw", dest / "gw", ignore=shutil.ignore_patterns("*-shm"))
    return dest


def receipt_lines(audit_dir: Path) -> list[str]:
    return [r["data"]["call_id"] for r in records(audit_dir) if r["kind"] == "receipt"]


async def acknowledged(gw: Gateway, prefix: str) -> set[str]:
    """Receipts acknowledged in several batches: one at a time, then 6 at once."""
    done: set[str] = set()
    for c, d in await decided(gw, 3, f"{prefix}1-"):
        assert (await gw.receipt(c, CTX, d, ECHOED)).status == "succeeded"
        done.add(c.call_id)
    calls = await decided(gw, 6, f"{prefix}2-")
    got = await asyncio.gather(*(gw.receipt(c, CTX, d, ECHOED) for c, d in calls))
    assert [r.status for r in got] == ["succeeded"] * 6
    done |= {c.call_id for c, _ in calls}
    await gw.commits.drain()
    return done


def cut_after(audit_dir: Path, seq: int, extra: bytes = b"") -> None:
    """The crash lost the log's records after ``seq`` (``extra``: a torn piece of the next)."""
    data = (audit_dir / "audit.jsonl").read_bytes()
    lines = data.splitlines(keepends=True)
    (audit_dir / "audit.jsonl").write_bytes(b"".join(lines[:seq]) + extra)


def ledger_batches(gw_dir: Path) -> list[tuple[int, int]]:
    return [
        (int(a), int(b))
        for a, b in read_rows(
            gw_dir / "gateway.db", "SELECT first_seq, last_seq FROM audit_batches"
        )
    ]


async def crashed_before_the_file_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefix: str
) -> Path:
    """The gateway folder a crash leaves after receipts were acknowledged and before the
    audit file's background sync: the ledger still holds every batch. Returns its
    ``audit`` folder."""
    monkeypatch.setattr(commit_module, "CHECKPOINT_S", 3600.0)  # no file sync meanwhile
    async with gw_at(tmp_path) as gw:
        await acknowledged(gw, prefix)
        crashed = snapshot(tmp_path, "crash")
    return crashed / "gw" / "audit"


@pytest.mark.parametrize("torn", [False, True])
async def test_acknowledged_records_the_audit_file_lost_are_re_appended_from_the_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, torn: bool
) -> None:
    monkeypatch.setattr(commit_module, "CHECKPOINT_S", 3600.0)  # no file sync meanwhile
    async with gw_at(tmp_path) as gw:
        done = await acknowledged(gw, "k")
        head_before = (tmp_path / "gw" / "audit" / "audit.head").read_bytes()
        assert ledger_batches(tmp_path / "gw"), "the batches' records are in the ledger"
        crashed = snapshot(tmp_path, "crash")
    # the crash came after the ledger's sync, before the file and its head reached the
    # disk: the log ends after the first records (with a torn line), its head older still
    audit_dir = crashed / "gw" / "audit"
    full = receipt_lines(audit_dir)
    cut_after(audit_dir, 2, b'{"data":{"call_id":"k2-' if torn else b"")
    (audit_dir / "audit.head").write_bytes(b"")
    assert not verify(audit_dir, VERIFY_KEY).ok
    async with gw_at(crashed) as gw:
        assert (audit_dir / "audit.head").read_bytes() == head_before
        assert verify(audit_dir, VERIFY_KEY).ok
        assert receipt_lines(audit_dir) == full  # every acknowledged record, once each
        assert done <= set(full)
        assert ledger_batches(crashed / "gw") == []  # the file holds them durably now
        for c, d in await decided(gw, 2, "after"):
            await gw.receipt(c, CTX, d, ECHOED)
    assert verify(audit_dir, VERIFY_KEY).ok
    assert receipt_lines(audit_dir) == [*full, "after0", "after1"]


async def test_a_whole_audit_file_is_not_appended_to_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    audit_dir = await crashed_before_the_file_sync(tmp_path, monkeypatch, "w")
    crashed = audit_dir.parent.parent
    log_before = (audit_dir / "audit.jsonl").read_bytes()
    async with gw_at(crashed):
        assert (audit_dir / "audit.jsonl").read_bytes() == log_before
        assert ledger_batches(crashed / "gw") == []
    assert verify(audit_dir, VERIFY_KEY).ok


async def test_ledger_records_that_do_not_chain_on_the_log_are_not_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    audit_dir = await crashed_before_the_file_sync(tmp_path, monkeypatch, "f")
    crashed = audit_dir.parent.parent
    cut_after(audit_dir, 2)
    log_before = (audit_dir / "audit.jsonl").read_bytes()
    # someone edits a record in the ledger's copy: its hash no longer matches, so the
    # head's signature does not cover it; nothing is appended and verify tells
    db = crashed / "gw" / "gateway.db"
    from hub.gateway.ledger import Ledger

    ledger = Ledger(db)
    try:
        with ledger.transaction() as conn:
            conn.execute(
                "UPDATE audit_batches SET lines=CAST(replace(lines, 'f1-1', 'f1-9') AS BLOB) "
                "WHERE instr(lines, CAST('f1-1' AS BLOB))"
            )
            assert conn.changes() >= 1
    finally:
        ledger.close()
    async with gw_at(crashed):
        assert (audit_dir / "audit.jsonl").read_bytes() == log_before
        assert ledger_batches(crashed / "gw"), "the ledger keeps what it could not restore"
    assert not verify(audit_dir, VERIFY_KEY).ok


async def test_the_audit_file_is_synced_in_the_background_and_the_ledger_copy_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commit_module, "CHECKPOINT_S", 0.01)
    async with gw_at(tmp_path) as gw:
        await acknowledged(gw, "s")
        assert ledger_batches(tmp_path / "gw")
        await poll(
            lambda: gw.commits._checkpoint is not None and gw.commits._checkpoint.done(),
            what="the audit file's sync",
        )
        checkpoint = gw.commits._checkpoint
        assert checkpoint is not None
        covered = checkpoint.result()  # the last seq the file's sync covers
        assert covered > 0 and any(b <= covered for _, b in ledger_batches(tmp_path / "gw"))
        for c, d in await decided(gw, 1, "next"):  # the next batch drops what it covered
            await gw.receipt(c, CTX, d, ECHOED)
        assert [b for _, b in ledger_batches(tmp_path / "gw") if b <= covered] == []
    assert ledger_batches(tmp_path / "gw") == []  # and close drops the rest
    assert verify(tmp_path / "gw" / "audit", VERIFY_KEY).ok
    ledger = Ledger(tmp_path / "gw" / "gateway.db")
    try:  # the head of the last batch dropped is kept: what the head file says
        head = (tmp_path / "gw" / "audit" / "audit.head").read_bytes().rstrip()
        assert ledger.audit_head() == head
    finally:
        ledger.close()


CRASHING_WRITER = """
import asyncio, sys
from pathlib import Path
from nacl.signing import SigningKey
from hub.capabilities.host import ToolOutcome
from hub.gateway import CallContext, ToolCall, commit, open_gateway

commit.CHECKPOINT_S = 3600.0  # the ledger keeps every batch: any cut below is recoverable
CTX = CallContext(owner="owner", scope="owner", session_id="s", run_id="r", trace_id="t")
OUT = ToolOutcome(structured={"receipt_version": 1, "status": "succeeded", "effects": [
    {"kind": "echo", "state": "verified", "fields": {"n": 1}}]})

async def one(gw, i):
    c = ToolCall("probe", "echo", {"text": str(i)}, f"k{i}", "task-k")
    d = await gw.decide(c, CTX)
    await gw.receipt(c, CTX, d, OUT)
    print(c.call_id, flush=True)  # acknowledged: durable before this line

async def main():
    async with open_gateway(Path(sys.argv[1]), packages=[Path(sys.argv[2])],
                            audit_signer=SigningKey(bytes.fromhex(sys.argv[3]))) as gw:
        i = 0
        while True:  # until killed: 1 caller, then 4 at once
            await one(gw, i)
            await asyncio.gather(*(one(gw, i + 1 + k) for k in range(4)))
            i += 5

asyncio.run(main())
"""


def test_a_writer_killed_mid_batch_loses_no_acknowledged_record(tmp_path: Path) -> None:
    gw_dir = tmp_path / "gw"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CRASHING_WRITER,
            str(gw_dir),
            str(PACKAGES["probe"]),
            bytes(SIGNER).hex(),
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    acked: list[str] = []
    try:
        assert proc.stdout is not None
        while len(acked) < 60:
            line = proc.stdout.readline()
            assert line, f"the writer ended early (exit {proc.poll()})"
            acked.append(line.strip())
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # mid-batch, most likely
        proc.wait(timeout=20)
        assert proc.stdout is not None
        proc.stdout.close()
    audit_dir = gw_dir / "audit"
    # the page cache survived the kill: also lose what the audit file was not synced for,
    # from the 10th acknowledged receipt's record on, with a torn piece of a line
    data = (audit_dir / "audit.jsonl").read_bytes()
    at = data.index(b'"call_id":"%s"' % acked[10].encode())
    cut = data.rindex(b"\n", 0, at) + 1
    (audit_dir / "audit.jsonl").write_bytes(data[: cut + 20])
    ledger = Ledger(gw_dir / "gateway.db")
    try:
        batches = ledger.audit_batches()
        head = ledger.audit_head()
    finally:
        ledger.close()
    audit = AuditLog(audit_dir, signer=SIGNER)
    try:
        done, _ = audit.recover(head, batches)
    finally:
        audit.close()
    assert done == "appended"
    assert verify(audit_dir, VERIFY_KEY).ok
    got = receipt_lines(audit_dir)
    assert set(acked) <= set(got)  # every acknowledged receipt, once
    assert len(got) == len(set(got))


def test_a_pending_check_is_known_after_a_restart_and_cleared_by_its_check(
    tmp_path: Path,
) -> None:
    # the tasks with a pending check are kept in memory too (no read for a task without
    # one): a reopened ledger knows them from the table
    ledger = Ledger(tmp_path / "gateway.db")
    try:
        ledger.require_check("t1", "messaging", "send_email", "find_sent")
        ledger.require_check("t1", "messaging", "reply", "find_sent")
        assert ledger.pending_check("t2", "messaging", "send_email") is None
    finally:
        ledger.close()
    ledger = Ledger(tmp_path / "gateway.db")
    try:
        assert ledger.pending_check("t1", "messaging", "send_email") == "find_sent"
        assert ledger.check_ran("t2", "messaging", "find_sent") == []
        assert sorted(ledger.check_ran("t1", "messaging", "find_sent")) == [
            "reply",
            "send_email",
        ]
        assert ledger.pending_check("t1", "messaging", "send_email") is None
        ledger.require_check("t1", "messaging", "send_email", "find_sent")  # again
        assert ledger.pending_check("t1", "messaging", "send_email") == "find_sent"
    finally:
        ledger.close()


async def test_the_ledger_is_checkpointed_on_its_own_thread_not_in_a_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch whose commit fills the ledger's WAL past the threshold does not copy it into
    the database in that commit (on the event loop: 5 ms here, two syncs): the checkpoint
    runs on the ledger's checkpoint thread, one at a time, while receipts go on being made
    durable; then the WAL is written again from its beginning, and nothing is lost."""
    async with gw_at(tmp_path) as gw:
        db = tmp_path / "gw" / "gateway.db"
        with held_checkpoints(gw.ledger.checkpointer, monkeypatch) as ran:
            calls = await decided(gw, 40, "k")
            await gw.commits.drain()
            before = db.stat().st_size
            got = await asyncio.gather(*(gw.receipt(c, CTX, d, ECHOED) for c, d in calls))
            assert [r.status for r in got] == ["succeeded"] * 40  # answered, checkpoint held
            await poll(lambda: ran)
            assert len(ran) == 1 and ran[0].startswith("checkpoint")  # one, on its thread
            assert db.stat().st_size == before  # nothing copied in a commit meanwhile
        await poll(lambda: gw.ledger.checkpointer.checkpoints == 1)
        assert db.stat().st_size > before  # copied by the thread
        wal = os.stat(f"{db}-wal").st_size
        more = await decided(gw, 40, "m")
        await asyncio.gather(*(gw.receipt(c, CTX, d, ECHOED) for c, d in more))
        assert os.stat(f"{db}-wal").st_size < 1.5 * wal  # from the WAL's start again
        await poll(lambda: gw.ledger.checkpointer.idle)
    assert ledger_receipts(tmp_path) == {c.call_id for c, _ in calls + more}
    assert verify(tmp_path / "gw" / "audit", VERIFY_KEY).ok
