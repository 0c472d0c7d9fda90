"""The ``Brain`` interface: a turn in, reply chunks out, actions through the gateway.

A turn carries who is speaking (owner, admission scope), what was said, and the context
sources it may read. The brain answers with :class:`ReplyChunk` s (sentence-sized pieces
for the device that heard the sentence) and acts only through the capability gateway.
Background work is reported as :class:`TaskEvent` s to the ``on_event`` callback.
"""

from __future__ import annotations

import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from hub.capabilities.manifest import Manifest, Runtime, ToolSpec
from hub.gateway.receipts import Receipt
from hub.memory.context import ContextSource
from hub.memory.sensitivity import Source
from hub.payments.model import VoiceEvidence

MAX_CHUNK = 240
"""characters of one reply chunk (a chunk is one or more whole sentences when possible)"""


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(8)}"


@dataclass(frozen=True)
class Turn:
    """One admitted sentence.

    ``turn_id`` (default: generated) is the task id of the turn: pass the timeline entry id
    so a redelivered utterance does not start a second task. ``text_sources`` /
    ``sensitivity`` are the provenance of the words themselves (default ``low`` from
    ``("utterance", scope)``; see :mod:`hub.brain.cloud`)."""

    text: str
    owner: str = "owner"
    scope: str = "owner"
    session_id: str = ""
    trace_id: str = ""
    device_id: str = ""
    turn_id: str = ""
    sources: Sequence[ContextSource] = ()
    sensitivity: str = "low"
    text_sources: tuple[Source, ...] = ()
    voice: bool = False
    """the reply will be spoken (facts are rendered in their voice form)"""
    evidence: VoiceEvidence | None = None
    """the hub admission's view of a spoken turn (``hub.payments.model.voice_evidence``
    from the utterance's meta); ``None`` for a typed one. Payments need it: an order opens
    an intent with it, "pay it" is voice pay only with a voiceprint-verified one"""
    utterance_id: str = ""
    """the utterance's own id (default: ``turn_id``)"""
    scheduled: bool = False
    """a scheduled run, not the owner speaking now (never opens a payment)"""
    language: str = ""
    """``en`` / ``zh``: the language of the words (the ASR's for a spoken turn); ``""`` →
    detected from the text (:func:`hub.brain.intents.detect_language`). The reply is in it."""

    @property
    def lang(self) -> str:
        """The turn's language: ``language``, else detected from the text."""
        if self.language in ("en", "zh"):
            return self.language
        from hub.brain.intents import detect_language

        return detect_language(self.text)

    def ids(self) -> Turn:
        """This turn with its ids filled in."""
        from dataclasses import replace

        return replace(
            self,
            turn_id=self.turn_id or new_id("turn"),
            trace_id=self.trace_id or new_id("trace"),
            session_id=self.session_id or new_id("session"),
            text_sources=self.text_sources or (("utterance", self.scope),),
        )


@dataclass(frozen=True)
class ReplyChunk:
    task_id: str
    trace_id: str
    index: int
    text: str
    final: bool
    device_id: str = ""
    brain: str = ""
    """``rule-based`` or ``llm``: what produced the words"""
    intent: str = ""
    """what the turn was understood as (``YimiRecall``…, or ``?`` when no intent matched),
    when an intent engine read it: the hub records it on the reply's timeline entry and,
    unless it is ``?``, on the utterance's (recall leaves recall questions, and the answer
    to a request not understood, out)"""
    more: bool = False
    """the next chunk was made with this one and follows at once (a reply made whole, then
    split): the hub keeps them together — one write, one sync — before sending them"""


@dataclass(frozen=True)
class TaskEvent:
    """A task changed state (activity cards take their status from these)."""

    task_id: str
    trace_id: str
    state: str
    title: str = ""
    text: str = ""
    """the report to give the owner (checked against the task's receipts), when final"""
    parent_id: str = ""
    session_id: str = ""
    device_id: str = ""
    owner: str = "owner"
    receipts: tuple[Receipt, ...] = ()


EventSink = Callable[[TaskEvent], Awaitable[None]]


_SENTENCE_END = re.compile(r"(?<=[。！？])|(?<=[.!?…])(?=\s)|\n")
"""where a sentence ends: after a Chinese end mark, after a Latin one followed by white
space, and at a line break (which goes)"""


def _sentences(text: str) -> list[str]:
    """``text`` cut after a sentence's end: Latin end marks followed by white space, Chinese
    ones always, and at line breaks."""
    return _SENTENCE_END.split(text)


def split_chunks(text: str, limit: int = MAX_CHUNK) -> list[str]:
    """Whole sentences packed into chunks of at most ``limit`` characters (a sentence
    longer than that is cut at a space)."""
    pieces = [p.strip() for p in _sentences(text) if p and p.strip()]
    out: list[str] = []
    cur = ""
    for p in pieces:
        while len(p) > limit:
            cut = p.rfind(" ", 0, limit)
            cut = cut if cut > limit // 2 else limit
            if cur:
                out.append(cur)
                cur = ""
            out.append(p[:cut].strip())
            p = p[cut:].strip()
        sep = "" if cur and cur[-1] in "。！？" else " "
        if cur and len(cur) + len(sep) + len(p) > limit:
            out.append(cur)
            cur = p
        else:
            cur = f"{cur}{sep}{p}" if cur else p
    if cur:
        out.append(cur)
    return out


class Brain(ABC):
    """A brain on the hub. Use as an async context manager; it owns its background tasks."""

    kind: str = ""
    """``rule-based`` or ``llm``"""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:  # noqa: B027 (optional override)
        """Stop background work (tasks stay persisted and resume on the next start)."""

    @abstractmethod
    def turn(self, turn: Turn) -> AsyncGenerator[ReplyChunk, None]:
        """Answer one admitted turn: reply chunks, in order, the last one ``final``. An async
        generator: a caller that stops before its end closes it (``contextlib.aclosing``)."""

    @abstractmethod
    async def resume(self) -> list[str]:
        """After a restart: continue every unfinished task from where it was; the ids."""

    @abstractmethod
    async def on_receipt(self, receipt: Receipt) -> None:
        """A receipt that arrived outside a tool call (the owner answered a card and the
        gateway executed or cancelled the call): the waiting task continues."""


async def collect(chunks: AsyncIterator[ReplyChunk]) -> str:
    """The whole reply of a turn (tests, CLI)."""
    return " ".join([c.text async for c in chunks])


# ---------------------------------------------------------------- the brain's own tools
BRAIN_PACKAGE = "brain"
ALL_SCOPES = ("owner", "owner_uncertain", "guest", "build", "care")


def brain_manifest() -> Manifest:
    """The gateway's declaration of the brain's own tools, so every call of every agent —
    ``delegate`` and ``steer`` too — is decided, counted and audited by the gateway. They
    run in the hub process (no MCP server); the work they start goes through the gateway
    again, call by call."""
    tools = {
        "delegate": ToolSpec("delegate", effect="workspace", scopes=ALL_SCOPES),
        "steer": ToolSpec("steer", effect="workspace", scopes=ALL_SCOPES),
        # a command for the rule brain; each of its own steps is a gateway call again
        "run_intent": ToolSpec("run_intent", effect="workspace", scopes=("owner",)),
    }
    return Manifest(
        root=Path(__file__).resolve().parent,
        name=BRAIN_PACKAGE,
        version="1.0.0",
        description="The brain's own tools: delegate work to a background sub-agent, "
        "steer a running one, run a local command (an intent) on the rule brain.",
        maintainer="core",
        schema_version=1,
        receipt_version=1,
        runtime=Runtime(start="lazy", idle_reclaim_s=900, host="shared", server="", fake=None),
        servers={},
        scopes=ALL_SCOPES,
        tools=tools,
    )


def brain_receipt(status: str, kind: str, target: str, **fields: Any) -> dict[str, Any]:
    """A receipt (package wire form) for one of the brain's own tools."""
    from hub.capabilities.package_sdk import receipt

    return receipt(
        status,
        effects=[{"kind": kind, "state": "verified", "target": target, "fields": fields}],
    )


@dataclass
class Outbox:
    """Reply chunks of one turn, built from text."""

    task_id: str
    trace_id: str
    device_id: str
    brain: str
    chunks: list[ReplyChunk] = field(default_factory=list)
    intent: str = ""

    def make(self, text: str) -> list[ReplyChunk]:
        parts = split_chunks(text) or ["…"]
        return [
            ReplyChunk(
                self.task_id,
                self.trace_id,
                i,
                p,
                i == len(parts) - 1,
                self.device_id,
                self.brain,
                self.intent,
                more=i < len(parts) - 1,
            )
            for i, p in enumerate(parts)
        ]
