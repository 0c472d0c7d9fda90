"""The web app without a browser (fast): its texts in both languages, sessions opened only
by a device key's signature over a live challenge, pairing from the page with a one-time
code, and every request body — hostile bytes included — answered with a refusal, never a
server error (fuzzed)."""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import urllib.request
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nacl.public import PrivateKey
from nacl.signing import SigningKey

pytest.importorskip("webauthn")

from hub.timeline import HubStore
from hub.web import texts
from hub.web.app import STATIC, HubLink, WebApp
from hub.web.errors import WebError
from hub.web.operator import OperatorLink, revoke_device
from hub.web.options import WebTls
from hub.web.server import WebServer
from hub.web.sessions import COOKIE, SESSION_CONTEXT, Passkeys, Sessions
from models.voiceprint import TrustWindow
from protos.clock import now_ms
from protos.codec import signing_input
from provisioning.home import Home
from provisioning.pairing import PairingAuthority, issue_code
from provisioning.registry import DeviceRecord, Registry
from worlds import ports

ORIGIN = "http://localhost:8080"
HUB_DIR = Path(__file__).resolve().parent.parent / "hub"
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


# ---------------------------------------------------------------- texts
def test_every_text_has_english_and_chinese_and_the_pages_name_only_known_keys() -> None:
    for key, (en, zh) in texts.TEXTS.items():
        assert en.strip() and zh.strip(), key
        assert sorted(re.findall(r"\{\w+\}", en)) == sorted(re.findall(r"\{\w+\}", zh)), key
    used: set[str] = set()
    for f in STATIC.iterdir():
        if f.suffix in (".html", ".js"):
            src = f.read_text()
            used |= set(re.findall(r'data-t(?:-placeholder)?="([\w.]+)"', src))
            used |= set(re.findall(r'\bt\("([\w.]+)"', src))
    assert used and used <= set(texts.TEXTS), used - set(texts.TEXTS)


@given(st.text(max_size=200))
def test_accept_language_never_raises(header: str) -> None:
    assert texts.language_of(header) in texts.LANGUAGES


def test_accept_language_picks_chinese() -> None:
    assert texts.language_of("zh-CN,zh;q=0.9,en;q=0.8") == "zh"
    assert texts.language_of("fr-FR, en;q=0.5") == "en"
    assert texts.catalog("zh")["nav.chat"] == "对话"


# ---------------------------------------------------------------- sessions
def record(key: SigningKey, *, revoked: bool = False) -> DeviceRecord:
    return DeviceRecord(
        "d1", "web", "phone", ("utter",), bytes(key.verify_key), b"\0" * 32, b"", "", "pair-web",
        0, 1 if revoked else None,
    )  # fmt: skip


def signature(key: SigningKey, challenge: str) -> bytes:
    return key.sign(signing_input(SESSION_CONTEXT, bytes.fromhex(challenge))).signature


def test_a_session_needs_the_device_key_over_a_live_challenge_used_once() -> None:
    s, key = Sessions(), SigningKey.generate()
    c = s.challenge()
    assert s.open(c, signature(SigningKey.generate(), c), record(key)) is None  # another key
    c = s.challenge()
    opened = s.open(c, signature(key, c), record(key))
    assert opened is not None and s.get(opened.token) == opened
    assert s.open(c, signature(key, c), record(key)) is None  # the challenge is spent
    c = s.challenge()
    assert s.open(c, signature(key, c), record(key, revoked=True)) is None
    assert s.end_device("d1") == [opened.token] and s.get(opened.token) is None


@given(st.text(max_size=80), st.binary(max_size=80))
def test_opening_a_session_with_anything_never_raises(challenge: str, sig: bytes) -> None:
    s = Sessions()
    s.challenge()
    try:
        bytes.fromhex(challenge)
    except ValueError:
        return  # the app refuses non-hex challenges before it gets here
    assert s.open(challenge, sig, record(SigningKey.generate())) is None


# ---------------------------------------------------------------- the app over ASGI
@dataclass
class Hub:
    home: Home
    app: WebApp
    counted: list[str]
    trusted: list[str]
    """devices the app opened a voice trust window on"""


async def never(*args: Any) -> Any:
    raise AssertionError("not used here")


def page_link(
    home: Home, registry: Registry, store: HubStore, passkeys: Passkeys, **more: Any
) -> HubLink:
    """The pages' link to a hub of stores only: every callable unused unless ``more`` gives it
    (``gateway=…``, ``answer=…``, ``reminders=…``)."""
    given: dict[str, Any] = {
        "typed": never,
        "gateway": lambda: None,
        "answer": never,
        "rendered": never,
        "count": lambda name: None,
    }
    return HubLink(
        store=store,
        devices=registry.devices,
        pairing=PairingAuthority(home, mqtt_port=1, grpc_port=2),
        passkeys=passkeys,
        origins=(ORIGIN,),
        **(given | more),
    )


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    root = tmp_path_factory.mktemp("web")
    home = Home.init(root / "home")
    registry = Registry(home.path / "registry.db")
    store = HubStore(home.path / "hub.db")
    passkeys = Passkeys(home.path / "web.db")
    counted: list[str] = []

    async def typed(opened: Any, scopes: Any) -> bool:
        return True

    async def answer(approval: Any, rec: Any, trace: str) -> Any:
        raise AssertionError("no card is answered here")

    async def rendered(device: str, reply: str) -> bool:
        return False

    trusted: list[str] = []

    async def trust(device: str) -> TrustWindow:
        trusted.append(device)
        return TrustWindow(device, now_ms(), "passkey")

    operator = OperatorLink(
        packages=lambda: {"loaded": ["notes"], "running": [], "failed": []},
        models=lambda: [],
        brain=lambda: {"version": 0, "prefer_local": True, "providers": []},
        payments=lambda: [],
        audit=lambda: {"ok": False, "records": 0, "problem": "no audit log here", "line": 0},
        pair_code=lambda: issue_code(home),
        revoke=lambda name: revoke_device(home, name),
    )

    link = HubLink(
        store=store,
        devices=registry.devices,
        pairing=PairingAuthority(home, mqtt_port=1, grpc_port=2),
        typed=typed,
        gateway=lambda: None,
        answer=answer,
        rendered=rendered,
        count=counted.append,
        passkeys=passkeys,
        origins=(ORIGIN,),
        trust=trust,
        operator=operator,
    )
    try:
        yield Hub(home, WebApp(link), counted, trusted)
    finally:
        passkeys.close()
        store.close()
        registry.close()


async def call(
    app: WebApp, method: str, path: str, body: bytes = b"", cookie: str = ""
) -> tuple[int, dict[str, str], bytes]:
    """One request straight into the ASGI app: (status, headers, body)."""
    path, _, query = path.partition("?")
    headers = [(b"host", b"localhost:8080"), (b"content-type", b"application/json")]
    if cookie:
        headers.append((b"cookie", f"{COOKIE}={cookie}".encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("localhost", 8080),
    }
    messages: list[MutableMapping[str, Any]] = []
    given_body = False

    async def receive() -> dict[str, Any]:
        nonlocal given_body
        if given_body:
            return {"type": "http.disconnect"}
        given_body = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        messages.append(message)

    await asyncio.wait_for(app.app(scope, receive, send), 10)
    start = messages[0]
    hdrs = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], hdrs, b"".join(m.get("body", b"") for m in messages[1:])


def pair(hub: Hub, code: str, name: str, key: SigningKey) -> tuple[int, dict[str, Any]]:
    body = json.dumps(
        {
            "code": code,
            "name": name,
            "sign_pk": bytes(key.verify_key).hex(),
            "box_pk": bytes(PrivateKey.generate().public_key).hex(),
        }
    ).encode()
    status, _, out = asyncio.run(call(hub.app, "POST", "/api/pair", body))
    return status, json.loads(out)


def test_pairing_from_the_page_once_per_code_then_a_signed_session(hub: Hub) -> None:
    code, _ = issue_code(hub.home)
    key = SigningKey.generate()
    status, granted = pair(hub, code, "page-phone", key)
    assert status == 200, granted
    assert pair(hub, code, "page-phone2", SigningKey.generate()) == (
        403,
        {"error": "pair.code_invalid", "fields": {}},
    )
    assert "rejected.web_pair" in hub.counted

    status, _, out = asyncio.run(call(hub.app, "GET", "/api/challenge"))
    challenge = json.loads(out)["challenge"]
    body = json.dumps(
        {
            "device_id": granted["device_id"],
            "challenge": challenge,
            "signature": signature(key, challenge).hex(),
        }
    ).encode()
    status, headers, _ = asyncio.run(call(hub.app, "POST", "/api/session", body))
    assert status == 200
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Secure" not in cookie
    token = cookie.split(";")[0].split("=", 1)[1]
    status, _, out = asyncio.run(call(hub.app, "GET", "/api/me", cookie=token))
    assert status == 200 and json.loads(out)["profile"] == "phone"

    registry = Registry(hub.home.path / "registry.db")
    try:
        registry.revoke("page-phone")
    finally:
        registry.close()
    status, _, out = asyncio.run(call(hub.app, "GET", "/api/me", cookie=token))
    assert (status, json.loads(out)["error"]) == (401, "web.device_revoked")


PATHS = (
    "/api/pair",
    "/api/session",
    "/api/say",
    "/api/cards/c1/prepare",
    "/api/rendered",
    "/api/trust",
    "/api/operator/revoke",
    "/api/operator/pair-code",
)


@FUZZ
@given(
    st.sampled_from(PATHS),
    st.one_of(
        st.binary(max_size=300),
        st.dictionaries(
            st.sampled_from(["code", "name", "sign_pk", "box_pk", "device_id", "challenge",
                             "signature", "text", "decision", "reply_ids"]),
            st.one_of(st.none(), st.integers(), st.text(max_size=80), st.lists(st.text())),
        ).map(lambda d: json.dumps(d).encode()),
    ),
)  # fmt: skip
def test_any_request_body_is_refused_never_a_server_error(hub: Hub, path: str, body: bytes) -> None:
    status, _, out = asyncio.run(call(hub.app, "POST", path, body))
    assert 400 <= status < 500, (status, out)
    assert json.loads(out)["error"] in texts.TEXTS


def test_the_timeline_is_paged_newest_first(hub: Hub) -> None:
    store = hub.app.link.store
    for i in range(5):
        store.append_entry(
            f"e{i}", device="d1", kind="memo", text=f"entry {i}", ts_ms=1000 + i, trace_id="",
            meta={},
        )  # fmt: skip
    newest = store.entries_before(0, 2)
    assert [e.text for e in newest] == ["entry 3", "entry 4"]
    older = store.entries_before(newest[0].seq, 2)
    assert [e.text for e in older] == ["entry 1", "entry 2"]


def test_the_pages_and_texts_are_served(hub: Hub) -> None:
    for path in ("/", "/dashboard", "/static/companion.js", "/texts.json?lang=zh"):
        status, _, out = asyncio.run(call(hub.app, "GET", path))
        assert status == 200, path
    assert json.loads(out)["texts"]["nav.cards"] == "确认卡片"


# ---------------------------------------------------------------- HTTPS
def self_signed(folder: Path) -> WebTls:
    """A throwaway P-256 certificate for localhost (the hub's real one comes from the home's
    TLS CA)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    tls = WebTls(folder / "web.crt", folder / "web.key")
    tls.certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    tls.keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return tls


async def test_over_https_the_session_cookie_is_secure(hub: Hub, tmp_path: Path) -> None:
    tls = self_signed(tmp_path)
    port = ports.port()
    code, _ = issue_code(hub.home)
    key = SigningKey.generate()
    context = ssl.create_default_context(cafile=str(tls.certfile))

    def request(path: str, body: dict[str, Any] | None = None) -> tuple[int, str, bytes]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"https://localhost:{port}{path}", data, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, context=context, timeout=5) as r:
            return r.status, r.headers.get("set-cookie") or "", r.read()

    async with WebServer(hub.app.app, host="127.0.0.1", port=port, tls=tls) as server:
        assert server.scheme == "https"
        box = bytes(PrivateKey.generate().public_key).hex()
        _, _, out = await asyncio.to_thread(
            request,
            "/api/pair",
            {"code": code, "name": "tls-phone", "sign_pk": bytes(key.verify_key).hex(),
             "box_pk": box},
        )  # fmt: skip
        device = json.loads(out)["device_id"]
        _, _, out = await asyncio.to_thread(request, "/api/challenge")
        challenge = json.loads(out)["challenge"]
        sig = signature(key, challenge).hex()
        status, cookie, _ = await asyncio.to_thread(
            request,
            "/api/session",
            {"device_id": device, "challenge": challenge, "signature": sig},
        )
        assert status == 200
        assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie


async def test_without_tls_the_pages_stay_on_loopback(hub: Hub) -> None:
    port = ports.port()
    async with WebServer(hub.app.app, host="0.0.0.0", port=port) as server:
        assert (server.host, server.scheme) == ("127.0.0.1", "http")
        status, _ = await asyncio.to_thread(urlopen_status, f"http://127.0.0.1:{port}/texts.json")
        assert status == 200


def urlopen_status(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, r.read()


async def test_a_bad_certificate_fails_the_start(hub: Hub, tmp_path: Path) -> None:
    tls = WebTls(tmp_path / "none.crt", tmp_path / "none.key")
    with pytest.raises(WebError) as refused:
        async with WebServer(hub.app.app, host="127.0.0.1", port=ports.port(), tls=tls):
            pass
    assert refused.value.key == "web.start_failed" and "did not start" in str(refused.value)


def session_of(hub: Hub, device_id: str, key: SigningKey) -> str:
    _, _, out = asyncio.run(call(hub.app, "GET", "/api/challenge"))
    challenge = json.loads(out)["challenge"]
    body = {"device_id": device_id, "challenge": challenge, "signature": ""}
    body["signature"] = signature(key, challenge).hex()
    status, headers, _ = asyncio.run(
        call(hub.app, "POST", "/api/session", json.dumps(body).encode())
    )
    assert status == 200
    return headers["set-cookie"].split(";")[0].split("=", 1)[1]


def test_a_device_without_the_approve_scope_sees_no_cards(hub: Hub) -> None:
    from provisioning.bundle import enrol
    from provisioning.profiles import load_profile

    key = SigningKey.generate()
    rec, _ = enrol(
        hub.home,
        name="specs-web",
        profile=load_profile("glasses"),
        sign_pk=bytes(key.verify_key),
        box_pk=bytes(PrivateKey.generate().public_key),
        enrolled_by="test",
    )
    registry = Registry(hub.home.path / "registry.db")
    try:
        registry.add_device(rec)
    finally:
        registry.close()
    token = session_of(hub, rec.device_id, key)
    status, _, out = asyncio.run(call(hub.app, "GET", "/api/cards", cookie=token))
    assert (status, json.loads(out)["error"]) == (403, "web.scope_missing")
    status, _, _ = asyncio.run(call(hub.app, "GET", "/api/timeline", cookie=token))
    assert status == 200  # glasses read the timeline
    for method, path in (  # the owner's panels, memory and switches: not for the glasses
        ("GET", "/api/operator"),
        ("POST", "/api/operator/pair-code"),
        ("POST", "/api/operator/revoke"),
        ("GET", "/api/memory/search?q=tea"),
        ("GET", "/api/memory/pref.tea/plan"),
        ("POST", "/api/memory/pref.tea/forget"),
        ("GET", "/api/switches"),
        ("POST", "/api/switches/brain"),
        ("POST", "/api/switches/confirm"),
        ("POST", "/api/notes"),
    ):
        body = json.dumps({"name": "specs-web"}).encode()
        status, _, out = asyncio.run(call(hub.app, method, path, body, cookie=token))
        assert (status, json.loads(out)["error"]) == (403, "web.scope_missing"), path
    assert "rejected.web_scope" in hub.counted
    assert not next(r for r in registry_devices(hub) if r.name == "specs-web").revoked


def registry_devices(hub: Hub) -> list[DeviceRecord]:
    registry = Registry(hub.home.path / "registry.db")
    try:
        return registry.devices()
    finally:
        registry.close()


def phone_session(hub: Hub, name: str) -> tuple[DeviceRecord, str]:
    """A phone paired from the page, and its session."""
    key = SigningKey.generate()
    code, _ = issue_code(hub.home)
    status, granted = pair(hub, code, name, key)
    assert status == 200, granted
    rec = next(r for r in registry_devices(hub) if r.name == name)
    return rec, session_of(hub, rec.device_id, key)


def test_its_me_needs_a_user_verified_assertion(hub: Hub) -> None:
    rec, token = phone_session(hub, "phone-trust")
    # no passkey registered yet: no options, and nothing opens
    status, _, out = asyncio.run(call(hub.app, "GET", "/api/trust/options", cookie=token))
    assert (status, json.loads(out)["error"]) == (409, "web.no_credential")
    for assertion in (None, {}, {"id": "x", "response": {}}, "junk"):
        body = json.dumps({"assertion": assertion}).encode()
        status, _, out = asyncio.run(call(hub.app, "POST", "/api/trust", body, cookie=token))
        assert (status, json.loads(out)["error"]) == (403, "web.uv_failed"), assertion
    assert hub.trusted == []
    assert hub.counted.count("rejected.web_user_verification") >= 4
    status, _, _ = asyncio.run(call(hub.app, "POST", "/api/trust", b"{}"))
    assert status == 401  # and never without a session
    assert rec.device_id not in hub.trusted


def test_the_owners_phone_sees_the_operator_panels_pairs_and_revokes(hub: Hub) -> None:
    _, token = phone_session(hub, "phone-operator")
    status, _, out = asyncio.run(call(hub.app, "GET", "/api/operator", cookie=token))
    assert status == 200, out
    panels = json.loads(out)
    assert set(panels) == {"packages", "models", "brain", "payments", "audit"}
    status, _, out = asyncio.run(call(hub.app, "POST", "/api/operator/pair-code", b"{}", token))
    code = json.loads(out)["code"]
    assert status == 200 and re.fullmatch(r"[A-Z0-9]{4}(-[A-Z0-9]{4}){3}", code), out
    assert pair(hub, code, "paired-by-page", SigningKey.generate())[0] == 200  # a real code
    body = json.dumps({"name": "no-such-device"}).encode()
    status, _, out = asyncio.run(call(hub.app, "POST", "/api/operator/revoke", body, token))
    assert (status, json.loads(out)["error"]) == (404, "device.unknown")
    body = json.dumps({"name": "paired-by-page"}).encode()
    status, _, out = asyncio.run(call(hub.app, "POST", "/api/operator/revoke", body, token))
    assert status == 200, out
    assert next(r for r in registry_devices(hub) if r.name == "paired-by-page").revoked


def test_card_refusal_reasons_have_english_and_chinese_texts() -> None:
    from hub.payments.policy import approval_problem
    from protos import consent_pb2

    locked = approval_problem(
        consent_pb2.ApprovalBody(lock_sensor="webauthn", unlocked=False),
        None,  # type: ignore[arg-type]
        b"",
        0,
    )
    key = texts.REASON_KEYS[locked]
    assert texts.catalog("zh")[key] == "手机已锁定：请解锁后再次批准"
    sources = "".join(
        p.read_text() for d in ("payments", "gateway") for p in (HUB_DIR / d).glob("*.py")
    )
    for reason in texts.REASON_KEYS:  # every mapped reason is one the hub gives
        assert f'"{reason}"' in sources, reason
