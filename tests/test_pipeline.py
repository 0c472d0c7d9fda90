"""The edge voice pipeline's state machine on synthetic events (no models).

The detectors are fakes named as such: speech is any frame with non-zero samples, the wake
word is a frame whose first sample is ``WAKE_MARK``, the "speaker embedding" is a fixed
unit vector chosen by the frame's second sample. The node is a fake uplink that records
what would go to the hub. Real models run in ``tests/test_voice_e2e.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from google.protobuf.message import Message

from edge_agent import pipeline as pl
from edge_agent.pipeline import (
    DeviceVoice,
    Ears,
    Embedding,
    LocalVoiceprint,
    SpeechEnded,
    SpeechEvent,
    SpeechPaused,
    SpeechStarted,
    VoicePipeline,
    WakeFired,
)
from hardware.pcm import FRAME_MS, FRAME_SAMPLES, Frame, Samples
from models.errors import ModelError
from protos import mesh_pb2, voice_pb2
from sync.envelope import Opened
from sync.errors import SyncError
from tests.waiting import poll

WAKE_MARK = 7777
OWNER, GUEST = 1, 2
T0 = 1_700_000_000_000
DIM = 256


# ---------------------------------------------------------------------- fakes
class FakeSpeech:
    """Fake VAD: non-zero frames are speech; a segment ends after 3 silent frames; with
    ``pauses``, the first silent frame after speech is a pause (the segment's speech so far,
    which is what its end keeps)."""

    def __init__(self, pauses: bool = False) -> None:
        self.frames: list[Frame] = []
        self.silent = 0
        self.pauses = pauses
        self.paused = 0

    def feed(self, frame: Frame) -> Sequence[SpeechEvent]:
        loud = bool(np.any(frame.samples))
        if loud:
            self.silent = 0
            self.paused = 0
            if not self.frames:
                self.frames.append(frame)
                return [SpeechStarted(frame.start_ms)]
            self.frames.append(frame)
            return []
        if not self.frames:
            return []
        self.silent += 1
        if self.silent < 3:
            self.frames.append(frame)
            if self.pauses and self.silent == 1:
                samples = np.concatenate([f.samples for f in self.frames[:-1]])
                self.paused = len(samples)
                return [SpeechPaused(samples, self.frames[0].start_ms)]
            return []
        frames, self.frames = self.frames, []
        speech = frames[: len(frames) - (self.silent - 1)]
        samples = np.concatenate([f.samples for f in speech])
        start = speech[0].start_ms
        end = speech[-1].start_ms + FRAME_MS
        paused, self.paused = self.paused, 0
        return [SpeechEnded(samples, start, end, end - start, paused_samples=paused)]


class FakeWake:
    """Fake wake spotter: fires on a frame whose first sample is WAKE_MARK."""

    def __init__(self) -> None:
        self.fed: list[int] = []
        self.resets = 0

    def feed(self, frame: Frame) -> WakeFired | None:
        self.fed.append(frame.start_ms)
        if int(frame.samples[0]) == WAKE_MARK:
            return WakeFired(0.8, frame.start_ms + FRAME_MS)
        return None

    def reset(self) -> None:
        self.resets += 1


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


class FakeSpeaker:
    """Fake embedder: the voice is the second sample of the segment's loud frames."""

    model = "fake-speaker@1"

    def embed(self, samples: Samples, voiced_mask: object = None) -> Embedding:
        loud = samples[samples != 0]
        if loud.size == 0:
            raise ModelError("speaker.no_speech", ms=0)
        who = OWNER if loud.size == 0 else int(np.bincount(np.abs(loud[loud < 100])).argmax())
        return Embedding(unit(who), voiced_ms=len(samples) * 1000 // 16000, quality=0.9)


class FakeVoiceprint:
    def __init__(self, enrolled: bool = True) -> None:
        self.enrolled = enrolled

    def current(self) -> LocalVoiceprint | None:
        return LocalVoiceprint(unit(OWNER), 0.65, "fake-speaker@1") if self.enrolled else None


@dataclass
class FakeUplink:
    """Fake node: records claims, queued utterances with their audio, withdrawals, ACKs."""

    connected: bool = True
    claims: list[voice_pb2.WakeClaim] = field(default_factory=list)
    previews: list[voice_pb2.AudioPreview] = field(default_factory=list)
    queued: list[tuple[mesh_pb2.Utterance, list[bytes]]] = field(default_factory=list)
    withdrawn: list[str] = field(default_factory=list)
    acks: list[tuple[str, int]] = field(default_factory=list)
    on_claim: object = None

    def is_connected(self) -> bool:
        return self.connected

    async def send(self, kind: int, payload: Message) -> None:
        if not self.connected:
            raise SyncError("hub.unreachable", target="fake", reason="down")
        if kind == mesh_pb2.AUDIO_PREVIEW:
            assert isinstance(payload, voice_pb2.AudioPreview)
            self.previews.append(payload)
            return
        assert kind == mesh_pb2.WAKE_CLAIM and isinstance(payload, voice_pb2.WakeClaim)
        self.claims.append(payload)

    def queue_voice(self, utt: mesh_pb2.Utterance, audio: list[bytes], trace_id: str) -> int:
        self.queued.append((utt, audio))
        return len(self.queued)

    def withdraw(self, item_id: str) -> bool:
        if any(u.id == item_id for u, _ in self.queued):
            self.withdrawn.append(item_id)
            return True
        return False

    async def ack(self, reply: mesh_pb2.Reply, state: int = mesh_pb2.RENDERED) -> None:
        self.acks.append((reply.id, state))


class FakeSink:
    """Fake speaker: ``play`` holds until ``release`` (or returns at once if ``auto``)."""

    def __init__(self, auto: bool = True) -> None:
        self.auto = auto
        self.playing = False
        self.played: list[int] = []
        self.started = asyncio.Event()
        self._release = asyncio.Event()

    def release(self) -> None:
        self._release.set()

    async def play(self, samples: Samples) -> None:
        self.playing = True
        self.started.set()
        try:
            if not self.auto:
                await self._release.wait()
            self.played.append(len(samples))
        finally:
            self.playing = False


def fake_speak(text: str) -> Samples:
    return np.full(1600, 500, dtype=np.int16)


# ---------------------------------------------------------------------- audio script
def speech(frames: int, voice: int = OWNER, wake_at: int | None = None) -> list[Samples]:
    out = []
    for i in range(frames):
        f = np.full(FRAME_SAMPLES, 1000, dtype=np.int16)
        f[1::2] = voice
        if wake_at is not None and i == wake_at:
            f[0] = WAKE_MARK
        out.append(f)
    return out


def silence(frames: int) -> list[Samples]:
    return [np.zeros(FRAME_SAMPLES, dtype=np.int16) for _ in range(frames)]


def frames_of(parts: list[Samples], start_ms: int = T0) -> list[Frame]:
    return [Frame(s, start_ms + i * FRAME_MS) for i, s in enumerate(parts)]


async def feed(frames: list[Frame]) -> AsyncIterator[Frame]:
    for f in frames:
        yield f


def opened(payload: object, kind: int) -> Opened:
    return Opened("hub", 1, T0, kind, "dev", "t", payload)  # type: ignore[arg-type]


def make(
    tmp_path: Path,
    *,
    uplink: FakeUplink | None = None,
    sink: FakeSink | None = None,
    speaks: bool = True,
    shows: bool = False,
    enrolled: bool = True,
    pauses: bool = False,
) -> tuple[VoicePipeline, FakeUplink, FakeWake]:
    uplink = uplink or FakeUplink()
    wake = FakeWake()
    ears = Ears(
        speech=FakeSpeech(pauses),
        wake=wake,
        speaker=FakeSpeaker(),
        voiceprint=FakeVoiceprint(enrolled),
        encode=lambda s: b"fake-flac:" + s.tobytes(),
    )
    device = DeviceVoice(
        "dev-1", "glasses1", "glasses", speaks=speaks, shows=shows, source="test.wav"
    )
    p = VoicePipeline(device, ears, uplink, tmp_path, sink=sink, speak=fake_speak)
    return p, uplink, wake


def ambient(tmp_path: Path) -> list[dict[str, object]]:
    path = tmp_path / "ambient.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def answer_claims(p: VoicePipeline, uplink: FakeUplink, answer: bool = True) -> None:
    """The fake hub's arbiter: every claim gets a decision at once."""
    original = uplink.send

    async def send(kind: int, payload: Message) -> None:
        await original(kind, payload)
        if not isinstance(payload, voice_pb2.WakeClaim):
            return
        decision = voice_pb2.WakeDecision(
            wake_id=payload.wake_id, answer=answer, winner="dev-1" if answer else "dev-2"
        )
        await p.on_wake_decision(opened(decision, mesh_pb2.WAKE_DECISION))

    uplink.send = send  # type: ignore[method-assign]


# ---------------------------------------------------------------------- tests
async def test_wake_and_request_in_one_segment(tmp_path: Path) -> None:
    p, uplink, wake = make(tmp_path)
    answer_claims(p, uplink)
    audio = silence(5) + speech(40, wake_at=8) + silence(10)
    async with p:
        await p.listen(feed(frames_of(audio)))
        await poll(lambda: uplink.queued)
    assert len(uplink.claims) == 1
    claim = uplink.claims[0]
    assert claim.heard_ms == T0 + (5 + 8 + 1) * FRAME_MS
    assert claim.wake_score == pytest.approx(0.8)
    assert -34 < claim.level_dbfs < -32
    utt, chunks = uplink.queued[0]
    assert utt.source == "voice" and utt.channel == "glasses" and utt.text == ""
    assert utt.started_ms == T0 + 5 * FRAME_MS and utt.ended_ms == T0 + 45 * FRAME_MS
    v = utt.voice
    assert v.window == voice_pb2.WAKE and v.wake_id == claim.wake_id and v.call_id
    assert v.verdict == voice_pb2.VERIFIED and v.score == pytest.approx(1.0, abs=1e-5)
    assert v.speaker_model == "fake-speaker@1" and v.audio_format == "flac"
    data = b"".join(chunks)
    assert v.audio_chunks == len(chunks) and v.audio_bytes == len(data)
    assert v.audio_sha256 == hashlib.sha256(data).digest()
    assert np.frombuffer(v.embedding, "<f4").shape == (DIM,)
    assert p.pending == {utt.id: v.call_id}
    # the wake spotter saw only speech frames, never the leading silence
    assert min(wake.fed) >= T0 + 5 * FRAME_MS - pl.PREROLL_MS
    # … and nothing after the wake word fired (the rest of the segment is the request)
    assert max(wake.fed) == T0 + (5 + 8) * FRAME_MS
    assert ambient(tmp_path) == []


async def test_speech_without_wake_is_ambient_never_sent(tmp_path: Path) -> None:
    p, uplink, _ = make(tmp_path)
    async with p:
        await p.listen(feed(frames_of(silence(3) + speech(30) + silence(5) + speech(20))))
    assert uplink.queued == [] and uplink.claims == []
    records = ambient(tmp_path)
    assert [r["reason"] for r in records] == ["outside_window", "outside_window"]
    r = records[0]
    assert r["device"] == "dev-1" and r["channel"] == "glasses" and r["source"] == "test.wav"
    assert r["start_ms"] == T0 + 3 * FRAME_MS and r["end_ms"] == T0 + 33 * FRAME_MS
    assert p.settled_now()


async def test_wake_word_alone_opens_a_window_for_the_next_segment(tmp_path: Path) -> None:
    p, uplink, _ = make(tmp_path)
    answer_claims(p, uplink)
    window_frames = pl.REQUEST_WINDOW_MS // FRAME_MS
    audio = (
        speech(10, wake_at=8)  # "Yimi" … (the segment ends right after the wake word)
        + silence(20)
        + speech(30)  # … the request
        + silence(20)
        + speech(10)  # a later remark: no window any more
        + silence(window_frames)
        + speech(10)
    )
    async with p:
        await p.listen(feed(frames_of(audio)))
        await poll(lambda: uplink.queued)
    assert len(uplink.claims) == 1 and len(uplink.queued) == 1
    utt, _ = uplink.queued[0]
    assert utt.started_ms == T0 + 30 * FRAME_MS
    assert utt.voice.window == voice_pb2.WAKE and utt.voice.wake_id == uplink.claims[0].wake_id
    assert [r["reason"] for r in ambient(tmp_path)] == ["outside_window", "outside_window"]


async def test_wake_window_expires(tmp_path: Path) -> None:
    p, uplink, _ = make(tmp_path)
    late = pl.REQUEST_WINDOW_MS // FRAME_MS + 5
    async with p:
        await p.listen(feed(frames_of(speech(10, wake_at=8) + silence(late) + speech(30))))
    assert len(uplink.claims) == 1 and uplink.queued == []
    assert [r["reason"] for r in ambient(tmp_path)] == ["outside_window"]


async def test_stand_down_drops_the_request(tmp_path: Path) -> None:
    p, uplink, _ = make(tmp_path)
    answer_claims(p, uplink, answer=False)
    async with p:
        await p.listen(feed(frames_of(speech(40, wake_at=5) + silence(5))))
        await poll(lambda: p.settled_now())
    assert len(uplink.claims) == 1 and uplink.queued == []
    assert p.stats.stood_down == 1
    (record,) = ambient(tmp_path)
    assert record["reason"] == "stood_down" and record["winner"] == "dev-2"


async def test_no_decision_sends_after_the_wait_and_a_late_stand_down_withdraws(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pl, "DECISION_WAIT_S", 0.05)
    p, uplink, _ = make(tmp_path)
    async with p:
        await p.listen(feed(frames_of(speech(40, wake_at=5) + silence(5))))
        await poll(lambda: uplink.queued)
        utt, _ = uplink.queued[0]
        assert utt.id in p.pending
        decision = voice_pb2.WakeDecision(
            wake_id=uplink.claims[0].wake_id, answer=False, winner="dev-2"
        )
        await p.on_wake_decision(opened(decision, mesh_pb2.WAKE_DECISION))
        await poll(lambda: uplink.withdrawn)
        assert uplink.withdrawn == [utt.id] and p.pending == {}
        assert p.settled_now()


async def test_offline_wake_queues_without_a_claim(tmp_path: Path) -> None:
    p, uplink, _ = make(tmp_path, uplink=FakeUplink(connected=False))
    async with p:
        await p.listen(feed(frames_of(speech(40, wake_at=5) + silence(5))))
        await poll(lambda: uplink.queued)
    assert uplink.claims == []
    assert uplink.queued[0][0].voice.wake_id  # the wake still names the request


async def test_guest_voice_and_unenrolled_verdicts(tmp_path: Path) -> None:
    p, uplink, _ = make(tmp_path)
    answer_claims(p, uplink)
    async with p:
        await p.listen(feed(frames_of(speech(40, voice=GUEST, wake_at=5) + silence(5))))
        await poll(lambda: uplink.queued)
    v = uplink.queued[0][0].voice
    assert v.verdict == voice_pb2.UNMATCHED and abs(v.score) < 0.45

    q, uplink2, _ = make(tmp_path / "b", enrolled=False)
    (tmp_path / "b").mkdir()
    answer_claims(q, uplink2)
    async with q:
        await q.listen(feed(frames_of(speech(40, wake_at=5) + silence(5))))
        await poll(lambda: uplink2.queued)
    assert uplink2.queued[0][0].voice.verdict == voice_pb2.UNENROLLED


async def test_reply_is_spoken_acked_played_then_a_follow_up_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sink = FakeSink()
    p, uplink, _ = make(tmp_path, sink=sink)
    answer_claims(p, uplink)
    async with p:
        await p.listen(feed(frames_of(speech(40, wake_at=5) + silence(5))))
        await poll(lambda: uplink.queued)
        utt, _ = uplink.queued[0]
        reply = mesh_pb2.Reply(id="r-1", utterance_id=utt.id, text="noted", final=True)
        await p.on_reply(reply, opened(reply, mesh_pb2.REPLY), True)
        await poll(lambda: p.settled_now())
        assert sink.played == [1600] and uplink.acks == [("r-1", mesh_pb2.PLAYED)]
        assert "[glasses1] hub: noted" in capsys.readouterr().out
        # the hub re-sends it (our ACK got lost): ACKed again, not played twice
        await p.on_reply(reply, opened(reply, mesh_pb2.REPLY), False)
        assert sink.played == [1600] and len(uplink.acks) == 2
        # a follow-up without the wake word, within the window
        clock = p._clock_ms
        await p.listen(feed(frames_of(silence(10) + speech(30) + silence(5), start_ms=clock)))
        await poll(lambda: len(uplink.queued) == 2)
        follow, _ = uplink.queued[1]
        assert follow.voice.window == voice_pb2.FOLLOW_UP
        assert follow.voice.call_id == utt.voice.call_id and follow.voice.wake_id == ""
        # the window is used up: the next remark is ambient
        clock = p._clock_ms
        await p.listen(feed(frames_of(speech(20) + silence(5), start_ms=clock)))
    assert len(uplink.queued) == 2
    assert [r["reason"] for r in ambient(tmp_path)] == ["outside_window"]


async def test_follow_up_window_closes_after_eight_seconds(tmp_path: Path) -> None:
    p, uplink, _ = make(tmp_path, sink=FakeSink())
    answer_claims(p, uplink)
    async with p:
        await p.listen(feed(frames_of(speech(40, wake_at=5) + silence(5))))
        await poll(lambda: uplink.queued)
        utt, _ = uplink.queued[0]
        reply = mesh_pb2.Reply(id="r-1", utterance_id=utt.id, text="noted", final=True)
        await p.on_reply(reply, opened(reply, mesh_pb2.REPLY), True)
        await poll(lambda: p.settled_now())
        gap = (pl.FOLLOW_UP_MS + pl.PLAYBACK_TAIL_MS) // FRAME_MS + 5
        await p.listen(feed(frames_of(silence(gap) + speech(30), start_ms=p._clock_ms)))
    assert len(uplink.queued) == 1
    assert [r["reason"] for r in ambient(tmp_path)] == ["outside_window"]


async def test_no_self_wake_while_playing_and_for_the_tail(tmp_path: Path) -> None:
    sink = FakeSink(auto=False)
    p, uplink, wake = make(tmp_path, sink=sink)
    answer_claims(p, uplink)
    async with p:
        reply = mesh_pb2.Reply(id="r-9", utterance_id="u-typed", text="hello there", final=True)
        await p.on_reply(reply, opened(reply, mesh_pb2.REPLY), True)
        await sink.started.wait()
        # the device hears its own reply, wake word included
        heard = speech(30, wake_at=5) + silence(5)
        await p.listen(feed(frames_of(heard)), finite=False)
        assert uplink.claims == [] and wake.fed == []
        sink.release()
        await poll(lambda: uplink.acks)
        # within the 300 ms tail: still not the owner
        tail = frames_of(speech(5, wake_at=1) + silence(5), start_ms=p._clock_ms)
        await p.listen(feed(tail), finite=False)
        assert uplink.claims == []
        # after the tail, the owner's wake word works again
        later = frames_of(silence(10) + speech(40, wake_at=5) + silence(5), start_ms=p._clock_ms)
        await p.listen(feed(later))
        await poll(lambda: uplink.queued)
    assert len(uplink.claims) == 1
    assert [r["reason"] for r in ambient(tmp_path)] == ["own_playback", "own_playback"]
    assert uplink.acks == [("r-9", mesh_pb2.PLAYED)]


async def test_text_only_device_acks_rendered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p, uplink, _ = make(tmp_path, speaks=False, sink=FakeSink())
    async with p:
        reply = mesh_pb2.Reply(id="r-2", utterance_id="u-x", text="on the watch", final=True)
        await p.on_reply(reply, opened(reply, mesh_pb2.REPLY), True)
        await poll(lambda: p.settled_now())
    assert uplink.acks == [("r-2", mesh_pb2.RENDERED)]
    assert "[glasses1] hub: on the watch" in capsys.readouterr().out


@pytest.mark.parametrize("shows", [False, True])
async def test_failed_synthesis_falls_back_to_rendered(tmp_path: Path, shows: bool) -> None:
    """Without a display or with one (then the RENDERED ACK went as it was shown): the
    reply is ACKed RENDERED once."""
    p, uplink, _ = make(tmp_path, sink=FakeSink(), shows=shows)

    def broken(text: str) -> Samples:
        from hardware.errors import AudioError

        raise AudioError("espeak.missing")

    p._speak = broken
    async with p:
        reply = mesh_pb2.Reply(id="r-3", utterance_id="u-x", text="hi", final=True)
        await p.on_reply(reply, opened(reply, mesh_pb2.REPLY), True)
        await poll(lambda: p.settled_now())
    assert uplink.acks == [("r-3", mesh_pb2.RENDERED)]
    assert p.stats.rendered == 1 and p.stats.played == 0


async def test_a_device_with_a_display_acks_rendered_as_it_shows_then_played(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Glasses (a HUD and a speaker): the reply is ACKed RENDERED when it is shown, before
    its speech is synthesised, and PLAYED once spoken; a re-sent one is ACKed PLAYED."""
    sink = FakeSink(auto=False)
    p, uplink, _ = make(tmp_path, sink=sink, shows=True)
    acks_at_synthesis: list[list[tuple[str, int]]] = []

    def speak(text: str) -> Samples:
        acks_at_synthesis.append(list(uplink.acks))
        return fake_speak(text)

    p._speak = speak
    async with p:
        reply = mesh_pb2.Reply(id="r-5", utterance_id="u-x", text="on the hud", final=True)
        await p.on_reply(reply, opened(reply, mesh_pb2.REPLY), True)
        await sink.started.wait()
        assert acks_at_synthesis == [[("r-5", mesh_pb2.RENDERED)]]
        assert "[glasses1] hub: on the hud" in capsys.readouterr().out
        assert uplink.acks == [("r-5", mesh_pb2.RENDERED)]  # still speaking
        sink.release()
        await poll(lambda: p.settled_now())
        assert uplink.acks == [("r-5", mesh_pb2.RENDERED), ("r-5", mesh_pb2.PLAYED)]
        assert p.stats.played == 1 and p.stats.rendered == 0
        await p.on_reply(reply, opened(reply, mesh_pb2.REPLY), False)
    assert uplink.acks[2:] == [("r-5", mesh_pb2.PLAYED)] and sink.played == [1600]


async def test_long_request_is_cut_and_split_into_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pl, "CHUNK_BYTES", 10_000)
    p, uplink, _ = make(tmp_path)
    answer_claims(p, uplink)
    frames = (pl.MAX_REQUEST_MS + 2_000) // FRAME_MS
    async with p:
        await p.listen(feed(frames_of(speech(frames, wake_at=3) + silence(5))))
        await poll(lambda: uplink.queued)
    utt, chunks = uplink.queued[0]
    assert len(b"".join(chunks)) == len(b"fake-flac:") + pl.MAX_REQUEST_MS * 16 * 2
    assert all(len(c) <= 10_000 for c in chunks) and utt.voice.audio_chunks == len(chunks)


def test_split_chunks() -> None:
    assert pl.split_chunks(b"abcdefg", 3) == [b"abc", b"def", b"g"]
    assert pl.split_chunks(b"", 3) == [b""]


async def test_a_request_that_cannot_be_embedded_is_sent_unmatched(tmp_path: Path) -> None:
    p, uplink, _ = make(tmp_path)
    answer_claims(p, uplink)

    def nothing(samples: Samples, voiced_mask: object = None) -> Embedding:
        raise ModelError("speaker.no_speech", ms=len(samples) // 16)

    p.ears.speaker.embed = nothing  # type: ignore[method-assign]
    async with p:
        await p.listen(feed(frames_of(speech(40, wake_at=5) + silence(5))))
        await poll(lambda: uplink.queued)
    v = uplink.queued[0][0].voice
    assert v.verdict == voice_pb2.UNMATCHED and v.embedding == b"" and v.quality == 0.0


# ---------------------------------------------------------------------- previews
def fake_flac(samples: Samples) -> bytes:
    return b"fake-flac:" + samples.tobytes()


def counted_encoder(p: VoicePipeline) -> list[int]:
    """The sample counts of every encoding the pipeline makes from now on."""
    encodes: list[int] = []
    encode = p.ears.encode

    def counting(samples: Samples) -> bytes:
        encodes.append(len(samples))
        return encode(samples)

    p.ears.encode = counting
    return encodes


def counted_embedder(p: VoicePipeline) -> list[int]:
    """The sample counts of every speaker embedding the pipeline makes from now on."""
    embeds: list[int] = []
    speaker = p.ears.speaker
    embed = speaker.embed

    def counting(samples: Samples, voiced_mask: npt.NDArray[np.bool_] | None = None) -> Embedding:
        embeds.append(len(samples))
        return embed(samples, voiced_mask)

    speaker.embed = counting  # type: ignore[method-assign]
    return embeds


async def test_a_request_is_previewed_when_its_speech_stops(tmp_path: Path) -> None:
    p, uplink, _ = make(tmp_path, pauses=True)
    answer_claims(p, uplink)
    encodes = counted_encoder(p)
    embeds = counted_embedder(p)
    parts = silence(5) + speech(40, wake_at=8) + silence(10)
    async with p:
        await p.listen(feed(frames_of(parts)))
        await poll(lambda: uplink.queued)
    (preview,) = uplink.previews
    utt, chunks = uplink.queued[0]
    # keyed by the request's id: the segment's speech so far
    assert preview.utterance_id == utt.id
    assert preview.samples == 40 * FRAME_SAMPLES == utt.voice.preview_samples
    assert preview.data == fake_flac(np.concatenate(parts[5:45]))
    assert b"".join(chunks) == preview.data  # here the whole request: nothing followed
    assert p.stats.previews == 1
    assert encodes == [40 * FRAME_SAMPLES] and p.stats.previews_reused == 1  # encoded once
    # and embedded once, while the hang-over ran: the request carries that embedding
    assert embeds == [40 * FRAME_SAMPLES]
    speech_only = np.concatenate(parts[5:45])
    expected = FakeSpeaker().embed(speech_only).vector.astype("<f4").tobytes()
    assert utt.voice.embedding == expected and utt.voice.verdict == voice_pb2.VERIFIED


async def test_the_speaker_embedding_is_made_while_the_hang_over_runs(tmp_path: Path) -> None:
    """The request's embedding is made from its preview, before its speech has ended, so
    the end of speech waits for neither the FLAC nor the embedding."""
    p, uplink, _ = make(tmp_path, pauses=True)
    answer_claims(p, uplink)
    embeds = counted_embedder(p)
    paused = asyncio.Event()
    frames = frames_of(silence(5) + speech(40, wake_at=8) + silence(10))

    async def held() -> AsyncIterator[Frame]:
        for i, f in enumerate(frames):
            if i == 46:  # the speech paused (frame 45); the hang-over has not run out
                await paused.wait()
            yield f

    async with p:
        listening = asyncio.create_task(p.listen(held()))
        try:
            await poll(lambda: embeds == [40 * FRAME_SAMPLES] and uplink.previews)
            assert uplink.queued == [] and p.pending == {}  # the segment is still open
        finally:
            paused.set()
            await listening
        await poll(lambda: uplink.queued)
    assert embeds == [40 * FRAME_SAMPLES]  # not made again for the request
    assert p.stats.previews_reused == 1 and p.stats.embed_ms


async def test_speech_resuming_after_a_preview_sends_the_latest(tmp_path: Path) -> None:
    p, uplink, _ = make(tmp_path, pauses=True)
    answer_claims(p, uplink)
    encodes = counted_encoder(p)
    embeds = counted_embedder(p)
    parts = silence(5) + speech(30, wake_at=8) + silence(1) + speech(10) + silence(10)
    async with p:
        await p.listen(feed(frames_of(parts)))
        await poll(lambda: uplink.queued)
    first, latest = uplink.previews
    utt, _ = uplink.queued[0]
    assert first.utterance_id == latest.utterance_id == utt.id  # the latest wins on the hub
    assert (first.samples, latest.samples) == (30 * FRAME_SAMPLES, 41 * FRAME_SAMPLES)
    assert utt.voice.preview_samples == latest.samples
    # the request is its latest preview's samples: that encoding is sent, not made again
    assert encodes == [30 * FRAME_SAMPLES, 41 * FRAME_SAMPLES] and p.stats.previews_reused == 1
    # each preview is embedded; the request carries the latest one's embedding
    assert embeds == [30 * FRAME_SAMPLES, 41 * FRAME_SAMPLES]
    whole = np.concatenate(parts[5:46])
    assert utt.voice.embedding == FakeSpeaker().embed(whole).vector.astype("<f4").tobytes()


async def test_no_preview_outside_a_window_or_before_the_wake_is_answered(
    tmp_path: Path,
) -> None:
    p, uplink, _ = make(tmp_path, pauses=True)
    async with p:  # ambient speech: nothing leaves the device
        await p.listen(feed(frames_of(silence(3) + speech(30) + silence(5))))
    assert uplink.previews == [] and uplink.queued == []

    p, uplink, _ = make(tmp_path / "down", pauses=True)
    (tmp_path / "down").mkdir()
    answer_claims(p, uplink, answer=False)  # another device answers this wake
    async with p:
        await p.listen(feed(frames_of(silence(5) + speech(40, wake_at=8) + silence(10))))
        await poll(lambda: p.stats.stood_down)
    assert uplink.previews == [] and uplink.queued == []

    p, uplink, _ = make(tmp_path / "offline", uplink=FakeUplink(connected=False), pauses=True)
    (tmp_path / "offline").mkdir()
    async with p:  # not connected: no claim, no preview; the request is queued without one
        await p.listen(feed(frames_of(silence(5) + speech(40, wake_at=8) + silence(10))))
        await poll(lambda: uplink.queued)
    assert uplink.previews == [] and uplink.queued[0][0].voice.preview_samples == 0
