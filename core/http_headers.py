"""HTTP header names every layer reasons about: the proxy's relays forward headers, and config
validation refuses credential header names that could never reach the upstream as sent."""

from __future__ import annotations

# Headers that describe one hop, never forwarded (RFC 9110 §7.6.1), plus the ones aiohttp
# recomputes for the body it sends or has already decoded.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "content-encoding",
    }
)
