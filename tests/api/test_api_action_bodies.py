"""Routes that take no body refuse a bad one before acting (trial report finding 9), and
recover/replay check ``since`` (finding 10)."""

from __future__ import annotations

import pytest
from api_support import Api, assert_problem

JSON = {"content-type": "application/json"}


async def _setup(api: Api) -> dict:
    assert (await api.client.post("/v1/tenants", json={"id": "acme", "name": "A"})).is_success
    resp = await api.client.post("/v1/tenants/acme/endpoints", json={"url": "http://127.0.0.1:9/x"})
    assert resp.status_code == 201
    ep = f"/v1/tenants/acme/endpoints/{resp.json()['id']}"
    resp = await api.client.post("/v1/tenants/acme/events", json={"event_type": "t", "payload": 1})
    assert resp.status_code == 202
    dlv = (await api.client.get("/v1/tenants/acme/deliveries")).json()["items"][0]
    src = await api.client.post("/v1/sources", json={"tenant": "acme", "kind": "github",
                                                     "secret": "s"})  # fmt: skip
    tok = await api.client.post("/v1/tokens", json={"scope": "admin", "name": "x"})
    et = await api.client.post("/v1/tenants/acme/event-types", json={"name": "t.made"})
    assert et.status_code == 201, et.text
    return {"ep": ep, "dlv": dlv["id"], "src": src.json()["id"], "tok": tok.json()["id"]}


def _routes(ids: dict) -> list[tuple[str, str]]:
    return [
        ("POST", f"{ids['ep']}/rotate-secret"),
        ("POST", f"/v1/tenants/acme/deliveries/{ids['dlv']}/retry"),
        ("DELETE", ids["ep"]),
        ("DELETE", f"/v1/sources/{ids['src']}"),
        ("DELETE", f"/v1/tokens/{ids['tok']}"),
        ("DELETE", "/v1/tenants/acme/event-types/t.made"),
        ("DELETE", "/v1/tenants/acme"),
    ]


# body-less routes tested elsewhere: an inbound webhook's body is the sender's
# (tests/ingest), expire-all (test_api_portal.py), a region's removal (its own tests)
ELSEWHERE = {
    ("POST", "/in/{source}"),
    ("POST", "/v1/tenants/{tenant}/portal-sessions/expire-all"),
    ("POST", "/v1/cluster/regions/{name}/removal"),
}


async def test_every_route_without_a_body_is_tried_here(api: Api) -> None:
    """The routes the API declares without a request body (/openapi.json) are the ones
    above (an event type's DELETE was missing, and deleted whatever body it got)."""
    doc = (await api.client.get("/openapi.json")).json()
    declared = {(m.upper(), path) for path, ops in doc["paths"].items() for m, op in ops.items()
                if m in ("post", "put", "patch", "delete") and "requestBody" not in op}  # fmt: skip
    ids = {"ep": "/v1/tenants/{tenant}/endpoints/{endpoint}", "dlv": "{delivery}",
           "src": "{source}", "tok": "{token}"}  # fmt: skip
    here = {(m, p.replace("/acme", "/{tenant}").replace("t.made", "{name}"))
            for m, p in _routes(ids)}  # fmt: skip
    assert declared == here | ELSEWHERE


@pytest.mark.parametrize(
    ("content", "headers", "status", "field"),
    [
        (b"notjson", JSON, 400, "body"),
        (b"garbage", JSON, 400, "body"),
        (b"{", JSON, 400, "body"),
        (b'{"x": 1}', JSON, 422, "x"),
        (b"[1]", JSON, 422, "body"),
        (b"notjson", {"content-type": "text/plain"}, 415, "content-type"),
    ],
)
async def test_a_bad_body_is_refused_and_nothing_happens(
    api: Api, content: bytes, headers: dict, status: int, field: str
) -> None:
    ids = await _setup(api)
    before = (await api.client.get(ids["ep"])).json()
    for method, path in _routes(ids):
        resp = await api.client.request(method, path, content=content, headers=headers)
        problem = assert_problem(resp, status, field)
        if status == 400:
            assert problem["error"] == "bad_json", problem
    assert (await api.client.get(ids["ep"])).json() == before  # secret not rotated, not deleted
    deliveries = (await api.client.get("/v1/tenants/acme/deliveries")).json()["items"]
    assert [d["generation"] for d in deliveries] == [0]  # no retry started
    assert (await api.client.get(f"/v1/sources/{ids['src']}")).status_code == 200
    assert any(t["id"] == ids["tok"] for t in (await api.client.get("/v1/tokens")).json()["items"])


async def test_no_body_or_an_empty_object_is_accepted(api: Api) -> None:
    ids = await _setup(api)
    secret = (await api.client.get(ids["ep"])).json()["secret"]
    resp = await api.client.post(f"{ids['ep']}/rotate-secret", content=b"{}", headers=JSON)
    assert resp.status_code == 200 and resp.json()["secret"] != secret
    resp = await api.client.post(f"/v1/tenants/acme/deliveries/{ids['dlv']}/retry")
    assert resp.status_code == 202, resp.text
    for method, path in _routes(ids)[2:]:
        resp = await api.client.request(method, path)
        assert resp.status_code == 204, (path, resp.text)


@pytest.mark.parametrize("kind", ["recover", "replay-missing"])
@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"since": "2999-01-01T00:00:00Z"}, "must not be in the future"),
        ({"since": 5}, "must be an RFC 3339 time"),
        ({"since": None}, "must be an RFC 3339 time"),
        ({}, "is required"),
        ({"since": "yesterday"}, "must be an RFC 3339 time"),
    ],
)
async def test_job_since_is_checked(api: Api, kind: str, body: dict, detail: str) -> None:
    ids = await _setup(api)
    resp = await api.client.post(f"{ids['ep']}/{kind}", json=body)
    problem = assert_problem(resp, 422, "since")
    assert problem["detail"].startswith(detail), problem
    assert (await api.client.get("/v1/tenants/acme/jobs")).json()["items"] == []


async def test_an_empty_patch_changes_nothing(api: Api) -> None:
    """``{}`` on a PATCH route answers the object as it is: nothing written, nothing
    audited (trial of 2026-12-06: an event type's ``updated_at`` moved)."""
    ids = await _setup(api)
    c = api.client
    audited = len((await c.get("/v1/audit", params={"limit": 1000})).json()["items"])
    for path in (ids["ep"], "/v1/tenants/acme/event-types/t.made", "/v1/tenants/acme"):
        before = (await c.get(path)).json()
        resp = await c.patch(path, json={})
        assert resp.status_code == 200 and resp.json() == before, (path, resp.text)
        assert (await c.get(path)).json() == before
    assert len((await c.get("/v1/audit", params={"limit": 1000})).json()["items"]) == audited
