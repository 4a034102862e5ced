"""Cache policies: LRU-K replacement, TTLs, similarity thresholds. Small objects, no I/O, an
injected clock or random source; they import only core."""
