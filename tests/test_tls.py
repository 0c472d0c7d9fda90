"""The home's TLS (issue 15): the CA and the hub's leaves, renewal, what bundles pin, and
real handshakes — a gRPC server and a mosquitto broker in this process's loop, each refusing
a client pinned to another home's CA."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import shutil
import ssl
from pathlib import Path

import aiomqtt
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from edge_agent.node import DeviceNode, NodeOptions
from hub.errors import HubError
from hub.mesh import broker as broker_module
from hub.mesh.broker import Broker, BrokerAccount, BrokerTls
from hub.mesh.daemon import HubDaemon, HubOptions
from hub.mesh.grpc_server import HubService, make_server, tls_credentials
from protos.errors import render
from provisioning.bundle import CA_FILE, Bundle, flash
from provisioning.credentials import mosquitto_hash, new_password
from provisioning.errors import ProvisioningError
from provisioning.home import Home
from provisioning.pairing import PairAttempt, PairingAuthority, issue_code
from provisioning.tls import (
    CA_CERT_FILE,
    CA_KEY_FILE,
    LEAF_DAYS,
    RENEW_BEFORE_DAYS,
    check_endorsement,
    endorse,
    ensure_hub_tls,
    issued_by,
    leaf_name,
    tls_name,
)
from provisioning.tls import status as tls_status
from storage.private import loose_modes
from sync.errors import SyncError
from sync.locate import identify
from sync.mqtt import MqttSession
from sync.tls import ClientTls
from worlds import ports

MOSQUITTO = shutil.which("mosquitto") is not None or broker_module.MOSQUITTO_BINARY.exists()


def make_home(path: Path) -> Home:
    return Home.init(path, hub_host="hub.example")


@pytest.fixture(scope="module")
def homes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Home, Home]:
    """Two homes (two CAs): ours and a stranger's."""
    return make_home(tmp_path_factory.mktemp("ours")), make_home(tmp_path_factory.mktemp("other"))


def test_the_home_ca_is_p256_private_and_endorsed_by_the_home_key(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    ca_pem = (home.path / CA_CERT_FILE).read_bytes()
    cert = x509.load_pem_x509_certificate(ca_pem)
    key = cert.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1"
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert (home.path / CA_KEY_FILE).stat().st_mode & 0o777 == 0o600
    home.tls()
    assert loose_modes(home.path) == []
    signature = endorse(home.home_keys.sign, ca_pem)
    check_endorsement(home.home_keys.sign_pk, ca_pem, signature)
    stranger = Home.init(tmp_path / "stranger")
    with pytest.raises(ProvisioningError) as err:
        check_endorsement(stranger.home_keys.sign_pk, ca_pem, signature)
    assert err.value.key == "tls.ca_invalid"


def test_leaves_name_the_hub_and_are_reused_until_renewal(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    tls = home.tls(extra_names=["192.168.1.20"])
    for leaf in (tls.mqtt, tls.grpc, tls.web):
        pem = leaf.cert.read_bytes()
        assert issued_by(pem, tls.ca_pem)
        assert leaf_name(pem) == tls_name(home.home_id)
        san = x509.load_pem_x509_certificate(pem).extensions.get_extension_for_class(
            x509.SubjectAlternativeName
        )
        names = {str(n) for n in san.value.get_values_for_type(x509.DNSName)}
        ips = {str(n) for n in san.value.get_values_for_type(x509.IPAddress)}
        assert {tls_name(home.home_id), "localhost", "hub.example"} <= names
        assert {"127.0.0.1", "::1", "192.168.1.20"} <= ips
        assert leaf.key.stat().st_mode & 0o777 == 0o600
    before = {leaf: leaf.cert.read_bytes() for leaf in (tls.mqtt, tls.grpc, tls.web)}
    again = home.tls(extra_names=["192.168.1.20"])
    assert {leaf: leaf.cert.read_bytes() for leaf in before} == before  # nothing reissued
    assert again.fingerprint == tls.fingerprint
    assert tls.server_context().minimum_version == ssl.TLSVersion.TLSv1_2  # the web listener's
    fingerprint, until = tls_status(home.path)
    assert fingerprint == tls.fingerprint and until is not None

    # a new advertised address: reissued, naming it
    moved = home.tls(extra_names=["10.0.0.7"])
    assert moved.grpc.cert.read_bytes() != before[tls.grpc]
    assert "10.0.0.7" in moved.names

    # a leaf about to expire is renewed at start, by the same CA (bundles keep working)
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(days=LEAF_DAYS - RENEW_BEFORE_DAYS + 1)
    current = moved.mqtt.cert.read_bytes()
    renewed = ensure_hub_tls(
        home.path, home.home_id, hub_host=home.hub_host, extra_names=["10.0.0.7"], now=soon
    )
    pem = renewed.mqtt.cert.read_bytes()
    assert pem != current and issued_by(pem, renewed.ca_pem)
    assert renewed.fingerprint == tls.fingerprint
    assert x509.load_pem_x509_certificate(pem).not_valid_after_utc > soon + dt.timedelta(days=300)


def test_a_leaf_from_another_ca_is_replaced(homes: tuple[Home, Home], tmp_path: Path) -> None:
    ours, other = homes
    tls = ours.tls()
    foreign = other.tls()
    shutil.copy(foreign.grpc.cert, tls.grpc.cert)
    assert issued_by(ours.tls().grpc.cert.read_bytes(), tls.ca_pem)


def test_bundles_pin_the_ca_and_old_bundles_are_told_to_re_pair(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    bundle = flash(home, profile_name="glasses", name="g", out=tmp_path / "g")
    tls = home.tls()
    assert bundle.tls_ca_pem == tls.ca_pem
    assert bundle.tls_ca_fingerprint == tls.fingerprint
    assert ClientTls.for_bundle(bundle).ca_pem == tls.ca_pem

    # another home's CA put in the bundle: refused on load (fingerprint and endorsement)
    stranger = Home.init(tmp_path / "stranger")
    good = (bundle.path / CA_FILE).read_bytes()
    (bundle.path / CA_FILE).write_bytes((stranger.path / CA_CERT_FILE).read_bytes())
    with pytest.raises(ProvisioningError) as err:
        Bundle.load(bundle.path)
    assert err.value.key == "bundle.corrupt"
    # the bundle's own CA damaged (its version field: cryptography's InvalidVersion)
    der = bytearray(x509.load_pem_x509_certificate(good).public_bytes(DER))
    der[12] ^= 1
    (bundle.path / CA_FILE).write_bytes(_PEM_HEAD + base64.encodebytes(bytes(der)) + _PEM_TAIL)
    with pytest.raises(ProvisioningError) as err:
        Bundle.load(bundle.path)
    assert err.value.key == "bundle.corrupt" and "not a certificate" in str(err.value)
    (bundle.path / CA_FILE).write_bytes(good)

    # a bundle from before TLS: it loads, connecting says what to do
    config = yaml.safe_load((bundle.path / "bundle.yaml").read_text())
    del config["hub"]["tls_ca_sha256"], config["hub"]["tls_ca_endorsement"]
    (bundle.path / "bundle.yaml").write_text(yaml.safe_dump(config))
    (bundle.path / CA_FILE).unlink()
    old = Bundle.load(bundle.path)
    assert old.tls_ca_pem is None
    with pytest.raises(SyncError) as err2:
        ClientTls.for_bundle(old)
    assert err2.value.key == "bundle.no_tls_ca"
    assert "re-pair" in str(err2.value) and "重新配对" in str(err2.value)
    with pytest.raises(SyncError) as err3:  # what `yimi say` and `yimi edge run` make first
        DeviceNode(old, NodeOptions(mode="say"), _no_reply)
    assert err3.value.key == "bundle.no_tls_ca"


def test_a_paired_bundle_pins_the_ca_the_call_ran_under(
    homes: tuple[Home, Home], tmp_path: Path
) -> None:
    ours, other = homes
    authority = PairingAuthority(ours, mqtt_port=1, grpc_port=2)

    def pair(seen_leaf: bytes, out: str) -> Bundle:
        code, _ = issue_code(ours)
        attempt = PairAttempt.make(code, profile="watch", name=out)
        response = authority.handle(attempt.request, "peer")
        return attempt.finish(response, out=tmp_path / out, hub_host="h", seen_leaf=seen_leaf)

    bundle = pair(ours.tls().grpc.cert.read_bytes(), "w1")
    assert bundle.tls_ca_pem == ours.tls().ca_pem
    # someone in between, presenting their own certificate: the grant names another CA
    with pytest.raises(ProvisioningError) as err:
        pair(other.tls().grpc.cert.read_bytes(), "w2")
    assert err.value.key == "pair.tls_mismatch"


def test_plaintext_is_refused_off_loopback(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    with pytest.raises(HubError) as err:
        HubDaemon(home, HubOptions(mqtt_port=1, grpc_port=2, bind="0.0.0.0", plaintext=True))
    assert err.value.key == "tls.plaintext_not_loopback"
    with pytest.raises(HubError):
        Broker(tmp_path / "b", home_id="ab", host="192.168.1.2", port=1883, accounts=[])
    Broker(tmp_path / "b", home_id="ab", host="127.0.0.1", port=1883, accounts=[])
    with pytest.raises(SyncError) as err2:
        ClientTls.plaintext(home.home_id).channel("192.168.1.2", 1)
    assert err2.value.key == "tls.plaintext_not_loopback"
    assert "明文" in render("tls.plaintext_not_loopback", {"host": "x"})


async def test_grpc_handshake_pins_the_home_ca(homes: tuple[Home, Home]) -> None:
    ours, other = homes
    tls = ours.tls()
    service = HubService(
        ours,
        mqtt_port=1,
        grpc_port=2,
        version="test",
        on_enrolled=_nothing,
        on_sync=_echo,
        lookup=lambda _: None,
        count=lambda _: None,
    )
    credentials = tls_credentials(tls.grpc.cert.read_bytes(), tls.grpc.key.read_bytes(), tls.ca_pem)
    server = make_server(service)
    port = server.add_secure_port("127.0.0.1:0", credentials)
    await server.start()
    try:
        mine = ClientTls.pinned(tls.ca_pem, ours.home_id)
        found = await identify("127.0.0.1", port, pinned=ours.fingerprint, tls=mine)
        assert found.fingerprint == ours.fingerprint
        # the CA is the pin, not the dialled name: "localhost" works as well
        await identify("localhost", port, pinned=ours.fingerprint, tls=mine)
        strangers = ClientTls.pinned(other.tls().ca_pem, other.home_id)
        with pytest.raises(SyncError) as err:
            await identify("127.0.0.1", port, pinned=ours.fingerprint, tls=strangers)
        assert err.value.key == "hub.tls_untrusted"
        # a plaintext client gets nothing from a TLS listener
        with pytest.raises(SyncError) as err2:
            await identify("127.0.0.1", port, pinned=ours.fingerprint, tls=ClientTls.plaintext(""))
        assert err2.value.key == "hub.unreachable"
    finally:
        await server.stop(None)


@pytest.mark.skipif(not MOSQUITTO, reason="mosquitto is not installed")
async def test_mqtt_handshake_pins_the_home_ca(homes: tuple[Home, Home], tmp_path: Path) -> None:
    ours, other = homes
    tls = ours.tls()
    password = new_password()
    port = ports.port()
    broker = Broker(
        tmp_path / "broker",
        home_id=ours.home_id,
        port=port,
        accounts=[BrokerAccount("hub", mosquitto_hash(password), "hub")],
        tls=BrokerTls(tls.ca_path, tls.mqtt.cert, tls.mqtt.key),
    )
    assert "certfile" in broker._render_config()

    async def target() -> tuple[str, int]:
        return "127.0.0.1", port

    async def ignore(_: aiomqtt.Message) -> None:
        return None

    def session(client: ClientTls) -> MqttSession:
        return MqttSession(
            target=target,
            username="hub",
            password=password,
            identifier="tls-test",
            subscriptions=[],
            on_message=ignore,
            tls=client,
            transient=True,
        )

    async with broker:
        async with session(ClientTls.pinned(tls.ca_pem, ours.home_id)) as good:
            await asyncio.wait_for(good.connected.wait(), 10)
        async with session(ClientTls.pinned(other.tls().ca_pem, other.home_id)) as bad:
            await asyncio.wait_for(bad.refused.wait(), 10)
            assert bad.refusal is not None and bad.refusal.key == "hub.tls_untrusted"
            assert not bad.connected.is_set()
        with pytest.raises(aiomqtt.MqttError):  # plaintext to a TLS listener
            async with aiomqtt.Client(
                "127.0.0.1", port, username="hub", password=password, timeout=1
            ):
                pass


async def _no_reply(*_: object) -> None:
    return None


async def _nothing() -> None:
    return None


async def _echo(data: bytes) -> bytes:
    return data


async def test_a_session_asked_for_plaintext_off_loopback_says_so_at_once() -> None:
    async def target() -> tuple[str, int]:
        return "192.0.2.1", 1883

    async def ignore(_: aiomqtt.Message) -> None:
        return None

    async with MqttSession(
        target=target,
        username="hub",
        password="x",
        identifier="plain",
        subscriptions=[],
        on_message=ignore,
        tls=ClientTls.plaintext("ab"),
    ) as session:
        await asyncio.wait_for(session.refused.wait(), 5)
    assert session.refusal is not None and session.refusal.key == "tls.plaintext_not_loopback"


_PEM_HEAD = b"-----BEGIN CERTIFICATE-----\n"
_PEM_TAIL = b"-----END CERTIFICATE-----\n"
DER = serialization.Encoding.DER


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    junk=st.binary(max_size=600),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=4),
    mutate=st.booleans(),
    signature=st.binary(max_size=80),
)
@example(junk=b"", flips=[(12, 1)], mutate=True, signature=b"")  # version 3: InvalidVersion
def test_untrusted_certificates_never_raise_unexpectedly(
    homes: tuple[Home, Home],
    junk: bytes,
    flips: list[tuple[int, int]],
    mutate: bool,
    signature: bytes,
) -> None:
    """What a hub (or someone in between) sends a pairing device: a CA certificate, its
    endorsement and a leaf — junk or a damaged real certificate is refused with the one
    error, never a traceback."""
    ours, _ = homes
    tls = ours.tls()
    body = junk
    real_der = x509.load_pem_x509_certificate(tls.ca_pem).public_bytes(DER)
    if mutate:  # the real CA, a few bytes changed
        der = bytearray(real_der)
        for at, xor in flips:
            der[at % len(der)] ^= xor
        body = bytes(der)
    pem = _PEM_HEAD + base64.encodebytes(body) + _PEM_TAIL
    real = endorse(ours.home_keys.sign, tls.ca_pem)
    for candidate, sig in ((pem, signature), (pem, real), (junk, signature)):
        if body == real_der and sig == real and candidate == pem:
            check_endorsement(ours.home_keys.sign_pk, candidate, sig)  # unchanged: valid
            continue
        with pytest.raises(ProvisioningError) as err:
            check_endorsement(ours.home_keys.sign_pk, candidate, sig)
        assert err.value.key == "tls.ca_invalid"
        assert isinstance(issued_by(candidate, tls.ca_pem), bool)
        assert isinstance(issued_by(tls.grpc.cert.read_bytes(), candidate), bool)
