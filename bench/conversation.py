"""Bench: a spoken request's end of speech → its reply on the device, stage by stage.

Run::

    .venv/bin/python bench/conversation.py [--turns 20] [--block 5] [--quick] [--keep]

Everything runs on loopback, in a temporary folder that is removed afterwards: a real hub
process (``python -m cli hub run``, its mosquitto, the gateway and the memory package)
and a real glasses process (``yimi edge run --audio - --out null``) whose "microphone" is
this script writing espeak-ng speech in real time (``demo.narrated.Microphone``), exactly as in
``yimi demo``. The owner's voice is enrolled first, so every turn is an owner turn.

Two brains answer, in alternating blocks of ``--block`` turns (so drift of a noisy machine
hits both alike), switched between turns by an owner-signed model change (signed here with
the phone bundle's device key, as the phone would):

* **rule-based** — the built-in rule-based model (the offline default);
* **fake endpoint** — the LLM brain (pydantic-ai) against ``tests/fake_openai.py``, a FAKE
  OpenAI-compatible server on real HTTP in this process: for each turn it asks for one
  ``memory__recall`` tool call, then answers with a sentence (two chat completions, one
  gateway call — the same shape as the rule-based model's turns).

The spoken requests (``--lang en``, the default) alternate "Yimi, remember I don't eat
cilantro." and "Yimi, what do you remember about cilantro?". With ``--lang zh`` every request
is Chinese: the owner's espeak-ng "Yimi," (the wake word) and then a natural Mandarin clip
that ships in pytest-audioeval ("你好世界"; espeak-ng's Mandarin is unintelligible to Whisper,
and no Chinese synthesiser exists here — ``tests/speech.py``). The hub hears it with its
multilingual Whisper (language auto) and answers in Chinese: the rule-based model's honest
"这个我还做不到…" (a greeting is no request it knows); the fake endpoint answers in Chinese
after its recall. The bench prints how many turns the hub heard as Chinese.

A turn is timed from the **end of speech** — the instant the last voiced sample of the clip
was "spoken" on the microphone's real-time clock — to the **reply on the device** — the
glasses' first ACK (``at_ms``, stamped by the device) of the reply's final chunk: the
glasses ACK ``RENDERED`` as they show a reply on their display, before its speech is
synthesised, and ``PLAYED`` once it is spoken; **spoken** is timed to that second ACK (the
reply's ``played`` delivery). The stages come from what the processes recorded, never from
estimates:

- **device** — end of speech → the request queued on the glasses (the VAD's end-of-speech
  hang-over, the speaker embedding, FLAC): the glasses' log line (ms);
- **asr** — Whisper's time on the audio: the timeline entry's meta ``asr_ms`` (when the hub
  used its recognition of the device's preview, meta ``asr_preview``: the wait that was left
  once the audio was in; the bench counts those turns);
- **admission** — the rest until the turn is on the timeline (MQTT, the audio pieces, FLAC
  decode, the voiceprint scope, the timeline write): ``timeline.received_ms``;
- **gateway** — the gateway calls of the turn's own task (``u-…``, ``u-…#main``,
  ``u-…#lookup``), decision → receipt: the audit log, by trace id and task id;
- **brain** — admission → the first reply chunk made, less the gateway time:
  ``reply_chunks.created_ms``;
- **delivery** — first chunk made → final chunk ACKed by the device (sealed ``REPLY``,
  shown, the ACK): ``reply_chunks.acked_ms``; its speech (synthesised by the English Piper
  voice or espeak-ng into the null sink) is in **spoken**, not in the stages.

The stages add up to the total exactly. p50 and p99 of the total (and of the first chunk on
the device, and of the spoken reply), the median of every stage, and the ratio fake
endpoint / rule-based are printed. The hub and the glasses are stopped on every exit path
and the bench checks that no mosquitto of its home is left; children get
``PR_SET_PDEATHSIG``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script

from bench.hubproc import HubProcess, child_env, die_with_parent, finish
from bench.stats import median, percentile
from demo.narrated import ENROL_TAKES, LineTail, Microphone, Spoken, synthesize
from hardware.pcm import SAMPLE_RATE
from provisioning.bundle import Bundle, flash
from provisioning.home import Home
from tests.fake_openai import FakeOpenAI, Reply, Request, calls, text
from worlds import ports

SENTENCES = ("Yimi, remember I don't eat cilantro.", "Yimi, what do you remember about cilantro?")
ZH_SENTENCES = {"Yimi，你好世界": "nihao_shijie"}
"""``--lang zh``: what is said → the natural Mandarin clip after the wake word"""
FAKE_ANSWERS = {
    "en": "Fake model: you told me you don't eat cilantro.",
    "zh": "（假模型）你好！你说过你不吃香菜。",
}
WAKE_GAP_S = 0.3
"""silence between the wake word and a Chinese clip (as in tests/test_understanding_mesh.py)"""
MODELS = ("rule-based", "fake endpoint")
STAGES = ("device", "asr", "admission", "brain", "gateway", "delivery")
TURN_TIMEOUT_S = 60.0
READY_TIMEOUT_S = 240.0
"""seconds for a child that loads models the first time"""
LEAD_S, TAIL_S = 0.5, 1.5
"""silence before and after each sentence on the microphone"""
VOICED = 300
"""|sample| above which espeak-ng's output counts as speech (its end trims to this)"""
REQUEST = re.compile(r"^(\S+ \S+) INFO edge_agent\.pipeline: request (u-\S+) queued")


# ---------------------------------------------------------------------------- statistics
def ratio(a: float, b: float) -> str:
    return f"{a / b:5.2f}×" if b and not math.isnan(a) and not math.isnan(b) else "    -"


@dataclass
class TurnTimes:
    model: str
    sentence: str
    reply: str
    total: float
    first: float
    """end of speech → first chunk ACKed"""
    spoken: float
    """end of speech → the reply spoken (its ``played`` delivery)"""
    stages: dict[str, float]
    preview: bool = False
    """the transcript was the hub's recognition of the device's preview (speculative)"""
    language: str = ""
    """the language the hub heard (the timeline entry's meta)"""


@dataclass
class Results:
    turns: list[TurnTimes] = field(default_factory=list)

    def of(self, model: str) -> list[TurnTimes]:
        return [t for t in self.turns if t.model == model]


# ---------------------------------------------------------------------------- the fake
def fake_responder(lang: str) -> Callable[[Request], Reply]:
    """The main agent: recall first, then answer in ``lang`` (each turn ends with a tool
    result)."""

    def respond(req: Request) -> Reply:
        last = req.messages[-1] if req.messages else {}
        if last.get("role") == "tool":
            return text(FAKE_ANSWERS[lang])
        return calls(("memory__recall", {"query": "cilantro"}))

    return respond


def request_samples(sentence: str) -> np.ndarray:
    """The samples of a request: espeak-ng in the owner's voice, or for a Chinese one the
    owner's "Yimi," and the natural Mandarin clip (:data:`ZH_SENTENCES`)."""
    clip = ZH_SENTENCES.get(sentence)
    if clip is None:
        return synthesize(sentence)
    from tests.speech import chinese_clip

    gap = np.zeros(int(WAKE_GAP_S * SAMPLE_RATE), np.int16)
    return np.concatenate([synthesize("Yimi,"), gap, chinese_clip(clip)]).astype(np.int16)


class FakeServer:
    """``tests/fake_openai.FakeOpenAI`` on its own event loop in a thread."""

    def __init__(self, responder: Callable[[Request], Reply]) -> None:
        self.responder = responder
        self.base_url = ""
        self.requests = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="fake-openai", daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            async with FakeOpenAI(self.responder) as fake:
                self.base_url = fake.base_url
                self._ready.set()
                await self._stop.wait()
                self.requests = len(fake.chat_requests())

        asyncio.run(main())

    def __enter__(self) -> FakeServer:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the fake OpenAI-compatible server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)


# ---------------------------------------------------------------------------- the world
class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.home_path = root / "home"
        self.mqtt_port, self.grpc_port = ports.port(), ports.port()
        self.hub = HubProcess(root, self.home_path, self.mqtt_port, self.grpc_port)
        self.glasses: subprocess.Popen[bytes] | None = None
        self.glasses_log = root / "glasses.log"
        self.mic: Microphone | None = None
        self.bundles: dict[str, Bundle] = {}
        self._tail = LineTail(self.glasses_log)
        self.requests: dict[str, float] = {}
        """utterance id → ms its request was queued on the glasses"""
        self.order: list[str] = []
        self.current = "rule-based"

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        home = Home.init(
            self.home_path, mqtt_port=self.mqtt_port, grpc_port=self.grpc_port, hub_host="127.0.0.1"
        )
        for name in ("glasses", "phone"):
            self.bundles[name] = flash(home, profile_name=name, name=name, out=self.root / name)
        from hub.capabilities.settings import only

        (self.home_path / "packages.yaml").write_text(json.dumps(only({"memory": {}})) + "\n")

    def yimi(self, *args: str, timeout: float) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "cli", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=child_env(),
            cwd=self.root,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"yimi {' '.join(args[:2])} failed: {done.stderr.strip()}")
        return done.stdout

    def enrol(self) -> None:
        from hardware.audio import write_wav

        files = []
        for i, (phrase, pitch, speed) in enumerate(ENROL_TAKES):
            path = self.root / f"take-{i}.wav"
            files.append(str(write_wav(path, synthesize(phrase, pitch, speed))))
        glasses = str(self.bundles["glasses"].path)
        self.yimi(
            "voice",
            "enroll",
            "--bundle",
            glasses,
            "--hub",
            self.hub.target,
            *files,
            timeout=READY_TIMEOUT_S,
        )

    def start_glasses(self) -> None:
        parent = os.getpid()
        with self.glasses_log.open("wb") as fh:
            self.glasses = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "cli.main",
                    "edge",
                    "run",
                    "--bundle",
                    str(self.bundles["glasses"].path),
                    "--hub",
                    self.hub.target,
                    "--audio",
                    "-",
                    "--out",
                    "null",
                ],
                stdin=subprocess.PIPE,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=child_env(),
                cwd=self.root,
                start_new_session=True,
                preexec_fn=lambda: die_with_parent(parent),
            )
        assert self.glasses.stdin is not None
        self.mic = Microphone(self.glasses.stdin)
        self.wait(
            lambda: "hearing -" in self.glasses_log.read_text(errors="replace"),
            READY_TIMEOUT_S,
            "the glasses to listen",
        )
        vp = self.bundles["glasses"].state_dir / "voiceprint.json"
        self.wait(vp.exists, 30, "the voiceprint on the glasses")

    def stop(self) -> list[str]:
        if self.mic is not None:
            self.mic.close()
        g = self.glasses
        if g is not None and g.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(g.pid, signal.SIGTERM)
            try:
                g.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(g.pid, signal.SIGKILL)
                g.wait(timeout=15)
        return self.hub.stop()

    # ------------------------------------------------------------------ polling
    def wait(self, check: Callable[[], object], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            self._read_glasses()
            value = check()
            if value:
                return value
            for name, proc in (("hub", self.hub.popen), ("glasses", self.glasses)):
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"the {name} exited ({proc.returncode})")
            if self.mic is not None and self.mic.error is not None:
                raise RuntimeError(f"the microphone stream broke: {self.mic.error}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
            time.sleep(0.02)

    def _read_glasses(self) -> None:
        for line in self._tail.lines():
            m = REQUEST.match(line)
            if m:
                at = dt.datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp() * 1000
                self.requests[m[2]] = at
                self.order.append(m[2])

    def query(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        from storage.sqlite import read_rows

        return read_rows(self.home_path / "hub.db", sql, *params, busy_ms=2000)

    # ------------------------------------------------------------------ models
    def use(self, model: str, fake_url: str) -> None:
        """An owner-signed model change, applied by the hub's brain before its next turn."""
        if model == self.current:
            return
        from hub.brain.providers import ProviderStore, sign_change

        home = Home.load(self.home_path)
        config: dict[str, Any] = {}
        if model == "fake endpoint":
            config = {
                "roles": {
                    "brain": [{"base_url": fake_url, "model": "brain-model"}],
                    "subagent": [{"base_url": fake_url, "model": "sub-model"}],
                },
                # every turn to the model, even one the offline intents know (the default
                # would answer "remember …" locally and the endpoint would see nothing)
                "prefer_local": False,
            }
        phone = self.bundles["phone"]
        store = ProviderStore.for_home(home)
        try:
            change = store.propose(config)
            store.confirm(
                change.change_id,
                sign_change(change.body, phone.keys.sign),
                device_id=phone.device_id,
                sign_pk=bytes(phone.keys.sign_pk),
                scopes=tuple(phone.certificate.scopes),
            )
        finally:
            store.close()
        self.current = model

    # ------------------------------------------------------------------ one turn
    def turn(self, model: str, sentence: str) -> TurnTimes:
        assert self.mic is not None
        speech = request_samples(sentence)
        voiced = np.nonzero(np.abs(speech.astype(np.int32)) > VOICED)[0]
        end_index = int(LEAD_S * SAMPLE_RATE) + int(voiced[-1]) + 1
        clip = np.concatenate(
            [
                np.zeros(int(LEAD_S * SAMPLE_RATE), np.int16),
                speech,
                np.zeros(int(TAIL_S * SAMPLE_RATE), np.int16),
            ]
        )
        seen = len(self.order)
        spoken: Spoken = self.mic.say(clip)
        uid: str = self.wait(
            lambda: self.order[seen] if len(self.order) > seen else None,
            TURN_TIMEOUT_S,
            "the request",
        )
        if not spoken.started.is_set():
            raise RuntimeError("a request came before the sentence was spoken")
        end_ms = spoken.wall_at(end_index) * 1000

        def done() -> list[tuple[Any, ...]] | None:
            rows = self.query(
                "SELECT idx, final, created_ms, acked_ms, text FROM reply_chunks "
                "WHERE utterance_id = ? ORDER BY idx",
                uid,
            )
            if not (rows and rows[-1][1] and all(r[3] for r in rows)):
                return None
            played = self.query(
                "SELECT d.at_ms FROM deliveries d JOIN replies r ON r.id = d.reply_id "
                "WHERE r.utterance_id = ? AND d.state = 'played'",
                uid,
            )
            return [*rows, played[0]] if played else None

        *chunks, (played_ms,) = self.wait(done, TURN_TIMEOUT_S, "the reply's ACKs")
        ((received, meta_text, trace),) = self.query(
            "SELECT received_ms, meta, trace_id FROM timeline WHERE id = ?", uid
        )
        meta = json.loads(meta_text)
        first_made = float(chunks[0][2])
        final_acked = float(chunks[-1][3])
        gateway = self._gateway_ms(str(trace), uid, first_made)
        asr = float(meta.get("asr_ms") or 0.0)
        queued = self.requests[uid]
        stages = {
            "device": queued - end_ms,
            "asr": asr,
            "admission": float(received) - queued - asr,
            "gateway": gateway,
            "brain": first_made - float(received) - gateway,
            "delivery": final_acked - first_made,
        }
        return TurnTimes(
            model,
            sentence,
            " ".join(str(c[4]) for c in chunks),
            final_acked - end_ms,
            float(chunks[0][3]) - end_ms,
            float(played_ms) - end_ms,
            stages,
            meta.get("asr_preview") is True,
            str(meta.get("language") or ""),
        )

    def _gateway_ms(self, trace: str, task_id: str, until_ms: float) -> float:
        """Decision → receipt of each call made before ``until_ms`` by the turn's own task
        (``u-…``, or the brain's ``u-…#main`` / ``u-…#lookup``; not its sub-agents)."""
        decided: dict[str, int] = {}
        total = 0.0
        path = self.home_path / "gateway" / "audit" / "audit.jsonl"
        for line in path.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            data = rec.get("data") or {}
            task = str(data.get("task_id") or "")
            if rec.get("trace_id") != trace or task.split("#", 1)[0] != task_id:
                continue
            ts = int(rec.get("ts_ms") or 0)
            if ts > until_ms:
                continue
            if rec.get("kind") == "decision":
                decided[str(data.get("call_id"))] = ts
            elif rec.get("kind") == "receipt" and str(data.get("call_id")) in decided:
                total += ts - decided.pop(str(data.get("call_id")))
        return total


# ---------------------------------------------------------------------------- report
def report(results: Results, said: tuple[str, ...]) -> None:
    head = (
        f"{'':<16} {'n':>3} {'p50':>8} {'p99':>8} {'first p50':>10} {'spoken p50':>10}  "
        + "".join(f"{s:>10}" for s in STAGES)
    )
    print(
        "\nend of speech → reply on the glasses, shown (ms; stages are medians; spoken: the"
        " reply's PLAYED ACK)"
    )
    print(head)
    med: dict[str, dict[str, float]] = {}
    for model in MODELS:
        turns = results.of(model)
        totals = [t.total for t in turns]
        firsts = [t.first for t in turns]
        med[model] = {s: median([t.stages[s] for t in turns]) for s in STAGES}
        med[model]["total"] = median(totals)
        med[model]["first"] = median(firsts)
        med[model]["spoken"] = median([t.spoken for t in turns])
        med[model]["p99"] = percentile(totals, 0.99)
        print(
            f"{model:<16} {len(turns):>3} {percentile(totals, 0.5):>8.0f} "
            f"{percentile(totals, 0.99):>8.0f} {median(firsts):>10.0f} "
            f"{med[model]['spoken']:>10.0f}  " + "".join(f"{med[model][s]:>10.0f}" for s in STAGES)
        )
    a, b = med["fake endpoint"], med["rule-based"]
    print(
        f"{'fake / rule':<16} {'':>3} {ratio(a['total'], b['total']):>8} "
        f"{ratio(a['p99'], b['p99']):>8} {ratio(a['first'], b['first']):>10} "
        f"{ratio(a['spoken'], b['spoken']):>10}  "
        + "".join(f"{ratio(a[s], b[s]):>10}" for s in STAGES)
    )
    used = [t.preview for m in MODELS for t in results.of(m)]
    print(f"asr from the device's preview (speculative): {sum(used)} of {len(used)} turns")
    heard = [t.language for m in MODELS for t in results.of(m)]
    print(
        "languages heard: "
        + ", ".join(f"{la or '?'} {heard.count(la)}" for la in sorted(set(heard)))
    )
    shares = {s: b[s] / b["total"] * 100 for s in STAGES} if b["total"] else {}
    if shares:
        print(
            "rule-based: share of the median total: "
            + ", ".join(f"{s} {shares[s]:.0f} %" for s in STAGES)
        )
    print("\nreplies (first turn of each kind):")
    for model in MODELS:
        for sentence in said:
            t = next((x for x in results.of(model) if x.sentence == sentence), None)
            if t is not None:
                print(f"  {model:<14} {sentence!r}\n  {'':<14} → {t.reply[:150]!r}")


# ---------------------------------------------------------------------------- main
def sentences(lang: str) -> tuple[str, ...]:
    return tuple(ZH_SENTENCES) if lang == "zh" else SENTENCES


def run(args: argparse.Namespace, root: Path) -> Results:
    world = World(root)
    results = Results()
    try:
        world.setup()
        with FakeServer(fake_responder(args.lang)) as fake:
            took = world.hub.start()
            print(f"hub up in {took:.1f} s; enrolling the owner's voice …", flush=True)
            world.enrol()
            world.start_glasses()
            print(
                f"glasses listening; {args.turns} turns per brain in blocks of {args.block} "
                f"(fake endpoint at {fake.base_url})",
                flush=True,
            )
            warmup = [m for m in MODELS for _ in range(args.warmup)]
            measured = [MODELS[(i // args.block) % 2] for i in range(args.turns * 2)]
            plan = warmup + measured
            said = sentences(args.lang)
            for i, model in enumerate(plan):
                world.use(model, fake.base_url)
                sentence = said[i % len(said)]
                t = world.turn(model, sentence)
                warm = i < len(warmup)
                if not warm:
                    results.turns.append(t)
                print(
                    f"  {i + 1:>3}/{len(plan)} {model:<14} {t.total:7.0f} ms"
                    + (" (warm-up, not counted)" if warm else "")
                    + f"  {sentence}",
                    flush=True,
                )
        print(f"fake endpoint: {fake.requests} chat completions served over HTTP")
        if fake.requests == 0:
            raise RuntimeError("the fake endpoint answered no turn: its block was not the LLM")
    finally:
        for w in world.stop():
            print(f"warning: {w}", file=sys.stderr)
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=20, help="measured turns per brain")
    p.add_argument("--block", type=int, default=5, help="turns per block before switching")
    p.add_argument("--warmup", type=int, default=2, help="uncounted turns per brain first")
    p.add_argument("--quick", action="store_true", help="4 turns per brain (a smoke run)")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    p.add_argument(
        "--lang", choices=("en", "zh"), default="en", help="the requests' language (module doc)"
    )
    args = p.parse_args()
    if args.quick:
        args.turns, args.block, args.warmup = 4, 2, 1
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="yimi-bench-conversation-"))
    print(
        f"bench/conversation.py on {platform.machine()} with {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; folder {root}",
        flush=True,
    )
    status = 0
    try:
        results = run(args, root)
        report(results, sentences(args.lang))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        status = 130
    except RuntimeError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        status = 1
    return finish(root, keep=args.keep or status == 1, started=started, status=status)


if __name__ == "__main__":
    sys.exit(main())
