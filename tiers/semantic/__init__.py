"""The similarity tier: FAISS indexes per partition, the search and the meaning guards on
each candidate.

Imports tiers.base, tiers.policies, normalize and core; the cache service reaches it through
tiers.semantic.protocol."""
