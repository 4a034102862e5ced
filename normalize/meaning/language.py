"""Which prompts the configured meaning pipelines can read, and in which language.

Each language has a pipeline of its own (English: spaCy, MiniLM and the English guards; Chinese:
jieba, cn2an, multilingual-e5-small and the Chinese guards, normalize/meaning/zh/), and a prompt is
read by at most one of them. Nothing else may match loosely: MiniLM is English-centric (measured
here, 把美元换成欧元 / 把欧元换成美元, "convert USD to EUR" / "EUR to USD", score 0.993) and the
English rules misread other languages ("ne … pas", "no es"). The test is cheap (no model):

1. Script. Letters are counted by script: Latin, Han (Chinese characters), and the rest. Any
   kana (Japanese: it shares Han characters with Chinese) or more than a fifth of letters in
   another script (Cyrillic, Arabic, Hangul, ...) → no pipeline.
2. Mixed Latin and Han text follows the script of its content words: a Latin word against a
   Chinese word of about 1.5 characters (the average length of a segmented word), so
   "如何安装Python 3.11?" is Chinese and "What does 你好 mean?" is English.
3. English, a vote: French, Spanish, German, Italian, Portuguese or Dutch function words, words
   with diacritics and "¿" / "¡" against English function words. Two or more foreign votes and
   fewer English ones make it unreadable. A foreign sentence made only of plain content words
   can still pass; the English pipeline then reads it as well as it can.

Text without letters (numbers, symbols, code punctuation) reads the same in every language: it
goes to the first configured language.
"""

from __future__ import annotations

import re
import unicodedata

# Languages with a meaning pipeline, and the Unicode script (as `unicodedata.name` starts) each
# is written in.
_SCRIPTS: dict[str, str] = {"en": "LATIN", "zh": "CJK"}
# Share of letters that must be in the scripts of the configured languages.
_MIN_SCRIPT_SHARE = 0.8
# Characters of a segmented Chinese word, on average: one Latin word weighs this many.
_HAN_CHARS_PER_WORD = 1.5
_KANA = ("HIRAGANA", "KATAKANA")

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
    """Decides which configured language's pipeline reads a prompt, if any."""

    def __init__(self, languages: tuple[str, ...]) -> None:
        unknown = [lang for lang in languages if lang not in _SCRIPTS]
        assert not unknown, f"no meaning pipeline for {unknown}; known: {sorted(_SCRIPTS)}"
        self._languages = languages

    def supports(self, text: str) -> bool:
        """True when a configured pipeline can read `text`."""
        return self.language_of(text) is not None

    def language_of(self, text: str) -> str | None:
        """The configured language whose pipeline reads `text` (see the module docstring), or
        None when none can."""
        if not self._languages:
            return None
        text = unicodedata.normalize("NFKC", text)
        if text.isascii():  # fast path: every letter is Latin
            if not any(ch.isalpha() for ch in text):
                return self._languages[0]
            return self._latin_language(text)
        latin = han = other = 0
        for ch in text:
            if not ch.isalpha():
                continue
            name = unicodedata.name(ch, "")
            if name.startswith("LATIN"):
                latin += 1
            elif name.startswith("CJK"):
                han += 1
            elif name.startswith(_KANA):
                return None  # Japanese
            else:
                other += 1
        letters = latin + han + other
        if letters == 0:
            return self._languages[0]
        if other > (1 - _MIN_SCRIPT_SHARE) * letters:
            return None
        if han and han / _HAN_CHARS_PER_WORD >= len(_WORD.findall(_latin_only(text))):
            return "zh" if "zh" in self._languages else None
        return self._latin_language(text)

    def _latin_language(self, text: str) -> str | None:
        if "en" not in self._languages or self._reads_as_foreign(text):
            return None
        return "en"

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


def _latin_only(text: str) -> str:
    """`text` with every non-Latin letter blanked, for counting its Latin words."""
    return "".join(
        ch if not ch.isalpha() or unicodedata.name(ch, "").startswith("LATIN") else " "
        for ch in text
    )
