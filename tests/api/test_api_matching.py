"""Filters and event type patterns through the HTTP API, end to end to a receiver."""

from __future__ import annotations

from api_support import Api, RecordingReceiver, assert_problem, eventually


async def test_filters_and_patterns_route_events(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    c = api.client
    eps = {
        "opened": {"event_types": ["issues.*"], "filter": {"action": "opened"}},
        "acme": {
            "event_types": ["*"],
            "filter": {"repository.full_name": {"$startsWith": "acme/"}},
        },
        "nothing": {"event_types": ["push"]},
    }
    ids = {}
    for name, body in eps.items():
        resp = await c.post(
            f"/v1/tenants/{tenant}/endpoints", json={"url": receiver.url(name), **body}
        )
        assert resp.status_code == 201, resp.text
        receiver.secrets[name] = resp.json()["secret"]
        ids[name] = resp.json()["id"]
    events = [
        ("issues.opened", {"action": "opened", "repository": {"full_name": "acme/web"}}),
        ("issues.closed", {"action": "closed", "repository": {"full_name": "other/x"}}),
        ("pull_request.opened", {"action": "opened", "repository": {"full_name": "acme/api"}}),
    ]
    published = []
    for etype, payload in events:
        resp = await c.post(
            f"/v1/tenants/{tenant}/events", json={"event_type": etype, "payload": payload}
        )
        assert resp.status_code == 202
        published.append(resp.json()["id"])

    async def done() -> bool:
        return len(receiver.of("opened")) == 1 and len(receiver.of("acme")) == 2

    await eventually(done)
    assert [h.headers["webhook-id"] for h in receiver.of("opened")] == [published[0]]
    assert {h.headers["webhook-id"] for h in receiver.of("acme")} == {published[0], published[2]}
    assert receiver.of("nothing") == []
    # the second event matched nothing: it has no deliveries at all
    ev = (await c.get(f"/v1/tenants/{tenant}/events/{published[1]}")).json()
    assert ev["deliveries"] == []

    test = f"/v1/tenants/{tenant}/endpoints/{ids['opened']}/test-filter"
    assert (await c.post(test, json={"payload": {"action": "opened"}})).json() == {
        "matches": True,
        "failed_clause": None,
    }
    miss = (await c.post(test, json={"payload": {"action": "closed"}})).json()
    assert miss == {"matches": False, "failed_clause": "action.$eq"}
    assert_problem(await c.post(test, json={"sample": 1}), 422, "sample")
    assert_problem(await c.post(test, json={}), 422, "payload")
    # QA 2026-12-02: an extra member was reported as "payload"
    assert_problem(await c.post(test, json={"payload": {}, "filter": {}}), 422, "filter")


async def test_filter_changes_take_effect(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    c = api.client
    resp = await c.post(
        f"/v1/tenants/{tenant}/endpoints",
        json={"url": receiver.url("f"), "filter": {"priority": "high"}},
    )
    receiver.secrets["f"] = resp.json()["secret"]
    ep = resp.json()["id"]
    body = {"event_type": "alert", "payload": {"priority": "low"}}
    assert (await c.post(f"/v1/tenants/{tenant}/events", json=body)).status_code == 202
    patch = await c.patch(f"/v1/tenants/{tenant}/endpoints/{ep}", json={"filter": None})
    assert patch.status_code == 200 and patch.json()["filter"] is None
    assert (await c.post(f"/v1/tenants/{tenant}/events", json=body)).status_code == 202

    async def one() -> bool:
        return len(receiver.of("f")) == 1

    await eventually(one)
    bad = await c.patch(f"/v1/tenants/{tenant}/endpoints/{ep}", json={"filter": {"$or": 1}})
    assert_problem(bad, 422, "filter.$or")
