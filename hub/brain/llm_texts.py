"""What the LLM path says in its own words (not the model's), in Chinese and in English:
stable keys, every text here.

    say("llm.timeout", "zh", seconds=60)   # "语言模型 60 秒内没有回答……"

A turn's language is ``Turn.language`` when the hub knows it (the ASR's, or the script of a
typed sentence), else the script of the words (:func:`language_of`)."""

from __future__ import annotations

from typing import Any, Literal

Lang = Literal["en", "zh"]

TEXTS: dict[str, dict[str, str]] = {
    "llm.timeout": {
        "en": "My language model did not answer within {seconds:g} seconds, so I stopped "
        "that request. Please try again.",
        "zh": "语言模型在 {seconds:g} 秒内没有回答，我已停止这次请求。请再试一次。",
    },
    "llm.unreachable": {
        "en": "I could not reach my language model, so I could not answer that.",
        "zh": "我联系不上语言模型，所以没能回答。",
    },
    "llm.waits_local": {
        "en": "This request can only go to a local model, and none is configured; "
        "it waits until one is.",
        "zh": "这个请求只能交给本地模型处理，但还没有配置本地模型；配置好之前它会一直等待。",
    },
    "llm.sub_timeout": {
        "en": "The background task stopped: my language model did not answer within "
        "{seconds:g} seconds.",
        "zh": "后台任务已停止：语言模型在 {seconds:g} 秒内没有回答。",
    },
    "llm.sub_failed": {
        "en": "The background task failed.",
        "zh": "后台任务失败了。",
    },
}


def language_of(text: str) -> Lang:
    """``zh`` when the text holds a Han character, else ``en`` (the intent contract's
    rule for typed text)."""
    return (
        "zh"
        if any("\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf" for ch in text)
        else "en"
    )


def lang(language: str, text: str = "") -> Lang:
    """A turn's language: its own when known (``zh``, ``zh-CN``, ``en``…), else the script
    of its words."""
    code = language.strip().lower()
    if code.startswith("zh"):
        return "zh"
    if code.startswith("en"):
        return "en"
    return language_of(text)


def say(key: str, language: str, **fields: Any) -> str:
    texts = TEXTS[key]
    template = texts.get(language) or texts["en"]
    return template.format(**fields)
