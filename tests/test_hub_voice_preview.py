"""Speculative recognition on the hub: an ``AUDIO_PREVIEW`` transcribed while the device's
hang-over runs, used for its utterance only when the final audio is the preview's samples
(real Whisper, real FLAC, the real archive); refused, replaced and expired
previews; the envelope layer refusing a preview from an unknown device."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest_asyncio

from hardware.audio import encode_flac
from hardware.pcm import SAMPLE_RATE
from hub.archive.admission import AdmissionPolicy
from hub.archive.archive import Archive
from hub.voice.hearing import ChunkAssembler, Hearing, Scope
from hub.voice.preview import MAX_PREVIEW_BYTES, Previews, check_preview, covers
from hub.voice.wake_arbiter import WakeArbiter
from models.asr import WhisperTranscriber
from protos import mesh_pb2, voice_pb2
from sync.envelope import HUB, Dropped, DropReason
from tests.speech import OWNER, concat, say, silence
from tests.test_envelope import Node, World
from tests.test_hub_voice import Daemon, Rig, Turn, chunk, opened, pieces, voice_utterance, whisper
from tests.waiting import poll

__all__ = ["whisper"]  # the module's Whisper, loaded once

TEXT = "Yimi, turn on the kitchen lights."
PREVIEW_TTL_S = 60.0
"""seconds a preview is held here: long enough that a loaded machine's Whisper never lets
one expire before its final audio (the expiry test shortens it when it wants them gone)"""


@pytest_asyncio.fixture
async def rig(tmp_path: Path, whisper: WhisperTranscriber) -> AsyncIterator[Rig]:
    daemon = Daemon()
    archive = Archive(tmp_path / "archive", policy=AdmissionPolicy(0, 0))

    def scope(device: str, utt: mesh_pb2.Utterance) -> Scope:
        return Scope("owner", utt.voice.score, "test")

    async with WakeArbiter() as arbiter:
        voice = Hearing(
            home=tmp_path,
            **daemon.hooks(),
            arbiter=arbiter,
            scope=scope,
            transcriber=whisper,
            archive=archive,
            assembler=ChunkAssembler(ttl_s=5.0),
            previews=Previews(ttl_s=PREVIEW_TTL_S, max_per_device=2),
        )
        async with voice:
            yield Rig(voice, daemon, archive, arbiter)
    archive.close()


def preview_of(uid: str, samples: np.ndarray, claimed: int | None = None) -> voice_pb2.AudioPreview:
    return voice_pb2.AudioPreview(
        utterance_id=uid,
        samples=len(samples) if claimed is None else claimed,
        data=encode_flac(samples),
    )


async def send_preview(rig: Rig, preview: voice_pb2.AudioPreview, sender: str = "dev-a") -> None:
    await rig.voice.on_preview(opened(preview, mesh_pb2.AUDIO_PREVIEW, sender))


async def heard(rig: Rig, uid: str, sender: str = "dev-a") -> None:
    """Wait until the preview's recognition is done (as while a device's hang-over runs)."""
    held = rig.voice.previews._held[(sender, uid)]
    await poll(held.task.done, what=f"the preview of {uid} heard")


def utterance_id(turn: Turn) -> str:
    utt = turn.opened.payload
    assert isinstance(utt, mesh_pb2.Utterance)
    return utt.id


async def send_final(rig: Rig, uid: str, samples: np.ndarray, vouched: int) -> dict[str, object]:
    audio = encode_flac(samples)
    utt = voice_utterance(uid, audio, 2)
    utt.voice.preview_samples = vouched
    for i, part in enumerate(pieces(audio, 2)):
        await rig.voice.on_chunk(opened(chunk(uid, i, 2, part), mesh_pb2.AUDIO_CHUNK))
    await rig.voice.on_utterance(opened(utt, mesh_pb2.UTTERANCE))
    turn = await poll(
        lambda: next((t for t in rig.daemon.turns if utterance_id(t) == uid), None),
        what=f"the turn of {uid}",
    )
    assert turn.reply is None, turn.reply
    return turn.meta


# ------------------------------------------------------------------ pure
def test_covers_wants_the_same_samples() -> None:
    speech = say(TEXT, OWNER)
    assert covers(speech, speech.copy()) == ""
    assert "is 1 samples" not in covers(speech[:-10], speech)
    assert "the preview" in covers(speech[:-10], speech)
    # even digital silence after it is not the same audio to Whisper ("lights" / "lights.")
    assert "the preview" in covers(concat(speech, silence(0.2)), speech)
    changed = speech.copy()
    changed[100] ^= 1
    assert "not the preview's samples" in covers(changed, speech)


def test_malformed_previews_are_refused_unread() -> None:
    good = voice_pb2.AudioPreview(utterance_id="u-1", samples=16_000, data=b"fLaC...")
    assert check_preview(good) is None
    cases: list[tuple[dict[str, Any], DropReason, str]] = [
        ({"utterance_id": ""}, DropReason.MALFORMED, "utterance id"),
        ({"utterance_id": "u" * 129}, DropReason.MALFORMED, "utterance id"),
        ({"data": b""}, DropReason.MALFORMED, "no audio"),
        ({"data": b"x" * (MAX_PREVIEW_BYTES + 1)}, DropReason.OVERSIZE, "at most"),
        ({"samples": 0}, DropReason.MALFORMED, "0 samples"),
        ({"samples": 31 * SAMPLE_RATE}, DropReason.MALFORMED, "samples"),
    ]
    for change, reason, needle in cases:
        bad = voice_pb2.AudioPreview()
        bad.CopyFrom(good)
        for k, v in change.items():
            setattr(bad, k, v)
        got = check_preview(bad)
        assert got is not None and got[0] is reason and needle in got[1]


# ------------------------------------------------------------------ Hearing in process
async def test_preview_is_used_when_the_final_audio_is_it_then_quiet(rig: Rig) -> None:
    final = concat(silence(0.2), say(TEXT, OWNER), silence(0.2))
    speech = final.copy()  # the segment as the device's VAD paused on it
    await send_preview(rig, preview_of("u-spec", speech))
    await heard(rig, "u-spec")
    meta = await send_final(rig, "u-spec", final, vouched=len(speech))
    plain = await send_final(rig, "u-plain", final, vouched=0)  # non-speculative
    assert meta["asr_preview"] is True and "asr_preview" not in plain
    assert meta["transcript"] == plain["transcript"] and "kitchen" in str(meta["transcript"])
    assert meta["language"] == plain["language"] and meta["asr_model"] == plain["asr_model"]
    turns = {utterance_id(t): t for t in rig.daemon.turns}
    assert turns["u-spec"].text == turns["u-plain"].text
    # nothing was left to wait for (the plain one waited for Whisper)
    assert meta["asr_ms"] == 0.0 and isinstance(plain["asr_ms"], float) and plain["asr_ms"] > 0
    archived = meta["archive"]
    assert isinstance(archived, dict) and archived["stored"] is True  # archived as always
    assert meta["audio_ms"] == len(final) * 1000 // SAMPLE_RATE
    assert rig.daemon.counts["voice.preview_used"] == 1
    assert len(rig.voice.previews) == 0 and not rig.voice.busy()


async def test_final_arriving_while_the_preview_is_heard_waits_for_it(rig: Rig) -> None:
    final = concat(silence(0.2), say(TEXT, OWNER), silence(0.2))
    speech = final.copy()
    await send_preview(rig, preview_of("u-early", speech))
    meta = await send_final(rig, "u-early", final, vouched=len(speech))
    assert meta["asr_preview"] is True and "kitchen" in str(meta["transcript"])
    assert isinstance(meta["asr_ms"], float) and meta["asr_ms"] >= 0.0


async def test_preview_is_not_used_when_voice_follows_it(rig: Rig) -> None:
    first = concat(silence(0.2), say("Yimi, turn on", OWNER))
    final = concat(first, say("the kitchen lights.", OWNER), silence(0.2))
    plain = await send_final(rig, "u-plain", final, vouched=0)
    # the device vouched for it (a voice it did not hear as speech): the hub's check refuses
    await send_preview(rig, preview_of("u-more", first))
    await heard(rig, "u-more")
    meta = await send_final(rig, "u-more", final, vouched=len(first))
    assert "asr_preview" not in meta and meta["transcript"] == plain["transcript"]
    assert rig.daemon.counts["voice.preview_unused"] == 1
    # speech resumed and the device says so (vouches for none): not even checked
    await send_preview(rig, preview_of("u-resumed", first))
    meta = await send_final(rig, "u-resumed", final, vouched=0)
    assert "asr_preview" not in meta and meta["transcript"] == plain["transcript"]
    assert rig.daemon.counts["voice.preview_unvouched"] == 1
    # the preview's samples differ from the audio's
    other = final.copy()
    other[4000] ^= 1
    await send_preview(rig, preview_of("u-other", other))
    meta = await send_final(rig, "u-other", final, vouched=len(other))
    assert "asr_preview" not in meta and meta["transcript"] == plain["transcript"]
    assert rig.daemon.counts["voice.preview_unused"] == 2
    assert rig.daemon.counts["voice.preview_used"] == 0


async def test_forged_and_oversized_previews_are_dropped(rig: Rig) -> None:
    speech = concat(silence(0.2), say(TEXT, OWNER))
    big = voice_pb2.AudioPreview(
        utterance_id="u-big", samples=1, data=b"x" * (MAX_PREVIEW_BYTES + 1)
    )
    await send_preview(rig, big)
    await send_preview(rig, voice_pb2.AudioPreview(utterance_id="", samples=1, data=b"x"))
    assert [r for r, _ in rig.daemon.drops] == [DropReason.OVERSIZE, DropReason.MALFORMED]
    assert "audio preview: " in rig.daemon.drops[0][1]
    assert rig.daemon.counts["voice.preview_dropped"] == 2 and len(rig.voice.previews) == 0
    # it says it covers more than its audio: refused once decoded, the utterance is heard
    await send_preview(rig, preview_of("u-forged", speech, claimed=len(speech) + 512))
    await poll(lambda: rig.daemon.counts["voice.preview_forged"], what="the forgery found")
    meta = await send_final(rig, "u-forged", speech, len(speech) + 512)
    assert "asr_preview" not in meta and "kitchen" in str(meta["transcript"])
    # undecodable audio
    junk = voice_pb2.AudioPreview(utterance_id="u-junk", samples=100, data=b"fLaC" + b"\0" * 99)
    await send_preview(rig, junk)
    await poll(lambda: rig.daemon.counts["voice.preview_failed"], what="the junk refused")
    assert rig.voice.previews._held[("dev-a", "u-junk")].task.result() is None
    # a preview of an utterance already heard is too late
    await send_preview(rig, preview_of("u-forged", speech))
    assert rig.daemon.counts["voice.preview_late"] == 1


async def test_previews_are_capped_replaced_and_expire_without_their_utterance(
    rig: Rig,
) -> None:
    short = concat(silence(0.2), say("Yimi", OWNER))
    await send_preview(rig, preview_of("u-1", short))
    await send_preview(rig, preview_of("u-1", concat(short, silence(0.1))))  # the latest wins
    await send_preview(rig, preview_of("u-2", short))
    await send_preview(rig, preview_of("u-3", short))  # over this device's two
    await send_preview(rig, preview_of("u-3", short), sender="dev-b")  # another device's
    counts = rig.daemon.counts
    assert counts["voice.preview_replaced"] == 1 and counts["voice.preview_refused"] == 1
    assert counts["voice.preview_received"] == 4 and len(rig.voice.previews) == 3
    assert rig.voice.previews._held[("dev-a", "u-1")].samples == len(short) + 1600
    held = list(rig.voice.previews._held.values())
    assert rig.voice.busy()
    rig.voice.previews.ttl_s = 0.5  # their utterance never comes: they expire
    await poll(lambda: counts["voice.preview_expired"] == 3, what="the previews expired")
    assert len(rig.voice.previews) == 0 and not rig.voice.busy()
    # a cancelled recognition ends at its next turn of the loop: wait for it, with a deadline
    await asyncio.wait([h.task for h in held], timeout=10)
    assert all(h.task.done() for h in held)  # their recognition is stopped or finished
    assert rig.daemon.turns == []  # never on the timeline, never answered


def test_a_preview_from_an_unknown_device_is_refused_by_the_envelope_layer() -> None:
    world = World()
    opener = world.opener()
    preview = preview_of("u-1", silence(0.1) + 1)
    for node in (world.dev, Node("d00000000000beef")):  # enrolled, and a stranger
        data = world.sealer(node).seal(
            mesh_pb2.AUDIO_PREVIEW, preview, recipient=HUB, recipient_box_pk=world.hub.peer.box_pk
        )
        got = opener.open(data)
        if node is world.dev:
            assert not isinstance(got, Dropped) and got.payload == preview
        else:
            assert isinstance(got, Dropped) and got.reason is DropReason.UNKNOWN_SENDER
