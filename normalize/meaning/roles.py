"""Who does what to whom: the `RoleFact`s of a parsed sentence.

For each content word (noun, name, pronoun, number, verb, adjective) we record the role it fills
and the lemma of the word it depends on. Roles are coarse and normalized so that paraphrases give
the same facts and swaps give different ones:

    "Germany beat Brazil"         germany subj beat · brazil obj beat
    "Brazil was beaten by Germany" brazil obj beat   · germany subj beat   (passive undone)
    "Convert USD to EUR"           usd obj convert   · eur p:goal convert
    "Convert USD into EUR"         (same: "to" and "into" are one preposition class)
    "Germany's capital"            germany p:of capital  (= "the capital of Germany")

Coordination shares one role: in "A and B" the second conjunct takes the first one's role, so
"between A and B" and "between B and A" agree (the guard compares sets of holders).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from normalize.meaning.lexicon import PREPOSITION_CLASS
from normalize.meaning.quantities import number_value
from normalize.meaning.signature import RoleFact

if TYPE_CHECKING:
    # Annotations only: the guards use this module in processes that never load spaCy.
    from spacy.tokens import Doc, Token

_NOMINAL_POS = frozenset({"NOUN", "PROPN", "PRON", "NUM"})
_KIND = {"NOUN": "n", "PROPN": "n", "PRON": "p", "NUM": "n", "VERB": "v", "ADJ": "a", "ADV": "a"}

_SUBJECT_DEPS = frozenset({"nsubj", "csubj"})
_OBJECT_DEPS = frozenset({"dobj", "nsubjpass", "csubjpass"})
_MODIFIER_DEPS = frozenset(
    {
        "amod",
        "compound",
        "nummod",
        "quantmod",
        "nmod",
        "npadvmod",
        "advmod",
        "acomp",
        "acl",
        "relcl",
        "advcl",
        "xcomp",
        "ccomp",
        "oprd",
    }
)

# How many levels up a repeated head word is qualified by its own place.
_HEAD_QUALIFIER_DEPTH = 2
# The roles a word can hold as an argument of its head (as opposed to a modifier of it).
ARGUMENT_ROLES = frozenset({"subj", "obj", "attr", "goal"})


def is_argument_role(role: str) -> bool:
    return role in ARGUMENT_ROLES or role.startswith("p:")


def token_key(tok: Token) -> str:
    """How a word is named in facts and skeletons: its lower-cased lemma ("#5" for numbers)."""
    if tok.pos_ == "NUM" or tok.like_num:
        value = number_value(tok)
        if value is not None:
            return "#" + value
    lemma = tok.lemma_.lower() or tok.lower_
    return lemma.replace(".", "") if len(lemma) > 1 else lemma


def _preposition_role(prep: Token) -> str:
    word = prep.lemma_.lower()
    return "p:" + PREPOSITION_CLASS.get(word, word)


def _slot(tok: Token) -> tuple[str, Token] | None:
    """(role, head token) of `tok`, or None for the root and for function words."""
    # A later conjunct or an apposition shares the role of the word it attaches to.
    while tok.dep_ in ("conj", "appos") and tok.head.i != tok.i:
        tok = tok.head
    dep, head = tok.dep_, tok.head
    if head.i == tok.i:
        return None
    if dep in ("pobj", "pcomp"):
        prep = head
        while prep.dep_ == "conj" and prep.head.i != prep.i:  # "from A and to B"
            prep = prep.head
        if prep.head.i == prep.i:
            return None
        if prep.dep_ == "agent":  # "written by X": X is the subject
            return "subj", prep.head
        return _preposition_role(prep), prep.head
    if dep in _SUBJECT_DEPS:
        return "subj", head
    if dep in _OBJECT_DEPS:
        return "obj", head
    if dep == "dative":  # "give him the book" = "give the book to him"
        return "p:goal", head
    if dep == "attr":
        return "attr", head
    if dep == "poss":  # "Germany's capital" = "the capital of Germany"
        return "p:of", head
    if dep in _MODIFIER_DEPS:
        return "mod", head
    return None


def _is_name_part(tok: Token) -> bool:
    """A proper noun inside a longer name ("Iván" in "Iván Fischer"): the name is one item.

    A sentence's first word is never merged: the tagger often reads a capitalized imperative
    before an acronym as a name ("Convert USD to EUR")."""
    return (
        tok.pos_ == "PROPN"
        and tok.dep_ in ("compound", "flat")
        and tok.head.pos_ == "PROPN"
        and not tok.is_sent_start
    )


def _name_keys(doc: Doc) -> dict[int, str]:
    """Item keys of multi-word names, by the index of the name's head token."""
    keys: dict[int, str] = {}
    for tok in doc:
        if tok.pos_ != "PROPN" or _is_name_part(tok):
            continue
        parts = [tok]
        stack = list(tok.children)
        while stack:
            child = stack.pop()
            if _is_name_part(child) and child.head.i in {p.i for p in parts}:
                parts.append(child)
                stack.extend(child.children)
        if len(parts) > 1:
            keys[tok.i] = " ".join(token_key(p) for p in sorted(parts, key=lambda p: p.i))
    return keys


class _Keys:
    """Item keys of a doc's tokens, and head keys that tell repeated words apart."""

    def __init__(self, doc: Doc) -> None:
        self._names = _name_keys(doc)
        self._counts: dict[str, int] = {}
        for tok in doc:
            if not (tok.is_punct or _is_name_part(tok)):
                key = self.item(tok)
                self._counts[key] = self._counts.get(key, 0) + 1

    def item(self, tok: Token) -> str:
        return self._names.get(tok.i) or token_key(tok)

    def head(self, tok: Token, depth: int = _HEAD_QUALIFIER_DEPTH) -> str:
        """The key of a head word; a word the text uses more than once is qualified by its own
        place ("century<p:until,repair>" vs "century<conj,century>"), so "the 6th century for
        Milan and the 7th century for Aquileia" and its swap differ."""
        key = self.item(tok)
        if depth == 0 or self._counts.get(key, 0) < 2:
            return key
        if tok.dep_ == "conj" and tok.head.i != tok.i:
            return f"{key}<conj,{self.head(tok.head, depth - 1)}>"
        slot = _slot(tok)
        if slot is None:
            return f"{key}<root>"
        role, head = slot
        return f"{key}<{role},{self.head(head, depth - 1)}>"


def unit_sequence(doc: Doc, skip: Callable[[Token], bool]) -> tuple[str, ...]:
    """The doc's words in order as item keys (a multi-word name is one unit, at its head's
    place), leaving out punctuation and the tokens `skip` names."""
    keys = _Keys(doc)
    return tuple(
        keys.item(tok)
        for tok in doc
        if not (tok.is_punct or tok.is_space or _is_name_part(tok) or skip(tok))
    )


def head_word(head: str) -> str:
    """The plain key of a (possibly qualified) head key."""
    return head.split("<", 1)[0]


def extract_roles(doc: Doc) -> tuple[RoleFact, ...]:
    """The sorted, de-duplicated role facts of every content word of `doc`.

    A multi-word name is one item ("iván fischer"), so "Iván Fischer is the brother of Ádám
    Fischer" and its swap differ although both mention the lemma "fischer" twice.
    """
    keys = _Keys(doc)
    facts: set[RoleFact] = set()
    for tok in doc:
        kind = _KIND.get(tok.pos_)
        if kind is None or tok.is_punct or _is_name_part(tok):
            continue
        slot = _slot(tok)
        if slot is None:
            continue
        role, head = slot
        facts.add(RoleFact(keys.item(tok), role, keys.head(head), kind))
    return tuple(sorted(facts))


def is_nominal(tok: Token) -> bool:
    return tok.pos_ in _NOMINAL_POS
