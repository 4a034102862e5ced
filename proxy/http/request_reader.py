"""From an HTTP request to what the cache needs: body, directives, tenant, keys, features.

Authentication comes first (a refused client costs no parsing); then the body is read within
its size limit and validated, the cache-control headers parsed, and the request fingerprinted
under the tenant of its credential headers (proxy/protocol/credentials.py).
Prompts that look like injection attempts are marked: never stored, never matched loosely.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from core.config import ServerConfig
from normalize.keys.request import CacheRequest, Route
from normalize.keys.screen import PromptScreen
from normalize.prompt_features import FeatureSource, PromptFeatures
from proxy.http.body import read_body
from proxy.http.client_auth import ClientAuth
from proxy.protocol.credentials import CredentialRule, Credentials
from proxy.protocol.directives import (
    EXPLAIN_HEADER,
    NAMESPACE_HEADER,
    STORE_TTL_HEADER,
    CacheDirectives,
)
from proxy.protocol.request_parser import ParsedRequest, RequestParser, parse_json_object
from proxy.upstream.client import UpstreamRequest

UPSTREAM_PATHS = {
    Route.CHAT: "chat/completions",
    Route.COMPLETIONS: "completions",
    Route.RESPONSES: "responses",
}
# Client headers that are Deja's business, not the upstream's (credentials: ClientAuth's).
_NOT_FORWARDED = frozenset({"cache-control", "accept-encoding", "content-type"})


@dataclass(frozen=True, slots=True)
class ReadRequest:
    body: dict[str, Any]
    directives: CacheDirectives
    cache: CacheRequest
    features: PromptFeatures
    suspicious: bool
    client_headers: Mapping[str, str]
    auth: ClientAuth
    # The body as the client sent it (edge mode relays it to the worker unchanged).
    raw: bytes = b""

    def upstream_request(self, payload: dict[str, Any]) -> UpstreamRequest:
        """A call carrying `payload` on this request's behalf (its headers, its auth). Built
        only when needed: a hit never pays for it."""
        headers = self.auth.upstream_headers(self.client_headers, _NOT_FORWARDED)
        headers.append(("Content-Type", "application/json"))
        path = UPSTREAM_PATHS[self.cache.route]
        return UpstreamRequest("POST", path, tuple(headers), orjson.dumps(payload))


_MEMO_ENTRIES = 1024
_MEMO_MAX_BODY_BYTES = 8 * 1024


class RequestReader:
    def __init__(
        self,
        server: ServerConfig,
        auth: ClientAuth,
        rule: CredentialRule,
        screen: PromptScreen,
        features: FeatureSource,
    ) -> None:
        self._server = server
        self._auth = auth
        self._rule = rule
        self._parser = RequestParser(server.max_messages, screen)
        self._features = features
        self._recent: dict[tuple[object, ...], ParsedRequest] = {}

    async def read(self, request: web.Request, route: Route) -> ReadRequest:
        headers = request.headers
        credentials = self._auth.credentials(headers)
        raw = await read_body(request, self._server.max_body_bytes)
        # Everything derived below depends on these and nothing else.
        memo_key = (
            route,
            raw,
            credentials,
            headers.get("Cache-Control"),
            headers.get(NAMESPACE_HEADER),
            headers.get(STORE_TTL_HEADER),
            headers.get(EXPLAIN_HEADER),
        )
        parsed = self._recent.get(memo_key)
        if parsed is None:
            parsed = self._parse(route, raw, credentials, headers)
            self._remember(memo_key, parsed, len(raw))
        creq = parsed.cache
        features = self._features.for_request(creq, loose_matching=not parsed.suspicious)
        return ReadRequest(
            parsed.body,
            parsed.directives,
            creq,
            features,
            parsed.suspicious,
            headers,
            self._auth,
            raw,
        )

    def _parse(
        self, route: Route, raw: bytes, credentials: Credentials, headers: Mapping[str, str]
    ) -> ParsedRequest:
        body = parse_json_object(raw)
        return self._parser.parse(route, body, self._rule.tenant(credentials), headers)

    def _remember(self, key: tuple[object, ...], parsed: ParsedRequest, size: int) -> None:
        # Repeated identical requests are what a cache serves most; parsing, validating and
        # hashing them again is a large share of a hit's cost. The memo is small and bounded,
        # and only small bodies go in. (Bodies are read-only from here on: never mutated.)
        if size > _MEMO_MAX_BODY_BYTES:
            return
        if len(self._recent) >= _MEMO_ENTRIES:
            self._recent.clear()
        self._recent[key] = parsed
