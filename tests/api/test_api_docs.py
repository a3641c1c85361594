"""``/docs`` (Swagger UI from vendored assets, no CDN) and the OpenAPI document."""

from __future__ import annotations

import re

from api_support import Api


async def test_docs_page_and_its_assets_are_served_locally(api: Api) -> None:
    resp = await api.client.get("/docs")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
    refs = re.findall(r"""(?:src|href)=["']([^"']+)["']""", resp.text)
    assert refs and all(r.startswith("/docs/assets/") for r in refs), refs
    assert "/docs/assets/init.js" in refs
    for ref in refs:
        asset = await api.client.get(ref)
        assert asset.status_code == 200 and len(asset.content) > 100, ref
    assert "/openapi.json" in (await api.client.get("/docs/assets/init.js")).text


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


async def test_every_html_page_gets_the_csp_and_anti_framing_headers(api: Api) -> None:
    # /docs was served without them (issue 38, kind 7); one policy for every HTML page
    for method, path in (("GET", "/docs"), ("HEAD", "/docs"), ("GET", "/console"),
                         ("HEAD", "/console")):  # fmt: skip
        resp = await api.client.request(method, path)
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
        csp = [d.strip() for d in resp.headers["content-security-policy"].split(";")]
        assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp, (path, csp)
        assert "default-src 'none'" in csp
        assert resp.headers["x-frame-options"] == "DENY"
        assert resp.headers["x-content-type-options"] == "nosniff"
        assert resp.headers["referrer-policy"] == "no-referrer"
    # the page runs no inline script (the policy would block it)
    page = (await api.client.get("/docs")).text
    assert re.findall(r"<script(?![^>]*\bsrc=)", page) == [] and "style=" not in page
    # JSON answers are not pages
    assert "content-security-policy" not in (await api.client.get("/healthz")).headers


async def test_docs_assets_are_a_fixed_list(api: Api) -> None:
    # the vendoring package's other files (Redoc, its own modules) and any other name
    # are not served
    for name in ("index.html", "oauth2-redirect.html", "redoc.standalone.js", "core.py",
                 "swagger-ui-bundle.js.map", "../openapi_docs.py"):  # fmt: skip
        resp = await api.client.get(f"/docs/assets/{name}")
        assert resp.status_code == 404, name
