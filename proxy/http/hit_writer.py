"""Serving a cache hit: the response, its X-Deja-* facts, the counters and the served record.

One writer for the whole proxy (proxy/http/completions.py) and for edge mode's front
(proxy/edge/front.py), so a hit reads the same whichever process served it: the stored completion
with a fresh `id` and `created` and the original `usage`, as JSON or replayed as SSE. A Responses
API hit is the stored response, with the identity `identified` gives it (its own id where the
upstream keeps it), as JSON or replayed as typed events.
"""

from __future__ import annotations

from typing import Protocol

import orjson
from aiohttp import web

from core.clock import Clock
from core.config import PricingConfig
from core.ids import IdSequence
from core.recorder import CacheRecorder
from core.tracing import SpanNotes
from normalize.keys.request import CacheRequest, Route
from proxy.answering.feedback import ServedRecord
from proxy.http.request_context import CacheOutcome, RequestContext
from proxy.http.responses import (
    identified,
    json_response,
    new_response_id,
    write_completion,
    write_replay,
)
from tiers.base import Lookup
from tiers.lookup_outcome import LookupOutcome


def describe_lookup(span: SpanNotes, outcome: LookupOutcome) -> None:
    """What a lookup found, on its span (nothing when tracing is off)."""
    if not span.is_recording():
        return
    span.set_attribute("deja.hit", outcome.hit is not None)
    if outcome.hit is not None:
        span.set_attribute("deja.tier", str(outcome.hit.tier))
        span.set_attribute("deja.match", str(outcome.hit.match))
    if outcome.stale is not None:
        span.set_attribute("deja.stale", True)


class ServedLog(Protocol):
    """Where "request id → the entry that answered it" goes, for feedback by request id."""

    @property
    def enabled(self) -> bool: ...

    def remember(self, request_id: str, record: ServedRecord) -> None: ...


class HitWriter:
    def __init__(
        self, pricing: PricingConfig, served: ServedLog, clock: Clock, recorder: CacheRecorder
    ) -> None:
        self._served = served
        self._clock = clock
        self._recorder = recorder
        self._response_ids = IdSequence()
        self._prices = {
            p.model: (p.prompt_per_1k_usd, p.completion_per_1k_usd) for p in pricing.models
        }
        self._default_price = (
            pricing.default_prompt_per_1k_usd,
            pricing.default_completion_per_1k_usd,
        )

    async def write(
        self, request: web.Request, ctx: RequestContext, creq: CacheRequest, lookup: Lookup
    ) -> web.StreamResponse:
        entry = lookup.entry
        now = self._clock.time()
        ctx.cache = CacheOutcome.HIT
        ctx.tier, ctx.match, ctx.similarity = str(lookup.tier), str(lookup.match), lookup.similarity
        ctx.entry_id, ctx.ttl_s, ctx.age_s = entry.entry_id, entry.ttl_s, entry.age_s(now)
        self._count(lookup)
        if self._served.enabled:
            self._served.remember(
                ctx.request_id,
                ServedRecord(entry.entry_id, creq.tenant, lookup.match, lookup.similarity),
            )
        if creq.route is Route.RESPONSES:
            # A response may keep its stored id (response_object.py): rendered per request.
            answer = identified(creq, orjson.loads(entry.body), self._response_ids, now)
            return await write_completion(request, ctx, answer, creq)
        response_id, created = new_response_id(creq.route, self._response_ids), int(now)
        if creq.stream:
            return await write_replay(request, ctx, entry.completion(response_id, created), creq)
        return json_response(entry.render_json(response_id, created), ctx)

    def _count(self, lookup: Lookup) -> None:
        entry = lookup.entry
        prompt_price, completion_price = self._prices.get(entry.model, self._default_price)
        usd = (
            entry.prompt_tokens * prompt_price + entry.completion_tokens * completion_price
        ) / 1000
        self._recorder.hit(
            lookup.tier, lookup.match, entry.prompt_tokens, entry.completion_tokens, usd
        )
