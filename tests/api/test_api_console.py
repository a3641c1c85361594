"""The web console's routes (``/console`` and its assets, outside the OpenAPI document)
and ``GET /v1/whoami``, which the console reads to choose the admin or the tenant view.
What the console does in a browser is tested in tests/console/."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from api_support import Api, assert_problem, running_node

ADMIN = "console-admin-token"


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest_asyncio.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with running_node(tmp_path, tokens=[{"token": ADMIN, "scope": "admin"}]) as running:
        yield running


async def test_console_page_and_assets_are_served_locally(api: Api) -> None:
    resp = await api.client.get("/console")  # no token: the page holds no data
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
    csp = resp.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    refs = re.findall(r"""(?:src|href)=["']([^"']+)["']""", resp.text)
    refs = [r for r in refs if not r.startswith("#")]  # in-page links
    assert sorted(refs) == [f"/console/assets/{n}" for n in ("console.css", "console.js",
                                                              "favicon.svg")]  # fmt: skip
    for ref, kind in zip(sorted(refs), ("text/css", "text/javascript", "image/svg"), strict=True):
        asset = await api.client.get(ref)
        assert asset.status_code == 200 and asset.headers["content-type"].startswith(kind)
        assert len(asset.content) > 100
    js = (await api.client.get("/console/assets/console.js")).text
    assert "sessionStorage" in js and "innerHTML" not in js  # data goes in as text only


async def test_console_asset_names_are_a_fixed_list(api: Api) -> None:
    for name in ("index.html", "nope.js", "console.js.bak"):
        assert_problem(await api.client.get(f"/console/assets/{name}"), 404, "name")
    for path in ("..%2F..%2Froutes%2Fconsole.py", "../../routes/console.py"):
        resp = await api.client.get(f"/console/assets/{path}")
        assert resp.status_code == 404 and "import" not in resp.text


async def test_root_redirects_to_console_and_console_is_not_in_the_schema(api: Api) -> None:
    resp = await api.client.get("/", follow_redirects=False)
    assert resp.status_code == 307 and resp.headers["location"] == "/console"
    doc = (await api.client.get("/openapi.json")).json()
    assert not [p for p in doc["paths"] if p == "/" or p.startswith("/console")]
    assert "get" in doc["paths"]["/v1/whoami"]


async def test_whoami_names_the_scope_of_each_kind_of_token(api: Api) -> None:
    c = api.client
    assert (await c.get("/v1/whoami", headers=bearer(ADMIN))).json() == {
        "scope": "admin", "name": "config:admin", "tenant": None, "right": "admin",
    }  # fmt: skip
    assert_problem(await c.get("/v1/whoami"), 401, "authorization")
    assert_problem(await c.get("/v1/whoami", headers=bearer("rs_wrong")), 401, "authorization")
    resp = await c.post("/v1/tenants", json={"id": "acme", "name": "Acme"}, headers=bearer(ADMIN))
    assert resp.status_code == 201
    for right in ("manage", "publish", "read"):
        made = await c.post("/v1/tokens", json={"scope": f"tenant:acme:{right}", "name": right},
                            headers=bearer(ADMIN))  # fmt: skip
        assert made.status_code == 201, made.text
        me = (await c.get("/v1/whoami", headers=bearer(made.json()["token"]))).json()
        assert me == {"scope": f"tenant:acme:{right}", "name": f"token:{right}",
                      "tenant": "acme", "right": right}  # fmt: skip
