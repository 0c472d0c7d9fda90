"""``yimi brain``: the operator switches models with an owner device's confirmation; keys
are stored encrypted and never printed."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli import main as cli
from hub.brain.providers import ProviderStore
from provisioning.home import Home
from tests.fake_openai import FakeOpenAI, Reply, serving, stall

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


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    """A fake OpenAI-compatible server (its own loop, in a thread) for the probes."""
    with serving(FakeOpenAI(models=["llama-local", "big", "whisper-1", "llava"])) as f:
        yield f


def test_switch_models_confirmed_by_the_phone(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], fake: FakeOpenAI
) -> None:
    key_file = tmp_path / "key.txt"
    key_file.write_text(SECRET + "\n")
    argv = ["brain", "key", "set", "--home", str(home), "--id", "hosted"]
    assert cli.main([*argv, "--from-file", str(key_file)]) == cli.EXIT_OK
    config = tmp_path / "brain.yaml"
    config.write_text(
        "roles:\n"
        f"  brain: [{{base_url: '{fake.base_url}', model: llama-local}}]\n"
        f"  subagent: [{{base_url: '{fake.base_url}', model: big, key_id: hosted, "
        "local: false, timeout_s: 20}]\n"
        "cloud_sources: ['utterance:owner']\n"
    )
    phone = tmp_path / "bundle-phone"
    argv = ["brain", "use", "--home", str(home), "--config", str(config)]
    assert cli.main([*argv, "--confirm-with", str(phone)]) == cli.EXIT_OK
    assert cli.main(["brain", "status", "--home", str(home)]) == cli.EXIT_OK
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err
    assert "confirmed" in out.out and "key hosted: fingerprint" in out.out
    # probed first: each endpoint's model list and a one-token completion (with its key)
    assert "probed brain: llama-local at " in out.out
    assert "probed subagent: big at " in out.out and "one-token completion ok" in out.out
    chats = fake.chat_requests()
    assert {r.model for r in chats} == {"llama-local", "big"}
    assert all(r.body.get("max_tokens") == 1 for r in chats)
    keyed = [r for r in chats if r.model == "big"]
    assert keyed[0].headers.get("authorization") == f"Bearer {SECRET}"
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
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], fake: FakeOpenAI
) -> None:
    phone = tmp_path / "bundle-phone"
    assert cli.main(["brain", "status", "--home", str(home)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "speech recognition: local faster-whisper (no asr endpoint configured)" in out
    config = tmp_path / "asr.yaml"
    config.write_text(
        "roles:\n"
        f"  asr: [{{base_url: '{fake.base_url}', model: whisper-1, local: false}}]\n"
        f"  vision: [{{base_url: '{fake.base_url}', model: llava}}]\n"
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
    assert f"vision: llava at {fake.base_url} (local) — not used yet" in out
    assert (
        "speech recognition: local faster-whisper; skipped whisper-1 at "
        f"{fake.base_url} (remote): voice audio may reach a remote endpoint only "
        "when audio:voice is in cloud_sources"
    ) in out
    # the asr endpoint is probed by its model list only (no chat completion)
    assert {r.model for r in fake.chat_requests()} == {"llava"}


def test_status_shows_prefer_local_and_the_call_limits(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], fake: FakeOpenAI
) -> None:
    config = tmp_path / "llm.yaml"
    config.write_text(
        "roles:\n"
        f"  brain: [{{base_url: '{fake.base_url}', model: llama-local, max_tokens: 256, "
        "timeout_s: 30}]\n"
        "prefer_local: false\n"
    )
    argv = ["brain", "use", "--home", str(home), "--config", str(config)]
    assert cli.main([*argv, "--confirm-with", str(tmp_path / "bundle-phone")]) == cli.EXIT_OK
    _apply(home)
    capsys.readouterr()
    assert cli.main(["brain", "status", "--home", str(home)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "prefer handling commands locally: off: every turn goes to the LLM" in out
    assert "max_tokens 256, timeout 30 s" in out
    config.write_text(f"roles:\n  brain: [{{base_url: '{fake.base_url}', model: llama-local}}]\n")
    assert cli.main([*argv, "--confirm-with", str(tmp_path / "bundle-phone")]) == cli.EXIT_OK
    _apply(home)
    capsys.readouterr()
    assert cli.main(["brain", "status", "--home", str(home)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "prefer handling commands locally: on: confidently matched commands run locally" in out
    assert "max_tokens 1024, timeout 60 s" in out


def test_use_an_endpoint_keeps_the_rest_of_the_configuration(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], fake: FakeOpenAI
) -> None:
    config = tmp_path / "asr.yaml"
    config.write_text(
        f"roles:\n  asr: [{{base_url: '{fake.base_url}', model: whisper-1}}]\n"
        "cloud_sources: ['utterance:owner']\n"
    )
    phone = str(tmp_path / "bundle-phone")
    argv = ["brain", "use", "--home", str(home)]
    assert cli.main([*argv, "--config", str(config), "--confirm-with", phone]) == cli.EXIT_OK
    _apply(home)
    assert cli.main([*argv, "--endpoint", fake.base_url, "--confirm-with", phone]) == 2
    use = [*argv, "--endpoint", fake.base_url, "--model", "big", "--confirm-with", phone]
    assert cli.main(use) == cli.EXIT_OK
    assert "probed brain: big at " in capsys.readouterr().out
    _apply(home)
    store = ProviderStore.for_home(Home.load(home))
    try:
        cfg = store.current()
        assert [e.model for e in cfg.endpoints("brain")] == ["big"]
        assert [e.model for e in cfg.endpoints("asr")] == ["whisper-1"]
        assert {f"{k}:{v}" for k, v in cfg.cloud_sources} == {"utterance:owner"}
    finally:
        store.close()


def _apply(home: Path) -> None:
    store = ProviderStore.for_home(Home.load(home))
    try:
        assert store.apply_pending() is not None
    finally:
        store.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("case", "expect"),
    [
        ("unreachable", "is unreachable ("),
        ("models_404", "answered GET /models with HTTP 404 (fake: no models here)"),
        ("model_missing", "does not list the model 'llama-local' (it lists: big, other)"),
        ("completion_fails", "failed a one-token completion with 'llama-local': HTTP 500"),
        ("stalled", "did not answer a one-token completion within 0.5 s"),
    ],
)
def test_use_probes_the_endpoint_and_changes_nothing_on_failure(
    home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fake: FakeOpenAI,
    case: str,
    expect: str,
) -> None:
    url = fake.base_url
    if case == "unreachable":
        url = f"http://127.0.0.1:{_closed_port()}/v1"
    elif case == "models_404":
        fake.models_status = 404
    elif case == "model_missing":
        fake.models = ["big", "other"]
    elif case == "completion_fails":
        fake.queue("llama-local", Reply(status=500))
    else:
        fake.queue("llama-local", stall())
    config = tmp_path / "llm.yaml"
    config.write_text(f"roles:\n  brain: [{{base_url: '{url}', model: llama-local}}]\n")
    argv = ["brain", "use", "--home", str(home), "--config", str(config), "--probe-timeout"]
    assert cli.main([*argv, "0.5", "--confirm-with", str(tmp_path / "bundle-phone")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("yimi: the brain endpoint ")
    assert expect in err and err.rstrip().endswith("nothing was changed"), err
    store = ProviderStore.for_home(Home.load(home))
    try:  # nothing proposed, nothing to apply
        assert list(store.db.execute("SELECT change_id FROM changes")) == []
        assert store.apply_pending() is None and store.current().version == 0
    finally:
        store.close()
