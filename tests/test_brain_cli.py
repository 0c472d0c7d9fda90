"""``yimi brain``: the operator switches models with an owner device's confirmation; keys
are stored encrypted and never printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli import main as cli
from hub.brain.providers import ProviderStore
from provisioning.home import Home

SECRET = "sk-test-0123456789abcdef-never-shown"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    assert cli.main(["home", "init", "--home", str(h)]) == cli.EXIT_OK
    for name, profile in (("phone", "phone"), ("glasses", "glasses"), ("old", "phone")):
        out = tmp_path / f"bundle-{name}"
        argv = ["device", "add", "--home", str(h), "--profile", profile, "--name", name]
        assert cli.main([*argv, "--out", str(out)]) == cli.EXIT_OK
    assert cli.main(["device", "revoke", "old", "--home", str(h)]) == cli.EXIT_OK
    return h


def test_switch_models_confirmed_by_the_phone(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key_file = tmp_path / "key.txt"
    key_file.write_text(SECRET + "\n")
    argv = ["brain", "key", "set", "--home", str(home), "--id", "hosted"]
    assert cli.main([*argv, "--from-file", str(key_file)]) == cli.EXIT_OK
    config = tmp_path / "brain.yaml"
    config.write_text(
        "roles:\n"
        "  brain: [{base_url: 'http://127.0.0.1:11434/v1', model: llama-local}]\n"
        "  subagent: [{base_url: 'https://api.example.test/v1', model: big, key_id: hosted}]\n"
        "cloud_sources: ['utterance:owner']\n"
    )
    phone = tmp_path / "bundle-phone"
    argv = ["brain", "use", "--home", str(home), "--config", str(config)]
    assert cli.main([*argv, "--confirm-with", str(phone)]) == cli.EXIT_OK
    assert cli.main(["brain", "status", "--home", str(home)]) == cli.EXIT_OK
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err
    assert "confirmed" in out.out and "key hosted: fingerprint" in out.out
    # the brain applies it between turns; memory is not touched by a model switch
    store = ProviderStore.for_home(Home.load(home))
    try:
        applied = store.apply_pending()
        assert applied is not None
        assert [e.model for e in applied.endpoints("brain")] == ["llama-local"]
        assert store.api_key("hosted") == SECRET
    finally:
        store.close()
    assert SECRET.encode() not in (home / "brain" / "providers.db").read_bytes()
    # and back to the rule-based model
    argv = ["brain", "use", "--home", str(home), "--rule-based"]
    assert cli.main([*argv, "--confirm-with", str(phone)]) == cli.EXIT_OK


@pytest.mark.parametrize(
    ("bundle", "why"),
    [("bundle-glasses", "no approve scope"), ("bundle-old", "not an enrolled, unrevoked device")],
)
def test_other_devices_cannot_confirm(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], bundle: str, why: str
) -> None:
    argv = ["brain", "use", "--home", str(home), "--rule-based"]
    assert cli.main([*argv, "--confirm-with", str(tmp_path / bundle)]) == cli.EXIT_ERROR
    assert why in capsys.readouterr().err
    store = ProviderStore.for_home(Home.load(home))
    try:
        assert store.apply_pending() is None
    finally:
        store.close()


def test_a_bad_config_file_is_one_clear_error(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("roles: {brain: [{base_url: 'ftp://x', model: m}]}\n")
    argv = ["brain", "use", "--home", str(home), "--config", str(bad)]
    assert cli.main([*argv, "--confirm-with", str(tmp_path / "bundle-phone")]) == cli.EXIT_ERROR
    assert "is not an http(s) URL" in capsys.readouterr().err


def test_status_says_which_recogniser_hub_asr_uses_and_that_vision_is_unused(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    phone = tmp_path / "bundle-phone"
    assert cli.main(["brain", "status", "--home", str(home)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "speech recognition: local faster-whisper (no asr endpoint configured)" in out
    config = tmp_path / "asr.yaml"
    config.write_text(
        "roles:\n"
        "  asr: [{base_url: 'https://asr.example.test/v1', model: whisper-1}]\n"
        "  vision: [{base_url: 'http://127.0.0.1:11434/v1', model: llava}]\n"
        "cloud_sources: ['utterance:owner']\n"
    )
    argv = ["brain", "use", "--home", str(home), "--config", str(config)]
    assert cli.main([*argv, "--confirm-with", str(phone)]) == cli.EXIT_OK
    store = ProviderStore.for_home(Home.load(home))
    try:
        assert store.apply_pending() is not None
    finally:
        store.close()
    capsys.readouterr()
    assert cli.main(["brain", "status", "--home", str(home)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "  brain: the built-in rule-based model (no endpoint configured)" in out
    assert "vision: llava at http://127.0.0.1:11434/v1 (local) — not used yet" in out
    assert (
        "speech recognition: local faster-whisper; skipped whisper-1 at "
        "https://asr.example.test/v1 (remote): voice audio may reach a remote endpoint only "
        "when audio:voice is in cloud_sources"
    ) in out
