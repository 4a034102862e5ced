"""The model runtime: spaCy and the sentence-transformer in child processes, batched, and
the PromptFeatures they make.

Layer: the top of normalize; the only place that starts processes or loads models."""
