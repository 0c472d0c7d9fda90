"""Receipts: what a tool call did, in a form the platform trusts only after checking it.

A package's tool returns a receipt as its structured MCP result::

    {"receipt_version": 1, "status": "succeeded",
     "effects": [{"kind": "email.sent", "state": "service_ack", "target": "a@b.org",
                  "fields": {"to": "a@b.org", "subject": "Hi"}}],
     "values": [{"name": "temperature", "value": 21.5, "unit": "°C", "source": "sensor"}],
     "unknowns": [], "next": {"retry": "forbidden", "check_with": "find_sent"},
     "error": {"code": "TIMEOUT", "message": "..."}, "revision": 0}

:func:`from_tool_result` turns whatever came back into a :class:`Receipt` and
:func:`enforce` applies the invariants at the trust boundary. They only ever downgrade:

1. ``succeeded`` with unverified effects → ``partial`` (some verified) or ``unknown``
   (none), recorded as a self-contradiction;
2. a ``failed`` result whose error is ``TIMEOUT`` or ``DISCONNECTED`` → ``unknown``, and the
   tool's ``check_with`` must run before any retry;
3. a value without a unit is a contract violation: it is flagged, moved to ``unknowns`` and
   never rendered as a fact;
4. a package may not write ``rejected`` (only the gateway can) → ``unknown``;
5. anything that is not a valid receipt → ``unknown``.

The package may tighten the retry rule of its manifest, never loosen it.

A plain MCP server (manifest ``receipts: "mcp"``) returns no receipt: :func:`mcp_receipt`
writes one from what the protocol does say, honestly — ``isError`` → ``failed`` with the
server's text; otherwise ``succeeded``, with, for a tool whose effect is not ``observe``,
one effect in state ``service_ack`` (the service said so; nothing was verified). The
server's structured content (or its text) is kept whole for the model as ``output``, up to
:data:`MAX_OUTPUT` characters.
"""

from __future__ import annotations

import hashlib
import json
from copy import deepcopy
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Any

from hub.capabilities.package_sdk import RECEIPT_VERSION

STATUSES = (
    "succeeded",
    "partial",
    "failed",
    "unknown",
    "waiting",
    "running",
    "cancelled",
    "rejected",
    "not_executed",
)
"""the nine receipt statuses"""
EFFECT_STATES = ("verified", "service_ack", "not_verified", "unknown")
CONFIRMED = frozenset({"verified", "service_ack"})
RETRY_ORDER = ("safe", "after_check", "forbidden")
UNCERTAIN_ERRORS = frozenset({"TIMEOUT", "DISCONNECTED"})
MAX_ITEMS = 256
"""effects (and values, unknowns) kept from one receipt: a home of 200 devices lists whole"""
MAX_TEXT = 2000
MAX_OUTPUT = 16_000
"""characters of a tool's text output kept on its receipt"""

# violation codes recorded on receipts (and in the audit log)
SELF_CONTRADICTION = "self_contradiction"
VALUE_WITHOUT_UNIT = "value_without_unit"
WROTE_REJECTED = "package_wrote_rejected"
INVALID_RECEIPT = "invalid_receipt"
UNCERTAIN_FAILURE = "uncertain_failure"
MCP_TOOL_ERROR = "TOOL_ERROR"
"""the error code of a plain MCP server's ``isError`` result"""
OUTPUT_CUT = " …[cut at {n} characters]"


@dataclass(frozen=True)
class Effect:
    kind: str
    state: str
    target: str = ""
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Value:
    name: str
    value: float | int | str
    unit: str | None
    source: str = ""
    flagged: str = ""


@dataclass(frozen=True)
class Next:
    retry: str = "safe"
    check_with: str | None = None
    waiting_for: str | None = None


@dataclass(frozen=True)
class Receipt:
    status: str
    effects: tuple[Effect, ...] = ()
    values: tuple[Value, ...] = ()
    unknowns: tuple[str, ...] = ()
    next: Next = Next()
    error_code: str = ""
    error: str = ""
    revision: int = 0
    violations: tuple[str, ...] = ()
    # trusted fields, set by the gateway
    package: str = ""
    tool: str = ""
    task_id: str = ""
    call_id: str = ""
    effect: str = ""
    target: str = ""
    summary: str = ""
    card_id: str = ""
    output: str = ""
    """the tool's own text output, bounded: untrusted content for the model, never a fact"""
    new_facts: tuple[str, ...] = ()
    said_facts: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The receipt in its wire form (what a package returns) plus the trusted fields
        (what :func:`dataclasses.asdict` gives, built directly: it is on the hot path)."""
        d: dict[str, Any] = {name: getattr(self, name) for name in _RECEIPT_FIELDS}
        d["effects"] = tuple(
            {"kind": e.kind, "state": e.state, "target": e.target, "fields": deepcopy(e.fields)}
            for e in self.effects
        )
        d["values"] = tuple(
            {
                "name": v.name,
                "value": v.value,
                "unit": v.unit,
                "source": v.source,
                "flagged": v.flagged,
            }
            for v in self.values
        )
        n = self.next
        d["next"] = {"retry": n.retry, "check_with": n.check_with, "waiting_for": n.waiting_for}
        d["receipt_version"] = RECEIPT_VERSION
        d["error"] = {"code": d.pop("error_code"), "message": self.error}
        return d

    @cached_property
    def _content(self) -> dict[str, Any]:
        d = self.to_dict()
        for key in ("new_facts", "said_facts"):
            d.pop(key)
        return d

    def content(self) -> dict[str, Any]:
        """What the receipt says (no ledger bookkeeping): the ledger fingerprints this.
        Computed once per receipt; do not modify the returned dict."""
        return self._content

    @cached_property
    def canonical_content(self) -> bytes:
        """:func:`canonical` of :meth:`content` (computed once: stored and fingerprinted)."""
        return canonical(self._content)

    @cached_property
    def _fingerprint(self) -> str:
        return hashlib.sha256(self.canonical_content).hexdigest()

    def fingerprint(self) -> str:
        return self._fingerprint

    def evolve(self, **changes: Any) -> Receipt:
        """:func:`dataclasses.replace` for the hot path: the same new receipt (its cached
        encodings not carried over), without running the 21-field ``__init__``. Raises
        :class:`TypeError` for a name that is not a field."""
        if not _RECEIPT_FIELD_SET.issuperset(changes):
            raise TypeError(f"not Receipt fields: {sorted(set(changes) - _RECEIPT_FIELD_SET)}")
        new = object.__new__(Receipt)
        own = self.__dict__
        state = {name: own[name] for name in _RECEIPT_FIELDS}
        state.update(changes)
        new.__dict__.update(state)
        return new

    @property
    def confirmed_effects(self) -> tuple[Effect, ...]:
        return tuple(e for e in self.effects if e.state in CONFIRMED)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Receipt:
        parsed = parse_receipt(d)
        if parsed is None:
            raise ValueError("not a receipt")
        extra = {
            k: d[k]
            for k in (
                "violations",
                "package",
                "tool",
                "task_id",
                "call_id",
                "effect",
                "target",
                "summary",
                "card_id",
                "output",
                "new_facts",
                "said_facts",
            )
            if k in d
        }
        for k in ("violations", "new_facts", "said_facts"):
            if k in extra:
                extra[k] = tuple(extra[k])
        flags = [v.get("flagged", "") if isinstance(v, dict) else "" for v in d.get("values", [])]
        values = tuple(replace(v, flagged=f) for v, f in zip(parsed.values, flags, strict=False))
        return replace(parsed, values=values, **extra)


_RECEIPT_FIELDS = tuple(f.name for f in fields(Receipt))
_RECEIPT_FIELD_SET = frozenset(_RECEIPT_FIELDS)


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""one encoder for every :func:`canonical` (``json.dumps`` with options builds one per call)"""


def canonical(obj: Any) -> bytes:
    """Canonical JSON bytes (sorted keys, no spaces, UTF-8): hashes and fingerprints use it."""
    return _CANONICAL.encode(obj).encode()


_KEYS: dict[str, bytes] = {}
"""member names as encoded by :func:`canonical_object` (a few dozen distinct names)"""


def canonical_object(members: dict[str, bytes]) -> bytes:
    """:func:`canonical` of an object whose members' values are given already encoded
    (each the canonical bytes of its value): the same bytes, without encoding them again."""
    parts = []
    for k, v in sorted(members.items()):
        key = _KEYS.get(k)
        if key is None:
            key = canonical(k) + b":"
            if len(_KEYS) < 256:  # bounded: names are few, but they come from callers
                _KEYS[k] = key
        parts.append(key + v)
    return b"{" + b",".join(parts) + b"}"


def _text(v: Any, limit: int = MAX_TEXT) -> str | None:
    return v[:limit] if isinstance(v, str) else None


def parse_receipt(raw: Any) -> Receipt | None:
    """A :class:`Receipt` from a package's structured result, or ``None`` if it is not one.

    Never raises. Items beyond :data:`MAX_ITEMS` and text beyond :data:`MAX_TEXT` are cut."""
    try:
        return _parse(raw)
    except (TypeError, ValueError, AttributeError, KeyError):
        return None


def _parse(raw: Any) -> Receipt | None:
    if not isinstance(raw, dict) or raw.get("receipt_version") != RECEIPT_VERSION:
        return None
    status = raw.get("status")
    if status not in STATUSES:
        return None
    effects = []
    for e in raw.get("effects", [])[:MAX_ITEMS]:
        if not isinstance(e, dict) or e.get("state") not in EFFECT_STATES:
            return None
        kind = _text(e.get("kind"), 64)
        fields = e.get("fields", {})
        if not kind or not isinstance(fields, dict):
            return None
        effects.append(Effect(kind, e["state"], _text(e.get("target", ""), 200) or "", fields))
    values = []
    for v in raw.get("values", [])[:MAX_ITEMS]:
        if not isinstance(v, dict) or not _text(v.get("name"), 100):
            return None
        val = v.get("value")
        if isinstance(val, bool) or not isinstance(val, int | float | str):
            return None
        unit = v.get("unit")
        if unit is not None and not isinstance(unit, str):
            return None
        values.append(
            Value(v["name"][:100], val, unit or None, _text(v.get("source", ""), 200) or "")
        )
    unknowns = tuple(
        u[:MAX_TEXT] for u in raw.get("unknowns", [])[:MAX_ITEMS] if isinstance(u, str)
    )
    nx = raw.get("next", {}) or {}
    if not isinstance(nx, dict):
        return None
    retry = nx.get("retry", "safe")
    if retry not in RETRY_ORDER:
        return None
    err = raw.get("error") or {}
    if not isinstance(err, dict):
        return None
    revision = raw.get("revision", 0)
    if not isinstance(revision, int) or isinstance(revision, bool) or revision < 0:
        return None
    return Receipt(
        status=status,
        effects=tuple(effects),
        values=tuple(values),
        unknowns=unknowns,
        next=Next(retry, _text(nx.get("check_with"), 64), _text(nx.get("waiting_for"), 64)),
        error_code=_text(err.get("code", ""), 64) or "",
        error=_text(err.get("message", "")) or "",
        revision=revision,
    )


def stricter(a: str, b: str) -> str:
    return a if RETRY_ORDER.index(a) >= RETRY_ORDER.index(b) else b


def enforce(receipt: Receipt, *, retry: str, check_with: str | None) -> Receipt:
    """Apply the five invariants (downgrade only) and the manifest's retry rule."""
    status, violations = receipt.status, list(receipt.violations)
    unknowns = list(receipt.unknowns)
    nxt = Next(
        stricter(receipt.next.retry, retry),
        receipt.next.check_with or check_with,
        receipt.next.waiting_for,
    )
    if status == "rejected":
        status = "unknown"
        violations.append(WROTE_REJECTED)
        unknowns.append("the package claimed a refusal only the gateway may give")
    if status == "succeeded" and any(e.state not in CONFIRMED for e in receipt.effects):
        status = "partial" if receipt.confirmed_effects else "unknown"
        violations.append(SELF_CONTRADICTION)
        unknowns.append("the package reported success with unverified effects")
    if status == "failed" and receipt.error_code in UNCERTAIN_ERRORS:
        status = "unknown"
        violations.append(UNCERTAIN_FAILURE)
        unknowns.append(f"{receipt.error_code.lower()}: the action may or may not have happened")
    values = []
    for v in receipt.values:
        if v.unit is None and not isinstance(v.value, str):
            violations.append(VALUE_WITHOUT_UNIT)
            unknowns.append(f"{v.name}: value given without a unit")
            values.append(replace(v, flagged="no unit"))
        else:
            values.append(v)
    if status in ("unknown", "partial") and nxt.check_with:
        nxt = Next(stricter(nxt.retry, "after_check"), nxt.check_with, nxt.waiting_for)
    return receipt.evolve(
        status=status,
        values=tuple(values),
        unknowns=tuple(dict.fromkeys(unknowns)),
        next=nxt,
        violations=tuple(dict.fromkeys(violations)),
    )


def invalid(reason: str) -> Receipt:
    """The receipt for anything that was not a valid receipt: ``unknown``."""
    return Receipt(status="unknown", unknowns=(reason[:MAX_TEXT],), violations=(INVALID_RECEIPT,))


def gateway_receipt(status: str, reason: str, **kw: Any) -> Receipt:
    """A receipt written by the gateway itself (``rejected``, ``waiting``, ``not_executed``...)."""
    return Receipt(status=status, error=reason[:MAX_TEXT], **kw)


def bounded_output(text: str, limit: int = MAX_OUTPUT) -> str:
    """``text`` whole when it fits in ``limit`` characters, else cut with a marker saying so."""
    if len(text) <= limit:
        return text
    mark = OUTPUT_CUT.format(n=limit)
    return text[: max(0, limit - len(mark))] + mark


def mcp_output(structured: Any, text: str) -> str:
    """What a plain MCP result says, for the model: its structured content as JSON (whole:
    bounded by :data:`MAX_OUTPUT`, not cut short), else its text. Never raises."""
    if structured is not None:
        try:
            return bounded_output(json.dumps(structured, ensure_ascii=False, default=str))
        except (TypeError, ValueError, RecursionError):
            pass
    return bounded_output(text if isinstance(text, str) else "")


def mcp_receipt(
    structured: Any, text: str, *, is_error: bool, effect: str, tool: str, target: str = ""
) -> Receipt:
    """The receipt of a plain MCP result (see the module doc); never raises, never
    ``verified``. ``effect`` is the call's effect class from the manifest."""
    output = mcp_output(structured, text)
    if is_error:
        message = (text if isinstance(text, str) else "") or output or "the server gave no reason"
        return Receipt(
            status="failed", error_code=MCP_TOOL_ERROR, error=message[:MAX_TEXT], output=output
        )
    if effect == "observe":
        return Receipt(status="succeeded", output=output)
    kind = (tool or "tool")[:64]
    return Receipt(
        status="succeeded",
        effects=(Effect(kind, "service_ack", (target or "")[:200]),),
        output=output,
    )
