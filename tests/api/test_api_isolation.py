"""Tenant isolation on every route of the OpenAPI document (issue 14): 401 without a
token; a tenant token on another tenant's ids gets 404 (ids are not probeable); a
tenant token on admin routes, a publish token on management routes, a read token on
anything but GET and a consumer portal session (issue 43) outside the portal's routes
get 403. Endpoint ids are generated, never chosen (issue 37)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from api_support import Api, assert_problem, eventually, running_node

from regionsync.core.portal import portal_allows

pytestmark = pytest.mark.asyncio(loop_scope="module")

ADMIN = "static-admin-token-0123456789"
UNAUTHENTICATED = {"/healthz", "/readyz", "/metrics", "/in/{source}", "/openapi.json"}
BODIES: dict[str, Any] = {
    "recover": {"since": "2020-01-01T00:00:00Z"},
    "replay-missing": {"since": "2020-01-01T00:00:00Z"},
    "test-filter": {"payload": {}},
}


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Any]]:
    """Tenants acme and other; other has an endpoint, an event, a delivery, a job and a
    source; acme has manage, publish and read tokens."""
    tmp: Path = tmp_path_factory.mktemp("iso")
    async with running_node(tmp, tokens=[{"token": ADMIN, "scope": "admin"}]) as api:
        c = api.client
        c.headers.update(bearer(ADMIN))
        for t in ("acme", "other"):
            assert (await c.post("/v1/tenants", json={"id": t, "name": t})).status_code == 201
        body = {"url": "http://127.0.0.1:9/h", "paused": True}
        ep = (await c.post("/v1/tenants/other/endpoints", json=body)).json()
        ev = await c.post("/v1/tenants/other/events", json={"event_type": "a", "payload": {}})
        assert ev.status_code == 202, ev.text
        event = ev.json()["id"]

        async def delivery() -> str | None:
            got = await c.get(f"/v1/tenants/other/endpoints/{ep['id']}/deliveries")
            items = got.json()["items"]
            return items[0]["id"] if items else None

        job = await c.post(f"/v1/tenants/other/endpoints/{ep['id']}/recover",
                           json=BODIES["recover"])  # fmt: skip
        src = await c.post("/v1/sources", json={"tenant": "other", "kind": "github",
                                                "secret": "s3cret"})  # fmt: skip
        typ = await c.post("/v1/tenants/other/event-types", json={"name": "other.only"})
        assert typ.status_code == 201, typ.text
        tokens = {}
        for right in ("manage", "publish", "read"):
            made = await c.post("/v1/tokens", json={"scope": f"tenant:acme:{right}", "name": right})
            tokens[right] = made.json()["token"]
        portal = await c.post("/v1/tenants/acme/portal-sessions", json={})
        assert portal.status_code == 201, portal.text
        tokens["portal"] = portal.json()["token"]
        doc = (await c.get("/openapi.json")).json()
        yield {
            "api": api,
            "tokens": tokens,
            "doc": doc,
            "ids": {
                "tenant": "other",
                "endpoint": ep["id"],
                "event": event,
                "delivery": await eventually(delivery),
                "job": job.json()["id"],
                "source": src.json()["id"],
                "token": made.json()["id"],
                "name": "other.only",
            },
        }


def _routes() -> list[tuple[str, str]]:
    from regionsync.adapters.http_api import create_app
    from regionsync.adapters.wiring import build_node
    from regionsync.config import load_settings

    app = create_app(build_node(load_settings(None, data_dir="/nonexistent")))
    doc = app.app.openapi()
    return sorted(
        (method.upper(), path)
        for path, ops in doc["paths"].items()
        for method in ops
        if path not in UNAUTHENTICATED
    )


ROUTES = _routes()


def _fill(path: str, ids: dict[str, str], tenant: str | None = None) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        return tenant if (name == "tenant" and tenant is not None) else ids[name]

    return re.sub(r"\{(\w+)\}", one, path)


def _body(path: str) -> Any:
    last = path.rsplit("/", 1)[-1]
    return BODIES.get(last, {"description": "x"} if last == "{endpoint}" else {})


async def _call(api: Api, method: str, url: str, path: str, headers: dict[str, str]) -> Any:
    kw: dict[str, Any] = {"headers": headers}
    if method in ("POST", "PATCH", "PUT"):
        kw["json"] = _body(path)
    # the client's default admin header must not leak into these requests
    return await api.client.request(method, url, **{**kw, "headers": {"authorization": "",
                                                                        **headers}})  # fmt: skip


async def test_every_route_is_covered() -> None:
    assert ("DELETE", "/v1/tokens/{token}") in ROUTES
    assert ("GET", "/v1/tenants/{tenant}/jobs/{job}") in ROUTES
    assert len(ROUTES) >= 20


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_no_token_401(world: dict[str, Any], method: str, path: str) -> None:
    api = world["api"]
    resp = await _call(api, method, _fill(path, world["ids"]), path, {})
    assert_problem(resp, 401, "authorization")


@pytest.mark.parametrize("right", ["manage", "publish", "read", "portal"])
@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_tenant_token_elsewhere(
    world: dict[str, Any], method: str, path: str, right: str
) -> None:
    """On another tenant's routes: 404; on admin routes: 403; ``/v1/whoami`` (any valid
    token) names the token's own tenant only. The audit log is read with a tenant token
    too, of its own tenant only: another tenant's is 404."""
    api, token = world["api"], world["tokens"][right]
    url = _fill(path, world["ids"])
    if path == "/v1/audit":
        url += f"?tenant={world['ids']['tenant']}"
    resp = await _call(api, method, url, path, bearer(token))
    if path == "/v1/audit":
        assert_problem(resp, 404, "tenant")
    elif path == "/v1/whoami":
        assert resp.status_code == 200, resp.text
        me = resp.json()
        if right == "portal":  # a session: named by its id (core.portal), no token
            assert me["name"].startswith("portal:pss_"), me
        else:
            assert me["name"].startswith("token:tok_") and me["name"].endswith(f":{right}")
        assert {**me, "name": None} == {"scope": f"tenant:acme:{right}", "name": None,
                                        "tenant": "acme", "right": right}  # fmt: skip
    elif "{tenant}" in path:
        assert_problem(resp, 404, "tenant")
    else:
        assert_problem(resp, 403, "authorization")


@pytest.mark.parametrize("right", ["manage", "publish", "read", "portal"])
@pytest.mark.parametrize(
    ("method", "path"), [r for r in ROUTES if "{tenant}/" in r[1] and r[1].count("{") > 1]
)
async def test_own_tenant_other_ids(
    world: dict[str, Any], method: str, path: str, right: str
) -> None:
    """Another tenant's endpoint, event, delivery or job under one's own tenant: 404 for
    a token allowed on the route, 403 (before any lookup) for one that is not."""
    api, token = world["api"], world["tokens"][right]
    url = _fill(path, world["ids"], "acme")
    resp = await _call(api, method, url, path, bearer(token))
    allowed = right == "manage" or (right == "read" and method == "GET")
    if right == "portal":
        allowed = portal_allows(method, url, "acme")
    assert_problem(resp, 404 if allowed else 403)


@pytest.mark.parametrize("right", ["publish", "read", "portal"])
@pytest.mark.parametrize(
    ("method", "path"), [r for r in ROUTES if r[1].startswith("/v1/tenants/{tenant}")]
)
async def test_own_tenant_rights(world: dict[str, Any], method: str, path: str, right: str) -> None:
    """A publish token may only publish; a read token only GET; a portal session only
    the portal's routes: its endpoints, their deliveries and attempts, retry, its events
    (never publish, tenant settings, event-type changes, sources or another session).
    Never 401/404 here."""
    api, token = world["api"], world["tokens"][right]
    url = _fill(path, world["ids"], "acme")
    resp = await _call(api, method, url, path, bearer(token))
    publish = method == "POST" and path == "/v1/tenants/{tenant}/events"
    allowed = publish if right == "publish" else method == "GET"
    if right == "portal":
        allowed = portal_allows(method, url, "acme")
        # what the portal may never do, whatever PORTAL_ROUTES says
        never = (
            (path.endswith(("/portal-sessions", "/events")) and method == "POST")
            or (path == "/v1/tenants/{tenant}" and method != "GET")
            or ("/event-types" in path and method != "GET")
        )
        assert not (allowed and never), (method, path)
    if path == "/v1/tenants/{tenant}" and method == "DELETE":
        allowed = False
    if allowed:
        assert resp.status_code not in (401, 403), resp.text
    else:
        assert_problem(resp, 403, "authorization")


async def test_endpoint_ids_are_generated_never_chosen(world: dict[str, Any]) -> None:
    """Issue 37: endpoint ids are global registry keys, so a body naming ``id`` is 422
    naming ``id``, the same answer for another tenant's id as for a free one (nothing
    revealed, nothing written); the same body twice makes two endpoints."""
    api = world["api"]
    c, taken = api.client, world["ids"]["endpoint"]
    manage = bearer(world["tokens"]["manage"])
    mine = "/v1/tenants/acme/endpoints"
    before = (await c.get(mine)).json()
    answers = []
    for eid in (taken, "acme-orders"):
        body = {"id": eid, "url": "http://127.0.0.1:9/a"}
        answers.append(assert_problem(await c.post(mine, json=body, headers=manage), 422, "id"))
    assert answers[0] == answers[1] and taken not in str(answers[0])
    assert (await c.get(mine)).json() == before
    body = {"url": "http://127.0.0.1:9/a"}
    made = [(await c.post(mine, json=body, headers=manage)).json() for _ in range(2)]
    assert [m["tenant"] for m in made] == ["acme", "acme"]
    assert made[0]["id"] != made[1]["id"] and taken not in (made[0]["id"], made[1]["id"])
    other = (await c.get(f"/v1/tenants/other/endpoints/{taken}")).json()
    assert other["tenant"] == "other" and other["url"] == "http://127.0.0.1:9/h"


async def test_a_deleted_tenants_tokens_do_not_act_on_its_re_created_id(tmp_path: Path) -> None:
    """QA of 2026-12-02: a token of a deleted tenant worked again once the id was
    created anew (by anyone), and a token could be made for an id nobody held yet."""
    async with running_node(tmp_path, tokens=[{"token": ADMIN, "scope": "admin"}]) as api:
        c = api.client
        c.headers.update(bearer(ADMIN))
        early = await c.post("/v1/tokens", json={"scope": "tenant:tz:manage", "name": "early"})
        assert_problem(early, 422, "scope")
        dots = await c.post("/v1/tokens", json={"scope": "tenant:..:read", "name": "dots"})
        assert_problem(dots, 422, "scope")
        assert (await c.post("/v1/tenants", json={"id": "tz", "name": "Z"})).status_code == 201
        kept = await c.post("/v1/tenants", json={"id": "keep", "name": "K"})
        assert kept.status_code == 201
        made = await c.post("/v1/tokens", json={"scope": "tenant:tz:manage", "name": "old"})
        other = await c.post("/v1/tokens", json={"scope": "tenant:keep:read", "name": "k"})
        assert made.status_code == 201 and other.status_code == 201, made.text
        old = {"authorization": f"Bearer {made.json()['token']}"}
        assert (await c.get("/v1/tenants/tz", headers=old)).status_code == 200
        assert (await c.delete("/v1/tenants/tz")).status_code == 204
        listed = [t["id"] for t in (await c.get("/v1/tokens")).json()["items"]]
        assert made.json()["id"] not in listed and other.json()["id"] in listed
        assert (await c.post("/v1/tenants", json={"id": "tz", "name": "new"})).status_code == 201
        again = await c.get("/v1/tenants/tz", headers=old)
        assert_problem(again, 401, "authorization")
