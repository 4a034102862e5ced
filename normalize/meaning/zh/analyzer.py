"""The `Analysis` of a Chinese prompt: jieba tokens read into the fields the guards compare.

`ChineseAnalyzer.analyze(text)` fills the same `Analysis` / `MeaningSignature` as the English
`LemmaAnalyzer`, with Chinese readings:

- skeleton: the content tokens, sorted; function: particles and fillers ("的", "吗", "请问");
- words: every token, lower-cased (the guards look names up here and in the joined `order`,
  since jieba may cut one name differently in two texts: "苹果公司" / "苹果 公司");
- negations / negated: negators ("不", "没有", "无法", "打不开" …) and the words each negates,
  skipping A-not-A questions ("是不是", "能不能") and words that only contain a negator
  ("不错", "非常", "无论", "别人", "未来");
- quantities: `normalize.meaning.zh.numbers`;
- entities: names, places, organisations and proper nouns (jieba's nr / ns / nt / nz), and
  Latin-script names with their model numbers ("iphone 15", "rtx4090");
- roles: `normalize.meaning.zh.roles`;
- asks: the kind of answer the question words ask for; polar: contrast-lexicon words;
- order: the content tokens in text order.

Blocking CPU work (≈ 0.1–1 ms a short question): callers on an event loop run it in a worker
thread, as they do the English analysis.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import replace

from core.semantic_config import SemanticConfig
from normalize.keys.text import canonical_text
from normalize.meaning.signature import Analysis, MeaningSignature
from normalize.meaning.zh.lexicon import (
    A_NOT_A,
    ASK_KINDS,
    BRANDS,
    FUNCTION_WORDS,
    NEGATOR_PREFIXES,
    NEGATORS,
    NOT_ASKING,
    NOT_NEGATIONS,
    POLAR_HEADS,
    POLAR_WORDS,
)
from normalize.meaning.zh.numbers import extract_quantities
from normalize.meaning.zh.roles import Word, extract_roles
from normalize.meaning.zh.segmenter import Segmenter, Token

LANGUAGE = "zh"
_BREAK = "，"
_A_NOT_A = re.compile(A_NOT_A)
_ENTITY_TAGS = ("nr", "ns", "nt", "nz")
# Tags of tokens that carry no content: particles, modal particles, interjections, onomatopoeia,
# conjunctions, prepositions (their roles are read separately), punctuation.
_FUNCTION_TAGS = ("u", "y", "e", "o", "c", "p", "x")
# A negator reaches over these to the word it negates: "不太好" negates 好.
_DEGREE_WORDS = frozenset(
    [
        "太",
        "很",
        "够",
        "再",
        "太过",
        "怎么",
        "那么",
        "这么",
        "是",
        "能",
        "会",
        "要",
        "想",
        "可以",
        "应该",
        "用",
        "必",
    ]
)
_ASK_PATTERN = re.compile("|".join(sorted(map(re.escape, ASK_KINDS), key=len, reverse=True)))
# "多" before a one-character adjective asks how much ("多远", "多贵"; "多久" is listed).
_HOW_MUCH = re.compile("多(?=[远近高低贵重深宽厚粗快慢早晚长短])")
# "怎么" followed within three characters by a negator asks why ("怎么还没到账").
_NEGATION_AFTER = re.compile(".{0,3}[不没]")
# Negator characters that jieba leaves inside longer tokens ("打不开", "登不上").
_INSIDE_NEGATORS = ("不", "没")
# Result complements after 不 ("打不开", "安装不了"): the verb before them is what is negated,
# and alone they are no word to look for in the other text.
_COMPLEMENTS = frozenset("了到上下开起动出进完住懂清着通见去来成")


class ChineseAnalyzer:
    """Reads Chinese prompts into `Analysis` values (blocking; build once per process)."""

    def __init__(self, config: SemanticConfig) -> None:
        self._segmenter = Segmenter()
        self._max_chars = config.analysis_max_chars

    def analyze(self, text: str) -> Analysis:
        if len(text) > self._max_chars:
            return _with_language(Analysis.opaque(canonical_text(text)))
        text = unicodedata.normalize("NFKC", text).strip()
        tokens = self._segmenter.tokens(text)
        questions = [m.span() for m in _A_NOT_A.finditer(text)]
        words = [_word(t) for t in tokens]
        negated = _negations(tokens, words, questions)
        asks, polar = _asks_and_polar(text, words, negated)
        content = [w.text for w in words if w.content]
        # The order keeps clause breaks (as "，"), so that a swap across a comma still shows as
        # two words exchanging their neighbours ("出生于X，在Y长大" / "出生于Y，在X长大").
        order = [_BREAK if w.boundary else w.text for w in words if w.content or w.boundary]
        signature = MeaningSignature(
            negations=len(negated),
            negated=tuple(sorted(negated)),
            quantities=extract_quantities(text, tokens),
            entities=tuple(sorted({_entity(t) for t in tokens if _is_entity(t)})),
            roles=extract_roles(words),
            asks=tuple(sorted(set(asks))),
            polar=tuple(sorted(polar)),
            order=tuple(order),
        )
        function = sorted(w.text for w in words if not w.content and not w.boundary)
        return _with_language(
            Analysis(
                skeleton=tuple(sorted(content)),
                signature=signature,
                function=tuple(function),
                words=frozenset(w.text for w in words if not w.boundary)
                | frozenset(signature.entities),
            )
        )


def _with_language(analysis: Analysis) -> Analysis:
    # `Analysis.language` tells the guard dispatch which pipeline read the text.
    return replace(analysis, language=LANGUAGE)


def _word(token: Token) -> Word:
    text = token.word.lower()
    boundary = token.flag == "x" and not any(ch.isalnum() for ch in text)
    content = not boundary and not (
        text in FUNCTION_WORDS or (token.flag.startswith(_FUNCTION_TAGS) and token.flag != "eng")
    )
    return Word(text, token.flag, boundary, content)


def _is_entity(token: Token) -> bool:
    if token.word.lower() in BRANDS:
        return True
    if token.flag == "eng":
        return any(ch.isalpha() for ch in token.word)
    # Only names jieba's dictionary knows: the tags of words its HMM guessed are guesses too,
    # and one-character "names" are mostly a surname cut from its given name.
    return token.flag.startswith(_ENTITY_TAGS) and token.known and len(token.word) >= 2


def _entity(token: Token) -> str:
    return " ".join(token.word.lower().split())


def _negations(
    tokens: list[Token], words: list[Word], questions: list[tuple[int, int]]
) -> list[str]:
    """What each negator of the text negates, one entry per negator: up to two words joined by
    "+" (the negated word and the one after it: "不叫事" and "不是事" share 事), "" for none.

    A negator is a negator token ("不", "没有", "无法"), a token starting with one ("不想",
    "没到"), or one holding 不 / 没 inside (the potential complement "打不开", "登不上", an idiom
    "兔子不吃窝边草"): then the words on both sides of it. A-not-A questions ("是不是") and a
    negator that ends the question ("能玩吗不", "有没") ask yes or no and are left out.
    """
    out: list[str] = []
    for i, (token, word) in enumerate(zip(tokens, words, strict=True)):
        text = word.text
        if text in NOT_NEGATIONS or any(s <= token.start < e for s, e in questions):
            continue
        if text in NEGATORS:
            following = _following(words, i + 1)
            if following or not _ends_question(words, i + 1):
                out.append("+".join(following))
            continue
        after_verb = i > 0 and words[i - 1].flag.startswith("v")
        if after_verb and len(text) == 2 and text[0] in "不" and text[1] in _COMPLEMENTS:
            out.append(_previous(words, i - 1))  # "安装 不了": the verb before cannot be done
            continue
        prefix = next((p for p in NEGATOR_PREFIXES if text.startswith(p)), None)
        if prefix is not None:
            out.append("+".join([text[len(prefix) :], *_following(words, i + 1)[:1]]))
            continue
        inside = next((ch for ch in _INSIDE_NEGATORS if ch in text[1:]), None)
        if inside is not None:
            before, _, after = text.partition(inside)
            parts = [before, after] if after else [before, *_following(words, i + 1)[:1]]
            out.append("+".join(p for p in parts if p and p not in _COMPLEMENTS))
    return out


def _following(words: list[Word], start: int) -> list[str]:
    """The next two content words of the clause, skipping degree words ("不太好" → 好)."""
    found: list[str] = []
    for w in words[start:]:
        if w.boundary or len(found) == 2:
            break
        if w.flag.startswith(("u", "y", "e")) or w.text in _DEGREE_WORDS or w.text in NEGATORS:
            continue
        found.append(w.text)
    return found


def _previous(words: list[Word], start: int) -> str:
    for w in reversed(words[: start + 1]):
        if w.boundary:
            return ""
        if w.content:
            return w.text
    return ""


def _ends_question(words: list[Word], start: int) -> bool:
    return all(w.boundary or w.flag.startswith(("u", "y", "e")) for w in words[start:])


def _asks_and_polar(
    text: str, words: list[Word], negated: list[str]
) -> tuple[list[str], list[str]]:
    """The kinds of answer asked for (question words found on the text, longest first, since
    jieba cuts "什么时候" into 什么 + 时候), and the contrast-lexicon words used as such."""
    asks: list[str] = []
    masked = text
    for phrase in NOT_ASKING:
        masked = masked.replace(phrase, "_" * len(phrase))
    for m in _ASK_PATTERN.finditer(masked):
        kind = ASK_KINDS[m.group()]
        if kind == "manner" and negated and _NEGATION_AFTER.match(masked, m.end()):
            kind = "reason"  # "怎么还没到账" asks why
        asks.append(kind)
    if _HOW_MUCH.search(masked):
        asks.append("quantity")  # "多远", "多贵": how far, whatever the adjective
    polar: list[str] = []
    for w in words:
        if w.text in ASK_KINDS:
            continue
        if w.text in POLAR_WORDS:
            polar.append(w.text)
        elif len(w.text) > 2 and w.text[:2] in POLAR_WORDS:
            polar.append(w.text[:2])  # "今天天气"
        elif len(w.text) == 2 and w.text[0] in POLAR_HEADS:
            polar.append(w.text[0])  # "买房" / "卖房"
    return asks, polar
