"""A client for one in-process proxy: completions as a tenant, admin calls with a token."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict

from tests.conftest import RunningProxy

TOKEN = "admin-secret"
CHAT = "/v1/chat/completions"


@dataclass
class Reply:
    status: int
    headers: CIMultiDict[str]
    body: Any


class Client:
    def __init__(self, session: aiohttp.ClientSession, proxy: RunningProxy) -> None:
        self.session = session
        self.proxy = proxy

    async def call(
        self,
        method: str,
        path: str,
        payload: Any = None,
        headers: dict[str, str] | None = None,
        data: bytes | None = None,
    ) -> Reply:
        kwargs: dict[str, Any] = {"headers": headers or {}}
        if data is not None:
            kwargs["data"] = data
        elif payload is not None:
            kwargs["json"] = payload
        async with self.session.request(method, self.proxy.url(path), **kwargs) as response:
            raw = await response.read()
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw.decode()
            return Reply(response.status, CIMultiDict(response.headers), body)

    async def ask(
        self,
        question: str,
        key: str | None = None,
        headers: dict[str, str] | None = None,
        model: str = "m",
        **extra: Any,
    ) -> Reply:
        body = {"model": model, "messages": [{"role": "user", "content": question}], **extra}
        auth = {"Authorization": f"Bearer {key}"} if key else {}
        return await self.call("POST", CHAT, body, {**auth, **(headers or {})})

    async def admin(
        self, method: str, path: str, payload: Any = None, token: str | None = TOKEN
    ) -> Reply:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return await self.call(method, f"/admin/v1/{path}", payload, headers)

    async def stored(self, question: str, **kwargs: Any) -> str:
        """Ask once (a miss) and wait until the answer is stored; returns the entry id."""
        reply = await self.ask(question, **kwargs)
        assert reply.headers["X-Deja-Cache"] == "miss", reply.headers
        entry_id = reply.headers["X-Deja-Entry"]
        await self.wait_for_entry(entry_id)
        return entry_id

    async def wait_for_entry(self, entry_id: str, timeout_s: float = 5.0) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            reply = await self.admin("GET", f"entries/{entry_id}")
            if reply.status == 200:
                return dict(reply.body)
            assert asyncio.get_running_loop().time() < deadline, f"{entry_id} was never stored"
            await asyncio.sleep(0.02)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def admin_sections(**more: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The admin token set and the TTL jitter pinned, so TTLs are exact."""
    sections: dict[str, dict[str, Any]] = {
        "admin": {"token": TOKEN},
        "ttl": {"jitter_min": 1.0, "jitter_max": 1.0},
    }
    for name, values in more.items():
        sections.setdefault(name, {}).update(values)
    return sections
