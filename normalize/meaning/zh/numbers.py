"""Numbers in Chinese text, with their units: "两公里" → (2, km), "二〇二三年" → (2023, year),
"1.5万元" → (15000, cny), "百分之五十" → (50, %), "第三次" → (ord:3, times), "一个半小时" →
(1.5, h).

Numbers are found on the text (jieba glues them to their classifiers inconsistently: "五千块",
"1/x 万块/m"), then checked against the tokens: a Chinese numeral counts only where jieba tagged
the token covering it as a numeral, quantity or time word and the token is not an idiom that
merely contains a numeral character ("一下", "十分", "万一"; "四川" and "三星" are place and
brand tags, so they never reach here). A bare "一" without a unit of measure ("一个问题",
"一首歌") is the indefinite article, not the number 1. cn2an converts the numerals.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import cn2an

from normalize.meaning.signature import Quantity
from normalize.meaning.zh.lexicon import NUMERAL_IDIOMS
from normalize.meaning.zh.segmenter import Token

_DIGITS = "零〇一二两三四五六七八九"
_DIGIT_VALUES = {
    ch: v
    for v, chars in enumerate(("零〇", "一", "二两", "三", "四", "五", "六", "七", "八", "九"))
    for ch in chars
}
_NUMERAL = f"[{_DIGITS}十百千万亿]"
# Units, longest first so "公里" wins over "里"; each maps to the canonical unit the guard
# compares ("" for a plain count).
_UNITS: dict[str, str] = {
    "公里": "km",
    "千米": "km",
    "厘米": "cm",
    "毫米": "mm",
    "米": "m",
    "公斤": "kg",
    "千克": "kg",
    "斤": "jin",
    "克": "g",
    "吨": "t",
    "块钱": "cny",
    "元钱": "cny",
    "人民币": "cny",
    "元": "cny",
    "块": "cny",
    "美元": "usd",
    "美金": "usd",
    "欧元": "eur",
    "日元": "jpy",
    "英镑": "gbp",
    "港币": "hkd",
    "岁": "age",
    "个小时": "h",
    "小时": "h",
    "钟头": "h",
    "分钟": "min",
    "秒": "s",
    "天": "day",
    "日": "day",
    "个月": "month",
    "月": "month",
    "年": "year",
    "周": "week",
    "星期": "week",
    "次": "times",
    "倍": "x",
    "期": "period",
    "号": "no",
    "点": "oclock",
    "%": "%",
    "平米": "m2",
    "平方米": "m2",
    "度": "deg",
    "层": "floor",
    "楼": "floor",
    "章": "chapter",
    "集": "episode",
    "页": "page",
}
_UNIT_ALTERNATIVES = "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))
_NUMBER = re.compile(
    rf"(?P<ord>第)?(?P<pct>百分之)?"
    rf"(?P<num>\d+(?:\.\d+)?(?:\s*[万亿千百])*|{_NUMERAL}+(?:点[{_DIGITS}]+)?)"
    rf"(?P<cls>个)?(?P<half>半)?\s*(?P<unit>{_UNIT_ALTERNATIVES})?"
)
# A half with no number before it: "半年", "半小时".
_HALF = re.compile(rf"(?<![{_DIGITS}\d个])半(?:个)?(?P<unit>{_UNIT_ALTERNATIVES})")
# jieba tags of tokens that may hold a number: numeral, quantity, time, English/letters, other.
_NUMERIC_TAGS = ("m", "q", "t", "x", "eng", "mq")
_SCALE = {"万": 10_000, "亿": 100_000_000, "千": 1_000, "百": 100}


def extract_quantities(text: str, tokens: Sequence[Token]) -> tuple[Quantity, ...]:
    """The numbers of `text` (NFKC-normalized, as segmented into `tokens`), sorted."""
    found: list[Quantity] = []
    pos = 0
    while (m := _NUMBER.search(text, pos)) is not None:
        pos = m.end()
        if not m.group("num")[0].isdigit() and not _numeric_token(tokens, m.start("num")):
            # A numeral character inside another word ("李四", "十分"): look again after it.
            pos = m.start("num") + 1
            continue
        quantity = _quantity(m, text[m.end() : m.end() + 1])
        if quantity is not None:
            found.append(quantity)
    for m in _HALF.finditer(text):
        found.append(Quantity("0.5", _UNITS[m.group("unit")]))
    return tuple(sorted(found))


def _quantity(m: re.Match[str], rest: str) -> Quantity | None:
    """The quantity of one match; `rest` is the character after it."""
    value = _value(m.group("num").replace(" ", ""))
    if value is None:
        return None
    if m.group("half"):
        value += 0.5
    unit = "%" if m.group("pct") else _UNITS.get(m.group("unit") or "", "")
    if m.group("num") == "一" and not unit and not m.group("half") and not m.group("ord"):
        # "一个问题", "一首歌", "一段相声": without a unit of measure, 一 is an article.
        return None
    if m.group("ord"):
        return Quantity(f"ord:{_format(value)}", unit)
    return Quantity(_format(value), unit)


def _numeric_token(tokens: Sequence[Token], offset: int) -> bool:
    token = next((t for t in tokens if t.start <= offset < t.end), None)
    if token is None or token.word in NUMERAL_IDIOMS:
        return False
    return token.flag.startswith(_NUMERIC_TAGS)


def _value(numeral: str) -> float | None:
    """The value of an Arabic or Chinese numeral (with 万/亿 scales); None if unreadable."""
    if numeral[0].isdigit():
        head = re.match(r"\d+(?:\.\d+)?", numeral)
        assert head is not None, f"a numeral starting with a digit: {numeral!r}"
        value = float(head.group())
        for ch in numeral[head.end() :]:
            value *= _SCALE[ch]
        return value
    if not re.search("[十百千万亿点]", numeral):
        # Digit by digit: a year or a code ("二〇二三", "幺二三").
        return float("".join(str(_DIGIT_VALUES[ch]) for ch in numeral))
    try:
        return float(cn2an.cn2an(numeral, "smart"))
    except ValueError:
        return None


def _format(value: float) -> str:
    if value.is_integer():
        return str(int(value))
    return f"{value:.6f}".rstrip("0").rstrip(".")
