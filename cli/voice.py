"""``yimi voice``: the owner's voiceprint.

Commands:

``yimi voice enroll --bundle DIR FILES…``
    embed each WAV with the device's speaker model and send the set to the hub, which
    checks it (≥ 1.5 s voiced each, 5–20 per channel, leave-one-out ≥ 0.6) and keeps the
    centroid; ``--mic`` records the takes instead, ``--replace`` starts the channel over
    (the line stays).
``yimi voice status --home DIR`` / ``--bundle DIR``
    per channel on the hub: samples, learned, line, version, model, trust windows; or the
    voiceprint this device holds.
``yimi voice trust --bundle DIR``
    FAKE biometric (this machine has no sensor): open a 60 s trust window on the device.

The hub must be running for ``enroll`` and ``trust``; the device gets the resulting
``VOICEPRINT`` through its edge daemon (now if it runs, else when it next comes online).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import Any

from cli.common import EXIT_OK, Command, fmt_ms
from protos.clock import now_ms

MIC_PROMPTS = (
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Please remind me to water the plants on the balcony tomorrow morning.",
    "My favourite breakfast is toast with butter and a cup of strong tea.",
    "We walked along the beach until the sun went down behind the hills.",
    "Could you read me the latest news about the weather this weekend?",
    "I usually take the train to work, but today I rode my bicycle.",
)
"""sentences the owner reads for ``--mic`` takes"""

log = logging.getLogger(__name__)


def _voice_bundle(path: Path) -> Any:
    from edge_agent.errors import EdgeError
    from provisioning.bundle import Bundle

    bundle = Bundle.load(path)
    if "voiceprint" not in bundle.profile.roles or not bundle.profile.channel:
        raise EdgeError("voice.no_role", profile=bundle.profile.name, path=path)
    return bundle


async def _hub_address(bundle: Any, hub: str | None) -> tuple[str, int]:
    from sync.locate import HubLocator
    from sync.tls import ClientTls

    h = bundle.hub
    locator = HubLocator(
        pinned=bundle.pinned_fingerprint,
        home_id=bundle.home_id,
        tls=ClientTls.for_bundle(bundle),
        explicit=hub,
        hint=(str(h.get("host") or ""), int(h.get("grpc_port") or 0)),
        cache=bundle.state_dir / "hub.json",
    )
    address = await locator.locate()
    return address.host, address.grpc_port


# ---------------------------------------------------------------- enroll
def _show_progress(fraction: float) -> None:
    """The speaker model is converted once per bundle: show how far it got."""
    end = "\n" if fraction >= 1.0 else ""
    print(f"\rpreparing the speaker model: {fraction:4.0%}", end=end, file=sys.stderr, flush=True)


def _record_takes(count: int, seconds: float, device: str | None) -> list[tuple[str, Any]]:
    """Record ``count`` takes of ``seconds`` each from the microphone (prompts on stderr)."""
    import numpy as np

    from hardware.audio import MicSource
    from hardware.pcm import SAMPLE_RATE

    async def record() -> list[tuple[str, Any]]:
        takes: list[tuple[str, Any]] = []
        async with MicSource(device) as mic:
            for i in range(count):
                prompt = MIC_PROMPTS[i % len(MIC_PROMPTS)]
                print(f"take {i + 1}/{count} ({seconds:.0f} s): read aloud:", file=sys.stderr)
                print(f"  {prompt}", file=sys.stderr, flush=True)
                need, parts, got = int(seconds * SAMPLE_RATE), [], 0
                async for frame in mic.frames():
                    parts.append(frame.samples)
                    got += len(frame.samples)
                    if got >= need:
                        break
                takes.append((f"mic-{i + 1}", np.concatenate(parts)))
        return takes

    return asyncio.run(record())


def cmd_voice_enroll(args: argparse.Namespace) -> int:
    import numpy as np

    from edge_agent.errors import EdgeError
    from edge_agent.voiceprint import enrol_exchange
    from hardware.audio import read_wav
    from models import voiceprint as vp
    from models.catalog import Catalog
    from models.speaker import SpeakerEncoder
    from protos import voice_pb2
    from sync.counter import PersistentCounter

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    bundle = _voice_bundle(args.bundle)
    if bool(args.files) == bool(args.mic):
        raise EdgeError("voice.no_audio")
    entry = Catalog.open(bundle.path).resolve("speaker", progress=_show_progress)
    speaker_model = f"{entry.name}@{entry.version}"
    encoder = SpeakerEncoder(entry.file)
    if args.mic:
        takes = _record_takes(args.takes, args.seconds, args.device)
    else:
        takes = [(Path(f).name, read_wav(f)) for f in args.files]
    request = voice_pb2.VoiceEnrol(
        channel=bundle.profile.channel, speaker_model=speaker_model, replace=args.replace
    )
    measured: list[tuple[str, int, float]] = []
    for label, samples in takes:
        emb = encoder.embed(samples)
        measured.append((label, emb.voiced_ms, emb.quality))
        request.segments.append(
            voice_pb2.EnrolSegment(
                embedding=vp.to_bytes(emb.vector),
                voiced_ms=emb.voiced_ms,
                quality=emb.quality,
                label=label[:64],
            )
        )
    # the hub checks again; these catch a short or silent take before anything is sent
    vp.check_segments(
        vp.Segment(np.zeros(vp.EMBED_DIM, np.float32), ms, q, label) for label, ms, q in measured
    )

    async def send() -> Any:
        host, port = await _hub_address(bundle, args.hub)
        counter = PersistentCounter(bundle.state_dir / "counter.db")
        try:
            return await enrol_exchange(
                bundle,
                request,
                host=host,
                port=port,
                next_counter=counter.next,
                timeout=args.timeout,
            )
        finally:
            counter.close()

    result = asyncio.run(send())
    scores = list(result.loo_scores)
    width = max(len(label) for label, _, _ in measured)
    for i, (label, ms, q) in enumerate(measured):
        loo = f"{scores[i]:.2f}" if i < len(scores) else "-"
        print(f"  {label:<{width}}  voiced {ms:>5} ms  quality {q:.2f}  leave-one-out {loo}")
    if not result.ok:
        raise EdgeError("voice.enrol_failed", text=result.error_text or result.error_key)
    print(
        f"channel {bundle.profile.channel}: {result.samples} samples enrolled with "
        f"{speaker_model} (line {result.line:.2f}); the hub sends the voiceprint to "
        f"the {bundle.profile.channel} devices"
    )
    return EXIT_OK


# ---------------------------------------------------------------- status
def cmd_voice_status(args: argparse.Namespace) -> int:
    if args.home is not None:
        return _status_home(args.home)
    from edge_agent.voiceprint import load_trust_window, load_voiceprint
    from provisioning.bundle import Bundle

    bundle = Bundle.load(args.bundle)
    channel = bundle.profile.channel if "voiceprint" in bundle.profile.roles else None
    print(f"device {bundle.name} ({bundle.profile.name}), channel {channel or '-'}")
    held = load_voiceprint(bundle.state_dir)
    if held is None:
        print("voiceprint: none yet (enrol with 'yimi voice enroll'; the hub sends it)")
    else:
        print(
            f"voiceprint: {held.samples} samples, line {held.line:.2f}, version {held.version}, "
            f"model {held.speaker_model}, received {fmt_ms(held.received_ms)}"
        )
    window = load_trust_window(bundle.state_dir, bundle.device_id)
    if window is not None:
        state = "open" if window.covers(now_ms()) else "closed"
        print(
            f"trust window: {state} ({window.method}), {fmt_ms(window.opened_ms)} – "
            f"{fmt_ms(window.closes_ms)}"
        )
    return EXIT_OK


def _status_home(home_path: Path) -> int:
    from hub.voice.voiceprints import VoiceprintAuthority
    from provisioning.home import Home

    home = Home.load(home_path)
    registry = home.registry()
    auth = VoiceprintAuthority(home.path / "voiceprints.db")
    try:
        names = {d.device_id: d.name for d in registry.devices()}
        rows = auth.status()
        windows = auth.trust_windows()
    finally:
        auth.close()
        registry.close()
    print(
        f"{'CHANNEL':<12} {'SAMPLES':>7} {'LEARNED':>7} {'LINE':>5} {'VERSION':>7}  MODEL / UPDATED"
    )
    for r in rows:
        samples = f"{r.samples}" + ("" if r.enrolled else "*")
        print(
            f"{r.channel:<12} {samples:>7} {r.learned:>7} {r.line:>5.2f} {r.version:>7}  "
            f"{r.speaker_model or '-'} {fmt_ms(r.updated_ms)}"
        )
    if not rows:
        print("(no channel enrolled yet)")
    now = now_ms()
    recent = [w for w in windows if now - w.closes_ms < 3_600_000]
    if recent:
        print("\ntrust windows (last hour):")
        for w in recent:
            state = "open" if w.covers(now) else "closed"
            print(
                f"  {names.get(w.device, w.device):<16} {w.method:<11} {fmt_ms(w.opened_ms)} "
                f"{state}"
            )
    return EXIT_OK


# ---------------------------------------------------------------- trust
def cmd_voice_trust(args: argparse.Namespace) -> int:
    from edge_agent.errors import EdgeError
    from edge_agent.node import DeviceNode, NodeOptions
    from edge_agent.voiceprint import record_trust_window
    from models import voiceprint as vp
    from protos import mesh_pb2, voice_pb2
    from sync import topics
    from sync.envelope import HUB

    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    bundle = _voice_bundle(args.bundle)
    print(
        "FAKE biometric: this machine has no face or fingerprint sensor; "
        "treating this command as the owner's confirmation.",
        file=sys.stderr,
    )
    opened = now_ms()

    async def on_reply(reply: mesh_pb2.Reply, opened_: Any, fresh: bool) -> None:
        return None

    async def send() -> None:
        node = DeviceNode(bundle, NodeOptions(mode="say", hub=args.hub), on_reply)
        async with node:
            assert node.mqtt is not None
            try:
                async with asyncio.timeout(args.timeout):
                    await node.mqtt.connected.wait()
            except TimeoutError:
                raise EdgeError(
                    "voice.refused", reason=f"hub not reachable: {node.mqtt.last_error}"
                ) from None
            data = node.sealer.seal(
                mesh_pb2.TRUST_WINDOW,
                voice_pb2.TrustWindow(
                    opened_ms=opened, seconds=vp.TRUST_WINDOW_MS // 1000, method="fake"
                ),
                recipient=HUB,
                recipient_box_pk=bundle.hub_box_pk,
            )
            await node.mqtt.publish(topics.uplink(bundle.home_id, bundle.device_id), data, qos=1)

    asyncio.run(send())
    record_trust_window(bundle.state_dir, opened, "fake")
    until = time.strftime("%H:%M:%S", time.localtime((opened + vp.TRUST_WINDOW_MS) / 1000))
    print(
        f"trust window open on {bundle.name} until {until}: a call that starts before then "
        "is the owner's until it ends (payments excepted)"
    )
    return EXIT_OK


# ---------------------------------------------------------------- parser
def add_commands(sub: Any, command: Command) -> None:
    voice = sub.add_parser("voice", help="the owner's voiceprint: enrol, status, trust window")
    voice_sub = voice.add_subparsers(dest="action", required=True)

    sp = command(
        voice_sub, "enroll", cmd_voice_enroll, "enrol the owner's voice on this device's channel"
    )
    sp.add_argument("--bundle", type=Path, required=True)
    sp.add_argument("files", nargs="*", help="WAV files of the owner speaking (≥ 1.5 s each)")
    sp.add_argument("--mic", action="store_true", help="record the takes from the microphone")
    sp.add_argument("--takes", type=int, default=5, help="takes to record with --mic (5–20)")
    sp.add_argument("--seconds", type=float, default=5.0, help="seconds per --mic take")
    sp.add_argument("--device", help="input device for --mic (sounddevice name or index)")
    sp.add_argument("--replace", action="store_true", help="start the channel over")
    sp.add_argument("--hub", help="HOST:PORT of the hub's gRPC (default: zeroconf)")
    sp.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the hub")

    sp = command(voice_sub, "status", cmd_voice_status, "voiceprints on the hub or a device")
    where = sp.add_mutually_exclusive_group(required=True)
    where.add_argument("--home", type=Path, help="the hub's authority")
    where.add_argument("--bundle", type=Path, help="what this device holds")

    sp = command(
        voice_sub,
        "trust",
        cmd_voice_trust,
        "FAKE biometric (no sensor here): open a 60 s trust window on this device",
    )
    sp.add_argument("--bundle", type=Path, required=True)
    sp.add_argument("--hub", help="HOST:PORT of the hub's gRPC (default: zeroconf)")
    sp.add_argument("--timeout", type=float, default=10.0, help="seconds to reach the hub")
