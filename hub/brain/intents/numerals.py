"""Chinese numerals to numbers, in plain code (no regular expressions).

hassil's range lists already read digits, English number words and the Chinese numerals the
CLDR spell-out rules produce ("五", "三十", "两"); this converter backs them up for the forms
those rules do not spell ("两百", "十五", "一百零五", "三点五", mixed "3十") and reads money
and percentages ("三十块", "百分之五十", "一半").
"""

from __future__ import annotations

DIGITS: dict[str, int] = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "幺": 1,
    "二": 2,
    "两": 2,
    "俩": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
UNITS: dict[str, int] = {"十": 10, "百": 100, "千": 1000}
BIG_UNITS: dict[str, int] = {"万": 10_000, "亿": 100_000_000}
WORDS: dict[str, float] = {"一半": 50, "半": 50}
MONEY_SUFFIXES = ("块钱", "块", "元钱", "元", "人民币", "刀", "美元", "美金")
NUMERAL_CHARS = (
    frozenset(DIGITS) | frozenset(UNITS) | frozenset(BIG_UNITS) | frozenset("0123456789")
)


def _section(text: str) -> int | None:
    """A number below 10,000 written with 十/百/千 (or plain digits)."""
    if not text:
        return None
    if all(ch in DIGITS for ch in text) and len(text) > 1:
        # "二零二六" read digit by digit
        value = 0
        for ch in text:
            value = value * 10 + DIGITS[ch]
        return value
    total = 0
    pending: int | None = None
    for ch in text:
        if ch in DIGITS:
            pending = DIGITS[ch]
        elif "0" <= ch <= "9":
            pending = (pending or 0) * 10 + (ord(ch) - ord("0"))
        elif ch in UNITS:
            total += (1 if pending is None else pending) * UNITS[ch]
            pending = None
        else:
            return None
    if pending is not None:
        total += pending
    return total


def zh_to_int(text: str) -> int | None:
    """ "三十" → 30, "两" → 2, "一百零五" → 105, "两万三千" → 23000, "42" → 42; else None."""
    text = text.strip()
    if not text or any(ch not in NUMERAL_CHARS for ch in text):
        return None
    total = 0
    start = 0
    for i, ch in enumerate(text):
        if ch in BIG_UNITS:
            part = _section(text[start:i])
            total += (1 if part is None else part) * BIG_UNITS[ch]
            start = i + 1
    rest = _section(text[start:])
    if rest is None and start == 0:
        return None
    return total + (rest or 0)


def parse_number(text: str) -> float | None:
    """A number in digits, English digits with a decimal point, or Chinese numerals.

    "三点五" → 3.5, "12.5" → 12.5, "一半" → 50, "百分之五十" → 50, "三十块" → 30, "五分钟"
    is not a number (the unit belongs to the template), so → None.
    """
    text = text.strip().replace(",", "").replace("，", "")
    for prefix in ("$", "¥", "￥", "€", "£"):
        if text.startswith(prefix):
            text = text[len(prefix) :].strip()
    for suffix in (*MONEY_SUFFIXES, "%", "％"):
        if text.endswith(suffix) and len(text) > len(suffix):
            text = text[: -len(suffix)].strip()
            break
    if text.startswith("百分之"):
        text = text[len("百分之") :]
    if text in WORDS:
        return WORDS[text]
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    for point in ("点", "."):
        if point in text:
            whole, _, frac = text.partition(point)
            w = zh_to_int(whole) if whole else 0
            if w is None or not frac:
                return None
            digits = ""
            for ch in frac:
                if ch in DIGITS:
                    digits += str(DIGITS[ch])
                elif "0" <= ch <= "9":
                    digits += ch
                else:
                    return None
            return float(f"{w}.{digits}")
    value = zh_to_int(text)
    if value is not None:
        return float(value)
    return en_words_to_number(text)


EN_ONES: dict[str, int] = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen".split()
    )
}
EN_TENS: dict[str, int] = {
    w: 10 * (i + 2)
    for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())
}
EN_SCALES: dict[str, int] = {"hundred": 100, "thousand": 1000}
EN_CURRENCY = frozenset(
    {
        "dollars",
        "dollar",
        "bucks",
        "buck",
        "yuan",
        "rmb",
        "euros",
        "euro",
        "pounds",
        "pound",
        "usd",
        "eur",
    }
)


def en_words_to_number(text: str) -> float | None:
    """ "thirty five dollars" → 35, "a hundred" → 100, "12.50 bucks" → 12.5; else None."""
    words = text.casefold().replace("-", " ").replace("$", " ").split()
    words = [w for w in words if w not in EN_CURRENCY and w != "and"]
    if not words:
        return None
    if len(words) == 1:
        try:
            return float(words[0].replace(",", ""))
        except ValueError:
            pass
    total = 0
    current = 0
    seen = False
    for word in words:
        if word in EN_ONES:
            current += EN_ONES[word]
        elif word in EN_TENS:
            current += EN_TENS[word]
        elif word == "a" and not seen:
            current = 1
        elif word in EN_SCALES:
            current = max(current, 1) * EN_SCALES[word]
            if word == "thousand":
                total += current
                current = 0
        else:
            return None
        seen = True
    return float(total + current)
