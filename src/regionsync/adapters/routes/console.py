"""Routes of the web console: ``/console`` (one static page) and its assets.

The console is a static HTML page with vanilla JavaScript files (``adapters/console/``)
that calls the node's JSON API with the token the user typed (kept in the tab's
sessionStorage): no template rendering, no build step, no CDN. So these routes serve
files only and need no token themselves; every datum the page shows comes from the
``/v1`` routes and their scope checks. Not in the OpenAPI document.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse

from ...errors import NotFound
from .common import ApiContext

__all__ = ["CONSOLE_DIR", "build"]

CONSOLE_DIR = Path(__file__).resolve().parent.parent / "console"
_ASSETS = {
    "console.js": "text/javascript; charset=utf-8",
    "widgets.js": "text/javascript; charset=utf-8",
    "manage.js": "text/javascript; charset=utf-8",
    "endpoints.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
# the page's security headers are those of every HTML page (http_api.HTML_HEADERS)
_HEADERS = {"x-content-type-options": "nosniff", "cache-control": "no-cache"}


def build(ctx: ApiContext) -> APIRouter:
    """``GET /console`` (the page), ``GET /console/assets/{name}`` (its script and style;
    404 for any other name) and ``GET /`` (a redirect to ``/console``)."""
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    async def root() -> RedirectResponse:
        return RedirectResponse("/console", status_code=307)

    @router.get("/console")
    async def console_page() -> FileResponse:
        return FileResponse(CONSOLE_DIR / "index.html", media_type="text/html; charset=utf-8",
                            headers=_HEADERS)  # fmt: skip

    @router.get("/console/assets/{name}")
    async def console_asset(name: str) -> FileResponse:
        media = _ASSETS.get(name)
        if media is None:
            raise NotFound(f"no console asset {name!r}", field="name")
        return FileResponse(CONSOLE_DIR / name, media_type=media, headers=_HEADERS)

    return router
