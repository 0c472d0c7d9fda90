"""Bench: the device's hearing — VAD, wake word, the whole edge pipeline, speaker embedding
and voiceprint EER — and the hub's speech recognition.

Run::

    .venv/bin/python bench/edge_pipeline.py [--quick]
        [--sections vad,hangover,wake,pipeline,speaker,asr]
        [--cache DIR]

Everything runs on one thread (onnxruntime intra-op 1, OMP/OpenBLAS/MKL 1; the ASR section
also measures 2 threads). The audio is synthesized at run time with espeak-ng and cached
(``--cache``, default ``$TMPDIR/yimi-bench-edge``):

* **non-wake corpus**: ≥ 30 min (``--quick``: 2 min) of ~100 everyday sentences, each by a
  random voice (espeak-ng accents × variants × pitch 10–95 × speed 130–190, none of the
  wake templates' voices), 0.3–2.5 s apart, with white or brown noise at 10–30 dB SNR and a
  -60 dBFS floor;
* **wake corpus**: ≥ 50 (``--quick``: 20) "Yimi, <request>" utterances by held-out random
  voices, laid out and noised the same way;
* **mixed audio**: 10 min (``--quick``: 1.5 min) of the voiceprint owner's "Yimi, <request>"
  (``tests/speech.py`` OWNER_TAKES), the same by other people (``tests/speech.py`` OTHERS),
  everyday sentences by random voices and by the owner, silence and plain noise (see MIX);
* **voiceprint trials**: 120 (``--quick``: 24) utterances by the owner's five takes and 120
  by other voices (half ``tests/speech.py`` OTHERS, a quarter random espeak-ng voices, a
  quarter festival voices made from real recordings when festival is installed), two thirds
  with noise.

The vad and wake sections stream the corpora in 32 ms frames through what the device runs:
Silero VAD + the segmenter, and the wake detector only while the segmenter is in speech
(reset at each speech start, fed the start's pre-roll + speech, then every frame until the
end), as ``edge_agent/pipeline.py`` does.

Sections:

``vad``
    ms per 32 ms frame (median, p90) and RTF, per 60 s chunk (median); speech fraction.
``hangover``
    the segmenter's end-of-speech hang-over against false cut-offs: for 250-700 ms, how
    many utterances of the wake corpus and of the natural clips (English and Mandarin,
    counting with pauses between the numbers; each twice, noised) were ended before their
    last loud sample, and the wait from that sample to the end of speech (median, p90). The
    VAD's probabilities are computed once and replayed per hang-over.
``wake``
    RTF of the detector (per fed second and per second of the whole stream); false
    accepts per hour on the non-wake corpus; false rejects on the wake corpus; both for the
    synthesized default templates (24 espeak-ng voices) and for templates enrolled from
    three takes of one voice (tested on two other takes of that voice); and a threshold
    sweep (from each segment's score trace, hits 1 s apart).
``pipeline``
    the real code path: a glasses bundle of a fresh home (temp dir), its catalog's models
    loaded by ``edge_agent.ears.load_ears``, the owner's voiceprint stored in its state, and
    ``edge_agent.pipeline.VoicePipeline`` hearing the mixed audio as a WAV file
    (``hardware.audio.WavSource``, unpaced) — VAD → wake → segment → speaker embedding →
    local verdict → FLAC — into :class:`NullUplink`, a null sender standing in for the
    node's mesh link. RTF (wall and process CPU), per-stage ms (wall and model-thread CPU,
    per frame or per request), what came out against what was said, and the same audio
    through the bench's bare VAD and VAD + wake loops as same-run baselines.
``speaker``
    GE2E embedding ms per utterance (median, p90); voiceprint EER (centroid of five clean
    owner takes, as enrolment computes it; the calibrated score of each trial to it, as the
    verdicts use it), the threshold at the EER, and the verified / uncertain / unmatched
    rates at the 0.65 and 0.45 lines, per group of other voices.
``asr``
    faster-whisper tiny.en int8 (``models.asr.WhisperTranscriber``) RTF per utterance
    (median, p90) with 1 and 2 threads on ≥ 10 noisy owner utterances (``--quick``: 3), and
    the word error rate (wake word left out, numbers spelled out).

Anchors (published, other hardware): Porcupine RTF 0.06 on a Raspberry Pi 3;
openWakeWord's targets < 5 % false rejects and < 0.5 false accepts per hour. The machine's
load average is printed: other processes share the cores, so wall times are upper bounds
(the CPU figures are not inflated by waiting).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import asyncio
import hashlib
import json
import platform
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from google.protobuf.message import Message

from edge_agent.ears import load_ears
from edge_agent.pipeline import (
    DeviceVoice,
    Ears,
    Embedding,
    LocalVoiceprint,
    SpeakerEmbedder,
    SpeechDetector,
    SpeechEvent,
    VoicePipeline,
    VoiceprintView,
    WakeFired,
    WakeSpotter,
    verdict_for,
)
from edge_agent.voiceprint import store_voiceprint
from hardware.audio import WavSource
from hardware.espeak import Voice, synthesize
from hardware.pcm import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE, Frame, Samples
from models import voiceprint as vp
from models import wake
from models.asr import WhisperTranscriber, strip_wake
from models.errors import ModelError
from models.vad import Segmenter, SileroVad, SpeechEnd, SpeechStart
from protos import mesh_pb2, voice_pb2
from provisioning.bundle import Bundle, flash
from provisioning.home import Home
from tests import speech

_T = TypeVar("_T")

ANCHORS = {
    "porcupine_rtf_pi3": 0.06,
    "openwakeword_frr": 0.05,
    "openwakeword_fa_per_hour": 0.5,
}

ACCENTS = (
    "en",
    "en-gb-x-rp",
    "en-gb-scotland",
    "en-gb-x-gbclan",
    "en-gb-x-gbcwmd",
    "en-us",
    "en-us-nyc",
    "en-029",
)
VARIANTS = (
    "m1 m2 m3 m4 m5 m6 m7 m8 f1 f2 f3 f4 f5 Alex Alicia Andrea Andy Annie Denis Diogo Gene "
    "Hugo Jacky Lee Marco Mario Michael Mike Nguyen Tweaky adam anika aunty belinda "
    "benjamin boris caleb david ed edward grandma grandpa gustave iven john linda max "
    "michel miguel norbert pablo paul pedro quincy rob robert sandro shelby steph travis "
    "victor zac"
).split()

SENTENCES = (
    "Good morning, how did you sleep?",
    "I think we should leave a bit earlier today.",
    "Can you pass me the salt, please?",
    "The meeting was moved to Thursday afternoon.",
    "My sister is coming over for dinner tonight.",
    "It looks like it is going to rain again.",
    "Did you remember to buy milk and eggs?",
    "The train was twenty minutes late this morning.",
    "We need to call the plumber about the sink.",
    "Turn the music down a little, it is too loud.",
    "What time does the pharmacy close on Sundays?",
    "I finished the book you lent me last week.",
    "The kids have a football match on Saturday.",
    "Let me check my calendar and get back to you.",
    "This soup is delicious, what did you put in it?",
    "The car needs new tyres before the winter.",
    "Have you seen my keys anywhere?",
    "Jimmy said he would bring the dessert.",
    "The garden looks lovely after all that sun.",
    "I will be working from home tomorrow.",
    "Could you open the window, it is warm in here.",
    "We should plan the holiday before prices go up.",
    "The dog needs a walk before it gets dark.",
    "That was the best pizza I have had in years.",
    "I am going to make some tea, do you want a cup?",
    "The printer is out of paper again.",
    "Yes, I know, I will do it after lunch.",
    "You mean the blue one or the green one?",
    "My phone battery is almost empty.",
    "Timmy has a dentist appointment at four.",
    "The neighbours are having a party tonight.",
    "Remember to water the plants on the balcony.",
    "I cannot find the charger for my laptop.",
    "The film starts at half past eight.",
    "Emmy called while you were out.",
    "We are running low on coffee.",
    "The baby is finally asleep.",
    "I need to renew my passport this year.",
    "The bus stop moved to the other side of the road.",
    "Dinner is ready, come and sit down.",
    "I will pick you up at the station.",
    "That sounds like a great idea.",
    "The heating is not working properly.",
    "Yesterday was the longest day of the year.",
    "Please close the door behind you.",
    "She works at the hospital in the city centre.",
    "We watched a documentary about the ocean.",
    "The shop on the corner sells fresh bread.",
    "I have a headache, I am going to lie down.",
    "Mimi is staying with us for the weekend.",
    "The game was cancelled because of the weather.",
    "Can we talk about this later?",
    "I left my umbrella at the office.",
    "The cake needs another ten minutes in the oven.",
    "He plays the piano every evening.",
    "The internet has been slow all day.",
    "You should try the new restaurant downtown.",
    "We are out of toothpaste.",
    "The cat knocked a glass off the table.",
    "My brother is moving to a new flat.",
    "It is too cold to go swimming.",
    "Let us go for a walk after dinner.",
    "I got an email from the school.",
    "That was yummy, thank you.",
    "The windows need cleaning.",
    "Where did you put the scissors?",
    "The concert was sold out.",
    "I am learning to speak Spanish.",
    "We should invite Kimmy and her husband.",
    "The washing machine is making a strange noise.",
    "Do you want rice or potatoes with the fish?",
    "The traffic on the motorway was terrible.",
    "I will be back in five minutes.",
    "The children are playing in the garden.",
    "It is my turn to cook tonight.",
    "Your parcel arrived this afternoon.",
    "The lights in the hallway keep flickering.",
    "I forgot to lock the back door.",
    "Me too, I am really tired.",
    "We have tickets for the theatre on Friday.",
    "The new neighbours seem very friendly.",
    "I need a new pair of running shoes.",
    "Is it raining in the city?",
    "Give me a minute, I am nearly done.",
    "The library closes early on Wednesdays.",
    "Amy and Jim are getting married in June.",
    "The bread is a bit stale.",
    "He left his jacket on the chair.",
    "Happy birthday, I hope you have a lovely day.",
    "The ice cream is in the freezer.",
    "Send a message to the group about Saturday.",
    "I have been thinking about what you said.",
    "There is a spider in the bathroom.",
    "Can you help me carry the shopping?",
    "The meeting ran over by half an hour.",
    "We could take the boat across the lake.",
    "I am not sure that is a good idea.",
    "The leaves are starting to fall.",
    "Your mother phoned about Sunday lunch.",
    "What a beautiful sunset.",
)
"""everyday speech (a few near-misses of the wake word inside, as conversation has them)"""

REQUESTS = (
    "what time is it?",
    "turn on the kitchen lights.",
    "play some music.",
    "set a timer for ten minutes.",
    "what's the weather tomorrow?",
    "remind me to call my mother.",
    "add milk to the shopping list.",
    "read my messages.",
    "how long is my commute?",
    "stop.",
    "turn off the heating.",
    "what's on my calendar today?",
)

OWNER_TAKES = (
    Voice("en-us+m3", pitch=45, speed=165),
    Voice("en-us+m3", pitch=47, speed=150),
    Voice("en-us+m3", pitch=43, speed=175),
    Voice("en-us+m3", pitch=46, speed=158),
    Voice("en-us+m3", pitch=44, speed=170),
)
"""the bench's owner: enrols with the first three takes, tested on the other two"""


# ---------------------------------------------------------------- helpers
def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else 0.0


def median(values: Sequence[float]) -> float:
    return pct(values, 50)


def header(title: str) -> None:
    print(f"\n== {title}")


@dataclass
class Corpus:
    """A long stream with where each utterance is."""

    samples: Samples
    spans: list[tuple[int, int]] = field(default_factory=list)
    """(start, end) sample of each utterance"""
    voices: int = 0
    kinds: list[str] = field(default_factory=list)
    """what each span is (the mixed and voiceprint corpora; empty for the others)"""

    @property
    def seconds(self) -> float:
        return len(self.samples) / SAMPLE_RATE


def _template_voice_names() -> set[str]:
    return {v.name for v in wake.DEFAULT_VOICES} | {v.name for v in OWNER_TAKES}


def random_voice(rng: np.random.Generator, exclude: set[str]) -> Voice:
    while True:
        name = f"{ACCENTS[rng.integers(len(ACCENTS))]}+{VARIANTS[rng.integers(len(VARIANTS))]}"
        if name not in exclude:
            return Voice(name, int(rng.integers(10, 96)), int(rng.integers(130, 191)))


def brown_noise(n: int, rng: np.random.Generator) -> np.ndarray:
    x = np.cumsum(rng.normal(0, 1, n))
    x -= np.convolve(x, np.ones(801) / 801, mode="same")  # no drift below ~20 Hz
    return x / (np.std(x) + 1e-9)


def noisy(x: Samples, rng: np.random.Generator) -> Samples:
    """Speech + white or brown noise at 10–30 dB SNR + a -60 dBFS floor."""
    xs = x.astype(np.float64)
    loud = np.abs(xs) > 300
    rms = float(np.sqrt(np.mean(xs[loud] ** 2))) if loud.any() else 1000.0
    snr = rng.uniform(10, 30)
    n = rng.normal(0, 1, len(xs)) if rng.random() < 0.5 else brown_noise(len(xs), rng)
    xs += n * rms / 10 ** (snr / 20) + rng.normal(0, 32768 * 10 ** (-60 / 20), len(xs))
    return np.clip(np.round(xs), -32768, 32767).astype(np.int16)


def build_corpus(
    texts: Callable[[np.random.Generator], str],
    *,
    seconds: float | None,
    count: int | None,
    seed: int,
    voices: Callable[[np.random.Generator], Voice],
) -> Corpus:
    """Utterances one after another with gaps, noised per utterance (gaps included)."""
    rng = np.random.default_rng(seed)
    parts: list[Samples] = []
    spans: list[tuple[int, int]] = []
    pos, used = 0, set()
    while (seconds is not None and pos < seconds * SAMPLE_RATE) or (
        count is not None and len(spans) < count
    ):
        v = voices(rng)
        used.add(v)
        speech = synthesize(texts(rng), v)
        gap = np.zeros(int(rng.uniform(0.3, 2.5) * SAMPLE_RATE), np.int16)
        piece = noisy(np.concatenate([gap, speech]), rng)
        loud = np.nonzero(np.abs(speech) > 300)[0]
        a, b = (int(loud[0]), int(loud[-1])) if len(loud) else (0, len(speech))
        spans.append((pos + len(gap) + a, pos + len(gap) + b))
        parts.append(piece)
        pos += len(piece)
    tail = noisy(np.zeros(SAMPLE_RATE, np.int16), rng)
    return Corpus(np.concatenate([*parts, tail]), spans, len(used))


def cached(cache: Path, name: str, params: dict[str, object], make: Callable[[], Corpus]) -> Corpus:
    key = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]
    path = cache / f"{name}-{key}.npz"
    if path.exists():
        with np.load(path, allow_pickle=False) as d:
            kinds = [str(k) for k in d["kinds"].tolist()] if "kinds" in d.files else []
            spans = [(int(a), int(b)) for a, b in d["spans"].tolist()]
            return Corpus(d["samples"], spans, int(d["voices"]), kinds)
    t0 = time.perf_counter()
    c = make()
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(
        tmp,
        samples=c.samples,
        spans=np.array(c.spans, np.int64).reshape(-1, 2),
        voices=c.voices,
        kinds=np.array(c.kinds, dtype=np.str_),
    )
    tmp.replace(path)
    print(f"   ({name}: synthesized {c.seconds / 60:.1f} min in {time.perf_counter() - t0:.0f} s)")
    return c


def non_wake_corpus(cache: Path, quick: bool) -> Corpus:
    minutes = 2.0 if quick else 31.0
    exclude = _template_voice_names()
    return cached(
        cache,
        "nonwake",
        {"minutes": minutes, "v": 1, "n": len(SENTENCES), "exclude": sorted(exclude)},
        lambda: build_corpus(
            lambda r: SENTENCES[r.integers(len(SENTENCES))],
            seconds=minutes * 60,
            count=None,
            seed=1,
            voices=lambda r: random_voice(r, exclude),
        ),
    )


def wake_corpus(cache: Path, quick: bool) -> Corpus:
    count = 20 if quick else 60
    exclude = _template_voice_names()
    return cached(
        cache,
        "wake",
        {"count": count, "v": 1, "exclude": sorted(exclude)},
        lambda: build_corpus(
            lambda r: f"{wake.WAKE_WORD}, {REQUESTS[r.integers(len(REQUESTS))]}",
            seconds=None,
            count=count,
            seed=2,
            voices=lambda r: random_voice(r, exclude),
        ),
    )


def owner_corpus(cache: Path, quick: bool, wake_word: bool) -> Corpus:
    count = 12 if quick else 40
    takes = OWNER_TAKES[3:]

    def text(r: np.random.Generator) -> str:
        if wake_word:
            return f"{wake.WAKE_WORD}, {REQUESTS[r.integers(len(REQUESTS))]}"
        return SENTENCES[r.integers(len(SENTENCES))]

    return cached(
        cache,
        "owner-wake" if wake_word else "owner-nonwake",
        {"count": count, "v": 1},
        lambda: build_corpus(
            text,
            seconds=None,
            count=count,
            seed=3 if wake_word else 4,
            voices=lambda r: takes[r.integers(len(takes))],
        ),
    )


# ---------------------------------------------------------------- streaming
@dataclass
class Run:
    """One pass of a corpus through VAD (+ wake)."""

    seconds: float
    vad_s: float = 0.0
    vad_frame_ms: list[float] = field(default_factory=list)
    vad_chunk_rtf: list[float] = field(default_factory=list)
    speech_s: float = 0.0
    wake_s: float = 0.0
    wake_fed_s: float = 0.0
    wake_compute_ms: list[float] = field(default_factory=list)
    hits: list[int] = field(default_factory=list)
    """stream sample where each hit fired"""
    traces: list[tuple[int, list[float]]] = field(default_factory=list)
    """per segment: (first stream sample fed, the score after each embedding frame)"""


def stream(corpus: Corpus, detector: wake.WakeDetector | None) -> Run:
    vad = SileroVad()
    seg = Segmenter(vad)
    run = Run(corpus.seconds)
    x = corpus.samples
    n = len(x) // FRAME_SAMPLES
    chunk_frames = 60_000 // FRAME_MS
    chunk_t = 0.0
    in_speech = False
    trace: list[float] = []
    fed_from = 0

    def feed(samples: Samples, at_sample: int) -> None:
        assert detector is not None
        before = detector.frames_computed
        t0 = time.perf_counter()
        hit = detector.feed(samples)
        dt = time.perf_counter() - t0
        run.wake_s += dt
        run.wake_fed_s += len(samples) / SAMPLE_RATE
        if detector.frames_computed > before:
            run.wake_compute_ms.append(dt * 1000)
            trace.extend(detector.last_scores)
        if hit is not None:
            run.hits.append(at_sample + len(samples))

    for i in range(n):
        frame = x[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES]
        t0 = time.perf_counter()
        events = seg.feed(frame, i * FRAME_MS)
        dt = time.perf_counter() - t0
        run.vad_s += dt
        chunk_t += dt
        run.vad_frame_ms.append(dt * 1000)
        if (i + 1) % chunk_frames == 0:
            run.vad_chunk_rtf.append(chunk_t / 60.0)
            chunk_t = 0.0
        if detector is None:
            continue
        started = False
        for ev in events:
            if isinstance(ev, SpeechStart):
                detector.reset()
                if trace:
                    run.traces.append((fed_from, trace))
                trace = []
                fed_from = (i + 1) * FRAME_SAMPLES - len(ev.samples)
                feed(ev.samples, fed_from)
                started, in_speech = True, True
            else:
                in_speech = False
                run.speech_s += len(ev.samples) / SAMPLE_RATE
        if in_speech and not started:
            feed(frame, i * FRAME_SAMPLES)
    if trace:
        run.traces.append((fed_from, trace))
    return run


def sweep_hits(run: Run, threshold: float) -> list[int]:
    """Hit positions at ``threshold`` from the score traces (1 s apart within a segment)."""
    hits = []
    gap = wake.REFRACTORY_MS // wake.HOP_MS
    for first, trace in run.traces:
        last = -gap - 1
        for k, s in enumerate(trace):
            if s >= threshold and k - last > gap:
                hits.append(first + (k + 1) * wake.HOP)  # the frame's window end
                last = k
    return hits


def detected(spans: list[tuple[int, int]], hits: list[int]) -> int:
    """Utterances with a hit between their start and 1 s after their end."""
    h = np.sort(np.asarray(hits, dtype=np.int64))
    found = 0
    for a, b in spans:
        lo, hi = np.searchsorted(h, a), np.searchsorted(h, b + SAMPLE_RATE)
        found += int(hi > lo)
    return found


def peak_per_utterance(run: Run, spans: list[tuple[int, int]]) -> list[float]:
    """The best score of the segment(s) overlapping each utterance."""
    out = []
    for a, b in spans:
        best = 0.0
        for first, trace in run.traces:
            end = first + (len(trace) + 1) * wake.HOP
            if first <= b + SAMPLE_RATE and end >= a:
                best = max(best, max(trace))
        out.append(best)
    return out


# ---------------------------------------------------------------- sections
def section_vad(cache: Path, quick: bool) -> None:
    header("VAD: Silero v6 (onnxruntime, 1 thread) + segmenter")
    corpus = non_wake_corpus(cache, quick)
    run = stream(corpus, None)
    rtf = run.vad_s / run.seconds
    print(f"audio                      {run.seconds / 60:.1f} min, {len(corpus.spans)} utterances")
    print(
        f"ms per 32 ms frame         median {median(run.vad_frame_ms):.3f}  "
        f"p90 {pct(run.vad_frame_ms, 90):.3f}"
    )
    chunks = run.vad_chunk_rtf or [rtf]
    print(f"RTF                        {rtf:.4f} (median of 60 s chunks {median(chunks):.4f})")
    print(f"anchor                     Porcupine RTF {ANCHORS['porcupine_rtf_pi3']} on a Pi 3")


def _wake_report(
    label: str,
    detector: wake.WakeDetector,
    nonwake: Corpus,
    wakes: Corpus,
    sweep: Sequence[float],
) -> None:
    """Exact counts at the detector's threshold, then a sweep from a non-firing pass."""
    t0 = time.perf_counter()
    threshold = detector.threshold
    neg = stream(nonwake, detector)
    pos = stream(wakes, detector)
    hours = neg.seconds / 3600
    fa = len(neg.hits)
    found = detected(wakes.spans, pos.hits)
    frr = 1 - found / len(wakes.spans)
    rtf_fed = neg.wake_s / max(neg.wake_fed_s, 1e-9)
    rtf_all = neg.wake_s / neg.seconds
    n = len(detector.templates.frames)
    print(f"\n-- {label}: {n} templates, threshold {threshold}")
    print(
        f"non-wake corpus            {neg.seconds / 60:.1f} min, {len(nonwake.spans)} utterances,"
        f" {nonwake.voices} voices; wake fed {neg.wake_fed_s / 60:.1f} min (in speech)"
    )
    print(
        f"wake corpus                {len(wakes.spans)} utterances, {wakes.voices} voices,"
        f" {pos.seconds / 60:.1f} min"
    )
    print(
        f"RTF                        {rtf_fed:.4f} per second fed, {rtf_all:.4f} per second of "
        f"stream; ms per embedding batch median {median(neg.wake_compute_ms):.2f} "
        f"p90 {pct(neg.wake_compute_ms, 90):.2f}"
    )
    print(
        f"false accepts              {fa} in {hours:.2f} h = {fa / hours:.1f} per hour "
        f"(anchor < {ANCHORS['openwakeword_fa_per_hour']})"
    )
    print(
        f"false rejects              {len(wakes.spans) - found} of {len(wakes.spans)} = "
        f"{frr:.1%} (anchor < {ANCHORS['openwakeword_frr']:.0%})"
    )
    # the same streams with a detector that never fires: whole score traces
    detector.threshold = 1.0 - 1e-9
    try:
        neg = stream(nonwake, detector)
        pos = stream(wakes, detector)
    finally:
        detector.threshold = threshold
    peaks = peak_per_utterance(pos, wakes.spans)
    print(
        f"wake utterance best score  median {median(peaks):.3f}  p10 {pct(peaks, 10):.3f}  "
        f"min {min(peaks):.3f}"
    )
    print("sweep (score traces)       threshold  FA/h    FRR")
    for thr in sweep:
        fa_h = len(sweep_hits(neg, thr)) / hours
        fr = 1 - detected(wakes.spans, sweep_hits(pos, thr)) / len(wakes.spans)
        mark = "  <- in use" if abs(thr - threshold) < 1e-9 else ""
        print(f"                           {thr:.3f}      {fa_h:6.1f}  {fr:5.1%}{mark}")
    print(f"({time.perf_counter() - t0:.0f} s)")


def section_wake(cache: Path, quick: bool) -> None:
    header("Wake word: speech-embedding + DTW (onnxruntime, 1 thread), VAD-gated")
    nonwake = non_wake_corpus(cache, quick)
    wakes = wake_corpus(cache, quick)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = wake.build_default_templates(Path(tmp))
        built = time.perf_counter() - t0
        templates = wake.WakeTemplates.load(path)
    print(
        f"default templates          {len(templates.frames)} from "
        f"{len(wake.DEFAULT_VOICES)} English + {len(wake.DEFAULT_VOICES_ZH)} Mandarin espeak-ng "
        f"voices, built in {built:.1f} s"
    )
    detector = wake.WakeDetector(None, templates)
    _wake_report(
        "synthesized default templates, held-out random voices",
        detector,
        nonwake,
        wakes,
        (0.90, 0.91, 0.92, 0.925, 0.93, 0.935, 0.94, 0.95),
    )

    takes = [(v.label, synthesize(wake.WAKE_WORD, v)) for v in OWNER_TAKES[:3]]
    loo = wake.leave_one_out(takes)
    threshold = wake.calibrate(loo)
    owner = wake.build_templates(
        takes, threshold=threshold, source="owner", phases=wake.ENROL_PHASES
    )
    print(
        f"\nowner enrolment            3 takes, leave-one-out "
        f"{', '.join(f'{s:.3f}' for s in loo)} -> threshold {threshold}"
    )
    own = wake.WakeDetector(None, owner)
    _wake_report(
        "owner-enrolled templates; wake corpus: the owner's other takes",
        own,
        nonwake,
        owner_corpus(cache, quick, True),
        (0.90, 0.92, 0.93, 0.94, 0.95, 0.96),
    )
    own_neg = stream(owner_corpus(cache, quick, False), own)
    print(
        f"owner's own everyday speech {own_neg.seconds / 60:.1f} min: "
        f"{len(own_neg.hits)} false accepts"
    )


# ---------------------------------------------------------------- the device rig
OWNER_ENROL = (
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Please set a reminder for my dentist appointment next Tuesday morning.",
    "I would like a cup of coffee with oat milk and no sugar today.",
    "Turn off the lights in the living room when the movie starts tonight.",
    "My favourite season is autumn, when the leaves change their colour.",
)
"""the voiceprint owner's enrolment: one sentence per ``tests/speech.py`` OWNER_TAKES voice
(none of them is said in a trial or in the mixed audio)"""
RIG_START_MS = 1_000_000
"""clock of the mixed audio's first frame"""


@dataclass
class Rig:
    """A glasses bundle of a fresh home (temp dir) with its catalog's real models, loaded as
    ``yimi edge run`` loads them (``edge_agent.ears.load_ears``), and the owner's voiceprint
    (centroid of five takes, line 0.65) stored in its state as the hub would send it."""

    bundle: Bundle
    ears: Ears
    channel: str
    centroid: npt.NDArray[np.float32]
    loo: list[float]
    setup_s: float


_rig: Rig | None = None
_rig_dir: tempfile.TemporaryDirectory[str] | None = None


def rig() -> Rig:
    global _rig, _rig_dir
    if _rig is not None:
        return _rig
    t0 = time.perf_counter()
    _rig_dir = tempfile.TemporaryDirectory(prefix="yimi-bench-edge-")
    root = Path(_rig_dir.name)
    home = Home.init(root / "home")
    flash(home, profile_name="glasses", name="g1", out=root / "bundle")
    bundle = Bundle.load(root / "bundle")
    ears = load_ears(bundle)
    channel = bundle.profile.channel or bundle.name
    segs = []
    for text, voice in zip(OWNER_ENROL, speech.OWNER_TAKES, strict=True):
        e = ears.speaker.embed(synthesize(text, voice))
        segs.append(vp.Segment(e.vector, e.voiced_ms, e.quality, voice.label))
    loo = vp.check_enrolment([], segs, vp.floor_for(ears.speaker.model))
    centroid = vp.centroid(segs)
    message = voice_pb2.Voiceprint(
        channel=channel,
        centroid=vp.to_bytes(centroid),
        line=vp.VERIFIED_MIN,
        samples=len(segs),
        version=1,
        speaker_model=ears.speaker.model,
    )
    if store_voiceprint(bundle.state_dir, message, channel) is None:
        raise RuntimeError("the bench's voiceprint was not stored")
    _rig = Rig(bundle, ears, channel, centroid, loo, time.perf_counter() - t0)
    return _rig


def close_rig() -> None:
    global _rig, _rig_dir
    _rig = None
    if _rig_dir is not None:
        _rig_dir.cleanup()
        _rig_dir = None


def quiet(seconds: float, rng: np.random.Generator) -> Samples:
    """Silence: a -60 dBFS noise floor only."""
    n = int(seconds * SAMPLE_RATE)
    return np.round(rng.normal(0, 32768 * 10 ** (-60 / 20), n)).astype(np.int16)


def plain_noise(seconds: float, rng: np.random.Generator) -> Samples:
    """White or brown noise at -45..-25 dBFS RMS (no speech in it)."""
    n = int(seconds * SAMPLE_RATE)
    x = rng.normal(0, 1, n) if rng.random() < 0.5 else brown_noise(n, rng)
    x = x * 32768 * 10 ** (rng.uniform(-45, -25) / 20)
    return np.clip(np.round(x), -32768, 32767).astype(np.int16)


# ---------------------------------------------------------------- mixed audio
MIX = (
    ("owner_request", 0.30),
    ("other_request", 0.10),
    ("ambient", 0.30),
    ("owner_chat", 0.06),
    ("silence", 0.12),
    ("noise", 0.12),
)
"""kind of each stretch of the mixed audio, drawn with these weights:
``owner_request`` "Yimi, <request>" by the voiceprint owner (a ``tests/speech.py`` take);
``other_request`` the same by one of ``tests/speech.py`` OTHERS (someone else using the
device); ``ambient`` an everyday sentence by a random voice; ``owner_chat`` an everyday
sentence by the owner (no wake word); ``silence`` 2–8 s at the -60 dBFS floor; ``noise``
2–8 s of white or brown noise at -45..-25 dBFS"""


def mixed_corpus(cache: Path, quick: bool) -> Corpus:
    minutes = 1.5 if quick else 10.0
    exclude = _template_voice_names() | {v.name for v in speech.OWNER_TAKES}
    exclude |= {v.name for v in speech.OTHERS}

    def make() -> Corpus:
        rng = np.random.default_rng(5)
        kinds, weights = zip(*MIX, strict=True)
        p = np.asarray(weights) / sum(weights)
        parts: list[Samples] = []
        spans: list[tuple[int, int]] = []
        labels: list[str] = []
        voices: set[Voice] = set()
        pos = 0
        while pos < minutes * 60 * SAMPLE_RATE:
            kind = str(kinds[rng.choice(len(kinds), p=p)])
            if kind in ("silence", "noise"):
                piece = (quiet if kind == "silence" else plain_noise)(rng.uniform(2, 8), rng)
                spans.append((pos, pos + len(piece)))
            else:
                if kind.startswith("owner"):
                    v = speech.OWNER_TAKES[rng.integers(len(speech.OWNER_TAKES))]
                elif kind == "other_request":
                    v = speech.OTHERS[rng.integers(len(speech.OTHERS))]
                else:
                    v = random_voice(rng, exclude)
                voices.add(v)
                if kind.endswith("request"):
                    text = f"{wake.WAKE_WORD}, {REQUESTS[rng.integers(len(REQUESTS))]}"
                else:
                    text = SENTENCES[rng.integers(len(SENTENCES))]
                said = synthesize(text, v)
                gap = np.zeros(int(rng.uniform(0.3, 2.5) * SAMPLE_RATE), np.int16)
                piece = noisy(np.concatenate([gap, said]), rng)
                loud = np.nonzero(np.abs(said) > 300)[0]
                a, b = (int(loud[0]), int(loud[-1])) if len(loud) else (0, len(said))
                spans.append((pos + len(gap) + a, pos + len(gap) + b))
            labels.append(kind)
            parts.append(piece)
            pos += len(piece)
        tail = quiet(1.0, rng)
        return Corpus(np.concatenate([*parts, tail]), spans, len(voices), labels)

    return cached(
        cache,
        "mixed",
        {"minutes": minutes, "v": 1, "mix": MIX, "exclude": sorted(exclude)},
        make,
    )


# ---------------------------------------------------------------- whole pipeline
class NullUplink:
    """The null sender: stands in for the device node (mesh link, outbox) in the bench.

    Reports the hub as not connected, so no ``WAKE_CLAIM`` goes out and no hub decision is
    awaited (requests go straight to the outbox, as when the hub is away); ``queue_voice``
    serialises the utterance (to count its bytes) and drops it with its audio. No reply
    will ever come, so the request is not left pending.
    """

    def __init__(self, pipeline: Callable[[], VoicePipeline | None]) -> None:
        self._pipeline = pipeline
        self.queued: list[mesh_pb2.Utterance] = []
        self.audio_bytes = 0
        self.message_bytes = 0

    def is_connected(self) -> bool:
        return False

    async def send(self, kind: int, payload: Message) -> None:
        return None

    def queue_voice(self, utt: mesh_pb2.Utterance, audio: list[bytes], trace_id: str) -> int:
        self.queued.append(utt)
        self.audio_bytes += sum(len(a) for a in audio)
        self.message_bytes += len(utt.SerializeToString())
        p = self._pipeline()
        if p is not None:
            p.pending.pop(utt.id, None)
        return 0

    def withdraw(self, item_id: str) -> bool:
        return False

    async def ack(self, reply: mesh_pb2.Reply, state: int = mesh_pb2.RENDERED) -> None:
        return None


class Timer:
    """Wall and thread-CPU milliseconds of each call (the model thread runs every stage, so
    thread CPU time is that stage's own work even while other processes hold the cores)."""

    def __init__(self) -> None:
        self.ms: list[float] = []
        self.cpu_ms: list[float] = []

    def time(self, fn: Callable[..., _T], *args: Any) -> _T:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return fn(*args)
        finally:
            self.cpu_ms.append((time.thread_time() - c0) * 1000)
            self.ms.append((time.perf_counter() - t0) * 1000)


class TimedSpeech(Timer):
    """The VAD + segmenter, timed per frame (what the pipeline's ``Hearing`` calls)."""

    def __init__(self, inner: SpeechDetector) -> None:
        super().__init__()
        self.inner = inner

    def feed(self, frame: Frame) -> Sequence[SpeechEvent]:
        return self.time(self.inner.feed, frame)


class TimedWake(Timer):
    """The wake spotter, timed per frame fed (it is fed only in speech)."""

    def __init__(self, inner: WakeSpotter) -> None:
        super().__init__()
        self.inner = inner

    def feed(self, frame: Frame) -> WakeFired | None:
        return self.time(self.inner.feed, frame)

    def reset(self) -> None:
        self.inner.reset()


class TimedSpeaker(Timer):
    """The speaker embedder, timed per request."""

    def __init__(self, inner: SpeakerEmbedder) -> None:
        super().__init__()
        self.inner = inner
        self.model = inner.model

    def embed(
        self, samples: Samples, voiced_mask: npt.NDArray[np.bool_] | None = None
    ) -> Embedding:
        return self.time(self.inner.embed, samples, voiced_mask)


class TimedVoiceprint(Timer):
    """The device's voiceprint lookup, timed per request."""

    def __init__(self, inner: VoiceprintView) -> None:
        super().__init__()
        self.inner = inner

    def current(self) -> LocalVoiceprint | None:
        return self.time(self.inner.current)


class TimedEncode(Timer):
    """FLAC encoding, timed per request."""

    def __init__(self, inner: Callable[[Samples], bytes]) -> None:
        super().__init__()
        self.inner = inner

    def __call__(self, samples: Samples) -> bytes:
        return self.time(self.inner, samples)


def overlapping(spans: list[tuple[int, int]], kinds: list[str], a: int, b: int) -> set[str]:
    """Kinds of the corpus stretches a segment [a, b) (samples) overlaps."""
    return {k for (s, e), k in zip(spans, kinds, strict=True) if s < b and e > a}


def _cpu_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def section_pipeline(cache: Path, quick: bool) -> None:
    header(
        "Whole edge pipeline: edge_agent.pipeline.VoicePipeline on the catalog's models "
        "(1 thread), WAV file -> VAD -> wake -> segment -> speaker -> verdict -> FLAC -> "
        "null sender"
    )
    corpus = mixed_corpus(cache, quick)
    r = rig()
    count = {k: corpus.kinds.count(k) for k, _ in MIX}
    print(
        f"device                     {r.bundle.name} ({r.bundle.profile.name}, channel "
        f"{r.channel}): home + bundle + models + voiceprint in {r.setup_s:.1f} s; speaker "
        f"{r.ears.speaker.model}"
    )
    print(
        f"mixed audio                {corpus.seconds / 60:.1f} min: "
        + ", ".join(f"{count[k]} {k}" for k, _ in MIX)
        + f"; {corpus.voices} voices, speech at 10-30 dB SNR"
    )
    state = Path(tempfile.mkdtemp(prefix="state-", dir=Path(_rig_dir.name) if _rig_dir else None))
    wav_path = speech.write_wav(state / "mixed.wav", corpus.samples)
    speech_t = TimedSpeech(r.ears.speech)
    wake_t = TimedWake(r.ears.wake)
    speaker_t = TimedSpeaker(r.ears.speaker)
    vp_t = TimedVoiceprint(r.ears.voiceprint)
    encode_t = TimedEncode(r.ears.encode)
    ears = Ears(speech_t, wake_t, speaker_t, vp_t, encode_t, r.ears.preroll_ms)
    holder: list[VoicePipeline] = []
    uplink = NullUplink(lambda: holder[0] if holder else None)
    device = DeviceVoice(
        device_id=r.bundle.device_id,
        name=r.bundle.name,
        channel=r.channel,
        speaks=False,
        source=str(wav_path),
    )
    pipeline = VoicePipeline(device, ears, uplink, state)
    holder.append(pipeline)
    threads: list[int] = []

    async def run() -> tuple[float, float]:
        async with pipeline, WavSource(wav_path, False, RIG_START_MS) as source:
            t0, c0 = time.perf_counter(), time.process_time()
            await pipeline.listen(source.frames())
            threads.append(_cpu_threads())
            await asyncio.wait_for(pipeline.settled(), timeout=600)
            return time.perf_counter() - t0, time.process_time() - c0

    load0 = os.getloadavg()[0]
    wall, cpu = asyncio.run(run())
    load1 = os.getloadavg()[0]
    audio_s = pipeline.stats.audio_ms / 1000
    stats = pipeline.stats

    # what came out, against what was said
    found: dict[str, int] = dict.fromkeys(count, 0)
    verdicts: dict[str, dict[str, int]] = {}
    scores: dict[str, list[float]] = {}
    stray = 0
    for utt in uplink.queued:
        a = (utt.started_ms - RIG_START_MS) * SAMPLE_RATE // 1000
        b = (utt.ended_ms - RIG_START_MS) * SAMPLE_RATE // 1000
        hit = overlapping(corpus.spans, corpus.kinds, a, b)
        kind = next((k for k in ("owner_request", "other_request") if k in hit), "")
        if not kind:
            stray += 1
            continue
        found[kind] += 1
        name = voice_pb2.Verdict.Name(utt.voice.verdict).lower()
        verdicts.setdefault(kind, {}).setdefault(name, 0)
        verdicts[kind][name] += 1
        scores.setdefault(kind, []).append(utt.voice.score)
    ambient = state / "ambient.jsonl"
    reasons: dict[str, int] = {}
    if ambient.exists():
        for line in ambient.read_text().splitlines():
            reason = str(json.loads(line).get("reason", "?"))
            reasons[reason] = reasons.get(reason, 0) + 1

    def verdict_line(kind: str) -> str:
        v = verdicts.get(kind, {})
        s = scores.get(kind, [])
        parts = ", ".join(f"{n} {k}" for k, n in sorted(v.items())) or "none"
        return f"{parts}; score median {median(s):.2f}" if s else parts

    print(
        f"requests out               {len(uplink.queued)}: owner requests {found['owner_request']}"
        f" of {count['owner_request']} ({verdict_line('owner_request')}); other voices' "
        f"requests {found['other_request']} of {count['other_request']} "
        f"({verdict_line('other_request')}); from other speech {stray}"
    )
    print(
        f"ambient lines              {sum(reasons.values())} ("
        + ", ".join(f"{n} {k}" for k, n in sorted(reasons.items()))
        + f"); wakes {stats.wakes}; {uplink.audio_bytes / 1024:.0f} KiB FLAC dropped by "
        "the null sender"
    )

    # stage costs: wall and the model thread's CPU per call
    stages: list[tuple[str, str, Timer]] = [
        ("VAD (Silero + segmenter)", "frame", speech_t),
        ("wake (in speech only)", "fed frame", wake_t),
        ("speaker embedding", "request", speaker_t),
        ("verdict (voiceprint read)", "request", vp_t),
        ("FLAC encode", "request", encode_t),
    ]
    frames = len(speech_t.ms)
    v = np.ones(256, np.float32) / 16.0
    held = LocalVoiceprint(r.centroid, vp.VERIFIED_MIN, r.ears.speaker.model)
    t0 = time.perf_counter()
    for _ in range(1000):
        verdict_for(v, held, r.ears.speaker.model)
    cosine_us = (time.perf_counter() - t0) * 1e6 / 1000
    print(
        f"per stage                  {'calls':>7}  {'per':<10}{'median':>8}{'p90':>8}"
        f"{'CPU med':>8}  {'wall s':>7}{'CPU s':>7}{'of wall':>8}{'of CPU':>7}"
    )
    for name, unit, t in stages:
        w, c = sum(t.ms) / 1000, sum(t.cpu_ms) / 1000
        print(
            f"  {name:<26}{len(t.ms):>7}  {unit:<10}{median(t.ms):>8.3f}{pct(t.ms, 90):>8.3f}"
            f"{median(t.cpu_ms):>8.3f}  {w:>7.2f}{c:>7.2f}{w / wall:>8.1%}{c / cpu:>7.1%}"
        )
    rest_w = wall - sum(sum(t.ms) for _, _, t in stages) / 1000
    rest_c = cpu - sum(sum(t.cpu_ms) for _, _, t in stages) / 1000
    print(
        f"  {'rest (below)':<26}{frames:>7}  {'frame':<10}"
        f"{rest_w * 1000 / max(frames, 1):>8.3f}{'(mean)':>8}"
        f"{rest_c * 1000 / max(frames, 1):>8.3f}  {rest_w:>7.2f}{rest_c:>7.2f}"
        f"{rest_w / wall:>8.1%}{rest_c / cpu:>7.1%}"
    )
    print(
        "  ms per call; rest = WAV read + framing, the event loop and the hand-off to the "
        "model thread per frame, ambient log, messages;"
    )
    print(
        f"  cosine + verdict line {cosine_us:.1f} µs per request (measured apart); wake fed "
        f"{len(wake_t.ms) * FRAME_MS / 1000 / 60:.1f} of {audio_s / 60:.1f} min (a feature "
        f"batch every {wake.HOP_MS} ms, so most fed frames cost ~0); the pipeline's own "
        f"counters agree: embed median {median(stats.embed_ms):.1f} ms, FLAC "
        f"{median(stats.encode_ms):.2f} ms"
    )
    rtf = wall / audio_s
    print(
        f"RTF whole pipeline         {rtf:.4f} wall ({wall:.1f} s for {audio_s / 60:.1f} min), "
        f"{cpu / audio_s:.4f} CPU (process time, all threads; {threads[0] if threads else 0} "
        f"OS threads in the process)"
    )

    # same-run baselines on the same audio: the bench's bare loops
    t0, c0 = time.perf_counter(), time.process_time()
    stream(corpus, None)
    vad_wall, vad_cpu = time.perf_counter() - t0, time.process_time() - c0
    detector = getattr(r.ears.wake, "detector", None)
    vw_wall = vw_cpu = 0.0
    if isinstance(detector, wake.WakeDetector):
        t0, c0 = time.perf_counter(), time.process_time()
        stream(corpus, detector)
        vw_wall, vw_cpu = time.perf_counter() - t0, time.process_time() - c0
    secs = corpus.seconds
    print(
        f"baseline same run          VAD alone (bench loop, same audio) RTF "
        f"{vad_wall / secs:.4f} wall, {vad_cpu / secs:.4f} CPU -> whole pipeline "
        f"x{wall / vad_wall:.1f} wall, x{cpu / vad_cpu:.1f} CPU"
    )
    if vw_wall:
        print(
            f"                           VAD + wake (bench loop) RTF {vw_wall / secs:.4f} wall, "
            f"{vw_cpu / secs:.4f} CPU -> whole pipeline x{wall / vw_wall:.2f} wall, "
            f"x{cpu / vw_cpu:.2f} CPU"
        )
    print(
        f"anchor                     Porcupine RTF {ANCHORS['porcupine_rtf_pi3']} on a Pi 3 "
        f"(wake word only, other hardware): ours x{rtf / ANCHORS['porcupine_rtf_pi3']:.2f} "
        "for the whole pipeline"
    )
    print(f"load average               {load0:.2f} at start, {load1:.2f} at end (1 min)")


# ---------------------------------------------------------------- speaker + voiceprint
def voiceprint_corpus(cache: Path, quick: bool) -> Corpus:
    """Trials: owner takes and other voices, clean or with noise (labels ``side:group:
    condition``), one after another (spans are exact)."""
    n = 24 if quick else 120
    exclude = _template_voice_names() | {v.name for v in speech.OWNER_TAKES}
    exclude |= {v.name for v in speech.OTHERS}

    def make() -> Corpus:
        rng = np.random.default_rng(6)
        parts: list[Samples] = []
        spans: list[tuple[int, int]] = []
        labels: list[str] = []
        voices: set[Voice] = set()
        pos = 0
        for side in ("owner", "other"):
            for i in range(n):
                fest = ""
                if side == "owner":
                    v, group = speech.OWNER_TAKES[i % len(speech.OWNER_TAKES)], "takes"
                elif i % 4 == 3 and festival:
                    fest = speech.FESTIVAL_OTHERS[(i // 4) % len(speech.FESTIVAL_OTHERS)]
                    v, group = Voice(fest), "festival"
                elif i % 2 == 0:
                    v, group = speech.OTHERS[(i // 2) % len(speech.OTHERS)], "others"
                else:
                    v, group = random_voice(rng, exclude), "random"
                voices.add(v)
                if i % 3 == 2:
                    text = f"{wake.WAKE_WORD}, {REQUESTS[rng.integers(len(REQUESTS))]}"
                else:
                    text = SENTENCES[rng.integers(len(SENTENCES))]
                x = speech.say_festival(text, fest) if fest else synthesize(text, v)
                condition = "clean" if i % 3 == 0 else "noisy"
                if condition == "noisy":
                    x = noisy(x, rng)
                spans.append((pos, pos + len(x)))
                labels.append(f"{side}:{group}:{condition}")
                parts.append(x)
                pos += len(x)
        return Corpus(np.concatenate(parts), spans, len(voices), labels)

    festival = shutil.which("text2wave") is not None
    if not festival:
        print("voiceprint corpus          festival is not installed: no festival voices")
    key = {"n": n, "v": 2, "exclude": sorted(exclude), "festival": festival}
    return cached(cache, "voiceprint", key, make)


def eer(targets: Sequence[float], impostors: Sequence[float]) -> tuple[float, float]:
    """(equal error rate, threshold there): the threshold where the share of targets below
    it is closest to the share of impostors at or above it."""
    t = np.asarray(targets, np.float64)
    i = np.asarray(impostors, np.float64)
    if len(t) == 0 or len(i) == 0:
        return float("nan"), float("nan")
    if t.min() > i.max():
        return 0.0, float((t.min() + i.max()) / 2)
    best = (2.0, 0.0, 0.0)
    for th in np.unique(np.concatenate([t, i])):
        frr, far = float(np.mean(t < th)), float(np.mean(i >= th))
        if abs(frr - far) < best[0]:
            best = (abs(frr - far), (frr + far) / 2, float(th))
    return best[1], best[2]


def section_speaker(cache: Path, quick: bool) -> None:
    header("Speaker embedding (GE2E ONNX, 1 thread) and voiceprint EER")
    r = rig()
    corpus = voiceprint_corpus(cache, quick)
    print(
        f"enrolment                  5 owner takes ({speech.OWNER_TAKES[0].name}, pitch "
        f"{min(v.pitch for v in speech.OWNER_TAKES)}-{max(v.pitch for v in speech.OWNER_TAKES)},"
        f" speed {min(v.speed for v in speech.OWNER_TAKES)}-"
        f"{max(v.speed for v in speech.OWNER_TAKES)}), clean; leave-one-out "
        + ", ".join(f"{s:.3f}" for s in r.loo)
    )
    ms: list[float] = []
    per_s: list[float] = []
    secs: list[float] = []
    score: dict[str, list[float]] = {}
    floor = vp.floor_for(r.ears.speaker.model)
    print(
        f"scores                     calibrated: (cosine - {floor}) / (1 - {floor}), the score "
        f"floor of {r.ears.speaker.model} (models.voiceprint.SCORE_FLOORS)"
    )
    failed = 0
    for (a, b), label in zip(corpus.spans, corpus.kinds, strict=True):
        x = corpus.samples[a:b]
        t0 = time.perf_counter()
        try:
            e = r.ears.speaker.embed(x)
        except ModelError:
            failed += 1
            continue
        dt = (time.perf_counter() - t0) * 1000
        ms.append(dt)
        secs.append(len(x) / SAMPLE_RATE)
        per_s.append(dt / secs[-1])
        score.setdefault(label, []).append(vp.similarity(e.vector, r.centroid, floor))
    print(
        f"ms per utterance           median {median(ms):.1f}  p90 {pct(ms, 90):.1f}  over "
        f"{len(ms)} utterances of median {median(secs):.1f} s (p90 {pct(secs, 90):.1f} s); "
        f"{median(per_s):.1f} ms per second of audio (RTF {median(per_s) / 1000:.4f})"
        + (f"; {failed} not embeddable" if failed else "")
    )

    def pick(side: str, group: str = "", condition: str = "") -> list[float]:
        out: list[float] = []
        for label, s in score.items():
            sd, gr, co = label.split(":")
            if sd == side and group in ("", gr) and condition in ("", co):
                out.extend(s)
        return out

    owner = pick("owner")
    other = pick("other")
    print(
        f"trials                     {len(owner)} owner (5 takes, {len(pick('owner', '', 'noisy'))}"
        f" with noise at 10-30 dB) / {len(other)} other ({len(pick('other', 'others'))} by "
        f"tests/speech.py OTHERS, {len(pick('other', 'random'))} by random espeak-ng voices, "
        f"{len(pick('other', 'festival'))} by festival voices of real recordings; "
        f"{len(pick('other', '', 'noisy'))} with noise)"
    )
    print(
        f"score to the centroid      owner median {median(owner):.3f} p10 {pct(owner, 10):.3f}"
        f" min {min(owner):.3f}; others median {median(other):.3f} p90 {pct(other, 90):.3f} "
        f"max {max(other):.3f}"
    )
    print(f"{'EER':<27}{'EER':>7}{'at':>8}   (owner vs ...)")
    for name, t, i in (
        ("all", owner, other),
        ("clean only", pick("owner", "", "clean"), pick("other", "", "clean")),
        ("noisy only", pick("owner", "", "noisy"), pick("other", "", "noisy")),
        ("OTHERS list only", owner, pick("other", "others")),
        ("random voices only", owner, pick("other", "random")),
        ("festival voices only", owner, pick("other", "festival")),
    ):
        rate, th = eer(t, i)
        print(f"  {name:<25}{rate:>7.1%}{th:>8.3f}")
    o = np.asarray(owner)
    x = np.asarray(other)
    print(
        f"at the 0.65 line (verified) owner verified {np.mean(o >= vp.VERIFIED_MIN):.1%} "
        f"(false rejects {np.mean(o < vp.VERIFIED_MIN):.1%}); others verified "
        f"{np.mean(x >= vp.VERIFIED_MIN):.1%} (false accepts)"
    )
    print(
        f"at the 0.45 line (uncertain) owner unmatched {np.mean(o < vp.UNCERTAIN_MIN):.1%}; "
        f"others at or above 0.45 (uncertain or verified) {np.mean(x >= vp.UNCERTAIN_MIN):.1%}"
    )
    for group in ("others", "random", "festival"):
        g = np.asarray(pick("other", group))
        if len(g):
            print(
                f"  {group + ' voices':<25}verified {np.mean(g >= vp.VERIFIED_MIN):.1%}, "
                f"uncertain {np.mean((g >= vp.UNCERTAIN_MIN) & (g < vp.VERIFIED_MIN)):.1%}, "
                f"unmatched (guest) {np.mean(g < vp.UNCERTAIN_MIN):.1%}"
            )
    print("anchor                     none published for this setup (synthetic voices)")


# ---------------------------------------------------------------- hub ASR
_NUMBERS = {
    "0": "zero",
    "1": "one",
    "2": "two",
    "3": "three",
    "4": "four",
    "5": "five",
    "6": "six",
    "7": "seven",
    "8": "eight",
    "9": "nine",
    "10": "ten",
    "20": "twenty",
}


def words(text: str) -> list[str]:
    out = []
    for w in re.sub(r"[^a-z0-9' ]", " ", text.lower().replace("what's", "what is")).split():
        out.append(_NUMBERS.get(w, w))
    return out


def word_errors(ref: list[str], hyp: list[str]) -> int:
    """Levenshtein distance in words."""
    d = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, d[0] = d[0], i
        for j, h in enumerate(hyp, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (r != h))
    return d[len(hyp)]


def asr_corpus(cache: Path, quick: bool) -> tuple[Corpus, list[str]]:
    n = 3 if quick else 12
    texts = [
        f"{wake.WAKE_WORD}, {REQUESTS[i % len(REQUESTS)]}" if i % 2 == 0 else SENTENCES[i * 7]
        for i in range(n)
    ]

    def make() -> Corpus:
        rng = np.random.default_rng(7)
        parts, spans, pos = [], [], 0
        for i, text in enumerate(texts):
            x = noisy(synthesize(text, speech.OWNER_TAKES[i % len(speech.OWNER_TAKES)]), rng)
            x = np.concatenate([quiet(0.3, rng), x, quiet(0.3, rng)])
            spans.append((pos, pos + len(x)))
            parts.append(x)
            pos += len(x)
        return Corpus(np.concatenate(parts), spans, len(speech.OWNER_TAKES))

    return cached(cache, "asr", {"texts": texts, "v": 1}, make), texts


def section_asr(cache: Path, quick: bool) -> None:
    header("Hub ASR: faster-whisper tiny.en, int8 (models.asr.WhisperTranscriber)")
    corpus, texts = asr_corpus(cache, quick)
    secs = [(b - a) / SAMPLE_RATE for a, b in corpus.spans]
    print(
        f"utterances                 {len(texts)} by the owner's takes, 10-30 dB noise, "
        f"median {median(secs):.1f} s ({sum(secs):.0f} s in all)"
    )
    rtf_by: dict[int, float] = {}
    busy: dict[int, float] = {}
    for threads in (1, 2):
        t0 = time.perf_counter()
        asr = WhisperTranscriber(cpu_threads=threads)
        asr.load()
        loaded = time.perf_counter() - t0
        a, b = corpus.spans[0]
        asr.transcribe(corpus.samples[a:b])  # warm-up, not counted
        rtf: list[float] = []
        ms: list[float] = []
        cpu: list[float] = []
        errors = total = 0
        for (a, b), text in zip(corpus.spans, texts, strict=True):
            c0 = time.process_time()
            t = asr.transcribe(corpus.samples[a:b])
            cpu.append((time.process_time() - c0) * 1000 / t.elapsed_ms if t.elapsed_ms else 0)
            rtf.append(t.rtf)
            ms.append(t.elapsed_ms)
            ref = words(strip_wake(text))
            errors += word_errors(ref, words(strip_wake(t.text)))
            total += len(ref)
        rtf_by[threads] = median(rtf)
        busy[threads] = median(cpu)
        print(
            f"{threads} thread{'s' if threads > 1 else ' '}                  RTF median "
            f"{median(rtf):.3f} p90 {pct(rtf, 90):.3f}; ms per utterance median "
            f"{median(ms):.0f} (CPU/wall {median(cpu):.2f}); WER {errors / max(total, 1):.1%}"
            f" (wake word left out); model loaded in {loaded:.1f} s; load avg "
            f"{os.getloadavg()[0]:.2f}"
        )
    if rtf_by.get(2):
        print(
            f"2 threads vs 1             speed-up x{rtf_by[1] / rtf_by[2]:.2f} (median RTF 1 / 2; "
            "the 2 cores are shared with other work)"
        )
        if busy.get(2, 2.0) < 1.3 and rtf_by[1] / rtf_by[2] < 1.2:
            print(
                "                           CPU/wall stayed near 1 with 2 threads: the second "
                "thread did next to no work (no free core while other work ran?), so this is not "
                "what 2 threads give on an idle machine"
            )
    print("anchor                     none given (the hub is not the Pi-class device)")


class _Replay:
    """A stand-in VAD that replays probabilities computed once (the segmenter's hang-over
    does not change what the VAD sees: every frame is fed either way)."""

    def __init__(self, probs: Sequence[float]) -> None:
        self._probs = iter(probs)

    def reset(self) -> None:
        pass

    def prob(self, frame: Samples) -> float:
        return next(self._probs)


HANGOVERS_MS = (250, 300, 400, 500, 700)


def natural_corpus(rng: np.random.Generator) -> Corpus:
    """The natural clips (``tests/speech.py``: pytest-audioeval's English and Mandarin,
    counting with pauses between the numbers), each twice, 0.8-2 s apart, with noise."""
    clips = [speech.english_clip(n) for n in speech.ENGLISH_CLIPS]
    clips += [speech.chinese_clip(n) for n in speech.CHINESE_CLIPS]
    parts, spans, pos = [], [], 0
    for clip in clips * 2:
        gap = np.zeros(int(rng.uniform(0.8, 2.0) * SAMPLE_RATE), np.int16)
        loud = np.nonzero(np.abs(clip) > 300)[0]
        spans.append((pos + len(gap) + int(loud[0]), pos + len(gap) + int(loud[-1])))
        piece = noisy(np.concatenate([gap, clip]), rng)
        parts.append(piece)
        pos += len(piece)
    return Corpus(np.concatenate([*parts, np.zeros(SAMPLE_RATE, np.int16)]), spans)


def cut_offs(corpus: Corpus, probs: Sequence[float], hangover_ms: int) -> tuple[int, list[int]]:
    """(utterances cut before their end, ms from each utterance's last loud sample to the
    end of speech that closed it): the device's segmenter with ``hangover_ms``."""
    seg = Segmenter(_Replay(probs), hangover_ms=hangover_ms)  # type: ignore[arg-type]
    ends: list[int] = []  # the sample at which each SpeechEnd was emitted
    x = corpus.samples
    for i in range(len(probs)):
        for ev in seg.feed(x[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES], i * FRAME_MS):
            if isinstance(ev, SpeechEnd):
                ends.append((i + 1) * FRAME_SAMPLES)
    cut, waits = 0, []
    margin = 3 * FRAME_SAMPLES  # an end emitted over the utterance's last frames is its end
    for a, b in corpus.spans:
        inside = [e for e in ends if a < e < b - margin]
        cut += bool(inside)
        after = [e for e in ends if e >= b - margin]
        if after and not inside:
            waits.append((after[0] - b) * 1000 // SAMPLE_RATE)
    return cut, waits


def section_hangover(cache: Path, quick: bool) -> None:
    header("end-of-speech hang-over: false cut-offs against the wait, per hang-over")
    corpora = {
        "wake (espeak-ng)": wake_corpus(cache, quick),
        "natural clips": natural_corpus(np.random.default_rng(5)),
    }
    vad = SileroVad()
    print(
        f"{'':<20} {'hang-over ms':>12} {'cut off':>10} {'wait p50 ms':>12} {'p90':>6}"
        "   (wait: last loud sample → end of speech)"
    )
    for label, corpus in corpora.items():
        vad.reset()
        x = corpus.samples
        probs = [
            vad.prob(x[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES])
            for i in range(len(x) // FRAME_SAMPLES)
        ]
        for ms in HANGOVERS_MS:
            cut, waits = cut_offs(corpus, probs, ms)
            print(
                f"{label:<20} {ms:>12} {cut:>4}/{len(corpus.spans):<5} "
                f"{median(waits) if waits else float('nan'):>12.0f} "
                f"{pct(waits, 90) if waits else float('nan'):>6.0f}"
            )
    print("anchor                     Home Assistant's end-of-speech silence: 0.7 s by default")


SECTIONS: dict[str, Callable[[Path, bool], None]] = {
    "vad": section_vad,
    "hangover": section_hangover,
    "wake": section_wake,
    "pipeline": section_pipeline,
    "speaker": section_speaker,
    "asr": section_asr,
}
"""name -> runner(cache_dir, quick)"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small corpora (a smoke run)")
    p.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated sections")
    p.add_argument(
        "--cache",
        type=Path,
        default=Path(tempfile.gettempdir()) / "yimi-bench-edge",
        help="where synthesized corpora are kept between runs",
    )
    args = p.parse_args()
    names = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in names if s not in SECTIONS]
    if unknown:
        p.error(f"unknown sections {unknown}; known: {', '.join(SECTIONS)}")
    print(
        f"edge pipeline bench{' (quick)' if args.quick else ''}: {platform.machine()}, "
        f"{platform.processor() or platform.platform()}, python {platform.python_version()}, "
        f"1 thread; {os.cpu_count()} CPUs, load average "
        + ", ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    t0 = time.perf_counter()
    try:
        for name in names:
            SECTIONS[name](args.cache, args.quick)
    finally:
        close_rig()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"\n(total {time.perf_counter() - t0:.0f} s; load average now {load} on "
        f"{os.cpu_count()} CPUs: other work shares them, so walls are upper bounds)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
