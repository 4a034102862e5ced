"""The dashboard in a real headless Chromium, against a live proxy under load.

The page is opened without a token (a login form, and the API refuses the page's calls), then
with a wrong one (refused, back to the form), then with the right one: its charts must be drawn
from the live series (SVG paths whose point counts grow while the load runs), its numbers must
match the stats API once the load stops, and its buttons must give feedback and delete entries.
Nothing the page did may raise an error or a Content-Security-Policy violation.

The screenshot goes to $DEJA_DASHBOARD_SCREENSHOT when set, else into the test's temporary
folder (the README's, with the semantic tier on, is scripts/dashboard_screenshot.py's).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.admin.conftest import TOKEN, Client, admin_sections
from tests.conftest import ProxyFactory
from tests.support.browser import CHROMIUM, BrowserPage, headless_page

pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="needs Debian's chromium (scripts/ensure-system.sh installs it; "
        "locally: sudo apt-get install -y chromium)",
    ),
]


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def _is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


QUESTIONS = [f"What is the capital of country number {n}?" for n in range(12)]


async def _load(client: Client, stop: asyncio.Event) -> None:
    """Questions asked again and again: the first time of each a miss, then hits."""
    n = 0
    while not stop.is_set():
        await client.ask(QUESTIONS[n % len(QUESTIONS)] if n % 7 else f"A new question {n}")
        n += 1
        await asyncio.sleep(0.01)


def _points(series: str) -> str:
    """How many points the chart line named `series` has (0 when not drawn)."""
    selector = json.dumps(f'path[data-series="{series}"]')
    return f"Number(document.querySelector({selector})?.dataset.points || 0)"


async def _refused_without_the_token(page: BrowserPage, url: str) -> None:
    await page.open(url)
    assert await page.evaluate("!document.getElementById('login').hidden")
    assert await page.evaluate("document.getElementById('dashboard').hidden")
    assert await page.evaluate("document.querySelectorAll('svg path').length") == 0
    status = "fetch('/admin/v1/series').then(r => r.status)"
    assert await page.evaluate(status) == 401
    await page.evaluate(
        "document.getElementById('token').value = 'not-the-token';"
        "document.getElementById('login-form').requestSubmit()"
    )
    await page.wait_for("document.getElementById('login-error').textContent.includes('refused')")
    assert await page.evaluate("document.getElementById('dashboard').hidden")
    assert await page.evaluate("sessionStorage.length") == 0
    # The browser reports each refused call (401) as an error: those were the point here.
    assert page.errors and all("401" in error for error in page.errors), page.errors
    page.errors.clear()


async def test_the_dashboard_draws_live_charts_and_acts_on_entries(
    proxy_factory: ProxyFactory,
    session: aiohttp.ClientSession,
    redis_url: str,
    tmp_path: Path,
) -> None:
    proxy = await proxy_factory(
        **admin_sections(
            admin={"series_interval_s": 0.5, "store_prompts": True}, redis={"url": redis_url}
        )
    )
    client = Client(session, proxy)
    stop = asyncio.Event()
    load = asyncio.create_task(_load(client, stop))
    try:
        async with headless_page(tmp_path / "profile", height=2400) as page:
            await _refused_without_the_token(page, proxy.url("/admin/"))

            await page.evaluate(
                f"document.getElementById('token').value = {json.dumps(TOKEN)};"
                "document.getElementById('login-form').requestSubmit()"
            )
            await page.wait_for("!document.getElementById('dashboard').hidden")
            assert await page.evaluate("location.href") == proxy.url("/admin/")
            assert await page.evaluate("sessionStorage.getItem('deja-admin-token')") == TOKEN
            assert await page.evaluate("localStorage.length + document.cookie.length") == 0

            # Drawn from the live series, and growing with it.
            drawn = await page.wait_for(f"{_points('requests/s')} >= 3 && {_points('requests/s')}")
            await page.wait_for(f"{_points('requests/s')} > {drawn}")
            lines = ("all hits", "lru_k/exact", "hit p50", "miss p99", "threshold", "USD saved")
            for line in (*lines, "completion tokens", "semantic entries", "requests/s"):
                assert await page.evaluate(_points(line)) >= 1, line
            assert await page.evaluate(_points("false-hit rate")) >= 1
            assert await page.evaluate("document.querySelector('[data-rule=\"target\"]') !== null")
            await page.wait_for("document.querySelectorAll('#misses tr').length > 0")
            await page.wait_for("document.querySelectorAll('#entries tr').length > 0")
            assert await page.evaluate("document.getElementById('redis').textContent") == "up"
            prompts = await page.evaluate(
                "[...document.querySelectorAll('#entries tr')].map(r => r.cells[2].textContent)"
            )
            assert all(p in QUESTIONS or p.startswith("A new question") for p in prompts), prompts
            assert await page.evaluate("document.getElementById('prompt-note').hidden")

            stop.set()
            await load
            await _matches_the_stats_api(page, client)
            await _acts_on_an_entry(page, client)

            shot = Path(os.environ.get("DEJA_DASHBOARD_SCREENSHOT", tmp_path / "dashboard.png"))
            await page.evaluate("window.scrollTo(0, 0)")
            await page.screenshot(shot)
            assert _is_png(shot)
            assert page.errors == [], page.errors
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await load


async def _matches_the_stats_api(page: BrowserPage, client: Client) -> None:
    """Once the load stopped, the page's totals are the API's, at its next refresh."""
    stats = (await client.admin("GET", "stats")).body
    hits, misses = stats["requests"]["hits"], stats["requests"]["misses"]
    assert hits > 0 and misses > 0
    await page.wait_for(
        f"document.getElementById('total-hits').textContent === '{hits}' && "
        f"document.getElementById('total-misses').textContent === '{misses}'",
    )
    rows = await page.evaluate(
        "[...document.querySelectorAll('#hits-by-kind tr')].map(r => r.innerText.split('\\t'))"
    )
    shown = {(tier, match): int(n) for tier, match, n in rows}
    assert shown == {
        (tier, match): n for tier, matches in stats["hits"].items() for match, n in matches.items()
    }
    total = (await client.admin("GET", "entries?limit=1")).body["total"]
    await page.evaluate("document.getElementById('list-entries').click()")
    await page.wait_for(f"document.getElementById('entry-total').textContent === '{total}'")
    series = (await client.admin("GET", "series")).body
    await page.wait_for(
        f"Number(document.getElementById('sample-count').textContent) >= {len(series['points'])}"
    )


async def _acts_on_an_entry(page: BrowserPage, client: Client) -> None:
    first = "document.querySelector('#entries tr')"
    entry_id = await page.evaluate(f"{first}.dataset.entry")
    await page.evaluate(f"{first}.querySelector('[data-action=\"useful\"]').click()")
    await page.wait_for("document.getElementById('action-result').textContent.includes('useful')")
    (useful,) = (await client.admin("GET", f"entries/{entry_id}")).body["feedback"]
    assert useful > 0
    await page.evaluate(
        f'document.querySelector(\'#entries tr[data-entry="{entry_id}"] '
        '[data-action="delete"]\').click()'
    )
    await page.wait_for("document.getElementById('action-result').textContent.includes('deleted')")
    assert (await client.admin("GET", f"entries/{entry_id}")).status == 404
