"""The cached completion routes' application logic: request → lookup → hit, flight or degrade.

read (auth, body, directives, keys) ─▶ lookup (unless no-cache) ─hit─▶ serve the entry
    ─miss─▶ join or start the flight for this exact key ─▶ serve the waiter as it asked
             └ upstream failed / breaker open ─▶ degraded answer, or an error
"""

from __future__ import annotations

import secrets
from typing import Any

import orjson
from aiohttp import web

from core.clock import Clock
from core.config import CacheConfig, UpstreamConfig
from core.errors import DejaError
from core.ids import IdSequence
from core.pacing import Pacer
from core.recorder import CacheRecorder
from core.tracing import NoopTracer, StageTracer
from fallback.degrade import Degrader
from normalize.keys.fingerprint import SHARED_TENANT
from normalize.keys.request import CacheRequest, Route
from normalize.prompt_features import SemanticSkip
from proxy.answering.answer_store import Answer, AnswerStore
from proxy.answering.entry_builder import asked_logprobs
from proxy.answering.feedback import ServedRecord, ServedRequests
from proxy.answering.flight_call import CallPlan, UpstreamCaller
from proxy.answering.flights import Flight, FlightRegistry
from proxy.answering.verifier import Verifier
from proxy.http.hit_writer import HitWriter, describe_lookup
from proxy.http.recent_misses import RecentMisses
from proxy.http.request_context import CacheOutcome, RequestContext
from proxy.http.request_reader import ReadRequest, RequestReader
from proxy.http.responses import (
    FlightWriter,
    Undelivered,
    error_response,
    identified,
    json_response,
    write_replay,
)
from tiers.base import Lookup, LookupExplanation, MatchKind, NearMiss
from tiers.lookup_outcome import LookupOutcome
from tiers.service import CacheService


class CompletionHandler:
    def __init__(
        self,
        cache: CacheConfig,
        upstream: UpstreamConfig,
        reader: RequestReader,
        service: CacheService,
        flights: FlightRegistry,
        caller: UpstreamCaller,
        answers: AnswerStore,
        degrader: Degrader,
        verifier: Verifier,
        served: ServedRequests,
        clock: Clock,
        recorder: CacheRecorder,
        lookup_turns: Pacer,
        upstream_turns: Pacer,
        hits: HitWriter,
        misses: RecentMisses,
        tracer: StageTracer | None = None,
    ) -> None:
        self._tracer = tracer or NoopTracer()
        self._cache = cache
        self._upstream = upstream
        # core/pacing.py: the lookups' lane, passed to every lookup; a miss's own lane, for
        # writing a whole answer.
        self._lookup_turns = lookup_turns
        self._upstream_turns = upstream_turns
        self._reader = reader
        self._service = service
        self._flights = flights
        self._caller = caller
        self._answers = answers
        self._degrader = degrader
        self._verifier = verifier
        self._served = served
        self._clock = clock
        self._recorder = recorder
        self._hits = hits
        self._misses = misses
        self._response_ids = IdSequence()

    async def handle(
        self, request: web.Request, route: Route, ctx: RequestContext
    ) -> web.StreamResponse:
        ctx.cache = CacheOutcome.BYPASS  # until a lookup happens
        with self._tracer.span("deja.read"):
            read = await self._reader.read(request, route)
        creq = read.cache
        ctx.tenant = creq.tenant
        cacheable = self._cacheable(read)
        outcome = LookupOutcome()
        looked_up = cacheable and read.directives.lookup
        if looked_up:
            with self._tracer.span("deja.lookup") as span:
                outcome = await self._service.lookup(
                    creq,
                    read.features,
                    read.directives.max_age_s,
                    self._lookup_turns,
                    read.directives.explain,
                    # The recent misses (the dashboard) keep why each missed: a few numbers.
                    explain_misses=True,
                )
                describe_lookup(span, outcome)
            if read.directives.explain:
                ctx.explanation = outcome.explanation
            if outcome.held_back_lemma is not None:
                self._verify_held_back(read, outcome.held_back_lemma)
            if outcome.hit is not None:
                return await self._serve_hit(request, ctx, read, outcome)
            ctx.cache = CacheOutcome.MISS
            self._recorder.miss(creq.partition)
            self._misses.missed(
                ctx.request_id,
                str(creq.route),
                creq.model,
                creq.namespace,
                creq.tenant,
                outcome.explanation,
            )
        else:
            self._recorder.bypass()
            if read.directives.explain:
                ctx.explanation = LookupExplanation(refused=SemanticSkip.NO_LOOKUP)
        store = cacheable and read.directives.store and not read.suspicious
        flight = self._flights.joinable(creq.exact_key) if looked_up else None
        if flight is not None:
            ctx.coalesced = True
            self._recorder.coalesced()
        else:
            plan = self._plan(read, store, outcome.near_miss)
            flight = Flight(
                creq.exact_key, _new_entry_id(creq), creq.stream, store, plan.added_logprobs
            )
            self._flights.start(flight, lambda f: self._caller.run(f, plan), shared=looked_up)
        if flight.will_store:
            ctx.entry_id = flight.entry_id
        if flight.will_store and self._served.enabled:
            self._served.remember(
                ctx.request_id, ServedRecord(flight.entry_id, creq.tenant, None, None)
            )

        with flight.attendance():
            written = await FlightWriter(request, ctx, creq, flight, self._upstream_turns).write()
        if not isinstance(written, Undelivered):
            return written
        degraded = await self._serve_degraded(request, ctx, read, outcome, looked_up, written.error)
        if degraded is not None:
            return degraded
        if written.upstream_reply is not None:
            return written.upstream_reply
        return error_response(written.error, ctx)

    async def _serve_hit(
        self, request: web.Request, ctx: RequestContext, read: ReadRequest, outcome: LookupOutcome
    ) -> web.StreamResponse:
        creq, lookup = read.cache, outcome.hit
        assert lookup is not None, "a hit is served"
        if outcome.answer_check_due:
            self._verifier.check_later(creq, read.features, lookup)
        if lookup.match is not MatchKind.EXACT:
            keep = None
            if read.directives.store and not read.suspicious:

                async def keep(fresh: dict[str, Any]) -> bool:
                    # The verified prompt gets an entry of its own with the right answer.
                    answer = Answer(_new_entry_id(creq), creq, read.features, fresh)
                    return await self._answers.store(answer) is None

            self._verifier.maybe_verify(
                lookup, lambda: read.upstream_request(_plain(read.body)), keep
            )
        return await self._hits.write(request, ctx, creq, lookup)

    def _verify_held_back(self, read: ReadRequest, held_back: Lookup) -> None:
        """Sample a lemma match held back while lemma hits are off, as if it had been served
        (its answer check first, off the response path). Its fresh answer is not kept: the
        request goes on to be answered, and stored, as it is."""
        creq, features = read.cache, read.features

        async def refused_by_check() -> bool:
            return await self._service.contradicted(creq, features, held_back.entry)

        self._verifier.maybe_verify(
            held_back, lambda: read.upstream_request(_plain(read.body)), None, refused_by_check
        )

    async def _serve_degraded(
        self,
        request: web.Request,
        ctx: RequestContext,
        read: ReadRequest,
        outcome: LookupOutcome,
        looked_up: bool,
        error: DejaError,
    ) -> web.StreamResponse | None:
        creq = read.cache
        answer = await self._degrader.answer(creq, read.features, outcome.stale, looked_up)
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
        self._recorder.degraded(answer.kind)
        completion = identified(creq, answer.completion, self._response_ids, now)
        if creq.stream:
            return await write_replay(request, ctx, completion, creq)
        return json_response(orjson.dumps(completion), ctx)

    def _cacheable(self, read: ReadRequest) -> bool:
        route, creq = read.cache.route, read.cache
        if route is Route.COMPLETIONS:
            return self._cache.cache_completions
        if route is Route.RESPONSES:
            return _response_cacheable(read.body, creq)
        return True

    def _plan(self, read: ReadRequest, store: bool, near_miss: NearMiss | None) -> CallPlan:
        creq, body = read.cache, read.body
        upstream_body = dict(body)
        if creq.stream and creq.route is not Route.RESPONSES:
            # Always ask for usage: it is part of the stored answer. Clients that did not ask
            # never see the extra chunk.
            upstream_body["stream_options"] = {
                **(body.get("stream_options") or {}),
                "include_usage": True,
            }
        plain_body = dict(upstream_body)
        added = store and self._upstream.request_logprobs and not asked_logprobs(creq.route, body)
        if added:
            k = self._upstream.top_logprobs
            if creq.route is Route.CHAT:
                upstream_body.update(logprobs=True, top_logprobs=k)
            else:
                upstream_body["logprobs"] = k
        return CallPlan(
            request=creq,
            upstream=read.upstream_request(upstream_body),
            features=read.features,
            store=store,
            store_ttl_cap_s=read.directives.store_ttl_cap_s,
            added_logprobs=added,
            plain_upstream=read.upstream_request(plain_body) if added else None,
            near_miss=near_miss,
        )


def _response_cacheable(body: dict[str, Any], creq: CacheRequest) -> bool:
    """Whether a Responses API request is cached (README, "Responses API"). Not when
    - it runs in the background: the upstream runs and keeps it, the client polls for it;
    - it names a `conversation`: the upstream adds each turn to the conversation, and a hit
      would leave this one out, so the next turn would be answered without it;
    - the upstream keeps it while cache.share_across_tenants is on: a kept response's id
      belongs to one tenant's upstream account."""
    if body.get("background") is True or body.get("conversation") is not None:
        return False
    return not (creq.upstream_keeps and creq.tenant == SHARED_TENANT)


def _plain(body: dict[str, Any]) -> dict[str, Any]:
    """The request as a verification sends it: not streamed."""
    return {k: v for k, v in body.items() if k not in ("stream", "stream_options")}


def _new_entry_id(creq: CacheRequest) -> str:
    # Starts with the partition tag so Redis finds the entry's slot from the id alone.
    return f"{creq.tag}-{secrets.token_hex(8)}"
