"""Warm-up: storing known request/answer pairs before traffic asks for them.

Each JSONL line is `{"request": <full request body>, "response": <completion>, "namespace"?: str,
"api_key"?: str, "headers"?: {credential header: value}}`. The request is parsed, validated and
keyed by the parser live traffic goes through (proxy/protocol/request_parser.py), under the tenant
of the requests it stands for: `api_key` a bare key, standing for `Authorization: Bearer <key>`;
`headers` the credential headers themselves (Azure's `api-key`, say); neither, the anonymous
tenant (proxy/protocol/credentials.py). The answer must be one a live miss would store
(proxy/answering/store_rule.py: every choice finished with stop or tool_calls, or length unless
`cache.store_truncated` is off), and it is stored as a miss's answer is
(proxy/answering/answer_store.py): through every tier and indexed for semantic search, so later
paraphrases hit too. Logprobs in the answer set its TTL and are kept only when the request asked
for them.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from core.errors import DejaError, InvalidRequest
from core.recorder import NotStoredReason
from normalize.keys.request import Route
from normalize.prompt_features import FeatureSource
from proxy.answering.answer_store import Answer, AnswerStore
from proxy.answering.entry_builder import asked_logprobs
from proxy.protocol.credentials import CredentialRule
from proxy.protocol.directives import NAMESPACE_HEADER
from proxy.protocol.request_parser import RequestParser


class NotReadyForWarmUp(DejaError):
    """503: the semantic models are still loading. Entries stored now would get no embedding
    and could never be found by a paraphrase, so warm-up waits for /readyz."""

    status = 503
    code = "not_ready"


@dataclass(frozen=True, slots=True)
class WarmUpResult:
    line: int
    entry_id: str | None = None
    error: str | None = None


class WarmUp:
    def __init__(
        self,
        answers: AnswerStore,
        parser: RequestParser,
        credentials: CredentialRule,
        features: FeatureSource,
    ) -> None:
        self._answers = answers
        self._parser = parser
        self._credentials = credentials
        self._features = features

    async def store(self, number: int, item: Any) -> WarmUpResult:
        try:
            entry_id = await self._store(item)
        except DejaError as exc:
            return WarmUpResult(number, error=exc.message)
        return WarmUpResult(number, entry_id=entry_id)

    async def _store(self, item: Any) -> str:
        if not isinstance(item, dict):
            raise InvalidRequest("each line must be a JSON object with 'request' and 'response'")
        request, response = item.get("request"), item.get("response")
        if not isinstance(request, dict) or not isinstance(response, dict):
            raise InvalidRequest("'request' and 'response' must both be JSON objects")
        if "input" in request and "messages" not in request and "prompt" not in request:
            # A warmed response's id would be one the upstream may not hold (README,
            # "Responses API"): its answers are cached from live traffic only.
            raise InvalidRequest("warm-up takes chat and completions lines, not /v1/responses")
        route = Route.CHAT if "messages" in request else Route.COMPLETIONS
        # The line's namespace, as the header of the requests it stands for would name it.
        headers = {NAMESPACE_HEADER: str(item.get("namespace") or "")}
        parsed = self._parser.parse(route, request, self._tenant(item), headers)
        if parsed.suspicious:
            raise InvalidRequest("the prompt matches an injection pattern; it is never stored")
        creq = parsed.cache
        entry_id = f"{creq.tag}-{secrets.token_hex(8)}"
        # Served to requests like this one: logprobs it did not ask for are not kept, as on a
        # live miss (they still set the TTL).
        refusal = await self._answers.store(
            Answer(
                entry_id,
                creq,
                self._features.for_request(creq, loose_matching=True),
                response,
                strip_logprobs=not asked_logprobs(route, request),
            )
        )
        if refusal is NotStoredReason.NO_CHOICES:
            raise InvalidRequest("'response' must be a completion with choices")
        if refusal is NotStoredReason.TOO_LARGE:
            raise InvalidRequest("the answer is larger than cache.max_entry_bytes")
        if refusal is not None:
            reasons = [
                c.get("finish_reason") if isinstance(c, dict) else None for c in response["choices"]
            ]
            raise InvalidRequest(
                f"this answer is not one a live miss would store (finish_reason {reasons})"
            )
        return entry_id

    def _tenant(self, item: dict[str, Any]) -> str:
        api_key = item.get("api_key")
        if api_key is not None and not isinstance(api_key, str):
            raise InvalidRequest("'api_key' must be a string")
        if "headers" not in item:
            return self._credentials.tenant_of_key(api_key)
        if api_key is not None:
            raise InvalidRequest("give 'api_key' or 'headers', not both")
        return self._credentials.tenant(self._credentials.named(item["headers"], "headers"))
