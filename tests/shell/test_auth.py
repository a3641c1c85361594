"""Bearer tokens and scopes (docs/api.md, Authentication), checked before any work."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest

from regionsync.adapters.http_api import create_app
from regionsync.adapters.memory_store import MemoryStore
from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.adapters.system import SystemClock, SystemResolver, UlidSource, system_rng
from regionsync.config import load_settings
from regionsync.runtime.node import Node

ADMIN, MANAGE, PUBLISH = "a" * 32, "m" * 32, "p" * 32


@contextlib.asynccontextmanager
async def app_for(http_listen: str, tokens: list[dict]) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app over ASGI; the node's store is open, the node not started."""
    settings = load_settings(None, region="r1", http_listen=http_listen, tokens=tokens)
    clock, rng = SystemClock(), system_rng()
    node = Node(
        settings,
        store=MemoryStore(),
        clock=clock,
        rng=rng,
        ids=UlidSource(clock, rng),
        transport=MemoryNetwork().transport("r1"),
        sender=None,  # type: ignore[arg-type]  (never reached: no deliveries here)
        resolver=SystemResolver(),
    )
    await node.store.open("r1", 1)
    transport = httpx.ASGITransport(app=create_app(node))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


TOKENS = [
    {"token": ADMIN, "scope": "admin"},
    {"token": MANAGE, "scope": "tenant:acme:manage"},
    {"token": PUBLISH, "scope": "tenant:acme:publish"},
]


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    ("method", "path", "token", "status"),
    [
        ("GET", "/v1/tenants/acme", None, 401),
        ("GET", "/v1/tenants/acme", "wrong" * 8, 401),
        ("GET", "/v1/tenants/acme", ADMIN, 404),  # allowed; the tenant does not exist
        ("GET", "/v1/tenants/acme", MANAGE, 404),
        ("GET", "/v1/tenants/other", MANAGE, 404),  # another tenant: not probeable
        ("GET", "/v1/tenants/acme", PUBLISH, 403),
        ("GET", "/v1/cluster", MANAGE, 403),
        ("GET", "/v1/cluster", ADMIN, 200),
        ("POST", "/v1/tenants", MANAGE, 403),
        ("POST", "/v1/tenants/acme/events", PUBLISH, 404),  # allowed; no such tenant
        ("POST", "/v1/tenants/other/events", PUBLISH, 404),
    ],
)
async def test_scopes(method: str, path: str, token: str | None, status: int) -> None:
    async with app_for("0.0.0.0:8080", TOKENS) as client:
        headers = bearer(token) if token else {}
        resp = await client.request(method, path, headers=headers, json={})
        assert resp.status_code == status, resp.text
        if status >= 400:
            assert resp.json()["error"] and "detail" in resp.json()


async def test_no_tokens_open_only_on_loopback() -> None:
    async with app_for("127.0.0.1:8080", []) as client:
        assert (await client.get("/v1/tenants/acme")).status_code == 404
    async with app_for("0.0.0.0:8080", []) as client:
        resp = await client.get("/v1/tenants/acme")
        assert resp.status_code == 401 and resp.json()["field"] == "authorization"


async def test_health_needs_no_token() -> None:
    async with app_for("0.0.0.0:8080", TOKENS) as client:
        assert (await client.get("/healthz")).status_code == 200
