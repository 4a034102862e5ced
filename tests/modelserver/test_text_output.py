"""Incremental detokenizing and stop strings, on the byte-level tokenizer (one token per byte)."""

from __future__ import annotations

import pytest

from modelserver.sampler import SampledToken
from modelserver.text_output import TextAssembler, TextDelta
from modelserver.tokenizer import TextTokenizer

EOS = 2


@pytest.fixture(scope="module")
def tokenizer() -> TextTokenizer:
    return TextTokenizer.byte_level()


def byte_tokens(text: str) -> list[int]:
    return [byte + 3 for byte in text.encode("utf-8")]  # ids 0-2 are the special tokens


def push_all(assembler: TextAssembler, ids: list[int]) -> list[TextDelta]:
    return [assembler.push(SampledToken(token_id, None)) for token_id in ids]


def test_byte_level_ids_are_one_per_byte(tokenizer: TextTokenizer) -> None:
    assert tokenizer.encode("hé") == byte_tokens("hé")
    assert tokenizer.decode(byte_tokens("hé")) == "hé"
    assert tokenizer.token_bytes(byte_tokens("é")[0]) == "é".encode()[:1]


def test_a_character_split_across_tokens_is_sent_once_complete(tokenizer: TextTokenizer) -> None:
    assembler = TextAssembler(tokenizer, (), frozenset({EOS}))

    deltas = push_all(assembler, byte_tokens("aé"))

    assert [d.text for d in deltas] == ["a", "", "é"]
    assert [t.text_offset for d in deltas for t in d.tokens] == [0, 1, 1]
    assert assembler.text == "aé"


def test_text_stops_before_a_stop_string_and_holds_back_a_possible_start(
    tokenizer: TextTokenizer,
) -> None:
    assembler = TextAssembler(tokenizer, ("END",), frozenset({EOS}))

    deltas = push_all(assembler, byte_tokens("abcEN"))
    assert "".join(d.text for d in deltas) == "abc"  # "EN" could begin "END"
    last = assembler.push(SampledToken(byte_tokens("D")[0], None))

    assert assembler.stopped_by_string
    assert last.text == ""
    assert assembler.text == "abc"
    assert assembler.num_tokens == 6  # the tokens up to the one that completed the stop string


def test_a_false_start_is_released(tokenizer: TextTokenizer) -> None:
    assembler = TextAssembler(tokenizer, ("END",), frozenset({EOS}))

    deltas = push_all(assembler, byte_tokens("ENx"))

    assert "".join(d.text for d in deltas) == "E"
    assert assembler.flush().text == "Nx"
    assert not assembler.stopped_by_string


def test_the_earliest_of_several_stop_strings_wins(tokenizer: TextTokenizer) -> None:
    assembler = TextAssembler(tokenizer, ("yz", "x"), frozenset({EOS}))

    push_all(assembler, byte_tokens("abxyz"))

    assert assembler.text == "ab"


def test_tokens_inside_a_stop_string_are_dropped_and_later_ones_ignored(
    tokenizer: TextTokenizer,
) -> None:
    assembler = TextAssembler(tokenizer, ("\n\n",), frozenset({EOS}))

    deltas = push_all(assembler, byte_tokens("hi\n\nmore"))

    sent = [t.text for d in deltas for t in d.tokens]
    assert sent == ["h", "i"]
    assert assembler.num_tokens == 4


def test_the_stop_token_counts_but_adds_no_text(tokenizer: TextTokenizer) -> None:
    assembler = TextAssembler(tokenizer, (), frozenset({EOS}))

    push_all(assembler, [*byte_tokens("ok"), EOS])

    assert assembler.text == "ok"
    assert assembler.num_tokens == 3
    assert assembler.flush() == TextDelta("", ())
