"""Facts from receipts, and the deterministic reply checker (no model involved).

Facts the owner hears come from receipts, rendered by per-fact-kind templates (a text form
and a shorter voice form); the model writes only content and tone. :func:`check_reply`
takes the model's reply and the turn's receipts and

- removes sentences whose numbers with units (Arabic or Chinese numerals: 二十一点五度),
  status words (sent / saved / turned on / paid… and their Chinese forms) or device states
  contradict the receipts — a "sent" or "saved" claim with no receipt that did it counts
  as a contradiction;
- removes suggestions to redo an action whose receipt says ``retry: forbidden``;
- appends the template sentence of every fact the reply leaves out.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from hub.gateway.receipts import Effect, Receipt, Value, canonical


@dataclass(frozen=True)
class Fact:
    fact_id: str
    kind: str
    text: str
    voice: str
    keys: tuple[str, ...] = ()
    """strings whose presence in a reply means the fact was stated"""
    value: float | None = None
    unit: str | None = None


@dataclass
class Checked:
    text: str
    removed: list[tuple[str, str]] = field(default_factory=list)
    """(sentence, reason) pairs taken out"""
    added: list[str] = field(default_factory=list)
    """fact sentences appended"""


def _fact_id(kind: str, fields: Any) -> str:
    return hashlib.sha256(kind.encode() + b"\x00" + canonical(fields)).hexdigest()[:16]


def _num(v: float | int | str) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


# ---------------------------------------------------------------- templates
# A template takes the effect and the language ("en" / "zh") and gives (text, voice form,
# keys). Chinese facts are written as Chinese sentences; names and ids stay as they are.
EffectTemplate = Callable[[Effect, str], tuple[str, str, tuple[str, ...]]]
LANGS = ("en", "zh")
BOOKKEEPING = frozenset({"version"})
"""units of values that are the package's bookkeeping (a record's version), never said"""
_ZH_STATES = {
    "on": "开着",
    "off": "关着",
    "locked": "锁着",
    "unlocked": "没锁",
    "open": "开着",
    "closed": "关着",
    "jammed": "卡住了",
    "unavailable": "离线",
}
_NO_STATE = {
    "unknown": ("{name}: state unknown.", "{name}: state unknown.", "{name}状态未知。"),
    "unavailable": (
        "{name} is unavailable (offline).",
        "{name} is offline.",
        "{name}现在离线（不可用）。",
    ),
}
"""device states that are not a reading: (text, voice, Chinese)"""


def _zh(lang: str) -> bool:
    return lang == "zh"


def _email_sent(e: Effect, lang: str = "en") -> tuple[str, str, tuple[str, ...]]:
    to = str(e.fields.get("to") or e.target)
    subject = str(e.fields.get("subject", ""))
    if _zh(lang):
        about = f"（主题：“{subject}”）" if subject else ""
        return f"邮件已发给{to}{about}。", f"已发给{to}。", (to,)
    about = f" about “{subject}”" if subject else ""
    return f"Sent the e-mail to {to}{about}.", f"Sent to {to}.", (to,)


_LEVELS = (
    ("brightness", "brightness", "亮度"),
    ("position", "position", "位置"),
    ("volume", "volume", "音量"),
)


def _levels(e: Effect) -> list[tuple[str, str, int]]:
    """(English name, Chinese name, 0..100) of the levels a home effect carries"""
    out = []
    for k, en, zh in _LEVELS:
        v = e.fields.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            out.append((en, zh, v))
    return out


def _device_state(e: Effect, lang: str = "en") -> tuple[str, str, tuple[str, ...]]:
    name = str(e.fields.get("name") or e.target)
    state = str(e.fields.get("state", "unknown"))
    if state in _NO_STATE:
        text, voice, zh = (t.format(name=name) for t in _NO_STATE[state])
        return (zh, zh, (name,)) if _zh(lang) else (text, voice, (name,))
    levels = _levels(e)
    if _zh(lang):
        zh = _ZH_STATES.get(state.lower(), state)
        if levels:
            parts = "，".join(f"{z}百分之{_num(v)}" for _, z, v in levels)
            return f"{name}现在{zh}（{parts}）。", f"{name}{zh}，{parts}。", (name,)
        return f"{name}现在{zh}。", f"{name}{zh}。", (name,)
    if levels:
        text = ", ".join(f"{en} {_num(v)} %" for en, _, v in levels)
        voice = ", ".join(f"{en} {_num(v)} percent" for en, _, v in levels)
        return f"{name} is {state} ({text}).", f"{name}: {state}, {voice}.", (name,)
    return f"{name} is {state}.", f"{name}: {state}.", (name,)


def _device_set(e: Effect, lang: str = "en") -> tuple[str, str, tuple[str, ...]]:
    name = str(e.fields.get("name") or e.target)
    state = str(e.fields.get("state", ""))
    setpoint = e.fields.get("target_temperature")
    if isinstance(setpoint, int | float) and not isinstance(setpoint, bool):
        unit = str(e.fields.get("unit") or "°C")
        if _zh(lang):
            return (
                f"已把{name}设到{_num(setpoint)}{unit}。",
                f"{name}：{_num(setpoint)}度。",
                (name,),
            )
        return (
            f"Set {name} to {_num(setpoint)} {unit}.",
            f"{name}: {_num(setpoint)} degrees.",
            (name,),
        )
    levels = _levels(e)
    if _zh(lang):
        if levels:
            parts = "，".join(f"{z}百分之{_num(v)}" for _, z, v in levels)
            return f"已把{name}调到{parts}。", f"{name}：{parts}。", (name,)
        verb = {"on": "打开", "off": "关闭", "open": "打开", "closed": "关上"}.get(
            state.lower(), f"设为{state}"
        )
        return f"已{verb}{name}。", f"{name}已{verb}。", (name,)
    if levels:
        text = ", ".join(f"{en} {_num(v)} %" for en, _, v in levels)
        voice = ", ".join(f"{en} {_num(v)} percent" for en, _, v in levels)
        return f"Set {name} to {text}.", f"{name}: {voice}.", (name,)
    if state in ("open", "closed"):
        verb = "Opened" if state == "open" else "Closed"
        return f"{verb} {name}.", f"{name} {state}.", (name,)
    return f"Turned {name} {state}.", f"{name} {state}.", (name,)


def _command_ran(e: Effect, lang: str = "en") -> tuple[str, str, tuple[str, ...]]:
    cmd = str(e.fields.get("command", e.target))
    if _zh(lang):
        return f"在Mac上运行了{cmd}。", f"运行了{cmd}。", (cmd,)
    return f"Ran {cmd} on the Mac.", f"Ran {cmd}.", (cmd,)


def _file_read(e: Effect, lang: str = "en") -> tuple[str, str, tuple[str, ...]]:
    path = str(e.fields.get("path", e.target))
    if _zh(lang):
        return f"在Mac上读取了{path}。", f"读取了{path}。", (path,)
    return f"Read {path} on the Mac.", f"Read {path}.", (path,)


def _money(e: Effect) -> str:
    from hub.payments.money import fmt

    try:
        return fmt(int(e.fields.get("amount_minor", 0)), str(e.fields.get("currency", "")))
    except (TypeError, ValueError):
        return "an unreadable amount"


def _payment_paid(e: Effect, lang: str = "en") -> tuple[str, str, tuple[str, ...]]:
    payee = str(e.fields.get("payee") or e.target)
    amount = _money(e)
    if _zh(lang):
        return f"已向{payee}支付{amount}。", f"已向{payee}支付{amount}。", (payee,)
    return f"Paid {amount} to {payee}.", f"Paid {amount} to {payee}.", (payee,)


def _checkout_opened(e: Effect, lang: str = "en") -> tuple[str, str, tuple[str, ...]]:
    payee = str(e.fields.get("payee") or e.target)
    amount = _money(e)
    if _zh(lang):
        return (
            f"结账：向{payee}支付{amount}（还没有付款）。",
            f"结账：向{payee}支付{amount}。",
            (payee,),
        )
    return (
        f"At the checkout: {amount} to {payee} (not paid).",
        f"Checkout: {amount} to {payee}.",
        (payee,),
    )


_ZH_LISTS = {"shopping": "购物清单", "todo": "待办事项"}


def _list_item(e: Effect, lang: str = "en") -> tuple[str, str, tuple[str, ...]]:
    item = str(e.fields.get("item", ""))
    name = str(e.fields.get("list") or e.target)
    zh = _ZH_LISTS.get(name, name) if _zh(lang) else ""
    en = "to-do list" if name == "todo" else f"{name} list"
    if e.kind == "list.read":
        items = [str(x) for x in e.fields.get("items") or []]
        if zh:
            text = f"你的{zh}上有：{'；'.join(items)}。" if items else f"你的{zh}是空的。"
            return text, text, tuple(items) or ("空",)
        text = f"On your {en}: {'; '.join(items)}." if items else f"Your {en} is empty."
        return text, text, tuple(items) or ("empty",)
    text = {
        "list.added": (f"已把{item}加到{zh}。", f"Added {item} to your {en}."),
        "list.present": (f"{item}已经在{zh}上了。", f"{item} is already on your {en}."),
        "list.completed": (f"已把{item}从{zh}上勾掉。", f"Checked {item} off your {en}."),
    }[e.kind][0 if zh else 1]
    return text, text, (item,)


def _memory(e: Effect, lang: str = "en") -> tuple[str, str, tuple[str, ...]]:
    saved = e.kind == "memory.committed"
    if _zh(lang):
        text = "已存入你的记忆。" if saved else "已从你的记忆中删除。"
        return text, text, ("记住", "记下", "存") if saved else ("忘", "删除")
    text = "Saved in your memory." if saved else "Deleted from your memory."
    return text, text, ("remember", "saved") if saved else ("forgot", "deleted")


def _generic_effect(e: Effect, lang: str = "en") -> tuple[str, str, tuple[str, ...]]:
    what = e.kind.replace(".", " ").replace("_", " ")
    keys = (e.target,) if e.target else ()
    if _zh(lang):
        on = f"（{e.target}）" if e.target else ""
        return f"已完成：{what}{on}。", f"已完成：{what}。", keys
    on = f" ({e.target})" if e.target else ""
    return f"Done: {what}{on}.", f"Done: {what}.", keys


EFFECT_TEMPLATES: dict[str, EffectTemplate] = {
    "email.sent": _email_sent,
    "device.state": _device_state,
    "device.set": _device_set,
    "command.ran": _command_ran,
    "file.read": _file_read,
    "payment.paid": _payment_paid,
    "checkout.opened": _checkout_opened,
    "list.added": _list_item,
    "list.completed": _list_item,
    "list.present": _list_item,
    "list.read": _list_item,
    "memory.committed": _memory,
    "memory.forgotten": _memory,
}

STATUS_TEMPLATES: dict[str, tuple[str, str]] = {
    "waiting": (
        "Waiting for your confirmation on your phone: {action}. Not executed yet.",
        "Waiting for your OK on the phone.",
    ),
    "unknown": ("I could not verify whether {action} happened.", "Not verified: {action}."),
    "partial": ("{action} was only partly done.", "Partly done: {action}."),
    "failed": ("{action} failed: {reason}.", "{action} failed."),
    "cancelled": ("Cancelled: {action}. Nothing was done.", "Cancelled: {action}."),
    "rejected": ("Not done: {action} ({reason}).", "Not done: {action}."),
    "not_executed": ("Not executed: {action} ({reason}).", "Not executed: {action}."),
    "running": ("Still working on {action}.", "Still working on it."),
}
STATUS_TEMPLATES_ZH: dict[str, tuple[str, str]] = {
    "waiting": ("正在等你在手机上确认：{action}。还没有执行。", "等你在手机上确认。"),
    "unknown": ("我无法确认{action}是否完成。", "无法确认：{action}。"),
    "partial": ("{action}只完成了一部分。", "部分完成：{action}。"),
    "failed": ("{action}失败了：{reason}。", "{action}失败了。"),
    "cancelled": ("已取消：{action}。什么都没有做。", "已取消：{action}。"),
    "rejected": ("没有执行：{action}（{reason}）。", "没有执行：{action}。"),
    "not_executed": ("未执行：{action}（{reason}）。", "未执行：{action}。"),
    "running": ("还在进行：{action}。", "还在进行。"),
}
STATUS_KEYS: dict[str, tuple[str, ...]] = {
    "waiting": ("confirm", "waiting", "approve", "approval", "确认", "等待", "批准"),
    "unknown": ("verify", "not sure", "unknown", "not confirmed", "确认不了", "不确定", "无法确认"),
    "partial": ("partly", "partially", "part of it", "部分"),
    "failed": ("failed", "could not", "couldn't", "失败", "没能"),
    "cancelled": ("cancel", "取消"),
    "rejected": ("not done", "not allowed", "blocked", "may not", "不允许", "不能"),
    "not_executed": ("not executed", "not done", "没有执行", "未执行"),
    "running": ("still", "working on", "进行"),
}


def action_phrase(r: Receipt) -> str:
    what = r.tool.replace("_", " ") or "the action"
    return f"{what} ({r.target})" if r.target else what


def facts_of(r: Receipt, lang: str = "en") -> list[Fact]:
    """The facts a receipt supports, in order: status fact, confirmed effects, values.

    ``lang``: the language of the texts (``en`` / ``zh``); ids do not depend on it."""
    zh = _zh(lang)
    out: list[Fact] = []
    if r.status in STATUS_TEMPLATES:
        text_t, voice_t = (STATUS_TEMPLATES_ZH if zh else STATUS_TEMPLATES)[r.status]
        fields = {
            "action": action_phrase(r),
            "reason": r.error or ("没有说明原因" if zh else "no reason given"),
        }
        text = text_t.format(**fields)
        out.append(
            Fact(
                _fact_id(f"status.{r.status}", [r.task_id, r.call_id, r.revision]),
                f"status.{r.status}",
                text[0].upper() + text[1:],
                voice_t.format(**fields),
                STATUS_KEYS[r.status],
            )
        )
    if r.status in ("succeeded", "partial"):
        for e in r.confirmed_effects:
            text, voice, keys = EFFECT_TEMPLATES.get(e.kind, _generic_effect)(e, lang)
            out.append(Fact(_fact_id(e.kind, [e.target, e.fields]), e.kind, text, voice, keys))
    for v in r.values:
        if v.flagged or isinstance(v.value, str) or normal_unit(v.unit or "") in BOOKKEEPING:
            continue
        unit = normal_unit(v.unit or "")
        if zh:
            text, voice = (
                f"{v.name}：{_num(v.value)} {v.unit}。",
                f"{v.name}{_num(v.value)}{v.unit}",
            )
        else:
            text, voice = (
                f"{v.name}: {_num(v.value)} {v.unit}.",
                f"{v.name} {_num(v.value)} {v.unit}",
            )
        out.append(
            Fact(
                _fact_id("value", [v.name, v.value, v.unit, v.source]),
                "value",
                text,
                voice,
                (),
                float(v.value),
                unit,
            )
        )
    return out


def summary(r: Receipt, facts: list[Fact] | None = None) -> str:
    """One sentence for a card update or a log line (``facts``: ``facts_of(r)``, if known)."""
    facts = facts_of(r) if facts is None else facts
    return " ".join(f.text for f in facts[:2]) if facts else f"{action_phrase(r)}: {r.status}."


# ---------------------------------------------------------------- numbers and units
_CN_DIGITS = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_CN_UNITS = {"十": 10, "百": 100, "千": 1000, "万": 10000}


def chinese_number(text: str) -> float | None:
    """二十一点五 → 21.5, 十五 → 15, 三百零二 → 302, 两 → 2; ``None`` if not a numeral."""
    if not text:
        return None
    whole, _, frac = text.partition("点")
    total, section, digit = 0, 0, None
    for ch in whole:
        if ch in _CN_DIGITS:
            digit = _CN_DIGITS[ch]
        elif ch in _CN_UNITS:
            mult = _CN_UNITS[ch]
            if mult == 10000:
                total = (total + section + (digit or 0)) * mult
                section = 0
            else:
                section += (digit if digit is not None else 1) * mult
            digit = None
        else:
            return None
    value = float(total + section + (digit or 0))
    if frac:
        digits = [str(_CN_DIGITS[c]) for c in frac if c in _CN_DIGITS]
        if len(digits) != len(frac):
            return None
        value += float("0." + "".join(digits))
    return value


UNIT_ALIASES: dict[str, str] = {
    "°c": "°C",
    "℃": "°C",
    "度": "°C",
    "degrees": "°C",
    "degree": "°C",
    "c": "°C",
    "celsius": "°C",
    "摄氏度": "°C",
    "%": "%",
    "percent": "%",
    "％": "%",
    "w": "W",
    "watt": "W",
    "watts": "W",
    "瓦": "W",
    "kwh": "kWh",
    "千瓦时": "kWh",
    "min": "min",
    "mins": "min",
    "minute": "min",
    "minutes": "min",
    "分钟": "min",
    "s": "s",
    "sec": "s",
    "second": "s",
    "seconds": "s",
    "秒": "s",
    "lx": "lx",
    "lux": "lx",
    "勒克斯": "lx",
    "items": "items",
    "item": "items",
    "count": "items",
    "个": "items",
    "封": "items",
    "e-mails": "items",
    "emails": "items",
    "messages": "items",
    "mb": "MB",
    "gb": "GB",
    "kb": "KB",
    "bytes": "B",
    "b": "B",
    # money (receipts carry ISO 4217 codes: an amount said is checked against them)
    "eur": "EUR",
    "euro": "EUR",
    "euros": "EUR",
    "usd": "USD",
    "dollars": "USD",
    "gbp": "GBP",
    "pounds": "GBP",
    "chf": "CHF",
    "cny": "CNY",
    "jpy": "JPY",
    "yen": "JPY",
    "欧元": "EUR",
    "欧": "EUR",
    "美元": "USD",
    "英镑": "GBP",
    "瑞郎": "CHF",
    "日元": "JPY",
    "元": "CNY",
    "块钱": "CNY",
    "块": "CNY",
    "人民币": "CNY",
}
CURRENCY_SIGNS = {"€": "EUR", "$": "USD", "£": "GBP", "¥": "CNY", "￥": "CNY"}
"""a currency sign before the amount: ``€30.00``"""


def normal_unit(unit: str) -> str:
    u = unit.strip()
    return UNIT_ALIASES.get(u.lower(), UNIT_ALIASES.get(u, u))


_UNIT_RE = "|".join(
    sorted((re.escape(u) for u in UNIT_ALIASES if u not in ("c", "b", "s")), key=len, reverse=True)
)
_AR_RE = re.compile(rf"(-?\d+(?:\.\d+)?)\s*({_UNIT_RE}|s\b|b\b|c\b)?", re.IGNORECASE)
_CN_RE = re.compile(rf"([零〇一二两三四五六七八九十百千万点]+)\s*({_UNIT_RE})?")
_SIGN_RE = re.compile(r"([€$£¥￥])\s*(\d+(?:[.,]\d+)?)")


def numbers_in(sentence: str) -> list[tuple[float, str | None]]:
    """(number, normalised unit or None) for each numeral in ``sentence``."""
    found: list[tuple[float, str | None]] = []
    signed = set()
    for m in _SIGN_RE.finditer(sentence):
        found.append((float(m.group(2).replace(",", ".")), CURRENCY_SIGNS[m.group(1)]))
        signed.add(m.start(2))
    for m in _AR_RE.finditer(sentence):
        if m.start(1) in signed:
            continue
        found.append((float(m.group(1)), normal_unit(m.group(2)) if m.group(2) else None))
    for m in _CN_RE.finditer(sentence):
        value = chinese_number(m.group(1))
        if value is not None and m.group(1) != "点":
            found.append((value, normal_unit(m.group(2)) if m.group(2) else None))
    return found


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= max(0.051, abs(b) * 0.005)


# ---------------------------------------------------------------- checker
_NEG = re.compile(r"\b(not|n't|never|no|yet to|waiting)\b|没|未|不|尚", re.IGNORECASE)
CLAIMS: dict[str, tuple[re.Pattern[str], frozenset[str]]] = {
    "sent": (
        re.compile(
            r"\b(sent|e-?mailed|mailed|delivered|forwarded)\b|已发送|发送了|发出|发好了|已发",
            re.IGNORECASE,
        ),
        frozenset({"send"}),
    ),
    "saved": (
        re.compile(r"\b(saved|stored|written|wrote)\b|已保存|保存了|存好了|存下", re.IGNORECASE),
        frozenset({"owner_data", "workspace"}),
    ),
    "switched": (
        re.compile(
            r"\b(turned|switched)\s+(on|off)\b|已打开|打开了|已关闭|关掉了|关上了", re.IGNORECASE
        ),
        frozenset({"physical"}),
    ),
    "paid": (
        re.compile(
            r"\b(paid|charged|purchased|bought|ordered)\b|已付款|付款了|付了|已支付|支付了|买好了",
            re.IGNORECASE,
        ),
        frozenset({"spend"}),
    ),
    "done": (
        re.compile(r"\b(done|completed|finished|succeeded)\b|完成了|已完成|搞定", re.IGNORECASE),
        frozenset({"send", "owner_data", "workspace", "physical", "account", "delete"}),
    ),
}
RETRY_SUGGESTION = re.compile(
    r"\b(try again|retry|resend|re-send|send it again|do it again|once more|pay again)\b"
    r"|重试|再发|重新发送|再试|再付",
    re.IGNORECASE,
)
_STATE_WORDS = re.compile(r"\b(on|off|open|closed|locked|unlocked)\b|开着|关着|锁着", re.IGNORECASE)
_CN_STATE = {"开着": "on", "关着": "off", "锁着": "locked"}
_SPLIT = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*|\n+")


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SPLIT.split(text) if s and s.strip()]


def _contradiction(sentence: str, receipts: list[Receipt]) -> str | None:
    values = [
        v for r in receipts for v in r.values if not v.flagged and not isinstance(v.value, str)
    ]
    for number, unit in numbers_in(sentence):
        if unit is None:
            continue
        same_unit = [v for v in values if normal_unit(v.unit or "") == unit]
        if same_unit and not any(_close(number, float(v.value)) for v in same_unit):
            return f"{_num(number)} {unit} contradicts the receipts"
    negated = bool(_NEG.search(sentence))
    if not negated:
        for name, (pattern, effects) in CLAIMS.items():
            if not pattern.search(sentence):
                continue
            relevant = [r for r in receipts if r.effect in effects]
            if not any(r.status == "succeeded" for r in relevant):
                shown = ", ".join(sorted({r.status for r in relevant})) or "no receipt"
                return f"claims {name!r} but the receipts say {shown}"
    for r in receipts:
        for e in r.effects:
            if e.kind != "device.state" or e.state not in ("verified", "service_ack"):
                continue
            name = str(e.fields.get("name") or e.target)
            if not name or name.lower() not in sentence.lower():
                continue
            for m in _STATE_WORDS.finditer(sentence):
                said = _CN_STATE.get(m.group(0), m.group(0).lower())
                if said != str(e.fields.get("state", "")).lower():
                    return f"{name} is {e.fields.get('state')}, not {said}"
    if RETRY_SUGGESTION.search(sentence) and any(r.next.retry == "forbidden" for r in receipts):
        return "suggests redoing an action that must not be retried"
    return None


def _mentioned(fact: Fact, text: str) -> bool:
    if fact.kind == "value" and fact.value is not None:
        return any(
            _close(n, fact.value) and (u is None or u == fact.unit) for n, u in numbers_in(text)
        )
    low = text.lower()
    return any(k and k.lower() in low for k in fact.keys)


def check_reply(
    text: str,
    receipts: Iterable[Receipt],
    *,
    voice: bool = False,
    said: Iterable[str] = (),
    lang: str = "en",
) -> Checked:
    """Remove contradicting sentences; add template sentences for facts left out.

    ``said``: fact ids already said (ACKed) in this task — they are not added again.
    ``lang``: the reply's language (``en`` / ``zh``): the language of the added facts."""
    receipts = list(receipts)
    kept: list[str] = []
    out = Checked("")
    for s in sentences(text):
        reason = _contradiction(s, receipts)
        if reason is None:
            kept.append(s)
        else:
            out.removed.append((s, reason))
    cleaned = " ".join(kept)
    done = set(said)
    for r in receipts:
        for fact in facts_of(r, lang):
            if fact.fact_id in done or _mentioned(fact, cleaned):
                continue
            done.add(fact.fact_id)
            sentence = fact.voice if voice else fact.text
            out.added.append(sentence)
    out.text = join_sentences([*kept, *out.added])
    return out


def join_sentences(parts: list[str]) -> str:
    """Sentences one after another: a space after Latin punctuation, none after Chinese."""
    text = ""
    for p in parts:
        if p:
            text += ("" if not text or text[-1] in "。！？；：）" else " ") + p
    return text


def fact_map(receipts: Iterable[Receipt]) -> dict[str, str]:
    """fact id → text for every fact of ``receipts`` (the ledger records them)."""
    return {f.fact_id: f.text for r in receipts for f in facts_of(r)}


def value_fact(v: Value) -> str:
    return f"{v.name}: {_num(v.value)} {v.unit}."
