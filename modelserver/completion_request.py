"""OpenAI request bodies → a validated, typed `CompletionRequest`.

Both `/v1/chat/completions` and `/v1/completions` become the same value. Fields this server does
not know are ignored (the proxy in front forwards everything); known parameters it cannot honour
(tools, n > 1, logit_bias, echo, best_of, JSON modes) get a 400 naming the parameter rather than
an answer that silently ignores them. Sampling fields a request leaves out (or sends as null)
stay None here: the server fills them from its configured defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modelserver.config import ModelServerConfig
from modelserver.errors import InvalidRequest, UnsupportedParameter
from modelserver.sampler import (
    MAX_ABS_OPENAI_PENALTY,
    MAX_REPETITION_PENALTY,
    MAX_TOP_LOGPROBS,
    SamplingParams,
)
from modelserver.tokenizer import ChatMessage

MAX_STOP_STRINGS = 4
MAX_COMPLETION_LOGPROBS = 5
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    chat: bool
    """True for /v1/chat/completions, False for /v1/completions."""
    model: str
    messages: tuple[ChatMessage, ...] = ()
    prompt_text: str | None = None
    prompt_token_ids: tuple[int, ...] | None = None
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    """Not OpenAI's: Hugging Face's, accepted as vLLM accepts it (the SDKs' `extra_body`)."""
    seed: int | None = None
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0
    cache_salt: str | None = None


def parse_chat_request(body: object) -> CompletionRequest:
    fields = _object(body)
    _reject_unsupported(fields)
    for name in ("tools", "functions"):
        if fields.get(name):
            raise UnsupportedParameter(f"'{name}' is not supported by the Deja model server")
    if fields.get("tool_choice") not in (None, "none"):
        raise UnsupportedParameter("'tool_choice' is not supported by the Deja model server")
    logprobs = _optional(fields, "logprobs", bool) or False
    top_logprobs = _optional(fields, "top_logprobs", int) or 0
    if not 0 <= top_logprobs <= MAX_TOP_LOGPROBS:
        raise InvalidRequest(f"'top_logprobs' must be between 0 and {MAX_TOP_LOGPROBS}")
    if top_logprobs and not logprobs:
        raise InvalidRequest("'top_logprobs' requires 'logprobs': true")
    max_tokens = _optional(fields, "max_completion_tokens", int)
    if max_tokens is None:
        max_tokens = _optional(fields, "max_tokens", int)
    return _request(
        fields,
        chat=True,
        messages=_messages(fields.get("messages")),
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        max_tokens=_positive(max_tokens, "max_tokens"),
    )


def parse_completion_request(body: object) -> CompletionRequest:
    fields = _object(body)
    _reject_unsupported(fields)
    if fields.get("echo"):
        raise UnsupportedParameter("'echo' is not supported by the Deja model server")
    if fields.get("suffix"):
        raise UnsupportedParameter("'suffix' is not supported by the Deja model server")
    if (_optional(fields, "best_of", int) or 1) != 1:
        raise UnsupportedParameter("'best_of' must be 1")
    top_logprobs = _optional(fields, "logprobs", int)
    if top_logprobs is not None and not 0 <= top_logprobs <= MAX_COMPLETION_LOGPROBS:
        raise InvalidRequest(f"'logprobs' must be between 0 and {MAX_COMPLETION_LOGPROBS}")
    text, token_ids = _prompt(fields.get("prompt"))
    return _request(
        fields,
        chat=False,
        prompt_text=text,
        prompt_token_ids=token_ids,
        logprobs=top_logprobs is not None,
        top_logprobs=top_logprobs or 0,
        max_tokens=_positive(_optional(fields, "max_tokens", int), "max_tokens"),
    )


def _request(
    fields: dict[str, Any],
    *,
    chat: bool,
    logprobs: bool,
    top_logprobs: int,
    max_tokens: int | None,
    messages: tuple[ChatMessage, ...] = (),
    prompt_text: str | None = None,
    prompt_token_ids: tuple[int, ...] | None = None,
) -> CompletionRequest:
    """Validate the fields both routes share and build the request."""
    model = fields.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("you must provide a model parameter")
    temperature = _optional(fields, "temperature", float)
    if temperature is not None and not 0 <= temperature <= 2:
        raise InvalidRequest("'temperature' must be between 0 and 2")
    top_p = _optional(fields, "top_p", float)
    if top_p is not None and not 0 < top_p <= 1:
        raise InvalidRequest("'top_p' must be greater than 0 and at most 1")
    repetition_penalty = _optional(fields, "repetition_penalty", float)
    if repetition_penalty is not None and not 0 < repetition_penalty <= MAX_REPETITION_PENALTY:
        raise InvalidRequest(
            f"'repetition_penalty' must be greater than 0 and at most {MAX_REPETITION_PENALTY:g}"
        )
    stream_options = fields.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise InvalidRequest("'stream_options' must be an object")
    salt = fields.get("cache_salt")
    if salt is not None and not isinstance(salt, str):
        raise InvalidRequest("'cache_salt' must be a string")
    return CompletionRequest(
        chat=chat,
        model=model,
        messages=messages,
        prompt_text=prompt_text,
        prompt_token_ids=prompt_token_ids,
        stream=_optional(fields, "stream", bool) or False,
        include_usage=bool(stream_options.get("include_usage", False)),
        max_tokens=max_tokens,
        temperature=_float_or_none(temperature),
        top_p=_float_or_none(top_p),
        presence_penalty=_openai_penalty(fields, "presence_penalty"),
        frequency_penalty=_openai_penalty(fields, "frequency_penalty"),
        repetition_penalty=_float_or_none(repetition_penalty),
        seed=_optional(fields, "seed", int),
        stop=_stop(fields.get("stop")),
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        cache_salt=salt,
    )


def sampling_params(
    request: CompletionRequest,
    config: ModelServerConfig,
    *,
    max_tokens: int,
    stop_token_ids: frozenset[int],
) -> SamplingParams:
    """The engine's parameters: the request's where it set them, else the server's defaults
    (the model card's sampling; OpenAI's penalties default to 0, as OpenAI defines them)."""
    return SamplingParams(
        temperature=_or(request.temperature, config.default_temperature),
        top_p=_or(request.top_p, config.default_top_p),
        repetition_penalty=_or(request.repetition_penalty, config.default_repetition_penalty),
        presence_penalty=_or(request.presence_penalty, 0.0),
        frequency_penalty=_or(request.frequency_penalty, 0.0),
        seed=request.seed,
        max_tokens=max_tokens,
        logprobs=request.logprobs,
        top_logprobs=request.top_logprobs,
        stop_token_ids=stop_token_ids,
    )


def _or(value: float | None, default: float) -> float:
    # Not `value or default`: an explicit 0 (greedy, no penalty) is a setting, not a gap.
    return default if value is None else value


def _reject_unsupported(fields: dict[str, Any]) -> None:
    if (_optional(fields, "n", int) or 1) != 1:
        raise UnsupportedParameter("'n' must be 1: the Deja model server returns one choice")
    if fields.get("logit_bias"):
        raise UnsupportedParameter("'logit_bias' is not supported by the Deja model server")
    response_format = fields.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type", "text") != "text":
        raise UnsupportedParameter("only 'response_format': {'type': 'text'} is supported")


def _object(body: object) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    return body


def _optional(fields: dict[str, Any], name: str, kind: type) -> Any:
    value = fields.get(name)
    if value is None:
        return None
    # bool is an int in Python; JSON true is not a number, and 1 is not a boolean.
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok:
        raise InvalidRequest(f"'{name}' must be {'a number' if kind is float else kind.__name__}")
    return value


def _openai_penalty(fields: dict[str, Any], name: str) -> float | None:
    value = _optional(fields, name, float)
    if value is not None and not -MAX_ABS_OPENAI_PENALTY <= value <= MAX_ABS_OPENAI_PENALTY:
        raise InvalidRequest(f"'{name}' must be between -2 and 2")
    return _float_or_none(value)


def _float_or_none(value: float | None) -> float | None:
    return None if value is None else float(value)


def _positive(value: int | None, name: str) -> int | None:
    if value is not None and value < 1:
        raise InvalidRequest(f"'{name}' must be at least 1")
    return value


def _stop(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise InvalidRequest("'stop' must be a non-empty string or a list of them")
    if len(stops) > MAX_STOP_STRINGS:
        raise InvalidRequest(f"'stop' takes at most {MAX_STOP_STRINGS} sequences")
    return tuple(stops)


def _messages(value: object) -> tuple[ChatMessage, ...]:
    if not isinstance(value, list) or not value:
        raise InvalidRequest("'messages' must be a non-empty array")
    return tuple(_message(index, item) for index, item in enumerate(value))


def _message(index: int, item: object) -> ChatMessage:
    if not isinstance(item, dict):
        raise InvalidRequest(f"messages[{index}] must be an object")
    role = item.get("role")
    if role == "tool" or item.get("tool_calls"):
        raise UnsupportedParameter(f"messages[{index}]: tool messages are not supported")
    if role not in _ROLES:
        raise InvalidRequest(f"messages[{index}].role must be one of {sorted(_ROLES)}")
    return ChatMessage(_ROLES[role], _content(index, item.get("content")))


def _content(index: int, content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise UnsupportedParameter(f"messages[{index}]: only text content is supported")
            if not isinstance(part.get("text"), str):
                raise InvalidRequest(f"messages[{index}]: a text part needs a 'text' string")
            parts.append(part["text"])
        return "".join(parts)
    raise InvalidRequest(f"messages[{index}].content must be a string or an array of parts")


def _prompt(value: object) -> tuple[str | None, tuple[int, ...] | None]:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str | list):
        value = value[0]  # a batch of one
    if isinstance(value, str):
        return value, None
    if (
        isinstance(value, list)
        and value
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value)
    ):
        return None, tuple(value)
    raise InvalidRequest(
        "'prompt' must be a string or an array of token ids (batches of several prompts are "
        "not supported)"
    )
