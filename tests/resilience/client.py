"""What a client sees: one request to a proxy, read whole, with the answer's text pulled out of
JSON or SSE alike."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aiohttp
from multidict import CIMultiDict

CHAT = "/v1/chat/completions"


def chat(question: str, stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "stream": stream,
        "messages": [{"role": "user", "content": question}],
        **extra,
    }


@dataclass(frozen=True)
class Reply:
    status: int
    headers: CIMultiDict[str]
    raw: bytes

    @property
    def cache(self) -> str | None:
        return self.headers.get("X-Deja-Cache")

    @property
    def degraded(self) -> str | None:
        return self.headers.get("X-Deja-Degraded")

    @property
    def streamed(self) -> bool:
        return self.headers.get("Content-Type", "").startswith("text/event-stream")

    def json(self) -> Any:
        return json.loads(self.raw)

    def events(self) -> list[str]:
        """The `data:` payloads of an event stream."""
        return [line[6:] for line in self.raw.decode().splitlines() if line.startswith("data: ")]

    @property
    def complete(self) -> bool:
        """A JSON completion, or a stream that ended with [DONE] and carried no error."""
        if not self.streamed:
            return self.status == 200 and "choices" in self.json()
        events = self.events()
        return bool(events) and events[-1] == "[DONE]" and not any('"error"' in e for e in events)

    @property
    def text(self) -> str:
        """The assistant's answer, from a JSON body or from the deltas of a stream."""
        if not self.streamed:
            return str(self.json()["choices"][0]["message"]["content"])
        parts = []
        for event in self.events():
            if event == "[DONE]":
                continue
            chunk = json.loads(event)
            for choice in chunk.get("choices") or []:
                parts.append(choice.get("delta", {}).get("content") or "")
        return "".join(parts)

    @property
    def error(self) -> dict[str, Any]:
        """The error object of an error response, or of the error event in a stream."""
        if self.streamed:
            found = [json.loads(e) for e in self.events() if '"error"' in e]
            assert found, f"no error event in the stream: {self.raw!r}"
            return dict(found[0]["error"])
        return dict(self.json()["error"])


async def ask(
    session: aiohttp.ClientSession,
    base_url: str,
    question: str,
    stream: bool = False,
    headers: dict[str, str] | None = None,
) -> Reply:
    async with session.post(
        base_url + CHAT, json=chat(question, stream), headers=headers or {}
    ) as response:
        return Reply(response.status, CIMultiDict(response.headers), await response.read())


async def breaker_state(session: aiohttp.ClientSession, base_url: str) -> dict[str, Any]:
    async with session.get(base_url + "/readyz") as response:
        report = await response.json()
    return dict(report["breaker"])
