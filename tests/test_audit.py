"""The audit log: append-only and hash-chained; any altered byte or removed record fails
verification, in-process and through ``yimi audit verify``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from nacl.signing import SigningKey

from hub.gateway.audit import GENESIS, AuditLog, record_hash, records, verify
from hub.gateway.receipts import canonical
from tests.mesh_harness import env


def make_log(directory: Path, n: int = 6, signer: SigningKey | None = None) -> Path:
    log = AuditLog(directory, durable=False, signer=signer)
    for i in range(n):
        log.append(
            "decision" if i % 2 else "receipt",
            {"call_id": f"c{i}", "status": "succeeded", "note": "ünïcode ✓"},
            trace_id=f"trace-{i}",
        )
    log.close()
    return directory / "audit.jsonl"


def test_a_fresh_log_verifies(tmp_path: Path) -> None:
    make_log(tmp_path)
    v = verify(tmp_path)
    assert v.ok and v.records == 6
    assert [r["seq"] for r in records(tmp_path)] == [1, 2, 3, 4, 5, 6]
    assert [r["trace_id"] for r in records(tmp_path)][:2] == ["trace-0", "trace-1"]


def test_every_altered_byte_is_detected(tmp_path: Path) -> None:
    path = make_log(tmp_path)
    original = path.read_bytes()
    for i in range(len(original)):
        for replacement in (original[i] ^ 0x01, ord(" ")):
            if replacement == original[i]:
                continue
            damaged = bytearray(original)
            damaged[i] = replacement
            path.write_bytes(bytes(damaged))
            assert not verify(tmp_path).ok, f"byte {i} changed to {replacement} went unnoticed"
    path.write_bytes(original)
    assert verify(tmp_path).ok


@pytest.mark.parametrize("which", [0, 2, 5])
def test_a_removed_record_is_detected(tmp_path: Path, which: int) -> None:
    path = make_log(tmp_path)
    lines = path.read_bytes().splitlines(keepends=True)
    del lines[which]
    path.write_bytes(b"".join(lines))
    assert not verify(tmp_path).ok


def test_appending_a_forged_record_or_truncating_is_detected(tmp_path: Path) -> None:
    path = make_log(tmp_path)
    original = path.read_bytes()
    path.write_bytes(original + original.splitlines(keepends=True)[-1])
    assert not verify(tmp_path).ok
    path.write_bytes(original[:-1])
    assert not verify(tmp_path).ok
    path.write_bytes(b"")
    assert not verify(tmp_path).ok


def _yimi(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        capture_output=True,
        text=True,
        env=env(),
        timeout=60,
    )


def test_a_recomputed_chain_fails_against_the_signed_head(tmp_path: Path) -> None:
    """A writer who edits a record and re-computes every hash after it still cannot sign
    the new head."""
    key = SigningKey.generate()
    path = make_log(tmp_path, signer=key)
    assert verify(tmp_path, bytes(key.verify_key)).ok
    recs = [json.loads(x) for x in path.read_bytes().splitlines()]
    recs[1]["data"]["status"] = "failed"
    prev = GENESIS
    for r in recs:
        r["prev"] = prev
        r["hash"] = prev = record_hash(r)
    path.write_bytes(b"".join(canonical(r) + b"\n" for r in recs))
    head = json.loads((tmp_path / "audit.head").read_text())
    head["hash"] = prev
    (tmp_path / "audit.head").write_text(json.dumps(head))
    assert verify(tmp_path).ok, "without the key the forgery is consistent"
    v = verify(tmp_path, bytes(key.verify_key))
    assert not v.ok and "not signed by the hub" in v.problem
    assert not verify(tmp_path, bytes(SigningKey.generate().verify_key)).ok


def test_yimi_audit_verify_and_show(tmp_path: Path) -> None:
    home = tmp_path / "home"
    key = SigningKey.generate()
    home.mkdir()
    (home / "home.yaml").write_text(f"hub_sign_pk: {bytes(key.verify_key).hex()}\n")
    path = make_log(home / "gateway" / "audit", signer=key)
    ok = _yimi("audit", "verify", "--home", str(home))
    assert ok.returncode == 0 and "6 records" in ok.stdout, ok.stderr
    assert "head signed by the hub" in ok.stdout
    shown = _yimi("audit", "show", "--home", str(home))
    assert shown.returncode == 0 and len(shown.stdout.splitlines()) == 6
    assert "trace-5" in shown.stdout
    original = path.read_bytes()
    data = bytearray(original)
    data[len(data) // 2] ^= 0x20
    path.write_bytes(bytes(data))
    bad = _yimi("audit", "verify", "--home", str(home))
    assert bad.returncode == 1 and "fails verification" in bad.stderr, bad.stderr
    lines = original.splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:3] + lines[4:]))  # a record removed from the middle
    gone = _yimi("audit", "verify", "--home", str(home))
    assert gone.returncode == 1 and "line 4" in gone.stderr, gone.stderr
    path.write_bytes(b"".join(lines[:-1]))  # the last record removed
    tail = _yimi("audit", "verify", "--home", str(home))
    assert tail.returncode == 1 and "head" in tail.stderr, tail.stderr


def test_a_lost_head_is_refused_and_the_next_append_chains_on_the_log(tmp_path: Path) -> None:
    make_log(tmp_path, n=3)
    (tmp_path / "audit.head").unlink()
    assert not verify(tmp_path).ok
    log = AuditLog(tmp_path, durable=False)
    rec = log.append("decision", {"call_id": "c9"})
    log.close()
    assert rec["seq"] == 4
    assert verify(tmp_path).ok


def test_a_writer_chains_on_records_another_writer_appended_since_its_last_write(
    tmp_path: Path,
) -> None:
    # each writer remembers where it last wrote (no head read to prepare a batch): that is
    # only a guess, checked under the lock; another writer's records in between are chained on
    ours = AuditLog(tmp_path, durable=False)
    theirs = AuditLog(tmp_path, durable=False)
    try:
        assert ours.append("decision", {"call_id": "a"})["seq"] == 1
        assert theirs.append("decision", {"call_id": "b"})["seq"] == 2
        ours.stage("receipt", {"call_id": "c"})
        stale = ours.prepare(ours.take_staged())  # chained on seq 1: its last write
        assert stale.records[0]["seq"] == 2
        rec = ours.write_prepared(stale)[-1]
        assert rec["seq"] == 3 and rec["prev"] == list(records(tmp_path))[1]["hash"]
        assert ours.append("receipt", {"call_id": "d"})["seq"] == 4
        assert theirs.append("receipt", {"call_id": "e"})["seq"] == 5
    finally:
        ours.close()
        theirs.close()
    assert [r["data"]["call_id"] for r in records(tmp_path)] == ["a", "b", "c", "d", "e"]
    assert verify(tmp_path).ok


def test_a_batch_made_durable_elsewhere_is_not_synced_here_unless_chained_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # with ``ready`` (the gateway's ledger holds the batch's lines and head) the records and
    # head are written without a sync of their own; a batch chained again because another
    # writer came first no longer matches the lines given to the ledger: it is synced here
    from hub.gateway import audit as audit_module

    synced: list[int] = []
    real = audit_module.os.fdatasync

    def counting(fd: int) -> None:
        synced.append(fd)
        real(fd)

    ours = AuditLog(tmp_path)
    theirs = AuditLog(tmp_path)
    monkeypatch.setattr(audit_module.os, "fdatasync", counting)
    try:
        made_durable: list[int] = []
        ours.stage("receipt", {"call_id": "a"})
        ours.write_prepared(ours.prepare(ours.take_staged()), ready=lambda: made_durable.append(1))
        assert made_durable == [1] and ours._fd not in synced and ours._head_fd not in synced
        ours.stage("receipt", {"call_id": "b"})
        stale = ours.prepare(ours.take_staged())
        theirs.append("decision", {"call_id": "x"})  # synced: its own, and what came before
        synced.clear()
        rec = ours.write_prepared(stale, ready=lambda: made_durable.append(2))[-1]
        assert made_durable == [1, 2] and rec["seq"] == 3
        assert ours._fd in synced and ours._head_fd in synced
        synced.clear()
        assert ours.sync_file() == 3 and synced == [ours._fd]  # the background sync
    finally:
        ours.close()
        theirs.close()
    assert [r["data"]["call_id"] for r in records(tmp_path)] == ["a", "x", "b"]
    assert verify(tmp_path).ok
