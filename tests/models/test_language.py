"""The language gate (no model needed; it lives with the tests of the meaning pipeline)."""

from __future__ import annotations

import pytest

from normalize.meaning.language import LanguageGate

GATE = LanguageGate(("en",))


@pytest.mark.parametrize(
    "text",
    [
        "Who wrote Hamlet?",
        "How do I reset my password?",
        "What is 2 + 2?",
        "12345",
        "",
        "What's a café au lait?",
        "How far is Las Vegas from Los Angeles?",
        "What does 你好 mean in English?",
        "ＷＨＯ wrote Hamlet?",  # full-width Latin letters
    ],
)
def test_english_is_supported(text: str) -> None:
    assert GATE.supports(text)


@pytest.mark.parametrize(
    "text",
    [
        "把美元换成欧元",
        "这个药不安全吗？",
        "この薬は安全ですか？",
        "이 약은 안전한가요?",
        "Это лекарство безопасно?",
        "هل هذا الدواء آمن؟",
        "Est-ce que ce médicament est sûr ?",
        "¿Es seguro comer pollo crudo?",
        "Ist das Medikament nicht sicher?",
        "Questo farmaco non è sicuro?",
        "Is dit medicijn niet veilig voor mij en mijn kinderen?",
    ],
)
def test_other_languages_are_not(text: str) -> None:
    assert not GATE.supports(text)


def test_no_language_configured_supports_nothing() -> None:
    assert not LanguageGate(()).supports("Who wrote Hamlet?")


def test_unknown_language_is_a_configuration_error() -> None:
    with pytest.raises(AssertionError, match="no meaning pipeline"):
        LanguageGate(("en", "fr"))


BOTH = LanguageGate(("en", "zh"))


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("把美元换成欧元", "zh"),
        ("这个药不安全吗？", "zh"),
        # Mixed scripts follow the script of the content words.
        ("如何安装Python 3.11?", "zh"),
        ("iPhone 15多少钱", "zh"),
        ("请问RTX4090和RTX4080哪个好", "zh"),
        ("What does 你好 mean in English?", "en"),
        ("Who wrote Hamlet?", "en"),
        ("12345", "en"),  # no letters: the first configured language
        # Japanese shares Han characters with Chinese; its kana give it away.
        ("この薬は安全ですか？", None),
        ("東京タワーの高さは", None),
        ("이 약은 안전한가요?", None),
        ("¿Es seguro comer pollo crudo?", None),
    ],
)
def test_each_prompt_goes_to_the_pipeline_of_its_language(text: str, language: str | None) -> None:
    assert BOTH.language_of(text) == language


def test_chinese_is_read_only_where_configured() -> None:
    assert GATE.language_of("把美元换成欧元") is None
    assert LanguageGate(("zh",)).language_of("Who wrote Hamlet?") is None
