"""The edge pipeline with the real models of a glasses bundle's catalog (Silero VAD, the
speech-embedding wake detector with the default "Yimi" templates, GE2E), in process, on
espeak-ng speech: wake + request → one request with its FLAC audio; other speech → ambient.
The node is the fake uplink of ``tests/test_pipeline.py`` (no mesh here)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from edge_agent.ears import load_ears
from edge_agent.pipeline import DeviceVoice, Ears, VoicePipeline
from hardware.audio import WavSource, decode_flac
from protos import voice_pb2
from provisioning.bundle import Bundle, flash
from provisioning.home import Home
from tests.speech import OTHERS, OWNER, concat, say, silence, with_noise, write_wav
from tests.test_pipeline import FakeUplink, answer_claims
from tests.waiting import poll


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    root = tmp_path_factory.mktemp("voice")
    home = Home.init(root / "home")
    flash(home, profile_name="glasses", name="g1", out=root / "bundle")
    return Bundle.load(root / "bundle")


@pytest.fixture(scope="module")
def ears(bundle: Bundle) -> Ears:
    return load_ears(bundle)


async def hear(ears: Ears, wav: Path, state: Path) -> tuple[VoicePipeline, FakeUplink]:
    uplink = FakeUplink()
    device = DeviceVoice("dev-1", "g1", "glasses", speaks=False, source=str(wav))
    p = VoicePipeline(device, ears, uplink, state)
    answer_claims(p, uplink)
    async with p, WavSource(wav, False, 1_000_000) as source:
        await p.listen(source.frames())
        await poll(lambda: p._busy == 0, timeout=30)
    return p, uplink


async def test_wake_and_request_with_real_models(ears: Ears, tmp_path: Path) -> None:
    request = say("Yimi, remember I don't eat cilantro.", OWNER)
    chatter = say("The weather has been quite nice this week, hasn't it.", OTHERS[1])
    audio = with_noise(concat(silence(1.0), request, silence(1.5), chatter, silence(1.0)), 30.0)
    wav = write_wav(tmp_path / "mixed.wav", audio)
    p, uplink = await hear(ears, wav, tmp_path)
    assert len(uplink.claims) == 1 and 0.5 < uplink.claims[0].wake_score <= 1.0
    (utt, chunks) = uplink.queued[0]
    assert len(uplink.queued) == 1
    v = utt.voice
    assert v.window == voice_pb2.WAKE and v.verdict == voice_pb2.UNENROLLED
    assert v.speaker_model == "ge2e-resemblyzer@0.1.4" and 0.5 < v.quality <= 1.0
    assert 1_500 <= v.voiced_ms <= utt.ended_ms - utt.started_ms
    emb = np.frombuffer(v.embedding, "<f4")
    assert emb.shape == (256,) and abs(float(np.linalg.norm(emb)) - 1.0) < 1e-3
    flac = b"".join(chunks)
    assert hashlib.sha256(flac).digest() == v.audio_sha256 and len(flac) == v.audio_bytes
    decoded = decode_flac(flac, 60.0)
    assert abs(len(decoded) / 16 - (utt.ended_ms - utt.started_ms)) <= 32
    # the request segment covers the spoken words (start within the leading silence)
    assert 1_000_000 + 500 <= utt.started_ms <= 1_000_000 + 1_000
    lines = (tmp_path / "ambient.jsonl").read_text().splitlines()
    (record,) = [json.loads(line) for line in lines]
    assert record["reason"] == "outside_window"
    assert record["start_ms"] > utt.ended_ms
    assert p.stats.wakes == 1 and p.stats.embed_ms


async def test_enrolled_owner_is_verified_locally(
    ears: Ears, bundle: Bundle, tmp_path: Path
) -> None:
    from edge_agent.voiceprint import store_voiceprint
    from models import voiceprint as vp

    phrases = (
        "The quick brown fox jumps over the lazy dog near the river bank.",
        "Please set a reminder for my dentist appointment next Tuesday morning.",
        "I would like a cup of coffee with oat milk and no sugar today.",
        "Turn off the lights in the living room when the movie starts tonight.",
        "My favourite season is autumn, when the leaves change their colour.",
    )
    segs = []
    for phrase in phrases:
        e = ears.speaker.embed(say(phrase, OWNER))
        segs.append(vp.Segment(e.vector, e.voiced_ms, e.quality))
    message = voice_pb2.Voiceprint(
        channel="glasses",
        centroid=vp.to_bytes(vp.centroid(segs)),
        line=0.65,
        samples=5,
        version=1,
        speaker_model=ears.speaker.model,
    )
    assert store_voiceprint(bundle.state_dir, message, "glasses") is not None
    wav = write_wav(
        tmp_path / "owner.wav",
        concat(silence(0.5), say("Yimi, what is on my calendar tomorrow?", OWNER), silence(1.0)),
    )
    _, uplink = await hear(ears, wav, tmp_path)
    v = uplink.queued[0][0].voice
    assert v.verdict == voice_pb2.VERIFIED and v.score >= 0.65, v.score


def test_pipeline_loop_stays_responsive(ears: Ears, tmp_path: Path) -> None:
    """Model work runs in the pipeline's thread: the event loop keeps ticking meanwhile."""
    wav = write_wav(
        tmp_path / "long.wav",
        concat(*[say("Yimi, remember the milk and the bread.", OWNER), silence(0.8)] * 4),
    )

    async def main() -> float:
        ticks = 0
        worst = 0.0
        loop = asyncio.get_running_loop()

        async def ticker() -> None:
            nonlocal ticks, worst
            last = loop.time()
            while True:
                await asyncio.sleep(0.01)
                now = loop.time()
                worst, last = max(worst, now - last), now
                ticks += 1

        task = asyncio.create_task(ticker())
        try:
            await hear(ears, wav, tmp_path)
        finally:
            task.cancel()
        return worst

    worst = asyncio.run(main())
    assert worst < 0.25, worst
