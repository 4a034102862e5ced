"""Answering a request: flights, the upstream call, storing an answer, verification,
warm-up, feedback.

Layer: below proxy.http, above tiers, fallback, proxy.upstream and proxy.protocol. No aiohttp
request or response objects: requests arrive as typed values (CacheRequest, CacheDirectives)."""
