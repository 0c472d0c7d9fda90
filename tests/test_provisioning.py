"""Provisioning: the home, keys, certificates, bundles, the registry, pairing, first boot."""

from __future__ import annotations

import base64
import io
import itertools
import json
import stat
import tarfile
from pathlib import Path

import pytest
import yaml

from cli import main as cli
from protos import mesh_pb2, sync_pb2
from provisioning import certificate as certs
from provisioning.bundle import Bundle, device_id_of, flash
from provisioning.credentials import mosquitto_hash
from provisioning.epochs import bundle_keys, home_keys
from provisioning.errors import ProvisioningError
from provisioning.firstboot import user_data
from provisioning.home import Home
from provisioning.identity import NodeKeys, write_secret
from provisioning.pairing import (
    MAX_CODE_FAILURES,
    MAX_FAILURES_PER_PEER,
    PairAttempt,
    PairingAuthority,
    issue_code,
    split_code,
)
from sync.envelope import HUB, Opened, Opener, Peer, ReplayGuard, Sealer

SECRET_FILES = ("home.key", "hub.key", "group.key", "broker.secret")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def expect(key: str, fn: object, *args: object, **kwargs: object) -> ProvisioningError:
    assert callable(fn)
    with pytest.raises(ProvisioningError) as info:
        fn(*args, **kwargs)
    assert info.value.key == key, str(info.value)
    assert len(str(info.value).splitlines()) == 1
    return info.value


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home.init(tmp_path / "home", mqtt_port=18000, grpc_port=18001, hub_host="hub.lan")


# --------------------------------------------------------------------------- home
def test_home_init_layout_and_modes(home: Home) -> None:
    assert mode(home.path) == 0o700
    assert mode(home.path / "keys") == 0o700
    for name in SECRET_FILES:
        assert mode(home.path / "keys" / name) == 0o600, name
    assert mode(home.path / "registry.db") == 0o600
    assert len(home.home_id) == 16 and int(home.home_id, 16) >= 0
    assert len(home.fingerprint) == 64 and int(home.fingerprint, 16) >= 0
    config = yaml.safe_load((home.path / "home.yaml").read_text())
    assert config["home_id"] == home.home_id
    assert config["hub_fingerprint"] == home.fingerprint
    assert (home.mqtt_port, home.grpc_port, home.hub_host) == (18000, 18001, "hub.lan")
    loaded = Home.load(home.path)
    assert (loaded.home_id, loaded.fingerprint, loaded.group_key) == (
        home.home_id,
        home.fingerprint,
        home.group_key,
    )
    assert len(home.group_key) == 32
    # the hub's keys are not the home's root key
    assert home.hub_keys.sign_pk != home.home_keys.sign_pk


def test_home_init_cli_prints_id_and_fingerprint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["home", "init", "--home", str(tmp_path / "h")]) == 0
    out = capsys.readouterr().out
    loaded = Home.load(tmp_path / "h")
    assert loaded.home_id in out
    assert loaded.fingerprint in out


def test_home_init_refuses_overwrite_without_force(home: Home) -> None:
    key_before = (home.path / "keys" / "home.key").read_bytes()
    expect("home.exists", Home.init, home.path)
    assert (home.path / "keys" / "home.key").read_bytes() == key_before
    assert Home.load(home.path).home_id == home.home_id


def test_home_init_refuses_a_folder_with_only_keys(tmp_path: Path) -> None:
    (tmp_path / "h" / "keys").mkdir(parents=True)
    expect("home.exists", Home.init, tmp_path / "h")


def test_home_init_force_replaces(home: Home) -> None:
    flash(home, profile_name="mac", name="laptop", out=home.path.parent / "b1")
    new = Home.init(home.path, force=True)
    assert new.home_id != home.home_id
    assert new.fingerprint != home.fingerprint
    assert Home.load(home.path).home_id == new.home_id
    registry = new.registry()
    try:
        assert registry.devices() == []  # the old home's enrolments are gone
    finally:
        registry.close()
    for name in SECRET_FILES:
        assert mode(home.path / "keys" / name) == 0o600


@pytest.mark.parametrize("name", SECRET_FILES)
@pytest.mark.parametrize("bad_mode", [0o644, 0o640, 0o604, 0o660])
def test_key_file_readable_by_others_is_refused(home: Home, name: str, bad_mode: int) -> None:
    (home.path / "keys" / name).chmod(bad_mode)
    error = expect("key.permissions", Home.load, home.path)
    assert error.fields["mode"] == bad_mode
    (home.path / "keys" / name).chmod(0o600)
    Home.load(home.path)


def test_missing_or_corrupt_home(tmp_path: Path, home: Home) -> None:
    expect("home.missing", Home.load, tmp_path / "nowhere")
    (home.path / "keys" / "home.key").write_text("not json")
    expect("key.unreadable", Home.load, home.path)


def test_node_keys_round_trip(tmp_path: Path) -> None:
    keys = NodeKeys.generate()
    keys.save(tmp_path / "k" / "node.key")
    assert mode(tmp_path / "k" / "node.key") == 0o600
    back = NodeKeys.load(tmp_path / "k" / "node.key")
    assert (back.sign_pk, back.box_pk, back.fingerprint) == (
        keys.sign_pk,
        keys.box_pk,
        keys.fingerprint,
    )
    (tmp_path / "k" / "node.key").chmod(0o644)
    expect("key.permissions", NodeKeys.load, tmp_path / "k" / "node.key")


# --------------------------------------------------------------------------- certificates
def _issue(home: Home, **kw: object) -> mesh_pb2.SignedCertificate:
    keys = NodeKeys.generate()
    args: dict[str, object] = {
        "home_id": home.home_id,
        "device_id": device_id_of(keys.sign_pk),
        "name": "kitchen",
        "profile": "glasses",
        "scopes": ["utter", "ack"],
        "sign_pk": keys.sign_pk,
        "box_pk": keys.box_pk,
    }
    args.update(kw)
    return certs.issue(home.home_keys.sign, **args)  # type: ignore[arg-type]


def test_certificate_issue_and_verify(home: Home) -> None:
    signed = _issue(home, now_ms=1_000_000, validity_days=1)
    cert = certs.verify(signed, home.home_keys.sign_pk, home_id=home.home_id, now_ms=1_000_001)
    assert (cert.home_id, cert.name, cert.profile, list(cert.scopes)) == (
        home.home_id,
        "kitchen",
        "glasses",
        ["utter", "ack"],
    )
    assert cert.expires_ms == 1_000_000 + 86_400_000
    # the serialized form verifies too
    as_bytes = signed.SerializeToString()
    assert certs.verify(as_bytes, home.home_keys.sign_pk, home_id=home.home_id, now_ms=1_000_001)


def test_certificate_tampered_body_or_signature(home: Home) -> None:
    signed = _issue(home)
    for i in range(len(signed.body)):
        body = bytearray(signed.body)
        body[i] ^= 0x01
        bad = mesh_pb2.SignedCertificate(body=bytes(body), signature=signed.signature)
        expect(
            "certificate.invalid", certs.verify, bad, home.home_keys.sign_pk, home_id=home.home_id
        )
    for i in (0, 31, 32, 63):
        sig = bytearray(signed.signature)
        sig[i] ^= 0x80
        bad = mesh_pb2.SignedCertificate(body=signed.body, signature=bytes(sig))
        expect(
            "certificate.invalid", certs.verify, bad, home.home_keys.sign_pk, home_id=home.home_id
        )
    # a certificate with different scopes, signed by someone else
    forged = certs.issue(
        NodeKeys.generate().sign,
        home_id=home.home_id,
        device_id="d",
        name="x",
        profile="phone",
        scopes=["approve"],
        sign_pk=b"\x00" * 32,
        box_pk=b"\x00" * 32,
    )
    expect(
        "certificate.invalid", certs.verify, forged, home.home_keys.sign_pk, home_id=home.home_id
    )
    expect(
        "certificate.invalid",
        certs.verify,
        b"\xff\xff",
        home.home_keys.sign_pk,
        home_id=home.home_id,
    )


def test_certificate_other_home(home: Home, tmp_path: Path) -> None:
    other = Home.init(tmp_path / "other")
    signed = _issue(home)
    # checked against another home's key
    expect(
        "certificate.invalid", certs.verify, signed, other.home_keys.sign_pk, home_id=other.home_id
    )
    # right key, but the certificate names another home
    expect(
        "certificate.invalid", certs.verify, signed, home.home_keys.sign_pk, home_id=other.home_id
    )
    # issued by this home's key for another home's id
    mislabelled = _issue(home, home_id=other.home_id)
    expect(
        "certificate.invalid",
        certs.verify,
        mislabelled,
        home.home_keys.sign_pk,
        home_id=home.home_id,
    )


def test_certificate_expired(home: Home) -> None:
    signed = _issue(home, now_ms=1_000, validity_days=1)
    expires = 1_000 + 86_400_000
    certs.verify(signed, home.home_keys.sign_pk, home_id=home.home_id, now_ms=expires - 1)
    for now in (expires, expires + 1, 10**15):
        error = expect(
            "certificate.invalid",
            certs.verify,
            signed,
            home.home_keys.sign_pk,
            home_id=home.home_id,
            now_ms=now,
        )
        assert "expired" in str(error)
    # and against the real clock: a certificate issued long ago
    expect(
        "certificate.invalid", certs.verify, signed, home.home_keys.sign_pk, home_id=home.home_id
    )


# --------------------------------------------------------------------------- bundles
def test_flash_writes_a_loadable_bundle(home: Home, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    bundle = flash(home, profile_name="glasses", name="kitchen", out=out)
    assert mode(out) == 0o700
    assert mode(out / "device.key") == 0o600
    assert mode(out / "secrets.json") == 0o600
    loaded = Bundle.load(out)
    assert loaded.name == "kitchen" and loaded.profile.name == "glasses"
    assert loaded.home_id == home.home_id
    assert loaded.pinned_fingerprint == home.fingerprint
    assert loaded.hub_sign_pk == home.hub_keys.sign_pk
    assert loaded.hub_box_pk == home.hub_keys.box_pk
    assert loaded.group_key == home.group_key
    assert loaded.hub["host"] == "hub.lan" and loaded.hub["grpc_port"] == 18001
    assert loaded.keys.sign_pk == bundle.keys.sign_pk
    assert loaded.device_id == device_id_of(loaded.keys.sign_pk)
    assert loaded.certificate.device_id == loaded.device_id
    registry = home.registry()
    try:
        rec = registry.by_name("kitchen")
    finally:
        registry.close()
    assert rec.device_id == loaded.device_id and rec.enrolled_by == "flash"
    assert rec.sign_pk == loaded.keys.sign_pk and not rec.revoked
    assert _password_matches(loaded.mqtt_password, rec.mqtt_hash)
    # the keys file refuses to load once others can read it
    (out / "device.key").chmod(0o644)
    expect("key.permissions", Bundle.load, out)


def _password_matches(password: str, stored: str) -> bool:
    _, _, iterations, salt_b64, _ = stored.split("$")
    salt = base64.b64decode(salt_b64)
    return mosquitto_hash(password, salt=salt, iterations=int(iterations)) == stored


def test_flash_refuses_a_non_empty_out(home: Home, tmp_path: Path) -> None:
    out = tmp_path / "used"
    out.mkdir()
    (out / "x").write_text("x")
    expect("bundle.exists", flash, home, profile_name="mac", name="laptop", out=out)
    registry = home.registry()
    try:
        assert not registry.name_taken("laptop")
    finally:
        registry.close()


def test_duplicate_device_name_refused(home: Home, tmp_path: Path) -> None:
    first = flash(home, profile_name="mac", name="laptop", out=tmp_path / "b1")
    expect("device.exists", flash, home, profile_name="phone", name="laptop", out=tmp_path / "b2")
    assert not (tmp_path / "b2").exists() or not any((tmp_path / "b2").iterdir())
    registry = home.registry()
    try:
        devices = registry.devices()
    finally:
        registry.close()
    assert [(d.name, d.device_id) for d in devices] == [("laptop", first.device_id)]


@pytest.mark.parametrize("name", ["", "Laptop", "-x", "_x", "a b", "a/b", "x" * 33, "é"])
def test_invalid_device_name_refused(home: Home, tmp_path: Path, name: str) -> None:
    expect("device.name_invalid", flash, home, profile_name="mac", name=name, out=tmp_path / "b")
    registry = home.registry()
    try:
        assert registry.devices() == []
    finally:
        registry.close()


def test_unknown_profile_refused(home: Home, tmp_path: Path) -> None:
    expect("profile.unknown", flash, home, profile_name="toaster", name="t", out=tmp_path / "b")


def test_revoke_marks_revoked(home: Home, tmp_path: Path) -> None:
    flash(home, profile_name="mac", name="laptop", out=tmp_path / "b1")
    flash(home, profile_name="glasses", name="specs", out=tmp_path / "b2")
    registry = home.registry()
    try:
        rec = registry.revoke("laptop")
        assert rec.revoked and rec.revoked_ms is not None
        assert registry.revoke("laptop").revoked_ms == rec.revoked_ms  # idempotent
        assert registry.by_name("laptop").revoked
        assert not registry.by_name("specs").revoked
        expect("device.unknown", registry.revoke, "nobody")
    finally:
        registry.close()


# --------------------------------------------------------------------------- pairing
def authority(home: Home) -> PairingAuthority:
    return PairingAuthority(home, mqtt_port=18000, grpc_port=18001)


def wrong_secret(code: str) -> str:
    code_id, secret = split_code(code)
    other = "0000-0000-0000" if secret != "000000000000" else "1111-1111-1111"
    return f"{code_id}-{other}"


def test_pairing_produces_a_working_bundle(home: Home, tmp_path: Path) -> None:
    code, _ = issue_code(home)
    attempt = PairAttempt.make(code.lower(), profile="watch", name="wrist")
    response = authority(home).handle(attempt.request, "10.0.0.5")
    bundle = attempt.finish(response, out=tmp_path / "watch", hub_host="10.0.0.1")

    assert mode(bundle.path / "device.key") == 0o600
    assert mode(bundle.path / "secrets.json") == 0o600
    loaded = Bundle.load(bundle.path)
    assert loaded.keys.sign_pk == attempt.keys.sign_pk  # the device's own keys
    assert loaded.name == "wrist" and loaded.profile.name == "watch"
    assert loaded.home_id == home.home_id
    assert loaded.pinned_fingerprint == home.fingerprint
    assert loaded.group_key == home.group_key
    assert loaded.hub["host"] == "10.0.0.1"
    assert (loaded.hub["mqtt_port"], loaded.hub["grpc_port"]) == (18000, 18001)
    registry = home.registry()
    try:
        rec = registry.by_name("wrist")
        _, _, used_ms, _ = registry.pair_code(split_code(code)[0]) or (None, 0, None, 0)
    finally:
        registry.close()
    assert used_ms is not None
    assert rec.enrolled_by == "pair" and rec.device_id == loaded.device_id
    assert _password_matches(loaded.mqtt_password, rec.mqtt_hash)
    assert loaded.mqtt_username == rec.device_id

    # the hub opens what the new device seals with it
    sealer = Sealer.for_device(loaded, itertools.count(1).__next__)
    data = sealer.seal(
        mesh_pb2.UTTERANCE,
        mesh_pb2.Utterance(id="u1", text="hi"),
        recipient=HUB,
        recipient_box_pk=loaded.hub_box_pk,
    )
    peer = Peer(rec.device_id, rec.sign_pk, rec.box_pk)
    opener = Opener(
        home.home_id,
        HUB,
        home.hub_keys.box,
        {rec.device_id: peer}.get,
        ReplayGuard(),
        home.group_key,
    )
    result = opener.open(data)
    assert isinstance(result, Opened) and result.payload.text == "hi"  # type: ignore[attr-defined]


def test_bundles_written_after_a_rotation_hold_the_current_epoch(
    home: Home, tmp_path: Path
) -> None:
    """Flashed and paired bundles get the home's current group key epoch (never an older
    key a revoked device held); a bundle from before epochs (no ``group_epoch``) is epoch 0."""
    old = flash(home, profile_name="glasses", name="old", out=tmp_path / "old")
    assert (old.group_epoch, old.group_key) == (0, home.group_key)
    secrets_file = old.path / "secrets.json"
    raw = json.loads(secrets_file.read_text())
    del raw["group_epoch"]
    write_secret(secrets_file, json.dumps(raw).encode())
    assert Bundle.load(old.path).group_epoch == 0
    ring = home_keys(home.path, home.group_key)
    assert ring.current.number == 0 and ring.current.made_ms > 0  # group.key's age
    made = ring.rotate()
    assert mode(home.path / "keys" / "epochs.json") == 0o600
    flashed = flash(home, profile_name="phone", name="new", out=tmp_path / "new")
    assert (flashed.group_epoch, flashed.group_key) == (1, made.key)
    code, _ = issue_code(home)
    attempt = PairAttempt.make(code, profile="watch", name="wrist")
    paired = attempt.finish(
        authority(home).handle(attempt.request, "10.0.0.5"), out=tmp_path / "w", hub_host="h"
    )
    assert (paired.group_epoch, paired.group_key) == (1, made.key)
    # a broadcast sealed by the new bundle names epoch 1 and the hub's ring opens it
    sealer = Sealer.for_device(
        paired,
        itertools.count(1).__next__,
        bundle_keys(paired.path, paired.group_key, paired.group_epoch),
    )
    data = sealer.seal(mesh_pb2.SYNC_UPDATE, sync_pb2.SyncUpdate(), recipient="*")
    peer = Peer(paired.device_id, paired.keys.sign_pk, paired.keys.box_pk)
    opener = Opener(
        home.home_id,
        HUB,
        home.hub_keys.box,
        {paired.device_id: peer}.get,
        ReplayGuard(),
        group_keys=home_keys(home.path, home.group_key),
    )
    assert isinstance(opener.open(data), Opened)


def test_pairing_wrong_secret_is_refused_and_counted(home: Home, tmp_path: Path) -> None:
    code, _ = issue_code(home)
    auth = authority(home)
    bad = PairAttempt.make(wrong_secret(code), profile="phone", name="mobile")
    expect("pair.code_invalid", auth.handle, bad.request, "peer-a")
    registry = home.registry()
    try:
        secret_row = registry.pair_code(split_code(code)[0])
        assert secret_row is not None and secret_row[3] == 1  # failures
        assert not registry.name_taken("mobile")
    finally:
        registry.close()
    # one failure burns neither the code nor the peer
    good = PairAttempt.make(code, profile="phone", name="mobile")
    good.finish(auth.handle(good.request, "peer-a"), out=tmp_path / "b", hub_host="h")


def test_pairing_code_burnt_after_max_failures(home: Home) -> None:
    code, _ = issue_code(home)
    auth = authority(home)
    bad = PairAttempt.make(wrong_secret(code), profile="mac", name="laptop")
    for i in range(MAX_CODE_FAILURES):
        expect("pair.code_invalid", auth.handle, bad.request, f"peer-{i}")
    good = PairAttempt.make(code, profile="mac", name="laptop")
    expect("pair.code_invalid", auth.handle, good.request, "fresh-peer")


def test_pairing_expired_code(home: Home) -> None:
    code, _ = issue_code(home, ttl_s=0)
    attempt = PairAttempt.make(code, profile="mac", name="laptop")
    expect("pair.code_invalid", authority(home).handle, attempt.request, "p")
    registry = home.registry()
    try:
        assert not registry.name_taken("laptop")
    finally:
        registry.close()


def test_pairing_code_works_once(home: Home, tmp_path: Path) -> None:
    code, _ = issue_code(home)
    auth = authority(home)
    first = PairAttempt.make(code, profile="mac", name="laptop")
    auth.handle(first.request, "p1")
    again = PairAttempt.make(code, profile="phone", name="mobile")
    expect("pair.code_invalid", auth.handle, again.request, "p2")
    # replaying the very same request does not enrol twice either
    expect("pair.code_invalid", auth.handle, first.request, "p3")
    registry = home.registry()
    try:
        assert [d.name for d in registry.devices()] == ["laptop"]
    finally:
        registry.close()


def test_pairing_rate_limited_per_peer(home: Home, tmp_path: Path) -> None:
    code, _ = issue_code(home)
    auth = authority(home)
    code_id = split_code(code)[0]
    unknown_id = "ZZZZ" if code_id != "ZZZZ" else "YYYY"
    # a wrong secret for the real code, then guesses at codes that do not exist
    wrong = PairAttempt.make(wrong_secret(code), profile="mac", name="laptop")
    expect("pair.code_invalid", auth.handle, wrong.request, "attacker")
    guess = PairAttempt.make(f"{unknown_id}-0000-0000-0000", profile="mac", name="laptop")
    for _ in range(MAX_FAILURES_PER_PEER - 1):
        expect("pair.code_invalid", auth.handle, guess.request, "attacker")
    good = PairAttempt.make(code, profile="mac", name="laptop")
    error = expect("pair.rate_limited", auth.handle, good.request, "attacker")
    assert 1 <= error.fields["seconds"] <= 61
    registry = home.registry()
    try:
        row = registry.pair_code(code_id)
        assert row is not None and row[2] is None  # the code was not touched
    finally:
        registry.close()
    # another peer is not held back by the attacker's failures
    good.finish(auth.handle(good.request, "owner"), out=tmp_path / "b", hub_host="h")


def test_pairing_hub_response_tampered(home: Home, tmp_path: Path) -> None:
    code, _ = issue_code(home)
    attempt = PairAttempt.make(code, profile="mac", name="laptop")
    response = authority(home).handle(attempt.request, "p")
    grant = bytearray(response.grant)
    grant[len(grant) // 2] ^= 0x01
    for bad in (
        mesh_pb2.PairResponse(grant=bytes(grant), mac=response.mac),
        mesh_pb2.PairResponse(grant=response.grant, mac=bytes(32)),
        mesh_pb2.PairResponse(grant=response.grant, mac=response.mac[:-1]),
        mesh_pb2.PairResponse(grant=response.grant),
    ):
        expect("pair.hub_unproven", attempt.finish, bad, out=tmp_path / "b", hub_host="h")
    assert not (tmp_path / "b").exists()
    # the genuine response still works
    attempt.finish(response, out=tmp_path / "b", hub_host="h")


def test_pairing_response_for_another_attempt_is_unproven(home: Home, tmp_path: Path) -> None:
    code1, _ = issue_code(home)
    code2, _ = issue_code(home)
    a1 = PairAttempt.make(code1, profile="mac", name="laptop")
    a2 = PairAttempt.make(code2, profile="phone", name="mobile")
    auth = authority(home)
    auth.handle(a1.request, "p")
    r2 = auth.handle(a2.request, "p")
    expect("pair.hub_unproven", a1.finish, r2, out=tmp_path / "b", hub_host="h")


@pytest.mark.parametrize(
    "code",
    [
        "",
        "ABCD",
        "ABCD-EFGH-JKMN",
        "ABCD-EFGH-JKMN-PQRU",
        "ABCDE-FGH-JKMN-PQRS",
        "ABCD-EFGH-JKMN-PQRS-TVWX",
    ],
)
def test_pairing_code_format(code: str) -> None:
    expect("pair.code_format", split_code, code)


def test_pairing_code_is_forgiving_about_look_alikes() -> None:
    assert split_code(" abcd-efgh-jkmn-pqrs ") == ("ABCD", "EFGHJKMNPQRS")
    assert split_code("ABCD-EFGH-JKMN-PQRO") == split_code("ABCD-EFGH-JKMN-PQR0")
    assert split_code("1BCD-EFGH-JKMN-PQRS") == split_code("IBCD-EFGH-JKMN-PQRS")


# --------------------------------------------------------------------------- first boot
def test_firstboot_user_data(home: Home, tmp_path: Path) -> None:
    bundle = flash(home, profile_name="glasses", name="kitchen", out=tmp_path / "bundle")
    (bundle.state_dir / "outbox.db").write_bytes(b"run-time state")  # must not be shipped
    text = user_data(bundle.path, hostname="yimi-kitchen")
    assert text.startswith("#cloud-config\n")
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict)
    assert doc["hostname"] == "yimi-kitchen"
    assert isinstance(doc["runcmd"], list)
    files = {f["path"]: f for f in doc["write_files"]}
    tgz = files["/var/lib/yimi/bundle.tgz"]
    assert tgz["encoding"] == "b64" and tgz["permissions"] == "0600"
    unit = files["/etc/systemd/system/yimi-edge.service"]["content"]
    assert "yimi edge run --bundle /var/lib/yimi/bundle" in unit

    blob = base64.b64decode(tgz["content"])
    dest = tmp_path / "extracted"
    dest.mkdir()
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert stat.S_IMODE(members["device.key"].mode) == 0o600
        assert stat.S_IMODE(members["secrets.json"].mode) == 0o600
        tar.extractall(dest, filter="tar")
    shipped = sorted(p.name for p in bundle.path.iterdir() if p.name != "state")
    assert sorted(p.name for p in dest.iterdir()) == shipped
    assert "state" not in members
    for name in shipped:
        assert (dest / name).read_bytes() == (bundle.path / name).read_bytes(), name
    assert mode(dest / "device.key") == 0o600
    # what first boot unpacks is a bundle that loads
    again = Bundle.load(dest)
    assert again.device_id == bundle.device_id


def test_firstboot_user_data_with_source(home: Home, tmp_path: Path) -> None:
    bundle = flash(home, profile_name="mac", name="laptop", out=tmp_path / "bundle")
    doc = yaml.safe_load(user_data(bundle.path, hostname="h", source="git://lan/yimi.git"))
    assert ["git", "clone", "git://lan/yimi.git", "/opt/yimi"] in doc["runcmd"]
    assert "git" in doc["packages"]
