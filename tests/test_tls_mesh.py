"""TLS on a real mesh (issue 15): a hub process serving TLS by default, a device that pins its
home CA answered over it, a bundle pinned to another home's CA refused on gRPC and on MQTT,
and plaintext refused anywhere but 127.0.0.1 (and working there, when asked: a device
started with ``YIMI_PLAINTEXT=1`` uses the same two calls checked here)."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import aiomqtt
import pytest

from protos.errors import render
from provisioning.bundle import Bundle
from sync.locate import identify
from sync.mqtt import transient_username
from sync.tls import ClientTls
from tests.mesh_harness import Mesh
from tests.waiting import poll_sync

pytestmark = pytest.mark.slow


def mqtt_login(mesh: Mesh, bundle: Bundle, context: ssl.SSLContext | None) -> None:
    """Log in to ``mesh``'s broker as ``bundle``'s device (a transient login)."""
    login = transient_username(bundle.device_id, 7)

    async def run() -> None:
        async with aiomqtt.Client(
            "127.0.0.1",
            mesh.mqtt_port,
            username=login,
            password=bundle.mqtt_password,
            identifier=login,
            timeout=3,
            tls_context=context,
        ):
            pass

    asyncio.run(run())


def counters(mesh: Mesh) -> dict[str, int]:
    rows = mesh.hub_query("SELECT name, value FROM counters")
    return {str(name): int(str(value)) for name, value in rows}


def test_devices_reach_their_hub_over_tls_and_refuse_another_homes(
    mesh: Mesh, tmp_path: Path
) -> None:
    ours = mesh.add_device("glasses")
    hub = mesh.start_hub()
    conf = (mesh.home / "broker" / "mosquitto.conf").read_text()
    assert "certfile " in conf and "keyfile " in conf and "tls_version tlsv1.2" in conf
    assert "TLS CA" in hub.text()

    r = mesh.say(ours, "hello", "--timeout", "20")
    assert r.returncode == 0 and r.stdout.strip(), (r.stdout, r.stderr)
    bundle = Bundle.load(ours)
    mqtt_login(mesh, bundle, ClientTls.for_bundle(bundle).ssl_context())  # TLS, pinned: in

    # a device of another home, pointed at this hub: refused at the handshake, on both
    other = Mesh(tmp_path / "other", mqtt_port=mesh.mqtt_port, grpc_port=mesh.grpc_port)
    other.root.mkdir()  # its hub never runs: only its home and a bundle
    other.init()
    stranger = other.add_device("stranger")
    r = mesh.say(stranger, "are you my hub", "--hub", mesh.hub_target, "--timeout", "5")
    refusal = render("hub.tls_untrusted", {"target": mesh.hub_target})
    assert r.returncode == 3 and refusal in r.stderr, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "CERTIFICATE_VERIFY" not in r.stderr, r.stderr
    strangers = Bundle.load(stranger)
    with pytest.raises(aiomqtt.MqttError, match=r"(?i)certificate verify failed"):
        mqtt_login(mesh, strangers, ClientTls.for_bundle(strangers).ssl_context())
    poll_sync(lambda: counters(mesh).get("broker.refused.tls"), 10, "the refusal counted")
    # plaintext: refused off loopback, before anything starts
    r = mesh.yimi("hub", "run", "--home", str(mesh.home), "--bind", "0.0.0.0", "--plaintext")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert render("tls.plaintext_not_loopback", {"host": "0.0.0.0"}) in r.stderr, r.stderr
    assert hub.alive()
    # ... and on 127.0.0.1, when both sides ask for it
    assert mesh.stop(hub) == 0
    plain = mesh.start_hub("--plaintext")
    assert "PLAINTEXT" in plain.text()
    assert "certfile" not in (mesh.home / "broker" / "mosquitto.conf").read_text()
    mqtt_login(mesh, bundle, None)
    plaintext = ClientTls.plaintext(bundle.home_id)
    found = asyncio.run(
        identify("127.0.0.1", mesh.grpc_port, pinned=bundle.pinned_fingerprint, tls=plaintext)
    )
    assert found.fingerprint == bundle.pinned_fingerprint
