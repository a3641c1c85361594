"""List and search APIs (issue 15): newest first, cursor pages, filters, 422 naming the
parameter; the delivery JSON names its custodian."""

from __future__ import annotations

from typing import Any

import pytest
from api_support import Api, RecordingReceiver, assert_problem, eventually

EPOCH = "2000-01-01T00:00:00Z"


async def _all_pages(api: Api, path: str, limit: int, **params: Any) -> list[dict]:
    """Follow ``next`` until the end; every page has at most ``limit`` items."""
    items: list[dict] = []
    cursor = None
    while True:
        q = {**params, "limit": limit, **({"cursor": cursor} if cursor else {})}
        resp = await api.client.get(path, params=q)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert set(body) == {"items", "next"} and len(body["items"]) <= limit
        items.extend(body["items"])
        cursor = body["next"]
        if cursor is None:
            return items
        assert len(body["items"]) == limit


def _newest_first(items: list[dict], time: str) -> bool:
    keys = [(i[time], i["id"]) for i in items]
    return keys == sorted(keys, reverse=True) and len(set(keys)) == len(keys)


async def test_tenants_list_pages_newest_first(api: Api) -> None:
    for i in range(5):
        resp = await api.client.post("/v1/tenants", json={"id": f"t{i}", "name": f"T {i}"})
        assert resp.status_code == 201
    await api.client.delete("/v1/tenants/t2")
    items = await _all_pages(api, "/v1/tenants", 2)
    assert sorted(t["id"] for t in items) == ["t0", "t1", "t3", "t4"]
    assert _newest_first(items, "created_at")
    assert items == (await api.client.get("/v1/tenants")).json()["items"]


async def test_sources_list_filters_by_tenant_and_hides_secrets(api: Api, tenant: str) -> None:
    assert (await api.client.post("/v1/tenants", json={"id": "other", "name": "O"})).is_success
    ids = {}
    for name, t in (("gh1", tenant), ("gh2", tenant), ("gh3", "other")):
        body = {"tenant": t, "kind": "github", "secret": "s3cret"}
        resp = await api.client.post("/v1/sources", json=body)
        assert resp.status_code == 201
        ids[name] = resp.json()["id"]
    every = await _all_pages(api, "/v1/sources", 1)
    assert sorted(s["id"] for s in every) == sorted(ids.values())
    assert all("secret" not in s for s in every)
    mine = await _all_pages(api, "/v1/sources", 10, tenant=tenant)
    assert sorted(s["id"] for s in mine) == sorted([ids["gh1"], ids["gh2"]])


async def _endpoint(api: Api, tenant: str, receiver: RecordingReceiver, name: str) -> str:
    resp = await api.client.post(
        f"/v1/tenants/{tenant}/endpoints", json={"url": receiver.url(name)}
    )
    assert resp.status_code == 201, resp.text
    receiver.secrets[name] = resp.json()["secret"]
    return resp.json()["id"]


async def test_events_search_filters_and_summaries(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    ok = await _endpoint(api, tenant, receiver, "ok")
    bad = await _endpoint(api, tenant, receiver, "bad")
    receiver.fail_first["bad"] = 1000  # every try to "bad" fails: its deliveries die
    ids: dict[str, str] = {}
    for etype in ("issues.opened", "issues.closed", "push", "issuesx", "issues.opened"):
        resp = await api.client.post(
            f"/v1/tenants/{tenant}/events", json={"event_type": etype, "payload": {"big": "x"}}
        )
        assert resp.status_code == 202
        ids.setdefault(etype, resp.json()["id"])
    path = f"/v1/tenants/{tenant}/events"

    async def settled() -> bool:
        items = (await api.client.get(path)).json()["items"]
        return all(i["deliveries"]["pending"] == 0 for i in items)

    await eventually(settled)
    every = await _all_pages(api, path, 2)
    assert len(every) == 5 and _newest_first(every, "received_at")
    for item in every:
        assert "payload" not in item
        assert item["deliveries"]["total"] == 2
        assert item["deliveries"]["delivered"] == 1 and item["deliveries"]["dead"] == 1
    prefix = await _all_pages(api, path, 10, event_type="issues.*")
    assert sorted(i["event_type"] for i in prefix) == [
        "issues.closed", "issues.opened", "issues.opened"
    ]  # fmt: skip
    exact = await _all_pages(api, path, 10, event_type="push")
    assert [i["id"] for i in exact] == [ids["push"]]
    assert len(await _all_pages(api, path, 10, endpoint=ok, status="delivered")) == 5
    assert await _all_pages(api, path, 10, endpoint=ok, status="dead") == []
    assert len(await _all_pages(api, path, 10, endpoint=bad, status="dead")) == 5
    t = every[2]["received_at"]
    until = await _all_pages(api, path, 10, since=EPOCH, until=t)
    assert until == [i for i in every if i["received_at"] < t]
    since = await _all_pages(api, path, 10, since=t)
    assert since == [i for i in every if i["received_at"] >= t]
    full = (await api.client.get(f"{path}/{ids['push']}")).json()
    assert full["payload"] == {"big": "x"} and len(full["deliveries"]) == 2
    assert {d["custodian"] for d in full["deliveries"]} == {"us-east-1"}


async def test_tenant_deliveries_and_jobs(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    ok = await _endpoint(api, tenant, receiver, "ok")
    bad = await _endpoint(api, tenant, receiver, "bad")
    receiver.fail_first["bad"] = 1000
    for i in range(3):
        body = {"event_type": "t", "payload": {"i": i}}
        assert (await api.client.post(f"/v1/tenants/{tenant}/events", json=body)).is_success
    path = f"/v1/tenants/{tenant}/deliveries"

    async def dead() -> list[dict]:
        items = (await api.client.get(path, params={"status": "dead"})).json()["items"]
        return items if len(items) == 3 else []

    assert {d["endpoint"] for d in await eventually(dead)} == {bad}
    every = await _all_pages(api, path, 4)
    assert len(every) == 6 and _newest_first(every, "created_at")
    assert all(d["custodian"] == d["region"] == "us-east-1" for d in every)
    assert {d["endpoint"] for d in await _all_pages(api, path, 10, endpoint=ok)} == {ok}
    assert len(await _all_pages(api, path, 10, since=EPOCH)) == 6
    assert await _all_pages(api, path, 10, since="2999-01-01T00:00:00Z") == []

    for _ in range(2):
        resp = await api.client.post(
            f"/v1/tenants/{tenant}/endpoints/{bad}/recover", json={"since": EPOCH}
        )
        assert resp.status_code == 202
    jobs = await _all_pages(api, f"/v1/tenants/{tenant}/jobs", 1)
    assert len(jobs) == 2 and all(j["kind"] == "recover" for j in jobs)
    assert _newest_first(jobs, "started_at")


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("/v1/tenants", {"limit": 0}, "limit"),
        ("/v1/tenants", {"limit": 1001}, "limit"),
        ("/v1/tenants", {"limit": "ten"}, "limit"),
        ("/v1/tenants", {"cursor": "!!"}, "cursor"),
        ("/v1/tenants", {"cursor": "bm90LWEtY3Vyc29y"}, "cursor"),  # "not-a-cursor"
        ("/v1/sources", {"limit": -1}, "limit"),
        ("/v1/tenants/acme/events", {"since": "yesterday"}, "since"),
        ("/v1/tenants/acme/events", {"until": "2024-01-01T00:00:00"}, "until"),
        ("/v1/tenants/acme/events", {"status": "lost"}, "status"),
        ("/v1/tenants/acme/events", {"event_type": ""}, "event_type"),
        ("/v1/tenants/acme/events", {"cursor": "MTI6"}, "cursor"),  # "12:" without an id
        ("/v1/tenants/acme/deliveries", {"status": "x"}, "status"),
        ("/v1/tenants/acme/deliveries", {"since": "1"}, "since"),
        ("/v1/tenants/acme/jobs", {"limit": 5000}, "limit"),
    ],
)
async def test_bad_list_parameters_are_422_naming_the_field(
    api: Api, tenant: str, path: str, params: dict, field: str
) -> None:
    assert_problem(await api.client.get(path, params=params), 422, field)


async def test_lists_of_a_missing_tenant_are_404(api: Api) -> None:
    for what in ("events", "deliveries", "jobs"):
        assert_problem(await api.client.get(f"/v1/tenants/nope/{what}"), 404, "tenant")


async def test_tenant_shows_its_cluster_wide_publish_rate(api: Api) -> None:
    """``publish_rate_cluster_per_s``: events/s over about the last minute, from the
    replicated usage counter; null until two samples a second apart exist."""
    c = api.client
    assert (await c.post("/v1/tenants", json={"id": "busy", "name": "B"})).status_code == 201
    first = (await c.get("/v1/tenants/busy")).json()
    assert first["publish_rate_cluster_per_s"] in (None, 0.0)
    for i in range(12):
        body = {"event_type": "rate.test", "payload": {"i": i}}
        assert (await c.post("/v1/tenants/busy/events", json=body)).status_code == 202

    async def measured() -> float | None:
        return (await c.get("/v1/tenants/busy")).json()["publish_rate_cluster_per_s"]

    rate = await eventually(measured, timeout_s=10)
    assert 0 < rate <= 12.0  # 12 events over at least one second
    listed = {t["id"]: t for t in (await c.get("/v1/tenants")).json()["items"]}
    assert listed["busy"]["publish_rate_cluster_per_s"] > 0
