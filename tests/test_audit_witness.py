"""Audit rollback (issue 15, failure 9): the log *and* its signed head copied, more records
appended, then both put back — the signed head alone cannot tell. A witness (the highest
signed head a phone kept) can: ``verify(..., witness=)`` and ``yimi audit verify --witness``
refuse a log behind or forking from it, naming the witness."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from nacl.signing import SigningKey

from hub.capabilities.settings import only
from hub.gateway.audit import AuditLog, verify
from sync.audit_head import WITNESS_FILE, SignedHead, Witness
from tests.mesh_harness import Mesh, env
from tests.waiting import poll


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


def email(to: str, body: str) -> dict[str, object]:
    return {"to": to, "subject": "Dinner", "body": body, "owner_requested": True}


@pytest.mark.slow
async def test_attack_a_rolled_back_audit_pair_is_caught_by_the_phone(mesh: Mesh) -> None:
    """The attack on a real mesh: the phone's daemon witnesses the head as cards are
    decided; with the hub stopped, ``audit.jsonl`` and ``audit.head`` are put back to a copy
    taken earlier. ``yimi audit verify --witness`` refuses, naming the phone; the restarted
    hub asks the phone, logs and counts ``audit.rollback`` — and still answers ``yimi say``."""
    from hub.gateway import CallContext, ToolCall
    from hub.mesh.daemon import HubDaemon, HubOptions
    from provisioning.home import Home
    from worlds.fakes import SmtpWorld

    owner = CallContext(owner="owner", scope="owner", trace_id="trace-rollback")
    phone = mesh.add_device("phone1", "phone")
    where, saved = mesh.home / "gateway" / "audit", mesh.root / "saved"
    witness_file = phone / "state" / WITNESS_FILE

    def witnessed() -> int:
        head = SignedHead.from_json(json.loads(witness_file.read_text()))
        return head.seq if head else 0

    async with SmtpWorld() as smtp:
        (mesh.home / "packages.yaml").write_text(
            yaml.safe_dump(
                only(
                    {"messaging": {"config": {"SMTP_HOST": smtp.host, "SMTP_PORT": str(smtp.port)}}}
                )
            )
        )
        options = HubOptions(
            mqtt_port=mesh.mqtt_port, grpc_port=mesh.grpc_port, bind="127.0.0.1", advertise=False
        )
        async with HubDaemon(Home.load(mesh.home), options) as hub:
            gw = hub.consent.gateway
            assert gw is not None
            edge = await asyncio.to_thread(mesh.start_edge, phone, hub=mesh.hub_target)
            r = await gw.call(
                ToolCall("messaging", "send_email", email("ann@example.org", "7?"), "c1", "t1"),
                owner,
            )
            assert r.status == "waiting"
            first = gw.audit.head()
            assert first is not None
            await poll(lambda: witness_file.exists() and witnessed() == first.seq, 20, "witness")
            snapshot(where, saved)
            for i in (2, 3):
                r = await gw.call(
                    ToolCall("messaging", "send_email", email("bo@example.org", "8"), f"c{i}", "t"),
                    owner,
                )
            top = gw.audit.head()
            assert top is not None and top.seq > first.seq
            await poll(lambda: witnessed() == top.seq, 20, "the phone to keep the newer head")

        snapshot(saved, where)  # the attack: both files back to the earlier signed state
        alone = await asyncio.to_thread(mesh.yimi, "audit", "verify", "--home", str(mesh.home))
        assert alone.returncode == 0, "the signed head alone cannot see it"
        bad = await asyncio.to_thread(
            mesh.yimi, "audit", "verify", "--home", str(mesh.home), "--witness", str(phone)
        )
        assert bad.returncode == 1 and "witnessed by phone1" in bad.stderr, bad.stderr
        assert f"seq {top.seq}" in bad.stderr and "rolled back" in bad.stderr

        async with HubDaemon(Home.load(mesh.home), options) as hub:

            def rollbacks() -> int:  # in memory until the periodic flush moves it to hub.db
                return hub.port.drops["audit.rollback"] + hub.store.counters().get(
                    "audit.rollback", 0
                )

            await poll(lambda: rollbacks() >= 1, 30, "the rollback counted")
            await poll(lambda: "rolled back" in edge.text(), 20, "the phone to see it too")
            said = await asyncio.to_thread(mesh.say, phone, "hello", "--hub", mesh.hub_target)
            assert said.returncode == 0 and said.stdout.strip(), said.stderr
        assert witnessed() == top.seq, "the phone keeps the higher head"
        mesh.stop(edge)
    status = mesh.yimi("hub", "status", "--home", str(mesh.home))
    assert "audit.rollback" in status.stdout, status.stdout


def test_a_witness_of_another_hub_is_refused_and_an_empty_one_warns(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    mesh = Mesh(tmp_path / "a")
    mesh.init()
    other = Mesh(tmp_path / "b")
    other.init()
    foreign = other.add_device("phone2", "phone")
    fresh = mesh.add_device("phone1", "phone")
    from provisioning.home import Home

    log = AuditLog(
        mesh.home / "gateway" / "audit", durable=False, signer=Home.load(mesh.home).hub_keys.sign
    )
    append(log, 1)
    log.close()
    bad = mesh.yimi("audit", "verify", "--home", str(mesh.home), "--witness", str(foreign))
    assert bad.returncode == 1 and "belongs to another hub" in bad.stderr, bad.stderr
    empty = mesh.yimi("audit", "verify", "--home", str(mesh.home), "--witness", str(fresh))
    assert empty.returncode == 0 and "phone1 holds no audit head yet" in empty.stderr


def test_the_witnesses_are_the_phone_and_the_mac() -> None:
    from typing import Any, cast

    from hub.gateway.courier import MeshConsent
    from provisioning.registry import DeviceRecord

    def rec(name: str, profile: str, scopes: tuple[str, ...], revoked: int | None = None) -> Any:
        return DeviceRecord(name, name, profile, scopes, b"", b"", b"", "", "", 0, revoked)

    devices = [
        rec("phone", "phone", ("approve", "timeline.write")),
        rec("mac", "mac", ("execute",)),
        rec("specs", "glasses", ("timeline.write",)),
        rec("old", "phone", ("approve",), revoked=1),
    ]
    consent = MeshConsent(
        Path("/nonexistent"),
        audit_signer=SigningKey.generate(),
        port=cast(Any, SimpleNamespace(count=lambda *a, **k: None)),
        devices=lambda: devices,
    )
    assert [r.name for r in consent.witnesses()] == ["phone", "mac"]
