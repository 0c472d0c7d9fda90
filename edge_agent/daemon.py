"""``yimi edge run``: the long-lived device daemon.

It keeps the device on the mesh (presence with a last will, reconnecting with backoff when
the hub or the network goes away), keeps its timeline and notes replicas in sync, empties
the outbox whenever the hub is reachable, and renders every reply it receives (stdout
stands in for a HUD), ACKing it.

With ``--audio`` it also hears (:mod:`edge_agent.pipeline`): a microphone, raw PCM on
stdin, or a file (``--realtime`` paces a file like a microphone; ``--audio-start-ms``
stamps its first frame, so two devices can hear one file "at the same time"). Replies are
then spoken into ``--out`` (speaker, null, or a WAV file) on devices with a speaker.
``--once`` exits after the audio ended and every request got its reply delivered.

With ``--imu`` (glasses: a recording or ``device``) a nod or a shake answers the card shown
on the HUD (:mod:`edge_agent.gesture`).

On a phone it also watches the (FAKE) lock sensor: unlocked → a signed unlock lease to the
hub, locked → the lease ends (:class:`edge_agent.pay.LockWatcher`).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from contextlib import AbstractAsyncContextManager, AsyncExitStack, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.protobuf.message import Message

from edge_agent.errors import EdgeError
from edge_agent.node import DeviceNode, NodeOptions
from edge_agent.pay import lock_watch
from edge_agent.pipeline import DeviceVoice, VoicePipeline
from protos import mesh_pb2
from protos.clock import now_ms
from protos.errors import render
from provisioning.bundle import Bundle
from sync.envelope import Opened

if TYPE_CHECKING:
    from hardware.camera import Camera

log = logging.getLogger(__name__)

EXIT_OK, EXIT_QUEUED = 0, 3
CONNECT_TIMEOUT_S = 10.0
"""seconds to wait for the hub before hearing starts (then requests queue)"""


@dataclass(frozen=True)
class VoiceOptions:
    audio: str
    """``mic``, ``mic:DEVICE``, ``-`` or a file ("" with ``satellite``)"""
    out: str | None = None
    """``speaker``, ``null`` or a WAV file; default: ``speaker`` on devices with one"""
    realtime: bool = False
    start_ms: int | None = None
    once: bool = False
    timeout: float = 60.0
    """``--once``: seconds to wait for the replies after the audio ended"""
    satellite: str | None = None
    """``HOST:PORT`` of a wyoming-satellite: its microphone and speaker are this device's
    (:mod:`edge_agent.satellite`)"""


class NodeUplink:
    """The pipeline's view of the device node."""

    def __init__(self, node: DeviceNode) -> None:
        self.node = node

    def is_connected(self) -> bool:
        return self.node.mqtt is not None and self.node.mqtt.connected.is_set()

    async def send(self, kind: int, payload: Message) -> None:
        await self.node.send(kind, payload)

    def queue_voice(self, utt: mesh_pb2.Utterance, audio: list[bytes], trace_id: str) -> int:
        return self.node.queue_voice(utt, audio, trace_id)

    def withdraw(self, item_id: str) -> bool:
        return self.node.withdraw(item_id)

    async def ack(self, reply: mesh_pb2.Reply, state: int = mesh_pb2.RENDERED) -> None:
        await self.node.ack(reply, state)


def attach_imu(
    node: DeviceNode, bundle: Bundle, imu: str | None
) -> AbstractAsyncContextManager[object]:
    """With ``--imu``: a nod or shake answers the cards shown on the glasses' HUD
    (:class:`edge_agent.gesture.HudAnswers`, an async context manager); else nothing."""
    if imu is None:
        return nullcontext()
    from edge_agent.gesture import HudAnswers
    from hardware.imu import open_imu

    def show(text: str) -> None:
        print(f"[{bundle.name}] {text}", flush=True)

    answers = HudAnswers(bundle, open_imu(imu), node.send, show)
    answers.wrap(node.handlers)
    return answers


def attach_camera(node: DeviceNode, bundle: Bundle, camera: str | None) -> Camera | None:
    """Answer the hub's capture requests on a device with the camera role: from the camera
    ``--camera`` names (:func:`hardware.camera.open_camera`), or with "no camera"."""
    if not bundle.profile.has("camera"):
        return None
    from edge_agent.eyes import Eyes
    from hardware.camera import open_camera

    cam = open_camera(camera) if camera else None
    node.handlers.update(Eyes(bundle.name, cam, node.send).handlers())
    return cam


async def run_edge(
    bundle: Bundle,
    *,
    hub: str | None,
    voice: VoiceOptions | None = None,
    camera: str | None = None,
    imu: str | None = None,
) -> int:
    if voice is not None:
        return await run_voice(bundle, hub=hub, voice=voice, camera=camera, imu=imu)

    async def on_reply(reply: mesh_pb2.Reply, opened: Opened, fresh: bool) -> None:
        # A reply the hub re-sends (it never saw our ACK) is ACKed again, not shown twice.
        if fresh:
            print(f"[{bundle.name}] hub: {reply.text}", flush=True)
        await node.ack(reply, mesh_pb2.RENDERED)

    node = DeviceNode(bundle, NodeOptions(mode="edge", hub=hub), on_reply)
    head = attach_imu(node, bundle, imu)
    cam = attach_camera(node, bundle, camera)
    try:
        async with node, lock_watch(bundle, node), head:  # a phone reports its lock state
            log.info("edge agent %s (%s) running", bundle.name, bundle.device_id)
            await asyncio.Event().wait()
    finally:
        if cam is not None:
            cam.close()
    return 0


async def run_voice(
    bundle: Bundle,
    *,
    hub: str | None,
    voice: VoiceOptions,
    camera: str | None = None,
    imu: str | None = None,
) -> int:
    from edge_agent.ears import load_ears
    from hardware.audio import WavSource, open_sink, open_source

    profile = bundle.profile
    if not profile.has("capture_audio"):
        raise EdgeError("edge.no_capture", profile=profile.name)
    satellite = None
    if voice.satellite is not None:  # the satellite's microphone and speaker
        from edge_agent.satellite import SatelliteLink, parse_target

        satellite = SatelliteLink(*parse_target(voice.satellite))
    speaks = satellite is not None or profile.has("speaker")
    out = voice.out if voice.out is not None else ("speaker" if speaks else None)
    source: Any = satellite
    if satellite is None:
        source = open_source(voice.audio, realtime=voice.realtime, start_ms=voice.start_ms)
    ears = await asyncio.to_thread(load_ears, bundle, _progress)
    async with AsyncExitStack() as stack:
        live = satellite is not None or voice.audio.startswith("mic")
        if not live:  # a missing or unreadable file fails now, not after connecting
            await stack.enter_async_context(source)
        sink: Any = satellite
        if satellite is None and out is not None and speaks:
            sink = await stack.enter_async_context(open_sink(out, realtime=voice.realtime))
        heard_from = f"wyoming-satellite:{voice.satellite}" if satellite else voice.audio
        device = DeviceVoice(
            device_id=bundle.device_id,
            name=bundle.name,
            channel=profile.channel or bundle.name,
            speaks=speaks,
            shows=profile.has("hud"),
            source=heard_from,
        )

        async def on_reply(reply: mesh_pb2.Reply, opened: Opened, fresh: bool) -> None:
            await pipeline.on_reply(reply, opened, fresh)

        node = DeviceNode(bundle, NodeOptions(mode="edge", hub=hub), on_reply)
        pipeline = VoicePipeline(device, ears, NodeUplink(node), bundle.state_dir, sink=sink)
        node.handlers[mesh_pb2.WAKE_DECISION] = pipeline.on_wake_decision
        cam = attach_camera(node, bundle, camera)
        if cam is not None:
            stack.callback(cam.close)
        head = attach_imu(node, bundle, imu)
        await stack.enter_async_context(pipeline)
        await stack.enter_async_context(node)
        await stack.enter_async_context(lock_watch(bundle, node))
        await stack.enter_async_context(head)
        assert node.mqtt is not None
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                await node.mqtt.connected.wait()
        except TimeoutError:
            log.warning("hub not reachable yet: requests will wait in the outbox")
        log.info("edge agent %s (%s) hearing %s", bundle.name, bundle.device_id, heard_from)
        if live:
            await stack.enter_async_context(source)
        if voice.realtime and voice.start_ms is not None:
            wait_s = voice.start_ms / 1000 - time.time()
            if wait_s > 0:  # both devices hear the same file from the same instant
                await asyncio.sleep(wait_s)
        elif voice.start_ms is None and isinstance(source, WavSource):
            source.start_ms = now_ms()  # the file "starts" now, not when opened
        t0 = time.perf_counter()
        await pipeline.listen(source.frames(), finite=not live)
        heard_s = time.perf_counter() - t0
        stats = pipeline.stats
        pace = (
            "paced" if voice.realtime else f"RTF {heard_s / max(stats.audio_ms / 1000, 1e-9):.3f}"
        )
        log.info(
            "audio ended: %.1f s heard in %.1f s (%s); %d wake(s), %d request(s), "
            "%d ambient, %d stood down",
            stats.audio_ms / 1000,
            heard_s,
            pace,
            stats.wakes,
            stats.requests,
            stats.ambient,
            stats.stood_down,
        )
        if not voice.once:
            await asyncio.Event().wait()
        try:
            async with asyncio.timeout(voice.timeout):
                await pipeline.settled()
        except TimeoutError:
            waiting = [u for u in pipeline.pending if node.outbox.contains(u)]
            if waiting and not node.mqtt.connected.is_set():
                reason = node.mqtt.last_error or "not connected"
                fields = {"id": waiting[0], "count": node.outbox.count(), "reason": reason}
                print(render("say.queued", fields), file=sys.stderr)
                return EXIT_QUEUED
            raise EdgeError(
                "edge.no_reply", count=max(1, len(pipeline.pending)), seconds=voice.timeout
            ) from None
    return EXIT_OK


def _progress(fraction: float) -> None:
    print(f"\rpreparing the speaker model: {fraction * 100:3.0f} %", end="", file=sys.stderr)
    if fraction >= 1.0:
        print(file=sys.stderr)
