"""A client of the admin API (/admin/v1/ on the proxy's port): typed results, one error.

Every failure, whether the proxy cannot be reached, stops answering, refuses the token or
answers with an error object, becomes one `AdminError` whose message is a line an operator
can act on; `_exchange` is the one place aiohttp's exceptions and HTTP statuses are translated.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import urllib.parse
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp

from core.errors import DejaError

DEFAULT_URL = "http://127.0.0.1:8080"
PREFIX = "/admin/v1"


class AdminError(DejaError):
    """The admin API did not do what was asked; `message` says why, in one line.
    `answered_status`: the proxy's HTTP status when it answered with an error, None when it
    did not answer at all."""

    def __init__(self, message: str, answered_status: int | None = None) -> None:
        super().__init__(message)
        self.answered_status = answered_status


@dataclass(frozen=True, slots=True)
class Target:
    """Which proxy, with which credentials, and how long to wait for it."""

    url: str
    token: str = ""
    # A client's own API key instead of the admin token (feedback accepts one).
    api_key: str = ""
    timeout_s: float = 30.0


@dataclass(frozen=True, slots=True)
class EntrySummary:
    entry_id: str
    tenant: str
    namespace: str
    model: str
    age_s: float
    ttl_s: float
    fresh: bool
    feedback_sum: float
    answer: str


@dataclass(frozen=True, slots=True)
class EntryListing:
    total: int
    entries: tuple[EntrySummary, ...]
    raw: dict[str, Any] = field(compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class EntryDetail:
    entry_id: str
    route: str
    tenant: str
    namespace: str
    model: str
    stored_at: float
    age_s: float
    ttl_s: float
    fresh: bool
    expires_at: float
    grace_ends_at: float
    confidence: float
    certainty: float
    feedback: list[float]
    threshold: float
    lemma_key: bool
    semantic: bool
    completion: dict[str, Any]
    raw: dict[str, Any] = field(compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class FeedbackOutcome:
    entry_id: str
    evicted: bool
    feedback_sum: float
    ttl_s: float
    threshold: float
    raw: dict[str, Any] = field(compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class WarmedLine:
    """One line of a warm-up as the proxy answered it: stored (an entry id) or refused."""

    line: int
    entry_id: str | None
    error: str | None


@dataclass(frozen=True, slots=True)
class WarmUpTotals:
    lines: int
    stored: int
    refused: int


@dataclass(frozen=True, slots=True)
class Selector:
    """What `invalidate` removes; `everything` alone, or any of the others."""

    tenant_key: str | None = None
    tenant: str | None = None
    namespace: str | None = None
    model: str | None = None
    everything: bool = False

    def body(self) -> dict[str, Any]:
        if self.everything:
            return {"all": True}
        named = {
            "tenant_key": self.tenant_key,
            "tenant": self.tenant,
            "namespace": self.namespace,
            "model": self.model,
        }
        return {name: value for name, value in named.items() if value is not None}


class AdminClient:
    """Use as `async with AdminClient(target) as client:`; one connection pool per command."""

    def __init__(self, target: Target) -> None:
        self._target = target
        self._base = admin_base(target.url)
        self._root = self._base.removesuffix(PREFIX)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> AdminClient:
        timeout = aiohttp.ClientTimeout(
            total=None, connect=self._target.timeout_s, sock_read=self._target.timeout_s
        )
        self._session = aiohttp.ClientSession(timeout=timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._session is not None
        await self._session.close()

    # --- the API -----------------------------------------------------------------------------

    async def ready(self) -> bool:
        """Whether /readyz says the proxy is ready (its models loaded, its index rebuilt)."""
        try:
            async with self._exchange("GET", "/readyz"):
                return True
        except AdminError as exc:
            if exc.answered_status == 503:
                return False
            raise

    async def stats(self) -> dict[str, Any]:
        """The stats body as the proxy sends it (its sections grow; see the README)."""
        return await self._json("GET", "stats")

    async def entries(
        self, tenant: str | None, namespace: str | None, model: str | None, limit: int
    ) -> EntryListing:
        query = {"tenant": tenant, "namespace": namespace, "model": model, "limit": str(limit)}
        path = "entries?" + urllib.parse.urlencode(
            {k: v for k, v in query.items() if v is not None}
        )
        raw = await self._json("GET", path)
        summaries = _read(raw, lambda r: tuple(_typed(EntrySummary, e) for e in r["entries"]))
        return EntryListing(_read(raw, lambda r: int(r["total"])), summaries, raw)

    async def entry(self, entry_id: str) -> EntryDetail:
        """An entry's metadata and stored completion, as the proxy describes it."""
        raw = await self._json("GET", "entries/" + urllib.parse.quote(entry_id, safe=""))
        return _typed(EntryDetail, raw)

    async def delete(self, entry_id: str) -> None:
        await self._json("DELETE", "entries/" + urllib.parse.quote(entry_id, safe=""))

    async def invalidate(self, selector: Selector) -> int:
        raw = await self._json("POST", "invalidate", selector.body())
        return _read(raw, lambda r: int(r["invalidated"]))

    async def feedback(
        self, signal: str | float, *, entry_id: str | None = None, request_id: str | None = None
    ) -> FeedbackOutcome:
        assert (entry_id is None) != (request_id is None), "feedback names one entry or request"
        target = {"entry_id": entry_id} if entry_id is not None else {"request_id": request_id}
        raw = await self._json("POST", "feedback", {**target, "signal": signal})
        return _typed(FeedbackOutcome, raw)

    async def warm_up(self, body: AsyncIterable[bytes]) -> AsyncIterator[WarmedLine | WarmUpTotals]:
        """Streams `body` (JSONL) to the proxy and yields its verdict on each line as it comes,
        then the totals. The upload and the progress run at once: aiohttp writes the body in a
        task of its own while this reads the answer."""
        async with self._exchange("POST", "warmup", data=body) as response:
            done = False
            try:
                async for raw in response.content:
                    if not raw.strip():
                        continue
                    item = json.loads(raw)
                    if "summary" in item:
                        s = item["summary"]
                        done = True
                        yield WarmUpTotals(s["lines"], s["stored"], s["failed"])
                    else:
                        yield WarmedLine(item["line"], item.get("entry_id"), item.get("error"))
            except (ValueError, KeyError) as exc:
                raise AdminError(
                    f"{self._target.url} sent a warm-up answer Deja never sends: {exc}"
                ) from exc
            if not done:
                raise AdminError("the proxy closed the warm-up stream before its summary")

    # --- the one translation point -------------------------------------------------------------

    async def _json(self, method: str, path: str, payload: Any = None) -> Any:
        async with self._exchange(method, path, json=payload) as response:
            try:
                return await response.json(content_type=None)
            except ValueError as exc:
                raise AdminError(
                    f"{self._target.url} answered with something other than JSON"
                ) from exc

    @contextlib.asynccontextmanager
    async def _exchange(
        self, method: str, path: str, **send: Any
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """A successful response (2xx), open; anything else raised as an AdminError."""
        assert self._session is not None, "use AdminClient in `async with`"
        url = self._target.url
        try:
            async with self._session.request(
                method, self._url(path), headers=self._headers(), **send
            ) as response:
                if response.status >= 300:
                    message = await _refusal(response, url, self._target)
                    raise AdminError(message, response.status)
                yield response
        except aiohttp.ClientConnectorError as exc:
            number = exc.os_error.errno
            reason = os.strerror(number) if number else str(exc.os_error)
            raise AdminError(
                f"cannot reach the proxy at {url} ({reason}); is it running? (--url or DEJA_URL)"
            ) from exc
        except TimeoutError as exc:
            raise AdminError(
                f"the proxy at {url} did not answer within {self._target.timeout_s:g} s (--timeout)"
            ) from exc
        except aiohttp.ClientError as exc:
            raise AdminError(f"lost the connection to the proxy at {url}: {exc}") from exc

    def _url(self, path: str) -> str:
        """`path` under the admin API, or under the proxy's root when it starts with '/'."""
        return self._root + path if path.startswith("/") else f"{self._base}/{path}"

    def _headers(self) -> dict[str, str]:
        secret = self._target.token or self._target.api_key
        return {"Authorization": f"Bearer {secret}"} if secret else {}


T = TypeVar("T")


def _read(raw: Any, build: Callable[[Any], T]) -> T:
    """`build(raw)`, or an AdminError when the proxy's answer lacks what Deja's always has."""
    try:
        return build(raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise AdminError(
            f"the proxy's answer is not in the form this deja knows ({exc!r})"
        ) from exc


def _typed(kind: type[T], raw: Any) -> T:
    """A result dataclass from the JSON object of the same field names (and `raw` itself,
    for --json, when the class keeps it)."""
    names = [f.name for f in dataclasses.fields(kind)]  # type: ignore[arg-type]
    extra = {"raw": raw} if "raw" in names else {}
    return _read(raw, lambda r: kind(**{n: r[n] for n in names if n != "raw"}, **extra))


def admin_base(url: str) -> str:
    """The admin API's base under a proxy URL. The proxy's OpenAI base URL (…/v1) is accepted
    too, as clients are configured with it."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise AdminError(f"the proxy URL must be http://host:port or https://…, not {url!r}")
    path = parsed.path.rstrip("/")
    path = path.removesuffix("/v1")
    return urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, path + PREFIX, "", ""))


async def _refusal(response: aiohttp.ClientResponse, url: str, target: Target) -> str:
    """One line for an error answer: the proxy's own message, with what to do about it."""
    try:
        error = (await response.json(content_type=None))["error"]
        message = str(error["message"])
    except (ValueError, KeyError, TypeError, aiohttp.ClientError):
        return f"{url} answered {response.status} {response.reason}: is it a Deja proxy?"
    if response.status == 401:
        if not (target.token or target.api_key):
            return "no admin token given: pass --token or set DEJA_ADMIN_TOKEN"
        return f"the proxy refused the credentials ({message}); check --token or DEJA_ADMIN_TOKEN"
    if response.status == 404 and message.startswith("no route"):
        return (
            f"the proxy at {url} has no admin API: start it with an admin token"
            " (admin.token, DEJA_ADMIN_TOKEN)"
        )
    return f"{message} ({response.status})"
