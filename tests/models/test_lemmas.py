"""The lemma analysis with spaCy's English pipeline: skeleton, signature, lemma key, wire format."""

from __future__ import annotations

import pytest

from core.errors import CorruptEntry
from normalize.meaning.lemmas import Analysis, LemmaAnalyzer, Quantity
from normalize.meaning.signature import WIRE_VERSION


def test_skeleton_is_sorted_content_lemmas(analyzer: LemmaAnalyzer) -> None:
    analysis = analyzer.analyze("How can I reset my passwords?")
    assert analysis.skeleton == ("password", "reset")
    assert analysis.analysable


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("How do I reset my password?", "How can I reset my password?"),
        ("What is the capital of France?", "What's the capital of France?"),
        ("How do I cancel my subscription?", "how do I cancel my subscription"),
        ("Please tell me the boiling point of water.", "Tell me the boiling point of water"),
    ],
)
def test_trivial_variants_share_the_lemma_key(
    analyzer: LemmaAnalyzer, first: str, second: str
) -> None:
    assert analyzer.analyze(first).key_material() == analyzer.analyze(second).key_material()


@pytest.mark.parametrize(
    ("first", "second"),
    [
        # "can" and "do" only mean the same in "how" questions.
        ("Can I eat raw eggs?", "Do I eat raw eggs?"),
        ("Who is the CEO of Apple?", "Who was the CEO of Apple?"),
        ("Are all birds able to fly?", "Are some birds able to fly?"),
        ("Flights from Paris to London", "Flights to London from Paris"),
        ("Is Apple a good company?", "Is apple a good fruit?"),
    ],
)
def test_lemma_key_stays_conservative(analyzer: LemmaAnalyzer, first: str, second: str) -> None:
    assert analyzer.analyze(first).key_material() != analyzer.analyze(second).key_material()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Convert 5 km to miles", [Quantity("5", "km")]),
        ("Convert five kilometres to miles", [Quantity("5", "km")]),
        ("It costs $5.50", [Quantity("5.5", "usd")]),
        ("About 1.5 million people", [Quantity("1500000")]),
        ("twenty five apples and 1,602 euros", [Quantity("1602", "eur"), Quantity("25")]),
        ("the 3rd and the fourth", [Quantity("ord:3"), Quantity("ord:4")]),
        ("15% of 80", [Quantity("15", "%"), Quantity("80")]),
        ("Is the PS4 better?", [Quantity("ps4")]),
        ("How does one learn Python?", []),
    ],
)
def test_numbers_with_units(analyzer: LemmaAnalyzer, text: str, expected: list[Quantity]) -> None:
    assert list(analyzer.analyze(text).signature.quantities) == sorted(expected)


def test_arithmetic_is_kept_in_order(analyzer: LemmaAnalyzer) -> None:
    assert analyzer.analyze("What is 10 - 3?").signature.math == ("10-3",)
    assert analyzer.analyze("What is 3 - 10?").signature.math == ("3-10",)
    assert analyzer.analyze("What is ten divided by 2?").signature.math == ("10/2",)


def test_negation_is_counted_with_the_word_it_negates(analyzer: LemmaAnalyzer) -> None:
    signature = analyzer.analyze("Why isn't my card working?").signature
    assert signature.negations == 1
    assert signature.negated == ("work",)
    assert analyzer.analyze("There is no fee").signature.negated == ("fee",)
    assert analyzer.analyze("I never said that").signature.negations == 1


def test_roles_undo_the_passive(analyzer: LemmaAnalyzer) -> None:
    active = {
        (f.item, f.role, f.head)
        for f in analyzer.analyze("Shakespeare wrote Hamlet").signature.roles
    }
    passive = analyzer.analyze("Hamlet was written by Shakespeare").signature.roles
    assert {(f.item, f.role, f.head) for f in passive} == active
    assert ("shakespeare", "subj", "write") in active
    assert ("hamlet", "obj", "write") in active


def test_names_and_question_kinds(analyzer: LemmaAnalyzer) -> None:
    signature = analyzer.analyze("When did Iván Fischer visit New York?").signature
    assert "iván fischer" in signature.entities
    assert signature.asks == ("time",)
    assert analyzer.analyze("How many eggs are in a dozen?").signature.asks == ("quantity",)
    assert analyzer.analyze("How come the app crashes?").signature.asks == ("reason",)


def test_wire_round_trip(analyzer: LemmaAnalyzer) -> None:
    for text in ("Convert 5 km to miles, not 5 miles!", "把美元换成欧元", "Who wrote Hamlet?"):
        analysis = analyzer.analyze(text)
        wire = analysis.to_wire()
        assert f'"v":{WIRE_VERSION}' in wire
        assert Analysis.from_wire(wire) == analysis


def test_wire_rejects_other_versions_and_garbage(analyzer: LemmaAnalyzer) -> None:
    wire = analyzer.analyze("Who wrote Hamlet?").to_wire()
    with pytest.raises(CorruptEntry):
        Analysis.from_wire(wire.replace(f'"v":{WIRE_VERSION}', '"v":999'))
    with pytest.raises(CorruptEntry):
        Analysis.from_wire('{"v": 1, "ok": true}')
    with pytest.raises(CorruptEntry):
        Analysis.from_wire("not json")


def test_unreadable_prompts_get_an_opaque_analysis(analyzer: LemmaAnalyzer) -> None:
    analysis = analyzer.analyze("这个药安全吗？")
    assert not analysis.analysable
    assert analysis.key_material() == "raw:这个药安全吗?"  # the canonical (NFKC) text
    too_long = "Why is the sky blue? " * 100
    assert not analyzer.analyze(too_long).analysable


def test_analyze_many_matches_analyze(analyzer: LemmaAnalyzer) -> None:
    texts = ["Who wrote Hamlet?", "把美元换成欧元", "Convert 5 km to miles", ""]
    assert analyzer.analyze_many(texts) == [analyzer.analyze(t) for t in texts]
