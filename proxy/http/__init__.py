"""The HTTP surface: routes, reading requests, writing responses, request ids, logs, metrics.

Layer: below the composition root and edge mode, above everything else. May import
proxy.answering, proxy.upstream, proxy.protocol, fallback, tiers, normalize and core; the only
layer that sees aiohttp request and response objects."""
