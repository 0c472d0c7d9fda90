"""``yimi demo``: the whole assistant on this machine, narrated so a person can follow it.

In a temporary folder the demo creates a home and flashes three devices, then runs the hub
and the glasses, phone and mac daemons as real processes (``python -m cli …``) on
loopback only (no zeroconf, no network beyond 127.0.0.1). The outside mail server is a
**local test SMTP server** (aiosmtpd, in this process) the messaging package is pointed at.
The demo then

1. writes the address-book entry "my colleague" and, on the mac, the meeting notes;
2. enrols the owner's voice on the glasses from five espeak-ng takes;
3. plays synthesized speech into the glasses' microphone input (``yimi edge run --audio -``
   fed as a microphone would be, in real time): "Yimi, remember I don't eat cilantro",
   then "Yimi, e-mail the meeting notes to my colleague";
4. answers the e-mail's confirmation card in the phone companion: a headless Chromium
   (:mod:`demo.companion`, its own process) paired with the hub's web pages as a second
   ``phone`` device taps Approve, and the page signs the card with its own WebCrypto key —
   or, where Playwright or Debian's chromium is not installed, says so and answers with
   ``yimi approve`` (the phone's device key); checks that the local SMTP server received the
   mail exactly once and that the outcome reached the glasses;
5. types one exchange in Chinese on the mac (``yimi say --bundle MAC``): "我不吃什么？" — the
   hub recalls the English "I don't eat cilantro" from step 1 across languages and answers
   in Chinese — and "把牛奶加到购物清单" (milk onto the shopping list);
6. prints the mac's replica of the timeline (``yimi timeline --bundle MAC``) and checks it
   holds the same entries as the hub's.

Every line printed comes from what the processes did: their logs, the hub's timeline
(``hub.db``), the gateway's audit log (gates and receipts) and the SMTP server. Each step
has a deadline; a step that misses it ends the demo with exit 1 and the reason (plus the
tail of the log that explains it). Every process is stopped at the end — also on Ctrl-C
or SIGTERM — and the demo checks that none is left.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from demo.companion import Missing, missing
from protos.clock import now_ms
from worlds import ports

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# numpy and hardware.pcm (which imports it) are imported where audio is made: `yimi`
# builds its parser from this module for every command

REPO = Path(__file__).resolve().parent.parent
EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130

STEP_TIMEOUT_S = 60.0
"""default seconds one step may take (``--step-timeout``)"""
MODEL_STEP_FACTOR = 4.0
"""steps that load or convert models the first time get this many step timeouts"""
POLL_S = 0.05
STOP_TIMEOUT_S = 10.0

OWNER_VOICE = ("en-gb-x-rp", 45, 150)
"""the synthetic owner: espeak-ng voice, pitch, speed. Whisper tiny.en is sensitive to the
silence a speech segment starts and ends with; at this voice it transcribed both demo
sentences right with 150-450 ms of silence before and after (measured: 15 of 15 paddings
each), where the en-us voice turned "my colleague" into "my car leave". Whisper base (the hub's
default now) heard "meeting notes" as "meeting notice" at 130 and 140 words per minute on
this machine's CPU, and mostly right at 150 (a "notice" is read from the notes as well)."""
ENROL_TAKES = (
    ("The quick brown fox jumps over the lazy dog near the river bank.", 45, 140),
    ("Please set a reminder for my dentist appointment next Tuesday morning.", 47, 130),
    ("I would like a cup of coffee with oat milk and no sugar today.", 43, 150),
    ("Turn off the lights in the living room when the movie starts tonight.", 46, 135),
    ("My favourite season is autumn, when the leaves change their colour.", 44, 145),
)
"""the owner speaking on different occasions (small pitch and speed changes)"""
REMEMBER = "Yimi, remember I don't eat cilantro."
EMAIL = "Yimi, e-mail the meeting notes to my colleague."
RECALL_ZH = "我不吃什么？"
"""typed in Chinese on the mac: recalls the English fact of step 1 across languages"""
LIST_ZH = "把牛奶加到购物清单"
LIST_ITEM_ZH = "牛奶"
CJK = re.compile(r"[\u4e00-\u9fff]")
"""a Chinese character (the reply must be in Chinese)"""
COLLEAGUE = {
    "name": "Dana Reyes",
    "email": "dana.reyes@colleague.test",
    "aliases": ["colleague", "my colleague"],
}
OWNER_FROM = "owner@home.test"
MEETING_NOTES = (
    "Meeting notes: ship the voice demo on Friday; Sam reviews the gateway; next sync Monday at 10."
)
DEVICES = (("glasses", "glasses"), ("phone", "phone"), ("mac", "mac"))
COMPANION = "phone-browser"
"""the name the browser companion pairs as (a second ``phone`` device)"""
COMPANION_IS = "phone companion (browser)"
"""the browser companion, as the narration names it"""
OUTCOMES = {
    "allow": "allowed",
    "rewrite": "allowed (the gateway set trusted arguments itself)",
    "confirm": "ask the owner",
    "block": "blocked",
}
"""the gateway's decision outcomes, as the narration says them"""
WHO_WIDTH = 8
TEXT_WIDTH = 160


class StepFailed(Exception):
    """A step missed its deadline or saw something wrong (the message says which)."""


class Interrupted(Exception):
    """SIGTERM (Ctrl-C arrives as KeyboardInterrupt)."""


class StopSignals:
    """Ctrl-C (KeyboardInterrupt) and SIGTERM (:class:`Interrupted`), raised in the main
    thread where it is — except inside :meth:`held`, which raises them when it ends.

    A signal raises at whatever line the main thread is on: inside ``Popen()`` after the fork
    the child would run on with no ``Popen`` object for the demo to stop and reap. Held, the
    signal is raised once the child is on the demo's books. (Blocking the signals instead
    would not do: the kernel hands a signal to any thread that does not block it, the SMTP
    server's for one, and Python raises it in the main thread all the same.)"""

    def __init__(self) -> None:
        self._depth = 0
        self._pending: int | None = None

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self._depth:
            self._pending = self._pending or signum
            return
        self._raise(signum)

    @staticmethod
    def _raise(signum: int) -> None:
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Interrupted()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            pending, self._pending = self._pending, None
            if pending is not None and not self._depth:
                self._raise(pending)


# ---------------------------------------------------------------------- small helpers
def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env["YIMI_MDNS_INTERFACES"] = "127.0.0.1"  # zeroconf, if anything asks, stays local
    env["HF_HUB_OFFLINE"] = "1"  # models come from installed packages, never the network
    return env


def clip(text: str, width: int = TEXT_WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join("    | " + line for line in text.splitlines()[-lines:])


def synthesize(text: str, pitch: int = OWNER_VOICE[1], speed: int = OWNER_VOICE[2]) -> Any:
    from hardware.espeak import Voice
    from hardware.espeak import synthesize as speak

    return speak(text, Voice(OWNER_VOICE[0], pitch=pitch, speed=speed))


def descendants(roots: list[int]) -> dict[int, str]:
    """pid → start time (``/proc/PID/stat`` field 22) of every live descendant of ``roots``
    (and the roots themselves)."""
    parent: dict[int, int] = {}
    started: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parent[int(entry.name)] = int(fields[1])
        started[int(entry.name)] = fields[19]
    out = {p: started[p] for p in roots if p in started}
    grew = True
    while grew:
        grew = False
        for pid, ppid in parent.items():
            if ppid in out and pid not in out:
                out[pid] = started[pid]
                grew = True
    return out


def children(pid: int) -> list[int]:
    """The live (not zombie) child processes of ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def still_alive(pids: dict[int, str]) -> list[int]:
    alive = []
    for pid, start in pids.items():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        rest = stat.rsplit(")", 1)[1].split()
        if rest[19] == start and rest[0] != "Z":
            alive.append(pid)
    return alive


# ---------------------------------------------------------------------- processes
@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None


@dataclass
class Spoken:
    """A clip handed to the :class:`Microphone`; ``start_wall`` (``time.time()``) of its
    first sample on the microphone's real-time clock, once ``started`` is set."""

    samples: npt.NDArray[np.int16]
    started: threading.Event = field(default_factory=threading.Event)
    start_wall: float = 0.0

    def wall_at(self, index: int) -> float:
        """When sample ``index`` of the clip was "spoken"."""
        from hardware.pcm import SAMPLE_RATE

        return self.start_wall + index / SAMPLE_RATE


class Microphone:
    """Feeds raw 16 kHz PCM to a process's stdin in real time, as a microphone would:
    silence, and the clips queued with :meth:`say` when their turn comes (each starts on a
    frame boundary)."""

    def __init__(self, stdin: Any) -> None:
        self.stdin = stdin
        self._queue: list[Spoken] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="demo-microphone", daemon=True)
        self._thread.start()

    def say(self, samples: npt.NDArray[np.int16]) -> Spoken:
        import numpy as np

        clip = Spoken(samples.astype(np.int16))
        with self._lock:
            self._queue.append(clip)
        return clip

    def _run(self) -> None:
        import numpy as np

        from hardware.pcm import FRAME_SAMPLES, SAMPLE_RATE

        silence = np.zeros(FRAME_SAMPLES, dtype=np.int16).tobytes()
        pending = b""
        t0 = time.monotonic()
        t0_wall = time.time()
        sent = 0
        try:
            while not self._stop.is_set():
                if not pending:
                    with self._lock:
                        clip = self._queue.pop(0) if self._queue else None
                    if clip is not None:
                        pending = clip.samples.tobytes()
                        clip.start_wall = t0_wall + sent / SAMPLE_RATE
                        clip.started.set()
                chunk = pending[: FRAME_SAMPLES * 2] if pending else silence
                pending = pending[len(chunk) :]
                chunk += bytes(FRAME_SAMPLES * 2 - len(chunk))
                self.stdin.write(chunk)
                self.stdin.flush()
                sent += FRAME_SAMPLES
                wait = t0 + sent / SAMPLE_RATE - time.monotonic()
                if wait > 0:
                    self._stop.wait(wait)
        except (BrokenPipeError, ValueError, OSError) as exc:
            if not self._stop.is_set():
                self.error = exc

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        with contextlib.suppress(OSError, ValueError):
            self.stdin.close()


# ---------------------------------------------------------------------- SMTP
@dataclass
class Mail:
    sender: str
    recipients: list[str]
    subject: str
    body: str
    size: int
    at_ms: int


class LocalSmtp:
    """The local test SMTP server (aiosmtpd in its own thread) standing in for the outside
    mail server: it accepts every message and keeps it."""

    def __init__(self) -> None:
        self.port = 0
        """The server's port, known once started."""
        self.received: list[Mail] = []
        self._lock = threading.Lock()
        self._controller: Any = None

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        from email import message_from_bytes

        msg = message_from_bytes(envelope.content)
        body = msg.get_payload(decode=True) if not msg.is_multipart() else b""
        text = body.decode(errors="replace") if isinstance(body, bytes) else ""
        mail = Mail(
            str(envelope.mail_from),
            [str(r) for r in envelope.rcpt_tos],
            str(msg.get("Subject", "")),
            text,
            len(envelope.content),
            now_ms(),
        )
        with self._lock:
            self.received.append(mail)
        return "250 OK message accepted"

    def messages(self) -> list[Mail]:
        with self._lock:
            return list(self.received)

    def start(self) -> None:
        from worlds.fakes import smtp_controller

        self._controller = smtp_controller(self)
        self._controller.start()
        self.port = self._controller.port

    def stop(self) -> None:
        if self._controller is not None:
            with contextlib.suppress(Exception):
                self._controller.stop()
            self._controller = None


# ---------------------------------------------------------------------- watching
class LineTail:
    """New complete lines of a growing log file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def lines(self) -> list[str]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        self.offset += len(data)
        data = self.partial + data
        *complete, self.partial = data.split(b"\n")
        return [line.decode(errors="replace") for line in complete]


@dataclass
class Card:
    card_id: str
    title: str
    preview: list[str] = field(default_factory=list)
    complete: bool = False


@dataclass
class Seen:
    """What the demo has observed so far (filled by :class:`Watcher`)."""

    wakes: int = 0
    requests: list[str] = field(default_factory=list)
    """utterance ids the glasses sent"""
    heard: dict[str, str] = field(default_factory=dict)
    """utterance id → text on the hub's timeline"""
    said: dict[str, list[str]] = field(default_factory=dict)
    """device name → reply texts shown (and spoken) there"""
    typed: dict[str, list[str]] = field(default_factory=dict)
    """device name → replies ``yimi say`` printed there (the demo narrates them itself; the
    device's daemon may show the same reply too, and that is not told twice)"""
    notices: dict[str, list[str]] = field(default_factory=dict)
    """device name → other lines the device showed (card notices, activity)"""
    cards: dict[str, Card] = field(default_factory=dict)
    audit: list[dict[str, Any]] = field(default_factory=list)
    mails: list[Mail] = field(default_factory=list)
    ambient: list[str] = field(default_factory=list)
    activity: list[str] = field(default_factory=list)
    """activity entries (background tasks) on the hub's timeline"""


class Watcher:
    """Polls every source — device logs, the hub's timeline, the audit log, the SMTP
    server — and narrates each new event as one line."""

    WAKE = re.compile(r"wake word \(score ([\d.]+), ([-\d.]+) dBFS\)")
    REQUEST = re.compile(
        r"request (u-\S+) queued \((\w[\w-]*), (\d+) ms, verdict (\w+) ([-\d.]+), (\d+) audio"
    )
    AMBIENT = re.compile(r"ambient speech \S+ ms \((\w+)\)")
    CARD = re.compile(r"^\[(\w+)\] card (\S+)\s+(.*?)\s+\(expires in")
    SHOWN = re.compile(r"^\[(\w+)\] (.*)$")

    def __init__(self, demo: Demo) -> None:
        self.demo = demo
        self.seen = Seen()
        self._tails: dict[str, LineTail] = {}
        self._audit = LineTail(demo.home / "gateway" / "audit" / "audit.jsonl")
        self._timeline_seq = 0
        self._mails = 0
        self._card: dict[str, Card | None] = {}

    def follow(self, name: str, log: Path) -> None:
        self._tails[name] = LineTail(log)

    # ------------------------------------------------------------------ polling
    def poll(self) -> None:
        """Narrate what is new, in causal order: what the devices heard and sent, then what
        the hub put on its timeline, then gates, receipts and mail (by time), then what the
        devices showed."""
        later: list[tuple[str, str]] = []
        for name, t in self._tails.items():
            shown = False
            for line in t.lines():
                shown = shown or line.startswith("[") or self._card.get(name) is not None
                if shown:
                    later.append((name, line))
                else:
                    self._device_line(name, line)
        events: list[tuple[int, int, Any]] = []
        for at_ms, text in self._timeline():
            events.append((at_ms, len(events), text))
        for line in self._audit.lines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if isinstance(rec, dict):
                    events.append((int(rec.get("ts_ms") or 0), len(events), rec))
        mails = self.demo.smtp.messages()
        for mail in mails[self._mails :]:
            events.append((mail.at_ms, len(events), mail))
        self._mails = len(mails)
        for _, _, event in sorted(events, key=lambda e: (e[0], e[1])):
            if isinstance(event, Mail):
                self._mail(event)
            elif isinstance(event, str):
                self._activity(event)
            else:
                self._audit_record(event)
        for name, line in later:
            self._device_line(name, line)

    def _mail(self, mail: Mail) -> None:
        self.seen.mails.append(mail)
        self.demo.say(
            "mail",
            f"the local test SMTP server received a message from {mail.sender} to "
            f"{', '.join(mail.recipients)}: subject {mail.subject!r}, {mail.size} bytes",
        )
        self.demo.say("", f'body: "{clip(mail.body, 120)}"')

    def until(self, check: Callable[[], object], what: str, timeout: float) -> Any:
        """Poll until ``check()`` is truthy; StepFailed after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            value = check()
            if value:
                return value
            self.demo.check_processes()
            if time.monotonic() > deadline:
                raise StepFailed(f"{what}: nothing within {timeout:g} s")
            time.sleep(POLL_S)

    # ------------------------------------------------------------------ sources
    def _device_line(self, name: str, line: str) -> None:
        demo, seen = self.demo, self.seen
        card = self._card.get(name)
        if card is not None and not card.complete:
            if line.startswith("answer: "):
                card.complete = True
                self._card[name] = None
                demo.say(name, f"card {card.card_id}: {card.title}")
                for p in card.preview:
                    demo.say("", clip(p, 120))
                return
            card.preview.append(line)
            return
        if m := self.WAKE.search(line):
            seen.wakes += 1
            demo.say(name, f'wake word "Yimi" heard (score {float(m[1]):.2f}, {m[2]} dBFS)')
            return
        if m := self.REQUEST.search(line):
            seen.requests.append(m[1])
            demo.say(
                name,
                f"request {m[1]} sent: {int(m[3]) / 1000:.1f} s of speech ({m[6]} bytes FLAC), "
                f"its own voiceprint check says {m[4]} ({float(m[5]):.2f})",
            )
            return
        if m := self.AMBIENT.search(line):
            seen.ambient.append(m[1])
            demo.say(name, f"speech outside a request window kept on the device ({m[1]})")
            return
        if m := self.CARD.match(line):
            self._card[name] = Card(m[2], m[3])
            seen.cards[m[2]] = self._card[name]  # type: ignore[assignment]
            return
        if m := self.SHOWN.match(line):
            device, text = m[1], m[2]
            if text.startswith("hub: "):
                reply = text[len("hub: ") :]
                seen.said.setdefault(device, []).append(reply)
                if reply in seen.typed.get(device, []):
                    return
                speaks = device == "glasses"
                demo.say(device, f'{"says" if speaks else "shows"}: "{clip(reply)}"')
            else:
                seen.notices.setdefault(device, []).append(text)
                demo.say(device, f"shows: {clip(text)}")
            return
        if " ERROR " in line or line.startswith("Traceback"):
            demo.say(name, f"error: {clip(line)}")

    def _timeline(self) -> list[tuple[int, str]]:
        """Narrate new utterances; return new activity entries (time, text) to be told in
        time order with the gateway's records."""
        activity: list[tuple[int, str]] = []
        path = self.demo.home / "hub.db"
        if not path.exists():
            return activity
        try:
            rows = self.demo.hub_query(
                "SELECT seq, id, kind, text, meta, received_ms FROM timeline WHERE seq > ? "
                "ORDER BY seq",
                self._timeline_seq,
            )
        except Exception:  # the hub is writing its schema: next time
            return activity
        for seq, uid, kind, text, meta_text, received_ms in rows:
            self._timeline_seq = int(seq)
            if kind == "activity":
                activity.append((int(received_ms), str(text)))
                continue
            if kind != "utterance":
                continue
            try:
                meta = json.loads(str(meta_text))
            except ValueError:
                meta = {}
            self.seen.heard[str(uid)] = str(text)
            if meta.get("source") != "voice":
                continue
            if meta.get("error"):
                self.demo.say("hub", f"could not understand {uid}: {meta.get('error_text')}")
                continue
            asr = f"{meta.get('asr_model', '?')}, {float(meta.get('asr_ms', 0)):.0f} ms"
            self.demo.say(
                "hub",
                f'heard "{clip(str(text), 100)}" ({asr}); speaker: scope {meta.get("scope")} '
                f"({meta.get('scope_reason')}, {float(meta.get('scope_score') or 0):.2f}); "
                f"on the timeline as #{seq}",
            )
        return activity

    def _activity(self, text: str) -> None:
        self.seen.activity.append(text)
        self.demo.say("activity", f"on every device's timeline: {clip(text)}")

    def _audit_record(self, rec: dict[str, Any]) -> None:
        self.seen.audit.append(rec)
        kind, data = rec.get("kind"), rec.get("data") or {}
        if kind == "decision":
            tool = f"{data.get('package')}.{data.get('tool')}"
            target = f" → {data['target']}" if data.get("target") else ""
            card = f" (card {data['card_id']})" if data.get("card_id") else ""
            why = f" ({data['reason']})" if data.get("reason") else ""
            outcome = str(data.get("outcome"))
            self.demo.say(
                "gate",
                f"{tool}: effect {data.get('effect')}{target} → "
                f"{OUTCOMES.get(outcome, outcome)}{why}{card}",
            )
        elif kind == "receipt":
            r = data.get("receipt") or {}
            effects = r.get("effects") or []
            states = ", ".join(
                f"{e.get('kind')} {e.get('state')}" for e in effects if isinstance(e, dict)
            )
            self.demo.say(
                "receipt",
                f"{r.get('package')}.{r.get('tool')} {r.get('status')}"
                + (f" [{states}]" if states else "")
                + (f": {clip(str(r.get('summary')), 110)}" if r.get("summary") else ""),
            )
        elif kind == "approval":
            who = self.demo.names.get(str(data.get("device")), data.get("device"))
            self.demo.say(
                "gate",
                f"answer to card {data.get('card_id')} from the {who}: {data.get('outcome')}"
                + (f" ({data.get('reason')})" if data.get("reason") else ""),
            )


# ---------------------------------------------------------------------- the demo
def cli_approval(card_id: str, no_browser: Missing | None) -> str:
    """The narration's line for a card approved with ``yimi approve``: why not in the
    browser companion, and how to get the browser."""
    why = no_browser.what if no_browser else "a browser"
    return (
        f"approves card {card_id} on the phone (yimi approve): the {COMPANION_IS} needs "
        f"{why}, not installed here; scripts/setup installs it"
    )


class Demo:
    def __init__(self, root: Path, out: TextIO, *, step_timeout: float) -> None:
        self.root = root
        self.out = out
        self.step_timeout = step_timeout
        self.home = root / "home"
        self.mqtt_port = ports.port()
        self.grpc_port = ports.port()
        self.web_port = ports.port()
        self.smtp = LocalSmtp()
        self.procs: list[Proc] = []
        self.bundles: dict[str, Path] = {}
        self.names: dict[str, str] = {}
        """device id → name"""
        self.watch = Watcher(self)
        self.mic: Microphone | None = None
        self.started = time.monotonic()
        self._step_started = self.started
        self.leftover: list[int] = []
        self.signals = StopSignals()
        self.no_browser: Missing | None = missing()
        """why the card is answered with ``yimi approve`` (None: in the browser companion)"""
        self.companion: Proc | None = None

    # ------------------------------------------------------------------ output
    def say(self, who: str, text: str) -> None:
        print(f"  {who:<{WHO_WIDTH}} {text}", file=self.out, flush=True)

    @contextlib.contextmanager
    def step(self, title: str) -> Iterator[None]:
        self._step_started = time.monotonic()
        print(f"\n{title}", file=self.out, flush=True)
        yield
        took = time.monotonic() - self._step_started
        print(f"  {'':<{WHO_WIDTH}} ({took:.1f} s)", file=self.out, flush=True)

    @property
    def hub_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def web_url(self) -> str:
        """The phone companion's page (plain HTTP on loopback: a secure context)."""
        return f"http://localhost:{self.web_port}/"

    def hub_query(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        from storage.sqlite import read_rows

        return read_rows(self.home / "hub.db", sql, *params, busy_ms=2000)

    # ------------------------------------------------------------------ processes
    def spawn(self, name: str, *args: str, stdin: bool = False, module: str = "cli") -> Proc:
        """Start ``python -m MODULE ARGS`` (``yimi ARGS`` by default) as one of the demo's
        processes, its output in ``logs/NAME.log``."""
        from hub.mesh.broker import die_with_parent

        log = self.root / "logs" / f"{name}.log"
        log.parent.mkdir(exist_ok=True)
        with log.open("ab") as fh, self.signals.held():
            popen = subprocess.Popen(
                [sys.executable, "-m", module, *args],
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=child_env(),
                cwd=self.root,
                start_new_session=True,
                preexec_fn=die_with_parent(os.getpid()),
            )
            proc = Proc(name, popen, log)
            self.procs.append(proc)
        self.watch.follow(name, log)
        return proc

    def yimi(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        """Run ``yimi ARGS`` to completion (StepFailed on a non-zero exit or the deadline)."""
        from hub.mesh.broker import die_with_parent

        child: subprocess.Popen[str] | None = None
        try:
            with self.signals.held():
                child = subprocess.Popen(
                    [sys.executable, "-m", "cli", *args],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=child_env(),
                    cwd=self.root,
                    preexec_fn=die_with_parent(os.getpid()),
                )
            stdout, stderr = child.communicate(timeout=timeout)
        except BaseException as exc:  # the deadline, or Ctrl-C: the child goes, and is reaped
            if child is not None:
                child.kill()
                child.wait()
            if isinstance(exc, subprocess.TimeoutExpired):
                why = f"'yimi {args[0]} {args[1]}' took longer than {timeout:g} s"
                raise StepFailed(why) from None
            raise
        done = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
        if done.returncode != 0:
            said = (done.stderr.strip() or done.stdout.strip()).splitlines()
            raise StepFailed(
                f"'yimi {' '.join(args[:2])}' failed (exit {done.returncode}): "
                + (said[-1] if said else "no output")
            )
        return done

    def check_processes(self) -> None:
        for proc in self.procs:
            if not proc.alive():
                raise StepFailed(
                    f"the {proc.name} process exited ({proc.popen.returncode}); its log:\n"
                    + tail(proc.log)
                )
        if self.mic is not None and self.mic.error is not None:
            raise StepFailed(f"the glasses stopped taking audio: {self.mic.error}")

    def proc(self, name: str) -> Proc:
        return next(p for p in self.procs if p.name == name)

    def text_of(self, name: str) -> str:
        try:
            return self.proc(name).log.read_text(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        """Stop everything this demo started and make sure nothing is left."""
        if self.mic is not None:
            self.mic.close()
        if self.companion is not None and self.companion.alive():
            # the companion closes its browser (and Playwright's driver) on SIGTERM; sent
            # to its process group, the driver would die before it could
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.companion.popen.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.companion.popen.wait(timeout=STOP_TIMEOUT_S)
        known = {p.popen.pid for p in self.procs}
        for pid in children(os.getpid()):
            if pid not in known:  # a one-shot command (yimi, espeak-ng) a Ctrl-C cut off
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
        tree = descendants(sorted(known))
        for proc in reversed(self.procs):
            if proc.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.popen.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait(timeout=STOP_TIMEOUT_S)
        self.smtp.stop()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while (left := still_alive(tree)) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.leftover = left

    # ------------------------------------------------------------------ steps
    def run(self) -> None:
        self.setup()
        self.start_hub()
        self.start_devices()
        self.enrol_voice()
        self.start_glasses()
        self.remember()
        self.email()
        self.chinese()
        self.timeline_on_mac()

    def setup(self) -> None:
        from provisioning.bundle import flash
        from provisioning.home import Home
        from provisioning.identity import short_fingerprint

        with self.step("Setup (in a temporary folder, loopback only)"):
            home = Home.init(
                self.home,
                mqtt_port=self.mqtt_port,
                grpc_port=self.grpc_port,
                hub_host="127.0.0.1",
            )
            self.say(
                "home",
                f"created: id {home.home_id}, hub key fingerprint "
                f"{short_fingerprint(home.fingerprint)}",
            )
            for name, profile in DEVICES:
                bundle = flash(home, profile_name=profile, name=name, out=self.root / name)
                self.bundles[name] = bundle.path
                self.names[bundle.device_id] = name
            self.names["hub"] = "hub"
            self.say(
                "devices",
                "glasses, phone and mac flashed (own keys, certificates, the hub pinned)",
            )
            (self.home / "contacts.yaml").write_text(json.dumps([COLLEAGUE], indent=2) + "\n")
            self.say(
                "contacts",
                f'address book: "my colleague" is {COLLEAGUE["name"]} <{COLLEAGUE["email"]}>',
            )
            self.smtp.start()
            packages = {
                "memory": {},
                "messaging": {
                    "config": {
                        "SMTP_HOST": "127.0.0.1",
                        "SMTP_PORT": str(self.smtp.port),
                        "SMTP_FROM": OWNER_FROM,
                    }
                },
            }
            from hub.capabilities.settings import only

            (self.home / "packages.yaml").write_text(json.dumps(only(packages), indent=2) + "\n")
            self.say(
                "mail",
                f"local test SMTP server on 127.0.0.1:{self.smtp.port} (aiosmtpd) stands in "
                "for the outside mail server; the messaging package sends there",
            )

    def start_hub(self) -> None:
        with self.step("The hub (a real process: broker, gRPC, gateway, brain)"):
            t0 = time.monotonic()
            from cli.hub import hub_is_up, loopback_hub_args

            hub = self.spawn(
                "hub",
                *loopback_hub_args(self.home, self.mqtt_port, self.grpc_port),
                "--no-advertise",
                "--web-port",
                str(self.web_port),
            )
            self.watch.until(
                lambda: hub_is_up(self.text_of("hub")), "the hub to come up", self.step_timeout
            )
            self.say(
                "hub",
                f"up in {time.monotonic() - t0:.1f} s (pid {hub.popen.pid}): MQTT "
                f"127.0.0.1:{self.mqtt_port}, gRPC 127.0.0.1:{self.grpc_port}, no zeroconf; "
                f"web pages (phone companion, dashboard) {self.web_url}",
            )

    def start_edge(self, name: str, *extra: str, stdin: bool = False) -> Proc:
        proc = self.spawn(
            name,
            "edge",
            "run",
            "--bundle",
            str(self.bundles[name]),
            "--hub",
            self.hub_target,
            *extra,
            stdin=stdin,
        )
        return proc

    def start_devices(self) -> None:
        with self.step("The phone and the mac (real processes, online)"):
            for name in ("phone", "mac"):
                self.start_edge(name)
            for name in ("phone", "mac"):
                self.watch.until(
                    lambda n=name: "connected to hub" in self.text_of(n),  # type: ignore[misc]
                    f"the {name} to connect to the hub",
                    self.step_timeout,
                )
            self.start_companion()
            self.say("phone", "online: shows the owner's confirmation cards")
            self.yimi(
                "note",
                "add",
                "--bundle",
                str(self.bundles["mac"]),
                MEETING_NOTES,
                timeout=self.step_timeout,
            )
            self.say("mac", f'online; the owner writes a note on the mac: "{MEETING_NOTES}"')
            self.watch.until(self._hub_has_notes, "the note to reach the hub", self.step_timeout)
            self.say("hub", "has the note (replicated from the mac)")

    # ------------------------------------------------------------------ the browser companion
    def start_companion(self) -> None:
        """Start the browser companion and have it pair (it does so while the voice is
        enrolled and the glasses load their models: :meth:`companion_paired` waits)."""
        if self.no_browser is not None:
            return
        code = self.yimi("hub", "pair-code", "--home", str(self.home), timeout=self.step_timeout)
        self.companion = self.spawn(
            "companion",
            "--url",
            self.web_url,
            "--name",
            COMPANION,
            "--shots",
            str(self.root),
            f"--marker=--yimi-demo={self.root}",  # its chromium is found by the folder
            stdin=True,
            module="demo.companion",
        )
        self.tell_companion(f"pair {code.stdout.strip()}")
        self.say(
            "browser",
            f"the {COMPANION_IS}: headless Chromium (Playwright) opens {self.web_url} and pairs "
            "with a one-time code (yimi hub pair-code)",
        )

    def tell_companion(self, command: str) -> None:
        assert self.companion is not None and self.companion.popen.stdin is not None
        try:
            self.companion.popen.stdin.write(command.encode() + b"\n")
            self.companion.popen.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            self.check_processes()  # it exited: say so, with its log
            raise StepFailed(f"the {COMPANION_IS} does not take commands") from None

    def companion_line(self, pattern: str, what: str) -> re.Match[str]:
        found: re.Match[str] = self.watch.until(
            lambda: re.search(pattern, self.text_of("companion"), re.M), what, self.step_timeout
        )
        return found

    def companion_paired(self) -> None:
        if self.companion is None:
            return
        self.companion_line(rf"^paired {re.escape(COMPANION)}$", f"the {COMPANION_IS} to pair")
        browser = self.companion_line(r"^browser (.*)$", f"the {COMPANION_IS}'s browser")[1]
        rows = self.hub_query_registry(
            "SELECT device_id, profile FROM devices WHERE name = ?", COMPANION
        )
        if not rows:
            raise StepFailed(f"the {COMPANION_IS} paired but is not in the hub's registry")
        device_id, profile = str(rows[0][0]), str(rows[0][1])
        self.names[device_id] = COMPANION_IS
        self.say(
            "browser",
            f'paired as "{COMPANION}" ({profile} profile, device {device_id}): its own '
            f"non-extractable WebCrypto Ed25519 key; {browser}; its passkey in a virtual "
            "authenticator (DevTools' WebAuthn; the demo pays nothing)",
        )

    def hub_query_registry(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        from storage.sqlite import read_rows

        return read_rows(self.home / "registry.db", sql, *params, busy_ms=2000)

    def approve(self, card: Card) -> None:
        """The owner approves ``card``: in the browser companion, or (no browser here)
        with ``yimi approve`` on the phone — and the narration says which, and why."""
        if self.companion is None:
            self.say("owner", cli_approval(card.card_id, self.no_browser))
            done = self.yimi(
                "approve",
                "--bundle",
                str(self.bundles["phone"]),
                "--hub",
                self.hub_target,
                card.card_id,
                timeout=self.step_timeout,
            )
            if "executed" not in done.stdout:
                raise StepFailed(f"the approval was not executed: {done.stdout.strip()!r}")
            return
        cid = re.escape(card.card_id)
        self.say(
            "owner",
            f"approves card {card.card_id} in the {COMPANION_IS}: taps Approve; the page "
            "signs the card's action hash with its own key",
        )
        self.tell_companion(f"approve {card.card_id}")
        shown = self.companion_line(rf"^card {cid} shown (.*)$", "the card in the browser")
        shot = self.companion_line(r"^screenshot (.*)$", "the card's screenshot")
        self.say(
            "browser",
            f'shows card {card.card_id}: "{clip(shown[1], 100)}" (screenshot '
            f"{Path(shot[1]).name} in the folder)",
        )
        answered = self.companion_line(
            rf"^answered {cid} (\S+) (.*)$", "the browser's answer to the card"
        )
        self.say("browser", f'the page shows: "{clip(answered[2], 100)}"')
        if answered[1] != "approved":
            raise StepFailed(f"the {COMPANION_IS} could not approve the card: {answered[2]!r}")

    def _hub_has_notes(self) -> bool:
        from sync.replicas import ReplicaSet

        try:
            notes = ReplicaSet(self.home / "replicas").notes()
        except Exception:  # a document being written right now: look again
            return False
        return any(n.text == MEETING_NOTES for n in notes)

    def enrol_voice(self) -> None:
        from hardware.audio import write_wav

        with self.step("The owner's voice (five synthesized espeak-ng takes, enrolled)"):
            folder = self.root / "voice"
            folder.mkdir()
            files = []
            for i, (phrase, pitch, speed) in enumerate(ENROL_TAKES):
                files.append(
                    str(write_wav(folder / f"take-{i}.wav", synthesize(phrase, pitch, speed)))
                )
            done = self.yimi(
                "voice",
                "enroll",
                "--bundle",
                str(self.bundles["glasses"]),
                "--hub",
                self.hub_target,
                *files,
                timeout=self.step_timeout * MODEL_STEP_FACTOR,
            )
            summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
            m = re.search(r"(\d+) samples enrolled with (\S+) \(line ([\d.]+)\)", summary)
            detail = f"{m[1]} takes, speaker model {m[2]}, line {m[3]}" if m else summary
            self.say("voice", f"enrolled on the glasses channel: {detail}")

    def start_glasses(self) -> None:
        with self.step("The glasses (a real process hearing a microphone stream)"):
            out = self.root / "glasses-speaker.wav"
            t0 = time.monotonic()
            proc = self.start_edge("glasses", "--audio", "-", "--out", str(out), stdin=True)
            assert proc.popen.stdin is not None
            self.mic = Microphone(proc.popen.stdin)
            self.watch.until(
                lambda: "hearing -" in self.text_of("glasses"),
                "the glasses to load their models and listen",
                self.step_timeout * MODEL_STEP_FACTOR,
            )
            vp = self.bundles["glasses"] / "state" / "voiceprint.json"
            self.watch.until(vp.exists, "the owner's voiceprint to reach the glasses", 30)
            self.say(
                "glasses",
                f"listening after {time.monotonic() - t0:.1f} s (voice activity, wake word "
                "'Yimi', speaker model; the owner's voiceprint from the hub); replies are "
                f"spoken into {out.name}",
            )
            self.companion_paired()

    def _speak(self, sentence: str) -> None:
        import numpy as np

        from hardware.pcm import SAMPLE_RATE

        assert self.mic is not None
        speech = synthesize(sentence)
        pad = np.zeros(SAMPLE_RATE // 2, dtype=np.int16)
        tail_ = np.zeros(SAMPLE_RATE * 3 // 2, dtype=np.int16)
        self.mic.say(np.concatenate([pad, speech, tail_]))
        self.say("owner", f'says to the glasses: "{sentence}" ({len(speech) / SAMPLE_RATE:.1f} s)')

    def _request(self, before: int) -> str:
        seen = self.watch.seen
        uid: str = self.watch.until(
            lambda: len(seen.requests) > before and seen.requests[-1],
            "the glasses to hear the request",
            self.step_timeout,
        )
        self.watch.until(lambda: uid in seen.heard, "the hub to transcribe it", self.step_timeout)
        return uid

    def _reply(self, device: str, before: int, what: str, pattern: str) -> str:
        seen = self.watch.seen
        text: str = self.watch.until(
            lambda: len(seen.said.get(device, [])) > before and seen.said[device][-1],
            f"{what} on the {device}",
            self.step_timeout,
        )
        if not re.search(pattern, text, re.I):
            raise StepFailed(f"{what} on the {device} was {text!r}; expected /{pattern}/")
        return text

    def _receipt(self, tool: str, status: str) -> dict[str, Any]:
        def find() -> dict[str, Any] | None:
            for rec in self.watch.seen.audit:
                r = (rec.get("data") or {}).get("receipt") or {}
                if rec.get("kind") == "receipt" and f"{r.get('package')}.{r.get('tool')}" == tool:
                    if r.get("status") == status:
                        return dict(r)
            return None

        found: dict[str, Any] = self.watch.until(
            find, f"a '{status}' receipt for {tool} in the audit log", self.step_timeout
        )
        return found

    def remember(self) -> None:
        with self.step(f'1. "{REMEMBER}"'):
            seen = self.watch.seen
            before = (len(seen.requests), len(seen.said.get("glasses", [])))
            self._speak(REMEMBER)
            uid = self._request(before[0])
            if "cilantro" not in seen.heard[uid].lower():
                raise StepFailed(f"the hub heard {seen.heard[uid]!r}, not the sentence")
            self._receipt("memory.commit", "succeeded")
            self._reply("glasses", before[1], "the reply", r"remember.*cilantro")
            self._acked(uid)

    def _acked(self, uid: str) -> None:
        def acked() -> str | None:
            # the glasses ACK a piece as they show it, then again once it is spoken
            chunks = self.hub_query(
                "SELECT acked, final FROM reply_chunks WHERE utterance_id = ? ORDER BY idx", uid
            )
            if chunks and chunks[-1][1] and all(c[0] == "played" for c in chunks):
                return "played"
            return None

        state = self.watch.until(acked, "the glasses' ACK of the reply", self.step_timeout)
        self.say("hub", f"the glasses ACKed every piece of the reply ({state}): now it is said")

    def email(self) -> None:
        with self.step(f'2. "{EMAIL}"'):
            seen = self.watch.seen
            before = (len(seen.requests), len(seen.said.get("glasses", [])))
            self._speak(EMAIL)
            uid = self._request(before[0])
            if not re.search(r"not(es|ice)", seen.heard[uid], re.I):
                raise StepFailed(f"the hub heard {seen.heard[uid]!r}, not the sentence")
            self._receipt("messaging.send_email", "waiting")
            card: Card = self.watch.until(
                lambda: next(
                    (c for c in seen.cards.values() if c.complete and "email" in c.title), None
                ),
                "the e-mail's card on the phone",
                self.step_timeout,
            )
            self._reply("glasses", before[1], "the reply", r"approv|phone|card")
            if self.watch.seen.mails:
                raise StepFailed("a mail was sent before the owner approved the card")
            said = len(seen.said.get("glasses", []))
            self.approve(card)
            self._receipt("messaging.send_email", "succeeded")
            mail: Mail = self.watch.until(
                lambda: next(iter(self.watch.seen.mails), None),
                "the mail at the local test SMTP server",
                self.step_timeout,
            )
            if COLLEAGUE["email"] not in mail.recipients:
                raise StepFailed(f"the mail went to {mail.recipients}, not {COLLEAGUE['email']}")
            if "Sam reviews the gateway" not in mail.body:
                raise StepFailed(f"the mail's body is not the meeting notes: {mail.body!r}")
            self._reply("glasses", said, "the outcome", r"sent")
            if len(self.watch.seen.mails) != 1:
                raise StepFailed(f"the mail server got {len(self.watch.seen.mails)} mails, not 1")

    def chinese(self) -> None:
        with self.step("3. In Chinese, typed on the mac (yimi say --bundle MAC)"):
            reply = self._typed_zh(RECALL_ZH)
            if "cilantro" not in reply.lower():
                raise StepFailed(f'the reply {reply!r} does not recall "I don\'t eat cilantro"')
            self.say("", "(recalled across languages: the fact was remembered in English)")
            reply = self._typed_zh(LIST_ZH)
            if LIST_ITEM_ZH not in reply:
                raise StepFailed(f"the reply {reply!r} does not name {LIST_ITEM_ZH}")

    def _typed_zh(self, sentence: str) -> str:
        """The owner types ``sentence`` on the mac; the hub's reply there, in Chinese."""
        self.say("owner", f'types on the mac: "{sentence}"')
        done = self.yimi(
            "say",
            "--bundle",
            str(self.bundles["mac"]),
            "--hub",
            self.hub_target,
            "--timeout",
            f"{self.step_timeout:g}",
            sentence,
            timeout=self.step_timeout + 10,
        )
        # other lines are earlier turns' replies: "(update) …", "(queued earlier) …"
        ours = [x for x in done.stdout.splitlines() if x.strip() and not x.startswith("(")]
        reply = ours[-1].strip() if ours else ""
        self.watch.seen.typed.setdefault("mac", []).append(reply)
        self.watch.poll()  # the gate and the receipt of the turn
        self.say("mac", f'shows the reply: "{clip(reply)}"')
        if not CJK.search(reply):
            raise StepFailed(f"the reply to {sentence!r} on the mac is not in Chinese: {reply!r}")
        return reply

    def timeline_on_mac(self) -> None:
        with self.step("4. The same timeline on the mac (yimi timeline --bundle MAC)"):
            hub_rows = {
                (int(seq), str(text))
                for seq, text in self.hub_query("SELECT seq, text FROM timeline")
            }

            def mac_rows() -> tuple[str, set[tuple[int, str]]] | None:
                done = self.yimi(
                    "timeline", "--bundle", str(self.bundles["mac"]), timeout=self.step_timeout
                )
                rows = set()
                for line in done.stdout.splitlines()[1:]:
                    parts = line.split(None, 5)
                    if len(parts) == 6 and parts[0].isdigit():
                        rows.add((int(parts[0]), parts[5]))
                return (done.stdout, rows) if hub_rows <= rows else None

            shown, _rows = self.watch.until(
                mac_rows, "the mac's replica to hold the hub's timeline", self.step_timeout
            )
            for line in shown.rstrip().splitlines():
                print(f"    {line}", file=self.out)
            ids = [d for d in self.names if d != "hub" and d in shown]
            if ids:
                named = ", ".join(f"{d} is the {self.names[d]}" for d in ids)
                self.say("", f"({named}: a device's replica knows other devices by id)")
            self.say(
                "mac",
                f"holds the same {len(hub_rows)} entries as the hub (same seq, same text)",
            )


# ---------------------------------------------------------------------- command
def run_demo(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    root = Path(tempfile.mkdtemp(prefix="yimi-demo-", dir=args.folder))
    demo = Demo(root, out, step_timeout=args.step_timeout)
    status = EXIT_OK
    failure = ""

    previous = signal.signal(signal.SIGTERM, demo.signals.handle)
    # Ctrl-C stops the demo however it was started: a shell starts what it puts in the
    # background (`cmd &` in a script, a runner's loop) with SIGINT ignored, and the demo,
    # inheriting that, would run to its end through every Ctrl-C
    previous_int = signal.signal(signal.SIGINT, demo.signals.handle)
    print(
        "yimi demo: the hub, the glasses, the phone and the mac as real processes on this "
        f"machine (127.0.0.1 only)\n  folder   {root}"
        + ("" if args.keep else " (removed at the end; --keep keeps it)"),
        file=out,
        flush=True,
    )
    try:
        demo.run()
    except StepFailed as exc:
        status, failure = EXIT_FAILED, str(exc)
    except (KeyboardInterrupt, Interrupted):
        status, failure = EXIT_INTERRUPTED, "interrupted"
    except Exception as exc:  # a setup error (YimiError, OSError…): one line, no traceback
        status, failure = EXIT_FAILED, f"{type(exc).__name__}: {exc}"
    finally:
        # a second Ctrl-C or SIGTERM must not cut the clean-up short
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            demo.close()
        finally:
            signal.signal(signal.SIGINT, previous_int)
            signal.signal(signal.SIGTERM, previous)
    took = time.monotonic() - demo.started
    if demo.leftover:
        print(f"yimi demo: processes outlived the demo and were killed: {demo.leftover}", file=out)
        status = status or EXIT_FAILED
    if args.keep or status == EXIT_FAILED:
        print(f"\nthe folder is kept: {root} (logs in {root / 'logs'})", file=out)
    else:
        shutil.rmtree(root, ignore_errors=True)
    if status == EXIT_OK:
        print(
            f"\ndemo finished in {took:.1f} s: every step passed; all "
            f"{len(demo.procs)} processes stopped, none left behind.",
            file=out,
            flush=True,
        )
    else:
        hub_log = root / "logs" / "hub.log"
        if status == EXIT_FAILED and hub_log.exists():
            print(f"the hub's last log lines:\n{tail(hub_log, 8)}", file=out)
        print(f"\nyimi demo: {failure}", file=sys.stderr, flush=True)
        print(f"demo stopped after {took:.1f} s; every process it started is stopped.", file=out)
    return status


def cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(args)


def add_commands(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    sp = command(
        sub,
        "demo",
        cmd_demo,
        "run the whole assistant on this machine (hub, glasses, phone, mac; loopback only) "
        "with synthesized speech, narrated step by step",
    )
    sp.add_argument(
        "--step-timeout",
        type=float,
        default=STEP_TIMEOUT_S,
        help=f"seconds a step may take (model loading: {MODEL_STEP_FACTOR:g}×; default "
        f"{STEP_TIMEOUT_S:g})",
    )
    sp.add_argument("--keep", action="store_true", help="keep the demo's folder and logs")
    sp.add_argument("--folder", type=Path, help="make the demo's folder in here (default: /tmp)")
