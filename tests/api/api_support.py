"""Helpers of the one-node HTTP API tests (imported by conftest.py and the test modules).

A real node in-process: production adapters (``build_node``), SQLite in a temp dir, the
FastAPI app served by uvicorn on a loopback port, and a signature-verifying receiver.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp

from regionsync.adapters.http_api import create_app
from regionsync.adapters.wiring import build_node
from regionsync.config import load_settings
from regionsync.demo import Receiver, free_port
from regionsync.runtime.node import Node

__all__ = [
    "Api",
    "Hit",
    "RecordingReceiver",
    "assert_problem",
    "eventually",
    "running_node",
    "serving",
    "snapshot",
]


@contextlib.asynccontextmanager
async def serving(app: ASGIApp, port: int, lifespan: str = "on") -> AsyncIterator[None]:
    """Serve ``app`` with uvicorn on 127.0.0.1:``port`` until the block ends."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan=lifespan
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 10
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("uvicorn exited before it started")
        if time.monotonic() > deadline:
            server.should_exit = True
            await task
            raise TimeoutError("uvicorn did not start")
        await asyncio.sleep(0.01)
    try:
        yield
    finally:
        server.should_exit = True
        await task


async def eventually(
    check: Callable[[], Awaitable[Any]], timeout_s: float = 10.0, interval: float = 0.02
) -> Any:
    """Poll ``check`` until it returns a truthy value (returned) or fail at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s (last: {value!r})")
        await asyncio.sleep(interval)


@dataclass
class Api:
    """A running node and a client bound to its HTTP base URL."""

    node: Node
    base: str
    client: httpx.AsyncClient
    data_dir: Path


RETRY_SCHEDULE_S = [0.1, 0.1, 0.1]


@contextlib.asynccontextmanager
async def running_node(data_dir: Path, **overrides: Any) -> AsyncIterator[Api]:
    """A us-east-1 node with production adapters, SQLite under ``data_dir``, serving
    ``create_app(node, manage_node=True)`` on a free loopback port; and a client.
    ``overrides`` are further settings (``delivery`` entries merge into the defaults).

    127.0.0.1/32 is exempt from the SSRF guard so a loopback receiver can be an endpoint;
    every other private address stays refused. Retries are fast (0.1 s).
    """
    port = free_port()
    settings = load_settings(
        None,
        region="us-east-1",
        data_dir=data_dir,
        http_listen=f"127.0.0.1:{port}",
        grpc_listen="127.0.0.1:0",
        log_level="warning",
        delivery={
            "allow_private_networks": ["127.0.0.1/32"],
            "retry_schedule_s": RETRY_SCHEDULE_S,
            "poll_interval_s": 0.2,
            "timeout_s": 5.0,
            "probe_initial_s": 0.1,  # a failing endpoint is probed again soon
            "probe_max_s": 0.5,
            **overrides.pop("delivery", {}),
        },
        **overrides,
    )
    node = build_node(settings)
    base = f"http://127.0.0.1:{port}"
    try:
        async with (
            serving(create_app(node, manage_node=True), port),
            httpx.AsyncClient(base_url=base, timeout=60.0) as client,
        ):
            assert node.started
            yield Api(node, base, client, data_dir)
    finally:
        await node.sender.aclose()  # type: ignore[attr-defined]


@dataclass
class Hit:
    """One request the receiver got: path name, lower-cased headers, raw body, answer."""

    name: str
    headers: dict[str, str]
    body: bytes
    status: int


@dataclass
class RecordingReceiver(Receiver):
    """demo.Receiver that also keeps every raw request and can answer 500 first.

    ``fail_first[name] = n`` makes the next ``n`` requests to ``name`` answer 500 before
    the signature-verifying receiver takes over.
    """

    hits: list[Hit] = field(default_factory=list)
    fail_first: dict[str, int] = field(default_factory=dict)

    async def _hook(self, request: Request) -> Response:
        name = request.path_params["name"]
        body = await request.body()
        headers = {k.lower(): v for k, v in request.headers.items()}
        if self.fail_first.get(name, 0) > 0:
            self.fail_first[name] -= 1
            self.hits.append(Hit(name, headers, body, 500))
            return Response(b"try again", status_code=500)
        resp = await super()._hook(request)
        self.hits.append(Hit(name, headers, body, resp.status_code))
        return resp

    def of(self, name: str) -> list[Hit]:
        return [h for h in self.hits if h.name == name]


def assert_problem(resp: httpx.Response, status: int, field: str | None = None) -> dict:
    """``resp`` is the JSON problem body of docs/api.md with ``status`` and ``field``."""
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json"), resp.headers
    body = resp.json()
    assert isinstance(body, dict), body
    assert isinstance(body.get("error"), str) and body["error"], body
    assert isinstance(body.get("detail"), str) and body["detail"], body
    assert set(body) <= {"error", "detail", "field"}, body
    if field is not None:
        assert body.get("field") == field, body
    return body


async def snapshot(api: Api, tenant: str | None = None) -> dict[str, Any]:
    """What a rejected request must not change: registry hash, version vector, counts,
    and the tenant's endpoint list."""
    cluster = (await api.client.get("/v1/cluster")).json()
    out = {
        "registry_hash": cluster["registry_hash"],
        "version_vector": cluster["version_vector"],
        "counts": cluster["counts"],
    }
    if tenant is not None:
        out["endpoints"] = (await api.client.get(f"/v1/tenants/{tenant}/endpoints")).json()
    return out
