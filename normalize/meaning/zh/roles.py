"""Who does what to whom in a Chinese question, from word order and a few function words.

Chinese marks roles by order and by particles, not by inflection, so no parse is needed for the
cases the guards must catch:

- direction (`DIRECTION_MARKERS`): "从北京到上海" → 北京 source, 上海 goal; "把美元换成欧元" →
  美元 source, 欧元 goal; "北京比上海大" → 北京 compared, 上海 standard; "张三借给李四" → 张三
  giver, 李四 recipient. The head of these facts is the marker's kind ("dir", "cmp", "give",
  "owe"), not the marker, so "从X到Y" and "X到Y" and "X换成Y" fill the same slots.
- agent and patient of a verb: the nominal before the verb is its subject, the one after its
  object; "A把B V" makes B the object, "B被A V" makes B the object and A the subject.
- possession: "X的Y" → X is "of" Y ("爸爸的爷爷" / "爷爷的爸爸");
- coordination ("A和B的区别") gives no roles: the relation is symmetric.

Nominals are nouns, names, pronouns (not question words) and Latin names. Clauses end
at punctuation; no role crosses one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from normalize.meaning.signature import RoleFact
from normalize.meaning.zh.lexicon import (
    ASK_KINDS,
    BA,
    BEI,
    COORDINATORS,
    DIRECTION_MARKERS,
    NEGATORS,
)

_MARKER_KIND: dict[str, str] = {
    **dict.fromkeys(("source", "goal"), "dir"),
    **dict.fromkeys(("compared", "standard"), "cmp"),
    **dict.fromkeys(("giver", "recipient"), "give"),
    **dict.fromkeys(("debtor", "creditor"), "owe"),
}
# "q" for currencies and units jieba tags as classifiers ("美元/q").
_NOMINAL_TAGS = ("n", "r", "eng", "s", "j", "q")
_VERB_TAGS = ("v",)


@dataclass(frozen=True, slots=True)
class Word:
    """A token as the role reader sees it: its lower-cased text, its tag, whether it is a
    clause boundary (punctuation) and whether it carries content."""

    text: str
    flag: str
    boundary: bool
    content: bool


def is_nominal(word: Word) -> bool:
    return word.content and word.flag.startswith(_NOMINAL_TAGS) and word.text not in ASK_KINDS


def extract_roles(words: Sequence[Word]) -> tuple[RoleFact, ...]:
    """The role facts of one text's words (see the module docstring), sorted."""
    facts: set[RoleFact] = set()
    for clause in _clauses(words):
        facts |= _direction_facts(clause)
        facts |= _verb_facts(clause)
        facts |= _possessive_facts(clause)
    return tuple(sorted(facts))


def _clauses(words: Sequence[Word]) -> list[list[Word]]:
    clauses: list[list[Word]] = [[]]
    for w in words:
        if w.boundary:
            clauses.append([])
        else:
            clauses[-1].append(w)
    return [c for c in clauses if c]


def _nearest(clause: list[Word], start: int, step: int) -> Word | None:
    """The nearest nominal from `start` in direction `step`, stopping at a verb or marker."""
    i = start
    while 0 <= i < len(clause):
        w = clause[i]
        if is_nominal(w):
            return w
        if w.text in DIRECTION_MARKERS or w.text in COORDINATORS or w.flag.startswith("v"):
            return None
        i += step
    return None


def _direction_facts(clause: list[Word]) -> set[RoleFact]:
    facts = set()
    for i, w in enumerate(clause):
        roles = DIRECTION_MARKERS.get(w.text)
        if roles is None:
            continue
        for role, step in zip(roles, (-1, 1), strict=True):
            if not role:
                continue
            item = _nearest(clause, i + step, step)
            if item is not None:
                facts.add(RoleFact(item.text, role, _MARKER_KIND[role], "n"))
    return facts


def _verb_facts(clause: list[Word]) -> set[RoleFact]:
    """Subject and object of each verb, with 把 and 被 reordering them."""
    facts = set()
    for i, w in enumerate(clause):
        if not w.flag.startswith(_VERB_TAGS) or not w.content:
            continue
        if w.text in DIRECTION_MARKERS or w.text in NEGATORS:
            continue
        before = _nearest_past_particles(clause, i - 1)
        after = _nearest(clause, i + 1, 1)
        subject: Word | None = None
        obj: Word | None = after
        if before is not None:
            word, particle = before
            if particle in BA:  # A 把 B V: B is the object, A the subject
                obj, subject = word, _nearest(clause, clause.index(word) - 2, -1)
            elif particle in BEI:  # B 被 A V: A acts on B
                subject, obj = word, _nearest(clause, clause.index(word) - 2, -1)
            else:
                subject = word
        if subject is not None:
            facts.add(RoleFact(subject.text, "subj", w.text, "n"))
        if obj is not None:
            facts.add(RoleFact(obj.text, "obj", w.text, "n"))
    return facts


def _nearest_past_particles(clause: list[Word], start: int) -> tuple[Word, str] | None:
    """The nominal before a verb and the 把/被 particle just before that nominal, if any."""
    i = start
    while i >= 0:
        w = clause[i]
        if is_nominal(w):
            particle = clause[i - 1].text if i >= 1 else ""
            return w, particle
        if w.text in DIRECTION_MARKERS or w.text in COORDINATORS or w.flag.startswith("v"):
            return None
        i -= 1
    return None


def _possessive_facts(clause: list[Word]) -> set[RoleFact]:
    """ "X的Y": X is the possessor of Y ("爸爸的爷爷" is not "爷爷的爸爸")."""
    facts = set()
    for i in range(1, len(clause) - 1):
        if clause[i].text == "的" and is_nominal(clause[i - 1]) and is_nominal(clause[i + 1]):
            facts.add(RoleFact(clause[i - 1].text, "of", clause[i + 1].text, "n"))
    return facts
