"""Bench: the device's hearing — VAD and wake word (other sections follow: speaker, ASR,
whole pipeline).

Run::

    .venv/bin/python bench/edge_pipeline.py [--quick] [--sections vad,wake] [--cache DIR]

Everything runs on one thread (onnxruntime intra-op 1, BLAS 1). The audio is synthesized
at run time with espeak-ng and cached (``--cache``, default ``$TMPDIR/yimi-bench-edge``):

* **non-wake corpus**: ≥ 30 min (``--quick``: 3 min) of ~100 everyday sentences, each by a
  random voice (espeak-ng accents × variants × pitch 10–95 × speed 130–190, none of the
  wake templates' voices), 0.3–2.5 s apart, with white or brown noise at 10–30 dB SNR and a
  -60 dBFS floor;
* **wake corpus**: ≥ 50 (``--quick``: 20) "Yimi, <request>" utterances by held-out random
  voices, laid out and noised the same way.

Both are streamed in 32 ms frames through what the device runs: Silero VAD + the
segmenter, and the wake detector only while the segmenter is in speech (reset at each
speech start, fed the start's pre-roll + speech, then every frame until the end), as
``edge_agent/pipeline.py`` does.

Sections:

``vad``
    ms per 32 ms frame (median, p90) and RTF, per 60 s chunk (median); speech fraction.
``wake``
    RTF of the detector (per fed second and per second of the whole stream); false
    accepts per hour on the non-wake corpus; false rejects on the wake corpus; both for the
    synthesized default templates (24 espeak-ng voices) and for templates enrolled from
    three takes of one voice (tested on two other takes of that voice); and a threshold
    sweep (from each segment's score trace, hits 1 s apart).

Anchors (published, other hardware): Porcupine RTF 0.06 on a Raspberry Pi 3;
openWakeWord's targets < 5 % false rejects and < 0.5 false accepts per hour.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import hashlib
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hardware.espeak import SAMPLE_RATE, Samples, Voice, synthesize
from models import wake
from models.vad import FRAME_MS, FRAME_SAMPLES, Segmenter, SileroVad, SpeechStart

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
            return Corpus(d["samples"], [tuple(s) for s in d["spans"].tolist()], int(d["voices"]))
    t0 = time.perf_counter()
    c = make()
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, samples=c.samples, spans=np.array(c.spans, np.int64), voices=c.voices)
    tmp.replace(path)
    print(f"   ({name}: synthesized {c.seconds / 60:.1f} min in {time.perf_counter() - t0:.0f} s)")
    return c


def non_wake_corpus(cache: Path, quick: bool) -> Corpus:
    minutes = 3.0 if quick else 31.0
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
        f"{len(wake.DEFAULT_VOICES)} espeak-ng voices, built in {built:.1f} s"
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


SECTIONS: dict[str, Callable[[Path, bool], None]] = {
    "vad": section_vad,
    "wake": section_wake,
}
"""name -> runner(cache_dir, quick); other sections (speaker, asr, pipeline) add theirs"""


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
        "1 thread"
    )
    for name in names:
        SECTIONS[name](args.cache, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
