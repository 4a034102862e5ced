"""Cache storage and policies: the cache service over LRU-K, Redis and the semantic tier,
replication between replicas, and the policies (policies/) they apply.

Layer: beside proxy.upstream and proxy.protocol, below fallback; imports normalize and core.
Inside it, service > replication > the tiers > their stores and policies > base."""
