"""Numbers, their units and written-out arithmetic, read from a parsed spaCy `Doc`.

"5 km", "five kilometres" and "5km" all become `Quantity("5", "km")`; "$5.50" becomes
`Quantity("5.5", "usd")`; "1.5 million" becomes `Quantity("1500000")`; "3rd" and "third"
become `Quantity("ord:3")`. A token that mixes digits and letters ("PS4", "10:30", "COVID-19")
is kept as a code, compared by its text. Units are only read when they are known units
(lexicon.UNIT_ALIASES) or currency symbols: the counted noun of "2 eggs" is a content word and
is compared as such, not as a unit.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

from normalize.meaning.lexicon import (
    CURRENCY_SYMBOLS,
    NUMBER_WORDS,
    OPERATOR_SYMBOLS,
    OPERATOR_WORDS,
    ORDINAL_WORDS,
    SCALE_WORDS,
    UNIT_ALIASES,
)
from normalize.meaning.signature import Quantity

if TYPE_CHECKING:
    # Annotations only: the guards use this module in processes that never load spaCy.
    from spacy.tokens import Doc, Token

_DECIMAL = re.compile(r"^[+-]?(\d+(,\d{3})*|\d*)(\.\d+)?$")
_FRACTION = re.compile(r"^(\d+)/(\d+)$")
_ORDINAL = re.compile(r"^(\d+)(st|nd|rd|th)$")
_HAS_DIGIT = re.compile(r"\d")


def number_value(tok: Token) -> str | None:
    """The canonical value of a single number token, or None when it is not a number."""
    text = tok.lower_
    if _HAS_DIGIT.search(text):
        return _digit_value(text)
    if text in ORDINAL_WORDS and tok.tag_ in ("JJ", "RB"):
        return f"ord:{ORDINAL_WORDS[text]}"
    if text in NUMBER_WORDS:
        # "one" is also a pronoun ("How does one…", "Which one…"): a number only as a modifier.
        if text == "one" and tok.dep_ not in ("nummod", "quantmod"):
            return None
        return str(NUMBER_WORDS[text])
    return None


def _digit_value(text: str) -> str:
    if _DECIMAL.match(text) and any(ch.isdigit() for ch in text):
        return _canonical(Decimal(text.replace(",", "")))
    if (m := _FRACTION.match(text)) and int(m.group(2)):
        return _canonical(Decimal(m.group(1)) / Decimal(m.group(2)))
    if m := _ORDINAL.match(text):
        return f"ord:{int(m.group(1))}"
    return text  # a code such as "ps4" or "10:30": compared by its text


def _canonical(d: Decimal) -> str:
    try:
        d = d.quantize(Decimal("1.000000")).normalize()
    except InvalidOperation:  # too large to quantize; already exact
        d = d.normalize()
    return format(d, "f")


def _is_plain(value: str) -> bool:
    return bool(_DECIMAL.match(value))


def _span_value(toks: list[Token]) -> str:
    """Value of a run of number tokens: "twenty five", "1.5 million", "3 hundred"."""
    if len(toks) == 1:
        value = number_value(toks[0])
        assert value is not None, f"{toks[0].text!r} is not a number"
        return value
    total, current = Decimal(0), Decimal(0)
    for tok in toks:
        scale = SCALE_WORDS.get(tok.lower_)
        if scale is not None:
            current = (current or Decimal(1)) * scale
            if scale >= 1000:
                total, current = total + current, Decimal(0)
            continue
        value = number_value(tok)
        assert value is not None and _is_plain(value), f"{tok.text!r} in a number run"
        current += Decimal(value.replace(",", ""))
    return _canonical(total + current)


def _number_runs(doc: Doc) -> list[list[Token]]:
    """Runs of tokens that spell one number; ordinals and codes are runs of their own."""
    runs: list[list[Token]] = []
    run: list[Token] = []
    for tok in doc:
        value = number_value(tok)
        adjacent = bool(run) and run[-1].i + 1 == tok.i
        if value is not None and not _is_plain(value):
            runs.extend(r for r in (run, [tok]) if r)
            run = []
        elif value is not None:
            if not (adjacent and _continues(run[-1], tok)):
                runs.extend(r for r in (run,) if r)
                run = []
            run.append(tok)
        elif adjacent and tok.lower_ in SCALE_WORDS:
            run.append(tok)
        elif run:
            runs.append(run)
            run = []
    if run:
        runs.append(run)
    return runs


def _continues(prev: Token, tok: Token) -> bool:
    # "twenty five" and "two hundred five" are one number; "5 6" or "1999 2001" are two.
    words = NUMBER_WORDS.keys()
    return tok.lower_ in words and (prev.lower_ in words or prev.lower_ in SCALE_WORDS)


def _unit(run: list[Token]) -> str:
    doc = run[0].doc
    first, last = run[0], run[-1]
    if first.i > 0 and doc[first.i - 1].lower_ in CURRENCY_SYMBOLS:
        return UNIT_ALIASES[doc[first.i - 1].lower_]
    if last.i + 1 < len(doc):
        nxt = doc[last.i + 1]
        unit = _unit_of(nxt)
        if unit:
            return unit
    head = last.head
    if last.dep_ in ("nummod", "quantmod") and head.i != last.i:
        return _unit_of(head)
    return ""


def _unit_of(tok: Token) -> str:
    for text in (tok.lower_, tok.lemma_.lower()):
        if text in UNIT_ALIASES:
            # "in" is an inch only right after a number, which is how this is called.
            return UNIT_ALIASES[text]
    return ""


def extract_quantities(doc: Doc) -> tuple[tuple[Quantity, ...], tuple[str, ...]]:
    """The quantities of `doc` (sorted) and its written-out arithmetic expressions."""
    runs = _number_runs(doc)
    quantities = sorted(Quantity(_span_value(run), _unit(run)) for run in runs)
    return tuple(quantities), _expressions(doc, runs)


def _expressions(doc: Doc, runs: list[list[Token]]) -> tuple[str, ...]:
    """Arithmetic such as "2 + 2" or "ten divided by 3": operators between two numbers."""
    starts = {run[0].i: run for run in runs}
    exprs: list[str] = []
    i = 0
    while i < len(doc):
        if i not in starts:
            i += 1
            continue
        expr, has_operator = "", False
        while i in starts:
            run = starts[i]
            expr += _span_value(run)
            i = run[-1].i + 1
            op = _operator_after(doc, i, starts)
            if op is None:
                break
            symbol, i = op
            expr, has_operator = expr + symbol, True
        if has_operator:
            exprs.append(expr)
    return tuple(exprs)


def _operator_after(doc: Doc, i: int, starts: dict[int, list[Token]]) -> tuple[str, int] | None:
    """The operator at token i when a number follows it (skipping "by" in "divided by")."""
    if i >= len(doc):
        return None
    tok = doc[i]
    symbol = tok.text if tok.text in OPERATOR_SYMBOLS else OPERATOR_WORDS.get(tok.lemma_.lower())
    if symbol is None:
        return None
    j = i + 1
    if j < len(doc) and doc[j].lower_ in ("by", "to"):
        j += 1
    return (symbol, j) if j in starts else None
