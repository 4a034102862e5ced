"""Request → keys and features: canonical text, fingerprints and keys (keys/), meaning analysis
and guards (meaning/), the PromptFeatures seam (prompt_features.py), and the model runtime
(runtime/) that computes them.

Layer: above core alone, below tiers, proxy.upstream and proxy.protocol; imports only core.
Inside it, runtime > prompt_features > meaning > keys."""
