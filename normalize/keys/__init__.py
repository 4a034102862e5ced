"""Request keys: canonical text, the typed CacheRequest, fingerprints, the injection screen.

Layer: the bottom of normalize; imports only core."""
