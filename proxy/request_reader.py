"""From an HTTP request to what the cache needs: body, directives, tenant, keys, features.

Authentication comes first (a refused client costs no parsing); then the body is read within
its size limit and validated, the cache-control headers parsed, and the request fingerprinted.
Prompts that look like injection attempts are marked: never stored, never matched loosely.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from core.config import DejaConfig
from normalize.features import FeatureSource, PromptFeatures
from normalize.fingerprint import TenantHasher, fingerprint
from normalize.request import CacheRequest, Route
from normalize.screen import PromptScreen
from proxy.auth import ClientAuth
from proxy.directives import CacheDirectives, parse_directives
from proxy.request_body import read_json_body, validate
from proxy.upstream import UpstreamRequest, forward_headers

UPSTREAM_PATHS = {Route.CHAT: "chat/completions", Route.COMPLETIONS: "completions"}
# Client headers that are Deja's business, not the upstream's.
_NOT_FORWARDED = frozenset({"authorization", "cache-control", "accept-encoding", "content-type"})


@dataclass(frozen=True, slots=True)
class ReadRequest:
    body: dict[str, Any]
    directives: CacheDirectives
    cache: CacheRequest
    features: PromptFeatures
    suspicious: bool
    client_headers: Mapping[str, str]
    auth: ClientAuth

    def upstream_request(self, payload: dict[str, Any]) -> UpstreamRequest:
        """A call carrying `payload` on this request's behalf (its headers, its auth). Built
        only when needed: a hit never pays for it."""
        headers = forward_headers(self.client_headers, drop=_NOT_FORWARDED)
        headers.append(("Content-Type", "application/json"))
        authorization = self.auth.upstream_authorization(self.client_headers)
        if authorization:
            headers.append(("Authorization", authorization))
        path = UPSTREAM_PATHS[self.cache.route]
        return UpstreamRequest("POST", path, tuple(headers), orjson.dumps(payload))


class RequestReader:
    def __init__(
        self,
        config: DejaConfig,
        auth: ClientAuth,
        hasher: TenantHasher,
        screen: PromptScreen,
        features: FeatureSource,
    ) -> None:
        self._config = config
        self._auth = auth
        self._hasher = hasher
        self._screen = screen
        self._features = features

    async def read(self, request: web.Request, route: Route) -> ReadRequest:
        api_key = self._auth.client_key(request.headers)
        body = await read_json_body(request, self._config.server.max_body_bytes)
        validate(route, body, self._config.server.max_messages)
        directives = parse_directives(request.headers)
        tenant = self._hasher.tenant_of(api_key)
        creq = fingerprint(route, body, tenant, directives.namespace)
        suspicious = self._screen.suspicious(body)
        features = self._features.for_request(creq, loose_matching=not suspicious)
        return ReadRequest(
            body, directives, creq, features, suspicious, request.headers, self._auth
        )
