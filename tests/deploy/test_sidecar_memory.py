"""The sidecar's memory request and limit against the measured memory of `deja serve` run with
the sidecar's own configuration (its ConfigMap, its environment, the image's environment), its
embedding and analysis worker processes included.

    .venv/bin/pytest -q -s -m slow tests/deploy/test_sidecar_memory.py

prints the numbers quoted in deploy/k8s/sidecar.yaml. Slow (it loads the real models and stores
a few hundred entries), so it runs in `make test-all`.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.dockerfile import image
from tests.deploy.k8s import all_documents, container_env, pod_templates, write_config_maps
from tests.deploy.listeners import proxy_config
from tests.support.blocking_http import http
from tests.support.processes import ServerProcess
from tests.support.redis_server import free_port
from tests.support.stub_process import StubProcess

pytestmark = [pytest.mark.slow, pytest.mark.models]

MIB = 1024 * 1024
# Distinct prompts stored after the baseline, to measure what one more entry costs.
GROWTH_PROMPTS = 300
WORDS = ["river", "violin", "carbon", "tariff", "glacier", "sonnet", "lattice", "harbor"]


@dataclass(frozen=True, slots=True)
class TreeMemory:
    processes: int
    rss_bytes: int  # sum of VmRSS: counts shared library pages once per process
    pss_bytes: int  # sum of Pss: shared pages split between their users, as a cgroup sees
    proxy_rss_bytes: int  # `deja serve` itself, where the entries and the index live

    def line(self) -> str:
        return (
            f"{self.processes} processes, RSS {self.rss_bytes / MIB:.0f} MiB "
            f"(the proxy {self.proxy_rss_bytes / MIB:.0f}), PSS {self.pss_bytes / MIB:.0f} MiB"
        )


def process_tree(pid: int) -> list[int]:
    tree, frontier = [pid], [pid]
    while frontier:
        parent = frontier.pop()
        for task in Path(f"/proc/{parent}/task").iterdir():
            children = (task / "children").read_text().split()
            tree += map(int, children)
            frontier += map(int, children)
    return tree


def tree_memory(pid: int) -> TreeMemory:
    rss = pss = 0
    pids = process_tree(pid)
    for each in pids:
        rss += _rss_bytes(each)
        pss += _kib(Path(f"/proc/{each}/smaps_rollup").read_text(), "Pss:") * 1024
    return TreeMemory(len(pids), rss, pss, _rss_bytes(pid))


def _rss_bytes(pid: int) -> int:
    return _kib(Path(f"/proc/{pid}/status").read_text(), "VmRSS:") * 1024


def _kib(text: str, field: str) -> int:
    line = next(ln for ln in text.splitlines() if ln.startswith(field))
    return int(line.split()[1])


def _quantity_bytes(quantity: str) -> int:
    units = {"Ki": 1024, "Mi": MIB, "Gi": 1024 * MIB}
    return int(quantity[:-2]) * units[quantity[-2:]]


def _ask(proxy: ServerProcess, text: str) -> str:
    reply = http(
        proxy,
        "POST",
        "/v1/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": text}]},
        headers={"Authorization": "Bearer app-internal-key"},
    )
    assert reply.status == 200, reply.body
    return reply.headers["X-Deja-Cache"]


def test_the_memory_request_and_limit_cover_the_measured_process_tree(
    tmp_path: Path, redis_url: str
) -> None:
    docs = all_documents()
    (template,) = [t for t in pod_templates(docs) if t.workload == "my-app"]
    (container,) = [c for c in template.spec["containers"] if c["name"] == "deja"]
    files = write_config_maps(docs, template, container, tmp_path)
    config_path = files["/etc/deja"] / "deja.yaml"
    assert container["args"][:4] == ["deja", "serve", "--config", "/etc/deja/deja.yaml"]
    upstream = StubProcess().start()
    port = free_port()
    argv = [sys.executable, "-m", "proxy.cli", "serve", "--config", str(config_path)]
    # The address, upstream and Redis of this machine; everything else as in the pod.
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    argv += ["--upstream", upstream.base_url, "--redis", redis_url]
    env = {**image().env, **container_env(container)}
    proxy = ServerProcess("sidecar", argv, port, env=env)
    try:
        started = time.monotonic()
        proxy.wait_ready(timeout_s=600)
        ready_s = time.monotonic() - started
        for text in ("What is the capital of France?", "How do I reverse a list in Python?"):
            assert _ask(proxy, text) == "miss"
        assert _ask(proxy, "How can I reverse a Python list?") == "hit"  # a semantic match
        assert _ask(proxy, "What is the capital of France?") == "hit"
        baseline = tree_memory(proxy.proc.pid)
        for i in range(GROWTH_PROMPTS):
            a, b = WORDS[i % len(WORDS)], WORDS[i // len(WORDS) % len(WORDS)]
            _ask(proxy, f"Write note {i} on how a {a} differs from a {b} in {i * 7} words.")
        grown = tree_memory(proxy.proc.pid)
    finally:
        proxy.stop()
        upstream.stop()
    # The workers' memory does not grow with the entries (measured to 3,000: flat after the
    # first batches); the proxy's grows linearly, so project it to the configured bound.
    per_entry = (grown.proxy_rss_bytes - baseline.proxy_rss_bytes) / GROWTH_PROMPTS
    max_entries = int(proxy_config(container["args"], env, files)["semantic"]["max_entries"])
    full = grown.rss_bytes + per_entry * (max_entries - GROWTH_PROMPTS)
    print(f"\nready after {ready_s:.0f} s; after 4 requests: {baseline.line()}")
    print(f"after {GROWTH_PROMPTS} more entries: {grown.line()}")
    print(f"{per_entry / 1024:.1f} KiB per stored entry; {full / MIB:.0f} MiB at {max_entries}")
    resources = container["resources"]
    request = _quantity_bytes(resources["requests"]["memory"])
    limit = _quantity_bytes(resources["limits"]["memory"])
    assert grown.rss_bytes <= request, f"request {request / MIB} MiB < {grown.line()}"
    # A quarter to spare: request bodies in flight, allocator slack, a slower-filling worker.
    assert full * 1.25 <= limit, f"limit {limit / MIB} MiB < 1.25 x {full / MIB:.0f} MiB"
