"""The cached completion routes' application logic: request → lookup → hit, flight or degrade.

read + validate body ─▶ directives, client key, tenant ─▶ CacheRequest
    ─▶ lookup (unless no-cache) ─hit─▶ serve the entry
    ─miss─▶ join or start the flight for this exact key ─▶ serve the waiter as it asked
             └ upstream failed / breaker open ─▶ degraded answer, or an error
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from aiohttp import web

from core.clock import Clock
from core.config import DejaConfig
from core.errors import DejaError
from fallback.degrade import Degrader
from normalize.features import FeatureSource, PromptFeatures
from normalize.fingerprint import TenantHasher, fingerprint
from normalize.request import CacheRequest, Route
from normalize.screen import PromptScreen
from proxy.auth import ClientAuth
from proxy.context import CacheOutcome, RequestContext
from proxy.directives import CacheDirectives, parse_directives
from proxy.flight import Flight, FlightRegistry
from proxy.request_body import read_json_body, validate
from proxy.responses import (
    FlightWriter,
    error_response,
    json_response,
    new_response_id,
    write_replay,
)
from proxy.upstream import UpstreamRequest, forward_headers
from proxy.upstream_call import CallPlan, UpstreamCaller
from tiers.base import Lookup
from tiers.service import CacheService, LookupOutcome
from tiers.stats import CacheStats

UPSTREAM_PATHS = {Route.CHAT: "chat/completions", Route.COMPLETIONS: "completions"}
# Client headers that are Deja's business, not the upstream's.
_NOT_FORWARDED = frozenset({"authorization", "cache-control", "accept-encoding", "content-type"})


class CompletionHandler:
    def __init__(
        self,
        config: DejaConfig,
        service: CacheService,
        flights: FlightRegistry,
        caller: UpstreamCaller,
        features: FeatureSource,
        degrader: Degrader,
        auth: ClientAuth,
        hasher: TenantHasher,
        screen: PromptScreen,
        clock: Clock,
        stats: CacheStats,
    ) -> None:
        self._config = config
        self._service = service
        self._flights = flights
        self._caller = caller
        self._features = features
        self._degrader = degrader
        self._auth = auth
        self._hasher = hasher
        self._screen = screen
        self._clock = clock
        self._stats = stats

    async def handle(
        self, request: web.Request, route: Route, ctx: RequestContext
    ) -> web.StreamResponse:
        ctx.cache = CacheOutcome.BYPASS  # until a lookup happens
        api_key = self._auth.client_key(request.headers)
        body = await read_json_body(request, self._config.server.max_body_bytes)
        validate(route, body, self._config.server.max_messages)
        directives = parse_directives(request.headers)
        ctx.tenant = self._hasher.tenant_of(api_key)
        creq = fingerprint(route, body, ctx.tenant, directives.namespace)
        suspicious = self._screen.suspicious(body)
        features = self._features.for_request(creq, loose_matching=not suspicious)
        cacheable = route is Route.CHAT or self._config.cache.cache_completions
        outcome = LookupOutcome()
        looked_up = cacheable and directives.lookup
        if looked_up:
            outcome = await self._service.lookup(creq, features, directives.max_age_s)
            if outcome.hit is not None:
                return await self._serve_hit(request, ctx, creq, outcome.hit)
            ctx.cache = CacheOutcome.MISS
            self._stats.misses += 1
        else:
            self._stats.bypasses += 1
        store = cacheable and directives.store and not suspicious
        flight = self._flights.joinable(creq.exact_key) if looked_up else None
        if flight is not None:
            ctx.coalesced = True
            self._stats.coalesced += 1
        else:
            plan = self._plan(request, creq, body, directives, features, store)
            flight = Flight(
                creq.exact_key, _new_entry_id(creq), creq.stream, store, plan.added_logprobs
            )
            self._flights.start(flight, lambda f: self._caller.run(f, plan), shared=looked_up)
        if flight.will_store:
            ctx.entry_id = flight.entry_id

        async def degrade(error: DejaError) -> web.StreamResponse | None:
            return await self._serve_degraded(
                request, ctx, creq, features, outcome, looked_up, error
            )

        with flight.attendance():
            return await FlightWriter(request, ctx, creq, flight, degrade).write()

    async def _serve_hit(
        self, request: web.Request, ctx: RequestContext, creq: CacheRequest, lookup: Lookup
    ) -> web.StreamResponse:
        entry = lookup.entry
        now = self._clock.time()
        ctx.cache = CacheOutcome.HIT
        ctx.tier, ctx.match, ctx.similarity = str(lookup.tier), str(lookup.match), lookup.similarity
        ctx.entry_id, ctx.ttl_s, ctx.age_s = entry.entry_id, entry.ttl_s, entry.age_s(now)
        self._stats.hits[(str(lookup.tier), str(lookup.match))] += 1
        response_id, created = new_response_id(creq.route), int(now)
        if creq.stream:
            return await write_replay(request, ctx, entry.completion(response_id, created), creq)
        return json_response(entry.render_json(response_id, created), ctx)

    async def _serve_degraded(
        self,
        request: web.Request,
        ctx: RequestContext,
        creq: CacheRequest,
        features: PromptFeatures,
        outcome: LookupOutcome,
        looked_up: bool,
        error: DejaError,
    ) -> web.StreamResponse | None:
        answer = await self._degrader.answer(creq, features, outcome.stale, looked_up)
        if answer is None:
            unavailable = self._degrader.unavailable(error)
            return error_response(unavailable, ctx) if unavailable is not error else None
        now = self._clock.time()
        ctx.cache, ctx.degraded, ctx.entry_id = CacheOutcome.DEGRADED, str(answer.kind), None
        if answer.lookup is not None:
            entry = answer.lookup.entry
            ctx.tier, ctx.match = str(answer.lookup.tier), str(answer.lookup.match)
            ctx.similarity = answer.lookup.similarity
            ctx.entry_id, ctx.ttl_s, ctx.age_s = entry.entry_id, entry.ttl_s, entry.age_s(now)
        self._stats.degraded[str(answer.kind)] += 1
        completion = {**answer.completion, "id": new_response_id(creq.route), "created": int(now)}
        if creq.stream:
            return await write_replay(request, ctx, completion, creq)
        return json_response(json.dumps(completion).encode(), ctx)

    def _plan(
        self,
        request: web.Request,
        creq: CacheRequest,
        body: dict[str, Any],
        directives: CacheDirectives,
        features: PromptFeatures,
        store: bool,
    ) -> CallPlan:
        upstream_body = dict(body)
        if creq.stream:
            # Always ask for usage: it is part of the stored answer. Clients that did not ask
            # never see the extra chunk.
            upstream_body["stream_options"] = {
                **(body.get("stream_options") or {}),
                "include_usage": True,
            }
        plain_body = dict(upstream_body)
        added = (
            store
            and self._config.upstream.request_logprobs
            and not _asked_logprobs(creq.route, body)
        )
        if added:
            k = self._config.upstream.top_logprobs
            if creq.route is Route.CHAT:
                upstream_body.update(logprobs=True, top_logprobs=k)
            else:
                upstream_body["logprobs"] = k
        headers = forward_headers(request.headers, drop=_NOT_FORWARDED)
        headers.append(("Content-Type", "application/json"))
        authorization = self._auth.upstream_authorization(request.headers)
        if authorization:
            headers.append(("Authorization", authorization))

        def upstream(payload: dict[str, Any]) -> UpstreamRequest:
            encoded = json.dumps(payload, ensure_ascii=False).encode()
            return UpstreamRequest("POST", UPSTREAM_PATHS[creq.route], tuple(headers), encoded)

        return CallPlan(
            request=creq,
            upstream=upstream(upstream_body),
            features=features,
            store=store,
            store_ttl_cap_s=directives.store_ttl_cap_s,
            added_logprobs=added,
            plain_upstream=upstream(plain_body) if added else None,
        )


def _asked_logprobs(route: Route, body: dict[str, Any]) -> bool:
    value = body.get("logprobs")
    return bool(value) if route is Route.CHAT else value is not None


def _new_entry_id(creq: CacheRequest) -> str:
    # Starts with the partition tag so Redis finds the entry's slot from the id alone.
    return f"{creq.tag}-{secrets.token_hex(8)}"
