"""Admission: every utterance, typed or heard, joins the timeline here, and only here.

**Scope** — the scope of each turn:

- *typed* text (``Utterance`` without ``voice``) signed with the key of an enrolled,
  unrevoked device whose certificate grants ``utter`` is the **owner**'s: every device of a
  home is the owner's, and typing needs the device in hand (unlocked) — the same standard as
  the phone's card approvals. A device without ``utter`` makes no turns (dropped, counted);
- *voice* turns take the scope the voiceprint authority gave (``hub/voice/hearing.py`` →
  ``hub/voice/voiceprints.py`` ``scope_for``: ``owner`` when verified, inside a trust window or by
  a call anchor; ``owner_uncertain``; ``guest``);
- only ``owner`` turns get the context sources (profile, notes, timeline, time zone);
  ``owner_uncertain`` and ``guest`` turns read no private memory, and the gateway and both
  brains offer them only the tools their scope allows (package manifests' ``scopes``).

:meth:`Admission.admit` takes an :class:`Inbound` (the opened envelope and the replay window
its counter left, committed with the entry in one ``hub.db`` transaction), the text and a
:class:`TurnMeta`; the utterance joins the timeline with its ``seq`` (meta: ``scope``,
``admitted``) at once and its turn is queued (answered off the message loop). A voice
utterance whose audio could not be used is admitted too, with its ``error``: the hub's own
words answer it, through the same delivery as every reply.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from hub.timeline import Admitted, HubStore, ReplayState
from protos import mesh_pb2
from protos.clock import now_ms
from sync import documents as docs
from sync.envelope import Opened

log = logging.getLogger(__name__)

SCOPES = ("owner", "owner_uncertain", "guest")
TYPED_SCOPE = "utter"
"""the certificate scope a device needs to make turns"""
VOICE_SOURCE = "voice"
MAX_UTTERANCE_ID = 128
MAX_TEXT = 16_000

PublishFn = Callable[[list[docs.Entry]], Awaitable[None]]
"""sequence timeline entries in the replicated documents and broadcast them"""
HoldFn = Callable[[list[docs.Entry]], None]
"""publish timeline entries with the next broadcast, or on their own shortly
(:meth:`hub.mesh.entry_batch.EntryBatch.hold`)"""


def typed_scope(scopes: Sequence[str]) -> str | None:
    """The scope of typed text from a device with these certificate scopes (``None``: the
    device may not make turns)."""
    return "owner" if TYPED_SCOPE in scopes else None


def utterance_problem(utt: mesh_pb2.Utterance) -> str:
    """Why an ``Utterance`` cannot be admitted at all ("" when it can): the envelope is
    dropped as malformed."""
    if not utt.id or len(utt.id) > MAX_UTTERANCE_ID or len(utt.text) > MAX_TEXT:
        return "utterance id or text"
    return ""


# ------------------------------------------------------------------ records
@dataclass(frozen=True)
class Inbound:
    """An accepted utterance envelope and the replay window its counter left (persisted with
    the utterance, in the same transaction)."""

    opened: Opened
    replay: ReplayState | None

    @property
    def utterance(self) -> mesh_pb2.Utterance:
        utt = self.opened.payload
        assert isinstance(utt, mesh_pb2.Utterance)
        return utt


@dataclass(frozen=True)
class VoiceFacts:
    """What the device said about a heard utterance (``VoiceInfo``)."""

    verdict: str
    score: float | None
    voiced_ms: int
    quality: float | None
    level_dbfs: float | None
    window: str
    wake_id: str
    wake_score: float | None
    call_id: str
    speaker_model: str


@dataclass(frozen=True)
class AudioFacts:
    """The hub's own hearing of an utterance's audio."""

    sha256: str
    bytes: int
    ms: int
    archive: Mapping[str, object]
    """where the audio went in the L5 archive, or why not"""
    asr_ms: float
    transcript: str
    """the recogniser's words, before the wake word was removed"""
    asr_preview: bool = False
    """the words are the recognition of the device's preview of this audio (speculative:
    the audio is the preview's samples and quiet); ``asr_ms`` is then the wait left"""


@dataclass(frozen=True)
class TurnMeta:
    """An utterance's facts as admitted (``meta`` of its timeline entry, stored as JSON with
    the keys :meth:`to_json` writes; :meth:`from_json` reads any stored row)."""

    channel: str = ""
    source: str = "typed"
    counter: int = 0
    scope: str = "guest"
    scope_reason: str = ""
    scope_score: float | None = None
    admitted: bool = False
    voice: VoiceFacts | None = None
    audio: AudioFacts | None = None
    asr_model: str = ""
    language: str = ""
    """the turn's language (``zh``, ``en``): for a voice turn the hub's recogniser's
    (``asr: {language}`` in home.yaml, or detected per utterance); "" when unknown"""
    error: str = ""
    """the key of the error that made the utterance unusable ("" when it is fine)"""
    error_text: str = ""
    """what went wrong, in words (the hub's reply)"""

    @property
    def is_voice(self) -> bool:
        return self.source == VOICE_SOURCE

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "channel": self.channel,
            "source": self.source,
            "counter": self.counter,
        }
        v = self.voice
        if v is not None:
            out |= {
                "verdict": v.verdict,
                "score": v.score,
                "voiced_ms": v.voiced_ms,
                "quality": v.quality,
                "level_dbfs": v.level_dbfs,
                "window": v.window,
                "wake_id": v.wake_id,
                "wake_score": v.wake_score,
                "call_id": v.call_id,
                "speaker_model": v.speaker_model,
            }
        a = self.audio
        if a is not None:
            out |= {
                "audio_sha256": a.sha256,
                "audio_bytes": a.bytes,
                "audio_ms": a.ms,
                "archive": dict(a.archive),
                "asr_ms": a.asr_ms,
                "transcript": a.transcript,
            }
            if a.asr_preview:
                out["asr_preview"] = True
        if self.asr_model:
            out["asr_model"] = self.asr_model
        if self.language:
            out["language"] = self.language
        if self.error:
            out |= {"error": self.error, "error_text": self.error_text}
        out["scope"] = self.scope
        if v is not None:
            out["scope_score"] = self.scope_score
        out["scope_reason"] = self.scope_reason
        if self.admitted:
            out["admitted"] = True
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> TurnMeta:
        def text(key: str) -> str:
            return str(raw.get(key) or "")

        def num(key: str) -> float | None:
            x = raw.get(key)
            return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None

        def whole(key: str) -> int:
            x = raw.get(key)
            return int(x) if isinstance(x, int | float) and not isinstance(x, bool) else 0

        voice = None
        if "verdict" in raw:
            voice = VoiceFacts(
                text("verdict"),
                num("score"),
                whole("voiced_ms"),
                num("quality"),
                num("level_dbfs"),
                text("window"),
                text("wake_id"),
                num("wake_score"),
                text("call_id"),
                text("speaker_model"),
            )
        audio = None
        if "audio_sha256" in raw:
            archive = raw.get("archive")
            audio = AudioFacts(
                text("audio_sha256"),
                whole("audio_bytes"),
                whole("audio_ms"),
                dict(archive) if isinstance(archive, Mapping) else {},
                num("asr_ms") or 0.0,
                text("transcript"),
                raw.get("asr_preview") is True,
            )
        return cls(
            channel=text("channel"),
            source=text("source") or "typed",
            counter=whole("counter"),
            scope=text("scope") or "guest",
            scope_reason=text("scope_reason"),
            scope_score=num("scope_score"),
            admitted=raw.get("admitted") is True,
            voice=voice,
            audio=audio,
            asr_model=text("asr_model"),
            language=text("language"),
            error=text("error"),
            error_text=text("error_text"),
        )


def meta_of(adm: Admitted) -> TurnMeta:
    """The :class:`TurnMeta` of a timeline utterance."""
    return TurnMeta.from_json(adm.meta)


# ------------------------------------------------------------------ admission
class TurnQueue(Protocol):
    """Where admitted turns go to be answered (:class:`hub.turns.answering.Turns`)."""

    async def repeat(self, adm: Admitted, sender: str) -> None: ...

    def enqueue(self, adm: Admitted, raw: bytes | None) -> object: ...


class Admission:
    """The one way onto the timeline for utterances (the message loop calls it: it returns
    without waiting for the brain)."""

    def __init__(
        self,
        store: HubStore,
        *,
        turns: TurnQueue,
        hold: HoldFn,
        commit: Callable[[Opened], ReplayState | None],
        count: Callable[[str], None],
    ) -> None:
        self.store = store
        self.turns = turns
        self._hold = hold
        self._commit = commit
        self._count = count

    def inbound(self, opened: Opened) -> Inbound:
        """Accept ``opened``: its counter is used (the window goes to ``hub.db`` with it)."""
        return Inbound(opened, self._commit(opened))

    async def typed(self, opened: Opened, scopes: Sequence[str]) -> None:
        """A typed ``Utterance`` from a device with these certificate scopes."""
        utt = opened.payload
        assert isinstance(utt, mesh_pb2.Utterance)
        scope = typed_scope(scopes)
        if scope is None:
            self._commit(opened)
            self._count("rejected.no_utter_scope")
            log.warning("utterance from %s refused: its certificate has no 'utter'", opened.sender)
            return
        meta = TurnMeta(
            channel=utt.channel,
            source=utt.source or "typed",
            counter=opened.counter,
            scope=scope,
            scope_reason="typed_on_owner_device",
        )
        await self.admit(self.inbound(opened), utt.text, meta)

    async def typed_on_page(self, opened: Opened, scopes: Sequence[str]) -> bool:
        """A typed ``Utterance`` from the hub's own web page, as the device whose session
        (a challenge signed by its key) sent it: no envelope, so no counter to commit.
        ``False`` when the device may not make turns."""
        utt = opened.payload
        assert isinstance(utt, mesh_pb2.Utterance)
        scope = typed_scope(scopes)
        if scope is None or utterance_problem(utt):
            self._count("rejected.no_utter_scope" if scope is None else "dropped.malformed")
            return False
        meta = TurnMeta(
            channel=utt.channel,
            source="typed",
            scope=scope,
            scope_reason="typed_on_owner_device",
        )
        await self.admit(Inbound(opened, None), utt.text, meta)
        return True

    async def admit(self, inbound: Inbound, text: str, meta: TurnMeta) -> None:
        """Put an utterance on the timeline and queue its turn; a repeated id is answered
        as a repeat (never a second turn)."""
        opened, utt = inbound.opened, inbound.utterance
        scope = meta.scope if meta.scope in SCOPES else "guest"
        meta = replace(meta, scope=scope, admitted=True)
        adm = self.store.admit_utterance(
            utterance_id=utt.id,
            device=opened.sender,
            text=text,
            ts_ms=utt.started_ms or opened.time_ms,
            received_ms=now_ms(),
            trace_id=opened.trace_id,
            meta=meta.to_json(),
            replay_state=inbound.replay,
        )
        if adm.duplicate:
            await self.turns.repeat(adm, opened.sender)
            return
        log.debug("turn %s from %s admitted as %s (seq %d)", utt.id, opened.sender, scope, adm.seq)
        entry = docs.Entry(adm.utterance_id, adm.device, adm.ts_ms, "utterance", text, adm.seq)
        # durable in hub.db already: the entry goes out with its reply's broadcast, and the
        # turn does not wait for it
        self._hold([entry])
        raw = None if utt.HasField("voice") else utt.SerializeToString()
        self.turns.enqueue(adm, raw)
