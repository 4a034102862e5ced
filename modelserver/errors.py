"""The model server's errors: branches of Deja's one error tree (`core.errors`).

`core` is the dependency-free bottom layer both processes share; the model server imports
nothing else of the proxy's. `server.py` is the one choke point that turns any `DejaError` into
`{"error": {"message", "type", "code"}}`; anything else escaping a handler is a bug and becomes a
500 `server_error`.
"""

from __future__ import annotations

from core.errors import (
    BodyTooLarge,
    ConfigError,
    DejaError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    RateLimited,
)

# The model server's root is the tree's root; the name says where an error comes from.
ModelServerError = DejaError

__all__ = [
    "BodyTooLarge",
    "ConfigError",
    "ContextLengthExceeded",
    "EngineUnavailable",
    "InvalidRequest",
    "MethodNotAllowed",
    "ModelLoadError",
    "ModelNotFound",
    "ModelServerError",
    "NotFound",
    "Overloaded",
    "UnsupportedParameter",
]


class ModelLoadError(DejaError):
    """The weights or tokenizer could not be loaded; raised at start-up, never while serving."""

    code = "model_load_failed"


class UnsupportedParameter(InvalidRequest):
    """400: a known OpenAI parameter this server does not implement (tools, n > 1, penalties)."""

    code = "unsupported_parameter"


class ContextLengthExceeded(InvalidRequest):
    code = "context_length_exceeded"


class ModelNotFound(NotFound):
    code = "model_not_found"


class Overloaded(RateLimited):
    """429: the waiting queue is full; the client should retry after `retry_after_s`."""

    code = "server_overloaded"


class EngineUnavailable(DejaError):
    """503: the engine thread has stopped (shutdown, or a failed step); nothing can be served."""

    status = 503
    code = "engine_unavailable"
