"""``/docs`` (Swagger UI from vendored assets, no CDN) and the OpenAPI document."""

from __future__ import annotations

import re

from api_support import Api


async def test_docs_page_and_its_assets_are_served_locally(api: Api) -> None:
    resp = await api.client.get("/docs")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
    refs = re.findall(r"""(?:src|href)=["']([^"']+)["']""", resp.text)
    assert refs and all(r.startswith("/docs/assets/") for r in refs), refs
    assert "/openapi.json" in resp.text
    for ref in refs:
        asset = await api.client.get(ref)
        assert asset.status_code == 200 and len(asset.content) > 100, ref


async def test_openapi_declares_bearer_auth_and_the_list_routes(api: Api) -> None:
    doc = (await api.client.get("/openapi.json")).json()
    assert doc["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": doc["components"]["securitySchemes"]["bearerAuth"]["description"],
    }
    assert doc["security"] == [{"bearerAuth": []}]
    assert doc["paths"]["/healthz"]["get"]["security"] == []
    assert doc["paths"]["/in/{source}"]["post"]["security"] == []
    for path in ("/v1/tenants", "/v1/sources", "/v1/tenants/{tenant}/events",
                 "/v1/tenants/{tenant}/deliveries", "/v1/tenants/{tenant}/jobs"):  # fmt: skip
        assert "get" in doc["paths"][path], path
    assert "/docs" not in doc["paths"]
