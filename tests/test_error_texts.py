"""Every user-facing error reads in Chinese as well as English (``protos/errors.py``): each key
of ``MESSAGES`` has its ``MESSAGES_ZH`` text with the same fields (or is written in both
languages already), and ``YIMI_LANG=zh`` makes the CLI say it in Chinese."""

from __future__ import annotations

import os
import string
import subprocess
import sys
from pathlib import Path

from protos.errors import MESSAGES, MESSAGES_ZH, render

REPO = Path(__file__).resolve().parent.parent


def _fields(template: str) -> list[tuple[str, str, str]]:
    return sorted(
        (name, spec or "", conversion or "")
        for _, name, spec, conversion in string.Formatter().parse(template)
        if name is not None
    )


def _han(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def test_every_error_has_a_chinese_text_with_the_same_fields() -> None:
    assert set(MESSAGES_ZH) <= set(MESSAGES), set(MESSAGES_ZH) - set(MESSAGES)
    # a text written in both languages already ("… / 中文") needs no second one
    untranslated = [k for k in MESSAGES if k not in MESSAGES_ZH and not _han(MESSAGES[k])]
    assert not untranslated, untranslated
    for key, chinese in MESSAGES_ZH.items():
        english = MESSAGES[key]
        assert _fields(chinese) == _fields(english), key
        assert _han(chinese), key
        fields = {name: f"<{name}>" for name, _, _ in _fields(english)}
        if any(spec for _, spec, _ in _fields(english)):
            continue  # a numeric format ({mode:o}): rendered with numbers below
        assert render(key, fields, lang="zh") != render(key, fields), key


def test_a_numeric_field_renders_in_both_languages() -> None:
    fields = {"path": "/h/keys/home.key", "mode": 0o644}
    assert "644" in render("key.permissions", fields)
    zh = render("key.permissions", fields, lang="zh")
    assert "644" in zh and "/h/keys/home.key" in zh and zh != render("key.permissions", fields)


def test_the_cli_says_its_error_in_chinese_with_yimi_lang_zh(tmp_path: Path) -> None:
    home = tmp_path / "no-home"
    args = [sys.executable, "-m", "cli", "device", "list", "--home", str(home)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    english = subprocess.run(
        args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    chinese = subprocess.run(
        args,
        env={**env, "YIMI_LANG": "zh"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert english.returncode == chinese.returncode == 1
    assert english.stderr.startswith("yimi: no home in"), english.stderr
    assert chinese.stderr.startswith("yimi: "), chinese.stderr
    assert str(home) in chinese.stderr and "yimi home init" in chinese.stderr
    assert _han(chinese.stderr), chinese.stderr
