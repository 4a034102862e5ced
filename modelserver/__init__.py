"""Deja's model server: an OpenAI-compatible server over a Llama-family model, with a paged KV
cache, prefix reuse and continuous batching. See docs/modelserver.md; start with `cli.main`."""
