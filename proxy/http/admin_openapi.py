"""The OpenAPI 3.1 description of the admin API (served at GET /admin/v1/openapi.json)."""

from __future__ import annotations

from typing import Any

_ERROR = {"$ref": "#/components/schemas/Error"}


def _response(
    description: str, schema: dict[str, Any] | None = None, media: str = "application/json"
) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description}
    if schema is not None:
        out["content"] = {media: {"schema": schema}}
    return out


def _errors(*codes: int) -> dict[str, Any]:
    names = {
        400: "Invalid input",
        401: "Missing or wrong token",
        404: "No such entry (or not yours)",
        503: "The semantic models are still loading (retry when /readyz is 200)",
    }
    return {str(code): _response(names[code], _ERROR) for code in codes}


def _query(name: str, kind: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": {"type": kind}, "description": description}


def admin_openapi() -> dict[str, Any]:
    entry_id = {"name": "entry_id", "in": "path", "required": True, "schema": {"type": "string"}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Deja admin API",
            "version": "1",
            "description": "Feedback, entries, invalidation, statistics and warm-up of a Deja proxy.",
        },
        "servers": [{"url": "/admin/v1"}],
        "security": [{"bearer": []}],
        "paths": {
            "/feedback": {
                "post": {
                    "summary": "Report on a cached answer; recomputes its TTL, may evict it",
                    "description": "The admin token, or the client's own credentials (in any form a "
                    "completion request carries them: Authorization of any scheme, api-key, x-api-key, "
                    "proxy.credential_headers) for entries of their own tenant. Two irrelevant signals "
                    "evict the entry everywhere. Negative feedback naming the request id of a semantic "
                    "hit also raises the entry's similarity floor.",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/Feedback"}
                            }
                        },
                    },
                    "responses": {
                        "200": _response(
                            "The entry after the feedback",
                            {"$ref": "#/components/schemas/FeedbackResult"},
                        ),
                        **_errors(400, 401, 404),
                    },
                }
            },
            "/entries": {
                "get": {
                    "summary": "The newest entries, newest first, and how many match in all",
                    "parameters": [
                        _query("tenant", "string", "a tenant id (as the entries show it)"),
                        _query("namespace", "string", "a namespace"),
                        _query("model", "string", "a model"),
                        _query("limit", "integer", "at most this many (1 to 1000, default 50)"),
                    ],
                    "responses": {
                        "200": _response(
                            "A page of entry summaries",
                            {
                                "type": "object",
                                "properties": {
                                    "total": {"type": "integer"},
                                    "entries": {"type": "array", "items": {"type": "object"}},
                                },
                            },
                        ),
                        **_errors(400, 401),
                    },
                }
            },
            "/entries/{entry_id}": {
                "get": {
                    "summary": "An entry's metadata and stored completion (an embedding's: its dimensions)",
                    "parameters": [entry_id],
                    "responses": {
                        "200": _response("The entry", {"type": "object"}),
                        **_errors(401, 404),
                    },
                },
                "delete": {
                    "summary": "Delete an entry from every tier and every replica",
                    "parameters": [entry_id],
                    "responses": {
                        "200": _response("Deleted", {"type": "object"}),
                        **_errors(401, 404),
                    },
                },
            },
            "/invalidate": {
                "post": {
                    "summary": "Delete the entries a selector matches, across Redis and every replica",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/Invalidation"}
                            }
                        },
                    },
                    "responses": {
                        "200": _response(
                            "How many entries went",
                            {"type": "object", "properties": {"invalidated": {"type": "integer"}}},
                        ),
                        **_errors(400, 401),
                    },
                }
            },
            "/stats": {
                "get": {
                    "summary": "Hits by tier and match kind, sizes, hit rate, savings, the false-hit estimate",
                    "responses": {
                        "200": _response("Statistics of this replica", {"type": "object"}),
                        **_errors(401),
                    },
                }
            },
            "/series": {
                "get": {
                    "summary": "This replica's last hour, one point every admin.series_interval_s: "
                    "requests per second, hit rate by tier and match kind, hit and miss latency "
                    "percentiles, tokens and dollars saved, threshold, false-hit estimate, breaker, "
                    "Redis and tier sizes (the dashboard's charts)",
                    "responses": {
                        "200": _response(
                            "{interval_s, window_s, points: [...]}, oldest point first",
                            {"type": "object"},
                        ),
                        **_errors(401),
                    },
                }
            },
            "/misses": {
                "get": {
                    "summary": "This replica's last misses (admin.recent_misses) and why they "
                    "missed: the nearest candidate's similarity and threshold, or what refused it; "
                    "never any entry's text",
                    "responses": {
                        "200": _response("{misses: [...]}, newest first", {"type": "object"}),
                        **_errors(401),
                    },
                }
            },
            "/warmup": {
                "post": {
                    "summary": "Store request/answer pairs from a JSONL body; progress streams back as NDJSON",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/x-ndjson": {
                                "schema": {"$ref": "#/components/schemas/WarmUpLine"}
                            }
                        },
                    },
                    "responses": {
                        "200": _response(
                            "One line per input line ({line, entry_id} or {line, error}), then {summary}",
                            {"type": "object"},
                            "application/x-ndjson",
                        ),
                        **_errors(401, 503),
                    },
                }
            },
            "/openapi.json": {
                "get": {
                    "summary": "This document",
                    "responses": {
                        "200": _response("OpenAPI 3.1", {"type": "object"}),
                        **_errors(401),
                    },
                }
            },
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {
                    "type": "object",
                    "properties": {
                        "error": {
                            "type": "object",
                            "properties": {
                                "message": {"type": "string"},
                                "type": {"type": "string"},
                                "code": {"type": ["string", "null"]},
                            },
                        }
                    },
                },
                "Feedback": {
                    "type": "object",
                    "required": ["signal"],
                    "properties": {
                        "entry_id": {"type": "string", "description": "From X-Deja-Entry"},
                        "request_id": {
                            "type": "string",
                            "description": "From X-Request-Id (this replica's recent requests)",
                        },
                        "signal": {
                            "oneOf": [
                                {"enum": ["useful", "irrelevant"]},
                                {
                                    "type": "number",
                                    "description": "Clamped to [-0.8, 1.2]",
                                },
                            ]
                        },
                    },
                },
                "FeedbackResult": {
                    "type": "object",
                    "properties": {
                        "entry_id": {"type": "string"},
                        "evicted": {"type": "boolean"},
                        "feedback": {"type": "array", "items": {"type": "number"}},
                        "feedback_sum": {"type": "number"},
                        "ttl_s": {"type": "number"},
                        "threshold": {"type": "number"},
                    },
                },
                "Invalidation": {
                    "type": "object",
                    "properties": {
                        "tenant_key": {
                            "type": "string",
                            "description": "A bare API key, standing for 'Authorization: Bearer "
                            "<key>' (what the OpenAI SDKs send); its tenant is invalidated",
                        },
                        "tenant_headers": {
                            "$ref": "#/components/schemas/CredentialHeaders",
                            "description": "The credential headers of a tenant's requests; "
                            "that tenant is invalidated",
                        },
                        "tenant": {
                            "type": "string",
                            "description": "A tenant id (the keyed hash, as in the access log)",
                        },
                        "namespace": {"type": "string"},
                        "model": {"type": "string"},
                        "all": {"type": "boolean"},
                    },
                },
                "WarmUpLine": {
                    "type": "object",
                    "required": ["request", "response"],
                    "properties": {
                        "request": {
                            "type": "object",
                            "description": "A full /v1/chat/completions or /v1/completions body",
                        },
                        "response": {
                            "type": "object",
                            "description": "A completion a live miss would store "
                            "(finish_reason stop, tool_calls, or length unless "
                            "cache.store_truncated is off)",
                        },
                        "namespace": {"type": "string"},
                        "api_key": {
                            "type": "string",
                            "description": "Whose tenant the entry belongs to, as a bare key "
                            "standing for 'Authorization: Bearer <key>' (default: anonymous)",
                        },
                        "headers": {
                            "$ref": "#/components/schemas/CredentialHeaders",
                            "description": "Whose tenant the entry belongs to, as the credential "
                            "headers its requests carry (instead of api_key)",
                        },
                    },
                },
                "CredentialHeaders": {
                    "type": "object",
                    "description": "Credential headers and their values, as a request carries "
                    "them: Authorization (its whole value), api-key, x-api-key or one of "
                    "proxy.credential_headers. The tenant is the keyed hash of all of them.",
                    "minProperties": 1,
                    "additionalProperties": {"type": "string"},
                },
            },
        },
    }
