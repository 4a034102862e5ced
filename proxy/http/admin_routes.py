"""The admin REST API under /admin/v1/ (on the proxy's port).

Guarded by a bearer token (`admin.token`), compared in constant time; without one configured the
whole API answers 404. `POST feedback` also accepts a client's own credentials, in any form a
completion request may carry them (proxy/protocol/credentials.py), for entries of its own tenant
only, so applications can report on answers without the admin token; another tenant's entry is
answered as not found (nothing about it is revealed).

    POST   feedback          {"entry_id" | "request_id", "signal": "useful" | "irrelevant" | n}
    GET    entries           the newest entries, ?tenant= &namespace= &model= &limit= (default 50)
    GET    entries/{id}      the entry: metadata and the stored completion
    DELETE entries/{id}      delete it from every tier and replica
    POST   invalidate        {"tenant_key" | "tenant_headers" | "tenant", "namespace", "model"}
                             or {"all": true}
    GET    stats             hits by tier and match, sizes, savings, the false-hit estimate
    GET    series            this process's last hour, a point every admin.series_interval_s
    GET    misses            the last misses and why they missed (X-Deja-Explain's numbers)
    POST   warmup            JSONL of {"request", "response", "namespace"?, "api_key"? | "headers"?}
    GET    openapi.json      this API, described
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from core.clock import Clock
from core.errors import AuthenticationFailed, InvalidRequest, NotFound
from normalize.keys.request import Route
from proxy.answering.feedback import FeedbackService, ServedRequests
from proxy.answering.warmup import NotReadyForWarmUp, WarmUp
from proxy.http.admin_openapi import admin_openapi
from proxy.http.client_auth import ClientAuth, bearer_token
from proxy.http.frame import RequestFrame
from proxy.protocol.credentials import CredentialRule
from proxy.protocol.request_parser import parse_json_object
from tiers.base import Entry, Invalidation
from tiers.service import CacheService

PREFIX = "/admin/v1"
NDJSON = "application/x-ndjson"
DEFAULT_LISTING = 50
MAX_LISTING = 1000
PREVIEW_CHARS = 80


@dataclass(frozen=True, slots=True)
class AdminViews:
    """What the admin API reads of the rest of the proxy (the composition root makes them)."""

    # Hits by tier and match, sizes, savings, the false-hit estimate: the `stats` route's body.
    stats: Callable[[], Awaitable[dict[str, Any]]]
    # The dashboard's time series and recent misses: the `series` and `misses` routes' bodies.
    series: Callable[[], dict[str, Any]]
    misses: Callable[[], dict[str, Any]]
    # False while the semantic models a warm-up line needs are still loading.
    models_ready: Callable[[], bool]
    # An entry's similarity threshold as lookups apply it (its floor, the global threshold).
    effective_threshold: Callable[[float], float]
    clock: Clock


class AdminRoutes:
    def __init__(
        self,
        token: str,
        views: AdminViews,
        service: CacheService,
        served: ServedRequests,
        feedback: FeedbackService,
        warmup: WarmUp,
        auth: ClientAuth,
        rule: CredentialRule,
    ) -> None:
        assert token, "the admin API is only mounted with a token"
        self._token = token.encode()
        self._views = views
        self._service = service
        self._served = served
        self._feedback = feedback
        self._warmup = warmup
        self._auth = auth
        self._rule = rule

    def register(self, frame: RequestFrame) -> None:
        frame.route(f"{PREFIX}/feedback", "admin", self.feedback, methods=["POST"])
        frame.route(f"{PREFIX}/entries", "admin", self.entries, methods=["GET"])
        frame.route(
            f"{PREFIX}/entries/{{entry_id}}", "admin", self.entry, methods=["GET", "DELETE"]
        )
        frame.route(f"{PREFIX}/invalidate", "admin", self.invalidate, methods=["POST"])
        frame.route(f"{PREFIX}/stats", "admin", self.stats, methods=["GET"])
        frame.route(f"{PREFIX}/series", "admin", self.series, methods=["GET"])
        frame.route(f"{PREFIX}/misses", "admin", self.misses, methods=["GET"])
        frame.route(f"{PREFIX}/warmup", "admin", self.warmup, methods=["POST"])
        frame.route(f"{PREFIX}/openapi.json", "admin", self.openapi, methods=["GET"])

    # --- auth --------------------------------------------------------------------------------

    def _is_admin(self, request: web.Request) -> bool:
        token = bearer_token(request.headers)
        return token is not None and hmac.compare_digest(token.encode(), self._token)

    def _require_admin(self, request: web.Request) -> None:
        if not self._is_admin(request):
            raise AuthenticationFailed("the admin API needs 'Authorization: Bearer <admin token>'")

    def _caller_tenant(self, request: web.Request) -> str | None:
        """None for the admin; else the tenant of the client's credentials, read and checked
        as on a completion request (401 without any)."""
        if self._is_admin(request):
            return None
        credentials = self._auth.credentials(request.headers)
        if not credentials:
            raise AuthenticationFailed("send the admin token or your own API key")
        return self._rule.tenant(credentials)

    # --- routes ------------------------------------------------------------------------------

    async def feedback(self, request: web.Request) -> web.Response:
        tenant = self._caller_tenant(request)
        body = parse_json_object(await request.read())
        signal = _signal(body.get("signal"))
        served = None
        if isinstance(body.get("request_id"), str):
            served = self._served.get(body["request_id"], tenant)
            if served is None:
                raise NotFound(
                    f"no cached answer is known for request {body['request_id']!r} on this replica"
                )
            entry_id = served.entry_id
        elif isinstance(body.get("entry_id"), str):
            entry_id = body["entry_id"]
        else:
            raise InvalidRequest("give 'entry_id' or 'request_id' (a string)")
        entry = await self._entry_for(entry_id, tenant)
        outcome = await self._feedback.apply(entry, signal, served)
        return _json(
            {
                "entry_id": outcome.entry_id,
                "evicted": outcome.evicted,
                "feedback": list(outcome.feedback),
                "feedback_sum": round(sum(outcome.feedback), 6),
                "ttl_s": round(outcome.ttl_s, 3),
                "threshold": self._views.effective_threshold(outcome.threshold),
            }
        )

    async def entries(self, request: web.Request) -> web.Response:
        self._require_admin(request)
        query = request.query
        unknown = set(query) - {"tenant", "namespace", "model", "limit"}
        if unknown:
            raise InvalidRequest(f"unknown query parameters: {', '.join(sorted(unknown))}")
        selector = Invalidation(
            tenant=query.get("tenant"), namespace=query.get("namespace"), model=query.get("model")
        )
        limit = _limit(query.get("limit", str(DEFAULT_LISTING)))
        entries, total = await self._service.matching(selector, limit)
        now = self._views.clock.time()
        threshold = self._views.effective_threshold
        return _json(
            {"total": total, "entries": [_summary(entry, now, threshold) for entry in entries]},
        )

    async def entry(self, request: web.Request) -> web.Response:
        self._require_admin(request)
        entry_id = request.match_info["entry_id"]
        if request.method == "DELETE":
            if not await self._service.delete(entry_id):
                raise NotFound(f"no entry {entry_id!r}")
            return _json({"entry_id": entry_id, "deleted": True})
        return _json(self._describe(await self._entry_for(entry_id, None)))

    async def invalidate(self, request: web.Request) -> web.Response:
        self._require_admin(request)
        body = parse_json_object(await request.read())
        selector = self._selector(body)
        count = await self._service.invalidate(selector)
        return _json({"invalidated": count})

    async def stats(self, request: web.Request) -> web.Response:
        self._require_admin(request)
        return _json(await self._views.stats())

    async def series(self, request: web.Request) -> web.Response:
        self._require_admin(request)
        return _json(self._views.series())

    async def misses(self, request: web.Request) -> web.Response:
        self._require_admin(request)
        return _json(self._views.misses())

    async def warmup(self, request: web.Request) -> web.StreamResponse:
        self._require_admin(request)
        if not self._views.models_ready():
            raise NotReadyForWarmUp("the semantic models are loading; retry when /readyz is 200")
        response = web.StreamResponse(headers={"Content-Type": NDJSON})
        await response.prepare(request)
        stored = failed = number = 0
        buffer = b""
        async for chunk in request.content.iter_chunked(64 * 1024):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                number += 1
                ok = await self._warm_line(response, number, line)
                stored, failed = stored + (ok is True), failed + (ok is False)
        if buffer.strip():
            number += 1
            ok = await self._warm_line(response, number, buffer)
            stored, failed = stored + (ok is True), failed + (ok is False)
        await response.write(
            orjson.dumps({"summary": {"lines": number, "stored": stored, "failed": failed}}) + b"\n"
        )
        await response.write_eof()
        return response

    async def openapi(self, request: web.Request) -> web.Response:
        self._require_admin(request)
        return _json(admin_openapi())

    # --- helpers -----------------------------------------------------------------------------

    async def _warm_line(
        self, response: web.StreamResponse, number: int, line: bytes
    ) -> bool | None:
        if not line.strip():
            return None
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            result = {"line": number, "error": f"not JSON: {exc}"}
        else:
            outcome = await self._warmup.store(number, item)
            result = {
                "line": number,
                **(
                    {"entry_id": outcome.entry_id} if outcome.entry_id else {"error": outcome.error}
                ),
            }
        await response.write(orjson.dumps(result) + b"\n")
        return "entry_id" in result

    async def _entry_for(self, entry_id: str, tenant: str | None) -> Entry:
        entry = await self._service.get_entry(entry_id)
        if entry is None or (tenant is not None and entry.tenant != tenant):
            raise NotFound(f"no entry {entry_id!r}")
        return entry

    def _selector(self, body: dict[str, Any]) -> Invalidation:
        if body.get("all") is True:
            if set(body) - {"all"}:
                raise InvalidRequest("'all' cannot be combined with other selectors")
            return Invalidation()
        for name in ("tenant_key", "tenant", "namespace", "model"):
            if name in body and not isinstance(body[name], str):
                raise InvalidRequest(f"'{name}' must be a string")
        named = [name for name in ("tenant_key", "tenant_headers", "tenant") if name in body]
        if len(named) > 1:
            raise InvalidRequest(f"give one of {', '.join(repr(n) for n in named)}, not several")
        tenant = body.get("tenant")
        if "tenant_key" in body:
            tenant = self._rule.tenant_of_key(body["tenant_key"])
        elif "tenant_headers" in body:
            tenant = self._rule.tenant(self._rule.named(body["tenant_headers"], "tenant_headers"))
        selector = Invalidation(
            tenant=tenant, namespace=body.get("namespace"), model=body.get("model")
        )
        if selector == Invalidation():
            raise InvalidRequest(
                "name what to invalidate (tenant_key, tenant_headers, tenant, namespace, model)"
                ' or send {"all": true}'
            )
        return selector

    def _describe(self, entry: Entry) -> dict[str, Any]:
        now = self._views.clock.time()
        return {
            **_identity(entry, now),
            "expires_at": entry.expires_at,
            "grace_ends_at": entry.hard_expires_at,
            "confidence": entry.confidence,
            "certainty": entry.certainty,
            "feedback": list(entry.feedback),
            "threshold": self._views.effective_threshold(entry.threshold),
            "lemma_key": entry.lemma_key is not None,
            "semantic": entry.vector is not None or entry.analysis is not None,
            **_prompt(entry),
            **_stored_answer(entry),
        }


def _stored_answer(entry: Entry) -> dict[str, Any]:
    """An embedding entry's body is its float32 vector (proxy/http/embeddings.py): its size,
    not its values, is what an operator looks at; a Responses API answer is stored whole, its
    own id included; any other entry's is its completion."""
    if entry.route is Route.EMBEDDINGS:
        return {"embedding_dimensions": len(entry.body) // 4}
    if entry.route is Route.RESPONSES:
        return {"completion": orjson.loads(entry.body)}
    return {"completion": entry.completion(entry.entry_id, int(entry.stored_at))}


def _identity(entry: Entry, now: float) -> dict[str, Any]:
    """What both an entry's listing line and its full description start with."""
    return {
        "entry_id": entry.entry_id,
        "route": str(entry.route),
        "tenant": entry.tenant,
        "namespace": entry.namespace,
        "model": entry.model,
        "stored_at": entry.stored_at,
        "age_s": round(entry.age_s(now), 3),
        "ttl_s": round(entry.ttl_s, 3),
        "fresh": entry.is_fresh(now),
    }


def _limit(raw: str) -> int:
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LISTING:
        raise InvalidRequest(f"'limit' must be a whole number from 1 to {MAX_LISTING}")
    return int(raw)


def _summary(
    entry: Entry, now: float, effective_threshold: Callable[[float], float]
) -> dict[str, Any]:
    """One line of the listing: what tells entries apart, and the start of the answer."""
    return {
        **_identity(entry, now),
        "feedback_sum": round(sum(entry.feedback), 6),
        # The similarity a semantic match to it needs.
        "threshold": effective_threshold(entry.threshold),
        "answer": _answer_start(entry),
        **_prompt(entry),
    }


def _answer_start(entry: Entry) -> str:
    """The answer's text, cut to PREVIEW_CHARS ("" for a tool call or no text; an embedding's
    dimensions, as its vector is no text)."""
    if entry.route is Route.EMBEDDINGS:
        return f"[embedding, {len(entry.body) // 4} dimensions]"
    answer = orjson.loads(entry.body)
    text: object = None
    if entry.route is Route.RESPONSES:
        text = "".join(
            part.get("text", "")
            for item in answer.get("output") or []
            if isinstance(item, dict) and item.get("type") == "message"
            for part in item.get("content") or []
            if isinstance(part, dict) and part.get("type") == "output_text"
        )
    else:
        choices = answer.get("choices") or [{}]
        first = choices[0] if isinstance(choices[0], dict) else {}
        message = first.get("message")
        text = message.get("content") if isinstance(message, dict) else first.get("text")
    text = " ".join(text.split()) if isinstance(text, str) else ""
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _prompt(entry: Entry) -> dict[str, str]:
    """The prompt, for an entry stored with `admin.store_prompts`; nothing otherwise."""
    return {} if entry.prompt is None else {"prompt": entry.prompt}


def _signal(value: Any) -> str | float:
    if value in ("useful", "irrelevant"):
        return str(value)
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise InvalidRequest('\'signal\' must be "useful", "irrelevant" or a number')


def _json(payload: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(payload), content_type="application/json")
