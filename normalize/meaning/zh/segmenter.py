"""jieba, loaded quietly and once: Chinese text → tagged tokens with their offsets.

jieba keeps a module-level default tokenizer that loads its dictionary lazily on first use and
logs to stderr while it builds or reads its cache. Here each `Segmenter` owns its own
`jieba.Tokenizer`, initialized in the constructor (about a second; the analyzer is built once
per process), with jieba's logger lowered to warnings first, so nothing is printed and no
request pays for the dictionary. The dictionary is jieba's bundled one, so segmentation is the
same in every process.

Tags are jieba's (ICTCLAS style): "nr" person, "ns" place, "nt" organisation, "nz" other proper
noun, "eng" Latin letters, "m" numeral, "q" classifier, "v" verb, "a" adjective, "r" pronoun,
"p" preposition, "c" conjunction, "u*" particle, "x" punctuation or unknown.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

# Latin-script runs jieba splits from the digits and spaces after them: "iPhone 15 Pro",
# "RTX4090", "GPT-4". Merged back into one token tagged "eng" so a model number stays whole.
_LATIN_RUN = re.compile(r"[A-Za-z][A-Za-z0-9\-+.]*(?:\s+(?:[A-Za-z]+\d*|\d+[A-Za-z]*))*")


@dataclass(frozen=True, slots=True)
class Token:
    """One jieba token: its text, its tag, its character offsets in the segmented text, and
    whether jieba's dictionary holds it (False for words its HMM guessed, whose tags are
    guesses too: "大侠/nr", "求教/nr")."""

    word: str
    flag: str
    start: int
    end: int
    known: bool = True


class Segmenter:
    """A private jieba tokenizer and part-of-speech tagger (blocking; build once)."""

    def __init__(self) -> None:
        import jieba
        import jieba.posseg

        # jieba's own logger writes "Building prefix dict ..." to stderr at INFO.
        jieba.setLogLevel(logging.WARNING)
        self._tokenizer = jieba.Tokenizer()
        self._tokenizer.initialize()
        self._tagger = jieba.posseg.POSTokenizer(self._tokenizer)

    def tokens(self, text: str) -> list[Token]:
        """Tagged tokens of `text` in order, whitespace dropped, Latin names kept whole."""
        out: list[Token] = []
        offset = 0
        freq = self._tokenizer.FREQ
        for pair in self._tagger.cut(text):
            word, flag = str(pair.word), str(pair.flag)
            out.append(Token(word, flag, offset, offset + len(word), freq.get(word, 0) > 0))
            offset += len(word)
        return [t for t in _merge_latin(text, out) if t.word.strip()]


def _merge_latin(text: str, tokens: list[Token]) -> list[Token]:
    """Tokens with each Latin-script run ("iPhone 15", "RTX 4090") as one "eng" token."""
    runs = [m.span() for m in _LATIN_RUN.finditer(text)]
    if not runs:
        return tokens
    out: list[Token] = []
    i = 0
    for start, end in runs:
        while i < len(tokens) and tokens[i].end <= start:
            out.append(tokens[i])
            i += 1
        # Only where the run starts and ends on token boundaries (it always does for ASCII).
        covered = [t for t in tokens[i:] if t.start >= start and t.end <= end]
        if covered and covered[0].start == start and covered[-1].end == end:
            out.append(Token(text[start:end], "eng", start, end))
            i += len(covered)
    out.extend(tokens[i:])
    return out
