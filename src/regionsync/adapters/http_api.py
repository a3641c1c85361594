"""HTTP API of one node (docs/api.md), on FastAPI/Starlette.

``create_app`` assembles one router per resource (``adapters/routes/``: tenants,
endpoints, event types, deliveries, events, sources, cluster, tokens, and the web
console), maps every error to the JSON problem body ``{error, detail, field}`` (bad input
never answers 500), and puts the fast ingest lane in front for publish and inbound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qsl

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from ..core.capabilities import RELEASE
from ..errors import ClientError, Unprocessable
from ..runtime.node import Node
from .openapi_docs import PROBLEM_RESPONSES, install_docs
from .routes import (
    audit,
    cluster,
    console,
    deliveries,
    endpoints,
    event_types,
    events,
    portal,
    sources,
    tenants,
    tokens,
)
from .routes.common import ApiContext, Auth, client_problem, problem, rfc3339, strict_query

__all__ = ["HTML_HEADERS", "create_app", "rfc3339"]

log = logging.getLogger("regionsync.http")

# on every HTML response (the console, /docs): the page loads only this node's scripts,
# styles and images (data: images: Swagger UI's stylesheet has some) and talks only to its
# origin; it may not be framed (frame-ancestors; X-Frame-Options for older browsers)
HTML_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}
_HTML_RAW = [(k.encode(), v.encode()) for k, v in HTML_HEADERS.items()]


def create_app(node: Node, manage_node: bool = False) -> Any:
    """The ASGI app serving ``node``; with ``manage_node`` its lifespan starts (unless
    started already) and stops the node (so a server's graceful shutdown also stops
    replication and delivery)."""

    ctx = ApiContext(node, Auth(node), node.settings.ingest.max_payload_bytes)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if manage_node and not node.started:
            await node.start()
        sampler = asyncio.create_task(ctx.usage_rates.run())
        try:
            yield
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
            if manage_node:
                await node.stop()

    app = FastAPI(
        title="regionsync",
        version=RELEASE,  # the release (= pyproject.toml's version)
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
        responses=PROBLEM_RESPONSES,
        dependencies=[Depends(strict_query)],
        # no 307 to the path without its trailing slash (its Location built from the
        # client's Host header): an unknown path is a 404 problem like any other
        redirect_slashes=False,
    )

    @app.exception_handler(ClientError)
    async def _client_error(request: Request, exc: ClientError) -> JSONResponse:
        return client_problem(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # no route for the path: field ``path``; a route without this method: ``method``
        # (with Starlette's Allow header, RFC 9110 section 15.5.6)
        code, field = {404: ("not_found", "path"), 405: ("method_not_allowed", "method")}.get(
            exc.status_code, ("http_error", None)
        )
        detail = {404: f"no route {request.url.path}",
                  405: f"{request.method} is not allowed on {request.url.path}"}.get(
            exc.status_code, str(exc.detail))  # fmt: skip
        resp = problem(exc.status_code, code, detail, field)
        for name, value in (exc.headers or {}).items():
            resp.headers[name] = value
        if exc.status_code == 405:  # every method of every route on this path
            resp.headers["Allow"] = ", ".join(_allowed_methods(app, request))
        return resp

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        err = exc.errors()[0] if exc.errors() else {}
        loc = [str(p) for p in err.get("loc", ()) if p not in ("query", "path", "body")]
        return problem(422, "invalid", err.get("msg", "invalid request"), ".".join(loc) or None)

    @app.exception_handler(ClientDisconnect)
    async def _disconnect(request: Request, exc: ClientDisconnect) -> JSONResponse:
        return problem(400, "client_disconnected", "the client went away mid-request")

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s %s", request.method, request.url.path)
        return problem(500, "internal", "internal error; see the node's log")

    routers = (tenants, endpoints, event_types, deliveries, events, sources, cluster, tokens)
    for module in (*routers, audit, console, portal):
        app.include_router(module.build(ctx))
    install_docs(app)
    return _FastLane(app, {re.compile(p): h for p, h in ctx.fast_routes.items()})


def _allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """The methods of every route whose path matches ``request``'s, from the OpenAPI
    document (the Allow header of a 405, RFC 9110 section 10.2.1; Starlette names only
    the first route's)."""
    methods: set[str] = set()
    for template, ops in app.openapi()["paths"].items():
        pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, request.url.path):
            methods |= {m.upper() for m in ops}
    return sorted(methods)


class _FastLane:
    """Serves the ingest routes without FastAPI's per-request dependency machinery (half
    the CPU of a publish); every other request, and the OpenAPI document, go to the
    FastAPI app (a HEAD request as its GET, without the content; an HTML response with
    ``HTML_HEADERS``). The handlers are the same functions the FastAPI routes call, and
    errors get the same JSON problem bodies."""

    def __init__(self, app: FastAPI, routes: dict[re.Pattern[str], Any]):
        self.app = app
        self.routes = routes
        self.state = app.state

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and b"%2f" in scope.get("raw_path", b"").lower():
            # routed on the decoded path, an encoded '/' would make one segment two and
            # name another route (a proxy judging the raw path sees one); ids hold none
            detail = "no route: a path segment holds an encoded '/' (%2F)"
            head = scope["method"] == "HEAD"
            await _answer(
                _without_body(send) if head else send, problem(404, "not_found", detail, "path")
            )
            return
        if scope["type"] == "http" and scope["method"] == "HEAD":
            await self.app({**scope, "method": "GET"}, receive, _html_headers(_without_body(send)))
            return
        if scope["type"] == "http" and scope["method"] == "POST":
            for pattern, handler in self.routes.items():
                m = pattern.fullmatch(scope["path"])
                if m is not None:
                    request = _RawRequest(scope, receive)
                    try:
                        _no_query(scope)
                        response = await handler(request, m.group(1))
                    except ClientError as exc:
                        response = client_problem(exc)
                    except ClientDisconnect:
                        response = problem(400, "client_disconnected", "the client went away")
                    except Exception:
                        log.exception("internal error on POST %s", scope["path"])
                        response = problem(500, "internal", "internal error; see the node's log")
                    await _answer(send, response)
                    return
        await self.app(scope, receive, _html_headers(send) if scope["type"] == "http" else send)


async def _answer(send: Any, response: Any) -> None:
    """Send ``response`` (a Starlette Response with its body) as the request's answer."""
    start = {"type": "http.response.start", "status": response.status_code,
             "headers": response.raw_headers}  # fmt: skip
    await send(start)
    await send({"type": "http.response.body", "body": response.body})


def _html_headers(send: Any) -> Any:
    """``send`` adding ``HTML_HEADERS`` to an HTML response (those it does not set; no
    X-Frame-Options to one that sets its own Content-Security-Policy)."""

    async def send_html(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = message.get("headers", [])
            names = {n.lower() for n, _ in headers}
            if any(n == b"content-type" and v.startswith(b"text/html") for n, v in headers):
                if b"content-security-policy" in names:  # a page framing by its own policy
                    names.add(b"x-frame-options")  # (the portal's frame-ancestors)
                extra = [(n, v) for n, v in _HTML_RAW if n not in names]
                message = {**message, "headers": [*headers, *extra]}
        await send(message)

    return send_html


def _without_body(send: Any) -> Any:
    """``send`` for a HEAD request served as GET: the same status and header fields
    (Content-Length included), no content (RFC 9110 section 9.3.2)."""

    async def send_head(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            message = {**message, "body": b""}
        await send(message)

    return send_head


def _no_query(scope: Any) -> None:
    """The fast lane's ``/v1/`` routes take no query parameter: 422 naming the first one
    given, as ``routes.paging.strict_query`` answers on every other ``/v1/`` route."""
    if scope["query_string"] and scope["path"].startswith("/v1/"):
        pairs = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
        name = pairs[0][0] if pairs else scope["query_string"].decode("latin-1")
        raise Unprocessable("unknown query parameter (this route takes none)", field=name)


class _RawRequest:
    """What the ingest handlers read of a request (``scope``, ``headers``, ``stream()``),
    straight from the ASGI scope: cheaper than building a starlette Request per publish."""

    __slots__ = ("_headers", "_receive", "scope")

    def __init__(self, scope: Any, receive: Any):
        self.scope, self._receive = scope, receive
        self._headers: dict[str, str] | None = None

    @property
    def headers(self) -> dict[str, str]:
        """Header names lower-cased (ASGI sends them so); the first of a repeated name."""
        if self._headers is None:
            headers: dict[str, str] = {}
            for name, value in self.scope["headers"]:
                headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
            self._headers = headers
        return self._headers

    async def stream(self) -> AsyncIterator[bytes]:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnect()
            body = message.get("body", b"")
            if body:
                yield body
            if not message.get("more_body", False):
                return
