"""Audit rollback (issue 15, failure 9): the log *and* its signed head copied, more records
appended, then both put back — the signed head alone cannot tell. A witness (the highest
signed head a phone kept) can: ``verify(..., witness=)`` and ``yimi audit verify --witness``
refuse a log behind or forking from it, naming the witness."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from nacl.signing import SigningKey

from hub.gateway.audit import AuditLog, verify
from sync.audit_head import WITNESS_FILE, SignedHead, Witness
from tests.mesh_harness import Mesh, env


def append(log: AuditLog, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        log.append("decision", {"call_id": f"c{i}", "outcome": "allowed"}, trace_id=f"t{i}")


def snapshot(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("audit.jsonl", "audit.head"):
        shutil.copy2(src / name, dst / name)


def test_a_rolled_back_pair_passes_alone_and_fails_against_the_witness(tmp_path: Path) -> None:
    key = SigningKey.generate()
    pk = bytes(key.verify_key)
    where, saved = tmp_path / "audit", tmp_path / "saved"
    log = AuditLog(where, durable=False, signer=key)
    witness = Witness(tmp_path / "phone-state", pk)
    append(log, 3)
    snapshot(where, saved)
    append(log, 4, start=3)
    head = log.head()
    assert head is not None and head.seq == 7 and head.valid(pk)
    assert witness.see(head) == "kept"
    log.close()
    assert verify(where, pk, witness=witness.highest()).ok

    snapshot(saved, where)  # roll both back together
    assert verify(where, pk).ok, "the signed head alone cannot see a rollback"
    v = verify(where, pk, witness=witness.highest())
    assert not v.ok and v.problem.startswith("rollback:") and "seq 7" in v.problem
    # the device sees it too when the hub sends it the older head
    older = AuditLog(where, durable=False, signer=key)
    back = older.head()
    assert back is not None and back.seq == 3
    assert witness.see(back) == "older"
    # a rolled-back hub that writes on past the witness's seq forks from it
    append(older, 5, start=100)
    older.close()
    v = verify(where, pk, witness=witness.highest())
    assert not v.ok and "forks" in v.problem, v.problem


def test_the_witness_keeps_only_the_highest_signed_head_0600(tmp_path: Path) -> None:
    key, other = SigningKey.generate(), SigningKey.generate()
    log = AuditLog(tmp_path / "audit", durable=False, signer=key)
    w = Witness(tmp_path / "state", bytes(key.verify_key))
    append(log, 2)
    first = log.head()
    append(log, 1, start=2)
    second = log.head()
    log.close()
    assert first is not None and second is not None
    assert w.see(second) == "kept" and w.see(first) == "older" and w.see(second) == "same"
    forged = SignedHead(9, second.hash, other.sign(b"x").signature)
    assert w.see(forged) == "invalid"
    assert SignedHead(second.seq, "0" * 64, second.sig).valid(bytes(key.verify_key)) is False
    assert w.highest() == second
    assert (tmp_path / "state" / WITNESS_FILE).stat().st_mode & 0o777 == 0o600


def test_yimi_audit_verify_with_a_witness_bundle(tmp_path: Path) -> None:
    """Real home and phone bundle (``yimi home init`` / ``device add``), the log signed with
    the hub's key; the phone's witness file as its daemon writes it."""
    from provisioning.bundle import Bundle
    from provisioning.home import Home

    mesh = Mesh(tmp_path)
    mesh.init()
    phone = mesh.add_device("phone1", "phone")
    home = Home.load(mesh.home)
    where, saved = mesh.home / "gateway" / "audit", tmp_path / "saved"
    log = AuditLog(where, durable=False, signer=home.hub_keys.sign)
    append(log, 2)
    snapshot(where, saved)
    append(log, 3, start=2)
    head = log.head()
    log.close()
    assert head is not None
    bundle = Bundle.load(phone)
    assert Witness(bundle.state_dir, bundle.hub_sign_pk).see(head) == "kept"

    def verify_cli(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cli", "audit", "verify", "--home", str(mesh.home), *extra],
            capture_output=True,
            text=True,
            env=env(),
            timeout=60,
        )

    ok = verify_cli("--witness", str(phone))
    assert ok.returncode == 0 and "not behind phone1's head (seq 5)" in ok.stdout, ok.stderr
    snapshot(saved, where)
    alone = verify_cli()
    assert alone.returncode == 0, "without a witness the rolled-back pair verifies"
    bad = verify_cli("--witness", str(phone))
    assert bad.returncode == 1, bad.stdout
    assert "behind the head witnessed by phone1" in bad.stderr, bad.stderr
    assert "rolled back" in bad.stderr and "seq 5" in bad.stderr
