"""The device's side of voiceprints: the hub's Voiceprint kept in the bundle, enrolment over
gRPC, and trust windows.

Files in ``BUNDLE/state/``:

``voiceprint.json``
    the last ``VOICEPRINT`` the hub sent for this device's channel::

        {"channel": "glasses", "centroid": "<base64 of 256 float32 LE>", "line": 0.65,
         "samples": 5, "version": 3, "speaker_model": "ge2e@1", "received_ms": …}

    A newer version replaces it; an older one is ignored. The line is never lowered
    locally: the stored line is the highest ever received (and never below 0.65).
    Read it with :func:`load_voiceprint` (never raises: a missing or damaged file is
    ``None``), or :class:`VoiceprintCache` to re-read only when the file changed.
``trust.json``
    the last trust window this device opened (``yimi voice trust``):
    ``{"opened_ms": …, "length_ms": 60000, "method": "fake"}``; :func:`load_trust_window`.

numpy and :mod:`models.voiceprint` are imported where a voiceprint is read or judged, not
with this module: every device daemon and ``yimi say`` registers the ``VOICEPRINT`` handler,
few of them ever see one.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from edge_agent.errors import EdgeError
from edge_agent.port import Handlers
from models.errors import ModelError
from protos import mesh_pb2, voice_pb2
from protos.clock import now_ms
from provisioning.bundle import Bundle
from sync.envelope import HUB, Dropped, Opened
from sync.hub_rpc import CHANNEL_OPTIONS, envelope_call
from sync.tls import ClientTls, rpc_error

if TYPE_CHECKING:
    import numpy as np

    from models import voiceprint as vp

log = logging.getLogger(__name__)

VOICEPRINT_FILE = "voiceprint.json"
TRUST_FILE = "trust.json"
MAX_FILE_BYTES = 64 * 1024


@dataclass(frozen=True, eq=False)
class DeviceVoiceprint:
    """The hub's voiceprint for this device's channel, as stored in the bundle."""

    channel: str
    centroid: np.ndarray
    """unit float32[256]"""
    line: float
    """verification line (≥ 0.65; the highest this device has seen)"""
    samples: int
    version: int
    speaker_model: str
    received_ms: int

    def __eq__(self, other: object) -> bool:
        import numpy as np

        if not isinstance(other, DeviceVoiceprint):
            return NotImplemented
        return (
            self.channel,
            self.line,
            self.samples,
            self.version,
            self.speaker_model,
            self.received_ms,
        ) == (
            other.channel,
            other.line,
            other.samples,
            other.version,
            other.speaker_model,
            other.received_ms,
        ) and bool(np.array_equal(self.centroid, other.centroid))

    __hash__ = None  # type: ignore[assignment]

    def judge(self, embedding: np.ndarray) -> tuple[vp.Verdict, float]:
        """The local verdict for a unit embedding: (verdict, calibrated similarity to the
        centroid, see :func:`models.voiceprint.similarity`)."""
        from models import voiceprint as vp

        s = vp.similarity(embedding, self.centroid, vp.floor_for(self.speaker_model))
        return vp.verdict(s, self.line), s


def local_verdict(
    voiceprint: DeviceVoiceprint | None, embedding: np.ndarray, speaker_model: str = ""
) -> tuple[vp.Verdict, float]:
    """``(verdict, score)`` of a segment on this device: ``unenrolled`` (score NaN) without a
    voiceprint or when it was made with another speaker model."""
    from models import voiceprint as vp

    if voiceprint is None or (speaker_model and speaker_model != voiceprint.speaker_model):
        return vp.Verdict.UNENROLLED, float("nan")
    return voiceprint.judge(embedding)


# --------------------------------------------------------------------------- files


def _write_json(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    tmp.write_text(json.dumps(data, sort_keys=True))
    os.chmod(tmp, 0o600)
    tmp.replace(path)


def _read_json(path: Path) -> dict[str, object] | None:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def load_voiceprint(state_dir: Path) -> DeviceVoiceprint | None:
    """The stored voiceprint of this bundle (``Bundle.state_dir``), or ``None``."""
    from models import voiceprint as vp

    data = _read_json(state_dir / VOICEPRINT_FILE)
    if data is None:
        return None
    try:
        return DeviceVoiceprint(
            channel=str(data["channel"]),
            centroid=vp.as_vector(base64.b64decode(str(data["centroid"])), what="centroid"),
            line=vp.effective_line(float(data["line"])),  # type: ignore[arg-type]
            samples=int(data["samples"]),  # type: ignore[call-overload]
            version=int(data["version"]),  # type: ignore[call-overload]
            speaker_model=str(data["speaker_model"]),
            received_ms=int(data.get("received_ms") or 0),  # type: ignore[call-overload]
        )
    except (KeyError, TypeError, ValueError, ModelError) as exc:
        log.warning("stored voiceprint in %s is unusable: %s", state_dir, exc)
        return None


def store_voiceprint(
    state_dir: Path, message: voice_pb2.Voiceprint, channel: str | None
) -> DeviceVoiceprint | None:
    """Keep a ``VOICEPRINT`` from the hub if it is for ``channel`` and newer than the stored
    one; the line kept is the highest seen. Returns what is stored now (``None`` if the
    message was refused and nothing was stored before)."""
    from models import voiceprint as vp

    current = load_voiceprint(state_dir)
    if channel is None or message.channel != channel:
        log.warning(
            "voiceprint for channel %r refused: this device is on %r", message.channel[:40], channel
        )
        return current
    try:
        centroid = vp.as_vector(message.centroid, what="centroid")
    except ModelError as exc:
        log.warning("voiceprint refused: %s", exc)
        return current
    if not message.speaker_model or message.samples < vp.MIN_SAMPLES:
        log.warning("voiceprint refused: no speaker model or too few samples")
        return current
    if current is not None and message.version <= current.version:
        return current  # an old or repeated one (the hub raises a line only with a new version)
    floor = current.line if current is not None else None
    line = vp.raise_line(floor, message.line)
    stored = DeviceVoiceprint(
        channel=message.channel,
        centroid=centroid,
        line=line,
        samples=int(message.samples),
        version=int(message.version),
        speaker_model=message.speaker_model,
        received_ms=now_ms(),
    )
    _write_json(
        state_dir / VOICEPRINT_FILE,
        {
            "channel": stored.channel,
            "centroid": base64.b64encode(vp.to_bytes(centroid)).decode(),
            "line": stored.line,
            "samples": stored.samples,
            "version": stored.version,
            "speaker_model": stored.speaker_model,
            "received_ms": stored.received_ms,
        },
    )
    return stored


class VoiceprintCache:
    """:func:`load_voiceprint`, re-read only when the file changed (for a pipeline that
    judges every segment)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / VOICEPRINT_FILE
        self._stamp: tuple[int, int] | None = None
        self._value: DeviceVoiceprint | None = None

    def get(self) -> DeviceVoiceprint | None:
        try:
            st = self.path.stat()
            stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_ino)
        except OSError:
            stamp = None
        if stamp != self._stamp:
            self._stamp = stamp
            self._value = load_voiceprint(self.path.parent) if stamp else None
        return self._value


def load_trust_window(state_dir: Path, device: str = "") -> vp.TrustWindow | None:
    """The last trust window this device opened (open or not: see ``covers``)."""
    from models import voiceprint as vp

    data = _read_json(state_dir / TRUST_FILE)
    if data is None:
        return None
    try:
        return vp.TrustWindow(
            device,
            int(data["opened_ms"]),  # type: ignore[call-overload]
            str(data.get("method", "fake")),
            int(data.get("length_ms") or vp.TRUST_WINDOW_MS),  # type: ignore[call-overload]
        )
    except (KeyError, TypeError, ValueError):
        return None


# --------------------------------------------------------------------------- on the mesh


def voiceprint_handlers(bundle: Bundle) -> Handlers:
    """``VOICEPRINT`` handling for a device with the ``voiceprint`` role."""
    profile = bundle.profile
    if "voiceprint" not in profile.roles:
        return {}
    state_dir = bundle.state_dir

    async def on_voiceprint(opened: Opened) -> None:
        msg = opened.payload
        if opened.sender != HUB or not isinstance(msg, voice_pb2.Voiceprint):
            return
        before = load_voiceprint(state_dir)
        stored = store_voiceprint(state_dir, msg, profile.channel)
        if stored is not None and stored != before:
            log.info(
                "voiceprint %s v%d stored: %d samples, line %.2f",
                stored.channel,
                stored.version,
                stored.samples,
                stored.line,
            )

    return {mesh_pb2.VOICEPRINT: on_voiceprint}


async def enrol_exchange(
    bundle: Bundle,
    request: voice_pb2.VoiceEnrol,
    *,
    host: str,
    port: int,
    next_counter: Callable[[], int],
    timeout: float = 30.0,
) -> voice_pb2.VoiceEnrolResult:
    """Send a ``VOICE_ENROL`` envelope over ``Hub.Enrol``; return the hub's result.

    Raises :class:`SyncError` (``hub.unreachable``) when the hub does not answer and
    :class:`EdgeError` (``voice.refused``) when it refuses the envelope.
    """
    from sync.envelope import Opener, Peer, ReplayGuard, Sealer

    sealer = Sealer.for_device(bundle, next_counter)
    data = sealer.seal(
        mesh_pb2.VOICE_ENROL, request, recipient=HUB, recipient_box_pk=bundle.hub_box_pk
    )
    target = f"{host}:{port}"
    try:
        async with ClientTls.for_bundle(bundle).channel(host, port, CHANNEL_OPTIONS) as channel:
            response = await envelope_call(channel, "Enrol", data, sealer, timeout)
    except grpc.aio.AioRpcError as exc:
        details = exc.details() or ""
        if exc.code() == grpc.StatusCode.PERMISSION_DENIED:
            raise EdgeError("voice.refused", reason=details.partition("|")[2] or details) from None
        raise rpc_error(exc, target) from None
    hub_peer = Peer(HUB, bundle.hub_sign_pk, bundle.hub_box_pk)
    opener = Opener(
        home_id=bundle.home_id,
        node_id=bundle.device_id,
        box_key=bundle.keys.box,
        lookup=lambda sender: hub_peer if sender == HUB else None,
        replay=ReplayGuard(),
        group_key=bundle.group_key,
    )
    answer = opener.open(response)
    if isinstance(answer, Dropped) or not isinstance(answer.payload, voice_pb2.VoiceEnrolResult):
        why = answer.reason.value if isinstance(answer, Dropped) else "wrong kind"
        raise EdgeError("voice.refused", reason=f"unreadable answer ({why})")
    return answer.payload


def record_trust_window(state_dir: Path, opened_ms: int, method: str) -> None:
    from models import voiceprint as vp

    _write_json(
        state_dir / TRUST_FILE,
        {"opened_ms": opened_ms, "length_ms": vp.TRUST_WINDOW_MS, "method": method},
    )
