"""A receiver whose answer holds NUL bytes (a binary error page, a misconfigured proxy):
its attempt is recorded with U+FFFD in their place, on SQLite and on PostgreSQL. Before,
PostgreSQL refused the attempt's commit (and every publish and outcome grouped with it),
and SQLite cut the excerpt at the NUL; a peer refuses a record holding one."""

from __future__ import annotations

from pathlib import Path

import pytest
from api_support import eventually, running_node, serving
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from regionsync.demo import free_port


async def _answer(request: Request) -> Response:
    await request.body()
    return Response(b"bad\x00answer\x00", status_code=500, media_type="application/octet-stream")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_an_answer_with_nul_bytes_is_recorded(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    port = free_port()
    store = {"store": request.getfixturevalue("pg_url")} if backend == "postgresql" else {}
    app = Starlette(routes=[Route("/hook", _answer, methods=["POST"])])
    async with serving(app, port, lifespan="off"), running_node(tmp_path, **store) as api:
        c = api.client
        assert (await c.post("/v1/tenants", json={"id": "nul", "name": "N"})).status_code == 201
        resp = await c.post(
            "/v1/tenants/nul/endpoints", json={"url": f"http://127.0.0.1:{port}/hook"}
        )
        assert resp.status_code == 201, resp.text
        ep = resp.json()["id"]
        resp = await c.post("/v1/tenants/nul/events", json={"event_type": "a.b", "payload": {}})
        assert resp.status_code == 202, resp.text

        async def attempts() -> list[dict]:
            r = await c.get(f"/v1/tenants/nul/endpoints/{ep}/attempts")
            return r.json()["items"]

        await eventually(attempts, timeout_s=10)
        first = (await attempts())[-1]
        assert first["status_code"] == 500
        assert first["response_excerpt"] == "bad\ufffdanswer\ufffd"
        # the node's commits go on: another publish is accepted and durable
        resp = await c.post("/v1/tenants/nul/events", json={"event_type": "a.b", "payload": {}})
        assert resp.status_code == 202, resp.text
