"""Meaning guards: may a query be answered with the answer cached for a similar question?

A semantic hit needs cosine ≥ threshold *and* `MeaningGuard.compare(query, cached).agree`. The
guard does not compare surface features one by one (that would block "Who wrote X?" / "Who is
the author of X?"). It compares what actually differs between the two questions:

- negation: the parity of negators, where an antonym formed by a prefix present in the other
  text ("unsafe" / "safe") counts as one more negator, so "Is it unsafe?" = "Is it not safe?"
  while "Is it safe?" ≠ "Is it not safe?". When both texts negate, they must negate the same
  word (the negated verb of one is not present un-negated in the other and vice versa).
- antonyms: a lexicon word that only one text has, facing its antonym that only the other has
  ("increase" / "decrease", "turn on" / "turn off", "larger" / "smaller").
- numbers: the same multiset of values, and the same unit wherever both texts state one.
- entities: every name in one text is mentioned in the other.
- roles (`normalize.meaning.role_guards`), over the content words both texts share (aligned words):
  · a slot (role of a head) changes hands: held by A (not B) in one text and by B (not A) in
    the other, as in "Germany beat Brazil" / "Brazil beat Germany", "from X to Y" / "from Y to
    X", "in 1999 … in 2001" / "in 2001 … in 1999"; a copula's subject and complement are one
    slot ("Which is the best X?" / "Which X is best?");
  · an aligned word holds two different argument roles of the same head ("Who did Germany
    beat?" / "Who beat Germany?"); a move between the prepositions paraphrases trade (of,
    in/at/on, about: "books on / about X") is a rewording, not a new role, and pronouns are
    left to the slot test ("Tell me about X" parses "me" as an object or a recipient);
  · a head–dependent relation between two aligned nouns is inverted ("USD to EUR" parsed as
    USD → EUR, "EUR to USD" as EUR → USD);
  · an aligned noun or adjective left every head it had for another head both texts have, in
    the same kind of role ("the *Jewish* anarchists supported…, a few individualist ones" /
    "…a few *Jewish* ones"); moves inside one noun phrase, to or from an auxiliary, and of
    pronouns are parse noise and do not count;
  · two aligned words traded their argument roles, whatever their heads are called ("migrated
    from Scotland to Indiana" / "emigrated from Indiana to Scotland");
  · an aligned word is what one text is about and who acts in the other, whatever the heads
    ("Films directed by Spielberg" / "Films about Spielberg");
  · two words exchanged places: each now sits between the neighbours the other had ("from
    Paris to London" / "from London to Paris"), except in symmetric coordination ("A and B");
  · more phrases of the shared words moved than `semantic.max_moved_phrases` (1), or a moved
    phrase took a place that the other text fills with words of its own (a swap whose other
    half was reworded); see `normalize.meaning.rearrangement`. A paraphrase moves one constituent, a
    swap of two fillers needs two moves.
    The last two tests read word order only, so they back up the parse-based ones.
  Words only one text has are ignored here (a paraphrase may reword them); the cosine judges
  those.
- question: both texts ask for a specific kind of answer and the kinds differ ("When was X
  founded?" / "Where was X founded?"); "what" and "which" ask for anything and never conflict.

Pure and fast (~0.1–0.2 ms for two short questions): it runs for every FAISS candidate, on the
event loop, so `stepwise` offers it in three parts that a caller can spread over loop turns.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.semantic_config import SemanticConfig
from normalize.meaning.lexicon import (
    ANTONYMS,
    MIN_PREFIX_BASE_CHARS,
    NEGATING_PREFIXES,
    NEGATION_SCOPE_JOINER,
    NEGATORS,
)
from normalize.meaning.rearrangement import rearranged
from normalize.meaning.role_guards import exchanged, parsed_roles
from normalize.meaning.roles import head_word
from normalize.meaning.signature import Analysis, MeaningSignature

if TYPE_CHECKING:
    from normalize.meaning.zh.guards import ChineseGuard

_SPECIFIC_ASKS_EXCLUDED = frozenset({"thing"})


@dataclass(frozen=True, slots=True)
class GuardVerdict:
    """`agree` is True when the guards allow the hit; `reason` names the first disagreement
    ("negation", "antonym", "number", "entity", "role", "question", "language") and what
    differed, or is "" when they agree."""

    agree: bool
    reason: str = ""


AGREE = GuardVerdict(True)


@dataclass(frozen=True, slots=True)
class GuardSwitches:
    """Which guards `semantic.guard_*` turns on; every language's guard reads the same ones."""

    negation: bool
    numbers: bool
    entities: bool
    roles: bool
    antonyms: bool
    question: bool

    @classmethod
    def of(cls, config: SemanticConfig) -> GuardSwitches:
        return cls(
            config.guard_negation,
            config.guard_numbers,
            config.guard_entities,
            config.guard_roles,
            config.guard_antonyms,
            config.guard_question,
        )


class MeaningGuard:
    """Compares the meaning signatures of a query and a cached entry; see the module docstring."""

    def __init__(self, config: SemanticConfig) -> None:
        self._on = GuardSwitches.of(config)
        self._max_moved = config.max_moved_phrases
        self._config = config
        self._chinese_guard: ChineseGuard | None = None

    def _chinese(self) -> ChineseGuard:
        """The Chinese guards (normalize/meaning/zh/guards.py), made at the first Chinese pair:
        deployments without Chinese never import them."""
        if self._chinese_guard is None:
            from normalize.meaning.zh.guards import ChineseGuard

            self._chinese_guard = ChineseGuard(self._config)
        return self._chinese_guard

    def compare(self, query: Analysis, cached: Analysis) -> GuardVerdict:
        return next(verdict for verdict in self.stepwise(query, cached) if verdict is not None)

    def stepwise(self, query: Analysis, cached: Analysis) -> Iterator[GuardVerdict | None]:
        """`compare` in three parts of similar cost (measured on close Banking77 pairs: about
        50, 16 and 25 µs at the median, the last up to 0.2 ms), so that a caller on the event
        loop can let other work run in between: yields None after each part that found no
        disagreement, and the verdict last (the first disagreement, or AGREE)."""
        if not (query.analysable and cached.analysable):
            yield GuardVerdict(False, "language: a text the pipeline cannot read")
            return
        if query.language != cached.language:
            # The answers are in different languages (and the vectors from different models).
            yield GuardVerdict(False, f"language: {query.language} vs {cached.language}")
            return
        if query.language == "zh":
            yield self._chinese().compare(query, cached)
            return
        q, c = query.signature, cached.signature
        reason = (
            self._polarity(query, cached)
            or (self._antonym(q, c) if self._on.antonyms else None)
            or (_numbers(q, c) if self._on.numbers else None)
            or (_entities(query, cached) if self._on.entities else None)
            or (_question(query, cached) if self._on.question else None)
            or (parsed_roles(query, cached) if self._on.roles else None)
        )
        if reason or not self._on.roles:
            yield GuardVerdict(False, reason) if reason else AGREE
            return
        yield None
        reason = exchanged(query, cached)
        if reason:
            yield GuardVerdict(False, reason)
            return
        yield None
        reason = rearranged(query, cached, self._max_moved)
        yield GuardVerdict(False, reason) if reason else AGREE

    # --- negation and antonyms ---------------------------------------------------------------

    def _polarity(self, query: Analysis, cached: Analysis) -> str | None:
        flips_q, flips_c = _prefix_antonyms(query, cached)
        if not self._on.antonyms:
            flips_q = flips_c = []
        neg_q = _aligned_negators(query, cached) if self._on.negation else 0
        neg_c = _aligned_negators(cached, query) if self._on.negation else 0
        if (neg_q + len(flips_q)) % 2 != (neg_c + len(flips_c)) % 2:
            if flips_q or flips_c:
                return f"antonym: {'/'.join(flips_q + flips_c)}"
            return f"negation: {neg_q} vs {neg_c} negators"
        if self._on.negation and neg_q and neg_c:
            return _negation_scope(query, cached)
        return None

    @staticmethod
    def _antonym(q: MeaningSignature, c: MeaningSignature) -> str | None:
        only_q = Counter(q.polar) - Counter(c.polar)
        only_c = Counter(c.polar) - Counter(q.polar)
        for a in only_q:
            for b in only_c:
                if (a, b) in ANTONYMS:
                    return f"antonym: {a}/{b}"
        return None


def _aligned_negators(text: Analysis, other: Analysis) -> int:
    """Negators of `text` that negate a word the other text also has.

    A negator on a word only one text has ("I don't know why I was charged" / "Why was I
    charged?") sits in reworded content that the cosine judges; a negator on a shared word
    ("Is it safe?" / "Is it not safe?") flips the shared meaning. A negator with no head (a
    bare "No") always counts.
    """
    return sum(
        1
        for scope in text.signature.negated
        if not scope or any(w in other.words for w in scope.split(NEGATION_SCOPE_JOINER))
    )


def _negated_words(analysis: Analysis) -> set[str]:
    return {w for scope in analysis.signature.negated for w in scope.split(NEGATION_SCOPE_JOINER)}


def _prefix_antonyms(query: Analysis, cached: Analysis) -> tuple[list[str], list[str]]:
    """Words of one text that are a negating prefix + a word only the other text has."""
    only_q = set(query.skeleton) - set(cached.skeleton)
    only_c = set(cached.skeleton) - set(query.skeleton)
    return _prefixed(only_q, only_c), _prefixed(only_c, only_q)


def _prefixed(words: set[str], bases: set[str]) -> list[str]:
    found = []
    for word in sorted(words - NEGATORS):  # "unable" already counts as a negator
        for prefix in NEGATING_PREFIXES:
            base = word[len(prefix) :].lstrip("-")
            if word.startswith(prefix) and len(base) >= MIN_PREFIX_BASE_CHARS and base in bases:
                found.append(word)
                break
    return found


def _negation_scope(query: Analysis, cached: Analysis) -> str | None:
    # Each text negates a word the other also has but does not negate: "I do not want X but
    # want Y" / "I want X but do not want Y".
    neg_q, neg_c = _negated_words(query), _negated_words(cached)
    moved_q = {w for w in neg_q - neg_c if w in cached.words}
    moved_c = {w for w in neg_c - neg_q if w in query.words}
    if moved_q and moved_c:
        return f"negation: scope {sorted(moved_q)} vs {sorted(moved_c)}"
    return None


# --- numbers, entities, question kind --------------------------------------------------------


def _numbers(q: MeaningSignature, c: MeaningSignature) -> str | None:
    conflict = number_conflict(q, c, same_units=True)
    if conflict is not None:
        return conflict
    if q.math != c.math:
        return f"number: arithmetic {list(q.math)} vs {list(c.math)}"
    return None


def number_conflict(q: MeaningSignature, c: MeaningSignature, *, same_units: bool) -> str | None:
    """Why two texts' quantities disagree, or None: a value in one text only, or one value
    with other units (`same_units`: any difference in its units; otherwise only units that
    share nothing, where a language's readings of a unit vary). Shared by every language's
    guard."""
    values_q = Counter(x.value for x in q.quantities)
    values_c = Counter(x.value for x in c.quantities)
    if values_q != values_c:
        diff = sorted((values_q - values_c) + (values_c - values_q))
        return f"number: {', '.join(diff)} in one text only"
    units_q: dict[str, set[str]] = defaultdict(set)
    units_c: dict[str, set[str]] = defaultdict(set)
    for x in q.quantities:
        if x.unit:
            units_q[x.value].add(x.unit)
    for x in c.quantities:
        if x.unit:
            units_c[x.value].add(x.unit)
    for value in sorted(units_q.keys() & units_c.keys()):
        differ = units_q[value] != units_c[value]
        if differ if same_units else units_q[value].isdisjoint(units_c[value]):
            return f"number: {value} {sorted(units_q[value])} vs {sorted(units_c[value])}"
    return None


def _entities(query: Analysis, cached: Analysis) -> str | None:
    for a, b in ((query, cached), (cached, query)):
        for name in a.signature.entities:
            missing = [w for w in name.split() if not _mentioned(w, b.words)]
            if missing:
                return f"entity: {name!r} not in the other text"
    return None


def _mentioned(word: str, words: frozenset[str]) -> bool:
    # Names are often left unlemmatized: "Sundays" is "Sunday".
    return word in words or word + "s" in words or (word.endswith("s") and word[:-1] in words)


def _question(query: Analysis, cached: Analysis) -> str | None:
    kinds_q = set(query.signature.asks) - _SPECIFIC_ASKS_EXCLUDED
    kinds_c = set(cached.signature.asks) - _SPECIFIC_ASKS_EXCLUDED
    if not (kinds_q and kinds_c and kinds_q.isdisjoint(kinds_c)):
        return None
    if kinds_q | kinds_c == _HOW_TO_KINDS and _asks_to_find(query) and _asks_to_find(cached):
        return None
    return f"question: asks {sorted(kinds_q)} vs {sorted(kinds_c)}"


# "How do I find my W-2?" and "Where can I find my W-2?" ask one thing, where it is; "How do
# I get free internet?" and "Where do I get free internet?", or "How was Google founded?" and
# "Where was Google founded?", do not.
_HOW_TO_KINDS = frozenset({"manner", "place"})
_ASKERS = frozenset({"i", "we", "you", "one"})
_FINDING_VERBS = frozenset({"find", "locate", "see"})


def _asks_to_find(analysis: Analysis) -> bool:
    """The asker (I, we, you, one) is the one who finds, locates or sees."""
    return any(
        f.role == "subj" and f.item in _ASKERS and head_word(f.head) in _FINDING_VERBS
        for f in analysis.signature.roles
    )
