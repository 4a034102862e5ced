"""`POST /v1/embeddings`, cached exactly, input by input.

    read (auth, body, directives, one key per input) ─▶ look every distinct input up
        (unless no-cache) ─all cached─▶ write them          X-Deja-Cache: hit
        ─some missing─▶ one upstream call with the missing inputs only (each once)
            ─2xx─▶ store each new vector (unless no-store), then write the batch in the
                   request's order, cached and new together      partial / miss
            ─anything else─▶ the upstream's answer as it came; nothing stored

`X-Deja-Inputs-Cached: 60/100` says how many of the batch's inputs came from the cache. The
response's `usage` is the upstream call's (what this request cost upstream): zero on a hit.
Each input counts as one lookup in the cache's statistics (a hit or a miss).

The answer is written once its new vectors are stored, so a client that repeats any of its
inputs at once finds them. Two concurrent batches missing the same input both send it upstream
(the singleflight of the completion routes is per request, and a batch is many).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import orjson
from aiohttp import web

from core.config import PricingConfig, ServerConfig
from core.recorder import CacheRecorder, NotStoredReason
from core.tracing import NoopTracer, StageTracer
from normalize.keys.request import CacheRequest
from normalize.prompt_features import NoFeatures, SemanticSkip
from proxy.answering.answer_store import AnswerStore, EmbeddingAnswer
from proxy.answering.gate import UpstreamGate
from proxy.http.body import read_body
from proxy.http.client_auth import ClientAuth
from proxy.http.request_context import CONTEXT, CacheOutcome, RequestContext
from proxy.http.responses import json_response
from proxy.protocol.credentials import CredentialRule
from proxy.protocol.embeddings import (
    EmbeddingsRequest,
    UpstreamEmbeddings,
    parse_embeddings_request,
    read_upstream_embeddings,
    render_embeddings,
)
from proxy.protocol.request_parser import parse_json_object
from proxy.upstream.client import UpstreamRequest, UpstreamResponse
from tiers.base import Lookup
from tiers.service import CacheService

UPSTREAM_PATH = "embeddings"
_NOT_FORWARDED = frozenset({"cache-control", "accept-encoding", "content-type", "content-length"})
# Upstream headers that describe its own body or connection; the batch Deja writes is its own.
_NOT_RELAYED = frozenset(
    {"content-type", "content-length", "content-encoding", "transfer-encoding", "date", "server"}
)
# An upstream error goes back as it came, in its own content type (its body was decompressed).
_NOT_RELAYED_ERROR = _NOT_RELAYED - {"content-type"}
# Tier calls of one batch in flight at once: enough to overlap Redis round trips, far below
# the Redis client's connection pool (100 by default).
_CONCURRENT_CALLS = 8
T = TypeVar("T")
X = TypeVar("X")
# An embeddings lookup is exact only: nothing loose is ever asked of it.
_EXACT_ONLY = NoFeatures(SemanticSkip.EXACT_ONLY)


class EmbeddingsHandler:
    def __init__(
        self,
        server: ServerConfig,
        pricing: PricingConfig,
        auth: ClientAuth,
        rule: CredentialRule,
        service: CacheService,
        gate: UpstreamGate,
        answers: AnswerStore,
        recorder: CacheRecorder,
        tracer: StageTracer | None = None,
    ) -> None:
        self._max_body_bytes = server.max_body_bytes
        self._auth = auth
        self._rule = rule
        self._service = service
        self._gate = gate
        self._answers = answers
        self._recorder = recorder
        self._tracer = tracer or NoopTracer()
        self._prices = {p.model: p.prompt_per_1k_usd for p in pricing.models}
        self._default_price = pricing.default_prompt_per_1k_usd

    async def handle(self, request: web.Request) -> web.StreamResponse:
        ctx = request[CONTEXT]
        ctx.cache = CacheOutcome.BYPASS  # until a lookup happens
        with self._tracer.span("deja.read"):
            credentials = self._auth.credentials(request.headers)
            raw = await read_body(request, self._max_body_bytes)
            parsed = parse_embeddings_request(
                parse_json_object(raw), self._rule.tenant(credentials), request.headers
            )
        ctx.tenant = parsed.keys[0].tenant
        # Each distinct input once: its first position in the batch stands for every other.
        distinct: dict[str, int] = {}
        for position, key in enumerate(parsed.keys):
            distinct.setdefault(key.exact_key, position)
        vectors: dict[str, bytes] = {}
        if parsed.directives.lookup:
            with self._tracer.span("deja.lookup"):
                vectors = await self._cached(parsed, list(distinct.values()))
        else:
            self._recorder.bypass()
        missing = [position for key, position in distinct.items() if key not in vectors]
        cached = sum(1 for key in parsed.keys if key.exact_key in vectors)
        ctx.inputs_cached = (cached, len(parsed.keys))
        if not missing:
            ctx.cache = CacheOutcome.HIT
            model = str(parsed.body["model"])
            return self._write(parsed, vectors, model, 0, 0, ctx, {})
        if parsed.directives.lookup:
            ctx.cache = CacheOutcome.PARTIAL if cached else CacheOutcome.MISS
        return await self._call(request, ctx, parsed, missing, vectors)

    async def _cached(
        self, parsed: EmbeddingsRequest, positions: Sequence[int]
    ) -> dict[str, bytes]:
        """The vectors the cache holds of the inputs at `positions`, by exact key."""
        max_age_s = parsed.directives.max_age_s
        outcomes = await _bounded(
            positions, lambda p: self._service.lookup(parsed.keys[p], _EXACT_ONLY, max_age_s)
        )
        found: dict[str, bytes] = {}
        for position, outcome in zip(positions, outcomes, strict=True):
            if outcome.hit is None:
                self._recorder.miss(parsed.keys[position].partition)
                continue
            self._count_hit(outcome.hit)
            found[parsed.keys[position].exact_key] = outcome.hit.entry.body
        return found

    async def _call(
        self,
        request: web.Request,
        ctx: RequestContext,
        parsed: EmbeddingsRequest,
        missing: list[int],
        vectors: dict[str, bytes],
    ) -> web.StreamResponse:
        sent = [parsed.inputs[p] for p in missing]
        headers = self._auth.upstream_headers(request.headers, _NOT_FORWARDED)
        headers.append(("Content-Type", "application/json"))
        call = UpstreamRequest(
            "POST", UPSTREAM_PATH, tuple(headers), orjson.dumps(parsed.upstream_body(sent))
        )
        with self._tracer.span("deja.upstream"):
            async with self._gate.call(call) as response:
                ctx.upstream_status = response.status
                raw = await response.read()
                relayed = _relayed_headers(response, _NOT_RELAYED)
                as_it_came = _relayed_headers(response, _NOT_RELAYED_ERROR)
        if not 200 <= response.status < 300:
            # The upstream's refusal (a bad input, a rate limit, an outage) as it came.
            self._recorder.not_stored(NotStoredReason.ERROR)
            return web.Response(
                status=response.status, body=raw, headers={**as_it_came, **ctx.cache_headers()}
            )
        answer = read_upstream_embeddings(raw, len(sent))
        for position, vector in zip(missing, answer.vectors, strict=True):
            vectors[parsed.keys[position].exact_key] = vector
        if parsed.directives.store:
            with self._tracer.span("deja.store"):
                await self._store(parsed, missing, answer)
        else:
            self._recorder.not_stored(NotStoredReason.NO_STORE)
        return self._write(
            parsed, vectors, answer.model, answer.prompt_tokens, answer.total_tokens, ctx, relayed
        )

    async def _store(
        self, parsed: EmbeddingsRequest, stored: Sequence[int], answer: UpstreamEmbeddings
    ) -> None:
        """Store the new vectors of the inputs at positions `stored`, each under its key."""
        shares = token_shares(answer.prompt_tokens, [len(parsed.inputs[p]) for p in stored])
        ttl_cap_s = parsed.directives.store_ttl_cap_s
        answers = [
            EmbeddingAnswer(
                _new_entry_id(parsed.keys[p]), parsed.keys[p], vector, tokens, ttl_cap_s
            )
            for p, vector, tokens in zip(stored, answer.vectors, shares, strict=True)
        ]
        refusals = await _bounded(answers, self._answers.store_embedding)
        for refusal in refusals:
            if refusal is not None:
                self._recorder.not_stored(refusal)

    def _write(
        self,
        parsed: EmbeddingsRequest,
        vectors: dict[str, bytes],
        model: str,
        prompt_tokens: int,
        total_tokens: int,
        ctx: RequestContext,
        relayed: dict[str, str],
    ) -> web.Response:
        ordered = [vectors[key.exact_key] for key in parsed.keys]
        body = render_embeddings(
            ordered,
            parsed.encoding,
            model or str(parsed.body["model"]),
            prompt_tokens,
            total_tokens,
        )
        response = json_response(body, ctx)
        for name, value in relayed.items():
            response.headers.setdefault(name, value)
        return response

    def _count_hit(self, hit: Lookup) -> None:
        entry = hit.entry
        usd = entry.prompt_tokens * self._prices.get(entry.model, self._default_price) / 1000
        self._recorder.hit(hit.tier, hit.match, entry.prompt_tokens, 0, usd)


async def _bounded(items: Sequence[X], call: Callable[[X], Awaitable[T]]) -> list[T]:
    """`call` of each item, results in order, at most `_CONCURRENT_CALLS` running at once: a
    batch of 2,048 inputs must not ask for 2,048 Redis connections (past the client's pool,
    redis-py fails a call, and Deja would take Redis for down). Each call starts only once it
    has its turn, so a cancelled batch leaves no coroutine unawaited."""
    gate = asyncio.Semaphore(_CONCURRENT_CALLS)

    async def one(item: X) -> T:
        async with gate:
            return await call(item)

    return list(await asyncio.gather(*(one(item) for item in items)))


def token_shares(total: int, weights: Sequence[int]) -> list[int]:
    """`total` split in proportion to `weights` (largest remainders), summing to `total`: an
    upstream reports one batch's tokens; each stored input keeps its share, for the
    tokens-saved figures of its later hits."""
    weight = sum(weights)
    if not weights or weight <= 0:
        return [0] * len(weights)
    exact = [total * w / weight for w in weights]
    shares = [int(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: exact[i] - shares[i], reverse=True)
    for i in by_remainder[: total - sum(shares)]:
        shares[i] += 1
    return shares


def _relayed_headers(response: UpstreamResponse, dropped: frozenset[str]) -> dict[str, str]:
    return {
        name: value
        for name, value in response.forwardable_headers().items()
        if name.lower() not in dropped and not name.lower().startswith("x-deja-")
    }


def _new_entry_id(key: CacheRequest) -> str:
    # Starts with the partition tag so Redis finds the entry's slot from the id alone.
    return f"{key.tag}-{secrets.token_hex(8)}"
