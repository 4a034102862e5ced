"""The upstream client: the pooled HTTP client to the model, its retries and error translation.

Layer: beside tiers, below proxy.answering; imports only core."""
