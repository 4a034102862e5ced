"""The dashboard as an operator sees it: a real `deja serve` (semantic tier on, Redis, prompts
kept), the stub upstream, traffic of customer questions from data/banking77.dev.jsonl (grouped
by intent), then a headless Chromium that signs in and takes the README's screenshot.

    python scripts/dashboard_screenshot.py [docs/dashboard.png] [--seconds 40]

Run from the repository root, with /work/shared/data (or DEJA_DATA) holding banking77.dev.jsonl;
it loads the real models once (a minute or two on two cores). Prints what the page showed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.browser import headless_page
from tests.support.processes import (
    ServerProcess,
    proxy,
)
from tests.support.redis_server import RedisServer, free_port
from tests.support.stub_process import stub_argv

TOKEN = "dashboard-demo"
DATA = Path(os.environ.get("DEJA_DATA", "/work/shared/data")) / "banking77.dev.jsonl"


def groups(limit: int) -> list[list[str]]:
    """Customer questions grouped by intent (same intent: a paraphrase, more or less)."""
    by_group: dict[str, list[str]] = {}
    for line in DATA.read_text().splitlines():
        row = json.loads(line)
        by_group.setdefault(row["group"], []).append(row["prompt"])
    return [prompts[:3] for prompts in list(by_group.values())[:limit]]


async def traffic(url: str, seconds: float) -> None:
    """A new intent now and then (its questions: a miss, then paraphrases that may hit
    semantically), and repeats of what was asked (exact hits) in between."""
    rng = random.Random(7)
    intents = groups(40)
    asked: list[str] = []
    headers = {"Authorization": "Bearer sk-demo"}
    deadline = asyncio.get_running_loop().time() + seconds
    async with aiohttp.ClientSession() as session:
        while asyncio.get_running_loop().time() < deadline:
            fresh = intents.pop() if intents and (not asked or rng.random() < 0.3) else []
            for prompt in fresh or [rng.choice(asked)]:
                body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]}
                async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers):
                    pass
                # Long enough for a miss's answer to be stored before its paraphrase comes.
                await asyncio.sleep(0.4 if fresh else 0.03)
            asked += fresh


async def shoot(url: str, out: Path, seconds: float) -> None:
    load = asyncio.create_task(traffic(url, seconds))
    with tempfile.TemporaryDirectory() as profile:
        async with headless_page(Path(profile), height=2300) as page:
            await page.open(f"{url}/admin/")
            await page.evaluate(
                f"document.getElementById('token').value = {json.dumps(TOKEN)};"
                "document.getElementById('login-form').requestSubmit()"
            )
            await load
            await asyncio.sleep(2.5)  # the page's next refresh
            await page.screenshot(out)
            shown = await page.evaluate(
                "({hits: document.getElementById('total-hits').textContent,"
                " misses: document.getElementById('total-misses').textContent,"
                " kinds: [...document.querySelectorAll('path[data-series]')]"
                ".map(p => p.dataset.series + ':' + p.dataset.points)})"
            )
            print(json.dumps(shown, indent=1))
            print("page errors:", page.errors)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?", default="docs/dashboard.png")
    parser.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args()
    redis = RedisServer()
    redis.start()
    port = free_port()
    stub = ServerProcess("stub", stub_argv(port), port)
    server = None
    try:
        stub.wait_ready("/v1/models", timeout_s=30)
        server = proxy(
            f"{stub.url}/v1",
            redis.url,
            {
                "DEJA_ADMIN__TOKEN": TOKEN,
                "DEJA_ADMIN__STORE_PROMPTS": "true",
                "DEJA_ADMIN__SERIES_INTERVAL_S": "2",
                "DEJA_SERVER__ACCESS_LOG": "false",
            },
        )
        server.wait_ready(timeout_s=600)
        asyncio.run(shoot(server.url, Path(args.out), args.seconds))
    finally:
        if server is not None:
            server.stop()
        stub.stop()
        redis.close()


if __name__ == "__main__":
    main()
