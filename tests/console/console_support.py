"""Helpers of the console's browser tests (imported by conftest.py and the tests)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import uvicorn
from aiohttp import web
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from regionsync.demo import Receiver, free_port

__all__ = ["Hit", "StatusReceiver", "SwitchableReceiver", "html_host"]


@dataclass
class SwitchableReceiver(Receiver):
    """demo.Receiver (signature-verifying) whose paths in ``broken`` answer 500 with a
    JSON body, as a receiver with a bug would, and those in ``gone`` 410 Gone."""

    broken: set[str] = field(default_factory=set)
    gone: set[str] = field(default_factory=set)
    refused: int = 0

    async def _hook(self, request: Request) -> Response:
        if request.path_params["name"] in self.gone:
            await request.body()
            return Response(status_code=410)
        if request.path_params["name"] in self.broken:
            await request.body()
            self.refused += 1
            return Response(b'{"error": "receiver bug: NullPointerException in handler"}',
                            status_code=500, media_type="application/json")  # fmt: skip
        return await super()._hook(request)


@contextlib.asynccontextmanager
async def html_host() -> AsyncIterator[dict[str, str]]:
    """Serve ``host["html"]`` at ``/`` on a free loopback port (another origin than the
    nodes'): the application page that embeds the consumer portal in an iframe. Yields
    ``host`` with its ``origin``; set ``host["html"]`` before opening the page."""
    port = free_port()
    host = {"origin": f"http://127.0.0.1:{port}", "html": ""}

    async def page(request: Request) -> Response:
        return Response(host["html"], media_type="text/html")

    server = uvicorn.Server(uvicorn.Config(Starlette(routes=[Route("/", page)]),
                                           host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="off"))  # fmt: skip
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield host
    finally:
        server.should_exit = True
        await task


@dataclass(frozen=True)
class Hit:
    """One request a StatusReceiver got: its path name, headers (lower-case), body and
    the status it answered."""

    name: str
    headers: dict[str, str]
    body: bytes
    status: int


@dataclass
class StatusReceiver:
    """An aiohttp receiver on loopback, ``/hooks/{name}``: answers 200, or 503 for the
    names in ``broken`` (switched by the test); records every request in ``hits``."""

    port: int = field(default_factory=free_port)
    broken: set[str] = field(default_factory=set)
    hits: list[Hit] = field(default_factory=list)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/{name}"

    def of(self, name: str, status: int | None = None) -> list[Hit]:
        return [h for h in self.hits if h.name == name and status in (None, h.status)]

    async def _hook(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        status = 503 if name in self.broken else 200
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.hits.append(Hit(name, headers, await request.read(), status))
        return web.Response(status=status, text="down" if status == 503 else "ok")

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[StatusReceiver]:
        app = web.Application()
        app.router.add_post("/hooks/{name}", self._hook)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        try:
            yield self
        finally:
            await runner.cleanup()
