"""Meaning guards for two Chinese analyses: may a Chinese query be answered with the answer cached
for a similar Chinese question?

Why not `MeaningGuard` as is: it reads the same signature fields, but its negation test knows
English negators and prefixes ("unsafe"), its antonym test an English lexicon, its entity test
whole lemmas (jieba may cut a name differently in two texts: "苹果公司" / "苹果 公司"), and its role
tests a dependency parse (copulas, prepositions). The comparisons here are the same ideas over
what the Chinese analyzer records:

- language: a Chinese query never matches an entry of another language (the answer's language
  differs);
- negation: the parity of negators on words both texts mention ("这个药安全吗" ≠ "这个药不安全
  吗"); when both negate, the same word ("我没有收到退款" = "退款一直没收到");
- antonym: a contrast-lexicon word only one text has, facing a word of its group only the other
  has ("升级" / "降级", "今天" / "明天");
- number: the same values, and the same unit wherever both texts state one;
- entity: a name of one text that the other does not mention (as a token or inside its text)
  stands where the other has a name of its own ("北京" / "上海", "苹果" / "华为"); a name
  only added or dropped is left to the cosine, since jieba's name tags are noisy;
- question: both ask a specific kind of answer and the kinds differ ("谁" / "哪里");
  "什么" and "哪个" ask for anything and never conflict, and manner is compatible with
  reason and place, time with quantity (`COMPATIBLE_ASKS`);
- role: two words both texts have exchanged their roles of one head (source / goal of a
  direction, the two sides of a comparison, giver / recipient, subject / object of a verb):
  "从北京到上海" / "从上海到北京", "把美元换成欧元" / "把欧元换成美元", "狗咬人" / "人咬狗".

Each guard has the switch of its English counterpart (`semantic.guard_*`), so the ablations of
bench/quality_zh.py switch the same keys.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from core.semantic_config import SemanticConfig
from normalize.meaning.guards import AGREE, GuardSwitches, GuardVerdict, number_conflict
from normalize.meaning.signature import Analysis, MeaningSignature, RoleFact
from normalize.meaning.zh.lexicon import (
    ASK_KINDS,
    COMPATIBLE_ASKS,
    ENTITY_ALIASES,
    THING,
    contrast,
)

ASK_WORDS = frozenset(ASK_KINDS)

_LANGUAGE = "zh"


class ChineseGuard:
    """Compares two Chinese analyses; see the module docstring."""

    def __init__(self, config: SemanticConfig) -> None:
        self._on = GuardSwitches.of(config)

    def compare(self, query: Analysis, cached: Analysis) -> GuardVerdict:
        if not (query.analysable and cached.analysable):
            return GuardVerdict(False, "language: a text the pipeline cannot read")
        if query.language != cached.language or query.language != _LANGUAGE:
            return GuardVerdict(False, f"language: {query.language} vs {cached.language}")
        q, c = query.signature, cached.signature
        text_q, text_c = _joined(query), _joined(cached)
        reason = (
            (_negation(q, c, text_q, text_c) if self._on.negation else None)
            or (_antonym(q, c) if self._on.antonyms else None)
            or (_numbers(q, c) if self._on.numbers else None)
            or (_entities(query, cached, text_q, text_c) if self._on.entities else None)
            or (_question(q, c) if self._on.question else None)
            or (_roles(q, c, text_q, text_c) if self._on.roles else None)
        )
        return GuardVerdict(False, reason) if reason else AGREE


def _joined(analysis: Analysis) -> str:
    """The content words run together, to find a word another segmentation cut differently."""
    return "".join(analysis.signature.order).replace(" ", "")


def _mentioned(word: str, text: str, words: frozenset[str]) -> bool:
    if word in words or word.replace(" ", "") in text:
        return True
    alias = ENTITY_ALIASES.get(word.split()[0])
    return alias is not None and alias in text


# --- negation and antonyms -------------------------------------------------------------------


def _negation(q: MeaningSignature, c: MeaningSignature, text_q: str, text_c: str) -> str | None:
    # A negator on words only one text has sits in reworded content the cosine judges; one on
    # a shared word ("安全" in both) flips the shared meaning. A bare negator always counts.
    heads_q = [_parts(h) for h in q.negated]
    heads_c = [_parts(h) for h in c.negated]
    neg_q = [h for h in heads_q if not h or any(p in text_c for p in h)]
    neg_c = [h for h in heads_c if not h or any(p in text_q for p in h)]
    if len(neg_q) % 2 != len(neg_c) % 2:
        return f"negation: {len(neg_q)} vs {len(neg_c)} negators"
    # Both negate: each must negate what the other negates ("我没有收到退款" / "退款没收到"), not
    # a word the other has but does not negate.
    moved_q = [h for h in neg_q if h and not any(_overlap(h, o) for o in heads_c)]
    moved_c = [h for h in neg_c if h and not any(_overlap(h, o) for o in heads_q)]
    if moved_q and moved_c:
        return f"negation: scope {'+'.join(moved_q[0])} vs {'+'.join(moved_c[0])}"
    return None


def _parts(head: str) -> tuple[str, ...]:
    return tuple(p for p in head.split("+") if p)


def _overlap(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    return any(x in y or y in x for x in a for y in b)


def _antonym(q: MeaningSignature, c: MeaningSignature) -> str | None:
    only_q = Counter(q.polar) - Counter(c.polar)
    only_c = Counter(c.polar) - Counter(q.polar)
    for a in sorted(only_q):
        for b in sorted(only_c):
            if contrast(a, b):
                return f"antonym: {a}/{b}"
    return None


# --- numbers, entities, question kind --------------------------------------------------------


def _numbers(q: MeaningSignature, c: MeaningSignature) -> str | None:
    # For Chinese quantities, units conflict only when they share none.
    return number_conflict(q, c, same_units=False)


def _entities(query: Analysis, cached: Analysis, text_q: str, text_c: str) -> str | None:
    # A name replaced by another, not one dropped or added: jieba's name tags are noisy
    # ("谢谢/nr", "日志/ns"), and a paraphrase adds or drops context ("中国古代" / "古代").
    missing_q = [e for e in query.signature.entities if not _mentioned(e, text_c, cached.words)]
    missing_c = [e for e in cached.signature.entities if not _mentioned(e, text_q, query.words)]
    if missing_q and missing_c:
        return f"entity: {missing_q[0]!r} vs {missing_c[0]!r}"
    return None


def _question(q: MeaningSignature, c: MeaningSignature) -> str | None:
    kinds_q = set(q.asks) - {THING}
    kinds_c = set(c.asks) - {THING}
    compatible = any(
        a == b or frozenset({a, b}) in COMPATIBLE_ASKS for a in kinds_q for b in kinds_c
    )
    if kinds_q and kinds_c and not compatible:
        return f"question: asks {sorted(kinds_q)} vs {sorted(kinds_c)}"
    return None


# --- roles -----------------------------------------------------------------------------------


def _roles(q: MeaningSignature, c: MeaningSignature, text_q: str, text_c: str) -> str | None:
    """Two words both texts have that traded roles of one head: A holds r1 and B holds r2 in
    one text, A holds r2 and B holds r1 in the other ("从北京到上海" / "从上海到北京", "狗咬人" /
    "人咬狗", "张三借给李四" / "李四借给张三"). A role that only changed holder is not enough:
    the nearest-noun reading of roles misplaces modifiers ("三国策略类单机游戏" / "单机策略三国
    类游戏"), and a word replaced by another is the entity test's or the cosine's to judge."""
    aligned_q = [f for f in q.roles if f.item in text_c]
    aligned_c = [f for f in c.roles if f.item in text_q]
    # One shared word that moved from subject to object alone is no evidence: Chinese fronts
    # topics freely ("苹果手机怎么设置铃声" / "苹果手机铃声怎么设置"); measured on LCQMC's half A,
    # that test refused more duplicates (4.1 %) than non-duplicates (3.0 %).
    return (
        _exchanged(aligned_q, aligned_c)
        or _inverted(aligned_q, aligned_c)
        or _swapped_in_place(q.order, c.order, q.entities, c.entities)
    )


def _exchanged(fq: list[RoleFact], fc: list[RoleFact]) -> str | None:
    places_q, places_c = _places(fq), _places(fc)
    for a in sorted(places_q.keys() & places_c.keys()):
        for role_a, head in sorted(places_q[a] - places_c[a]):
            for b, places in sorted(places_q.items()):
                if b == a or b not in places_c:
                    continue
                for role_b, head_b in sorted(places - places_c[b]):
                    swapped = (role_b, head) in places_c[a] and (role_a, head) in places_c[b]
                    if head_b == head and role_b != role_a and swapped:
                        return f"role: {a} {role_a} and {b} {role_b} of {head!r} exchanged"
    return None


def _places(facts: list[RoleFact]) -> dict[str, set[tuple[str, str]]]:
    places: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for f in facts:
        places[f.item].add((f.role, f.head))
    return places


def _inverted(fq: list[RoleFact], fc: list[RoleFact]) -> str | None:
    """A relation between two shared words turned around: "爸爸的爷爷" / "爷爷的爸爸"."""
    relations_c = {(f.item, f.role, f.head) for f in fc}
    for f in fq:
        if (f.head, f.role, f.item) in relations_c and f.head != f.item:
            return f"role: {f.item} {f.role} {f.head} inverted"
    return None


def _swapped_in_place(
    order_q: tuple[str, ...],
    order_c: tuple[str, ...],
    names_q: tuple[str, ...],
    names_c: tuple[str, ...],
) -> str | None:
    """Two names both texts have, each now between the neighbours the other had: "芬兰是俄罗斯
    帝国境内的自治大公国" / "俄罗斯帝国是芬兰境内的…". Word order only, so it also catches swaps
    the role reader has no marker for (PAWS-X's word-swap pairs)."""
    names = (set(order_q) & set(order_c)) - ASK_WORDS
    once = [w for w in names if len(w) >= 2 and order_q.count(w) == 1 and order_c.count(w) == 1]
    for i, a in enumerate(sorted(once)):
        for b in sorted(once)[i + 1 :]:
            for side in (-1, 1):
                qa, qb = _neighbour(order_q, a, side), _neighbour(order_q, b, side)
                ca, cb = _neighbour(order_c, a, side), _neighbour(order_c, b, side)
                if qa != qb and qa == cb and qb == ca and {qa, qb}.isdisjoint({a, b}):
                    return f"role: {a} and {b} exchanged places"
    return None


def _neighbour(order: tuple[str, ...], word: str, side: int) -> str:
    i = order.index(word) + side
    return order[i] if 0 <= i < len(order) else ""
