"""Degraded answers for when the upstream cannot answer (breaker open, unreachable, 5xx).

In order of preference:
  1. stale     an expired entry for the same exact or lemma key, within its grace period
  2. neighbour the nearest semantic neighbour at a relaxed threshold, meaning guards still on
  3. fallback  a prompt-level answer from the configured template
With none of these, `unavailable()` says which error the client gets: the upstream's own, or a
503 with Retry-After when `degrade.unavailable_503` is set. Every degraded answer is marked
(`X-Deja-Cache: degraded`, `X-Deja-Degraded: <kind>`) by the route layer; none is ever stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from core.clock import Clock
from core.config import DegradeConfig
from core.errors import BreakerOpen, DejaError, UpstreamError
from fallback.breaker import Breaker
from normalize.keys.request import CacheRequest, Route
from normalize.prompt_features import PromptFeatures
from proxy.protocol.response_object import fallback_response
from tiers.base import Lookup
from tiers.service import CacheService


class DegradeKind(StrEnum):
    STALE = "stale"
    NEIGHBOUR = "neighbour"
    FALLBACK = "fallback"


@dataclass(frozen=True, slots=True)
class DegradedAnswer:
    kind: DegradeKind
    # The completion to serve (a fresh id and created are set by the writer).
    completion: dict[str, Any]
    lookup: Lookup | None = None


class Degrader:
    def __init__(
        self, config: DegradeConfig, service: CacheService, clock: Clock, breaker: Breaker
    ):
        self._config = config
        self._service = service
        self._clock = clock
        self._breaker = breaker

    async def answer(
        self,
        request: CacheRequest,
        features: PromptFeatures,
        stale: Lookup | None,
        looked_up: bool,
    ) -> DegradedAnswer | None:
        now = self._clock.time()
        if self._config.serve_stale:
            if not looked_up:
                # The request skipped the lookup (no-cache); an upstream failure still makes
                # any stored answer better than an error.
                outcome = await self._service.lookup(request, features)
                stale = outcome.hit or outcome.stale
            if stale is not None and not stale.entry.is_gone(now):
                return DegradedAnswer(DegradeKind.STALE, _completion_of(stale), stale)
        if self._config.neighbour_threshold > 0 and features.semantic_allowed():
            neighbour = await self._service.neighbour(
                request, features, self._config.neighbour_threshold
            )
            if neighbour is not None:
                return DegradedAnswer(DegradeKind.NEIGHBOUR, _completion_of(neighbour), neighbour)
        if self._config.fallback_template:
            return DegradedAnswer(DegradeKind.FALLBACK, self._fallback(request))
        return None

    def unavailable(self, error: DejaError) -> DejaError:
        """The error to send when nothing can be served. Retry-After is the breaker's remaining
        cool-down when it is open, else a second."""
        if not self._config.unavailable_503 or isinstance(error, BreakerOpen):
            return error
        if not isinstance(error, UpstreamError):
            return error
        return BreakerOpen(
            f"the upstream is unavailable ({error.message}) and nothing cached can answer",
            retry_after_s=self._breaker.retry_after_s(),
            code="upstream_unavailable",
        )

    def _fallback(self, request: CacheRequest) -> dict[str, Any]:
        text = self._config.fallback_template.replace("{model}", request.model)
        if request.route is Route.RESPONSES:
            return fallback_response(request.model, text, 0)
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        if request.route is Route.CHAT:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": "stop",
            }
            return {
                "object": "chat.completion",
                "model": request.model,
                "choices": [choice],
                "usage": usage,
            }
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "stop"}
        return {
            "object": "text_completion",
            "model": request.model,
            "choices": [choice],
            "usage": usage,
        }


def _completion_of(lookup: Lookup) -> dict[str, Any]:
    # As stored: the handler gives it the identity it is served with.
    completion: dict[str, Any] = orjson.loads(lookup.entry.body)
    return completion
