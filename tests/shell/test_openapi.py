"""The OpenAPI document describes request bodies and the problem body of errors."""

from __future__ import annotations

from pathlib import Path

import httpx

from regionsync.adapters.http_api import create_app
from regionsync.adapters.wiring import build_node
from regionsync.config import load_settings


async def test_openapi_documents_bodies_and_problems(tmp_path: Path) -> None:
    node = build_node(load_settings(None, data_dir=tmp_path))
    transport = httpx.ASGITransport(app=create_app(node))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        doc = (await client.get("/openapi.json")).json()
    await node.sender.aclose()  # type: ignore[attr-defined]
    paths = doc["paths"]
    for path, method in [
        ("/v1/tenants", "post"),
        ("/v1/tenants/{tenant}/endpoints", "post"),
        ("/v1/tenants/{tenant}/endpoints/{endpoint}", "patch"),
        ("/v1/tenants/{tenant}/events", "post"),
        ("/v1/sources", "post"),
    ]:
        op = paths[path][method]
        schema = op["requestBody"]["content"]["application/json"]["schema"]
        assert schema["properties"], path
        problem = op["responses"]["422"]["content"]["application/json"]["schema"]
        # path and schema_path: a schema_violation's JSON Pointers (event-type catalogs)
        assert set(problem["properties"]) == {"error", "detail", "field", "path", "schema_path"}
    assert "/in/{source}" in paths and "/v1/tenants/{tenant}/jobs/{job}" in paths
