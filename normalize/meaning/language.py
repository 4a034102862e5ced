"""Which prompts the configured meaning pipeline can read.

The guards read English through spaCy's English model, and MiniLM is English-centric: measured
here, 把美元换成欧元 / 把欧元换成美元 ("convert USD to EUR" / "EUR to USD") score 0.993 and
这个药安全吗？/ 这个药不安全吗？("is this drug (not) safe?") 0.862. A prompt the pipeline cannot
analyse must use the exact tiers only. The test is cheap (no model):

1. Script: the share of letters in the scripts of the configured languages (Latin for English).
   Mostly another script (Han, Cyrillic, Arabic, ...) → unsupported.
2. For Latin-script text, a vote: French, Spanish, German, Italian, Portuguese or Dutch
   function words, words with diacritics and "¿" / "¡" against English function words. Two or
   more foreign votes and fewer English ones make it unsupported, because English negation and
   role rules misread it ("ne … pas", "no es"). A foreign sentence made only of plain content
   words can still pass; the English pipeline then reads it as well as it can.

Text without letters (numbers, symbols, code punctuation) is supported: nothing in it is read
differently in another language.
"""

from __future__ import annotations

import re
import unicodedata

# Unicode script names (as they start `unicodedata.name`) each language is written in.
_SCRIPTS: dict[str, tuple[str, ...]] = {"en": ("LATIN",)}
# Share of letters that must be in a supported script.
_MIN_SCRIPT_SHARE = 0.8

_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?", re.UNICODE)


def _words(spaced: str) -> frozenset[str]:
    return frozenset(spaced.split())


_ENGLISH_FUNCTION_WORDS = _words(
    "the a an is are was were be been of to in on at for with from by and or but not no do does "
    "did can could should would will how what why when where who which this that these those it "
    "i you he she we they my your his her our their me him us them there if than as"
)
# Function words of other Latin-script languages that are not also English words.
_FOREIGN_FUNCTION_WORDS = (
    _words(
        # French
        "le la les des du une est sont pas ne je vous nous ils elle avec dans pour sur ce cette "
        "qui que quoi comment pourquoi où quand est-ce c'est n'est qu'est-ce très mais ou donc "
        # Spanish
        "el los las es son una por para con sin qué cómo cuándo dónde por qué está están muy "
        "pero del al lo como yo usted ella ellos también puedo puede este esta esto eso ese hay "
        "mi tu su sus mis tus se le cuál cuánto cuántos "
        # German
        "der die das ist sind nicht ein eine und mit von zu auf für wie was warum wann wo wer "
        "ich du sie wir ihr kann können bin kein keine auch sehr dieser diese dieses es "
        # Italian and Portuguese
        "il gli di che è sono non una per con come perché quando dove chi anche molto "
        "não são uma com para por que como porque quando onde quem também muito você "
        # Dutch
        "het een en van niet ik je jij wij zijn met voor op hoe wat waarom wanneer waar wie"
    )
    # Words that are also common English words stay out of the foreign vote.
    - _ENGLISH_FUNCTION_WORDS
    - _words("die was son come con sin per")
)
_MIN_FOREIGN_WORDS = 2
# Letters with diacritics that English words rarely carry ("café" is one vote, not a verdict).
_ACCENTED = re.compile("[áéíóúâêîôûàèìòùäëïöüñçãõßœ]")


class LanguageGate:
    """Decides whether a prompt may use the lemma key and the semantic tier."""

    def __init__(self, languages: tuple[str, ...]) -> None:
        unknown = [lang for lang in languages if lang not in _SCRIPTS]
        assert not unknown, f"no meaning pipeline for {unknown}; known: {sorted(_SCRIPTS)}"
        self._languages = languages
        self._scripts = tuple({s for lang in languages for s in _SCRIPTS[lang]})

    def supports(self, text: str) -> bool:
        """True when the configured pipeline can read `text` (see the module docstring)."""
        if not self._languages:
            return False
        text = unicodedata.normalize("NFKC", text)
        if text.isascii():  # fast path: every letter is Latin
            return "en" not in self._languages or not self._reads_as_foreign(text)
        letters = supported = 0
        for ch in text:
            if ch.isalpha():
                letters += 1
                if unicodedata.name(ch, "").startswith(self._scripts):
                    supported += 1
        if letters == 0:
            return True
        if supported < _MIN_SCRIPT_SHARE * letters:
            return False
        return "en" not in self._languages or not self._reads_as_foreign(text)

    @staticmethod
    def _reads_as_foreign(text: str) -> bool:
        words = _WORD.findall(text.lower())
        foreign = sum(
            w in _FOREIGN_FUNCTION_WORDS or _ACCENTED.search(w) is not None for w in words
        )
        if "¿" in text or "¡" in text:
            foreign += 2
        if foreign < _MIN_FOREIGN_WORDS:
            return False
        english = sum(w in _ENGLISH_FUNCTION_WORDS for w in words)
        return foreign > english
