"""Bench: the hub's speech recognition in Chinese and English — the multilingual default
(Whisper base, joined from its packages) against the fast English-only tiny.en.

Run::

    .venv/bin/python bench/asr.py [--quick] [--threads 2]

The recognisers are made as the hub makes them (``hub.voice.hearing.make_transcriber`` on a
fresh home in a temp dir: Whisper base is joined into its catalog first, and that first-use
cost is printed), int8, greedy, ``--threads`` CPU threads (the hub's default 2).

Audio (16 kHz mono):

* **English, espeak-ng**: 10 (``--quick``: 4) sentences by the synthetic owner
  (``tests/speech.py`` OWNER), half of them "Yimi, <request>";
* **English, natural**: the 3 English clips of ``pytest-audioeval`` (``tests/speech.py``);
* **Chinese, natural**: its 3 Mandarin clips ("你好世界", 一 … 十, the Thousand Character
  pangram). No synthesiser on this machine makes intelligible Mandarin (espeak-ng's
  ``cmn`` is not understood by Whisper; no registry package ships a Chinese voice without
  TensorFlow/torch), so these three are all the Chinese there is.

Rows: Whisper base with ``language: auto`` (the default: detection picks zh or en) on an
encoder window fitted to the utterance (``asr: {window: auto}``, the default, fits it for
a multilingual model), the same on
Whisper's full 30 s window (``window: full``: faster-whisper's own transcription, the
baseline of the fitted window), base with the language fixed (what ``asr: {language:
zh|en}`` costs), and tiny.en (English only).
Per row: per-utterance latency (median, p90), RTF (median), language detected right, and
the error rate: WER for English (lower case, punctuation dropped, numbers spelled out, the
wake word left out), CER for Chinese (punctuation dropped, Arabic digits read as Chinese
numerals: "1234567890" against "一二三四五六七八九十" costs one substitution, 零 for 十;
homophones and traditional characters count as errors, there is no converter installed). Ratios
are to tiny.en's latency in the same run. The machine's load average is printed: other
processes share the 2 cores, so wall times are upper bounds.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stats import median, percentile
from hardware.pcm import SAMPLE_RATE, Samples
from hub.voice.hearing import AsrSettings, make_transcriber
from models.asr import AUTO, FULL, WhisperTranscriber, strip_wake
from provisioning.home import Home
from tests import speech

REQUESTS = (
    "what time is it",
    "turn on the kitchen lights",
    "remember that I don't eat cilantro",
    "add milk to the shopping list",
    "send an email to Alice about lunch",
)
SENTENCES = (
    "The weather is nice today",
    "I will be home late tonight",
    "Please call me when you arrive",
    "We need more coffee for the office",
    "The meeting moved to Thursday afternoon",
)
_NUMBERS = dict(
    zip(
        "0 1 2 3 4 5 6 7 8 9 10".split(),
        "zero one two three four five six seven eight nine ten".split(),
        strict=True,
    )
)
_HAN_DIGITS = str.maketrans("0123456789", "零一二三四五六七八九")
_PUNCT_ZH = re.compile(r"[\s,.!?:;，。！？：；、…“”‘’\"'()（）《》\-]")


@dataclass(frozen=True)
class Utterance:
    name: str
    language: str
    text: str
    """what was said"""
    samples: Samples


@dataclass
class Row:
    label: str
    ms: list[float] = field(default_factory=list)
    rtf: list[float] = field(default_factory=list)
    right_language: int = 0
    errors: dict[str, int] = field(default_factory=lambda: {"en": 0, "zh": 0})
    units: dict[str, int] = field(default_factory=lambda: {"en": 0, "zh": 0})
    heard: list[str] = field(default_factory=list)


def words(text: str) -> list[str]:
    text = strip_wake(text).lower().replace("what's", "what is").replace("-", " ")
    return [_NUMBERS.get(w, w) for w in re.sub(r"[^a-z0-9' ]", " ", text).split()]


def chars(text: str) -> list[str]:
    text = strip_wake(text).translate(_HAN_DIGITS)
    return list(_PUNCT_ZH.sub("", text))


def edit_distance(ref: Sequence[str], hyp: Sequence[str]) -> int:
    d = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, d[0] = d[0], i
        for j, h in enumerate(hyp, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (r != h))
    return d[len(hyp)]


def corpus(quick: bool) -> list[Utterance]:
    n = 4 if quick else 10
    pad = speech.silence(0.2)
    out = []
    for i in range(n):
        text = f"Yimi, {REQUESTS[i // 2 % len(REQUESTS)]}" if i % 2 == 0 else SENTENCES[i // 2]
        samples = speech.concat(pad, speech.say(text, speech.OWNER), pad)
        out.append(Utterance(f"espeak-{i}", "en", text, samples))
    for name, text in speech.ENGLISH_CLIPS.items():
        out.append(Utterance(f"clip-en-{name}", "en", text, speech.english_clip(name)))
    for name, text in speech.CHINESE_CLIPS.items():
        out.append(Utterance(f"clip-zh-{name}", "zh", text, speech.chinese_clip(name)))
    return out


def run(label: str, asr: WhisperTranscriber, utterances: list[Utterance], verbose: bool) -> Row:
    row = Row(label)
    asr.transcribe(utterances[0].samples)  # warm-up, not counted
    for u in utterances:
        t = asr.transcribe(u.samples)
        row.ms.append(t.elapsed_ms)
        row.rtf.append(t.rtf)
        row.right_language += t.language == u.language
        ref, hyp = (
            (words(u.text), words(t.text))
            if u.language == "en"
            else (
                chars(u.text),
                chars(t.text),
            )
        )
        row.errors[u.language] += edit_distance(ref, hyp)
        row.units[u.language] += len(ref)
        row.heard.append(f"{u.name:<26} {t.language}  {t.elapsed_ms:6.0f} ms  {t.text!r}")
    if verbose:
        for line in row.heard:
            print(f"    {line}")
    return row


def rate(row: Row, language: str) -> str:
    if not row.units[language]:
        return "-"
    return f"{row.errors[language] / row.units[language]:.1%}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="4 espeak-ng sentences, not 10")
    p.add_argument("--threads", type=int, default=AsrSettings().cpu_threads)
    p.add_argument("--verbose", action="store_true", help="print every transcript")
    args = p.parse_args()
    utterances = corpus(args.quick)
    english = [u for u in utterances if u.language == "en"]
    n_zh = len(utterances) - len(english)
    secs = [len(u.samples) / SAMPLE_RATE for u in utterances]
    print("Hub ASR: Whisper base (multilingual, the default) and tiny.en, int8, greedy")
    print(
        f"utterances                 {len(english)} English ({len(english) - 3} espeak-ng, "
        f"3 natural), {n_zh} Chinese (natural); median {median(secs):.1f} s; "
        f"{args.threads} threads; load avg {os.getloadavg()[0]:.2f} at start"
    )
    with tempfile.TemporaryDirectory(prefix="yimi-bench-asr-") as tmp:
        home = Home.init(Path(tmp) / "home")
        t0 = time.perf_counter()
        base = make_transcriber(home.path, AsrSettings(cpu_threads=args.threads))
        joined = time.perf_counter() - t0
        t0 = time.perf_counter()
        assert isinstance(base, WhisperTranscriber)
        base.load()
        print(
            f"whisper-base first use     joined into the home's catalog in {joined:.2f} s, "
            f"loaded in {time.perf_counter() - t0:.2f} s"
        )
        rows = [run("base, language auto", base, utterances, args.verbose)]
        base.window = FULL
        rows.append(run("base, auto, 30 s window", base, utterances, args.verbose))
        base.window = AUTO
        fixed = Row("base, language fixed")
        for language in ("en", "zh"):
            base.language = language
            part = [u for u in utterances if u.language == language]
            r = run(f"base, {language}", base, part, args.verbose)
            fixed.ms += r.ms
            fixed.rtf += r.rtf
            fixed.right_language += r.right_language
            fixed.errors[language] += r.errors[language]
            fixed.units[language] += r.units[language]
        rows.append(fixed)
        settings = AsrSettings(cpu_threads=args.threads, model="whisper-tiny.en", language="en")
        tiny = make_transcriber(home.path, settings)
        assert isinstance(tiny, WhisperTranscriber)
        tiny.load()
        tiny_row = run("tiny.en (English only)", tiny, english, args.verbose)
        rows.append(tiny_row)
    baseline = median(tiny_row.ms)
    print(
        f"{'':<24} {'ms/utt p50':>10} {'p90':>6} {'x tiny':>7} {'RTF p50':>8} "
        f"{'lang ok':>8} {'WER en':>7} {'CER zh':>7}"
    )
    for r in rows:
        print(
            f"{r.label:<24} {median(r.ms):>10.0f} {percentile(r.ms, 0.9):>6.0f} "
            f"{median(r.ms) / baseline:>6.2f}x {median(r.rtf):>8.3f} "
            f"{r.right_language:>4}/{len(r.ms):<3} {rate(r, 'en'):>7} {rate(r, 'zh'):>7}"
        )
    en_ms = [m for m, u in zip(rows[0].ms, utterances, strict=True) if u.language == "en"]
    print(
        f"base auto on English only  ms/utt p50 {median(en_ms):.0f} "
        f"(x{median(en_ms) / baseline:.2f} tiny.en on the same utterances)"
    )
    print(
        f"fitted, unsure             {base.fallbacks} of the fitted-window transcriptions heard "
        "again on the full window (models.asr.FIT_FALLBACK_LOGPROB, per language)"
    )
    print(f"load avg at end            {os.getloadavg()[0]:.2f} (2 cores shared: upper bounds)")
    print("anchor                     none published for these clips")
    return 0


if __name__ == "__main__":
    sys.exit(main())
