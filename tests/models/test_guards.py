"""MeaningGuard on real analyses: each guard alone, its switch, and what it must not block."""

from __future__ import annotations

from dataclasses import replace

import pytest

from core.semantic_config import SemanticConfig
from normalize.meaning.guards import MeaningGuard
from normalize.meaning.lemmas import LemmaAnalyzer
from normalize.meaning.rearrangement import moved_phrases


def _verdict(analyzer: LemmaAnalyzer, guard: MeaningGuard, a: str, b: str) -> tuple[bool, str]:
    verdict = guard.compare(analyzer.analyze(a), analyzer.analyze(b))
    return verdict.agree, verdict.reason


# (switch, the reason it gives, a pair only that guard stops)
SWITCHED: list[tuple[str, str, str, str]] = [
    (
        "guard_negation",
        "negation",
        "Is it safe to eat raw chicken?",
        "Is it not safe to eat raw chicken?",
    ),
    ("guard_numbers", "number", "Convert 100 USD to EUR", "Convert 200 USD to EUR"),
    (
        "guard_entities",
        "entity",
        "What is the capital of France?",
        "What is the capital of Germany?",
    ),
    ("guard_roles", "role", "Did Germany beat Brazil?", "Did Brazil beat Germany?"),
    ("guard_antonyms", "antonym", "How do I enable dark mode?", "How do I disable dark mode?"),
    ("guard_question", "question", "When was Google founded?", "Where was Google founded?"),
]


@pytest.mark.parametrize(("switch", "reason_name", "a", "b"), SWITCHED)
def test_each_guard_stops_its_case_and_can_be_switched_off(
    analyzer: LemmaAnalyzer, config: SemanticConfig, switch: str, reason_name: str, a: str, b: str
) -> None:
    on = MeaningGuard(config)
    off = MeaningGuard(replace(config, **{switch: False}))
    agree, reason = _verdict(analyzer, on, a, b)
    assert not agree
    assert reason.startswith(reason_name), reason
    assert _verdict(analyzer, off, a, b) == (True, "")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # Reworded content around a negation is judged by the cosine, not the negation guard.
        ("I've been charged an extra fee and I don't know why", "Why was I charged an extra fee?"),
        # A prefixed antonym plus a "not" is the same polarity.
        ("Is it unsafe to swim here?", "Is it not safe to swim here?"),
        # Coordination is symmetric.
        (
            "What is the difference between TCP and UDP?",
            "What is the difference between UDP and TCP?",
        ),
        # Units spelled differently.
        ("How far is 10 km?", "How far is 10 kilometres?"),
        # "what" asks for anything; the kinds only conflict when both are specific.
        ("What is the population of Tokyo?", "How many people live in Tokyo?"),
        # Names are checked by their words, whatever the tagger thinks of them.
        ("how do i learn python", "How do I learn Python?"),
        # Passive and active voice.
        ("Who was Hamlet written by?", "Who wrote Hamlet?"),
        # A word reworded into another role of another head is not a swap.
        ("Who wrote Hamlet?", "Who is the author of Hamlet?"),
        # One phrase moved as a whole, with its preposition.
        (
            "How do I transfer money from my savings account to my checking account?",
            "How do I transfer money to my checking account from my savings account?",
        ),
        ("Can I pay my rent with a credit card in Germany?", "In Germany, can I pay my rent?"),
        # Prepositions that paraphrases trade on the same head.
        ("What are the best books on finance?", "What are the best books about finance?"),
        ("What do people in China think about Modi?", "What do people in China think of Modi?"),
        # A pronoun parsed as an object once and a recipient once.
        ("Tell me about Python", "Tell me something about Python"),
        # A copula's subject and complement are one slot, whichever way it is parsed.
        (
            "Which is the best institute for Android training?",
            "Which institute is best for Android training?",
        ),
        (
            "What should I do if my card was stolen while travelling abroad?",
            "If my card was stolen while travelling abroad, what should I do?",
        ),
        # A negation reaches through "seem to": both deny that the card works.
        ("My card doesn't seem to work", "My card isn't working"),
        # "How" + a measurable adjective asks a quantity, as "how much" does.
        ("How expensive is a taxi in Paris?", "How much does a taxi cost in Paris?"),
        # "How" and "where" agree about finding something.
        ("How do I find my W-2 form?", "Where can I find my W-2 form?"),
        # A noun's prepositional object became its modifier.
        ("What's the fastest animal on land?", "Which land animal is the fastest?"),
    ],
)
def test_guards_are_not_blunt(analyzer: LemmaAnalyzer, guard: MeaningGuard, a: str, b: str) -> None:
    assert _verdict(analyzer, guard, a, b) == (True, "")
    assert _verdict(analyzer, guard, b, a) == (True, "")


def test_unreadable_text_never_agrees(analyzer: LemmaAnalyzer, guard: MeaningGuard) -> None:
    agree, reason = _verdict(analyzer, guard, "这个药安全吗？", "这个药安全吗？")
    assert not agree and reason.startswith("language")


def test_negation_scope_must_match(analyzer: LemmaAnalyzer, guard: MeaningGuard) -> None:
    agree, reason = _verdict(
        analyzer,
        guard,
        "I want the red card but not the blue one",
        "I want the blue card but not the red one",
    )
    assert not agree, reason


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # Direction, comparison, creator, company and audience still count when only the
        # preposition changes.
        ("Cheap flights from Paris", "Cheap flights to Paris"),
        ("Is Tom taller than Bob?", "Is Bob taller than Tom?"),
        ("Recommend books by Tolkien", "Recommend books about Tolkien"),
        ("What are the best movies with Tom Hanks?", "What are the best movies about Tom Hanks?"),
        ("What are good books for kids?", "What are good books about kids?"),
        # Who acts in one is what the other is about, under another head.
        ("Films directed by Spielberg", "Films about Spielberg"),
        # One copula slot, but its holders still may not trade places.
        ("Is Paris the capital of France?", "Is France the capital of Paris?"),
        ("Is John the father of Mike?", "Is Mike the father of John?"),
        ("Is the teacher a student?", "Is the student a teacher?"),
        # Where something goes in one and where it comes from in the other.
        ("How do I transfer money into my account?", "How do I take money from my account?"),
        # Modifiers exchanged between two nouns.
        ("I want the red car and the blue bike", "I want the blue car and the red bike"),
    ],
)
def test_roles_still_stop_prepositions_that_change_the_question_and_copula_swaps(
    analyzer: LemmaAnalyzer, guard: MeaningGuard, a: str, b: str
) -> None:
    for query, cached in ((a, b), (b, a)):
        agree, reason = _verdict(analyzer, guard, query, cached)
        assert not agree and reason.startswith("role"), reason


# (query, cached, the phrases that moved, whether one of them was swapped)
REARRANGED: list[tuple[str, str, list[str], bool]] = [
    # One constituent moved with its preposition: a paraphrase.
    (
        "How do I transfer money from my savings account to my checking account?",
        "How do I transfer money to my checking account from my savings account?",
        ["to checking account"],
        False,
    ),
    (
        "Can I pay my rent with a credit card in Germany?",
        "In Germany, can I pay my rent?",
        ["in germany"],
        False,
    ),
    # Active and passive voice: the moved subject and object keep their roles.
    ("Shakespeare wrote Hamlet.", "Hamlet was written by Shakespeare.", ["write"], False),
    # Fillers exchanged: two moves ("through" left its object behind).
    (
        "He wanted to go back to England through Scotland.",
        "He wanted to go back to Scotland through England.",
        ["through", "scotland"],
        False,
    ),
    (
        "The museum in the old town is open on weekends and the park near the river is open daily.",
        "The museum near the river is open on weekends and the park in the old town is open daily.",
        ["open on weekend park", "near river"],
        False,
    ),
    # A swap whose other half was reworded ("heated" / "modern"): one move, into a taken place.
    (
        "The hotel has a heated pool and a small gym on the roof.",
        "The hotel has a small pool and a modern gym on the roof.",
        ["small"],
        True,
    ),
]


@pytest.mark.parametrize(("a", "b", "phrases", "swapped"), REARRANGED)
def test_moved_phrases(
    analyzer: LemmaAnalyzer, a: str, b: str, phrases: list[str], swapped: bool
) -> None:
    moves = moved_phrases(analyzer.analyze(a), analyzer.analyze(b))
    assert sorted(m.phrase for m in moves) == sorted(phrases)
    assert any(m.swapped for m in moves) == swapped


def test_one_moved_phrase_is_allowed_by_default(
    analyzer: LemmaAnalyzer, config: SemanticConfig, guard: MeaningGuard
) -> None:
    a = "The museum in the old town is open on weekends and the park near the river is open daily."
    b = "The museum near the river is open on weekends and the park in the old town is open daily."
    agree, reason = _verdict(analyzer, guard, a, b)
    assert not agree and reason.startswith("role: 2 phrases moved"), reason
    lenient = MeaningGuard(replace(config, max_moved_phrases=2))
    assert _verdict(analyzer, lenient, a, b) == (True, "")


@pytest.mark.parametrize(
    ("a", "b", "parts"),
    [
        ("Who wrote Hamlet?", "Who is the author of Hamlet?", 3),  # agrees: every part runs
        ("Is it safe to eat raw chicken?", "Is it not safe to eat raw chicken?", 1),
        ("Convert 100 USD to EUR", "Convert 200 USD to EUR", 1),
        ("Did Germany beat Brazil?", "Did Brazil beat Germany?", 1),
        ("Send money from Paris to London", "Send money from London to Paris", None),
    ],
)
def test_stepwise_gives_the_verdict_of_compare_last_after_at_most_three_parts(
    analyzer: LemmaAnalyzer, guard: MeaningGuard, a: str, b: str, parts: int | None
) -> None:
    query, cached = analyzer.analyze(a), analyzer.analyze(b)
    steps = list(guard.stepwise(query, cached))
    assert 1 <= len(steps) <= 3 and (parts is None or len(steps) == parts)
    assert all(step is None for step in steps[:-1])
    assert steps[-1] == guard.compare(query, cached)
    # A pair that disagrees stops at the part that found it: the rest never run.
    assert steps[-1] is not None and steps[-1].agree == (a.startswith("Who"))
