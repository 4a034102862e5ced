"""The semantic hit rule with the shipped default configuration and the real models.

Two scenario tables: questions that must be answered from each other's cache entry (plain
paraphrases), and questions that must never be (negation, numbers and units, entities, swapped
roles, antonyms, another kind of question, and another language through the gate). Each
never-hit case names the guard expected to stop it, so a case that slips through on a lower
cosine alone would not hide a broken guard.
"""

from __future__ import annotations

import pytest

from core.semantic_config import SemanticConfig
from normalize.meaning.language import LanguageGate
from normalize.meaning.lemmas import LemmaAnalyzer
from tests.models.hit_rule import HitRule

# (cached prompt, new prompt): a right hit.
MUST_HIT: list[tuple[str, str]] = [
    ("Who wrote Hamlet?", "Who is the author of Hamlet?"),
    ("Who wrote Pride and Prejudice?", "Who is the author of Pride and Prejudice?"),
    ("How do I reset my password?", "How can I reset my password?"),
    ("How do I reset my password?", "What's the way to reset my password?"),
    ("How do I cancel my subscription?", "How can I cancel my subscription?"),
    ("How do I delete my account?", "how can i delete my account"),
    ("What is the capital of France?", "What's the capital city of France?"),
    ("How many calories are in an egg?", "How many calories does an egg have?"),
    ("Is it safe to eat raw eggs?", "Are raw eggs safe to eat?"),
    ("How tall is the Eiffel Tower?", "What is the height of the Eiffel Tower?"),
    ("Who painted the Mona Lisa?", "Who was the painter of the Mona Lisa?"),
    ("Why is the sky blue?", "Why does the sky look blue?"),
    ("When was Google founded?", "When was Google started?"),
    ("Can dogs eat chocolate?", "Is chocolate safe for dogs to eat?"),
    ("How do I learn Python quickly?", "What is the fastest way to learn Python?"),
    (
        "What is the difference between a crocodile and an alligator?",
        "What is the difference between an alligator and a crocodile?",
    ),
    ("Why isn't my card working?", "Why is my card not working?"),
    ("Is it unsafe to drink tap water?", "Is it not safe to drink tap water?"),
    ("How do I convert 100 USD to EUR?", "How can I convert 100 USD to EUR?"),
    ("How many kilometers are in 5 miles?", "How many km are in five miles?"),
    ("How do I turn off Bluetooth on my iPhone?", "How can I turn off Bluetooth on my iPhone?"),
    ("Is Berlin bigger than Paris?", "Is Berlin larger than Paris?"),
    ("Shakespeare wrote Hamlet.", "Hamlet was written by Shakespeare."),
    ("Which is better, Python or Java?", "Which is better, Java or Python?"),
    ("Why can't I log in to my account?", "Why am I unable to log in to my account?"),
    ("What time does the store close on Sunday?", "When does the store close on Sundays?"),
    ("Why is the ocean salty?", "What makes the ocean salty?"),
    # The same lemma key (cosine 0.894): no guard runs.
    ("Tell me a joke", "Tell me a joke please"),
    # Everyday paraphrases that MiniLM scores 0.85-0.90 (under the old default of 0.90).
    ("Give me a recipe for pancakes", "How do I make pancakes?"),
    ("What causes rainbows?", "Why do rainbows appear?"),
    ("Where do penguins live?", "What is the habitat of penguins?"),
    ("How do airplanes stay in the air?", "How do planes stay up in the air?"),
    # Question frames and prepositions that paraphrases trade.
    ("How hot is the surface of the sun?", "What temperature is the sun's surface?"),
    ("How cold is the surface of the moon?", "What is the temperature of the moon's surface?"),
    ("What is the price of a Big Mac in Japan?", "How much does a Big Mac cost in Japan?"),
    ("Where can I find my Wi-Fi password?", "Where is my Wi-Fi password?"),
    ("How do I find my W-2 form?", "Where can I find my W-2 form?"),
    ("How do I change a flat tire?", "What is the way to change a flat tire?"),
    ("What is the sun's core made of?", "What is the core of the sun made of?"),
    ("What's the fastest animal on land?", "Which land animal is the fastest?"),
    ("I can't seem to use my card", "I can't use my card"),
]

# (cached prompt, new prompt, the guard that must stop it).
NEVER_HIT: list[tuple[str, str, str]] = [
    # negation
    ("Is it safe to eat raw chicken?", "Is it not safe to eat raw chicken?", "negation"),
    ("Is it safe to take ibuprofen?", "Is it never safe to take ibuprofen?", "negation"),
    ("Can I use my card abroad?", "I can't use my card abroad.", "negation"),
    ("Is there a fee for transfers?", "Is there no fee for transfers?", "negation"),
    ("Does the app work offline?", "Why doesn't the app work offline?", "negation"),
    ("Is it safe to drink tap water?", "Is it unsafe to drink tap water?", "antonym"),
    # numbers and units
    ("Convert 5 km to miles", "Convert 5 miles to km", "number"),
    ("Convert 100 USD to EUR", "Convert 200 USD to EUR", "number"),
    ("What is 2+2?", "What is 2+3?", "number"),
    ("What is 15% of 80?", "What is 15% of 60?", "number"),
    (
        "What was the population of Tokyo in 2010?",
        "What was the population of Tokyo in 2020?",
        "number",
    ),
    (
        "Who was the first president of the United States?",
        "Who was the second president of the United States?",
        "number",
    ),
    (
        "How long does it take to boil an egg for 5 minutes?",
        "How long does it take to boil an egg for 5 hours?",
        "number",
    ),
    ("Is 100 mg of caffeine a lot?", "Is 100 g of caffeine a lot?", "number"),
    # entities
    ("What is the capital of France?", "What is the capital of Germany?", "entity"),
    ("Who is the CEO of Apple?", "Who is the CEO of Microsoft?", "entity"),
    ("How far is Paris from Berlin?", "How far is Paris from Madrid?", "entity"),
    (
        "What are the best majors at Seattle University?",
        "What are the best majors at CMU?",
        "entity",
    ),
    ("Is the iPhone waterproof?", "Is the Galaxy Watch waterproof?", "entity"),
    ("Is the iPhone 15 waterproof?", "Is the iPhone 14 waterproof?", "number"),
    # swapped roles
    ("Convert USD to EUR", "Convert EUR to USD", "role"),
    ("Did Germany beat Brazil?", "Did Brazil beat Germany?", "role"),
    ("Germany beat Brazil", "Brazil beat Germany", "role"),
    ("Who did Germany beat?", "Who beat Germany?", "role"),
    ("Is Germany larger than Brazil?", "Is Brazil larger than Germany?", "role"),
    ("Is Python faster than Java?", "Is Java faster than Python?", "role"),
    ("Flights from Paris to London", "Flights from London to Paris", "role"),
    (
        "How do I transfer money from savings to checking?",
        "How do I transfer money from checking to savings?",
        "role",
    ),
    (
        "Translate this sentence from English to French",
        "Translate this sentence from French to English",
        "role",
    ),
    ("Does the cat chase the dog?", "Does the dog chase the cat?", "role"),
    ("Is a tomato a fruit?", "Is a fruit a tomato?", "role"),
    (
        "How do I move files from my phone to my laptop?",
        "How do I move files from my laptop to my phone?",
        "role",
    ),
    ("Can a landlord evict a tenant?", "Can a tenant evict a landlord?", "role"),
    ("What did Einstein say about Newton?", "What did Newton say about Einstein?", "role"),
    ("Convert 32 Fahrenheit to Celsius", "Convert 32 Celsius to Fahrenheit", "number"),
    ("Does the moon orbit the Earth?", "Does the Earth orbit the moon?", "role"),
    ("Can dogs catch colds from humans?", "Can humans catch colds from dogs?", "role"),
    ("Is a kilogram heavier than a pound?", "Is a pound heavier than a kilogram?", "role"),
    # Where money goes in one and where it comes from in the other, under reworded verbs.
    ("How do I transfer money into my account?", "How do I take money from my account?", "role"),
    ("I want the red car and the blue bike", "I want the blue car and the red bike", "role"),
    # antonyms
    ("How do I enable dark mode?", "How do I disable dark mode?", "antonym"),
    ("How do I increase my credit limit?", "How do I decrease my credit limit?", "antonym"),
    ("Should I buy Tesla stock now?", "Should I sell Tesla stock now?", "antonym"),
    ("Is Germany larger than Brazil?", "Is Germany smaller than Brazil?", "antonym"),
    ("How do I turn on Bluetooth?", "How do I turn off Bluetooth?", "antonym"),
    ("How do I log in to my account?", "How do I log out of my account?", "antonym"),
    ("Is coffee good for your health?", "Is coffee bad for your health?", "antonym"),
    (
        "What are the advantages of remote work?",
        "What are the disadvantages of remote work?",
        "antonym",
    ),
    ("How do I lock my phone?", "How do I unlock my phone?", "antonym"),
    ("Can I drink coffee with milk?", "Can I drink coffee without milk?", "antonym"),
    ("What foods raise blood pressure?", "What foods lower blood pressure?", "antonym"),
    ("Why is my battery draining fast?", "Why is my battery draining slowly?", "antonym"),
    ("How old was Mozart when he died?", "How old was Mozart when he was born?", "antonym"),
    ("When is the next train to Boston?", "When is the last train to Boston?", "antonym"),
    ("What's the minimum age to rent a car?", "What's the maximum age to rent a car?", "antonym"),
    ("How do I turn on dark mode in Chrome?", "How do I turn off dark mode in Chrome?", "antonym"),
    # negation, numbers with units, at cosines 0.87-0.97
    (
        "Is the Great Wall of China visible from space?",
        "Is the Great Wall of China not visible from space?",
        "negation",
    ),
    ("I want to verify my identity", "I don't want to verify my identity", "negation"),
    ("Is 5 mg of melatonin too much?", "Is 5 g of melatonin too much?", "number"),
    ("What can I do in Paris in 3 days?", "What can I do in Paris in 3 weeks?", "number"),
    # another kind of question
    ("When was Google founded?", "Where was Google founded?", "question"),
    ("Who invented the telephone?", "When was the telephone invented?", "question"),
    ("Why is the sky blue?", "How is the sky blue?", "question"),
    ("Why do leaves change color in autumn?", "When do leaves change color in autumn?", "question"),
    ("Who built the pyramids?", "How were the pyramids built?", "question"),
    # "Where" and "how" agree only about finding something.
    ("Where can I buy a car?", "How can I buy a car?", "question"),
]

# Other languages: the guards cannot read them, so only exact matches count.
NEVER_HIT_OTHER_LANGUAGES: list[tuple[str, str]] = [
    ("把美元换成欧元", "把欧元换成美元"),  # convert USD to EUR / EUR to USD (cosine 0.993)
    ("这个药安全吗？", "这个药不安全吗？"),  # is this drug safe / not safe
    ("德国队打败了巴西队", "巴西队打败了德国队"),  # Germany beat Brazil / Brazil beat Germany
    ("Это лекарство безопасно?", "Это лекарство не безопасно?"),
    ("Est-ce que ce médicament est sûr ?", "Est-ce que ce médicament n'est pas sûr ?"),
    ("¿Es seguro comer pollo crudo?", "¿No es seguro comer pollo crudo?"),
]


@pytest.mark.parametrize(("cached", "query"), MUST_HIT)
def test_paraphrases_hit(hit_rule: HitRule, cached: str, query: str) -> None:
    decision = hit_rule.decide(query, cached)
    assert decision.hit, decision


@pytest.mark.parametrize(("cached", "query", "guard_name"), NEVER_HIT)
def test_changed_meaning_never_hits(
    hit_rule: HitRule, cached: str, query: str, guard_name: str
) -> None:
    decision = hit_rule.decide(query, cached)
    assert not decision.hit, decision
    assert decision.verdict is not None and not decision.verdict.agree, decision
    assert decision.verdict.reason.startswith(guard_name), decision


@pytest.mark.parametrize(("cached", "query", "guard_name"), NEVER_HIT)
def test_changed_meaning_never_hits_in_either_direction(
    hit_rule: HitRule, cached: str, query: str, guard_name: str
) -> None:
    decision = hit_rule.decide(cached, query)
    assert not decision.hit, decision


def test_guards_are_what_stops_most_never_hit_cases(
    hit_rule: HitRule, config: SemanticConfig
) -> None:
    # Without the guards these would be hits: the cosine alone cannot tell them apart.
    above = [c for c in NEVER_HIT if hit_rule.decide(c[1], c[0]).cosine >= config.threshold]
    assert len(above) >= len(NEVER_HIT) // 2


@pytest.mark.parametrize(("cached", "query"), NEVER_HIT_OTHER_LANGUAGES)
def test_other_languages_use_exact_matches_only(
    hit_rule: HitRule, analyzer: LemmaAnalyzer, cached: str, query: str
) -> None:
    gate = LanguageGate(("en",))
    assert not gate.supports(query) and not gate.supports(cached)
    assert not hit_rule.decide(query, cached).hit
    # The lemma key degrades to the exact key: different texts never share it.
    assert analyzer.analyze(query).key_material() != analyzer.analyze(cached).key_material()
    # The same text still hits exactly.
    assert hit_rule.decide(query, query).match == "exact"


@pytest.mark.parametrize(("cached", "query", "guard_name"), NEVER_HIT)
def test_never_hit_pairs_never_share_a_lemma_key(
    analyzer: LemmaAnalyzer, cached: str, query: str, guard_name: str
) -> None:
    assert analyzer.analyze(query).key_material() != analyzer.analyze(cached).key_material()
