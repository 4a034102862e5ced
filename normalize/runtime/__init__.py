"""The model runtime: spaCy and the sentence-transformer in child processes, batched, and
the PromptFeatures they make; the same sentence encoder in process for benchmarks and tests.

Layer: the top of normalize; the only place that starts processes or loads models."""
