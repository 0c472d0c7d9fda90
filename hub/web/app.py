"""The Starlette app of the phone companion and the dashboard.

Pages are static files (JavaScript modules, no build step) under ``static/``; everything
they show comes from the JSON API below, every refusal as a key of :mod:`hub.web.texts`.
Live updates: ``GET /api/events`` (server-sent events) says ``changed`` whenever the
timeline or the cards change, and ``logout`` when the session ends (revocation included).

Card answers are two steps: ``prepare`` builds the ``ApprovalBody`` the hub will check (the
same protobuf ``yimi approve`` signs: card id, canonical action hash, expiry, nonce,
decision); for a payment card it is built with ``unlocked`` only after a WebAuthn assertion
with the user-verified flag verifies against this device's passkey. The browser signs that
body with its device key and ``answer`` hands the signed ``Approval`` to the gateway — the
one path every card answer takes. Only a body the hub prepared for this session is taken.

"It's me for the next minute" (``/api/trust``) opens the voice trust window on this device
only after a WebAuthn assertion with the user-verified flag. The owner's phone (the
``approve`` scope) also gets the dashboard's operator panels (:mod:`hub.web.operator`),
memory search / explain / forget-as-a-plan (:mod:`hub.web.memory`) and model and brain
switches signed with its device key (:mod:`hub.web.switches`); every device with the scopes
reads and writes notes (:mod:`hub.web.notes`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import webauthn
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from webauthn.helpers import structs

from hub.errors import HubError
from hub.gateway.consent import Answer, Card
from hub.gateway.gateway import Gateway
from hub.schedule.reminders import ReminderDesk
from hub.timeline import HubStore
from hub.web import texts
from hub.web.errors import WebError
from hub.web.memory import MemoryLink
from hub.web.notes import NOTE_KINDS, NotesLink
from hub.web.operator import OPERATOR_SCOPE, OperatorLink
from hub.web.reminders import ReminderRoutes, WebHooks
from hub.web.sessions import COOKIE, SESSION_TTL_S, Passkey, Passkeys, Session, Sessions
from hub.web.switches import Signable, SwitchLink
from hub.web.worldlines import WorldlineRoutes
from models.voiceprint import TrustWindow
from protos import consent_pb2, mesh_pb2
from protos.clock import now_ms
from protos.errors import YimiError
from provisioning.errors import ProvisioningError
from provisioning.pairing import PairingAuthority
from provisioning.registry import DeviceRecord
from sync.envelope import HUB, Opened, new_trace_id
from sync.tasks import woken

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
EVENT_CHECK_S = 0.25
"""seconds between an event stream's checks of its session (revocation ends it within this)"""
RECONNECT_MS = 1000
"""milliseconds after which a browser tries a dropped event stream again"""
PAGE_LIMIT = 30
MAX_BODY = 16_384
LOCK_SENSOR = "webauthn"
"""the ``lock_sensor`` a browser's payment answer names: WebAuthn user verification"""
CHANNEL = "web"
CLIENT_ID = re.compile(r"[0-9a-f]{32}")
"""the id a page gives a typed message (kept in its outbox while offline: sending it again
is a repeat, never a second turn)"""
MAX_PENDING = 1024
"""prepared answers or WebAuthn challenges kept at most (over every session)"""
T = TypeVar("T")

TypedFn = Callable[[Opened, Sequence[str]], Awaitable[bool]]
AnswerFn = Callable[[consent_pb2.Approval, DeviceRecord, str], Awaitable[Answer]]
RenderedFn = Callable[[str, str], Awaitable[bool]]
"""(device id, reply id): the page showed the reply"""
TrustFn = Callable[[str], Awaitable[TrustWindow]]
"""(device id): open the voice trust window on it (``HubError`` if it may not have one)"""


@dataclass(frozen=True)
class HubLink:
    """What the web app may use of the hub (handed over by the daemon)."""

    store: HubStore
    devices: Callable[[], list[DeviceRecord]]
    pairing: PairingAuthority
    typed: TypedFn
    gateway: Callable[[], Gateway | None]
    answer: AnswerFn
    rendered: RenderedFn
    count: Callable[[str], None]
    passkeys: Passkeys
    origins: tuple[str, ...]
    """origins the pages are served at (WebAuthn checks the assertion's origin against them)"""
    trust: TrustFn | None = None
    """"it's me for the next minute" (``None``: the hub has no voiceprints)"""
    operator: OperatorLink | None = None
    """the dashboard's operator panels (``None``: not shown)"""
    notes: NotesLink | None = None
    memory: MemoryLink | None = None
    switches: SwitchLink | None = None
    """model and brain switches confirmed from the page"""
    reminders: ReminderDesk | None = None
    """the owner's reminders (:mod:`hub.web.reminders`); ``None``: none on the pages"""


@dataclass
class Prepared:
    body: bytes
    card_id: str


@dataclass
class WebState:
    link: HubLink
    sessions: Sessions = field(default_factory=Sessions)
    prepared: dict[tuple[str, str], Prepared] = field(default_factory=dict)
    """(session token, card id) → the body the hub prepared for it"""
    webauthn_challenges: dict[tuple[str, str], bytes] = field(default_factory=dict)
    """(session token, purpose) → the WebAuthn challenge issued for it"""
    signables: dict[tuple[str, str], Signable] = field(default_factory=dict)
    """(session token, "switch") → the switch the page was asked to sign"""
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def pulse(self) -> None:
        """Wake every event stream (the timeline or the cards changed)."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def changed(self, timeout: float) -> None:
        await woken(self._changed, timeout)

    def revoked(self, device_ids: Sequence[str]) -> None:
        for d in device_ids:
            if self.sessions.end_device(d):
                log.warning("web sessions of revoked device %s ended", d)
        self.prune()
        self.pulse()

    def prune(self) -> None:
        """Forget prepared answers and WebAuthn challenges of sessions that ended."""
        live = self.sessions.live
        self.prepared = {k: v for k, v in self.prepared.items() if live(k[0])}
        self.webauthn_challenges = {k: v for k, v in self.webauthn_challenges.items() if live(k[0])}
        self.signables = {k: v for k, v in self.signables.items() if live(k[0])}

    def keep(self, table: dict[tuple[str, str], T], key: tuple[str, str], value: T) -> None:
        """Store a per-session value (a table past :data:`MAX_PENDING` is pruned first)."""
        if len(table) >= MAX_PENDING:
            self.prune()
            while len(table) >= MAX_PENDING:
                del table[next(iter(table))]
        table[key] = value


# ---------------------------------------------------------------- helpers
async def body_json(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise WebError("web.bad_request", 413)
    try:
        data = json.loads(raw or b"{}")
    except ValueError:
        raise WebError("web.bad_request") from None
    if not isinstance(data, dict):
        raise WebError("web.bad_request")
    return data


def field_str(data: dict[str, Any], key: str, limit: int = 4096) -> str:
    v = data.get(key)
    if not isinstance(v, str) or len(v) > limit:
        raise WebError("web.bad_request", reason=key)
    return v


def field_hex(data: dict[str, Any], key: str) -> bytes:
    try:
        return bytes.fromhex(field_str(data, key))
    except ValueError:
        raise WebError("web.bad_request", reason=key) from None


def origin_of(request: Request) -> str:
    return f"{request.url.scheme}://{request.url.netloc}"


def card_json(card: Card, now: int) -> dict[str, Any]:
    return {
        "card_id": card.card_id,
        "effect": card.effect,
        "target": card.target,
        "title": card.title,
        "preview": card.preview,
        "expires_ms": card.expires_ms,
        "expired": card.expires_ms <= now,
        "payment": card.effect == "spend",
        "action_hash": card.action_hash.hex(),
    }


# ---------------------------------------------------------------- the app
class WebApp:
    """The routes; one instance per hub."""

    def __init__(self, link: HubLink) -> None:
        self.state = WebState(link)
        self.link = link
        api: list[BaseRoute] = [
            Route("/api/challenge", self.challenge),
            Route("/api/pair", self.pair, methods=["POST"]),
            Route("/api/session", self.open_session, methods=["POST"]),
            Route("/api/logout", self.logout, methods=["POST"]),
            Route("/api/me", self.me),
            Route("/api/passkey/options", self.passkey_options),
            Route("/api/passkey", self.passkey_register, methods=["POST"]),
            Route("/api/say", self.say, methods=["POST"]),
            Route("/api/timeline", self.timeline),
            Route("/api/rendered", self.rendered, methods=["POST"]),
            Route("/api/cards", self.cards),
            Route("/api/cards/{card_id}/verify", self.verify_options),
            Route("/api/cards/{card_id}/prepare", self.prepare, methods=["POST"]),
            Route("/api/cards/{card_id}/answer", self.answer, methods=["POST"]),
            Route("/api/events", self.events),
            Route("/api/dashboard", self.dashboard),
            Route("/api/trust/options", self.trust_options),
            Route("/api/trust", self.trust, methods=["POST"]),
            Route("/api/operator", self.operator),
            Route("/api/operator/pair-code", self.operator_pair_code, methods=["POST"]),
            Route("/api/operator/revoke", self.operator_revoke, methods=["POST"]),
            Route("/api/notes", self.notes),
            Route("/api/notes", self.note_add, methods=["POST"]),
            Route("/api/notes/{note_id}", self.note_edit, methods=["POST"]),
            Route("/api/memory/search", self.memory_search),
            Route("/api/memory/{item_id}/explain", self.memory_explain),
            Route("/api/memory/{item_id}/plan", self.memory_plan),
            Route("/api/memory/{item_id}/forget", self.memory_forget, methods=["POST"]),
            Route("/api/switches", self.switch_choices),
            Route("/api/switches/model", self.switch_model, methods=["POST"]),
            Route("/api/switches/brain", self.switch_brain, methods=["POST"]),
            Route("/api/switches/confirm", self.switch_confirm, methods=["POST"]),
            *ReminderRoutes(self._hooks(), lambda: link.reminders).routes(),
            *WorldlineRoutes(self._hooks(), link.gateway).routes(),
            Route("/texts.json", self.texts),
            Route("/", self.page("companion.html")),
            Route("/dashboard", self.page("dashboard.html")),
            Route("/sw.js", self.service_worker),
            Mount("/static", StaticFiles(directory=STATIC)),
        ]
        self.app = Starlette(routes=api, exception_handlers={WebError: self._refused})

    # ------------------------------------------------------------ plumbing
    @staticmethod
    async def _refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, WebError)
        return JSONResponse({"error": exc.key, "fields": exc.fields}, status_code=exc.status)

    @staticmethod
    def page(name: str) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            return FileResponse(STATIC / name, headers={"Cache-Control": "no-store"})

        return serve

    @staticmethod
    async def service_worker(request: Request) -> Response:
        """The service worker, served at the root so its scope is every page."""
        return FileResponse(
            STATIC / "sw.js", media_type="text/javascript", headers={"Cache-Control": "no-cache"}
        )

    def _hooks(self) -> WebHooks:
        """What a route module of its own (:mod:`hub.web.reminders`) may use of the app."""
        return WebHooks(
            scoped=self.scoped,
            check_origin=self._check_origin,
            body=body_json,
            field=field_str,
            pulse=lambda: self.state.pulse(),
        )

    def _check_origin(self, request: Request) -> None:
        origin = request.headers.get("origin")
        if origin is not None and origin != origin_of(request):
            raise WebError("web.bad_request", 403, reason="origin")

    def device(self, device_id: str) -> DeviceRecord | None:
        return next((r for r in self.link.devices() if r.device_id == device_id), None)

    def session(self, request: Request) -> tuple[Session, DeviceRecord]:
        s = self.state.sessions.get(request.cookies.get(COOKIE, ""))
        if s is None:
            raise WebError("web.session_required", 401)
        rec = self.device(s.device_id)
        if rec is None or rec.revoked:
            self.state.sessions.end_device(s.device_id)
            raise WebError("web.device_revoked", 401)
        self.state.sessions.seen(rec.device_id)
        return s, rec

    def scoped(self, request: Request, scope: str) -> tuple[Session, DeviceRecord]:
        """The session, if its device's certificate grants ``scope``."""
        s, rec = self.session(request)
        if scope not in rec.scopes:
            self.link.count("rejected.web_scope")
            raise WebError("web.scope_missing", 403, scope=scope)
        return s, rec

    def gateway(self) -> Gateway:
        gw = self.link.gateway()
        if gw is None:
            raise WebError("web.gateway_down", 503)
        return gw

    # ------------------------------------------------------------ texts
    async def texts(self, request: Request) -> Response:
        lang = request.query_params.get("lang") or texts.language_of(
            request.headers.get("accept-language", "")
        )
        lang = lang if lang in texts.LANGUAGES else "en"
        return JSONResponse({"lang": lang, "texts": texts.catalog(lang)})

    # ------------------------------------------------------------ pairing and sessions
    async def challenge(self, request: Request) -> Response:
        return JSONResponse({"challenge": self.state.sessions.challenge()})

    async def pair(self, request: Request) -> Response:
        self._check_origin(request)
        data = await body_json(request)
        peer = request.client.host if request.client else "?"
        try:
            rec = self.link.pairing.handle_web(
                field_str(data, "code", 64),
                name=field_str(data, "name", 64),
                sign_pk=field_hex(data, "sign_pk"),
                box_pk=field_hex(data, "box_pk"),
                peer=f"web:{peer}",
            )
        except ProvisioningError as exc:
            self.link.count("rejected.web_pair")
            raise WebError(exc.key, 403, **exc.fields) from None
        log.info("browser paired as %s (%s)", rec.name, rec.device_id)
        return JSONResponse(
            {"device_id": rec.device_id, "name": rec.name, "certificate": rec.certificate.hex()}
        )

    async def open_session(self, request: Request) -> Response:
        self._check_origin(request)
        data = await body_json(request)
        challenge = field_str(data, "challenge", 128)
        try:
            bytes.fromhex(challenge)
        except ValueError:
            raise WebError("web.challenge_invalid") from None
        rec = self.device(field_str(data, "device_id", 128))
        s = self.state.sessions.open(challenge, field_hex(data, "signature"), rec)
        if s is None or rec is None:
            self.link.count("rejected.web_session")
            key = (
                "web.device_revoked" if rec is not None and rec.revoked else "web.signature_invalid"
            )
            raise WebError(key, 401)
        resp = JSONResponse({"device_id": rec.device_id, "name": rec.name})
        resp.set_cookie(
            COOKIE,
            s.token,
            max_age=int(SESSION_TTL_S),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return resp

    async def logout(self, request: Request) -> Response:
        self.state.sessions.end(request.cookies.get(COOKIE, ""))
        resp = JSONResponse({})
        resp.delete_cookie(COOKIE)
        return resp

    async def me(self, request: Request) -> Response:
        _, rec = self.session(request)
        has_key = self.link.passkeys.get(rec.device_id) is not None
        return JSONResponse(
            {
                "device_id": rec.device_id,
                "name": rec.name,
                "profile": rec.profile,
                "passkey": has_key,
            }
        )

    # ------------------------------------------------------------ passkeys (WebAuthn)
    def _rp(self, request: Request) -> tuple[str, str]:
        origin = origin_of(request)
        if origin not in self.link.origins:
            raise WebError("web.bad_request", 403, reason="origin")
        return origin, urlsplit(origin).hostname or ""

    async def passkey_options(self, request: Request) -> Response:
        s, rec = self.session(request)
        _, rp_id = self._rp(request)
        options = webauthn.generate_registration_options(
            rp_id=rp_id,
            rp_name="Yimi",
            user_name=rec.name,
            user_id=rec.device_id.encode(),
            authenticator_selection=structs.AuthenticatorSelectionCriteria(
                user_verification=structs.UserVerificationRequirement.REQUIRED,
                resident_key=structs.ResidentKeyRequirement.DISCOURAGED,
            ),
        )
        self.state.keep(self.state.webauthn_challenges, (s.token, "register"), options.challenge)
        return Response(webauthn.options_to_json(options), media_type="application/json")

    async def passkey_register(self, request: Request) -> Response:
        self._check_origin(request)
        s, rec = self.session(request)
        origin, rp_id = self._rp(request)
        challenge = self.state.webauthn_challenges.pop((s.token, "register"), None)
        data = await body_json(request)
        if challenge is None:
            raise WebError("web.challenge_invalid")
        try:
            verified = webauthn.verify_registration_response(
                credential=data.get("credential") or {},
                expected_challenge=challenge,
                expected_rp_id=rp_id,
                expected_origin=origin,
                require_user_verification=True,
            )
        except Exception as exc:  # the library's refusals (malformed or unverified)
            log.info("passkey of %s refused: %s", rec.name, exc)
            self.link.count("rejected.web_passkey")
            raise WebError("web.signature_invalid", 403) from None
        self.link.passkeys.put(
            Passkey(
                rec.device_id,
                verified.credential_id,
                verified.credential_public_key,
                verified.sign_count,
            )
        )
        return JSONResponse({"passkey": True})

    def _request_options(
        self, request: Request, s: Session, rec: DeviceRecord, purpose: str
    ) -> Response:
        """WebAuthn request options (user verification required) for ``purpose``."""
        _, rp_id = self._rp(request)
        key = self.link.passkeys.get(rec.device_id)
        if key is None:
            raise WebError("web.no_credential", 409)
        options = webauthn.generate_authentication_options(
            rp_id=rp_id,
            allow_credentials=[structs.PublicKeyCredentialDescriptor(id=key.credential_id)],
            user_verification=structs.UserVerificationRequirement.REQUIRED,
        )
        self.state.keep(self.state.webauthn_challenges, (s.token, purpose), options.challenge)
        return Response(webauthn.options_to_json(options), media_type="application/json")

    async def verify_options(self, request: Request) -> Response:
        """WebAuthn request options for approving a payment card."""
        s, rec = self.session(request)
        return self._request_options(request, s, rec, f"card:{request.path_params['card_id']}")

    def _user_verified(
        self, request: Request, s: Session, rec: DeviceRecord, purpose: str, assertion: object
    ) -> bool:
        """Whether ``assertion`` is this device's passkey's, for the challenge issued for
        ``purpose``, with the user-verified flag (the library checks signature, origin, RP
        and flags)."""
        challenge = self.state.webauthn_challenges.pop((s.token, purpose), None)
        key = self.link.passkeys.get(rec.device_id)
        if challenge is None or key is None or not isinstance(assertion, dict):
            return False
        origin, rp_id = self._rp(request)
        try:
            verified = webauthn.verify_authentication_response(
                credential=assertion,
                expected_challenge=challenge,
                expected_rp_id=rp_id,
                expected_origin=origin,
                credential_public_key=key.public_key,
                credential_current_sign_count=key.sign_count,
                require_user_verification=True,
            )
        except Exception as exc:  # the library's refusals (bad signature, no UV, …)
            log.info("WebAuthn assertion of %s refused: %s", rec.name, exc)
            return False
        self.link.passkeys.used(rec.device_id, verified.new_sign_count)
        return True

    # ------------------------------------------------------------ chat and timeline
    async def say(self, request: Request) -> Response:
        self._check_origin(request)
        _, rec = self.session(request)
        data = await body_json(request)
        text = field_str(data, "text", 4000).strip()
        client_id = data.get("id", uuid.uuid4().hex)
        if not text or not isinstance(client_id, str) or not CLIENT_ID.fullmatch(client_id):
            raise WebError("web.bad_request", reason="text or id")
        now = now_ms()
        typed_ms = data.get("typed_ms")
        if not isinstance(typed_ms, int) or isinstance(typed_ms, bool) or not 0 < typed_ms <= now:
            typed_ms = now
        utt = mesh_pb2.Utterance(
            id=f"web-{client_id}", text=text, channel=CHANNEL, source="typed", started_ms=typed_ms
        )
        opened = Opened(rec.device_id, 0, now, mesh_pb2.UTTERANCE, HUB, new_trace_id(), utt)
        if not await self.link.typed(opened, rec.scopes):
            raise WebError("web.utter_refused", 403)
        self.state.pulse()
        return JSONResponse({"utterance_id": utt.id})

    async def timeline(self, request: Request) -> Response:
        self.scoped(request, "timeline.read")
        q = request.query_params
        try:
            after = int(q.get("after", "-1"))
            before = int(q.get("before", "0"))
        except ValueError:
            raise WebError("web.bad_request") from None
        store = self.link.store
        rows = (
            store.entries(after=after, limit=PAGE_LIMIT)
            if after >= 0
            else store.entries_before(before, PAGE_LIMIT)
        )
        names = {r.device_id: r.name for r in self.link.devices()}
        return JSONResponse(
            {
                "entries": [
                    {
                        "seq": e.seq,
                        "id": e.id,
                        "device": names.get(e.device, e.device),
                        "kind": e.kind,
                        "text": e.text,
                        "ts_ms": e.ts_ms,
                    }
                    for e in rows
                ]
            }
        )

    async def rendered(self, request: Request) -> Response:
        """The page showed these replies (ACKed ``rendered``: their facts count as said)."""
        self._check_origin(request)
        _, rec = self.scoped(request, "ack")
        data = await body_json(request)
        ids = data.get("reply_ids")
        if not isinstance(ids, list) or len(ids) > PAGE_LIMIT:
            raise WebError("web.bad_request", reason="reply_ids")
        acked = [
            i for i in ids if isinstance(i, str) and await self.link.rendered(rec.device_id, i)
        ]
        return JSONResponse({"acked": acked})

    # ------------------------------------------------------------ cards
    async def cards(self, request: Request) -> Response:
        self.scoped(request, "approve")
        now = now_ms()
        pending = self.gateway().consent.pending()
        return JSONResponse({"cards": [card_json(c, now) for c in pending]})

    async def prepare(self, request: Request) -> Response:
        """The ``ApprovalBody`` for this device's answer (for a payment approval: unlocked
        only when the WebAuthn assertion verified with user verification)."""
        self._check_origin(request)
        s, rec = self.scoped(request, "approve")
        card_id = request.path_params["card_id"][:64]
        card = self.gateway().consent.card(card_id)
        if card is None or card.state != "pending":
            raise WebError("web.card_unknown", 404)
        data = await body_json(request)
        decision = data.get("decision")
        if decision not in ("approve", "deny"):
            raise WebError("web.bad_request", reason="decision")
        unlocked, sensor = False, ""
        if card.effect == "spend":
            sensor = LOCK_SENSOR
            unlocked = decision == "approve" and self._user_verified(
                request, s, rec, f"card:{card_id}", data.get("assertion")
            )
            if decision == "approve" and not unlocked:
                self.link.count("rejected.web_user_verification")
        body = consent_pb2.ApprovalBody(
            card_id=card.card_id,
            action_hash=card.action_hash,
            expires_ms=card.expires_ms,
            nonce=card.nonce,
            decision=consent_pb2.APPROVE if decision == "approve" else consent_pb2.DENY,
            device_id=rec.device_id,
            signed_ms=now_ms(),
            unlocked=unlocked,
            lock_sensor=sensor,
        ).SerializeToString()
        self.state.keep(self.state.prepared, (s.token, card_id), Prepared(body, card_id))
        return JSONResponse(
            {"body": body.hex(), "action_hash": card.action_hash.hex(), "verified": unlocked}
        )

    async def answer(self, request: Request) -> Response:
        self._check_origin(request)
        s, rec = self.session(request)
        card_id = request.path_params["card_id"][:64]
        prepared = self.state.prepared.pop((s.token, card_id), None)
        if prepared is None:
            raise WebError("web.not_prepared", 409)
        data = await body_json(request)
        approval = consent_pb2.Approval(body=prepared.body, signature=field_hex(data, "signature"))
        ans = await self.link.answer(approval, rec, new_trace_id())
        self.state.pulse()
        return JSONResponse(
            {
                "outcome": ans.outcome,
                "reason": ans.reason,
                "reason_key": texts.REASON_KEYS.get(ans.reason, ""),
            }
        )

    # ------------------------------------------------------------ "it's me for the next minute"
    async def trust_options(self, request: Request) -> Response:
        """WebAuthn request options for opening the voice trust window."""
        s, rec = self.session(request)
        if self.link.trust is None:
            raise WebError("web.trust_unavailable", 503)
        return self._request_options(request, s, rec, "trust")

    async def trust(self, request: Request) -> Response:
        """Open the voice trust window on this device: only after a WebAuthn assertion of
        its passkey with the user-verified flag (the real replacement of the FAKE biometric)."""
        self._check_origin(request)
        s, rec = self.session(request)
        data = await body_json(request)
        if self.link.trust is None:
            raise WebError("web.trust_unavailable", 503)
        if not self._user_verified(request, s, rec, "trust", data.get("assertion")):
            self.link.count("rejected.web_user_verification")
            raise WebError("web.uv_failed", 403)
        try:
            window = await self.link.trust(rec.device_id)
        except HubError as exc:
            log.info("trust window for %s refused: %s", rec.name, exc)
            raise WebError("web.trust_unavailable", 409) from None
        return JSONResponse({"opened_ms": window.opened_ms, "closes_ms": window.closes_ms})

    # ------------------------------------------------------------ operator panels
    def _operator(self, request: Request) -> OperatorLink:
        self.scoped(request, OPERATOR_SCOPE)
        if self.link.operator is None:
            raise WebError("web.operator_unavailable", 503)
        return self.link.operator

    async def operator(self, request: Request) -> Response:
        """Packages, models, brain providers, payments and the audit log's verification."""
        op = self._operator(request)
        models, brain, audit = await asyncio.gather(
            asyncio.to_thread(op.models), asyncio.to_thread(op.brain), asyncio.to_thread(op.audit)
        )
        return JSONResponse(
            {
                "packages": op.packages(),
                "models": models,
                "brain": brain,
                "payments": op.payments(),
                "audit": audit,
            }
        )

    async def operator_pair_code(self, request: Request) -> Response:
        self._check_origin(request)
        op = self._operator(request)
        code, expires_ms = await asyncio.to_thread(op.pair_code)
        return JSONResponse({"code": code, "expires_ms": expires_ms})

    async def operator_revoke(self, request: Request) -> Response:
        """``yimi device revoke`` from the page (the hub's registry poll ends the device's
        sessions, as for the command)."""
        self._check_origin(request)
        op = self._operator(request)
        name = field_str(await body_json(request), "name", 64)
        try:
            rec = await asyncio.to_thread(op.revoke, name)
        except ProvisioningError as exc:
            raise WebError(exc.key, 404, **exc.fields) from None
        log.warning("device %s (%s) revoked from the dashboard", rec.name, rec.device_id)
        return JSONResponse({"name": rec.name, "revoked_ms": rec.revoked_ms})

    # ------------------------------------------------------------ live updates
    async def events(self, request: Request) -> Response:
        token = request.cookies.get(COOKIE, "")
        self.session(request)

        async def stream() -> AsyncIterator[dict[str, Any]]:
            last: object = None
            while True:
                s = self.state.sessions.get(token)
                rec = self.device(s.device_id) if s is not None else None
                if s is None or rec is None or rec.revoked:
                    yield {"event": "logout", "data": "{}"}
                    return
                version = self._version()
                if version != last:
                    first, last = last is None, version
                    event: dict[str, Any] = {"event": "changed", "data": "{}"}
                    if first:  # a dropped stream is tried again after this (not 3 s)
                        event["retry"] = RECONNECT_MS
                    yield event
                await self.state.changed(EVENT_CHECK_S)

        return EventSourceResponse(stream(), ping=10)

    def _version(self) -> object:
        gw = self.link.gateway()
        cards = tuple(c.card_id for c in gw.consent.pending()) if gw is not None else ()
        newest = self.link.store.entries_before(0, 1)
        return (newest[0].seq if newest else 0, cards)

    # ------------------------------------------------------------ dashboard
    async def dashboard(self, request: Request) -> Response:
        s, _ = self.session(request)
        presence = self.link.store.presence()
        sessions = self.state.sessions
        online = sessions.online()
        devices = []
        for r in self.link.devices():
            p = presence.get(r.device_id)
            state = p.state if p else "never"
            if r.revoked:
                state = "revoked"
            elif r.device_id in online:
                state = "online"
            seen = max(p.last_seen_ms if p else 0, sessions.last_seen_ms.get(r.device_id, 0))
            devices.append(
                {
                    "name": r.name,
                    "device_id": r.device_id,
                    "profile": r.profile,
                    "state": state,
                    "last_seen_ms": seen,
                    "web": r.enrolled_by == "pair-web",
                    "this": r.device_id == s.device_id,
                }
            )
        counters = self.link.store.counters()
        return JSONResponse(
            {"devices": devices, "counters": counters, "now_ms": int(time.time() * 1000)}
        )

    # ------------------------------------------------------------ notes
    def _notes(self) -> NotesLink:
        if self.link.notes is None:
            raise WebError("web.unavailable", 503)
        return self.link.notes

    async def notes(self, request: Request) -> Response:
        self.scoped(request, "timeline.read")
        notes = sorted(self._notes().notes(), key=lambda n: -n.updated_at)
        names = {r.device_id: r.name for r in self.link.devices()}
        return JSONResponse(
            {
                "notes": [
                    {
                        "id": n.id,
                        "text": n.text,
                        "kind": n.kind,
                        "done": n.done,
                        "updated_at": n.updated_at,
                        "by": names.get(n.updated_by, n.updated_by),
                    }
                    for n in notes
                ]
            }
        )

    async def note_add(self, request: Request) -> Response:
        self._check_origin(request)
        _, rec = self.scoped(request, "notes.write")
        data = await body_json(request)
        text = field_str(data, "text", 2000).strip()
        kind = data.get("kind", "note")
        if not text or kind not in NOTE_KINDS:
            raise WebError("web.bad_request", reason="text or kind")
        note_id = await self._notes().add(text, kind, rec.device_id)
        return JSONResponse({"id": note_id})

    async def note_edit(self, request: Request) -> Response:
        self._check_origin(request)
        _, rec = self.scoped(request, "notes.write")
        data = await body_json(request)
        note_id = request.path_params["note_id"][:64]
        try:
            await self._notes().edit(
                note_id, field_str(data, "field", 16), field_str(data, "value", 2000), rec.device_id
            )
        except YimiError as exc:
            raise WebError("web.action_refused", 409, reason=str(exc)) from None
        return JSONResponse({"id": note_id})

    # ------------------------------------------------------------ memory (the owner's)
    def _memory(self, request: Request) -> MemoryLink:
        self.scoped(request, OPERATOR_SCOPE)
        if self.link.memory is None:
            raise WebError("web.unavailable", 503)
        return self.link.memory

    async def _memory_call(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await asyncio.to_thread(fn, *args)
        except YimiError as exc:
            status = 404 if exc.key == "memory.unknown" else 409
            raise WebError("web.action_refused", status, reason=str(exc)) from None

    async def memory_search(self, request: Request) -> Response:
        mem = self._memory(request)
        query = request.query_params.get("q", "").strip()[:500]
        if not query:
            raise WebError("web.bad_request", reason="q")
        return JSONResponse({"found": await self._memory_call(mem.search, query)})

    async def memory_explain(self, request: Request) -> Response:
        mem = self._memory(request)
        return JSONResponse(await self._memory_call(mem.explain, request.path_params["item_id"]))

    async def memory_plan(self, request: Request) -> Response:
        mem = self._memory(request)
        return JSONResponse(await self._memory_call(mem.plan, request.path_params["item_id"]))

    async def memory_forget(self, request: Request) -> Response:
        """Forget, only as the plan the page showed (``web.plan_changed`` otherwise)."""
        self._check_origin(request)
        mem = self._memory(request)
        plan_id = field_str(await body_json(request), "plan_id", 64)
        item_id = request.path_params["item_id"]
        lines = await self._memory_call(mem.forget, item_id, plan_id)
        if lines is None:
            raise WebError("web.plan_changed", 409)
        log.warning("memory %s forgotten from the page", item_id)
        return JSONResponse({"deleted": lines})

    # ------------------------------------------------------------ model and brain switches
    def _switches(self, request: Request) -> tuple[Session, DeviceRecord, SwitchLink]:
        s, rec = self.scoped(request, OPERATOR_SCOPE)
        if self.link.switches is None:
            raise WebError("web.unavailable", 503)
        return s, rec, self.link.switches

    def _to_sign(self, s: Session, signable: Signable) -> Response:
        self.state.keep(self.state.signables, (s.token, "switch"), signable)
        return JSONResponse(
            {
                "context": signable.context.decode(),
                "body": signable.body.hex(),
                "summary": signable.summary,
            }
        )

    async def switch_choices(self, request: Request) -> Response:
        _, _, sw = self._switches(request)
        return JSONResponse({"roles": await asyncio.to_thread(sw.choices)})

    async def switch_model(self, request: Request) -> Response:
        self._check_origin(request)
        s, rec, sw = self._switches(request)
        data = await body_json(request)
        role, name = field_str(data, "role", 32), field_str(data, "name", 128)
        try:
            signable = await asyncio.to_thread(sw.model, rec, role, name)
        except YimiError as exc:
            raise WebError("web.action_refused", 409, reason=str(exc)) from None
        return self._to_sign(s, signable)

    async def switch_brain(self, request: Request) -> Response:
        self._check_origin(request)
        s, rec, sw = self._switches(request)
        data = await body_json(request)
        endpoint: dict[str, Any] | None = None
        if not data.get("rule_based"):
            endpoint = {
                "base_url": field_str(data, "base_url", 512),
                "model": field_str(data, "model", 128),
            }
            if data.get("key_id"):
                endpoint["key_id"] = field_str(data, "key_id", 64)
        try:
            signable = await sw.brain(rec, endpoint)
        except YimiError as exc:
            raise WebError("web.action_refused", 409, reason=str(exc)) from None
        return self._to_sign(s, signable)

    async def switch_confirm(self, request: Request) -> Response:
        """The page's signature over the body it was given: to the authority's own check."""
        self._check_origin(request)
        s, _, _ = self._switches(request)
        signable = self.state.signables.pop((s.token, "switch"), None)
        if signable is None:
            raise WebError("web.not_prepared", 409)
        signature = field_hex(await body_json(request), "signature")
        try:
            outcome = await asyncio.to_thread(signable.finish, signature)
        except YimiError as exc:
            raise WebError("web.action_refused", 409, reason=str(exc)) from None
        return JSONResponse({"outcome": outcome})
