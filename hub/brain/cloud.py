"""Cloud eligibility: what a remote model endpoint may receive.

A remote endpoint receives a piece of context only if its sensitivity is ``low`` and every
one of its structured sources ``(kind, id)`` is on the owner's allow-list
(:func:`hub.memory.sensitivity.cloud_eligible`). A piece with no sources, an unknown
sensitivity or an unparsable source is not eligible. The allow-list is empty by default:
nothing reaches a cloud model until the owner lists sources.

Provenance of what the brain sends:

- the owner's words: the turn's ``sensitivity`` and ``text_sources`` (default ``low`` from
  ``("utterance", scope)``) — so ``utterance:owner`` must be allow-listed before any spoken
  request reaches a cloud model;
- the context block: :class:`hub.memory.context.ShortContext` carries the highest
  sensitivity of what it includes and its sources;
- a tool result: the tool's declared level (``tool_levels``, default ``high``: a tool that
  does not say counts as high), raised by any ``sensitivity`` field its effects carry, with
  source ``("tool", "package.tool")`` plus any ``sources`` its effects name;
- voice audio for speech recognition (:data:`VOICE_AUDIO`): ``low`` from
  ``("audio", "voice")`` — its own source, so allow-listing the owner's words as text
  (``utterance:owner``) does not send their voice anywhere; ``audio:voice`` must be listed
  before a remote ``asr`` endpoint hears anything;
- a snapshot for a ``vision`` endpoint to describe (:data:`SNAPSHOT_IMAGE`): ``low`` from
  ``("image", "*")`` — every snapshot the owner asks for; ``image:*`` must be listed before
  a remote ``vision`` endpoint sees one (only the JPEG goes: never face descriptors, names
  or the text read on it).

:func:`route` picks, per role, the first configured endpoint that is local or eligible for
everything; ``None`` means the task waits (nothing is sent anywhere).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from hub.gateway.receipts import Receipt
from hub.memory.sensitivity import (
    Source,
    check_level,
    cloud_eligible,
    format_source,
    highest,
    parse_source,
)


@dataclass(frozen=True)
class Provenance:
    """Sensitivity and structured sources of one piece of model context."""

    sensitivity: str
    sources: tuple[Source, ...]
    label: str = ""


VOICE_AUDIO_SOURCE: Source = ("audio", "voice")
"""the structured source of uplinked voice audio (the L5 archive's ``audio`` objects from
the ``voice`` path): whoever spoke in a request window, as the device recorded it"""
VOICE_AUDIO = Provenance("low", (VOICE_AUDIO_SOURCE,), "voice audio")
"""what a remote ``asr`` endpoint would receive. ``low`` like the owner's words, because the
gate is the owner's explicit allow-list entry :data:`VOICE_AUDIO_SOURCE` (a higher level
could never be allowed: remote recognition would be impossible whatever the owner says)"""
VOICE_AUDIO_ID = format_source(VOICE_AUDIO_SOURCE)
SNAPSHOT_SOURCE: Source = ("image", "*")
"""the structured source of the owner's snapshots (the L5 archive's ``image`` objects)"""
SNAPSHOT_IMAGE = Provenance("low", (SNAPSHOT_SOURCE,), "snapshot image")
"""what a remote ``vision`` endpoint would receive; ``low`` for the same reason as
:data:`VOICE_AUDIO`: the gate is the owner's explicit entry ``image:*``"""
SNAPSHOT_ID = format_source(SNAPSHOT_SOURCE)


def eligible(items: Iterable[Provenance], allowed: Collection[Source]) -> bool:
    """True when every item may reach a cloud model."""
    return all(cloud_eligible(i, allowed) for i in items)


def blockers(items: Iterable[Provenance], allowed: Collection[Source]) -> list[str]:
    """Why each ineligible item is not eligible (for logs and task notes; no content)."""
    out = []
    for i in items:
        if cloud_eligible(i, allowed):
            continue
        if i.sensitivity != "low":
            out.append(f"{i.label or 'item'}: sensitivity {i.sensitivity}")
        elif not i.sources:
            out.append(f"{i.label or 'item'}: no source")
        else:
            bad = [f"{k}:{v}" for k, v in i.sources if (k, v) not in allowed]
            out.append(f"{i.label or 'item'}: sources not allow-listed: {', '.join(bad)}")
    return out


def receipt_provenance(r: Receipt, tool_levels: Mapping[str, str] | None = None) -> Provenance:
    """The provenance of what a tool returned (see the module doc)."""
    name = f"{r.package}.{r.tool}"
    levels: list[str | None] = [(tool_levels or {}).get(name, "high")]
    sources: list[Source] = [("tool", name)]
    for e in r.effects:
        if "sensitivity" in e.fields:
            levels.append(check_level(e.fields.get("sensitivity")))
        raw = e.fields.get("sources")
        if isinstance(raw, str) and raw.strip():
            for item in raw.split(","):
                parsed = parse_source(item.strip())
                if parsed is None:
                    levels.append(None)  # an unparsable source counts as high
                elif parsed not in sources:
                    sources.append(parsed)
    return Provenance(highest(levels), tuple(sources), label=f"tool {name}")
