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


async def test_every_success_body_is_typed(tmp_path: Path) -> None:
    """Issue 15: each operation's 2xx JSON body has a schema in components (schemathesis
    checks the bodies against them, tests/api/test_api_schemathesis.py)."""
    node = build_node(load_settings(None, data_dir=tmp_path))
    transport = httpx.ASGITransport(app=create_app(node))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        doc = (await client.get("/openapi.json")).json()
    await node.sender.aclose()  # type: ignore[attr-defined]
    schemas = doc["components"]["schemas"]
    typed = 0
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for code, resp in op["responses"].items():
                body = resp.get("content", {}).get("application/json")
                if code.startswith("2") and body is not None:
                    ref = body["schema"].get("$ref", "")
                    assert ref.startswith("#/components/schemas/"), (method, path, body)
                    assert ref.rsplit("/", 1)[1] in schemas, (method, path, ref)
                    typed += 1
    assert typed >= 38
    tenant = schemas["Tenant"]
    assert "publish_rate_cluster_per_s" in tenant["properties"]
