"""How far two texts rearranged the words they share: the phrases that moved.

A paraphrase moves a constituent as a whole: "Flights to London from Paris" moves "from Paris"
with its preposition; "In 2010, what was the population of Tokyo?" moves "in 2010" to the
front. A swap keeps the frame and exchanges what fills two of its slots, and that takes two
moves: "return to England through Scotland" / "return to Scotland through England",
"Dixville to the east and Columbia to the south" / "Columbia … Dixville …". spaCy's small parser
misses many such swaps in long sentences (the role tests then see nothing), so this test reads
word order only:

1. project both word sequences (`MeaningSignature.order`) onto content words, names (word by
   word) and prepositions, and keep the words both texts have, so that words reworded, added or
   dropped, pronouns and auxiliaries do not count. A repeated word is matched by its
   neighbours, then by occurrence ("savings account … checking account");
2. cut the projection into blocks, maximal runs consecutive in both texts (a moved phrase keeps
   its inner order, so it is one block);
3. the blocks outside a longest increasing subsequence of the cached text's block order are the
   phrases that moved:

       query    x  P  y  Q  z         blocks 0 1 2 3 4
       cached   x  Q  y  P  z         order  0 3 2 1 4   → kept 0 2 4; moved P and Q

A moved phrase counts (a preposition moved without its object too) unless its every content
word is the subject or object of the same verb in both texts: that move is explained by the
voice ("Shakespeare wrote Hamlet" / "Hamlet was written by Shakespeare"). A moved phrase is
*swapped* when each of its two places is taken in the other text by words that text alone has,
as in "a heated pool and a *small* gym" / "a *small* pool and a modern gym" (a swap whose
other half was reworded).
`MeaningGuard` refuses a hit with a swapped phrase or more than `semantic.max_moved_phrases`
moved phrases.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import dataclass

from normalize.meaning.lexicon import PREPOSITIONS
from normalize.meaning.roles import head_word
from normalize.meaning.signature import Analysis

# The roles the voice exchanges between the subject and the object position.
_VOICE_ROLES = frozenset({"subj", "obj"})
# At most this many words only one text has may fill a moved phrase's old place for the phrase
# to count as swapped (more is a reworded clause, not a slot).
_MAX_FILLER_WORDS = 3


@dataclass(frozen=True, slots=True)
class Move:
    """A phrase of shared words that moved; `swapped` when both of its places are filled by
    words only the other text has."""

    phrase: str
    swapped: bool


def rearranged(query: Analysis, cached: Analysis, max_moved: int) -> str | None:
    """The guard's reason when a phrase was swapped or more than `max_moved` phrases moved."""
    moves = moved_phrases(query, cached)
    swapped = [m.phrase for m in moves if m.swapped]
    if swapped:
        return f"role: {swapped[0]!r} took a place the other text fills otherwise"
    if len(moves) > max_moved:
        return f"role: {len(moves)} phrases moved ({', '.join(repr(m.phrase) for m in moves)})"
    return None


def moved_phrases(query: Analysis, cached: Analysis) -> list[Move]:
    """The phrases that moved between the texts, beyond what the voice explains, in the
    query's order (see the module docstring)."""
    content = _content_words(query, cached)
    words_q, words_c = _tag_repeats(
        _projection(query.signature.order, content), _projection(cached.signature.order, content)
    )
    shared = set(words_q) & set(words_c)
    seq_q = [w for w in words_q if w in shared]
    seq_c = [w for w in words_c if w in shared]
    if len(seq_q) < 2:
        return []
    blocks, order_c = _blocks(seq_q, seq_c)
    if len(blocks) < 2:
        return []
    kept = _increasing_subsequence(order_c)
    voice_q, voice_c = _voice_roles(query), _voice_roles(cached)
    moves = []
    for block in (blocks[b] for b in range(len(blocks)) if b not in kept):
        words = [_plain(w) for w in block if _plain(w) in content]
        # A preposition moved alone left its object: part of a swap ("to England through
        # Scotland" / "to Scotland through England" keeps "to" and "England" and moves "through"
        # and "Scotland").
        if words and all(voice_q.get(w) and voice_q.get(w) == voice_c.get(w) for w in words):
            continue
        swapped = _filled(_frame(block, words_c, shared), words_q, shared) and _filled(
            _frame(block, words_q, shared), words_c, shared
        )
        moves.append(Move(" ".join(_plain(w) for w in block), swapped))
    return moves


def _content_words(query: Analysis, cached: Analysis) -> set[str]:
    """Content lemmas, the words of multi-word names, and numbers ("#1842")."""
    words = {_singular(w) for w in (*query.skeleton, *cached.skeleton)}
    for unit in (*query.signature.order, *cached.signature.order):
        if " " in unit or unit.startswith("#"):
            words.update(_singular(w) for w in unit.split())
    return words


def _projection(order: tuple[str, ...], content: set[str]) -> list[str]:
    """Content words and prepositions, a name word by word ("Olt River … Seghes River" /
    "River Olt … River Seghes"), a final "s" dropped (names are not lemmatized: "Russians" /
    "Russian")."""
    out: list[str] = []
    for unit in order:
        if " " in unit or _singular(unit) in content or unit in PREPOSITIONS:
            out.extend(_singular(word) for word in unit.split())
    return out


def _singular(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _tag_repeats(words_q: list[str], words_c: list[str]) -> tuple[list[str], list[str]]:
    """Words used more than once tagged so that equal tags mean the same place: occurrences
    are paired by their neighbours first ("savings account … checking account" / "checking
    account … savings account"), then in order. An occurrence left without a partner gets a
    tag of its own."""
    count_q, count_c = Counter(words_q), Counter(words_c)
    tags_q, tags_c = list(words_q), list(words_c)
    for word in count_q.keys() & count_c.keys():
        if count_q[word] == count_c[word] == 1:
            continue
        at_q = [i for i, w in enumerate(words_q) if w == word]
        at_c = [i for i, w in enumerate(words_c) if w == word]
        pairs = sorted(
            (
                (-_context_match(words_q, i, words_c, j), n, m)
                for n, i in enumerate(at_q)
                for m, j in enumerate(at_c)
            ),
        )
        used_q: set[int] = set()
        used_c: set[int] = set()
        for _, n, m in pairs:
            if n not in used_q and m not in used_c:
                used_q.add(n)
                used_c.add(m)
                tags_q[at_q[n]] = tags_c[at_c[m]] = f"{word}~{n}"
        for n, i in enumerate(at_q):
            if n not in used_q:
                tags_q[i] = f"{word}~q{n}"
        for m, j in enumerate(at_c):
            if m not in used_c:
                tags_c[j] = f"{word}~c{m}"
    return tags_q, tags_c


def _context_match(words_q: list[str], i: int, words_c: list[str], j: int) -> int:
    def at(words: list[str], k: int) -> str:
        return words[k] if 0 <= k < len(words) else "^$"

    return int(at(words_q, i - 1) == at(words_c, j - 1)) + int(
        at(words_q, i + 1) == at(words_c, j + 1)
    )


def _plain(word: str) -> str:
    return word.split("~", 1)[0]


def _blocks(seq_q: list[str], seq_c: list[str]) -> tuple[list[tuple[str, ...]], list[int]]:
    """Blocks in the query's order, and the block numbers in the cached text's order."""
    pos_c = {w: i for i, w in enumerate(seq_c)}
    blocks: list[list[str]] = []
    for word in seq_q:
        if blocks and pos_c[word] == pos_c[blocks[-1][-1]] + 1:
            blocks[-1].append(word)
        else:
            blocks.append([word])
    first = {block[0]: n for n, block in enumerate(blocks)}
    order_c = [first[w] for w in seq_c if w in first]
    return [tuple(b) for b in blocks], order_c


def _increasing_subsequence(values: list[int]) -> set[int]:
    """The values of one longest increasing subsequence (patience sorting, O(n log n))."""
    tails: list[int] = []  # the smallest last value of an increasing run of each length
    tail_at: list[int] = []  # its index in `values`
    previous = [-1] * len(values)
    for i, v in enumerate(values):
        k = bisect.bisect_left(tails, v)
        if k == len(tails):
            tails.append(v)
            tail_at.append(i)
        else:
            tails[k] = v
            tail_at[k] = i
        previous[i] = tail_at[k - 1] if k else -1
    kept = set()
    i = tail_at[-1] if tail_at else -1
    while i >= 0:
        kept.add(values[i])
        i = previous[i]
    return kept


def _frame(block: tuple[str, ...], seq: list[str], shared: set[str]) -> tuple[str, str]:
    """The shared words around `block` in `seq` ("^" and "$" at the ends)."""
    i, j = seq.index(block[0]), seq.index(block[-1])
    left = next((w for w in reversed(seq[:i]) if w in shared), "^")
    right = next((w for w in seq[j + 1 :] if w in shared), "$")
    return left, right


def _filled(frame: tuple[str, str], seq: list[str], shared: set[str]) -> bool:
    """Whether `seq` holds, between the two words of `frame`, only words of its own."""
    left, right = frame
    i = seq.index(left) if left != "^" else -1
    j = seq.index(right) if right != "$" else len(seq)
    gap = seq[i + 1 : j]
    return 0 < len(gap) <= _MAX_FILLER_WORDS and not any(w in shared for w in gap)


def _voice_roles(analysis: Analysis) -> dict[str, set[tuple[str, str]]]:
    roles: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for f in analysis.signature.roles:
        if f.role in _VOICE_ROLES:
            for word in f.item.split():  # names are matched word by word
                roles[_singular(word)].add((f.role, head_word(f.head)))
    return roles
