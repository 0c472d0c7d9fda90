"""The parsed intent templates kept on disk (hub/brain/intents/cache.py): an engine built
from the cache recognises exactly what one built from freshly parsed templates does (the
labelled set, both languages); a cache for other templates, a corrupt, truncated or foreign
file is never used (the templates are parsed again and the file rewritten); a folder that
cannot be written only costs the parse."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hassil import Intents, recognize

from hub.brain.intents import cache, engine
from hub.brain.intents.engine import HA_LANG, IntentEngine
from hub.brain.intents.text import Lang
from tests.intent_eval import fixture_lists
from tests.intent_set import LANGS, load_set


def _doc(sentence: str) -> dict[str, Any]:
    return {"language": "en", "intents": {"Greet": {"data": [{"sentences": [sentence]}]}}}


class Parses:
    """Counts the parses :func:`cache.load_or_parse` falls back to."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = cache.parse

        def counted(data: dict[str, Any]) -> Intents:
            self.count += 1
            return real(data)

        monkeypatch.setattr(cache, "parse", counted)


def _greets(intents: Intents, text: str) -> bool:
    result = recognize(text, intents)
    return result is not None and result.intent.name == "Greet"


def test_an_engine_from_the_cache_recognises_what_a_freshly_parsed_one_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parses = Parses(monkeypatch)
    fresh = {lang: cache.parse(engine._intents_dict(lang)) for lang in HA_LANG}
    for lang in HA_LANG:  # written by the first, read by the second
        cache.load_or_parse(engine._intents_dict(lang), lang, tmp_path)
    parses.count = 0
    loaded = {
        lang: cache.load_or_parse(engine._intents_dict(lang), lang, tmp_path) for lang in HA_LANG
    }
    assert parses.count == 0  # both from the files
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"intents-{lang}-{cache.template_key(engine._intents_dict(lang))[:32]}.pickle"
        for lang in HA_LANG
    )

    def built(parsed: dict[Lang, Intents]) -> IntentEngine:
        monkeypatch.setattr(engine, "_intents", parsed.__getitem__)
        return IntentEngine(fixture_lists())

    with_cache, without = built(loaded), built(fresh)
    texts: list[tuple[str, Lang | None]]
    texts = [(s.text, lang) for lang in LANGS for s in load_set(lang, "labelled")]
    texts += [("turn on 厨房灯", None), ("remember that 我喜欢绿茶", None), ("bench trip 3", "zh")]
    understood = 0
    for text, language in texts:
        expected = without.recognize(text, language)
        assert with_cache.recognize(text, language) == expected, (text, language)
        understood += expected is not None
    assert len(texts) >= 580 and understood >= 400, (len(texts), understood)


def test_a_cache_of_other_templates_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parses = Parses(monkeypatch)
    old = cache.load_or_parse(_doc("hello there"), "t", tmp_path)
    assert _greets(old, "hello there") and parses.count == 1
    new = cache.load_or_parse(_doc("good morning"), "t", tmp_path)  # a template changed
    assert parses.count == 2
    assert _greets(new, "good morning") and not _greets(new, "hello there")
    again = cache.load_or_parse(_doc("good morning"), "t", tmp_path)
    assert parses.count == 2 and _greets(again, "good morning")
    assert cache.template_key(_doc("hello there")) != cache.template_key(_doc("good morning"))


def test_the_key_names_hassils_version(monkeypatch: pytest.MonkeyPatch) -> None:
    before = cache.template_key(_doc("hello there"))
    monkeypatch.setattr(cache.metadata, "version", lambda _name: "0.0.0-other")
    assert cache.template_key(_doc("hello there")) != before


def _cache_file(folder: Path) -> Path:
    (path,) = folder.glob("intents-t-*.pickle")
    return path


def _truncated(raw: bytes) -> bytes:
    return raw[: len(raw) // 2]


def _flipped(raw: bytes) -> bytes:
    return raw[:-10] + bytes(b ^ 0xFF for b in raw[-10:])


def _garbage(raw: bytes) -> bytes:
    return b"not a cache at all"


def _empty(raw: bytes) -> bytes:
    return b""


def _other_header(raw: bytes) -> bytes:
    return raw.replace(cache.MAGIC, b"yimi-other!!\n", 1)


@pytest.mark.parametrize("spoil", [_truncated, _flipped, _garbage, _empty, _other_header])
def test_a_corrupt_cache_is_parsed_again_and_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spoil: Any
) -> None:
    parses = Parses(monkeypatch)
    cache.load_or_parse(_doc("hello there"), "t", tmp_path)
    path = _cache_file(tmp_path)
    path.write_bytes(spoil(path.read_bytes()))
    intents = cache.load_or_parse(_doc("hello there"), "t", tmp_path)
    assert parses.count == 2 and _greets(intents, "hello there")
    assert cache.load_or_parse(_doc("hello there"), "t", tmp_path) is not None
    assert parses.count == 2  # the rewritten file is sound


def test_a_pickle_of_something_else_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parses = Parses(monkeypatch)
    doc = _doc("hello there")
    cache.load_or_parse(doc, "t", tmp_path)
    path = _cache_file(tmp_path)
    monkeypatch.setattr(cache.pickle, "dumps", lambda _obj, protocol: b"\x80\x05K\x07.")  # 7
    cache._store(path, cache.template_key(doc), Intents.from_dict(doc), "t")
    monkeypatch.undo()
    parses = Parses(monkeypatch)
    assert _greets(cache.load_or_parse(doc, "t", tmp_path), "hello there")
    assert parses.count == 1


def test_a_file_others_may_write_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parses = Parses(monkeypatch)
    cache.load_or_parse(_doc("hello there"), "t", tmp_path)
    os.chmod(_cache_file(tmp_path), 0o666)
    assert _greets(cache.load_or_parse(_doc("hello there"), "t", tmp_path), "hello there")
    assert parses.count == 2
    assert _cache_file(tmp_path).stat().st_mode & 0o777 == 0o600  # rewritten, private


def test_a_folder_that_cannot_be_written_only_costs_the_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parses = Parses(monkeypatch)
    blocked = tmp_path / "file"
    blocked.write_text("a file where the folder would be")
    for _ in range(2):
        assert _greets(cache.load_or_parse(_doc("hello there"), "t", blocked / "c"), "hello there")
    assert parses.count == 2


def test_old_sets_are_pruned_to_the_newest(tmp_path: Path) -> None:
    for i in range(cache.KEEP + 3):
        cache.load_or_parse(_doc(f"hello number {i}"), "t", tmp_path)
        os.utime(_newest(tmp_path), (1_000_000 + i, 1_000_000 + i))
    assert len(list(tmp_path.glob("intents-t-*.pickle"))) == cache.KEEP
    current = cache.template_key(_doc(f"hello number {cache.KEEP + 2}"))[:32]
    assert (tmp_path / f"intents-t-{current}.pickle").exists()


def _newest(folder: Path) -> Path:
    return max(folder.glob("intents-t-*.pickle"), key=lambda p: p.stat().st_ctime_ns)


def test_the_cache_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cache.CACHE_ENV, "/some/where")
    assert cache.cache_dir() == Path("/some/where")
    monkeypatch.delenv(cache.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert cache.cache_dir() == Path("/xdg/yimi")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.cache_dir() == Path.home() / ".cache" / "yimi"
