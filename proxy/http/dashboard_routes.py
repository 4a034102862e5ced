"""The operator's dashboard at /admin/: static files from the package, no build step.

The page itself is only a login form and a script: it loads without the token, holds nothing
secret, and every number it shows comes from the admin API (/admin/v1/*), each call carrying
the token from the browser's sessionStorage in an Authorization header, never in a URL. Nothing
is fetched from anywhere but this origin, which the Content-Security-Policy enforces: a page
that is handed an admin token must not run a script it did not ship.
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from proxy.http.frame import RequestFrame

DASHBOARD = "/admin/"
_FILES = {
    "index.html": "text/html",
    "app.js": "text/javascript",
    "charts.js": "text/javascript",
    "style.css": "text/css",
}
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": _CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    # A new deployment's page and script go together; a cached old script with a new page
    # would not.
    "Cache-Control": "no-cache",
}


class DashboardRoutes:
    def __init__(self) -> None:
        folder = resources.files("proxy.http") / "dashboard"
        self._files = {name: (folder / name).read_bytes() for name in _FILES}

    def register(self, frame: RequestFrame) -> None:
        frame.route("/admin", "dashboard", self.to_page, methods=["GET"])
        frame.route(DASHBOARD, "dashboard", self.page, methods=["GET"])
        for name in _FILES:
            if name != "index.html":
                frame.route(f"{DASHBOARD}{name}", "dashboard", self.asset, methods=["GET"])

    async def to_page(self, request: web.Request) -> web.Response:
        return web.Response(status=308, headers={"Location": DASHBOARD})

    async def page(self, request: web.Request) -> web.Response:
        return self._file("index.html")

    async def asset(self, request: web.Request) -> web.Response:
        return self._file(request.path.removeprefix(DASHBOARD))

    def _file(self, name: str) -> web.Response:
        return web.Response(
            body=self._files[name],
            headers={**_HEADERS, "Content-Type": f"{_FILES[name]}; charset=utf-8"},
        )
