"""Conversation-aware fingerprints: tenant, partition, exact key and lemma key.

Only the last user turn is ever matched loosely (by canonical text, lemmas or meaning);
everything else that can change the answer must match byte for byte, so it goes into the
partition hash:

    partition = H(version, route, tenant, namespace,
                  every request field except EXCLUDED_FIELDS and `messages`,
                  the messages before the last user turn, that turn's non-content fields)
    exact_key = tag(partition) + H(partition, canonical(last user text))
    lemma_key = tag(partition) + H(partition, lemma skeleton + meaning signature)

When the last user turn is not plain text, or anything follows it (a tool loop), or the route
is /v1/completions, the whole input goes into the partition and only exact matches count.

/v1/responses is keyed the same way over its `input` (normalize/keys/response_input.py), with
`instructions`, `previous_response_id`, `conversation` and every other field in the partition.
`store` is keyed there too, unlike chat: it decides whether the upstream keeps the response, and
so whether the response's id can be continued from or fetched (README, "Responses API").
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from normalize.keys.request import PARTITION_TAG_CHARS, CacheRequest, Route
from normalize.keys.response_input import split_input
from normalize.keys.text import canonical_text

# Request fields that never change the answer (the closed list of DESIGN.md). Everything
# else, including fields Deja does not know, is part of the key.
EXCLUDED_FIELDS = frozenset(
    {"stream", "stream_options", "user", "metadata", "store", "service_tier", "prompt_cache_key"}
)
# The Responses API's: the same, but `store` is keyed (see the module docstring).
RESPONSES_EXCLUDED_FIELDS = EXCLUDED_FIELDS - {"store"}
# Each route's prompt field: keyed apart from the other fields (messages, input), or with them.
_PROMPT_FIELDS = {Route.CHAT: "messages", Route.RESPONSES: "input"}
ANONYMOUS_TENANT = "anonymous"
SHARED_TENANT = "shared"
_KEY_VERSION = 1
# Fixed development secret, used only when `cache.tenant_secret` is empty (a warning is logged).
DEV_TENANT_SECRET = "deja-development-tenant-secret"


class TenantHasher:
    """Turns the credentials a request carries into a tenant id with a keyed hash, so ids
    reveal nothing of the keys (the rule: README, "Authentication")."""

    def __init__(self, secret: str, share_across_tenants: bool = False) -> None:
        self._secret = (secret or DEV_TENANT_SECRET).encode()
        self._shared = share_across_tenants

    def tenant_of_credentials(self, credentials: Iterable[tuple[str, str]]) -> str:
        """The tenant of every (header name, value) a request carries. Names are compared
        lower-cased and the pairs sorted, so case and order do not matter; every name and
        value is length-prefixed, so no two different sets hash the same material. None at
        all is the anonymous tenant, which no keyed tenant can be (32 hex digits)."""
        if self._shared:
            return SHARED_TENANT
        pairs = sorted(
            (name.lower().encode("utf-8", "surrogatepass"), value.encode("utf-8", "surrogatepass"))
            for name, value in credentials
        )
        if not pairs:
            return ANONYMOUS_TENANT
        material = b"".join(len(part).to_bytes(4, "big") + part for pair in pairs for part in pair)
        return hmac.digest(self._secret, material, "sha256").hex()[:32]

    def tenant_of(self, api_key: str | None) -> str:
        """The tenant of a bare API key (warm-up's `api_key`, invalidate's `tenant_key`): it
        stands for `Authorization: Bearer <key>`, what the OpenAI SDKs send. No key, or an
        empty one, is the anonymous tenant."""
        credentials = [("authorization", f"Bearer {api_key}")] if api_key else []
        return self.tenant_of_credentials(credentials)


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON (UTF-8): sorted keys, no spaces."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _keyed_fields(route: Route, body: Mapping[str, Any]) -> dict[str, Any]:
    """The request fields that are part of the key, with integral floats as integers:
    `temperature: 1` and `temperature: 1.0` ask the same thing. (Only top-level numbers are
    normalized; nested JSON such as tool schemas is hashed as sent.)"""
    excluded = RESPONSES_EXCLUDED_FIELDS if route is Route.RESPONSES else EXCLUDED_FIELDS
    prompt_field = _PROMPT_FIELDS.get(route)
    keyed: dict[str, Any] = {}
    for name, value in body.items():
        if name in excluded or name == prompt_field:
            continue
        keyed[name] = int(value) if isinstance(value, float) and value.is_integer() else value
    if route is Route.RESPONSES:
        # The upstream keeps a response unless told `store: false` (absent or null: it does).
        keyed["store"] = body.get("store") is not False
    return keyed


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


def derived_key(partition: str, kind: str, material: str) -> str:
    """A lookup key inside `partition`; starts with the partition's tag (see request.py)."""
    return partition[:PARTITION_TAG_CHARS] + _digest(partition, kind, material)[:32]


def lemma_key(partition: str, key_material: str) -> str:
    return derived_key(partition, "lemma", key_material)


def plain_user_text(message: Mapping[str, Any]) -> str | None:
    """The text of a user turn made only of text, or None (images, audio, files...)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        texts: list[str] = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                return None
            text = part.get("text")
            if not isinstance(text, str):
                return None
            texts.append(text)
        return "\n".join(texts)
    return None


def fingerprint(
    route: Route,
    body: Mapping[str, Any],
    tenant: str,
    namespace: str,
) -> CacheRequest:
    """Build the CacheRequest of a validated OpenAI request body."""
    header = [_KEY_VERSION, str(route), tenant, namespace, _keyed_fields(route, body)]
    prompt_text: str | None = None
    if route is Route.CHAT:
        messages: Sequence[Mapping[str, Any]] = body["messages"]
        last = len(messages) - 1
        text = plain_user_text(messages[last]) if messages[last].get("role") == "user" else None
        if text is not None:
            # Everything but the last turn's content is context that must match exactly; the
            # turn's other fields (name, ...) and whether it was a string or a list of text
            # parts are context too.
            turn = {k: v for k, v in messages[last].items() if k != "content"}
            turn["content_form"] = type(messages[last]["content"]).__name__
            partition = _digest(canonical_json([*header, list(messages[:last]), turn]))
            prompt_text = text
            exact = derived_key(partition, "exact", canonical_text(text))
        else:
            partition = _digest(canonical_json([*header, list(messages)]))
            exact = derived_key(partition, "whole", "")
    elif route is Route.RESPONSES:
        split = split_input(body.get("input"))
        if split is not None:
            partition = _digest(canonical_json([*header, split.context, split.turn]))
            prompt_text = split.text
            exact = derived_key(partition, "exact", canonical_text(split.text))
        else:
            partition = _digest(canonical_json([*header, body.get("input")]))
            exact = derived_key(partition, "whole", "")
    else:
        # /v1/completions: the prompt (in `keyed`) is whitespace-sensitive text; hashed raw.
        partition = _digest(canonical_json(header))
        exact = derived_key(partition, "whole", "")
    stream = body.get("stream") is True
    options = body.get("stream_options")
    include_usage = stream and isinstance(options, dict) and options.get("include_usage") is True
    return CacheRequest(
        route=route,
        tenant=tenant,
        namespace=namespace,
        model=str(body.get("model", "")),
        partition=partition,
        exact_key=exact,
        prompt_text=prompt_text,
        stream=stream,
        include_usage=include_usage,
        upstream_keeps=route is Route.RESPONSES and body.get("store") is not False,
    )
