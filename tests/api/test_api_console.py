"""The web console's routes (``/console`` and its assets, outside the OpenAPI document)
and ``GET /v1/whoami``, which the console reads to choose the admin or the tenant view.
What the console does in a browser is tested in tests/console/."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from api_support import Api, assert_problem, running_node

from regionsync.demo import free_port

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
    names = ("console.css", "console.js", "endpoints.js", "favicon.svg", "manage.js", "widgets.js")
    assert sorted(refs) == [f"/console/assets/{n}" for n in names]
    kinds = {"css": "text/css", "js": "text/javascript", "svg": "image/svg"}
    for ref in refs:
        asset = await api.client.get(ref)
        kind = kinds[ref.rsplit(".", 1)[1]]
        assert asset.status_code == 200 and asset.headers["content-type"].startswith(kind)
        assert len(asset.content) > 100
        if ref.endswith(".js"):  # data goes in as text only, never as HTML or code
            assert "innerHTML" not in asset.text and "outerHTML" not in asset.text, ref
            assert "eval(" not in asset.text and "insertAdjacentHTML" not in asset.text, ref
    js = (await api.client.get("/console/assets/console.js")).text
    assert "sessionStorage" in js


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
        "scope": "admin", "name": "config:tokens[0]:admin", "tenant": None, "right": "admin",
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
        name = f"token:{made.json()['id']}:{right}"
        assert me == {"scope": f"tenant:acme:{right}", "name": name,
                      "tenant": "acme", "right": right}  # fmt: skip


async def test_cluster_regions_without_peer_urls(tmp_path: Path) -> None:
    """A peer without ``http_url`` is listed unreached, with the digest verdict (None
    before any comparison); the route is admin-only."""
    peers = [{"region": "eu-central-1", "address": f"127.0.0.1:{free_port()}"}]
    async with running_node(tmp_path, tokens=[{"token": ADMIN, "scope": "admin"}],
                            peers=peers) as api:  # fmt: skip
        c = api.client
        body = (await c.get("/v1/cluster/regions", headers=bearer(ADMIN))).json()
        me, peer = body["items"]
        assert me["region"] == "us-east-1" and me["reached"] and me["agrees"] is True
        assert me["peers_total"] == 1 and me["peers_connected"] == 0
        assert (
            me["registry_hash"]
            == (await c.get("/v1/cluster", headers=bearer(ADMIN))).json()["registry_hash"]
        )
        assert peer == {
            "region": "eu-central-1", "http_url": None, "reached": False,
            "error": "no http_url in its [[peers]] entry", "registry_hash": None,
            "registry_digest": None, "agrees": None, "version_vector": None,
            "peers_connected": None, "peers_total": None,
            "digest_at": None, "digest_age_s": None,  # never compared: no verdict, no age
        }  # fmt: skip
        assert_problem(await c.get("/v1/cluster/regions"), 401, "authorization")
        await c.post("/v1/tenants", json={"id": "acme", "name": "A"}, headers=bearer(ADMIN))
        made = await c.post("/v1/tokens", json={"scope": "tenant:acme:manage", "name": "m"},
                            headers=bearer(ADMIN))  # fmt: skip
        tenant = bearer(made.json()["token"])
        assert_problem(await c.get("/v1/cluster/regions", headers=tenant), 403, "authorization")


async def test_cluster_shows_what_this_node_refused_per_origin(tmp_path: Path) -> None:
    """Issue 41, the receiving side: a record this node refused shows under ``refused``
    (count, moved past, last seq and reason, when), and the node moved past it."""
    from regionsync.core.model import Record

    peers = [{"region": "eu-central-1", "address": f"127.0.0.1:{free_port()}"}]
    async with running_node(tmp_path, tokens=[{"token": ADMIN, "scope": "admin"}],
                            peers=peers) as api:  # fmt: skip
        node = api.node
        bad = Record("eu-central-1:5", 1, "registry", b"\xc1", (node.clock.wall_ms(), 0))
        assert len(await node.replica.apply_records([bad])) == 1
        body = (await api.client.get("/v1/cluster", headers=bearer(ADMIN))).json()
        got = body["refused"]["eu-central-1:5"]
        assert {k: got[k] for k in ("count", "skipped", "last_seq")} == {
            "count": 1, "skipped": 1, "last_seq": 1,
        }  # fmt: skip
        assert "msgpack" in got["last_reason"] and re.match(r"\d{4}-", got["first_at"])
        assert body["version_vector"]["eu-central-1:5"] == 1
        peer = body["peers"][0]
        assert peer["refused"] == {} and peer["repair"] == {
            "wanted": False, "futile": 0, "backoff_s": 0.0,
        }  # fmt: skip
