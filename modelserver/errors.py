"""The model server's one error tree.

The model server is its own process (one per GPU) and must not depend on the proxy's packages, so
it keeps its own small tree instead of importing `core.errors`; the statuses, OpenAI `type`s and
codes are the same ones DESIGN.md's table lists. `server.py` is the one choke point that turns any
`ModelServerError` into `{"error": {"message", "type", "code"}}`; anything else escaping a
handler is a bug and becomes a 500 `server_error`.
"""

from __future__ import annotations


class ModelServerError(Exception):
    """Root of every error the model server raises on purpose."""

    status: int = 500
    error_type: str = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class ConfigError(ModelServerError):
    """The configuration is invalid; raised at start-up, never while serving."""

    code = "invalid_config"


class ModelLoadError(ModelServerError):
    """The weights or tokenizer could not be loaded; raised at start-up, never while serving."""

    code = "model_load_failed"


class InvalidRequest(ModelServerError):
    """400: bad JSON, wrong or missing fields, a prompt that does not fit the context."""

    status = 400
    error_type = "invalid_request_error"
    code = "invalid_request"


class UnsupportedParameter(InvalidRequest):
    """400: a known OpenAI parameter this server does not implement (tools, n > 1, penalties)."""

    code = "unsupported_parameter"


class ContextLengthExceeded(InvalidRequest):
    code = "context_length_exceeded"


class NotFound(InvalidRequest):
    status = 404
    code = "not_found"


class ModelNotFound(NotFound):
    code = "model_not_found"


class MethodNotAllowed(InvalidRequest):
    status = 405
    code = "method_not_allowed"


class BodyTooLarge(InvalidRequest):
    status = 413
    code = "request_too_large"


class Overloaded(ModelServerError):
    """429: the waiting queue is full; the client should retry after `retry_after_s`."""

    status = 429
    error_type = "rate_limit_error"
    code = "server_overloaded"

    def __init__(self, message: str, *, retry_after_s: int, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


class EngineUnavailable(ModelServerError):
    """503: the engine thread has stopped (shutdown, or a failed step); nothing can be served."""

    status = 503
    code = "engine_unavailable"
