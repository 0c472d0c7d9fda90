"""Model providers as configuration: OpenAI-compatible endpoints per role, keys encrypted.

Roles: ``brain`` (the main agent), ``subagent`` (background sub-agents), ``asr`` (the
hub's speech recognition, :mod:`hub.voice.hearing`: the first usable endpoint's
``/v1/audio/transcriptions``, else local faster-whisper; :func:`asr_route`) and ``vision``
(:func:`vision_route`: the first ``vision`` endpoint that may see a snapshot describes it,
:mod:`hub.vision.describe`). Each role lists endpoints in order of
preference; any OpenAI-compatible server works (Ollama, llama.cpp server, vLLM,
hosted APIs). An endpoint is *local* when its host is a loopback address, or when the
signed configuration says ``local: true`` (a LAN server the owner vouches for); every other
endpoint is *remote* and receives only cloud-eligible context (:mod:`hub.brain.cloud`).

The configuration (endpoints, the cloud allow-list of structured sources, declared
sensitivity of tool outputs) lives in ``HOME/brain/providers.db``. It changes only through
a *model change*:

1. the hub proposes one (:meth:`ProviderStore.propose`): canonical JSON naming the home,
   the configuration version it replaces, the new configuration, the fingerprints of the
   API keys it uses, a nonce and an expiry;
2. an owner device with the ``approve`` scope signs ``signing_input(MODEL_CHANGE_CONTEXT,
   body)`` with its Ed25519 key; :meth:`ProviderStore.confirm` checks it;
3. the brain applies confirmed changes *between turns* (:meth:`ProviderStore.apply_pending`
   at the start of a turn), and the hub's speech recognition between utterances (before it
   transcribes one); a turn or an utterance in flight keeps the configuration it started
   with. Memory is not touched by a change.

API keys are stored encrypted (XSalsa20-Poly1305 ``SecretBox``) under a key derived from the
hub's X25519 secret key; they are decrypted only to build the HTTP client of an endpoint.
They never enter model context, the configuration, a change body (only a fingerprint) or a
log line; :class:`Endpoint` has no field that could hold one.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import re
import secrets
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import nacl.encoding
import nacl.exceptions
import nacl.hash
import nacl.secret
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from hub.brain.cloud import (
    SNAPSHOT_ID,
    SNAPSHOT_IMAGE,
    VOICE_AUDIO,
    VOICE_AUDIO_ID,
    Provenance,
    eligible,
)
from hub.brain.errors import BrainError
from hub.gateway.receipts import canonical
from hub.memory.sensitivity import LEVELS, Source, format_source, parse_source
from protos.clock import now_ms
from protos.codec import signing_input
from storage.sqlite import change_mark, open_db, transaction

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from provisioning.home import Home

log = logging.getLogger(__name__)

ROLES = ("brain", "subagent", "asr", "vision")
MODEL_CHANGE_CONTEXT = b"yimi.model-change.v1"
CHANGE_TTL_S = 600.0
APPROVE_SCOPE = "approve"
MAX_ENDPOINTS = 4
_KEY_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
NO_KEY = "no-key"
"""the placeholder sent to an endpoint that needs no key (local servers ignore it)"""
DEFAULT_MAX_TOKENS = 1024
"""tokens one model call may generate, unless the endpoint says ``max_tokens``"""
DEFAULT_TIMEOUT_S = 60.0
"""seconds one model call may take (every retry and the whole streamed answer included),
unless the endpoint says ``timeout_s``: a runaway server must not hold a turn for minutes"""
MAX_TIMEOUT_S = 600.0
MAX_MAX_TOKENS = 32768

SCHEMA = """
CREATE TABLE IF NOT EXISTS config (
    version    INTEGER PRIMARY KEY,
    body       TEXT NOT NULL,
    change_id  TEXT NOT NULL,
    applied_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS changes (
    change_id    TEXT PRIMARY KEY,
    body         BLOB NOT NULL,
    expires_ms   INTEGER NOT NULL,
    state        TEXT NOT NULL,
    device_id    TEXT NOT NULL DEFAULT '',
    reason       TEXT NOT NULL DEFAULT '',
    created_ms   INTEGER NOT NULL,
    confirmed_ms INTEGER
);
CREATE TABLE IF NOT EXISTS api_keys (
    key_id      TEXT PRIMARY KEY,
    sealed      BLOB NOT NULL,
    fingerprint TEXT NOT NULL,
    created_ms  INTEGER NOT NULL
);
"""


def _refuse(field_: str, reason: str) -> BrainError:
    return BrainError("provider.invalid", field=field_, reason=reason)


# ---------------------------------------------------------------- configuration
@dataclass(frozen=True)
class Endpoint:
    """One OpenAI-compatible endpoint: where, which model, which stored key (by id)."""

    base_url: str
    model: str
    key_id: str = ""
    local: bool | None = None
    """``None``: local iff the host is a loopback address"""
    max_tokens: int | None = None
    """tokens one call may generate (``None``: :data:`DEFAULT_MAX_TOKENS`)"""
    timeout_s: float | None = None
    """seconds one call may take (``None``: :data:`DEFAULT_TIMEOUT_S`)"""

    @property
    def token_limit(self) -> int:
        return self.max_tokens if self.max_tokens is not None else DEFAULT_MAX_TOKENS

    @property
    def call_timeout_s(self) -> float:
        return self.timeout_s if self.timeout_s is not None else DEFAULT_TIMEOUT_S

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).hostname or ""

    @property
    def is_local(self) -> bool:
        if self.local is not None:
            return self.local
        host = self.host
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    def label(self) -> str:
        return f"{self.model} at {self.base_url} ({'local' if self.is_local else 'remote'})"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"base_url": self.base_url, "model": self.model}
        if self.key_id:
            d["key_id"] = self.key_id
        if self.local is not None:
            d["local"] = self.local
        if self.max_tokens is not None:
            d["max_tokens"] = self.max_tokens
        if self.timeout_s is not None:
            d["timeout_s"] = self.timeout_s
        return d

    @classmethod
    def from_dict(cls, raw: Any, where: str = "endpoint") -> Endpoint:
        if not isinstance(raw, Mapping):
            raise _refuse(where, "not a mapping")
        url = raw.get("base_url")
        if not isinstance(url, str) or len(url) > 500:
            raise _refuse(f"{where}.base_url", "missing or too long")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _refuse(f"{where}.base_url", f"{url!r} is not an http(s) URL")
        if parts.username or parts.password:
            raise _refuse(f"{where}.base_url", "credentials belong in a stored key, not the URL")
        model = raw.get("model")
        if not isinstance(model, str) or not model.strip() or len(model) > 200:
            raise _refuse(f"{where}.model", "missing or too long")
        key_id = raw.get("key_id", "")
        if key_id and (not isinstance(key_id, str) or not _KEY_ID.match(key_id)):
            raise _refuse(f"{where}.key_id", "use 1-64 of a-z, 0-9, '.', '_', '-'")
        local = raw.get("local")
        if local is not None and not isinstance(local, bool):
            raise _refuse(f"{where}.local", "true or false")
        max_tokens = raw.get("max_tokens")
        if max_tokens is not None and (
            isinstance(max_tokens, bool)
            or not isinstance(max_tokens, int)
            or not 1 <= max_tokens <= MAX_MAX_TOKENS
        ):
            raise _refuse(f"{where}.max_tokens", f"a whole number, 1-{MAX_MAX_TOKENS}")
        timeout = raw.get("timeout_s")
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not 0 < timeout <= MAX_TIMEOUT_S
        ):
            raise _refuse(
                f"{where}.timeout_s", f"seconds, more than 0 and at most {MAX_TIMEOUT_S:g}"
            )
        extra = set(raw) - {"base_url", "model", "key_id", "local", "max_tokens", "timeout_s"}
        if extra:
            raise _refuse(where, f"unknown fields {sorted(extra)}")
        return cls(
            url.rstrip("/"),
            model.strip(),
            key_id or "",
            local,
            max_tokens,
            float(timeout) if timeout is not None else None,
        )


@dataclass(frozen=True)
class ProviderConfig:
    """The applied configuration. Version 0 is the empty default: no endpoint for any role
    (the brain then runs the built-in rule-based model), no cloud source allowed."""

    version: int = 0
    roles: Mapping[str, tuple[Endpoint, ...]] = field(default_factory=dict)
    cloud_sources: frozenset[Source] = frozenset()
    tool_levels: Mapping[str, str] = field(default_factory=dict)
    """declared sensitivity of a tool's output (``"home.get_state": "low"``); default high"""
    prefer_local: bool = True
    """"prefer handling commands locally" (Home Assistant's option): with an LLM configured,
    a sentence the intent engine matches confidently still runs on the rule brain at once;
    ``false`` sends every turn to the LLM"""

    def endpoints(self, role: str) -> tuple[Endpoint, ...]:
        return tuple(self.roles.get(role, ()))

    def key_ids(self) -> set[str]:
        return {e.key_id for eps in self.roles.values() for e in eps if e.key_id}

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "roles": {r: [e.to_dict() for e in eps] for r, eps in sorted(self.roles.items())},
            "cloud_sources": sorted(format_source(s) for s in self.cloud_sources),
            "tool_levels": dict(sorted(self.tool_levels.items())),
        }
        if not self.prefer_local:  # the default is left out: older bodies stay as they were
            d["prefer_local"] = False
        return d

    @classmethod
    def from_dict(cls, raw: Any, version: int = 0) -> ProviderConfig:
        if not isinstance(raw, Mapping):
            raise _refuse("(top)", "not a mapping")
        extra = set(raw) - {"roles", "cloud_sources", "tool_levels", "prefer_local"}
        if extra:
            raise _refuse("(top)", f"unknown fields {sorted(extra)}")
        roles_raw = raw.get("roles", {}) or {}
        if not isinstance(roles_raw, Mapping):
            raise _refuse("roles", "not a mapping")
        roles: dict[str, tuple[Endpoint, ...]] = {}
        for role, eps in roles_raw.items():
            if role not in ROLES:
                raise _refuse(f"roles.{role}", f"unknown role; roles: {', '.join(ROLES)}")
            if not isinstance(eps, list) or not 1 <= len(eps) <= MAX_ENDPOINTS:
                raise _refuse(f"roles.{role}", f"a list of 1-{MAX_ENDPOINTS} endpoints")
            roles[role] = tuple(
                Endpoint.from_dict(e, f"roles.{role}[{i}]") for i, e in enumerate(eps)
            )
        sources: set[Source] = set()
        for s in raw.get("cloud_sources", []) or []:
            parsed = parse_source(s)
            if parsed is None:
                raise _refuse("cloud_sources", f"{s!r} is not a kind:id source")
            sources.add(parsed)
        levels = raw.get("tool_levels", {}) or {}
        if not isinstance(levels, Mapping) or any(
            not isinstance(k, str) or v not in LEVELS for k, v in levels.items()
        ):
            raise _refuse("tool_levels", f"package.tool → one of {', '.join(LEVELS)}")
        prefer_local = raw.get("prefer_local", True)
        if not isinstance(prefer_local, bool):
            raise _refuse("prefer_local", "true or false")
        return cls(version, roles, frozenset(sources), dict(levels), prefer_local)


def route(
    config: ProviderConfig, role: str, items: Collection[Provenance]
) -> tuple[Endpoint | None, bool]:
    """The endpoint a task of ``role`` may use for context ``items``, and whether any
    endpoint is configured at all. ``(None, True)``: configured, but none may receive this
    context — the task waits."""
    eps = config.endpoints(role)
    ok = eligible(items, config.cloud_sources)
    for ep in eps:
        if ep.is_local or ok:
            return ep, True
    return None, bool(eps)


@dataclass(frozen=True)
class AsrRoute:
    """The recogniser the hub uses under a configuration: the first ``asr`` endpoint that
    may hear voice audio (local, or remote with :data:`~hub.brain.cloud.VOICE_AUDIO`
    cloud-eligible), else the local faster-whisper model; and why endpoints were skipped."""

    version: int
    endpoint: Endpoint | None
    skipped: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.endpoint is not None:
            head = f"endpoint {self.endpoint.label()}"
        elif self.skipped:
            head = "local faster-whisper"
        else:
            head = "local faster-whisper (no asr endpoint configured)"
        return "; ".join([head, *self.skipped])


def asr_route(config: ProviderConfig) -> AsrRoute:
    """Which recogniser ``config`` gives the hub (see :class:`AsrRoute`)."""
    allowed = eligible([VOICE_AUDIO], config.cloud_sources)
    skipped: list[str] = []
    for ep in config.endpoints("asr"):
        if ep.is_local or allowed:
            return AsrRoute(config.version, ep, tuple(skipped))
        skipped.append(
            f"skipped {ep.label()}: voice audio may reach a remote endpoint only when "
            f"{VOICE_AUDIO_ID} is in cloud_sources"
        )
    return AsrRoute(config.version, None, tuple(skipped))


def vision_route(config: ProviderConfig) -> tuple[Endpoint | None, tuple[str, ...]]:
    """The ``vision`` endpoint that may describe a snapshot under ``config`` (local, or
    remote with ``image:*`` in ``cloud_sources``; ``None``: the local description only), and
    why endpoints were skipped."""
    allowed = eligible([SNAPSHOT_IMAGE], config.cloud_sources)
    skipped: list[str] = []
    for ep in config.endpoints("vision"):
        if ep.is_local or allowed:
            return ep, tuple(skipped)
        skipped.append(
            f"skipped {ep.label()}: a snapshot may reach a remote endpoint only when "
            f"{SNAPSHOT_ID} is in cloud_sources"
        )
    return None, tuple(skipped)


# ---------------------------------------------------------------- changes
@dataclass(frozen=True)
class ModelChange:
    change_id: str
    body: bytes
    """canonical JSON; the owner device signs ``signing_input(MODEL_CHANGE_CONTEXT, body)``"""
    expires_ms: int
    state: str
    """``pending`` → ``confirmed`` → ``applied``; or ``refused`` / ``expired`` / ``stale``"""
    device_id: str = ""
    reason: str = ""

    @property
    def doc(self) -> dict[str, Any]:
        return dict(json.loads(self.body))

    @property
    def config(self) -> ProviderConfig:
        return ProviderConfig.from_dict(self.doc["config"])

    def summary(self) -> str:
        """What the owner is asked to confirm, one line per role (no secrets)."""
        cfg = self.config
        lines = [f"model change {self.change_id}:"]
        for role in ROLES:
            eps = cfg.endpoints(role)
            if eps:
                lines.append(f"  {role}: " + " → ".join(e.label() for e in eps))
        allowed = ", ".join(sorted(format_source(s) for s in cfg.cloud_sources)) or "nothing"
        lines.append(f"  may reach a cloud model: {allowed}")
        return "\n".join(lines)


def sign_change(body: bytes, signing_key: Any) -> bytes:
    """An owner device's signature of a change body (what the phone does)."""
    return bytes(signing_key.sign(signing_input(MODEL_CHANGE_CONTEXT, body)).signature)


def _box_key(hub_box_secret: bytes) -> bytes:
    return nacl.hash.blake2b(
        b"provider api keys",
        digest_size=nacl.secret.SecretBox.KEY_SIZE,
        key=hub_box_secret,
        person=b"yimi.apikeys.v1",
        encoder=nacl.encoding.RawEncoder,
    )


def key_fingerprint(secret: str) -> str:
    return hashlib.sha256(b"yimi.apikey.v1\x00" + secret.encode()).hexdigest()[:16]


class ProviderStore:
    """Configuration, pending changes and encrypted API keys (``providers.db``)."""

    def __init__(self, path: Path, *, hub_box_secret: bytes, home_id: str) -> None:
        self.db = open_db(path, SCHEMA)
        self._box = nacl.secret.SecretBox(_box_key(hub_box_secret))
        self.home_id = home_id
        self._current: tuple[tuple[int, int], ProviderConfig] | None = None
        """(the store's version, the configuration then): :meth:`current` is asked on
        every turn; it is read again only after a change"""

    @classmethod
    def for_home(cls, home: Home) -> ProviderStore:
        return cls(
            home.path / "brain" / "providers.db",
            hub_box_secret=bytes(home.hub_keys.box),
            home_id=home.home_id,
        )

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ keys
    def set_key(self, key_id: str, secret: str) -> str:
        """Store an API key encrypted; returns its fingerprint. A key the applied
        configuration uses cannot be replaced: store a new id and confirm a change."""
        if not _KEY_ID.match(key_id):
            raise _refuse("key_id", "use 1-64 of a-z, 0-9, '.', '_', '-'")
        if not secret or len(secret) > 4096:
            raise _refuse("key", "empty or longer than 4096 characters")
        if key_id in self.current().key_ids():
            raise BrainError("provider.key_in_use", key_id=key_id)
        fp = key_fingerprint(secret)
        sealed = bytes(self._box.encrypt(secret.encode()))
        with transaction(self.db):
            self.db.execute(
                "INSERT OR REPLACE INTO api_keys VALUES (?,?,?,?)", (key_id, sealed, fp, now_ms())
            )
        log.info("stored API key %s (fingerprint %s)", key_id, fp)
        return fp

    def _key_row(self, key_id: str) -> tuple[bytes, str] | None:
        for sealed, fp in self.db.execute(
            "SELECT sealed, fingerprint FROM api_keys WHERE key_id=?", (key_id,)
        ):
            return bytes(sealed), str(fp)
        return None

    def fingerprints(self, key_ids: Collection[str]) -> dict[str, str]:
        out = {}
        for k in sorted(key_ids):
            row = self._key_row(k)
            if row is None:
                raise BrainError("provider.key_missing", key_id=k)
            out[k] = row[1]
        return out

    def api_key(self, key_id: str) -> str:
        """Decrypt a stored key (only to build an endpoint's HTTP client)."""
        row = self._key_row(key_id)
        if row is None:
            raise BrainError("provider.key_missing", key_id=key_id)
        try:
            return self._box.decrypt(row[0]).decode()
        except (nacl.exceptions.CryptoError, UnicodeDecodeError):
            raise BrainError(
                "provider.key_unreadable", key_id=key_id, reason="does not decrypt with this hub"
            ) from None

    # ------------------------------------------------------------------ config
    def current(self) -> ProviderConfig:
        """The applied configuration (read again only when this connection changed a row or
        another connection committed: ``yimi model``, the hub's recognition applying a
        change)."""
        key = change_mark(self.db)
        cached = self._current
        if cached is not None and cached[0] == key:
            return cached[1]
        config = ProviderConfig()
        for version, body in self.db.execute(
            "SELECT version, body FROM config ORDER BY version DESC LIMIT 1"
        ):
            config = ProviderConfig.from_dict(json.loads(body), int(version))
        self._current = (key, config)
        return config

    def propose(
        self, config: ProviderConfig | Mapping[str, Any], *, ttl_s: float = CHANGE_TTL_S
    ) -> ModelChange:
        """A change to confirm on an owner device; nothing changes until it is confirmed
        and applied between turns."""
        cfg = config if isinstance(config, ProviderConfig) else ProviderConfig.from_dict(config)
        created = now_ms()
        expires = created + int(ttl_s * 1000)
        change_id = secrets.token_hex(8)
        doc: dict[str, Any] = {
            "change_id": change_id,
            "home_id": self.home_id,
            "base_version": self.current().version,
            "config": cfg.to_dict(),
            "key_fingerprints": self.fingerprints(cfg.key_ids()),
            "nonce": secrets.token_hex(16),
            "created_ms": created,
            "expires_ms": expires,
        }
        body = canonical(doc)
        with transaction(self.db):
            self.db.execute(
                "INSERT INTO changes (change_id, body, expires_ms, state, created_ms) "
                "VALUES (?,?,?,?,?)",
                (change_id, body, expires, "pending", created),
            )
        log.info("model change %s proposed (base version %d)", change_id, doc["base_version"])
        return ModelChange(change_id, body, expires, "pending")

    def change(self, change_id: str) -> ModelChange | None:
        for body, exp, state, dev, reason in self.db.execute(
            "SELECT body, expires_ms, state, device_id, reason FROM changes WHERE change_id=?",
            (change_id,),
        ):
            return ModelChange(change_id, bytes(body), int(exp), state, dev, reason)
        return None

    def _set_state(self, change_id: str, state: str, reason: str = "", device: str = "") -> None:
        with transaction(self.db):
            self._update_state(change_id, state, reason, device)

    def _update_state(self, change_id: str, state: str, reason: str = "", device: str = "") -> None:
        self.db.execute(
            "UPDATE changes SET state=?, reason=?, device_id=CASE WHEN ?='' THEN device_id "
            "ELSE ? END, confirmed_ms=CASE WHEN ?='confirmed' THEN ? ELSE confirmed_ms END "
            "WHERE change_id=?",
            (state, reason, device, device, state, now_ms(), change_id),
        )

    def confirm(
        self,
        change_id: str,
        signature: bytes,
        *,
        device_id: str,
        sign_pk: bytes,
        scopes: Collection[str],
        now: int | None = None,
    ) -> ModelChange:
        """Accept an owner device's signature of a pending change (once)."""
        ch = self.change(change_id)
        if ch is None:
            raise BrainError("provider.change_unknown", change=change_id)

        def refuse(reason: str) -> BrainError:
            log.warning("model change %s refused (device %s): %s", change_id, device_id, reason)
            return BrainError("provider.change_refused", change=change_id, reason=reason)

        if ch.state != "pending":
            raise refuse(f"it is {ch.state}")
        if APPROVE_SCOPE not in scopes:
            raise refuse(f"device {device_id} has no {APPROVE_SCOPE} scope")
        if (now if now is not None else now_ms()) > ch.expires_ms:
            self._set_state(change_id, "expired", "not confirmed in time")
            raise refuse("it expired")
        try:
            VerifyKey(sign_pk).verify(signing_input(MODEL_CHANGE_CONTEXT, ch.body), signature)
        except (BadSignatureError, ValueError, TypeError):
            raise refuse("the signature does not verify") from None
        if ch.doc.get("home_id") != self.home_id:
            raise refuse("it belongs to another home")
        self._set_state(change_id, "confirmed", device=device_id)
        log.info("model change %s confirmed by %s", change_id, device_id)
        out = self.change(change_id)
        assert out is not None
        return out

    def apply_pending(self) -> ProviderConfig | None:
        """Apply the latest confirmed change (the brain calls this between turns, the hub's
        speech recognition between utterances; each from its own connection, so one write
        transaction decides and a change is applied once).

        A change confirmed against an older configuration version, or whose keys changed
        since it was signed, is ``stale`` and never applied. Returns the new configuration,
        or ``None`` if nothing changed."""
        confirmed = "SELECT EXISTS(SELECT 1 FROM changes WHERE state='confirmed')"
        if not self.db.execute(confirmed).get:
            return None
        applied: ProviderConfig | None = None
        applied_change = ""
        with transaction(self.db):
            rows = list(
                self.db.execute(
                    "SELECT change_id FROM changes WHERE state='confirmed' ORDER BY confirmed_ms"
                )
            )
            for (change_id,) in rows:
                ch = self.change(change_id)
                assert ch is not None
                doc = ch.doc
                cur = self.current()
                if doc.get("base_version") != cur.version:
                    self._update_state(change_id, "stale", "the configuration changed meanwhile")
                    continue
                cfg = ProviderConfig.from_dict(doc["config"], cur.version + 1)
                try:
                    fps = self.fingerprints(cfg.key_ids())
                except BrainError:
                    fps = {}
                if fps != doc.get("key_fingerprints"):
                    self._update_state(change_id, "stale", "an API key changed since it was signed")
                    continue
                self.db.execute(
                    "INSERT INTO config VALUES (?,?,?,?)",
                    (cfg.version, json.dumps(cfg.to_dict()), change_id, now_ms()),
                )
                self.db.execute(
                    "UPDATE changes SET state='applied' WHERE change_id=?", (change_id,)
                )
                applied, applied_change = cfg, change_id
        if applied is not None:
            log.info(
                "model configuration version %d applied (change %s)",
                applied.version,
                applied_change,
            )
        return applied

    # ------------------------------------------------------------------ models
    def chat_model(self, endpoint: Endpoint) -> Model:
        """A pydantic-ai chat model for ``endpoint`` (the key is decrypted here only)."""
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider
        from pydantic_ai.settings import ModelSettings

        key = self.api_key(endpoint.key_id) if endpoint.key_id else NO_KEY
        provider = OpenAIProvider(base_url=endpoint.base_url, api_key=key)
        # request_timeout is one deadline for the whole call (every retry of the SDK, and a
        # streamed answer through its last chunk), enforced by pydantic-ai: it cancels the
        # HTTP request, so nothing is left running; timeout bounds each attempt's reads
        settings = ModelSettings(
            max_tokens=endpoint.token_limit,
            request_timeout=endpoint.call_timeout_s,
            timeout=endpoint.call_timeout_s,
        )
        return OpenAIChatModel(endpoint.model, provider=provider, settings=settings)
