"""The OpenAI wire format, pure: request bodies, server-sent events, cache directives,
credential headers. No I/O.

Layer: beside tiers, below proxy.answering; imports normalize.keys and core."""
