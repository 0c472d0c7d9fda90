"""Language detection and the plain-string clean-up before matching (no regular expressions).

``strip_request`` removes, from the front, a wake word ("Yimi", "hey Yimi", "依米") and
politeness ("please", "could you", "请", "帮我"), and from the back trailing politeness and
punctuation ("please", "thanks", "吧", "谢谢", "。"). What is left is matched whole.
"""

from __future__ import annotations

import unicodedata
from typing import Literal

Lang = Literal["en", "zh"]

PUNCT = " \t\r\n,.!?;:。，、！？；：…~～\"'“”‘’「」()（）"
WAKE_EN = ("hey yimi", "hi yimi", "ok yimi", "okay yimi", "hello yimi", "yimi")
WAKE_ZH = ("嘿依米", "嗨依米", "你好依米", "依米", "嘿，依米", "hey yimi", "yimi")
POLITE_EN = (
    "please",
    "pls",
    "plz",
    "could you please",
    "could you",
    "can you please",
    "can you",
    "would you please",
    "would you",
    "will you",
    "kindly",
    "i'd like you to",
    "i want you to",
    "i need you to",
    "go ahead and",
    "just",
    "actually",
    "oh",
    "ah",
    "aw",
    "um",
    "uh",
    "hmm",
    "well",
    "ok so",
    "okay so",
    "ok",
    "okay",
    "alright",
    "all right",
)
POLITE_ZH = (
    "帮个忙",
    "帮帮忙",
    "帮忙",
    "哦",
    "噢",
    "哎",
    "诶",
    "好的",
    "好吧",
    "嗯",
    "那就",
    "请问一下",
    "请问",
    "请你帮我",
    "请帮我",
    "麻烦你帮我",
    "麻烦帮我",
    "麻烦你",
    "麻烦",
    "你帮我",
    "帮我",
    "请你",
    "请",
    "能不能",
    "可以",
)
TRAILING_EN = (
    "please",
    "pls",
    "plz",
    "thanks",
    "thx",
    "thanks a lot",
    "thank you very much",
    "thank you",
    "for me",
    "now please",
    "right now",
    "at the moment",
)
TRAILING_ZH = (
    "谢谢你",
    "谢谢",
    "好吗",
    "好不好",
    "可以吗",
    "行吗",
    "一下吧",
    "吧",
    "呗",
    "呀",
    "啦",
    "嘛",
    "啊",
    "哦",
    "呢",
)


def is_han(ch: str) -> bool:
    code = ord(ch)
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x20000 <= code <= 0x2A6DF
        or 0xF900 <= code <= 0xFAFF
    )


def mixed_script(text: str) -> bool:
    """Han characters and Latin letters both ("turn on 厨房灯")."""
    return any(is_han(ch) for ch in text) and any("a" <= ch.casefold() <= "z" for ch in text)


def detect_language(text: str) -> Lang:
    """'zh' when the text holds CJK ideographs (any Han character), else 'en'."""
    return "zh" if any(is_han(ch) for ch in text) else "en"


def _strip_prefix(text: str, prefixes: tuple[str, ...], words: bool) -> tuple[str, bool]:
    low = text.casefold()
    for prefix in prefixes:
        if low.startswith(prefix):
            rest = text[len(prefix) :]
            if words and rest and rest[0].isalnum():
                continue  # "justin", "pleased": not a whole word
            return rest.lstrip(PUNCT), True
    return text, False


def _strip_suffix(text: str, suffixes: tuple[str, ...], words: bool) -> tuple[str, bool]:
    low = text.casefold()
    for suffix in suffixes:
        if low.endswith(suffix) and len(text) > len(suffix):
            rest = text[: -len(suffix)]
            if words and rest[-1].isalnum():
                continue
            return rest.rstrip(PUNCT), True
    return text, False


def _tight_han(text: str) -> str:
    """Drop whitespace next to a Han character ("打开 kitchen light" → "打开kitchen light"):
    Chinese templates match without spaces, and ASR or typing puts them around Latin words."""
    out: list[str] = []
    n = len(text)
    for i, ch in enumerate(text):
        if ch.isspace():
            before = out[-1] if out else ""
            after = text[i + 1] if i + 1 < n else ""
            if (before and is_han(before)) or (after and is_han(after)) or not before:
                continue
        out.append(ch)
    return "".join(out)


# Typed unit abbreviations after a number ("10 min", "1 hr", "30 secs"), spelled out.
UNIT_ABBREVIATIONS_EN = {
    "min": "minutes",
    "mins": "minutes",
    "hr": "hours",
    "hrs": "hours",
    "sec": "seconds",
    "secs": "seconds",
}


def _strip_symbols(text: str) -> str:
    """Without emoji and other symbols at either end ("turn on the light 🙏")."""
    start, end = 0, len(text)
    while start < end and (text[start].isspace() or unicodedata.category(text[start]) == "So"):
        start += 1
    while end > start and (
        text[end - 1].isspace() or unicodedata.category(text[end - 1]) in ("So", "Mn", "Cf")
    ):
        end -= 1
    return text[start:end]


def _spell_units(text: str) -> str:
    words = text.split(" ")
    for i in range(1, len(words)):
        unit = UNIT_ABBREVIATIONS_EN.get(words[i].casefold())
        if unit and words[i - 1][-1:].isdigit():
            words[i] = unit
    return " ".join(words)


def strip_request(text: str, lang: Lang) -> str:
    """The request without wake word, politeness and surrounding punctuation."""
    text = _strip_symbols(" ".join(text.split())).strip(PUNCT)
    text = _strip_symbols(text).strip(PUNCT)
    if lang == "en":
        text = _spell_units(text)
    if lang == "zh":
        text = _tight_han(text)
    words = lang == "en"
    wake = WAKE_EN if lang == "en" else WAKE_ZH
    polite = POLITE_EN if lang == "en" else POLITE_ZH
    trailing = TRAILING_EN if lang == "en" else TRAILING_ZH
    text, _ = _strip_prefix(text, wake, words)
    changed = True
    while changed and text:
        text, changed = _strip_prefix(text, polite, words)
    changed = True
    while changed and text:
        text, changed = _strip_suffix(text, trailing, words)
        if not changed and lang == "zh":
            # "…好吗依米", "…, Yimi": a trailing wake word
            text, changed = _strip_suffix(text, WAKE_ZH, False)
        elif not changed:
            text, changed = _strip_suffix(text, ("yimi",), True)
    text = text.strip(PUNCT)
    return _tight_han(text) if lang == "zh" else text


# Softer wrappers, removed only when the whole request matched nothing (templates may use
# them: "我要买什么", "告诉我现在几点"): an ability question ("你能…吗", "can you tell me …"),
# a wish ("我想…", "I'd like to …", "let's …"). After an ability prefix a trailing 吗 goes too.
SOFT_ABILITY_ZH = (
    "你能不能",
    "你可不可以",
    "你可以",
    "你能",
    "能不能",
    "可不可以",
    "能否",
    "可以",
    "能",
)
SOFT_ZH = (
    "我想要",
    "我想",
    "我要",
    "我需要",
    "告诉我",
    "帮我",
    "给我",
    "替我",
    "麻烦你",
    "麻烦",
    "请",
    "看看",
    "看一下",
    "查一下",
    "查查",
)
SOFT_EN = (
    "let's",
    "lets",
    "let us",
    "i'd like to",
    "i would like to",
    "i want to",
    "i wanna",
    "i need to",
    "tell me",
    "can you tell me",
    "could you tell me",
)


def _asks_ability(original: str) -> bool:
    """The utterance opens with an ability question ("可以帮我…吗", "依米，你能不能…")."""
    text, _ = _strip_prefix(_tight_han(original.strip(PUNCT)), WAKE_ZH, False)
    for lead in ("请问", "请", "麻烦你", "你"):
        if text.startswith(lead):
            text = text[len(lead) :]
            break
    return text.startswith(SOFT_ABILITY_ZH)


def soften(text: str, lang: Lang, original: str = "") -> str:
    """``text`` (already through ``strip_request``) without the softer wrappers of
    ``SOFT_ZH``/``SOFT_EN``; the text unchanged when it has none. ``original`` is the
    utterance before ``strip_request`` (which may have removed its "可以"/"能不能")."""
    if lang == "en":
        rest, changed = text, True
        while changed and rest:
            rest, changed = _strip_prefix(rest, SOFT_EN, True)
        return rest
    rest, ability = _strip_prefix(text, SOFT_ABILITY_ZH, False)
    ability = ability or _asks_ability(original)
    changed = True
    while changed and rest:
        rest, changed = _strip_prefix(rest, SOFT_ZH, False)
    if ability:
        for suffix in ("吗", "么"):
            if rest.endswith(suffix) and len(rest) > len(suffix):
                rest = rest[: -len(suffix)].rstrip(PUNCT)
                break
    return rest


def clean_free_text(text: str, lang: Lang) -> str:
    """A free-text slot as spoken, trimmed of surrounding filler and trailing punctuation."""
    text = " ".join(text.split()).strip(PUNCT)
    if lang == "en":
        for filler in ("that ", "about "):
            if text.casefold().startswith(filler) and len(text) > len(filler):
                text = text[len(filler) :]
                break
    else:
        for filler in ("一下", "说"):
            if text.startswith(filler) and len(text) > len(filler):
                text = text[len(filler) :]
                break
    return text.strip(PUNCT)


NEGATIONS_EN = (
    "don't",
    "dont",
    "do not",
    "never ",
    "not ",
    "no don't",
    "please don't",
    "i don't want",
    "i didn't",
    "didn't",
)
# "don't forget that …" asks to remember; "never mind", "不用了" is the nevermind intent.
NOT_NEGATIONS = ("never mind", "nevermind", "don't forget", "do not forget", "别忘", "不要忘")
NOT_NEGATIONS_WHOLE = frozenset({"不用了", "不用", "不要了", "没事", "没事了", "没什么"})
NEGATIONS_ZH = (
    "先别",
    "还别",
    "可别",
    "千万别",
    "还不要",
    "先不要",
    "暂时不要",
    "暂时别",
    "别",
    "不要",
    "不用",
    "不许",
    "不准",
    "甭",
    "没有",
    "我没",
    "我不想",
    "不想",
)


def negated(text: str, lang: Lang) -> bool:
    """True when the request starts with a negation ("don't …", "别…"): never an action."""
    low = text.casefold()
    if any(low.startswith(x) for x in NOT_NEGATIONS) or low in NOT_NEGATIONS_WHOLE:
        return False
    return any(low.startswith(n) for n in (NEGATIONS_EN if lang == "en" else NEGATIONS_ZH))


NEGATION_WORDS_EN = frozenset(
    {"don't", "dont", "do", "not", "never", "didn't", "no", "won't", "can't", "shouldn't", "stop"}
)
NEGATION_CHARS_ZH = ("别", "不要", "不用", "没", "不想", "不必", "甭")
CLAUSE_SEPARATORS = frozenset(",，;；。!！?？、")
# Where a spoken English command may start after a preamble without a comma.
COMMAND_STARTS = frozenset(
    {
        "turn",
        "switch",
        "set",
        "add",
        "put",
        "remember",
        "order",
        "send",
        "email",
        "text",
        "tell",
        "start",
        "cancel",
        "pause",
        "resume",
        "open",
        "close",
        "lock",
        "unlock",
        "dim",
        "undo",
        "pay",
        "forget",
    }
)


def has_negation(text: str, lang: Lang) -> bool:
    """True when a negation word occurs anywhere ("I don't want you to …", "先别…")."""
    if lang == "zh":
        return any(n in text for n in NEGATION_CHARS_ZH)
    words = [w.strip(PUNCT) for w in text.casefold().split()]
    return (
        any(
            w in NEGATION_WORDS_EN
            and not (w == "do" and i + 1 < len(words) and words[i + 1] != "not")
            for i, w in enumerate(words)
        )
        or "n't" in text.casefold()
    )


# A preamble holding one of these makes the rest a question or a condition, not a command:
# "should I turn off the kettle", "if it gets dark turn on the light", "我是不是该，关灯".
CONDITIONAL_EN = frozenset(
    {
        "should",
        "shall",
        "would",
        "do",
        "does",
        "did",
        "can",
        "could",
        "will",
        "when",
        "why",
        "how",
        "what",
        "where",
        "if",
        "whether",
        "who",
        "is",
        "are",
        "was",
        "were",
        "before",
        "after",
        "until",
        "unless",
        "maybe",
        "wonder",
        "whenever",
        "once",
    }
)
CONDITIONAL_ZH = (
    "吗",
    "是不是",
    "该不该",
    "要不要",
    "如果",
    "要是",
    "为什么",
    "什么时候",
    "怎么",
    "是否",
    "等",
    "之前",
    "以后",
    "的话",
)


def _plain_preamble(prefix: str, lang: Lang) -> bool:
    if lang == "zh":
        return not any(c in prefix for c in CONDITIONAL_ZH)
    return not any(w.strip(PUNCT) in CONDITIONAL_EN for w in prefix.casefold().split())


def trailing_clauses(text: str, lang: Lang) -> list[str]:
    """Candidate commands at the end of a longer utterance, longest first: what follows a
    clause separator, and (English) what follows a preamble of two or more words from a
    command verb ("i'm going to bed turn off the lights") — only after a plain statement,
    never after a question or a condition (see ``CONDITIONAL_EN``/``CONDITIONAL_ZH``)."""
    found: list[str] = []
    for i, ch in enumerate(text):
        if ch in CLAUSE_SEPARATORS and _plain_preamble(text[:i], lang):
            rest = text[i + 1 :].strip(PUNCT)
            if rest and rest not in found:
                found.append(rest)
    if lang == "en":
        words = text.split()
        for i in range(2, len(words)):
            prefix = " ".join(words[:i])
            if words[i - 1].casefold() == "to":
                continue  # "I need to remember my password": an infinitive, not a command
            if words[i].casefold().strip(PUNCT) in COMMAND_STARTS and _plain_preamble(prefix, lang):
                rest = " ".join(words[i:]).strip(PUNCT)
                if rest not in found:
                    found.append(rest)
    found.sort(key=len, reverse=True)
    return found
