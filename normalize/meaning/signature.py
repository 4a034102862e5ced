"""What a question means, as far as the cache must know: the `Analysis` of one prompt.

An `Analysis` is computed once per prompt by `normalize.meaning.lemmas.LemmaAnalyzer`, stored next
to a cached entry (`to_wire`, compact JSON with a format version) and compared with later queries by
`normalize.meaning.guards.MeaningGuard`. It holds:

- `skeleton`: the content lemmas, sorted (word order is kept where it matters, in `roles`);
- `function`: the other lemmas, minus a short list of words that never change what is asked
  (articles, "do", "please"), so the lemma key stays conservative;
- `words`: every lower-cased form and lemma, for "does the other text mention this entity";
- `signature`: the parts of meaning an embedding is known to blur (see `MeaningSignature`).

A prompt the English pipeline cannot read (another script, or too long to analyse) gets an
*opaque* analysis: its key material is its canonical text, so the lemma key degrades to the exact
key, and the guard never lets it match anything semantically.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field, replace
from typing import Any

from core.errors import CorruptEntry

WIRE_VERSION = 1


@dataclass(frozen=True, slots=True, order=True)
class Quantity:
    """A number with its unit: value "5", "1500000", "0.5", "ord:3" (an ordinal) or a code such
    as "10:30"; unit a canonical unit ("km", "usd", "%") or "" when none is stated."""

    value: str
    unit: str = ""


@dataclass(frozen=True, slots=True, order=True)
class RoleFact:
    """One content word's place in its clause: `item` fills `role` of `head`.

    Items and heads are lower-cased lemmas ("#5" for the number 5). Roles are coarse and
    normalized so that paraphrases agree: "subj", "obj" (the passive subject is an object; the
    "by" agent is a subject), "attr", "goal" ("give him X" = "give X to him"), "p:<class>" for a
    preposition's object ("p:goal" for to/into, "p:source" for from, "p:of" also for possessives,
    "p:comparison" for than), "mod" for modifiers. A head the text uses more than once is
    qualified by its own place ("century<p:goal,repair>"). `kind` is "n" (noun, name,
    number), "p" (pronoun), "v" (verb) or "a" (adjective, adverb).
    """

    item: str
    role: str
    head: str
    kind: str


@dataclass(frozen=True, slots=True)
class MeaningSignature:
    """The parts of meaning the guards compare (all tuples sorted, so equality is order-free).

    negations: how many negators ("not", "n't", "never", "no", "nothing", ...) the text holds.
    negated: for each negator, the lemma it attaches to (the negated verb, adjective or noun;
        "" for none), sorted.
    quantities: numbers with their units.
    math: arithmetic written out ("2+2", "10/3"), in order, when the text has any.
    entities: named things (names, places, products, acronyms), as space-joined lemmas.
    roles: the `RoleFact`s of the content words.
    asks: the kinds of answer the question asks for ("person", "time", "place", "reason",
        "manner", "quantity", "thing").
    polar: words of the antonym lexicon present (particles only when used as particles).
    tense: "past" / "future" when a verb is in that tense.
    order: the words in text order (names as one unit; articles and other meaning-free words
        left out), for the guard's exchange test and a conservative lemma key.
    """

    negations: int = 0
    negated: tuple[str, ...] = ()
    quantities: tuple[Quantity, ...] = ()
    math: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    roles: tuple[RoleFact, ...] = ()
    asks: tuple[str, ...] = ()
    polar: tuple[str, ...] = ()
    tense: tuple[str, ...] = ()
    order: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "ng": self.negations,
            "nh": list(self.negated),
            "q": [[q.value, q.unit] for q in self.quantities],
            "mx": list(self.math),
            "e": list(self.entities),
            "r": [[r.item, r.role, r.head, r.kind] for r in self.roles],
            "a": list(self.asks),
            "p": list(self.polar),
            "t": list(self.tense),
            "o": list(self.order),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MeaningSignature:
        return cls(
            negations=int(d["ng"]),
            negated=_strs(d["nh"]),
            quantities=tuple(Quantity(str(v), str(u)) for v, u in d["q"]),
            math=_strs(d["mx"]),
            entities=_strs(d["e"]),
            roles=tuple(RoleFact(str(i), str(r), str(h), str(k)) for i, r, h, k in d["r"]),
            asks=_strs(d["a"]),
            polar=_strs(d["p"]),
            tense=_strs(d["t"]),
            order=_strs(d["o"]),
        )


@dataclass(frozen=True, slots=True)
class Analysis:
    """The analysis of one prompt; see the module docstring."""

    skeleton: tuple[str, ...]
    signature: MeaningSignature
    function: tuple[str, ...] = ()
    words: frozenset[str] = field(default_factory=frozenset)
    # False for a prompt the pipeline cannot read; `opaque_text` then holds its canonical text.
    analysable: bool = True
    opaque_text: str = ""
    # Which pipeline read the text ("en", "zh"): the guards compare only analyses of one language.
    language: str = "en"

    @classmethod
    def opaque(cls, canonical: str) -> Analysis:
        """The analysis of a prompt the configured pipeline cannot read."""
        return cls((), MeaningSignature(), analysable=False, opaque_text=canonical)

    def key_material(self) -> str:
        """Deterministic text for the lemma key. Two prompts with equal key material differ at
        most in word order where order carries no meaning, inflection, case, punctuation and
        meaning-free words, so each may be answered with the other's answer."""
        if not self.analysable:
            return "raw:" + self.opaque_text
        body = {"sk": list(self.skeleton), "fn": list(self.function), **self.signature.to_json()}
        if self.language != "en":
            body["lang"] = self.language
        return f"lemma{WIRE_VERSION}:" + json.dumps(body, ensure_ascii=False, separators=(",", ":"))

    def to_wire(self) -> str:
        """Compact JSON, stored next to a cached entry."""
        body: dict[str, Any] = {"v": WIRE_VERSION, "ok": self.analysable}
        if self.analysable:
            body.update(sk=list(self.skeleton), fn=list(self.function), s=self.signature.to_json())
            body["w"] = sorted(self.words - set(self.skeleton) - set(self.function))
        else:
            body["raw"] = self.opaque_text
        if self.language != "en":
            body["lang"] = self.language
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_wire(cls, s: str) -> Analysis:
        """Inverse of `to_wire`; raises `CorruptEntry` for another version or a broken record."""
        try:
            body = json.loads(s)
            if body["v"] != WIRE_VERSION:
                raise CorruptEntry(f"analysis wire version {body['v']}, expected {WIRE_VERSION}")
            language = str(body.get("lang", "en"))
            if not body["ok"]:
                return replace(cls.opaque(str(body["raw"])), language=language)
            skeleton, function = _strs(body["sk"]), _strs(body["fn"])
            return cls(
                skeleton=skeleton,
                signature=MeaningSignature.from_json(body["s"]),
                function=function,
                words=frozenset((*skeleton, *function, *_strs(body["w"]))),
                language=language,
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptEntry(f"unreadable analysis record: {exc}") from exc


def _strs(values: Any) -> tuple[str, ...]:
    # Interned: the semantic tier holds a parsed analysis per entry, and the same lemmas recur
    # across entries (one copy each instead of about 55 bytes a word an entry).
    return tuple(sys.intern(str(v)) for v in values)
