"""When the upstream cannot answer: the circuit breaker and degraded answers (stale, relaxed
neighbour, fallback template).

Layer: below proxy.answering, above tiers, proxy.upstream and proxy.protocol; imports those,
normalize and core."""
