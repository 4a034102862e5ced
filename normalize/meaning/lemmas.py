"""The lemma skeleton and meaning signature of a prompt, from spaCy's English pipeline.

`LemmaAnalyzer.analyze(text)` parses the last user message and returns an `Analysis` (see
`normalize.meaning.signature`): content lemmas (the skeleton), the remaining lemmas, and the meaning
signature (negation, numbers with units, named entities, roles of the content words, the kind of
answer asked for, antonym-lexicon words, tense). Its `key_material()` feeds the lemma key; the
guards compare two analyses before a semantic hit is served.

The pipeline runs tok2vec, tagger, parser (roles need it), attribute ruler and lemmatizer. The
statistical NER is optional (`semantic.spacy_ner`): names are also found from proper-noun tags
and capitalization, and the guard checks an entity by looking for its words in the other text,
so NER adds little but costs ~40 % more time per text (see docs/semantic-quality.md).

Blocking CPU work: callers on an event loop run it in a worker thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from spacy.language import Language
from spacy.tokens import Doc, Token
from spacy.vocab import Vocab

from core.semantic_config import SemanticConfig
from normalize.keys.text import canonical_text
from normalize.meaning.language import LanguageGate
from normalize.meaning.lexicon import (
    ANTONYM_WORDS,
    HOW_QUANTITY,
    MANNER_NEUTRAL_AUX,
    NEGATION_SCOPE_JOINER,
    NEGATION_TRANSPARENT_VERBS,
    NEGATORS,
    PARTICLE_ANTONYMS,
    WH_ANSWER_KIND,
)
from normalize.meaning.quantities import extract_quantities
from normalize.meaning.roles import extract_roles, token_key, unit_sequence
from normalize.meaning.signature import Analysis, MeaningSignature, Quantity, RoleFact

__all__ = ["Analysis", "LemmaAnalyzer", "MeaningSignature", "Quantity", "RoleFact"]

_CONTENT_POS = frozenset({"NOUN", "PROPN", "VERB", "ADJ", "ADV", "NUM", "X", "SYM", "INTJ"})
# Words that never change what is asked; left out of the lemma key.
_FREE_WORDS = frozenset({"a", "an", "the", "please", "kindly"})
# NER labels for numbers: those are compared as quantities, not as entities.
_NUMERIC_ENTITY_LABELS = frozenset({"CARDINAL", "QUANTITY", "MONEY", "PERCENT", "ORDINAL"})
_CLAUSE_MODIFIERS = frozenset({"relcl", "advcl", "acl"})
# A text whose function words mostly start upper-case ("What Is The Best Way…") has unreliable
# proper-noun tags; only acronyms and NER then mark names.
_TITLE_CASE_SHARE = 0.6
_TITLE_CASE_MIN_WORDS = 2
_SPACY_BATCH = 64
# Clausal complements that a negation reaches ("can't *seem* to *use*"), and how deep.
_COMPLEMENT_DEPS = frozenset({"xcomp", "ccomp"})
_NEGATION_SCOPE_DEPTH = 2


class LemmaAnalyzer:
    """Parses prompts into `Analysis` values (blocking; call from a worker thread)."""

    def __init__(self, config: SemanticConfig) -> None:
        import spacy

        self._use_ner = config.spacy_ner
        exclude = [] if config.spacy_ner else ["ner"]
        self._nlp: Language = spacy.load(config.spacy_model, exclude=exclude)
        self._gate = LanguageGate(config.languages)
        self._max_chars = config.analysis_max_chars

    @property
    def vocab(self) -> Vocab:
        return self._nlp.vocab

    def analysable(self, text: str) -> bool:
        """Whether `text` gets a real analysis (English by the language gate, not too long)."""
        return len(text) <= self._max_chars and self._gate.language_of(text) == "en"

    def analyze(self, text: str) -> Analysis:
        if not self.analysable(text):
            return Analysis.opaque(canonical_text(text))
        return self.analyze_doc(self._nlp(text))

    def analyze_many(self, texts: Sequence[str]) -> list[Analysis]:
        """Like `analyze` for each text, batched through `nlp.pipe`."""
        readable = [i for i, t in enumerate(texts) if self.analysable(t)]
        out = [Analysis.opaque(canonical_text(t)) for t in texts]
        docs = self._nlp.pipe((texts[i] for i in readable), batch_size=_SPACY_BATCH)
        for i, doc in zip(readable, docs, strict=True):
            out[i] = self.analyze_doc(doc)
        return out

    def parse_many(self, texts: Iterable[str]) -> Iterable[Doc]:
        """Parsed docs (for benchmarks that cache parses and re-run `analyze_doc`)."""
        return self._nlp.pipe(texts, batch_size=_SPACY_BATCH)

    def analyze_doc(self, doc: Doc) -> Analysis:
        """The analysis of an already parsed prompt."""
        tokens = [t for t in doc if not (t.is_punct or t.is_space)]
        asks = _asks(doc)
        skeleton = sorted(token_key(t) for t in tokens if _is_content(t))
        function = sorted(
            token_key(t) for t in tokens if not _is_content(t) and not _is_free(t, asks)
        )
        words = {token_key(t) for t in tokens} | {t.lower_.replace(".", "") for t in tokens}
        quantities, math = extract_quantities(doc)
        negators = [t for t in tokens if _is_negator(t)]
        signature = MeaningSignature(
            negations=len(negators),
            negated=tuple(sorted(_negation_scope(t) for t in negators)),
            quantities=quantities,
            math=math,
            entities=self._entities(doc),
            roles=extract_roles(doc),
            asks=tuple(sorted(asks)),
            polar=tuple(sorted(token_key(t) for t in tokens if _is_polar(t))),
            tense=_tense(tokens),
            order=unit_sequence(doc, lambda t: _is_free(t, asks)),
        )
        return Analysis(
            skeleton=tuple(skeleton),
            signature=signature,
            function=tuple(function),
            words=frozenset(words),
        )

    def _entities(self, doc: Doc) -> tuple[str, ...]:
        names: set[str] = set()
        if self._use_ner:
            for ent in doc.ents:
                if ent.label_ not in _NUMERIC_ENTITY_LABELS:
                    names.add(_name_key(list(ent)))
        title_case = _is_title_case(doc)
        run: list[Token] = []
        for tok in (*doc, None):
            if tok is not None and _looks_like_name(tok, title_case):
                run.append(tok)
                continue
            if run:
                names.add(_name_key(run))
                run = []
        names.discard("")
        return tuple(sorted(names))


def _is_content(tok: Token) -> bool:
    return tok.pos_ in _CONTENT_POS and not tok.is_stop


def _is_free(tok: Token, asks: set[str]) -> bool:
    key = token_key(tok)
    if key in _FREE_WORDS:
        return True
    # "How do I…" / "How can I…" ask the same; "Can I…?" and "Do I…?" do not.
    return tok.pos_ == "AUX" and key in MANNER_NEUTRAL_AUX and "manner" in asks


def _is_negator(tok: Token) -> bool:
    return tok.dep_ == "neg" or tok.lower_ in NEGATORS or tok.lemma_.lower() in NEGATORS


def _negated_word(negator: Token) -> Token | None:
    """The word a negator negates: its head, or the main verb when the head is an auxiliary
    ("Why *isn't* my card *working*?" negates "work", as "Why is my card not working?" does)."""
    if negator.pos_ == "ADJ":  # "unable to log in" negates "log"
        verbs = [c for c in negator.children if c.pos_ in ("VERB", "AUX")]
        if verbs:
            return verbs[0]
    head = negator.head
    if head.i == negator.i:
        return None
    if head.pos_ == "AUX" or head.lemma_ in ("be", "do", "have"):
        verbs = [c for c in head.children if c.pos_ == "VERB" and c.dep_ != "neg"]
        if verbs:
            return verbs[0]
    return head


def _negation_scope(negator: Token) -> str:
    """The negated word, joined by `NEGATION_SCOPE_JOINER` to the verbs the negation reaches
    through the clausal complements of a transparent verb: "My card doesn't seem to work"
    negates "work" as "My card isn't working" does, and "I can't seem to use my card" negates
    "use" (`NEGATION_TRANSPARENT_VERBS`; only where the parser attaches the complement as one:
    it often reads "I can't get my card to *work*" as an adverbial clause). A bare negator gives
    ""."""
    head = _negated_word(negator)
    if head is None:
        return ""
    scope, frontier = [head], [head]
    for _ in range(_NEGATION_SCOPE_DEPTH):
        frontier = [
            c
            for t in frontier
            if token_key(t) in NEGATION_TRANSPARENT_VERBS
            for c in t.children
            if c.dep_ in _COMPLEMENT_DEPS
        ]
        scope.extend(frontier)
    return NEGATION_SCOPE_JOINER.join(dict.fromkeys(token_key(t) for t in scope))


def _is_polar(tok: Token) -> bool:
    key = token_key(tok)
    if key not in ANTONYM_WORDS:
        return False
    if key in PARTICLE_ANTONYMS:
        # "turn *off* the light" is a particle; "sit *on* the table" heads a noun phrase. The
        # parser often reads "turn on Bluetooth" as a preposition, so right after a verb counts.
        after_verb = tok.i > 0 and tok.doc[tok.i - 1].pos_ in ("VERB", "AUX")
        heads_phrase = any(c.dep_ in ("pobj", "pcomp") for c in tok.children)
        return after_verb or not heads_phrase
    return True


def _asks(doc: Doc) -> set[str]:
    """Kinds of answer asked for by the interrogatives of the main clauses."""
    kinds: set[str] = set()
    for tok in doc:
        if tok.tag_ not in ("WDT", "WP", "WP$", "WRB"):
            continue
        if tok.head.dep_ in _CLAUSE_MODIFIERS and tok.i != tok.sent.start:
            continue  # "the place where…", "what to do when…": not what is asked
        word = tok.lower_
        nxt = doc[tok.i + 1].lower_ if tok.i + 1 < len(doc) else ""
        if word == "how" and nxt in HOW_QUANTITY:
            kinds.add("quantity")
        elif word == "how" and nxt == "come":  # "How come…?" asks why
            kinds.add("reason")
        else:
            kinds.add(WH_ANSWER_KIND.get(word, "thing"))
    return kinds


def _tense(tokens: list[Token]) -> tuple[str, ...]:
    tenses: set[str] = set()
    for tok in tokens:
        if tok.tag_ == "VBD":
            tenses.add("past")
        elif tok.tag_ == "MD" and tok.lemma_.lower() in ("will", "shall"):
            tenses.add("future")
    return tuple(sorted(tenses))


def _is_title_case(doc: Doc) -> bool:
    """Most function words capitalized ("What Is The Best Way To…"): tags are unreliable."""
    stops = [t for t in doc if t.is_stop and t.is_alpha and not t.is_sent_start]
    if len(stops) < _TITLE_CASE_MIN_WORDS:
        return False
    return sum(t.text[0].isupper() for t in stops) >= _TITLE_CASE_SHARE * len(stops)


def _looks_like_name(tok: Token, title_case: bool) -> bool:
    text = tok.text
    if not any(ch.isalpha() for ch in text) or tok.is_punct:
        return False
    acronym = len(text) > 1 and text.isupper()
    inner_capital = any(ch.isupper() for ch in text[1:]) and not text.isupper()
    if acronym or inner_capital:  # "USD", "NASA", "iPhone", "McDonald"
        return text not in ("I", "OK")
    return not title_case and tok.pos_ == "PROPN"


def _name_key(tokens: list[Token]) -> str:
    parts = [token_key(t) for t in tokens if not (t.is_stop or t.is_punct or t.like_num)]
    return " ".join(p for p in parts if p)
