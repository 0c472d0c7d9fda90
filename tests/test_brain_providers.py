"""Model providers as configuration: encrypted keys, owner-signed changes that take effect
between turns, cloud eligibility (local provider or wait), and secrets that never reach a
prompt or a log line."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
from nacl.signing import SigningKey

from hub.brain.base import ReplyChunk, Turn, collect
from hub.brain.cloud import Provenance, receipt_provenance
from hub.brain.errors import BrainError
from hub.brain.providers import (
    Endpoint,
    ProviderConfig,
    ProviderStore,
    asr_route,
    route,
    sign_change,
)
from hub.gateway.receipts import Effect, Receipt
from hub.memory.context import Snippet, StaticSource
from tests.brain_kit import configure, fake_config
from tests.fake_openai import Reply, Request, calls, text
from tests.test_brain_llm import delegate, first_request, world
from tests.waiting import poll

HUB_SECRET = b"s" * 32


def store(tmp: Path, secret: bytes = HUB_SECRET) -> ProviderStore:
    return ProviderStore(tmp / "providers.db", hub_box_secret=secret, home_id="home1")


def confirm(p: ProviderStore, change: Any, key: SigningKey, **kw: Any) -> Any:
    return p.confirm(
        change.change_id,
        sign_change(change.body, key),
        device_id=kw.pop("device_id", "phone1"),
        sign_pk=bytes(key.verify_key),
        scopes=kw.pop("scopes", ("approve",)),
        **kw,
    )


CFG = {"roles": {"brain": [{"base_url": "http://127.0.0.1:9/v1", "model": "m1"}]}}


# ---------------------------------------------------------------- configuration
def test_endpoint_locality_and_validation() -> None:
    assert Endpoint("http://127.0.0.1:8080/v1", "m").is_local
    assert Endpoint("http://localhost:11434/v1", "m").is_local
    assert Endpoint("http://[::1]:8000/v1", "m").is_local
    assert not Endpoint("https://api.example.com/v1", "m").is_local
    assert not Endpoint("http://192.168.1.5:11434/v1", "m").is_local
    assert Endpoint("http://192.168.1.5:11434/v1", "m", local=True).is_local
    for bad, field in [
        ({"roles": {"chef": []}}, "roles.chef"),
        ({"roles": {"brain": [{"base_url": "ftp://x", "model": "m"}]}}, "base_url"),
        ({"roles": {"brain": [{"base_url": "https://u:p@x/v1", "model": "m"}]}}, "base_url"),
        (
            {"roles": {"brain": [{"base_url": "https://x/v1", "model": "m", "api_key": "k"}]}},
            "unknown",
        ),
        ({"cloud_sources": ["not a source"]}, "cloud_sources"),
        ({"tool_levels": {"home.get_state": "secret"}}, "tool_levels"),
        (
            {"roles": {"brain": [{"base_url": "http://x/v1", "model": "m", "max_tokens": 0}]}},
            "max_tokens",
        ),
        (
            {"roles": {"brain": [{"base_url": "http://x/v1", "model": "m", "max_tokens": True}]}},
            "max_tokens",
        ),
        (
            {"roles": {"brain": [{"base_url": "http://x/v1", "model": "m", "timeout_s": 0}]}},
            "timeout_s",
        ),
        (
            {"roles": {"brain": [{"base_url": "http://x/v1", "model": "m", "timeout_s": 601}]}},
            "timeout_s",
        ),
        ({"prefer_local": "yes"}, "prefer_local"),
    ]:
        with pytest.raises(BrainError) as err:
            ProviderConfig.from_dict(bad)
        assert err.value.key == "provider.invalid" and field in str(err.value)


def test_call_limits_and_prefer_local_round_trip() -> None:
    raw = {
        "roles": {
            "brain": [
                {
                    "base_url": "http://127.0.0.1:1/v1",
                    "model": "m",
                    "max_tokens": 64,
                    "timeout_s": 5,
                }
            ]
        },
        "prefer_local": False,
    }
    cfg = ProviderConfig.from_dict(raw)
    ep = cfg.endpoints("brain")[0]
    assert (ep.token_limit, ep.call_timeout_s, cfg.prefer_local) == (64, 5.0, False)
    assert ProviderConfig.from_dict(cfg.to_dict()) == cfg
    plain = ProviderConfig.from_dict(CFG)
    assert plain.prefer_local and "prefer_local" not in plain.to_dict()  # older bodies: same
    assert set(plain.endpoints("brain")[0].to_dict()) == {"base_url", "model"}


def test_keys_are_encrypted_with_the_hubs_key(tmp_path: Path) -> None:
    p = store(tmp_path)
    fp = p.set_key("cloud", "sk-live-TOPSECRET-42")
    assert p.api_key("cloud") == "sk-live-TOPSECRET-42"
    p.close()
    raw = b"".join(f.read_bytes() for f in tmp_path.glob("providers.db*"))
    assert b"TOPSECRET" not in raw and fp.encode() in raw
    other = store(tmp_path, secret=b"x" * 32)
    with pytest.raises(BrainError) as err:
        other.api_key("cloud")
    assert err.value.key == "provider.key_unreadable"
    other.close()


def test_a_change_needs_a_valid_owner_signature_and_applies_between_turns(
    tmp_path: Path,
) -> None:
    p, phone, watch = store(tmp_path), SigningKey.generate(), SigningKey.generate()
    change = p.propose(CFG)
    assert "brain: m1 at http://127.0.0.1:9/v1 (local)" in change.summary()
    assert p.current().version == 0 and p.apply_pending() is None  # nothing yet
    with pytest.raises(BrainError) as err:  # signed by another key than the device's
        p.confirm(
            change.change_id,
            sign_change(change.body, watch),
            device_id="phone1",
            sign_pk=bytes(phone.verify_key),
            scopes=("approve",),
        )
    assert err.value.key == "provider.change_refused" and "signature" in str(err.value)
    with pytest.raises(BrainError) as err:  # a device without the approve scope
        confirm(p, change, phone, scopes=("utter", "ack"))
    assert "scope" in str(err.value)
    confirmed = confirm(p, change, phone)
    assert confirmed.state == "confirmed" and p.current().version == 0
    with pytest.raises(BrainError):  # a confirmation is used once
        confirm(p, change, phone)
    cfg = p.apply_pending()
    assert cfg is not None and cfg.version == 1 and cfg.endpoints("brain")[0].model == "m1"
    assert p.change(change.change_id).state == "applied"  # type: ignore[union-attr]
    late = p.propose(CFG)
    with pytest.raises(BrainError) as err:
        confirm(p, late, phone, now=late.expires_ms + 1)
    assert "expired" in str(err.value)


def test_concurrent_changes_second_is_stale_and_key_swap_voids(tmp_path: Path) -> None:
    p, phone = store(tmp_path), SigningKey.generate()
    a, b = (
        p.propose(CFG),
        p.propose({"roles": {"brain": [{"base_url": "http://127.0.0.1:9/v1", "model": "m2"}]}}),
    )
    confirm(p, a, phone)
    confirm(p, b, phone)
    assert p.apply_pending().endpoints("brain")[0].model == "m1"  # type: ignore[union-attr]
    assert p.change(b.change_id).state == "stale"  # type: ignore[union-attr]
    p.set_key("k2", "first")
    keyed = {
        "roles": {"brain": [{"base_url": "https://x.example/v1", "model": "m", "key_id": "k2"}]}
    }
    c = p.propose(keyed)
    confirm(p, c, phone)
    p.set_key("k2", "swapped after signing")
    assert p.apply_pending() is None
    assert p.change(c.change_id).state == "stale"  # type: ignore[union-attr]
    d = p.propose(keyed)
    confirm(p, d, phone)
    assert p.apply_pending() is not None
    with pytest.raises(BrainError) as err:
        p.set_key("k2", "in use now")
    assert err.value.key == "provider.key_in_use"


def test_two_connections_apply_a_confirmed_change_once(tmp_path: Path) -> None:
    # the brain (between turns) and hub ASR (between utterances) each apply from their own
    # connection: whoever comes first applies it, the other sees nothing to do
    brain, asr, phone = store(tmp_path), store(tmp_path), SigningKey.generate()
    confirm(brain, brain.propose(CFG), phone)
    assert asr.apply_pending() is not None
    assert brain.apply_pending() is None
    assert brain.current().version == asr.current().version == 1
    brain.close()
    asr.close()


# ---------------------------------------------------------------- cloud eligibility
def test_asr_route_local_first_usable_remote_only_with_voice_audio_allowed() -> None:
    remote = Endpoint("https://asr.example.com/v1", "whisper-1")
    loopback = Endpoint("http://127.0.0.1:8000/v1", "small")
    lan = Endpoint("http://192.168.1.5:8000/v1", "lan", local=True)  # vouched in the config
    words = frozenset({("utterance", "owner")})
    voice = words | {("audio", "voice")}
    none = asr_route(ProviderConfig(3))
    assert (none.version, none.endpoint, none.skipped) == (3, None, ())
    assert none.describe() == "local faster-whisper (no asr endpoint configured)"
    skipped = asr_route(ProviderConfig(4, {"asr": (remote,)}, words))
    assert skipped.endpoint is None
    assert skipped.describe() == (
        "local faster-whisper; skipped whisper-1 at https://asr.example.com/v1 (remote): voice "
        "audio may reach a remote endpoint only when audio:voice is in cloud_sources"
    )
    r = asr_route(ProviderConfig(5, {"asr": (remote, loopback)}, words))
    assert r.endpoint == loopback and len(r.skipped) == 1
    assert asr_route(ProviderConfig(6, {"asr": (remote, lan)}, words)).endpoint == lan
    assert asr_route(ProviderConfig(7, {"asr": (remote, loopback)}, voice)).endpoint == remote
    assert asr_route(ProviderConfig(8, {"brain": (remote,)}, voice)).endpoint is None
    assert asr_route(ProviderConfig(9, {"asr": (loopback,)})).describe() == (
        "endpoint small at http://127.0.0.1:8000/v1 (local)"
    )


def test_route_prefers_listed_order_local_or_eligible_else_waits() -> None:
    remote = Endpoint("https://api.example.com/v1", "cloud")
    local = Endpoint("http://127.0.0.1:11434/v1", "small")
    allowed = frozenset({("utterance", "owner"), ("profile", "core")})
    both = ProviderConfig(1, {"brain": (remote, local)}, allowed)
    only_remote = ProviderConfig(1, {"brain": (remote,)}, allowed)
    words = Provenance("low", (("utterance", "owner"),))
    ok_ctx = Provenance("low", (("profile", "core"),))
    medium = Provenance("medium", (("profile", "core"),))
    unlisted = Provenance("low", (("note", "n1"),))
    sourceless = Provenance("low", ())
    assert route(both, "brain", [words, ok_ctx]) == (remote, True)
    for bad in (medium, unlisted, sourceless):
        assert route(both, "brain", [words, bad]) == (local, True)
        assert route(only_remote, "brain", [words, bad]) == (None, True)
    assert route(ProviderConfig(), "brain", [words]) == (None, False)
    # a tool's output is high unless declared, and a memory hit's own level counts
    r = Receipt(
        status="succeeded",
        package="memory",
        tool="recall",
        effects=(Effect("memory.recalled", "verified", "a1", {"sensitivity": "low"}),),
    )
    assert receipt_provenance(r).sensitivity == "high"
    low = receipt_provenance(r, {"memory.recall": "low"})
    assert low.sensitivity == "low" and low.sources == (("tool", "memory.recall"),)
    hot = Receipt(
        **{**r.__dict__, "effects": (Effect("m", "verified", "a", {"sensitivity": "?"}),)}
    )
    assert receipt_provenance(hot, {"memory.recall": "low"}).sensitivity == "high"


def cloud_config(base_url: str, *, with_local: bool = True, **extra: Any) -> dict[str, Any]:
    remote = {"base_url": base_url, "model": "cloud-model", "local": False}
    local = {"base_url": base_url, "model": "local-model"}
    return {
        "roles": {
            "brain": [remote, local] if with_local else [remote],
            "subagent": [remote, local] if with_local else [remote],
        },
        "cloud_sources": ["utterance:owner", "profile:core"],
        **extra,
    }


PROFILE = StaticSource(
    "profile", [Snippet("The owner likes green tea.", "low", (("profile", "core"),))]
)
HEALTH = StaticSource(
    "health", [Snippet("Diagnosis: HYPERTENSION-X.", "high", (("health", "h1"),))]
)


async def test_cloud_gets_only_eligible_context_else_local_or_wait(tmp_path: Path) -> None:
    async with world(tmp_path, lambda req: text("ok")) as w:
        configure(w.providers, cloud_config(w.fake.base_url))
        await collect(w.brain.turn(Turn("what tea do I like", sources=[PROFILE])))
        assert [r.model for r in w.fake.chat_requests()] == ["cloud-model"]
        assert "green tea" in w.fake.chat_requests()[-1].message_text()

        await collect(w.brain.turn(Turn("how am I", sources=[PROFILE, HEALTH])))
        assert w.fake.chat_requests()[-1].model == "local-model"
        cloud_text = "".join(r.message_text() for r in w.fake.chat_requests("cloud-model"))
        assert "HYPERTENSION" not in cloud_text

        configure(w.providers, cloud_config(w.fake.base_url, with_local=False))
        before = len(w.fake.requests)
        reply = await collect(w.brain.turn(Turn("how am I", sources=[HEALTH], turn_id="t-wait")))
        assert "waits" in reply and len(w.fake.requests) == before
        waiting = w.store.require("t-wait")
        assert waiting.state == "admitted" and waiting.waiting_for == "an eligible model"
        assert "HYPERTENSION" in str(waiting.spec["waiting"])  # kept on the hub only

        # a local model arrives: the waiting turn runs there, with the same context
        configure(w.providers, cloud_config(w.fake.base_url))
        await collect(w.brain.turn(Turn("what tea do I like", sources=[PROFILE])))
        await poll(lambda: w.store.require("t-wait").finished)
        assert w.events.of("t-wait")[-1].text == "ok"
        local = [
            r for r in w.fake.chat_requests("local-model") if "HYPERTENSION" in r.message_text()
        ]
        assert len(local) == 2  # the first turn, and the one that waited
        assert "HYPERTENSION" not in "".join(
            r.message_text() for r in w.fake.chat_requests("cloud-model")
        )
        configure(w.providers, cloud_config(w.fake.base_url, with_local=False))
        before = len(w.fake.requests)

        # words whose source is not allow-listed (a guest's) never go to the cloud either
        reply = await collect(w.brain.turn(Turn("hello", scope="owner_uncertain")))
        assert "waits" in reply and len(w.fake.requests) == before


async def test_remote_sub_agent_gets_statuses_not_sensitive_tool_content(tmp_path: Path) -> None:
    def responder(req: Request) -> Reply:
        if req.model == "cloud-model" and "Job (" not in req.message_text():
            return delegate("recall my tea") if first_request(req) else text("Looking.")
        if first_request(req):
            return calls(("memory__recall", {"query": "tea"}))
        return text("done")

    async with world(tmp_path, responder) as w:
        from hub.gateway import CallContext, ToolCall

        seed = ToolCall(
            "memory",
            "commit",
            {
                "subject": "owner",
                "predicate": "likes",
                "value": "tea SECRET-BLEND",
                "owner_requested": True,
            },
            "seed",
            "seed",
        )
        await w.gw.call(seed, CallContext())
        configure(w.providers, cloud_config(w.fake.base_url, with_local=False))
        await collect(w.brain.turn(Turn("what tea do I like")))
        await w.brain.idle()
        report = w.fake.chat_requests()[-1].message_text()
        assert "[memory.recall] status: succeeded" in report
        assert "content withheld" in report and "SECRET-BLEND" not in report


# ---------------------------------------------------------------- secrets and switching
async def test_api_key_never_in_prompt_or_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "sk-test-NEVER-IN-PROMPT-9f8e7d"

    def responder(req: Request) -> Reply:
        if req.model == "brain-model":
            return delegate("check the kettle") if first_request(req) else text("Checking.")
        return (
            calls(("home__get_state", {"entity": "switch.kettle"}))
            if first_request(req)
            else text("off")
        )

    async with world(tmp_path, responder) as w:
        w.providers.set_key("fake-key", secret)
        cfg = fake_config(w.fake.base_url)
        for role in cfg["roles"].values():
            role[0]["key_id"] = "fake-key"
        configure(w.providers, cfg)
        await collect(w.brain.turn(Turn("is the kettle on")))
        await w.brain.idle()
        chats = w.fake.chat_requests()
        assert len(chats) == 4
        assert all(r.headers.get("authorization") == f"Bearer {secret}" for r in chats)
        assert all(secret.encode() not in r.raw for r in w.fake.requests)
        assert secret not in caplog.text
        assert all(secret not in str(e) for e in w.events.seen)


async def test_model_change_takes_effect_between_turns(tmp_path: Path) -> None:
    gate, asked = asyncio.Event(), asyncio.Event()

    async def responder(req: Request) -> Reply:
        if req.model == "brain-model":
            asked.set()
            await gate.wait()
        return text(f"answer from {req.model}")

    async with world(tmp_path, responder) as w:
        turn = asyncio.ensure_future(collect(w.brain.turn(Turn("first"))))
        await asyncio.wait_for(asked.wait(), 20)
        cfg = fake_config(w.fake.base_url)
        cfg["roles"]["brain"][0]["model"] = "brain-model-2"
        configure(w.providers, cfg)  # confirmed while the first turn is thinking
        gate.set()
        assert await turn == "answer from brain-model"
        assert await collect(w.brain.turn(Turn("second"))) == "answer from brain-model-2"
        assert w.brain.config.version == w.providers.current().version


async def test_open_brain_is_rule_based_until_a_model_is_confirmed(tmp_path: Path) -> None:
    from hub.brain import open_brain
    from hub.brain.providers import ProviderStore as Store
    from provisioning.home import Home
    from tests.brain_kit import BOOK, fake_gateway
    from tests.fake_openai import FakeOpenAI

    home = Home.init(tmp_path / "home")
    async with (
        FakeOpenAI(lambda req: text("Hello from the model.")) as fake,
        fake_gateway(tmp_path) as gw,
        open_brain(home, gw, contacts=BOOK, durable=False) as brain,
    ):
        assert brain.kind == "rule-based"
        first = await collect(brain.turn(Turn("hello")))
        assert first.startswith("I heard: hello. I can't do that yet") and fake.requests == []
        providers = Store.for_home(home)
        change = providers.propose(fake_config(fake.base_url))
        phone = SigningKey.generate()
        confirm(providers, change, phone)  # confirmed, applied at the next turn
        providers.close()
        assert await collect(brain.turn(Turn("hello"))) == "Hello from the model."
        assert brain.kind == "llm"
    assert (home.path / "brain" / "tasks.db").exists()


def test_the_configuration_is_read_once_per_change_and_sees_other_processes(
    tmp_path: Path,
) -> None:
    """``current()`` is asked on every turn: it is read from ``providers.db`` again only
    after this connection changed a row or another connection (``yimi model``, another
    process) committed one."""
    p, phone = store(tmp_path), SigningKey.generate()
    reads: list[str] = []

    def trace(_cursor: object, sql: str, _bindings: object) -> bool:
        reads.append(sql)
        return True

    p.db.exec_trace = trace

    def config_reads() -> int:
        return sum("FROM config" in sql for sql in reads)

    assert p.current().version == 0
    assert p.current() is p.current()  # unchanged: the same, not read again
    assert config_reads() == 1
    other = store(tmp_path)  # another process applies a change
    confirm(other, other.propose(CFG), phone)
    assert other.apply_pending() is not None
    other.close()
    assert p.current().version == 1 and p.current().endpoints("brain")[0].model == "m1"
    assert config_reads() == 2
    p.db.exec_trace = None
    confirm(p, p.propose({"roles": {}}), phone)  # this connection's own change
    assert p.apply_pending() is not None and p.current().version == 2
    p.close()


async def test_a_turn_closed_after_its_final_chunk_closes_the_brain_that_answered(
    tmp_path: Path,
) -> None:
    """The hub stops reading a turn at its final chunk and closes it: the rule brain's
    generator under it is closed then too, not left for the garbage collector (whose
    finalizer would close it later, in a task of its own)."""
    from hub.brain import open_brain
    from provisioning.home import Home
    from tests.brain_kit import BOOK, fake_gateway

    home = Home.init(tmp_path / "home")
    async with fake_gateway(tmp_path) as gw, open_brain(home, gw, contacts=BOOK) as brain:
        closed: list[str] = []
        answer = brain.rules.turn

        async def watched(turn: Turn) -> AsyncGenerator[ReplyChunk, None]:
            try:
                async for chunk in answer(turn):
                    yield chunk
            finally:
                closed.append(turn.text)

        brain.rules.turn = watched  # type: ignore[method-assign]
        chunks = brain.turn(Turn("hello"))
        first = await anext(chunks)
        assert first.final and first.text.startswith("I heard: hello.")
        await chunks.aclose()
        assert closed == ["hello"]
