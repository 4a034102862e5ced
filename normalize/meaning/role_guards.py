"""The role tests of `normalize.meaning.guards.MeaningGuard`: who does what to whom, over the words
both texts have (aligned words). What each test catches and lets through is listed in the docstring
of `normalize.meaning.guards`; `parsed_roles` runs the tests that read the parse, `exchanged` the
one that reads word order only.
"""

from __future__ import annotations

from collections import defaultdict

from normalize.meaning.roles import head_word, is_argument_role
from normalize.meaning.signature import Analysis, RoleFact


def _present(item: str, words: frozenset[str]) -> bool:
    return item in words or all(part in words for part in item.split())


def parsed_roles(query: Analysis, cached: Analysis) -> str | None:
    """The role checks that read the parse; the word-order ones (`exchanged`, `rearranged`)
    back them up as parts of their own in `MeaningGuard.stepwise`."""
    # Aligned words: content words of one text that the other text also has (in any role).
    fq = [f for f in query.signature.roles if _present(f.item, cached.words)]
    fc = [f for f in cached.signature.roles if _present(f.item, query.words)]
    return (
        _slot_changed_hands(fq, fc)
        or _role_changed(fq, fc)
        or _inverted(fq, fc)
        or _moved(fq, fc, query.words, cached.words)
        or _roles_exchanged(fq, fc)
        or _topic_and_agent(fq, fc)
        or _direction_reversed(fq, fc)
    )


def _holders(facts: list[RoleFact]) -> dict[tuple[str, str], set[str]]:
    holders: dict[tuple[str, str], set[str]] = defaultdict(set)
    for f in facts:
        holders[(_slot_role(f), f.head)].add(f.item)
    return holders


def _slot_role(fact: RoleFact) -> str:
    # A copula's subject and complement are one slot and one role: "Which is the best
    # institute?" and "Which institute is best?" fill it with the same words, parsed the other
    # way round; "What is X?" asks the same as "X is what?".
    if fact.role in ("subj", "attr") and head_word(fact.head) == "be":
        return "cop"
    return fact.role


def _slot_changed_hands(fq: list[RoleFact], fc: list[RoleFact]) -> str | None:
    hq, hc = _holders(fq), _holders(fc)
    for slot in sorted(hq.keys() & hc.keys()):
        left, came = hq[slot] - hc[slot], hc[slot] - hq[slot]
        if (
            left
            and came
            and not (slot[0] == "mod" and _reworded_modifier(fq, fc, slot, left, came))
        ):
            role, head = slot
            return f"role: {role} of {head!r} is {sorted(left)} vs {sorted(came)}"
    return None


def _reworded_modifier(
    fq: list[RoleFact], fc: list[RoleFact], slot: tuple[str, str], left: set[str], came: set[str]
) -> bool:
    """The modifiers new to a noun in one text were its prepositional objects in the other:
    "the fastest animal on land" / "the fastest land animal", "tickets to the Louvre" /
    "Louvre tickets", "an app for mindfulness" / "a mindfulness app". A modifier that came from
    another noun ("several churches … new centres" / "new churches … several centres") still
    changes hands."""
    head = slot[1]
    return _objects_of(fq, head) >= came or _objects_of(fc, head) >= left


def _objects_of(facts: list[RoleFact], head: str) -> set[str]:
    return {f.item for f in facts if f.head == head and f.role.startswith("p:")}


def _argument_roles(facts: list[RoleFact]) -> dict[tuple[str, str], set[str]]:
    roles: dict[tuple[str, str], set[str]] = defaultdict(set)
    for f in facts:
        if is_argument_role(f.role):
            roles[(f.item, f.head)].add(_slot_role(f))
    return roles


# Prepositions that paraphrases trade freely for one another on the same head ("books on / about
# X", "think of / about X", "movies in / of 2017"). A move between two of them is a rewording, not
# a new role. The rest still count: direction (to, from), comparison (than), and the creator, the
# company and the audience ("books by / with / for X" ask other questions than "books about X").
_LOOSE_PREPOSITION_ROLES = frozenset({"p:of", "p:place", "p:topic"})


def _role_changed(fq: list[RoleFact], fc: list[RoleFact]) -> str | None:
    # Pronouns are left out: "me" in "Tell me about X" / "Tell me something about X" is parsed
    # as an object once and a recipient once. A pronoun swap still changes a slot's hands.
    rq = _argument_roles([f for f in fq if f.kind != "p"])
    rc = _argument_roles([f for f in fc if f.kind != "p"])
    for key in sorted(rq.keys() & rc.keys()):
        if rq[key].isdisjoint(rc[key]) and not (rq[key] | rc[key]) <= _LOOSE_PREPOSITION_ROLES:
            item, head = key
            return f"role: {item!r} is {sorted(rq[key])} vs {sorted(rc[key])} of {head!r}"
    return None


def _inverted(fq: list[RoleFact], fc: list[RoleFact]) -> str | None:
    edges_q = {(head_word(f.head), f.item) for f in fq if f.kind in ("n", "p")}
    edges_c = {(head_word(f.head), f.item) for f in fc if f.kind in ("n", "p")}
    for head, item in sorted(edges_q):
        if head != item and (item, head) in edges_c:
            return f"role: {head!r}→{item!r} inverted"
    return None


def _headless_roles(facts: list[RoleFact]) -> dict[str, set[str]]:
    # Heads are left out: a paraphrase often rewords the verb ("migrated" / "emigrated").
    roles: dict[str, set[str]] = defaultdict(set)
    for f in facts:
        if is_argument_role(f.role) and f.kind != "p":
            roles[f.item].add(_slot_role(f))
    return roles


def _roles_exchanged(fq: list[RoleFact], fc: list[RoleFact]) -> str | None:
    """Two aligned words traded their argument roles, whatever the heads are called."""
    rq, rc = _headless_roles(fq), _headless_roles(fc)
    lost = {x: rq[x] - rc[x] for x in rq.keys() & rc.keys()}
    gained = {x: rc[x] - rq[x] for x in rq.keys() & rc.keys()}
    items = sorted(x for x in lost if lost[x] and gained[x])
    for i, x in enumerate(items):
        for y in items[i + 1 :]:
            if lost[x] & gained[y] and lost[y] & gained[x]:
                return f"role: {x!r} and {y!r} exchanged roles"
    return None


# Roles of a name that acts ("directed by X", "X wrote", "films with X"): not what a text about
# X asks for.
_AGENT_ROLES = frozenset({"subj", "p:by", "p:with"})


def _topic_and_agent(fq: list[RoleFact], fc: list[RoleFact]) -> str | None:
    """An aligned word is what one text is about and who acts in the other, whatever the heads
    are called ("Films directed by Spielberg" / "Films about Spielberg")."""
    rq: dict[str, set[str]] = defaultdict(set)
    rc: dict[str, set[str]] = defaultdict(set)
    for facts, roles in ((fq, rq), (fc, rc)):
        for f in facts:
            roles[f.item].add(f.role)
    for item in sorted(rq.keys() & rc.keys()):
        for topic, other in ((rq[item], rc[item]), (rc[item], rq[item])):
            if "p:topic" in topic - other and other & _AGENT_ROLES and not topic & _AGENT_ROLES:
                return f"role: {item!r} is what one text is about and who acts in the other"
    return None


_DIRECTIONS = frozenset({"p:source", "p:goal"})


def _direction_reversed(fq: list[RoleFact], fc: list[RoleFact]) -> str | None:
    """An aligned word is where something goes in one text and where it comes from in the
    other, whatever the verbs ("transfer money *into* my account" / "take money *from* my
    account"). Heads are left out, as in `_roles_exchanged`; a word that is both source and goal
    in one text (two clauses) is left to the slot tests."""
    rq: dict[str, set[str]] = defaultdict(set)
    rc: dict[str, set[str]] = defaultdict(set)
    for facts, roles in ((fq, rq), (fc, rc)):
        for f in facts:
            if f.role in _DIRECTIONS and f.kind != "p":
                roles[f.item].add(f.role)
    for item in sorted(rq.keys() & rc.keys()):
        if len(rq[item]) == len(rc[item]) == 1 and rq[item] != rc[item]:
            return f"role: {item!r} is {sorted(rq[item])[0]} vs {sorted(rc[item])[0]}"
    return None


# The parser attaches a subject to an auxiliary or to the main verb almost at random ("Why
# isn't my card working?" vs "Why is my card not working?"), so those heads never count.
_AUXILIARY_HEADS = frozenset({"be", "do", "have"})
# Roles whose holder, moving to another shared head, changes what is said.
_MOVABLE_ROLES = frozenset({"subj", "obj", "attr", "mod"})


def _moved(
    fq: list[RoleFact], fc: list[RoleFact], words_q: frozenset[str], words_c: frozenset[str]
) -> str | None:
    """An aligned word left every slot it held for a slot of another word both texts have."""
    slots_q: dict[str, set[tuple[str, str]]] = defaultdict(set)
    slots_c: dict[str, set[tuple[str, str]]] = defaultdict(set)
    linked: set[tuple[str, str]] = set()
    for facts, slots in ((fq, slots_q), (fc, slots_c)):
        for f in facts:
            head = head_word(f.head)
            if f.role == "mod":
                linked.add((f.item, head))
                linked.add((head, f.item))
            if f.kind == "p" or head in _AUXILIARY_HEADS:
                continue
            if _present(head, words_q) and _present(head, words_c):
                slots[f.item].add((f.role, f.head))
    for item in sorted(slots_q.keys() & slots_c.keys()):
        sq, sc = slots_q[item], slots_c[item]
        heads_q = {head_word(h) for _, h in sq}
        heads_c = {head_word(h) for _, h in sc}
        if heads_q & heads_c:
            continue
        shared = {r for r, _ in sq} & {r for r, _ in sc} & _MOVABLE_ROLES
        # Within one noun phrase ("best photo app": best → app or → photo) is not a move.
        if shared == {"mod"} and any((hq, hc) in linked for hq in heads_q for hc in heads_c):
            continue
        if shared:
            return f"role: {item!r} moved from {sorted(sq)} to {sorted(sc)}"
    return None


# Words that join symmetric items: "A and B", "A or B", "A vs B".
_CONNECTORS = frozenset({"and", "or", "nor", "vs", "vs.", "versus", "&", "/", "plus"})


def _contexts(order: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    """(previous, next) word of each word that occurs once."""
    counts: dict[str, int] = defaultdict(int)
    for unit in order:
        counts[unit] += 1
    out = {}
    for i, unit in enumerate(order):
        if counts[unit] == 1:
            prev = order[i - 1] if i > 0 else "^"
            nxt = order[i + 1] if i + 1 < len(order) else "$"
            out[unit] = (prev, nxt)
    return out


def exchanged(query: Analysis, cached: Analysis) -> str | None:
    """Two words traded places: each now sits between the neighbours the other had.

    "Flights from Paris to London" / "from London to Paris"; "6th century for Milan … 7th
    century for Aquileia" / the same with 6th and 7th exchanged. Symmetric coordination ("A and
    B" / "B and A") is exempt. Independent of the parse, so it backs up the role tests.
    """
    oq, oc = query.signature.order, cached.signature.order
    cq, cc = _contexts(oq), _contexts(oc)
    content = set(query.skeleton) | {u for u in oq if " " in u}
    units = {u for u in cq.keys() & cc.keys() if u in content}
    by_context: dict[tuple[str, str], list[str]] = defaultdict(list)
    for u in units:
        by_context[cc[u]].append(u)
    for a in sorted(units):
        # b must now sit where a sat: same neighbours, or a neighbour of a itself.
        for b in sorted({*by_context.get(cq[a], ()), *(w for w in cq[a] if w in units)}):
            if b == a or cq[a] == cq[b]:
                continue
            swap = {a: b, b: a}
            qa = tuple(swap.get(w, w) for w in cq[a])
            qb = tuple(swap.get(w, w) for w in cq[b])
            if qa == cc[b] and qb == cc[a] and not _coordinated(oq, a, b):
                return f"role: {a!r} and {b!r} exchanged places"
    return None


def _coordinated(order: tuple[str, ...], a: str, b: str) -> bool:
    i, j = sorted((order.index(a), order.index(b)))
    between = order[i + 1 : j]
    return bool(between) and all(w in _CONNECTORS for w in between)
