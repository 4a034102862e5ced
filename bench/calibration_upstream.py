"""The calibration benchmark's upstream: it answers a Banking77 prompt by its intent group.

Each group has one answer, worded several ways: the same text with other case and spacing
(two answers that agree only after normalization) and the text with a greeting or a closing
line (two that agree only by answer embedding). Every call picks a wording at random, so a
verification's fresh answer is rarely the cached string and agreement has to come from Deja's
answer comparison. A semantic hit is right exactly when the cached answer's group is the
query's group; `group_of_answer` reads the group back from any wording.

    python -m bench.calibration_upstream PORT      # serve on its own (for a manual look)
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# One answer per Banking77 intent of the dev half (38 groups), written to differ in content.
ANSWERS: dict[str, str] = json.loads(
    (Path(__file__).resolve().parent / "calibration_answers.json").read_text()
)

GREETINGS = ("Happy to help: ", "In short: ")
CLOSINGS = (" Hope that helps.", " (Support team)")


def wordings(answer: str) -> list[str]:
    """The ways one answer may come back (the plain text first)."""
    shouty = answer.upper().replace(" ", "  ", 3)
    return [
        answer,
        shouty,
        GREETINGS[0] + answer,
        answer + CLOSINGS[0],
        GREETINGS[1] + answer + CLOSINGS[1],
    ]


def group_of_answer(text: str) -> str | None:
    """The intent whose answer `text` is, in any wording."""
    folded = " ".join(text.casefold().split())
    for group, answer in ANSWERS.items():
        if " ".join(answer.casefold().split()) in folded:
            return group
    return None


def load_workload(path: Path | None = None) -> list[tuple[str, str]]:
    """(prompt, group) of the Banking77 dev half, group without its `banking77:` prefix."""
    rows = []
    for line in (path or DATA / "banking77.dev.jsonl").read_text().splitlines():
        item = json.loads(line)
        rows.append((item["prompt"], item["group"].split(":", 1)[1]))
    return rows


class IntentUpstream:
    """An OpenAI-style /v1/chat/completions that answers by the prompt's intent group."""

    def __init__(self, groups: dict[str, str], seed: int = 0) -> None:
        missing = set(groups.values()) - set(ANSWERS)
        assert not missing, f"no answer written for {sorted(missing)}"
        self._groups = groups
        self._rng = random.Random(seed)
        self.calls = 0
        self._runner: web.AppRunner | None = None

    async def start(self, port: int = 0) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        server = site._server
        assert server is not None and server.sockets
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "intent", "object": "model"}]})

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls += 1
        prompt = body["messages"][-1]["content"]
        group = self._groups.get(prompt)
        if group is None:
            return web.json_response(
                {
                    "error": {
                        "message": "unknown prompt",
                        "type": "invalid_request_error",
                        "code": None,
                    }
                },
                status=400,
            )
        text = self._rng.choice(wordings(ANSWERS[group]))
        return web.json_response(_completion(body, text))


def _completion(body: dict[str, Any], text: str) -> dict[str, Any]:
    words = len(text.split())
    return {
        "id": f"intent-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "intent"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": words, "total_tokens": 12 + words},
    }


def main() -> None:
    import asyncio

    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0

    async def serve() -> None:
        upstream = IntentUpstream(dict(load_workload()))
        print(await upstream.start(port), flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
