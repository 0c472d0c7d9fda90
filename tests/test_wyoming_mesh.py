"""Wyoming both ways, with real processes: ``yimi wyoming serve`` as Home Assistant's voice
pipeline, and an unmodified ``wyoming-satellite`` made a Yimi device by ``yimi edge run
--wyoming-satellite``.

Home Assistant's side is played by the real ``wyoming`` client library doing what Home
Assistant's Wyoming integration does: find the service on mDNS (``_wyoming._tcp`` on
loopback), ``describe``, then speech-to-text, wake word, intent handling and text-to-speech.
The satellite is ``wyoming-satellite`` 1.0.0 in its own environment (``.venv-satellite``,
made by scripts/setup: it pins ``wyoming`` 1.4.1 and ``zeroconf`` 0.88), its microphone a
command that plays a raw PCM file of espeak-ng speech at real time, its speaker a command
that writes what it is sent to a file.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from tests.mesh_harness import REPO, Mesh, Proc
from tests.speech import OWNER, concat, say, silence, with_noise
from tests.waiting import poll, poll_sync
from worlds import ports

pytestmark = pytest.mark.slow

SATELLITE_PYTHON = Path(
    os.environ.get("YIMI_WYOMING_SATELLITE_PYTHON", REPO / ".venv-satellite" / "bin" / "python")
)
MIC = REPO / "tests" / "pcm_mic.py"
WYOMING_TYPE = "_wyoming._tcp.local."


def serve_wyoming(mesh: Mesh, port: int) -> Proc:
    """``yimi wyoming serve`` on loopback (the hub with its Wyoming server)."""
    proc = mesh.spawn(
        "wyoming",
        "wyoming",
        "serve",
        "--home",
        str(mesh.home),
        "--bind",
        "127.0.0.1",
        "--mqtt-port",
        str(mesh.mqtt_port),
        "--grpc-port",
        str(mesh.grpc_port),
        "--port",
        str(port),
    )
    poll_sync(
        lambda: (
            ("wyoming yimi up" in proc.text() and " up: mqtt" in proc.text()) or not proc.alive()
        ),
        30,
        "the hub and its Wyoming server to come up",
    )
    assert proc.alive(), proc.text()
    return proc


async def discover(timeout: float = 10.0) -> tuple[str, int]:
    """Find the Wyoming service on mDNS, as Home Assistant's integration does."""
    from zeroconf import ServiceStateChange
    from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

    zc = AsyncZeroconf(interfaces=["127.0.0.1"])
    names: list[str] = []

    def on_change(
        zeroconf: object, service_type: str, name: str, state_change: ServiceStateChange
    ) -> None:
        if state_change is ServiceStateChange.Added:
            names.append(name)

    browser = AsyncServiceBrowser(zc.zeroconf, WYOMING_TYPE, handlers=[on_change])
    try:
        await poll(lambda: names, timeout, "a _wyoming._tcp advert")
        info = AsyncServiceInfo(WYOMING_TYPE, names[0])
        assert await info.async_request(zc.zeroconf, 3000), names
        return info.parsed_addresses()[0], int(info.port or 0)
    finally:
        await browser.async_cancel()
        await zc.async_close()


async def next_of(client: object, *types: str, timeout: float = 30.0) -> object:
    """The next event of one of ``types`` from a wyoming client (others skipped)."""
    async with asyncio.timeout(timeout):
        while True:
            event = await client.read_event()  # type: ignore[attr-defined]
            assert event is not None, f"connection closed waiting for {types}"
            if event.type in types:
                return event


async def stream(client: object, samples: object) -> None:
    from wyoming.audio import AudioChunk, AudioStart, AudioStop

    pcm = samples.tobytes()  # type: ignore[attr-defined]
    await client.write_event(AudioStart(16000, 2, 1).event())  # type: ignore[attr-defined]
    for i in range(0, len(pcm), 2048):
        chunk = AudioChunk(16000, 2, 1, pcm[i : i + 2048])
        await client.write_event(chunk.event())  # type: ignore[attr-defined]
    await client.write_event(AudioStop().event())  # type: ignore[attr-defined]


async def test_home_assistant_gets_a_transcript_and_a_reply(mesh: Mesh) -> None:
    from wyoming.asr import Transcribe, Transcript
    from wyoming.client import AsyncTcpClient
    from wyoming.event import async_read_event, async_write_event
    from wyoming.handle import Handled
    from wyoming.info import Describe, Info
    from wyoming.tts import Synthesize
    from wyoming.wake import Detect

    from provisioning.bundle import Bundle

    kitchen = Bundle.load(mesh.add_device("kitchen")).device_id
    # a second Home Assistant (on 127.0.0.2) the operator mapped to the kitchen device
    mesh.configure(wyoming={"clients": {"127.0.0.2": kitchen}})
    serve_wyoming(mesh, ports.port())
    host, port = await discover()
    speech = with_noise(concat(silence(0.5), say("Yimi, what time is it?", OWNER), silence(1.0)))
    async with AsyncTcpClient(host, port) as client:
        await client.write_event(Describe().event())
        info = Info.from_event(await next_of(client, "info"))  # type: ignore[arg-type]
        assert info.asr and info.tts and info.wake and info.handle, info

        # wake word: the hub's "Yimi" templates
        await client.write_event(Detect().event())
        await stream(client, speech)
        event = await next_of(client, "detection", "not-detected")
        assert event.type == "detection", event  # type: ignore[attr-defined]

        # speech-to-text: Home Assistant's STT entity
        await client.write_event(Transcribe(language="en").event())
        await stream(client, speech)
        heard = Transcript.from_event(await next_of(client, "transcript"))  # type: ignore[arg-type]
        assert "time" in heard.text.lower(), heard

        # intent handling: the brain answers the transcript
        await client.write_event(Transcript(text="What time is it?").event())
        handled = Handled.from_event(await next_of(client, "handled", "not-handled"))  # type: ignore[arg-type]
        assert handled.text, handled

        # text-to-speech of the reply
        await client.write_event(Synthesize(text=handled.text).event())
        await next_of(client, "audio-start")
        got = 0
        while True:
            event = await next_of(client, "audio-chunk", "audio-stop")
            if event.type == "audio-stop":  # type: ignore[attr-defined]
                break
            got += len(event.payload or b"")  # type: ignore[attr-defined]
        assert got > 16_000, got  # at least half a second of speech

    # the mapped instance: that device's turn, owner_uncertain at most (no voiceprint)
    reader, writer = await asyncio.open_connection(host, port, local_addr=("127.0.0.2", 0))
    try:
        await async_write_event(Transcript(text="What time is it?").event(), writer)
        async with asyncio.timeout(30):
            while (event := await async_read_event(reader)) is not None:
                if event.type in ("handled", "not-handled"):
                    break
        assert event is not None and event.type == "handled", event
    finally:
        writer.close()

    rows = mesh.hub_query(
        "SELECT device, text, meta FROM timeline WHERE kind = 'utterance' ORDER BY seq"
    )
    assert [(r[0], r[1]) for r in rows] == [
        ("wyoming:127.0.0.1", "What time is it?"),
        (f"wyoming:{kitchen}", "What time is it?"),
    ], rows
    assert json.loads(str(rows[0][2]))["scope"] == "guest", rows[0]
    assert json.loads(str(rows[1][2]))["scope"] == "owner_uncertain", rows[1]
    replies = mesh.hub_query("SELECT device, text FROM replies ORDER BY reply_seq")
    assert replies[0] == ("wyoming:127.0.0.1", handled.text), replies


# ---------------------------------------------------------------------- satellite
def start_satellite(mesh: Mesh, port: int, mic_raw: Path, cue: Path, snd_raw: Path) -> Proc:
    """The unmodified ``wyoming-satellite``: mic and speaker are commands on files (the mic
    speaks ``mic_raw`` once ``cue`` exists)."""
    log = mesh.root / "satellite.log"
    fh = log.open("wb")
    import subprocess

    popen = subprocess.Popen(
        [
            str(SATELLITE_PYTHON),
            "-m",
            "wyoming_satellite",
            "--name",
            "kitchen",
            "--uri",
            f"tcp://127.0.0.1:{port}",
            "--no-zeroconf",
            "--mic-command",
            shlex.join([sys.executable, str(MIC), str(mic_raw), str(cue)]),
            "--snd-command",
            f"sh -c {shlex.quote('cat >> ' + shlex.quote(str(snd_raw)))}",
            "--debug",
        ],
        stdout=fh,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    fh.close()
    proc = Proc("satellite", popen, log)
    mesh.procs.append(proc)  # stopped with the mesh
    poll_sync(lambda: "Ready" in proc.text() or not proc.alive(), 20, "the satellite to listen")
    assert proc.alive(), proc.text()
    return proc


def test_satellite_request_reaches_the_timeline_and_the_reply_is_played(
    mesh: Mesh, tmp_path: Path
) -> None:
    if not SATELLITE_PYTHON.exists():
        pytest.fail(f"{SATELLITE_PYTHON} missing: scripts/setup makes .venv-satellite")
    mesh.start_hub()
    glasses = mesh.add_device("kitchen")
    speech = with_noise(
        concat(silence(1.0), say("Yimi, remember I don't eat cilantro.", OWNER), silence(1.0)),
        snr_db=30.0,
    )
    mic_raw = tmp_path / "mic.raw"
    mic_raw.write_bytes(speech.tobytes())
    snd_raw = tmp_path / "snd.raw"
    sat_port = ports.port()
    cue = tmp_path / "speak-now"
    start_satellite(mesh, sat_port, mic_raw, cue, snd_raw)
    edge = mesh.spawn(
        "edge-satellite",
        "edge",
        "run",
        "--bundle",
        str(glasses),
        "--hub",
        mesh.hub_target,
        "--wyoming-satellite",
        f"127.0.0.1:{sat_port}",
    )
    poll_sync(
        lambda: (
            ("streaming" in edge.text() and "connected to hub" in edge.text()) or not edge.alive()
        ),
        60,
        "the edge daemon streaming from the satellite",
    )
    cue.touch()  # the person speaks to the satellite now

    def turn() -> list[tuple[object, ...]]:
        assert edge.alive(), edge.text()
        return mesh.hub_query(
            "SELECT device, text, meta FROM timeline WHERE kind = 'utterance' ORDER BY seq"
        )

    rows = poll_sync(turn, 60, "the satellite's request on the hub's timeline")
    device, text, meta = rows[0]
    assert device != "", rows
    assert "cilantro" in str(text).lower(), rows
    assert json.loads(str(meta))["source"] == "voice", meta
    poll_sync(lambda: mesh.hub_query("SELECT text FROM replies"), 30, "the hub's reply")
    poll_sync(
        lambda: snd_raw.exists() and snd_raw.stat().st_size > 16_000,
        30,
        "the reply played through the satellite's speaker",
    )
    poll_sync(lambda: "played through the satellite" in edge.text(), 30, "the edge's played log")
    poll_sync(
        lambda: mesh.hub_query("SELECT state FROM deliveries WHERE state = 'played'"),
        30,
        "the hub to hear the reply was played",
    )
