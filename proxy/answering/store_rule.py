"""Which finished answers may be stored, by how their choices ended: one rule, built once from
`cache.store_truncated`, for every path that stores (a miss's answer, a warm-up line, a
verification's fresh answer).

`stop` and `tool_calls` are complete answers. `length` is an answer cut at `max_tokens`: the key
holds `max_tokens` (normalize/keys/fingerprint.py: every field but a closed list is in the
partition, and semantic matches stay inside it), so the upstream would cut a repeat of the same
request the same way, and storing it saves that repeat; its `finish_reason` is served as it came.
`cache.store_truncated: false` stores complete answers only. `content_filter`, a choice without a
finish reason, and an answer without choices are never stored. Whether the answer arrived whole at
all (a 2xx, a stream that ended with `[DONE]`, no error event, every event JSON) is the caller's to
check before it asks this rule.

A Responses API answer (Route.RESPONSES) is stored only when its `status` is `completed`: an
`incomplete` one (cut at `max_output_tokens`, or filtered) never is, whatever
`cache.store_truncated` says, nor a `failed` one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.recorder import NotStoredReason, OtherFinishReason
from normalize.keys.request import Route
from proxy.protocol.response_object import COMPLETED, is_response, status_of
from proxy.protocol.sse import CLEAN_FINISH, TRUNCATED_FINISH

# A response's status → why it is not stored.
_RESPONSE_REFUSALS = {"incomplete": NotStoredReason.INCOMPLETE, "failed": NotStoredReason.ERROR}


@dataclass(frozen=True, slots=True)
class StoreRule:
    store_truncated: bool = True

    def refusal(self, completion: Any, route: Route) -> NotStoredReason | OtherFinishReason | None:
        """None when this completion may be stored; else why not, as the recorder counts it
        (`no_choices`, `unfinished`, or the offending finish reason)."""
        if route is Route.RESPONSES:
            return _response_refusal(completion)
        choices = completion.get("choices") if isinstance(completion, dict) else None
        if not isinstance(choices, list) or not choices:
            return NotStoredReason.NO_CHOICES
        for choice in choices:
            reason = choice.get("finish_reason") if isinstance(choice, dict) else None
            if reason is None:
                return NotStoredReason.UNFINISHED
            if reason in CLEAN_FINISH:
                continue
            if reason == TRUNCATED_FINISH and self.store_truncated:
                continue
            return _refused_finish(str(reason))
        return None


def _response_refusal(response: Any) -> NotStoredReason | None:
    if not is_response(response):
        return NotStoredReason.NO_CHOICES
    status = status_of(response)
    if status == COMPLETED:
        return None
    return _RESPONSE_REFUSALS.get(status or "", NotStoredReason.UNFINISHED)


def _refused_finish(reason: str) -> NotStoredReason | OtherFinishReason:
    if reason in (NotStoredReason.LENGTH, NotStoredReason.CONTENT_FILTER):
        return NotStoredReason(reason)
    return OtherFinishReason(reason)
