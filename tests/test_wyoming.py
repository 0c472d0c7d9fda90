"""Wyoming without models: the event decoders (fuzzed), who a Wyoming peer speaks as, the
hub's server with stand-in services, and the satellite link against a satellite served by
the real ``wyoming`` library (``tests/test_wyoming_mesh.py`` runs the real processes)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_agent.errors import EdgeError
from edge_agent.satellite import SatelliteLink, parse_target
from hub.brain.replies import say
from hub.errors import HubError
from hub.voice.wyoming import (
    Services,
    WyomingServer,
    WyomingSettings,
    WyomingTurns,
    peer_scope,
)
from models.asr import Transcript
from protos import mesh_pb2
from sync import wyoming as wy
from tests.waiting import poll

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
event_types = st.sampled_from([*wy.DECODERS, "pong", ""]) | st.text(max_size=12)


# ---------------------------------------------------------------------- decoders
@settings(max_examples=150, deadline=None)
@given(event_types, json_values, st.one_of(st.none(), st.binary(max_size=64), st.integers()))
def test_decode_never_raises(kind: object, data: object, payload: object) -> None:
    result = wy.decode(kind, data, payload)
    assert result is None or type(result) in {
        wy.Describe,
        wy.Ping,
        wy.Transcribe,
        wy.Detect,
        wy.AudioStart,
        wy.AudioChunk,
        wy.AudioStop,
        wy.Synthesize,
        wy.HandleText,
        wy.Played,
        wy.RunPipeline,
        wy.SatelliteInfo,
    }


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | json_values.map(lambda v: repr(v).encode()))
def test_parse_header_never_raises(line: bytes) -> None:
    header = wy.parse_header(line)
    if header is not None:
        assert 0 <= header.data_length <= wy.MAX_DATA_BYTES
        assert 0 <= header.payload_length <= wy.MAX_PAYLOAD_BYTES


framed = st.builds(
    lambda kind, data, length, payload, tail: (
        json.dumps({"type": kind, "data": data, "payload_length": length}, default=str).encode()
        + b"\n"
        + payload
        + tail
    ),
    event_types,
    json_values,
    st.integers(-2, 40) | st.just(wy.MAX_PAYLOAD_BYTES + 1),
    st.binary(max_size=40),
    st.binary(max_size=20),
)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400) | framed)
def test_read_event_never_raises_on_any_bytes(data: bytes) -> None:
    async def read_all() -> int:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        n = 0
        while await wy.read_event(reader) is not None:
            n += 1
        return n

    asyncio.run(read_all())


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(wy.RATES),
    st.sampled_from([1, 2, 3]),
    st.integers(1, 4),
    st.binary(max_size=300),
)
def test_audio_conversion_never_raises(rate: int, width: int, channels: int, audio: bytes) -> None:
    out = wy.to_pcm16k(wy.AudioFormat(rate, width, channels), audio)
    assert out is None or out.dtype == np.int16


def test_audio_is_made_16k_mono() -> None:
    stereo_48k = np.tile(np.array([[1000, 3000]], dtype="<i2"), (4800, 1))  # 100 ms
    out = wy.to_pcm16k(wy.AudioFormat(48_000, 2, 2), stereo_48k.tobytes())
    assert out is not None and abs(len(out) - 1600) <= 2
    assert abs(int(np.median(out)) - 2000) <= 2


def test_events_decode_what_home_assistant_sends() -> None:
    assert wy.decode("transcribe", {"language": "EN"}, None) == wy.Transcribe("en")
    assert wy.decode("transcript", {"text": " hi "}, None) == wy.HandleText("hi", "")
    assert wy.decode("synthesize", {"text": "ok", "voice": {"language": "zh"}}, None) == (
        wy.Synthesize("ok", "zh")
    )
    assert wy.decode("audio-chunk", {"rate": 16000, "width": 2, "channels": 1}, b"ab") == (
        wy.AudioChunk(wy.AudioFormat(16000, 2, 1), b"ab")
    )
    assert wy.decode("audio-chunk", {"rate": 12345, "width": 2, "channels": 1}, b"") is None
    assert wy.decode("info", {"satellite": {"name": "k"}}, None) == wy.SatelliteInfo(True, "k")
    assert wy.decode("info", {"asr": []}, None) == wy.SatelliteInfo(False, "")


# ---------------------------------------------------------------------- who is speaking
def test_a_peer_is_a_guest_unless_mapped_to_an_enrolled_device() -> None:
    clients = {"10.0.0.5": "dev-1", "10.0.0.6": "dev-gone"}
    enrolled = {"dev-1"}.__contains__
    assert peer_scope("10.0.0.9", clients, enrolled).scope == "guest"
    mapped = peer_scope("10.0.0.5", clients, enrolled)
    assert (mapped.scope, mapped.device) == ("owner_uncertain", "wyoming:dev-1")
    revoked = peer_scope("10.0.0.6", clients, enrolled)
    assert (revoked.scope, revoked.reason) == ("guest", "wyoming_mapping_not_enrolled")
    assert peer_scope("not an address", clients, enrolled).scope == "guest"


def test_settings_from_home_yaml() -> None:
    assert WyomingSettings.from_config({}) is None
    s = WyomingSettings.from_config(
        {"wyoming": {"port": 10701, "clients": {"192.168.1.20": "dev-1"}}}
    )
    assert s is not None and s.port == 10701 and s.clients == {"192.168.1.20": "dev-1"}
    bads: list[object] = [{"port": "x"}, {"clients": {"not-ip": "d"}}, {"colour": 1}, []]
    for bad in bads:
        with pytest.raises(HubError):
            WyomingSettings.from_config({"wyoming": bad})


async def test_a_handled_text_is_admitted_with_the_peer_scope_and_answered() -> None:
    admitted: list[tuple[str, str, str]] = []
    turns: WyomingTurns

    async def admit(inbound: Any, text: str, meta: Any) -> None:
        admitted.append((inbound.opened.sender, text, meta.scope))
        reply = mesh_pb2.Reply(id="r1", utterance_id=inbound.utterance.id, text="Sure.")
        await turns.on_reply(inbound.opened.sender, reply)
        last = mesh_pb2.Reply(id="r1", utterance_id=inbound.utterance.id, text="Done.", final=True)
        await turns.on_reply(inbound.opened.sender, last)

    acked: list[str] = []
    turns = WyomingTurns(
        admit=admit,
        clients={"127.0.0.1": "dev-1"},
        enrolled=lambda d: d == "dev-1",
        ack=lambda reply, device: acked.append(device),
    )
    assert await turns.turn("127.0.0.1", "lights on", "en") == "Sure. Done."
    assert await turns.turn("127.0.0.2", "lights on", "en") == "Sure. Done."
    assert [a[2] for a in admitted] == ["owner_uncertain", "guest"]
    assert acked == ["wyoming:dev-1"] * 2 + ["wyoming:127.0.0.2"] * 2


# ---------------------------------------------------------------------- the server
class Spotter:
    def __init__(self) -> None:
        self.fed = 0

    def feed(self, frame: Any) -> Any:
        self.fed += 1
        return type("Hit", (), {"end_ms": frame.start_ms})() if self.fed == 10 else None

    def reset(self) -> None:
        self.fed = 0


def stand_in_services() -> Services:
    async def transcribe(samples: Any) -> Transcript:
        return Transcript(f"{len(samples)} samples", "en", "stand-in", 0, 0.0)

    async def handle(address: str, text: str, language: str) -> str:
        return f"you said {text} from {address}"

    return Services(
        transcribe=transcribe,
        speak=lambda text: np.ones(3000, dtype=np.int16),
        wake=Spotter,
        handle=handle,
    )


async def test_server_answers_the_wyoming_client_and_survives_garbage() -> None:
    from wyoming.asr import Transcribe, Transcript
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.client import AsyncTcpClient
    from wyoming.info import Describe, Info
    from wyoming.wake import Detect

    async with WyomingServer(stand_in_services(), host="127.0.0.1", port=0, advertise=False) as s:
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        writer.write(b'{"type": "audio-chunk", "payload_length": 99999999999}\n')
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed: only this connection
        writer.close()

        async with AsyncTcpClient("127.0.0.1", s.port) as client:
            await client.write_event(Describe().event())
            info = Info.from_event(await _next(client, "info"))
            assert info.asr and info.tts and info.wake and info.handle
            await client.write_event(Transcribe(language="en").event())
            await client.write_event(AudioStart(16000, 2, 1).event())
            await client.write_event(AudioChunk(16000, 2, 1, bytes(3200)).event())
            await client.write_event(AudioChunk(99, 2, 1, bytes(10)).event())  # ignored
            await client.write_event(AudioStop().event())
            assert Transcript.from_event(await _next(client, "transcript")).text == "1600 samples"
            await client.write_event(Detect().event())
            await client.write_event(AudioStart(16000, 2, 1).event())
            await client.write_event(AudioChunk(16000, 2, 1, bytes(512 * 2 * 12)).event())
            await client.write_event(AudioStop().event())
            assert (await _next(client, "detection", "not-detected")).type == "detection"
            await client.write_event(Transcript(text="hello").event())
            handled = await _next(client, "handled")
            assert handled.data["text"] == "you said hello from 127.0.0.1"
            await client.write_event(_event("synthesize", {"text": "hi"}))
            await _next(client, "audio-start")
            total = 0
            while (event := await _next(client, "audio-chunk", "audio-stop")).type != "audio-stop":
                total += len(event.payload or b"")
            assert total == 6000


def _event(kind: str, data: dict[str, Any]) -> Any:
    from wyoming.event import Event

    return Event(kind, data)


async def _next(client: Any, *types: str) -> Any:
    async with asyncio.timeout(5):
        while True:
            event = await client.read_event()
            assert event is not None
            if event.type in types:
                return event


# ---------------------------------------------------------------------- the satellite link
class FakeSatellite:
    """A satellite served by the real wyoming library: streams ``seconds`` of audio on
    run-satellite, says played after each reply (unless ``plays`` is False)."""

    def __init__(
        self, *, satellite: bool = True, seconds: float = 1.0, hang_up_first: bool = False
    ) -> None:
        self.satellite = satellite
        self.seconds = seconds
        self.received = 0
        self.hang_up = hang_up_first
        self.streams = 0

    def handler(self, reader: Any, writer: Any) -> Any:
        from wyoming.audio import AudioChunk
        from wyoming.info import Attribution, Info, Satellite
        from wyoming.server import AsyncEventHandler
        from wyoming.snd import Played

        fake = self

        class Handler(AsyncEventHandler):
            async def handle_event(self, event: Any) -> bool:
                if event.type == "describe":
                    sat = Satellite("kitchen", Attribution("t", "u"), True, None, None)
                    await self.write_event(Info(satellite=sat if fake.satellite else None).event())
                elif event.type == "run-satellite":
                    pcm = bytes(int(fake.seconds * 16000) * 2)
                    for i in range(0, len(pcm), 2048):
                        chunk = AudioChunk(16000, 2, 1, pcm[i : i + 2048])
                        await self.write_event(chunk.event())
                    fake.streams += 1
                    if fake.hang_up:  # the satellite reboots
                        fake.hang_up = False
                        return False
                elif event.type == "audio-chunk":
                    fake.received += len(event.payload or b"")
                elif event.type == "audio-stop":
                    await self.write_event(Played().event())
                return True

        return Handler(reader, writer)


async def test_satellite_link_hears_the_stream_and_waits_for_played() -> None:
    from wyoming.server import AsyncTcpServer

    fake = FakeSatellite()
    server = AsyncTcpServer("127.0.0.1", 0)
    await server.start(fake.handler)
    port = _port_of(server)
    try:
        async with SatelliteLink("127.0.0.1", port) as link:
            assert link.name == "kitchen"
            frames = []
            async for frame in link.frames():
                frames.append(frame)
                if len(frames) == 1000 // 32:
                    break
            assert frames[1].start_ms - frames[0].start_ms == 32
            samples = np.zeros(3 * 16000, dtype=np.int16)  # 3 s of reply
            t0 = time.monotonic()
            await link.play(samples)
            assert time.monotonic() - t0 < 2.5, "played came at once: no waiting the length"
            assert link.played_events == 1 and not link.playing
            await poll(lambda: fake.received == samples.nbytes, 5, "the satellite got the reply")
    finally:
        await server.stop()


async def test_satellite_link_connects_again_when_the_satellite_goes_away() -> None:
    from wyoming.server import AsyncTcpServer

    fake = FakeSatellite(seconds=0.5, hang_up_first=True)
    server = AsyncTcpServer("127.0.0.1", 0)
    await server.start(fake.handler)
    try:
        async with SatelliteLink("127.0.0.1", _port_of(server)) as link:
            count = 0
            async with asyncio.timeout(10):
                async for _ in link.frames():
                    count += 1
                    if count == 2 * (500 // 32):  # both streams heard
                        break
            assert link.connections == 2 and fake.streams == 2
    finally:
        await server.stop()


async def test_satellite_link_refuses_a_peer_that_is_no_satellite() -> None:
    from wyoming.server import AsyncTcpServer

    server = AsyncTcpServer("127.0.0.1", 0)
    await server.start(FakeSatellite(satellite=False).handler)
    port = _port_of(server)
    try:
        with pytest.raises(EdgeError) as err:
            async with SatelliteLink("127.0.0.1", port):
                pass
        assert err.value.key == "wyoming.not_satellite"
    finally:
        await server.stop()


def _port_of(server: Any) -> int:
    listener = server._server  # the asyncio server the library started
    assert listener is not None
    return int(listener.sockets[0].getsockname()[1])


def test_satellite_target() -> None:
    assert parse_target("127.0.0.1:10700") == ("127.0.0.1", 10700)
    assert parse_target("[::1]:10700") == ("::1", 10700)
    for bad in ("host", "host:0", "host:99999", ":1"):
        with pytest.raises(EdgeError):
            parse_target(bad)


async def test_a_failed_turn_is_told_in_the_person_s_language() -> None:
    from wyoming.asr import Transcript
    from wyoming.client import AsyncTcpClient

    services = stand_in_services()

    async def broken(address: str, text: str, language: str) -> str:
        raise RuntimeError("the brain fell over")

    services.handle = broken
    async with WyomingServer(services, host="127.0.0.1", port=0, advertise=False) as s:
        async with AsyncTcpClient("127.0.0.1", s.port) as client:
            await client.write_event(Transcript(text="开灯").event())
            event = await _next(client, "not-handled")
            assert event.data["text"] == say("wyoming.turn_failed", "zh")
            await client.write_event(Transcript(text="lights on", language="en").event())
            event = await _next(client, "not-handled")
            assert event.data["text"] == say("wyoming.turn_failed", "en")


class LoudSpotter:
    """Fires on the first frame that is not silent."""

    def feed(self, frame: Any) -> Any:
        return type("Hit", (), {"end_ms": frame.start_ms})() if frame.samples.any() else None

    def reset(self) -> None:
        pass


async def test_a_wake_word_stream_is_heard_however_long_it_runs() -> None:
    from wyoming.audio import AudioChunk, AudioStart
    from wyoming.client import AsyncTcpClient
    from wyoming.wake import Detect

    services = stand_in_services()
    services.wake = LoudSpotter
    async with WyomingServer(services, host="127.0.0.1", port=0, advertise=False) as s:
        async with AsyncTcpClient("127.0.0.1", s.port) as client:
            await client.write_event(Detect().event())
            await client.write_event(AudioStart(16000, 2, 1).event())
            for _ in range(65):  # longer than a transcription may be
                await client.write_event(AudioChunk(16000, 2, 1, bytes(32000)).event())
            loud = np.full(1024, 3000, dtype="<i2").tobytes()
            await client.write_event(AudioChunk(16000, 2, 1, loud).event())
            assert (await _next(client, "detection")).data["name"] == "yimi"
