"""X-Deja-Explain: the request header parsed into CacheDirectives, the explanation a lookup
returns when asked (and only then), and the response header it is written as."""

from __future__ import annotations

from dataclasses import replace

import pytest

from core.recorder import GuardName
from core.semantic_config import SemanticConfig
from normalize.prompt_features import NoFeatures, SemanticSkip
from normalize.runtime.model_features import SemanticFeatureSource
from proxy.http.request_context import RequestContext, explanation_header
from proxy.protocol.directives import CacheDirectives, parse_directives
from tests.unit.test_lookup_chain import REQUEST, World
from tiers.base import LookupExplanation, MatchKind


@pytest.mark.parametrize("value", ["1", "true", "TRUE", " True "])
def test_explain_is_on_for_1_and_true(value: str) -> None:
    assert parse_directives({"X-Deja-Explain": value}).explain


@pytest.mark.parametrize("value", ["0", "false", "", "yes", "2", "1; x", "\u00e9"])
def test_any_other_value_leaves_it_off_without_an_error(value: str) -> None:
    assert parse_directives({"X-Deja-Explain": value}) == CacheDirectives()


def test_explain_is_off_without_the_header_and_changes_no_other_directive() -> None:
    assert not parse_directives({}).explain
    both = parse_directives({"X-Deja-Explain": "1", "Cache-Control": "no-store"})
    assert both == CacheDirectives(no_store=True, explain=True)


def test_the_header_names_the_known_keys_in_order_to_four_places() -> None:
    refused = LookupExplanation(0.87314, 0.9, GuardName.ROLE)
    assert explanation_header(refused) == "similarity=0.8731; threshold=0.9000; refused=roles"
    below = LookupExplanation(0.85, 0.9)
    assert explanation_header(below) == "similarity=0.8500; threshold=0.9000"
    hit = LookupExplanation(0.97, 0.9, served=MatchKind.SEMANTIC)
    assert explanation_header(hit) == "similarity=0.9700; threshold=0.9000; served=semantic"
    skipped = LookupExplanation(refused=SemanticSkip.LANGUAGE)
    assert explanation_header(skipped) == "refused=language"
    assert explanation_header(LookupExplanation(served=MatchKind.EXACT)) == "served=exact"


def test_the_context_sends_the_header_only_with_an_explanation() -> None:
    ctx = RequestContext("r1", "chat", 0.0)
    assert "X-Deja-Explain" not in ctx.cache_headers()
    ctx.explanation = LookupExplanation()  # nothing known: no empty header
    assert "X-Deja-Explain" not in ctx.cache_headers()
    ctx.explanation = LookupExplanation(refused=SemanticSkip.NO_LOOKUP)
    assert ctx.cache_headers()["X-Deja-Explain"] == "refused=no_lookup"


async def test_a_lookup_explains_itself_only_when_asked() -> None:
    world = World()
    await world.memory.put(world.entry("a"))
    plain = await world.service.lookup(REQUEST, NoFeatures())
    assert plain.hit is not None and plain.explanation is None
    asked = await world.service.lookup(REQUEST, NoFeatures(), explain=True)
    assert asked.explanation == LookupExplanation(served=MatchKind.EXACT)


async def test_explaining_misses_only_explains_no_hit() -> None:
    world = World()
    await world.memory.put(world.entry("a"))
    hit = await world.service.lookup(REQUEST, NoFeatures(), explain_misses=True)
    assert hit.hit is not None and hit.explanation is None
    reason = SemanticSkip.SEMANTIC_OFF
    miss = await World().service.lookup(REQUEST, NoFeatures(reason), explain_misses=True)
    assert miss.hit is None and miss.explanation == LookupExplanation(refused=reason)


@pytest.mark.parametrize("reason", list(SemanticSkip))
async def test_a_miss_never_looked_at_loosely_says_why(reason: SemanticSkip) -> None:
    outcome = await World().service.lookup(REQUEST, NoFeatures(reason), explain=True)
    assert outcome.hit is None
    assert outcome.explanation == LookupExplanation(refused=reason)


def test_the_feature_source_says_why_a_prompt_is_not_matched_loosely() -> None:
    source = SemanticFeatureSource(SemanticConfig(analysis_max_chars=40))  # no model started
    exact_only = replace(REQUEST, prompt_text=None)
    assert source.for_request(exact_only, True).skip_reason() is SemanticSkip.EXACT_ONLY
    readable = replace(REQUEST, prompt_text="How do I reset my PIN?")
    assert source.for_request(readable, False).skip_reason() is SemanticSkip.SCREEN
    assert source.for_request(readable, True).skip_reason() is SemanticSkip.SEMANTIC_OFF
    assert source.language_of("How do I reset my PIN?") == "en"
    assert source.language_of("How do I reset my PIN? " * 2) is SemanticSkip.LENGTH
    assert source.language_of("\u3053\u306e\u85ac\u306f\u5b89\u5168") is SemanticSkip.LANGUAGE
    english_only = SemanticFeatureSource(SemanticConfig(languages=("en",)))
    assert english_only.language_of("\u8fd9\u4e2a\u836f\u5b89\u5168\u5417") is SemanticSkip.LANGUAGE
