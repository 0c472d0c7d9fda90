"""The offline brain understands its owner in Chinese and in English on the real mesh.

The hub runs in this process (mosquitto, gRPC, the gateway over the real memory, messaging
and home packages, the rule brain with the intent engine); the home package drives fake
Home Assistant-style MQTT-discovery devices (:class:`worlds.fakes.MqttHomeWorld`); e-mail
goes to a local SMTP server. Replies come from :mod:`hub.brain.replies`: the tests assert
key phrases of the right language, not whole sentences.

What is typed and what is spoken, and why:

- **typed** (``yimi say`` from a Mac and a phone bundle: the owner's turns): remember →
  recall, the shopping list added to on one device and read on the other, a kitchen light
  switched on and off, the time and the date, an unknown request — each in English and in
  Chinese. Typing covers every intent in both languages cheaply; the words reach the brain
  exactly as written.
- **spoken** (``yimi edge run --audio FILE --once`` on a glasses bundle, the hub hearing
  with multilingual Whisper base, language ``auto``): English synthesised by espeak-ng in
  the enrolled owner's voice ("Yimi, add bread to my shopping list"); a guest (another
  espeak-ng voice, not enrolled) asking for a private memory; and Chinese. espeak-ng's
  Mandarin is unintelligible to Whisper (``/work/shared/DEPENDENCIES.md``) and no Chinese
  synthesiser exists here, so the Chinese turn is an English espeak-ng "Yimi," (the wake
  word) followed by a natural Mandarin clip of pytest-audioeval ("你好世界"): the hub must
  hear it as Chinese and answer in Chinese.
- **a guest in Chinese**: with no intelligible Chinese speech to give a guest, Chinese
  guest requests are heard utterances queued in the Mac's outbox with no audio and no
  speaker embedding (as in ``tests/test_turns_mesh.py``): the hub admits them as a guest's.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest
import yaml

from hardware.espeak import Voice
from hardware.pcm import Samples
from hub.mesh.daemon import HubDaemon
from tests.mesh_harness import Mesh, messaging_config
from tests.mesh_harness import env as harness_env
from tests.speech import OTHERS, OWNER, chinese_clip, concat, say, silence, with_noise, write_wav
from tests.test_turns_mesh import queue_voice, reply_text, turn_id
from tests.test_voice_e2e import edge_once, enrol_owner
from tests.waiting import poll
from worlds.fakes import MqttHomeWorld, SmtpWorld

pytestmark = pytest.mark.slow

GUEST = OTHERS[1]
"""a voice the owner's voiceprint does not match (tests/test_speaker.py) and the default
"Yimi" templates wake on most surely (score 0.94 against the 0.93 line)"""


# ---------------------------------------------------------------- helpers
def prepare(mesh: Mesh, *, home_mqtt: tuple[str, int] | None, smtp: SmtpWorld | None) -> None:
    """Address book (Dana, also "达娜"), and the memory package; home on the fake devices'
    broker and messaging on the SMTP server when given."""
    (mesh.home / "contacts.yaml").write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Dana Lee",
                    "email": "dana@example.org",
                    "aliases": ["colleague", "达娜"],
                }
            ],
            allow_unicode=True,
        )
    )
    packages: dict[str, object] = {"memory": {}}
    if home_mqtt is not None:
        host, port = home_mqtt
        packages["home"] = {"config": {"MQTT_HOST": host, "MQTT_PORT": str(port)}}
    if smtp is not None:
        packages["messaging"] = {"config": messaging_config(smtp)}
    mesh.use_packages(packages)


async def typed(mesh: Mesh, bundle: Path, words: str, timeout: float = 30) -> str:
    """``yimi say WORDS`` from ``bundle``: the reply the device printed. Its own process
    group, killed if it outlives ``--timeout`` by far (a hung ``yimi say`` fails the test
    by name instead of holding it)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli",
        "say",
        "--bundle",
        str(bundle),
        "--hub",
        mesh.hub_target,
        "--timeout",
        str(timeout),
        words,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**harness_env(), **mesh.env},
        cwd=mesh.root,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout + 30)
    except TimeoutError:
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise AssertionError(f"yimi say {words!r} did not end within {timeout + 30:g} s") from None
    assert proc.returncode == 0, (words, out.decode(), err.decode())
    return out.decode()


def cjk(text: str) -> int:
    return sum("\u4e00" <= ch <= "\u9fff" for ch in text)


def latin(text: str) -> int:
    return sum(ch.isascii() and ch.isalpha() for ch in text)


def is_chinese(text: str, *content: str) -> bool:
    """Mostly Chinese once ``content`` (memories, items: the owner's own words, in whatever
    language they were said) is taken out."""
    for words in content:
        text = text.replace(words, "")
    return cjk(text) > 0 and cjk(text) >= latin(text)


def is_english(text: str) -> bool:
    return latin(text) > 0 and cjk(text) == 0


def voice_turns(mesh: Mesh) -> list[tuple[str, str, dict[str, object]]]:
    """(utterance id, text, meta) of the voice utterances on the hub's timeline."""
    rows = mesh.hub_query("SELECT id, text, meta FROM timeline WHERE kind='utterance' ORDER BY seq")
    turns = [(str(i), str(t), json.loads(str(m))) for i, t, m in rows]
    return [t for t in turns if t[2].get("source") == "voice"]


def receipts(hub: HubDaemon, task_id: str) -> list[tuple[str, str, str]]:
    gw = hub.consent.gateway
    assert gw is not None
    return [(r.package, r.tool, r.status) for r in gw.ledger.task_receipts(task_id)]


def rejected_tools(hub: HubDaemon) -> set[str]:
    gw = hub.consent.gateway
    assert gw is not None
    rows = gw.ledger.db.execute("SELECT tool FROM calls WHERE status='rejected'")
    return {str(t) for (t,) in rows}


# ---------------------------------------------------------------- typed, both languages
async def test_typed_turns_in_english_and_chinese(mesh: Mesh) -> None:
    """Typed by the owner on the Mac and the phone (one hub for every turn), each in both
    languages; then a guest's Chinese requests, heard utterances with no voiceprint."""
    mac = mesh.add_device("mac1", "mac")
    phone = mesh.add_device("phone1", "phone")
    async with MqttHomeWorld() as world, SmtpWorld() as smtp:
        devices = world.devices
        assert devices is not None
        prepare(mesh, home_mqtt=(world.broker.host, world.broker.port), smtp=smtp)
        async with mesh.hub_in_process() as hub:
            assert hub.turns.brain is not None and hub.turns.brain.kind == "rule-based"

            # remember → recall, in each language
            out = await typed(mesh, mac, "remember I don't eat cilantro")
            assert "I'll remember: I don't eat cilantro" in out, out
            out = await typed(mesh, mac, "what do you remember about cilantro")
            assert "About cilantro I remember" in out and "I don't eat cilantro" in out, out
            out = await typed(mesh, mac, "记住我对花生过敏")
            assert "好的，我记住了：我对花生过敏" in out, out
            out = await typed(mesh, phone, "我对什么过敏？")
            assert "我记得" in out and "我对花生过敏" in out, out
            assert is_chinese(out, "I don't eat cilantro", "owner"), out
            # across languages: the Chinese question finds the English memory
            out = await typed(mesh, mac, "我不吃什么？")
            assert "我记得" in out and "I don't eat cilantro" in out, out

            # the shopping list: added to on one device, read on the other
            out = await typed(mesh, mac, "add milk to my shopping list")
            assert "Added milk to your shopping list" in out, out
            out = await typed(mesh, phone, "把鸡蛋加到购物清单")
            assert "已把鸡蛋加到购物清单" in out, out
            out = await typed(mesh, phone, "what's on my shopping list")
            assert "On your shopping list" in out and "milk" in out and "鸡蛋" in out, out
            out = await typed(mesh, mac, "购物清单上有什么")
            assert "你的购物清单上有" in out and "milk" in out and "鸡蛋" in out, out

            # a Home Assistant-style light: on in English, off in Chinese
            light = next(d for d in devices.devices if d["object_id"] == "kitchen")
            out = await typed(mesh, mac, "turn on the kitchen light")
            assert "Kitchen light" in out and is_english(out), out
            await poll(lambda: light["state"] == "ON", 10, "the kitchen light on")
            assert ("light.kitchen", "ON") in devices.commands, devices.commands
            out = await typed(mesh, phone, "把厨房的灯关掉")
            assert "关闭Kitchen light" in out and is_chinese(out, "Kitchen light"), out
            await poll(lambda: light["state"] == "OFF", 10, "the kitchen light off")
            assert devices.commands[-1] == ("light.kitchen", "OFF"), devices.commands

            # the time and the date
            year = str(__import__("datetime").date.today().year)
            out = await typed(mesh, mac, "what time is it")
            assert "It's " in out and ("am" in out or "pm" in out), out
            out = await typed(mesh, mac, "what's the date today")
            assert "Today is " in out and year in out, out
            out = await typed(mesh, phone, "现在几点")
            assert "现在是" in out and "点" in out and is_chinese(out), out
            out = await typed(mesh, phone, "今天几号")
            assert "今天是" in out and f"{year}年" in out and "星期" in out, out

            # unknown requests: the honest answer in the request's language, no action
            commands = len(devices.commands)
            out = await typed(mesh, mac, "write me a poem")
            assert "I can't do that yet" in out and "here is what I can do" in out, out
            assert is_english(out), out
            out = await typed(mesh, phone, "给我讲个笑话")
            assert "这个我还做不到" in out and "我能做的有" in out and is_chinese(out), out
            for words in ("write me a poem", "给我讲个笑话"):
                assert receipts(hub, turn_id(mesh, words)) == [], words
            assert len(devices.commands) == commands
            assert smtp.messages() == []

            # a guest in Chinese: neither a private memory nor an e-mail
            recall = queue_voice(mac, "我对什么过敏？")
            send = queue_voice(mac, "给达娜发邮件说我晚到")
            edge = await asyncio.to_thread(mesh.start_edge, mac, hub=mesh.hub_target)
            await poll(lambda: reply_text(mesh, recall) and reply_text(mesh, send), 30, "replies")
            recalled, sent = reply_text(mesh, recall), reply_text(mesh, send)
            assert "不允许" in recalled and "花生" not in recalled, recalled
            assert "只有主人" in recalled and "memory" not in recalled, recalled
            assert is_chinese(recalled), recalled
            assert "不允许" in sent and "卡片" not in sent and is_chinese(sent), sent

            # both refusals reach the Mac before its daemon stops (stopping it with a
            # delivery still in flight has held the hub's shutdown at times)
            def shown() -> bool:
                return recalled in edge.text() and sent in edge.text()

            await poll(shown, 20, "the refusals on the Mac")
            assert "花生" not in edge.text().split("不允许", 1)[1], edge.text()
            gw = hub.consent.gateway
            assert gw is not None
            assert smtp.messages() == [] and gw.consent.pending() == []
            assert rejected_tools(hub) >= {"send_email", "recall"}
            await asyncio.to_thread(mesh.stop, edge)  # the hub runs in this loop
        guests = [
            (json.loads(str(m))["scope"], json.loads(str(m))["source"])
            for (m,) in mesh.hub_query(
                "SELECT meta FROM timeline WHERE kind='utterance' AND id IN (?, ?)", recall, send
            )
        ]
        assert guests == [("guest", "voice"), ("guest", "voice")], guests


# ---------------------------------------------------------------- spoken
def woken(voice: Voice, *request: Samples) -> Samples:
    """The wake word on its own, then the request: Whisper base hears espeak-ng's "Yimi,
    add bread" run together as "and Brent"; a "please" keeps the words the wake word's
    tail may cut off."""
    return concat(say("Yimi,", voice), silence(0.3), *request)


def owner_wav(path: Path) -> Path:
    """The owner (espeak-ng) adds bread to the list; seconds later the owner's English
    "Yimi," wakes the device for a natural Mandarin clip ("你好世界")."""
    audio = concat(
        silence(1.0),
        woken(OWNER, say("please add bread to my shopping list.", OWNER)),
        silence(6.0),
        woken(OWNER, chinese_clip("nihao_shijie")),
        silence(2.5),
    )
    return write_wav(path, with_noise(audio, snr_db=30.0))


def guest_wav(path: Path) -> Path:
    """A guest (another espeak-ng voice) asks for a private memory, twice, seconds apart.
    A file of its own: the device does not wake while its last request is still being
    answered, and an edge run reads a file much faster than it is spoken. Twice: the
    default "Yimi" templates rate every espeak-ng guest voice just over their line (0.94
    against 0.93), and now and then the wake misses one of them."""
    ask = woken(GUEST, say("What do you remember about cilantro?", GUEST))
    audio = concat(silence(1.0), ask, silence(6.0), ask, silence(2.5))
    return write_wav(path, with_noise(audio, snr_db=30.0))


async def test_spoken_turns_in_english_and_chinese(mesh: Mesh, tmp_path: Path) -> None:
    """Spoken into the glasses, heard by the hub's Whisper base (language auto): the
    enrolled owner's English (espeak-ng) adds bread to the list, read on the Mac; an English
    "Yimi," and a natural Mandarin clip are heard as Chinese and answered in Chinese; a
    guest's voice asking for a memory gets no memory (the recall refused). Chinese requests
    are not synthesised: espeak-ng's Mandarin is unintelligible to Whisper (module doc)."""
    mesh.configure(asr={"model": "whisper-base", "language": "auto"})
    mac = mesh.add_device("mac1", "mac")
    glasses = mesh.add_device("glasses1")
    prepare(mesh, home_mqtt=None, smtp=None)
    async with mesh.hub_in_process() as hub:
        await asyncio.to_thread(enrol_owner, mesh, glasses, tmp_path)
        out = await typed(mesh, mac, "remember I don't eat cilantro")
        assert "I'll remember" in out, out

        for wav in (owner_wav(tmp_path / "owner.wav"), guest_wav(tmp_path / "guest.wav")):
            code, output = await asyncio.to_thread(
                edge_once, mesh, glasses, wav, tmp_path / f"spoken-{wav.name}"
            )
            assert code == 0, output
        turns = voice_turns(mesh)
        assert 3 <= len(turns) <= 4, turns
        (_, bread, owner), (zh_id, heard, zh), *guests = turns

        # the owner's English request: on the list
        assert "bread" in bread.lower(), bread
        assert (owner["scope"], owner["language"]) == ("owner", "en"), owner
        assert str(owner["asr_model"]).startswith("faster-whisper:whisper-base@"), owner
        brain = hub.turns.brain
        assert brain is not None
        await poll(
            lambda: any("bread" in i.item.lower() for i in brain.rules.lists.items("shopping")),
            20,
            "bread on the shopping list",
        )
        out = await typed(mesh, mac, "what's on my shopping list")
        assert "bread" in out.lower(), out

        # the guest: no private memory, the memory tool refused
        for uid, asked, guest in guests:
            assert "what do you remember" in asked.lower(), asked  # "cilantro": "Kilaidra"
            assert guest["scope"] == "guest", guest
            answer = reply_text(mesh, uid)
            assert "I may not" in answer and "eat cilantro" not in answer, answer
            assert "only the owner" in answer and "memory" not in answer, answer
        assert "recall" in rejected_tools(hub)

        # Chinese heard as Chinese, answered in Chinese
        assert zh["language"] == "zh", (heard, zh)
        assert cjk(heard) >= 2, heard
        answer = reply_text(mesh, zh_id)
        assert is_chinese(answer), (heard, answer)
        # a greeting is no request Yimi knows: the honest answer, in Chinese (the clip is
        # another person's voice, so the turn is a guest's; the answer is the same for all)
        assert "这个我还做不到" in answer and "我能做的有" in answer, (heard, answer)
        assert "eat cilantro" not in answer, answer
