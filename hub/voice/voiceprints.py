"""The hub's voiceprint authority: enrolled samples, centroids, lines, trust windows, scope.

:class:`VoiceprintAuthority` keeps ``HOME/voiceprints.db`` (SQLite):

- ``samples``: per channel the enrolment and learning samples (unit embedding, voiced ms,
  quality, label, source), at most 20 per channel;
- ``channels``: per channel the speaker model, the centroid of its samples and the version
  of its last change (one counter for the whole hub, in ``meta``);
- ``lines``: per channel the verification line. It only rises: the table refuses a lower
  value or a delete (SQLite triggers), a ``CHECK`` keeps it within 0.65..1, and the
  configuration (``home.yaml`` → ``voiceprint: {lines: {CHANNEL: X}}``) is applied through
  :func:`models.voiceprint.raise_line` — so no restart and no configuration can lower it;
- ``trust_windows``: device-biometric confirmations (60 s each).

:meth:`VoiceprintAuthority.scope_for` turns one utterance's voice into the turn's scope
(``owner`` / ``owner_uncertain`` / ``guest``) with the rules of
``ARCHITECTURE.md § Voiceprint``; it keeps per-call anchors in memory.

:class:`VoiceprintMesh` is the mesh side (over the hub's mesh port): the gRPC ``Enrol``
handler, ``TRUST_WINDOW`` envelopes, and distribution of ``VOICEPRINT`` to every device
whose profile channel matches (after every change, and whenever a device comes ONLINE).
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from hub.errors import HubError
from models import voiceprint as vp
from models.errors import ModelError
from protos import mesh_pb2, voice_pb2
from protos.clock import now_ms
from protos.errors import YimiError
from provisioning.profiles import Profile, load_profile
from provisioning.registry import DeviceRecord
from storage.sqlite import open_db, transaction
from sync.envelope import DropReason, Opened
from sync.tasks import TaskOwner

if TYPE_CHECKING:
    from hub.mesh.port import MeshPort

log = logging.getLogger(__name__)

OWNER, OWNER_UNCERTAIN, GUEST = "owner", "owner_uncertain", "guest"
"""the scopes a turn can have"""
CALL_IDLE_MS = 3_600_000
"""milliseconds after which a call nobody spoke in is forgotten (with its anchors)"""
MAX_CALLS = 512
"""calls remembered at once (least recently used forgotten first)"""
TRUST_KEEP_MS = 86_400_000
"""milliseconds trust windows are kept in voiceprints.db (for ``yimi voice status``)"""
TRUST_SKEW_MS = 5_000
"""milliseconds a trust window's opening may lie ahead of the hub's clock"""
PASSKEY_METHOD = "passkey"
"""WebAuthn user verification on a paired browser (the companion's "it's me for the next
minute": the phone's own Face ID, fingerprint or PIN, checked by the hub)"""
TRUST_METHODS = frozenset({"face", "fingerprint", PASSKEY_METHOD})
"""device biometrics a trust window may come from"""
FAKE_METHOD = "fake"
"""the stand-in biometric of machines without a sensor (``yimi voice trust``): accepted only
when the hub's configuration says ``voiceprint: {allow_fake_biometric: true}`` (tests, demo)"""
MAX_LABEL = 64
MAX_MODEL = 128

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS lines (
    channel    TEXT PRIMARY KEY,
    line       REAL NOT NULL CHECK (line >= 0.65 AND line <= 1.0),
    updated_ms INTEGER NOT NULL
);
CREATE TRIGGER IF NOT EXISTS lines_only_rise BEFORE UPDATE OF line ON lines
WHEN NEW.line < OLD.line
BEGIN
    SELECT RAISE(ABORT, 'a voiceprint line only rises');
END;
CREATE TRIGGER IF NOT EXISTS lines_not_replaced_lower BEFORE INSERT ON lines
WHEN NEW.line < (SELECT line FROM lines WHERE channel = NEW.channel)
BEGIN
    SELECT RAISE(ABORT, 'a voiceprint line only rises');
END;
CREATE TRIGGER IF NOT EXISTS lines_never_removed BEFORE DELETE ON lines
BEGIN
    SELECT RAISE(ABORT, 'a voiceprint line is never removed');
END;
CREATE TABLE IF NOT EXISTS channels (
    channel       TEXT PRIMARY KEY,
    speaker_model TEXT NOT NULL,
    centroid      BLOB,
    samples       INTEGER NOT NULL,
    version       INTEGER NOT NULL,
    updated_ms    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS samples (
    id        INTEGER PRIMARY KEY,
    channel   TEXT NOT NULL,
    embedding BLOB NOT NULL,
    voiced_ms INTEGER NOT NULL,
    quality   REAL NOT NULL,
    label     TEXT NOT NULL,
    source    TEXT NOT NULL,
    device    TEXT NOT NULL,
    added_ms  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS samples_by_channel ON samples (channel, id);
CREATE TABLE IF NOT EXISTS trust_windows (
    device      TEXT NOT NULL,
    opened_ms   INTEGER NOT NULL,
    length_ms   INTEGER NOT NULL,
    method      TEXT NOT NULL,
    received_ms INTEGER NOT NULL,
    PRIMARY KEY (device, opened_ms)
);
"""


class ScopeDecision(NamedTuple):
    """The scope of one turn and why; unpacks as ``scope, score, reason``.

    ``reason`` is one of ``verified`` / ``uncertain`` / ``unmatched`` / ``unenrolled`` (the
    voiceprint decided), ``trust_window``, ``call_anchor``, ``echo``, ``no_voice``.
    ``score`` is the voiceprint score (max over channels; NaN when there is none).
    """

    scope: str
    score: float
    reason: str


@dataclass(frozen=True)
class EnrolOutcome:
    channel: str
    samples: int
    line: float
    version: int
    loo_scores: list[float]


@dataclass(frozen=True)
class ChannelStatus:
    channel: str
    speaker_model: str
    samples: int
    learned: int
    line: float
    version: int
    updated_ms: int
    enrolled: bool
    """whether the channel has a centroid (at least 5 samples)"""


@dataclass
class _Call:
    started_ms: int
    last_ms: int
    anchor: vp.CallAnchor
    learned: int = 0


@dataclass
class _Channel:
    speaker_model: str
    centroid: np.ndarray | None
    samples: int
    version: int
    updated_ms: int
    segments: list[vp.Segment] = field(default_factory=list)


class VoiceprintAuthority:
    """The hub's voiceprints (``HOME/voiceprints.db``). Thread-safe: :meth:`scope_for` may be
    called from a worker thread; ``on_change(channel)`` is called (from the calling thread)
    after every change of a channel's centroid or line."""

    def __init__(self, path: Path, *, config: Mapping[str, Any] | None = None) -> None:
        self.path = path
        self.db = open_db(path, SCHEMA)
        self._lock = threading.RLock()
        self._calls: OrderedDict[tuple[str, str], _Call] = OrderedDict()
        self.on_change: Callable[[str], None] | None = None
        self._channels: dict[str, _Channel] = {}
        self.allow_fake_biometric = bool(config and config.get("allow_fake_biometric") is True)
        """accept trust windows from the fake biometric (off unless configured)"""
        self._load()
        if config:
            self.apply_config(config)

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ storage
    def _load(self) -> None:
        with self._lock:
            self._channels.clear()
            for channel, model, cen, samples, version, updated in self.db.execute(
                "SELECT channel, speaker_model, centroid, samples, version, updated_ms "
                "FROM channels"
            ):
                segs = self._segments(channel)
                c = vp.as_vector(cen, what="stored centroid") if cen else None
                self._channels[channel] = _Channel(model, c, samples, version, updated, segs)

    def _segments(self, channel: str) -> list[vp.Segment]:
        return [
            vp.Segment(vp.as_vector(emb, what="stored sample"), ms, q, label)
            for emb, ms, q, label in self.db.execute(
                "SELECT embedding, voiced_ms, quality, label FROM samples "
                "WHERE channel = ? ORDER BY id",
                (channel,),
            )
        ]

    def _next_version(self) -> int:
        """One more than every version handed out so far (call inside a transaction)."""
        row = self.db.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
        version = (int(row[0]) if row else 0) + 1
        self.db.execute(
            "INSERT INTO meta (key, value) VALUES ('version', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (version,),
        )
        return version

    def _store_line(self, channel: str, proposed: float | None, at: int) -> float:
        """Raise ``channel``'s line to ``proposed`` if higher (inside a transaction)."""
        row = self.db.execute("SELECT line FROM lines WHERE channel = ?", (channel,)).fetchone()
        stored = float(row[0]) if row else None
        new = vp.raise_line(stored, proposed)
        if row is None:
            self.db.execute(
                "INSERT INTO lines (channel, line, updated_ms) VALUES (?,?,?)", (channel, new, at)
            )
        elif new > float(row[0]):
            self.db.execute(
                "UPDATE lines SET line = ?, updated_ms = ? WHERE channel = ?", (new, at, channel)
            )
        return new

    def _changed(self, channel: str) -> None:
        callback = self.on_change
        if callback is not None:
            try:
                callback(channel)
            except Exception:
                log.exception("voiceprint change callback failed for %s", channel)

    # ------------------------------------------------------------------ lines
    def line(self, channel: str) -> float:
        """The channel's verification line (0.65 until something raised it)."""
        row = self.db.execute("SELECT line FROM lines WHERE channel = ?", (channel,)).fetchone()
        return vp.effective_line(float(row[0]) if row else None)

    def lines(self) -> dict[str, float]:
        return {
            ch: vp.effective_line(x) for ch, x in self.db.execute("SELECT channel, line FROM lines")
        }

    def raise_line(self, channel: str, proposed: float) -> float:
        """Raise ``channel``'s line (a lower ``proposed`` changes nothing); returns the line.
        A channel with a centroid gets a new version, so devices learn the new line."""
        check_channel(channel)
        with self._lock:
            before = self.line(channel)
            with transaction(self.db):
                after = self._store_line(channel, proposed, now_ms())
                ch = self._channels.get(channel)
                if after > before and ch is not None:
                    ch.version = self._next_version()
                    self.db.execute(
                        "UPDATE channels SET version = ? WHERE channel = ?", (ch.version, channel)
                    )
        if after > before:
            log.info("voiceprint line of %s raised %.3f → %.3f", channel, before, after)
            self._changed(channel)
        elif proposed < before:
            log.warning(
                "voiceprint line of %s stays %.3f: %.3f would lower it (lines only rise)",
                channel,
                before,
                proposed,
            )
        return after

    def apply_config(self, config: Mapping[str, Any]) -> None:
        """Apply ``voiceprint: {lines: {CHANNEL: X}}`` from the hub configuration: raise only."""
        lines = config.get("lines") if isinstance(config, Mapping) else None
        if lines is None:
            return
        if not isinstance(lines, Mapping):
            log.warning("voiceprint.lines in the configuration is not a mapping: ignored")
            return
        for channel, value in lines.items():
            try:
                proposed = float(value)
                self.raise_line(str(channel), proposed)
            except (TypeError, ValueError, YimiError) as exc:
                log.warning("voiceprint.lines.%s = %r ignored: %s", channel, value, exc)

    # ------------------------------------------------------------------ enrolment
    def enrol(
        self,
        channel: str,
        segments: Sequence[vp.Segment],
        *,
        speaker_model: str,
        device: str,
        replace: bool = False,
    ) -> EnrolOutcome:
        """Add ``segments`` to ``channel`` (or start it over with ``replace``).

        Raises :class:`ModelError` (``voice.too_short``, ``voice.too_few``,
        ``voice.too_many``, ``voice.outlier``, …) or :class:`HubError`
        (``voice.model_changed``) and changes nothing then. The line is never touched
        (``replace`` keeps it too).
        """
        check_channel(channel)
        if not speaker_model or len(speaker_model) > MAX_MODEL:
            raise HubError("voice.invalid", what="speaker model", reason="missing or too long")
        with self._lock:
            current = self._channels.get(channel)
            existing: list[vp.Segment] = []
            if current is not None and not replace:
                if current.speaker_model != speaker_model:
                    raise HubError(
                        "voice.model_changed",
                        channel=channel,
                        stored=current.speaker_model,
                        got=speaker_model,
                    )
                existing = current.segments
            scores = vp.check_enrolment(existing, segments, vp.floor_for(speaker_model))
            combined = [*existing, *segments]
            cen = vp.centroid(combined)
            at = now_ms()
            with transaction(self.db):
                if replace:
                    self.db.execute("DELETE FROM samples WHERE channel = ?", (channel,))
                for seg in segments:
                    self._insert_sample(channel, seg, "enrol", device, at)
                line = self._store_line(channel, None, at)
                version = self._next_version()
                self._put_channel(channel, speaker_model, cen, len(combined), version, at)
            self._channels[channel] = _Channel(
                speaker_model, cen, len(combined), version, at, combined
            )
        log.info(
            "voiceprint %s enrolled by %s: %d samples (%s), version %d",
            channel,
            device,
            len(combined),
            "replaced" if replace else f"+{len(segments)}",
            version,
        )
        self._changed(channel)
        return EnrolOutcome(channel, len(combined), line, version, scores)

    def _insert_sample(
        self, channel: str, seg: vp.Segment, source: str, device: str, at: int
    ) -> None:
        self.db.execute(
            "INSERT INTO samples (channel, embedding, voiced_ms, quality, label, source, device,"
            " added_ms) VALUES (?,?,?,?,?,?,?,?)",
            (
                channel,
                vp.to_bytes(seg.vector),
                int(seg.voiced_ms),
                float(seg.quality),
                seg.label[:MAX_LABEL],
                source,
                device,
                at,
            ),
        )

    def _put_channel(
        self, channel: str, model: str, cen: np.ndarray, samples: int, version: int, at: int
    ) -> None:
        self.db.execute(
            "INSERT INTO channels (channel, speaker_model, centroid, samples, version, updated_ms)"
            " VALUES (?,?,?,?,?,?) ON CONFLICT (channel) DO UPDATE SET"
            " speaker_model = excluded.speaker_model, centroid = excluded.centroid,"
            " samples = excluded.samples, version = excluded.version,"
            " updated_ms = excluded.updated_ms",
            (channel, model, vp.to_bytes(cen), samples, version, at),
        )

    # ------------------------------------------------------------------ reading
    def voiceprint(self, channel: str) -> voice_pb2.Voiceprint | None:
        """The channel's authoritative voiceprint, if it has a centroid."""
        with self._lock:
            ch = self._channels.get(channel)
            if ch is None or ch.centroid is None:
                return None
            return voice_pb2.Voiceprint(
                channel=channel,
                centroid=vp.to_bytes(ch.centroid),
                line=self.line(channel),
                samples=ch.samples,
                version=ch.version,
                speaker_model=ch.speaker_model,
            )

    def centroids(self, speaker_model: str = "") -> dict[str, np.ndarray]:
        """Centroids by channel (only those of ``speaker_model`` when given)."""
        with self._lock:
            return {
                name: ch.centroid
                for name, ch in self._channels.items()
                if ch.centroid is not None
                and (not speaker_model or ch.speaker_model == speaker_model)
            }

    def status(self) -> list[ChannelStatus]:
        lines = self.lines()
        learned: dict[str, int] = {
            str(ch): int(n)
            for ch, n in self.db.execute(
                "SELECT channel, count(*) FROM samples WHERE source = 'learned' GROUP BY channel"
            )
        }
        with self._lock:
            names = sorted(set(self._channels) | set(lines))
            out = []
            for name in names:
                ch = self._channels.get(name)
                out.append(
                    ChannelStatus(
                        channel=name,
                        speaker_model=ch.speaker_model if ch else "",
                        samples=ch.samples if ch else 0,
                        learned=int(learned.get(name, 0)),
                        line=lines.get(name, vp.VERIFIED_MIN),
                        version=ch.version if ch else 0,
                        updated_ms=ch.updated_ms if ch else 0,
                        enrolled=bool(ch and ch.centroid is not None),
                    )
                )
            return out

    # ------------------------------------------------------------------ trust windows
    def open_trust_window(
        self,
        device: str,
        opened_ms: int,
        *,
        method: str,
        length_ms: int = vp.TRUST_WINDOW_MS,
        received_ms: int | None = None,
    ) -> vp.TrustWindow:
        """Record a device-biometric confirmation on ``device``: 60 s at most, never opening
        later than the hub's clock allows (a device cannot pre-date a window into the future)."""
        received = received_ms if received_ms is not None else now_ms()
        if method == FAKE_METHOD and not self.allow_fake_biometric:
            raise HubError("voice.fake_biometric")
        if method not in TRUST_METHODS and method != FAKE_METHOD:
            raise HubError("voice.invalid", what="trust method", reason=repr(method[:32]))
        opened = min(int(opened_ms), received + TRUST_SKEW_MS)
        length = max(0, min(int(length_ms) or vp.TRUST_WINDOW_MS, vp.TRUST_WINDOW_MS))
        window = vp.TrustWindow(device, opened, method, length)
        with self._lock, transaction(self.db):
            self.db.execute(
                "INSERT OR IGNORE INTO trust_windows"
                " (device, opened_ms, length_ms, method, received_ms) VALUES (?,?,?,?,?)",
                (device, opened, length, method, received),
            )
            self.db.execute(
                "DELETE FROM trust_windows WHERE opened_ms < ?", (received - TRUST_KEEP_MS,)
            )
        return window

    def trust_windows(self, device: str | None = None) -> list[vp.TrustWindow]:
        sql = "SELECT device, opened_ms, method, length_ms FROM trust_windows"
        rows = (
            self.db.execute(sql + " WHERE device = ? ORDER BY opened_ms", (device,))
            if device is not None
            else self.db.execute(sql + " ORDER BY opened_ms")
        )
        return [vp.TrustWindow(d, o, m, n) for d, o, m, n in rows]

    def trusted(self, device: str, t_ms: int) -> bool:
        """Whether a trust window of ``device`` covers ``t_ms``."""
        row = self.db.execute(
            "SELECT 1 FROM trust_windows WHERE device = ? AND opened_ms <= ?"
            " AND ? < opened_ms + min(length_ms, ?) LIMIT 1",
            (device, t_ms, t_ms, vp.TRUST_WINDOW_MS),
        ).fetchone()
        return row is not None

    # ------------------------------------------------------------------ scope
    def scope_for(
        self,
        channel: str,
        embedding: bytes | np.ndarray | None,
        voiced_ms: int,
        call_id: str,
        device: str,
        *,
        at_ms: int | None = None,
        quality: float = 0.0,
        speaker_model: str = "",
        echo: bool = False,
        payment: bool = False,
    ) -> ScopeDecision:
        """The scope of one utterance heard by ``device`` on ``channel``.

        ``embedding`` is the segment's speaker embedding (bytes as in ``VoiceInfo`` or an
        array; ``None`` for no voice), ``call_id`` groups a wake session and its follow-ups
        ("" = a call of its own), ``at_ms`` is when the utterance started (default now).
        Rules, in order:

        1. the device's own echo is never the owner (``echo``);
        2. voiceprint verified (score ≥ a channel's line) → ``owner``; the utterance becomes
           an anchor of its call;
        3. (not for payments) a call that started inside a trust window of ``device`` →
           ``owner`` until hang-up; its long, clean segments may become learning samples
           of ``channel``;
        4. (not for payments) ≥ 200 ms voiced at cosine ≥ 0.65 to a verified utterance of
           the same call → ``owner``;
        5. score ≥ 0.45 → ``owner_uncertain``; otherwise ``guest``.
        """
        at = int(at_ms) if at_ms is not None else now_ms()
        if echo:
            return ScopeDecision(GUEST, math.nan, "echo")
        x: np.ndarray | None = None
        if embedding is not None and (not isinstance(embedding, bytes) or embedding):
            try:
                x = vp.as_vector(embedding)
            except ModelError as exc:
                log.warning("voice from %s has an unusable embedding: %s", device, exc)
        with self._lock:
            floor = self._floor(speaker_model)
            call = self._call(device, call_id, at, floor)
            lines = self.lines()
            if x is None:
                m = vp.Match(math.nan, "", vp.Verdict.UNENROLLED)
            else:
                m = vp.match(x, self.centroids(speaker_model), lines, floor)
            trusted = not payment and self.trusted(device, call.started_ms)
            if trusted and x is not None:
                self._maybe_learn(channel, x, voiced_ms, quality, speaker_model, device, call)
            if m.verdict is vp.Verdict.VERIFIED:
                assert x is not None
                call.anchor.add(x)
                return ScopeDecision(OWNER, m.score, "verified")
            if trusted:
                return ScopeDecision(OWNER, m.score, "trust_window")
            if not payment and x is not None and call.anchor.matches(x, voiced_ms):
                return ScopeDecision(OWNER, m.score, "call_anchor")
        if x is None:
            return ScopeDecision(GUEST, math.nan, "no_voice")
        if m.verdict is vp.Verdict.UNCERTAIN:
            return ScopeDecision(OWNER_UNCERTAIN, m.score, "uncertain")
        return ScopeDecision(GUEST, m.score, m.verdict.value)

    def _floor(self, speaker_model: str) -> float:
        """The score floor for embeddings of ``speaker_model`` (unnamed: the enrolled one's)."""
        if not speaker_model:
            models = sorted({ch.speaker_model for ch in self._channels.values()})
            speaker_model = models[0] if len(models) == 1 else ""
        return vp.floor_for(speaker_model)

    def _call(self, device: str, call_id: str, at: int, floor: float) -> _Call:
        """The call ``call_id`` of ``device`` (created, starting at ``at``, if new)."""
        for key in [k for k, c in self._calls.items() if at - c.last_ms > CALL_IDLE_MS]:
            del self._calls[key]
        if not call_id:
            return _Call(at, at, vp.CallAnchor("", floor=floor))
        key = (device, call_id[:128])
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = _Call(at, at, vp.CallAnchor(call_id, floor=floor))
            while len(self._calls) > MAX_CALLS:
                self._calls.popitem(last=False)
        else:
            self._calls.move_to_end(key)
            call.started_ms = min(call.started_ms, at)
            call.last_ms = max(call.last_ms, at)
        return call

    def _maybe_learn(
        self,
        channel: str,
        x: np.ndarray,
        voiced_ms: int,
        quality: float,
        speaker_model: str,
        device: str,
        call: _Call,
    ) -> bool:
        """Add a trust-window segment as a learning sample when the rules allow it: ≥ 1 s
        voiced, quality ≥ 0.5, the channel enrolled with this speaker model and holding
        fewer than 20 samples, and the whole channel still passing leave-one-out."""
        ch = self._channels.get(channel)
        if ch is None or ch.centroid is None or not vp.can_learn(voiced_ms, quality, ch.samples):
            return False
        if speaker_model and speaker_model != ch.speaker_model:
            return False
        seg = vp.Segment(x, int(voiced_ms), float(quality), f"learned {call.anchor.call_id}")
        combined = [*ch.segments, seg]
        scores = vp.leave_one_out(combined, vp.floor_for(ch.speaker_model))
        if not all(s >= vp.LOO_MIN for s in scores):
            log.info(
                "trust-window sample on %s not learned: leave-one-out %.2f", channel, scores[-1]
            )
            return False
        cen = vp.centroid(combined)
        at = now_ms()
        with transaction(self.db):
            self._insert_sample(channel, seg, "learned", device, at)
            version = self._next_version()
            self._put_channel(channel, ch.speaker_model, cen, len(combined), version, at)
        self._channels[channel] = _Channel(
            ch.speaker_model, cen, len(combined), version, at, combined
        )
        call.learned += 1
        log.info(
            "voiceprint %s learned a sample (%d now), version %d", channel, len(combined), version
        )
        self._changed(channel)
        return True


CHANNEL_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


def check_channel(channel: str) -> str:
    """A channel name as profiles allow it (``[a-z][a-z0-9_]{0,31}``)."""
    if not CHANNEL_NAME.fullmatch(channel or ""):
        raise HubError("voice.invalid", what="channel", reason=repr(channel[:40]))
    return channel


# ---------------------------------------------------------------------- on the mesh


class VoiceprintMesh:
    """Voiceprints on the mesh (an async context manager owning its distribution tasks):
    ``authority`` over the port's envelopes; ``devices`` lists the registry's records."""

    def __init__(
        self,
        authority: VoiceprintAuthority,
        *,
        port: MeshPort,
        devices: Callable[[], Sequence[DeviceRecord]],
    ) -> None:
        self.authority = authority
        self.port = port
        self._devices = devices
        self._tasks = TaskOwner("voiceprints")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._profiles: dict[str, Profile | None] = {}

    async def __aenter__(self) -> VoiceprintMesh:
        self._loop = asyncio.get_running_loop()
        self.authority.on_change = self._changed_threadsafe
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.authority.on_change = None
        await self._tasks.close()

    def close(self) -> None:
        self.authority.close()

    # ------------------------------------------------------------------ devices
    def _channel_of_record(self, rec: DeviceRecord) -> str | None:
        if rec.revoked:
            return None
        if rec.profile not in self._profiles:
            try:
                self._profiles[rec.profile] = load_profile(rec.profile)
            except Exception as exc:  # a custom profile the hub cannot read
                log.warning("profile %s of %s unreadable: %s", rec.profile, rec.name, exc)
                self._profiles[rec.profile] = None
        profile = self._profiles[rec.profile]
        if profile is None or "voiceprint" not in profile.roles:
            return None
        return profile.channel

    def channel_of(self, device_id: str) -> str | None:
        """The voiceprint channel of a device (``None``: unknown, revoked, or no voiceprint
        role in its profile)."""
        for rec in self._devices():
            if rec.device_id == device_id:
                return self._channel_of_record(rec)
        return None

    def devices_on(self, channel: str) -> list[str]:
        """Devices (not revoked) whose profile channel is ``channel``."""
        return [r.device_id for r in self._devices() if self._channel_of_record(r) == channel]

    # ------------------------------------------------------------------ distribution
    def _changed_threadsafe(self, channel: str) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._tasks.spawn(self.distribute(channel), f"distribute-{channel}")
        else:
            loop.call_soon_threadsafe(
                lambda: self._tasks.spawn(self.distribute(channel), f"distribute-{channel}")
            )

    async def distribute(self, channel: str) -> int:
        """Send the channel's voiceprint to every device on it; returns how many got it."""
        sent = 0
        for device in self.devices_on(channel):
            sent += await self.send_to(device)
        return sent

    async def send_to(self, device: str) -> bool:
        """Send ``device`` the voiceprint of its channel, if there is one."""
        channel = self.channel_of(device)
        if channel is None:
            return False
        print_ = self.authority.voiceprint(channel)
        if print_ is None:
            return False
        if not self.port.connected:
            return False
        try:
            if not await self.port.send(device, mesh_pb2.VOICEPRINT, print_):
                return False
        except Exception as exc:  # it goes again when the device is next ONLINE
            log.info("voiceprint to %s not sent now: %s", device, exc)
            return False
        log.info("voiceprint %s v%d sent to %s", channel, print_.version, device)
        return True

    async def on_online(self, device: str) -> None:
        await self.send_to(device)

    # ------------------------------------------------------------------ incoming
    async def serve_enrol(self, data: bytes) -> bytes:
        """``Hub.Enrol``: a VOICE_ENROL envelope in, a VOICE_ENROL_RESULT envelope out.

        A refused envelope raises :class:`HubError` (the gRPC call fails); a refused
        enrolment is an answer with ``ok = false`` and the error's key and text.
        """
        return await self.port.serve(
            data,
            request=voice_pb2.VoiceEnrol,
            kind=mesh_pb2.VOICE_ENROL_RESULT,
            what="enrol",
            error="voice.refused",
            handle=self._serve_enrol,
        )

    async def _serve_enrol(
        self, opened: Opened, request: voice_pb2.VoiceEnrol
    ) -> voice_pb2.VoiceEnrolResult:
        channel = self.channel_of(opened.sender)
        return await asyncio.to_thread(self._enrol, opened.sender, channel, request)

    def _enrol(
        self, device: str, channel: str | None, request: voice_pb2.VoiceEnrol
    ) -> voice_pb2.VoiceEnrolResult:
        try:
            if channel is None or request.channel != channel:
                raise HubError(
                    "voice.channel", got=request.channel[:40] or "-", want=channel or "none"
                )
            if len(request.segments) > vp.MAX_SAMPLES:
                raise ModelError(
                    "voice.too_many", count=len(request.segments), have=0, max=vp.MAX_SAMPLES
                )
            segments = [
                vp.Segment(
                    vp.as_vector(s.embedding, what=f"segment {s.label[:MAX_LABEL] or i + 1}"),
                    int(s.voiced_ms),
                    float(s.quality),
                    s.label[:MAX_LABEL] or f"#{i + 1}",
                )
                for i, s in enumerate(request.segments)
            ]
            outcome = self.authority.enrol(
                channel,
                segments,
                speaker_model=request.speaker_model,
                device=device,
                replace=request.replace,
            )
        except YimiError as exc:
            log.warning("voice enrolment from %s refused: %s", device, exc)
            scores = exc.fields.get("scores") or []
            return voice_pb2.VoiceEnrolResult(
                ok=False, error_key=exc.key, error_text=str(exc), loo_scores=scores
            )
        return voice_pb2.VoiceEnrolResult(
            ok=True,
            samples=outcome.samples,
            line=outcome.line,
            loo_scores=outcome.loo_scores,
        )

    async def on_trust_window(self, opened: Opened) -> None:
        """A ``TRUST_WINDOW`` from a device with a voiceprint role (its biometric said "it's
        the owner"): recorded; calls that start inside it on that device are the owner's."""
        msg = opened.payload
        assert isinstance(msg, voice_pb2.TrustWindow)
        if self.channel_of(opened.sender) is None:
            self.port.drop(
                DropReason.MALFORMED, opened.sender, "trust window from a non-voice device"
            )
            return
        try:
            window = await asyncio.to_thread(
                self.authority.open_trust_window,
                opened.sender,
                msg.opened_ms or opened.time_ms,
                method=msg.method,
                length_ms=msg.seconds * 1000,
            )
        except HubError as exc:
            self.port.drop(DropReason.MALFORMED, opened.sender, f"trust window: {exc}")
            return
        log.info(
            "trust window opened on %s by %s biometric until %s",
            opened.sender,
            window.method,
            time.strftime("%H:%M:%S", time.localtime(window.closes_ms / 1000)),
        )

    async def trust_from_page(self, device: str) -> vp.TrustWindow:
        """A paired browser's verified WebAuthn assertion (checked by :mod:`hub.web`): the
        same 60 s window a ``TRUST_WINDOW`` opens, on that device (``HubError`` when it has
        no voiceprint channel)."""
        if self.channel_of(device) is None:
            raise HubError("voice.channel", got="-", want="a voiceprint channel")
        window = await asyncio.to_thread(
            self.authority.open_trust_window, device, now_ms(), method=PASSKEY_METHOD
        )
        log.info(
            "trust window opened on %s by WebAuthn user verification until %s",
            device,
            time.strftime("%H:%M:%S", time.localtime(window.closes_ms / 1000)),
        )
        return window
