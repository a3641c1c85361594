"""Every list honours and checks ``limit`` and ``cursor`` (trial report findings 7, 8):
endpoints, tokens and one delivery's attempts page like the other lists; a cursor is
bound to its list and tamper-evident; an inverted time range, a bad ``event_type``, an
unknown or repeated query parameter are 422 naming it."""

from __future__ import annotations

import pytest
from api_support import Api, RecordingReceiver, assert_problem, eventually
from test_api_lists import _all_pages

ACME_EVENTS = "/v1/tenants/acme/events"


async def _endpoints(api: Api, tenant: str, n: int) -> list[str]:
    ids = []
    for i in range(n):
        body = {"url": f"http://127.0.0.1:9/{i}"}
        resp = await api.client.post(f"/v1/tenants/{tenant}/endpoints", json=body)
        assert resp.status_code == 201, resp.text
        ids.append(resp.json()["id"])
    return ids


async def _publish(api: Api, tenant: str, n: int = 3) -> None:
    for i in range(n):
        resp = await api.client.post(f"/v1/tenants/{tenant}/events",
                                     json={"event_type": "t", "payload": {"i": i}})  # fmt: skip
        assert resp.status_code == 202, resp.text


async def test_endpoints_list_pages(api: Api, tenant: str) -> None:
    ids = await _endpoints(api, tenant, 4)
    first = (await api.client.get(f"/v1/tenants/{tenant}/endpoints?limit=1")).json()
    assert len(first["items"]) == 1 and first["next"] is not None
    items = await _all_pages(api, f"/v1/tenants/{tenant}/endpoints", 1)
    assert sorted(i["id"] for i in items) == sorted(ids)
    assert [i["id"] for i in await _all_pages(api, f"/v1/tenants/{tenant}/endpoints", 3)] == [
        i["id"] for i in items
    ]


async def test_tokens_list_pages(api: Api) -> None:
    made = []
    for i in range(3):
        resp = await api.client.post("/v1/tokens", json={"scope": "admin", "name": f"n{i}"})
        assert resp.status_code == 201, resp.text
        made.append(resp.json()["id"])
    items = await _all_pages(api, "/v1/tokens", 2)
    assert [i["id"] for i in items] == made[::-1]  # newest first


async def test_delivery_attempts_list_pages(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    resp = await api.client.post(f"/v1/tenants/{tenant}/endpoints", json={"url": receiver.url("r")})
    receiver.secrets["r"] = resp.json()["secret"]
    receiver.fail_first["r"] = 2  # two failures, then success: three attempts
    await _publish(api, tenant, 1)

    async def delivered() -> list:
        resp = await api.client.get(f"/v1/tenants/{tenant}/deliveries?status=delivered")
        return resp.json()["items"]

    dlv = (await eventually(delivered))[0]["id"]
    path = f"/v1/tenants/{tenant}/deliveries/{dlv}/attempts"
    everything = (await api.client.get(path)).json()
    assert len(everything["items"]) == 3 and everything["next"] is None
    paged = await _all_pages(api, path, 1)
    assert paged == everything["items"]
    assert [a["status_code"] for a in paged][0] == 204  # newest first: the success
    asc = await _all_pages(api, path, 1, order="asc")
    assert asc == everything["items"][::-1]


@pytest.mark.parametrize(
    "path",
    ["/v1/tenants/acme/endpoints", "/v1/tokens", "/v1/tenants/acme/deliveries/d/attempts"],
)
@pytest.mark.parametrize(
    ("params", "field"),
    [("limit=abc", "limit"), ("limit=0", "limit"), ("limit=1001", "limit"),
     ("cursor=q", "cursor"), ("limit=5&limit=6", "limit"), ("statuss=dead", "statuss")],
)  # fmt: skip
async def test_formerly_lenient_lists_refuse_bad_parameters(
    api: Api, tenant: str, path: str, params: str, field: str
) -> None:
    assert_problem(await api.client.get(f"{path}?{params}"), 422, field)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ("since=2026-12-02T00:00:00Z&until=2026-12-01T00:00:00Z", "since"),
        ("event_type=a%20b", "event_type"),
        ("event_type=**", "event_type"),
        ("event_type=" + "a" * 129, "event_type"),
        ("statuss=dead", "statuss"),
        ("limit=5&limit=6", "limit"),
        ("status=dead&status=pending", "status"),
    ],
)
async def test_event_search_parameters_checked(
    api: Api, tenant: str, params: str, field: str
) -> None:
    resp = await api.client.get(f"{ACME_EVENTS}?{params}")
    assert_problem(resp, 422, field)
    assert field in resp.text


async def test_event_search_accepts_good_patterns_and_equal_bounds(api: Api, tenant: str) -> None:
    for q in ("event_type=t", "event_type=a.*", "event_type=*",
              "since=2026-12-01T00:00:00Z&until=2026-12-01T00:00:00Z"):  # fmt: skip
        assert (await api.client.get(f"{ACME_EVENTS}?{q}")).status_code == 200, q


async def test_a_cursor_is_bound_to_its_list_and_tamper_evident(api: Api, tenant: str) -> None:
    await _publish(api, tenant, 3)
    assert (await api.client.post("/v1/tenants", json={"id": "beta", "name": "B"})).is_success
    cursor = (await api.client.get(f"{ACME_EVENTS}?limit=1")).json()["next"]
    assert cursor is not None
    assert (await api.client.get(f"{ACME_EVENTS}?limit=1&cursor={cursor}")).status_code == 200
    for other in ("/v1/tenants", "/v1/tenants/acme/deliveries", "/v1/tenants/beta/events",
                  "/v1/tenants/acme/endpoints", "/v1/tokens"):  # fmt: skip
        assert_problem(await api.client.get(f"{other}?cursor={cursor}"), 422, "cursor")
    for changed in (cursor + "x", cursor[:-1], "A" + cursor[1:], cursor.replace(".", "")):
        if changed != cursor:
            assert_problem(await api.client.get(f"{ACME_EVENTS}?cursor={changed}"), 422, "cursor")


async def test_every_api_route_refuses_unknown_query_parameters(api: Api, tenant: str) -> None:
    for path in ("/v1/cluster", "/v1/whoami", "/v1/tenants/acme", "/v1/sources"):
        assert (await api.client.get(path)).status_code == 200, path
        assert_problem(await api.client.get(f"{path}?x=1"), 422, "x")
    resp = await api.client.post("/v1/tenants?dry_run=1", json={"id": "t2", "name": "T"})
    assert_problem(resp, 422, "dry_run")
    assert (await api.client.get("/v1/tenants/t2")).status_code == 404  # nothing was done
    # the console's static files ignore a query string like any static file server
    assert (await api.client.get("/console?v=1")).status_code == 200


@pytest.mark.parametrize(
    ("params", "field"), [("statuss=dead&x=1", "statuss"), ("x=1&x=2", "x"), ("flag", "flag")]
)
async def test_publish_refuses_query_parameters(
    api: Api, tenant: str, params: str, field: str
) -> None:
    """The publish route is served by the fast lane, which ignored a query string (QA
    2026-12-02): like every other ``/v1/`` route it refuses one it does not take."""
    resp = await api.client.post(f"{ACME_EVENTS}?{params}", json={"event_type": "t", "payload": {}})
    assert_problem(resp, 422, field)
    ok = await api.client.post(ACME_EVENTS, json={"event_type": "t", "payload": {}})
    assert ok.status_code == 202


@pytest.mark.parametrize(
    ("params", "field"),
    [("limit=%201", "limit"), ("limit=%2B1", "limit"), ("limit=-1", "limit"),
     ("limit=%D9%A3", "limit"), ("limit=abc", "limit"), ("endpoint=../x", "endpoint"),
     ("endpoint=", "endpoint"), ("endpoint=..", "endpoint")],
)  # fmt: skip
async def test_integers_and_ids_in_queries_are_checked(
    api: Api, tenant: str, params: str, field: str
) -> None:
    """``limit`` takes ASCII digits only and an id parameter an id (QA 2026-12-02:
    `` 1``, ``+1`` were taken, ``endpoint=../x`` answered an empty list)."""
    for path in (ACME_EVENTS, "/v1/tenants/acme/deliveries"):
        resp = await api.client.get(f"{path}?{params}")
        assert_problem(resp, 422, field)
        assert "pydantic" not in resp.text and "Input should" not in resp.text
    assert_problem(await api.client.get("/v1/audit?tenant=../x"), 422, "tenant")
    assert_problem(await api.client.get("/v1/sources?tenant=%00"), 422, "tenant")
    assert (await api.client.get(f"{ACME_EVENTS}?limit=01&endpoint=ep.1")).status_code == 200


async def test_attempt_lists_take_an_order_and_page_in_it(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    """Issue 43: attempts newest first by default, ``order=asc`` oldest first; the cursor
    pages either way without a gap or a repeat; another order is 422 naming ``order``."""
    resp = await api.client.post(f"/v1/tenants/{tenant}/endpoints", json={"url": receiver.url("o")})
    ep = resp.json()["id"]
    receiver.secrets["o"] = resp.json()["secret"]
    receiver.fail_first["o"] = 2  # two failures, then each delivery succeeds: five attempts
    await _publish(api, tenant, 3)
    log = f"/v1/tenants/{tenant}/endpoints/{ep}/attempts"

    async def all_attempts() -> list | None:
        items = (await api.client.get(log)).json()["items"]
        return items if len(items) == 5 else None

    newest = await eventually(all_attempts)
    keys = [(a["at"], a["delivery"], a["n"]) for a in newest]
    assert keys == sorted(keys, reverse=True)
    asc = (await api.client.get(log, params={"order": "asc"})).json()["items"]
    assert asc == newest[::-1]
    for limit in (1, 2, 4):
        assert await _all_pages(api, log, limit) == newest
        assert await _all_pages(api, log, limit, order="desc") == newest
        assert await _all_pages(api, log, limit, order="asc") == asc
    failed = await _all_pages(api, log, 1, status="failed", order="asc")
    assert failed == [a for a in asc if a["error"] is not None] and len(failed) == 2
    by_delivery: dict[str, list[dict]] = {}
    for a in asc:
        by_delivery.setdefault(a["delivery"], []).append(a)
    did, rows = max(by_delivery.items(), key=lambda kv: len(kv[1]))
    one = f"/v1/tenants/{tenant}/deliveries/{did}/attempts"
    mine = (await api.client.get(one)).json()["items"]
    assert mine == rows[::-1] and len(mine) >= 2 and mine[0]["error"] is None
    assert await _all_pages(api, one, 1, order="asc") == rows
    for path in (log, one):
        for bad in ("up", "DESC", ""):
            assert_problem(await api.client.get(path, params={"order": bad}), 422, "order")
    doc = (await api.client.get("/openapi.json")).json()
    for path in ("/v1/tenants/{tenant}/endpoints/{endpoint}/attempts",
                 "/v1/tenants/{tenant}/deliveries/{delivery}/attempts"):  # fmt: skip
        (param,) = [p for p in doc["paths"][path]["get"]["parameters"] if p["name"] == "order"]
        assert param["schema"]["enum"] == ["asc", "desc"]
        assert param["schema"]["default"] == "desc"
