"""Deja's proxy: the `deja` command (cli/) over the composition root (composition/), edge mode
(edge/), the HTTP surface (http/), answering (answering/), and beside the tiers the upstream
client (upstream/) and the OpenAI wire format (protocol/).

Not one layer: each sub-package is a layer of its own (docs/architecture.md, "Layers";
pyproject.toml's [tool.importlinter] contracts)."""
