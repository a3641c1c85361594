"""Issue 11 item 3: deleting a tenant or endpoint deletes what belongs to it; a tenant id
that is created again starts empty (events, deliveries, attempts, sources of its earlier
life stay invisible, cannot be retried or recovered into it, and old sources stop
accepting). Endpoint ids are generated (issue 37), so a deleted endpoint's id is never
created again: it stays gone, and so do its deliveries."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

from api_support import Api, RecordingReceiver, assert_problem, eventually, running_node

SECRET = "old-github-secret"
EPOCH = "2000-01-01T00:00:00Z"


def _github(body: bytes, delivery: str, secret: str = SECRET) -> dict:
    sig = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "content": body,
        "headers": {
            "content-type": "application/json",
            "x-hub-signature-256": sig,
            "x-github-event": "issues",
            "x-github-delivery": delivery,
        },
    }


async def _endpoint(api: Api, tenant: str, rcv: RecordingReceiver, name: str, **kw) -> str:
    resp = await api.client.post(
        f"/v1/tenants/{tenant}/endpoints", json={"url": rcv.url(name), **kw}
    )
    assert resp.status_code == 201, resp.text
    rcv.secrets[name] = resp.json()["secret"]
    return resp.json()["id"]


async def _deliveries(api: Api, tenant: str, ep: str) -> list[dict]:
    resp = await api.client.get(f"/v1/tenants/{tenant}/endpoints/{ep}/deliveries")
    assert resp.status_code == 200, resp.text
    return resp.json()["items"]


async def _attempts(api: Api, tenant: str, ep: str) -> list[dict]:
    resp = await api.client.get(f"/v1/tenants/{tenant}/endpoints/{ep}/attempts")
    assert resp.status_code == 200, resp.text
    return resp.json()["items"]


async def _delivered(api: Api, tenant: str, ep: str, n: int) -> None:
    async def done() -> bool:
        items = await _deliveries(api, tenant, ep)
        return len(items) == n and all(d["status"] == "delivered" for d in items)

    await eventually(done)


async def test_recreated_tenant_starts_empty(api: Api, receiver: RecordingReceiver) -> None:
    c = api.client
    assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).status_code == 201
    ep = await _endpoint(api, "acme", receiver, "r")
    src = {"tenant": "acme", "kind": "github", "secret": SECRET}
    created = await c.post("/v1/sources", json=src)
    assert created.status_code == 201
    gh = created.json()["id"]
    body = json.dumps({"action": "opened"}).encode()
    resp = await c.post(f"/in/{gh}", **_github(body, "guid-1"))
    assert resp.status_code == 202, resp.text
    event = resp.json()["id"]
    await _delivered(api, "acme", ep, 1)
    delivery = (await _deliveries(api, "acme", ep))[0]["id"]

    assert (await c.delete("/v1/tenants/acme")).status_code == 204
    assert_problem(await c.get(f"/v1/sources/{gh}"), 404)
    assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A2"})).status_code == 201

    assert_problem(await c.get(f"/v1/tenants/acme/events/{event}"), 404, "event")
    assert_problem(await c.get(f"/v1/tenants/acme/deliveries/{delivery}/attempts"), 404)
    assert_problem(await c.post(f"/v1/tenants/acme/deliveries/{delivery}/retry"), 404)
    assert_problem(await c.get(f"/v1/sources/{gh}"), 404)
    assert_problem(await c.post(f"/in/{gh}", **_github(body, "guid-2")), 404)
    # the endpoint of the earlier life is gone; a new one starts empty
    assert_problem(await c.get(f"/v1/tenants/acme/endpoints/{ep}"), 404)
    ep_again = await _endpoint(api, "acme", receiver, "r2")
    assert ep_again != ep
    assert await _deliveries(api, "acme", ep_again) == []
    assert await _attempts(api, "acme", ep_again) == []
    usage = (await c.get("/v1/tenants/acme")).json()
    assert usage["id"] == "acme"


async def test_source_of_a_recreated_tenant_gets_a_new_id_and_secret(
    api: Api, receiver: RecordingReceiver
) -> None:
    c = api.client
    assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).status_code == 201
    src = {"tenant": "acme", "kind": "github", "secret": SECRET}
    old = (await c.post("/v1/sources", json=src)).json()["id"]
    assert (await c.delete("/v1/tenants/acme")).status_code == 204
    assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).status_code == 201
    new = (await c.post("/v1/sources", json={**src, "secret": "new"})).json()["id"]
    assert new != old
    body = json.dumps({"action": "opened"}).encode()
    assert_problem(await c.post(f"/in/{old}", **_github(body, "guid-9")), 404)
    assert_problem(await c.post(f"/in/{new}", **_github(body, "guid-9")), 401)
    assert (await c.post(f"/in/{new}", **_github(body, "guid-9", "new"))).status_code == 202


async def test_deleted_endpoint_stays_gone_and_never_resends_old_deliveries(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    c = api.client
    ep = await _endpoint(api, tenant, receiver, "old")
    receiver.fail_first["old"] = 1000
    resp = await c.post(f"/v1/tenants/{tenant}/events", json={"event_type": "t", "payload": {}})
    assert resp.status_code == 202

    async def dead() -> bool:
        items = await _deliveries(api, tenant, ep)
        return len(items) == 1 and items[0]["status"] == "dead"

    await eventually(dead)
    old = (await _deliveries(api, tenant, ep))[0]["id"]
    assert await _attempts(api, tenant, ep)
    tried = len(receiver.of("old"))
    assert (await c.delete(f"/v1/tenants/{tenant}/endpoints/{ep}")).status_code == 204
    for path in ("", "/deliveries", "/attempts"):
        assert_problem(await c.get(f"/v1/tenants/{tenant}/endpoints/{ep}{path}"), 404)
    recover = await c.post(f"/v1/tenants/{tenant}/endpoints/{ep}/recover", json={"since": EPOCH})
    assert_problem(recover, 404)
    new = await _endpoint(api, tenant, receiver, "new")
    assert new != ep
    assert await _deliveries(api, tenant, new) == []
    assert await _attempts(api, tenant, new) == []
    # the old delivery stays on its event's record; a retry of it is cancelled, not sent
    event = resp.json()["id"]
    assert (await c.post(f"/v1/tenants/{tenant}/deliveries/{old}/retry")).status_code == 202

    async def cancelled() -> bool:
        got = (await c.get(f"/v1/tenants/{tenant}/events/{event}")).json()
        return got["deliveries"][0]["status"] == "cancelled"

    await eventually(cancelled)
    job = await c.post(f"/v1/tenants/{tenant}/endpoints/{new}/recover", json={"since": EPOCH})
    assert job.status_code == 202

    async def finished() -> dict | None:
        body = (await c.get(f"/v1/tenants/{tenant}/jobs/{job.json()['id']}")).json()
        return body if body["status"] != "running" else None

    assert (await eventually(finished))["done"] == 0
    assert receiver.of("new") == [] and len(receiver.of("old")) == tried
    assert await _deliveries(api, tenant, new) == []
    assert_problem(await c.get(f"/v1/tenants/{tenant}/endpoints/{ep}"), 404)


async def test_pending_delivery_of_deleted_endpoint_is_cancelled_not_sent(
    tmp_path: Path, receiver: RecordingReceiver
) -> None:
    async with running_node(tmp_path, delivery={"retry_schedule_s": [2.0, 2.0]}) as api:
        c = api.client
        assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).status_code == 201
        ep = await _endpoint(api, "acme", receiver, "old")
        receiver.fail_first["old"] = 1
        resp = await c.post("/v1/tenants/acme/events", json={"event_type": "t", "payload": {}})
        event = resp.json()["id"]

        async def retrying() -> bool:  # first try failed, the next one is ~2 s away
            items = await _deliveries(api, "acme", ep)
            return items[0]["status"] == "pending" and items[0]["attempts"] == 1

        await eventually(retrying)
        assert (await c.delete(f"/v1/tenants/acme/endpoints/{ep}")).status_code == 204
        await _endpoint(api, "acme", receiver, "new")  # a new endpoint takes no old work

        async def cancelled() -> bool:
            got = (await c.get(f"/v1/tenants/acme/events/{event}")).json()
            return got["deliveries"][0]["status"] == "cancelled"

        await eventually(cancelled)
        assert receiver.of("new") == [] and len(receiver.of("old")) == 1
        usage = (await c.get("/v1/tenants/acme")).json()["usage"]
        assert usage["backlog"] == 0
