"""HTTP API happy paths against one real node (docs/api.md): tenants, endpoints,
publish, events, attempts, idempotency and the operational routes."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime

from api_support import Api, RecordingReceiver, assert_problem, eventually

from regionsync.core.capabilities import ALL, RELEASE, announced

RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def is_time(value: object) -> bool:
    if not isinstance(value, str) or not RFC3339.fullmatch(value):
        return False
    datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    return True


async def test_tenant_create_read_delete(api: Api) -> None:
    c = api.client
    resp = await c.post("/v1/tenants", json={"id": "globex", "name": "Globex"})
    assert resp.status_code == 201, resp.text
    t = resp.json()
    assert t["id"] == "globex" and t["name"] == "Globex"
    assert is_time(t["created_at"])
    assert t["usage"] == {
        "events_published": 0,
        "deliveries_succeeded": 0,
        "deliveries_failed": 0,
        "backlog": 0,
    }

    resp = await c.get("/v1/tenants/globex")
    assert resp.status_code == 200
    assert resp.json() == t

    assert_problem(await c.post("/v1/tenants", json={"id": "globex", "name": "x"}), 409, "id")

    resp = await c.delete("/v1/tenants/globex")
    assert resp.status_code == 204 and resp.content == b""
    assert_problem(await c.get("/v1/tenants/globex"), 404, "tenant")
    assert_problem(await c.delete("/v1/tenants/globex"), 404, "tenant")
    assert_problem(await c.get("/v1/tenants/globex/endpoints"), 404, "tenant")


async def test_tenant_without_id_gets_a_generated_one(api: Api) -> None:
    resp = await api.client.post("/v1/tenants", json={"name": "Initech"})
    assert resp.status_code == 201, resp.text
    tid = resp.json()["id"]
    assert tid.startswith("ten_")
    assert (await api.client.get(f"/v1/tenants/{tid}")).json()["name"] == "Initech"


async def test_endpoint_create_has_secret_and_documented_defaults(api: Api, tenant: str) -> None:
    resp = await api.client.post(
        f"/v1/tenants/{tenant}/endpoints", json={"url": "http://127.0.0.1:9/hook"}
    )
    assert resp.status_code == 201, resp.text
    ep = resp.json()
    assert ep["id"].startswith("ep_")
    assert ep["tenant"] == tenant
    assert ep["url"] == "http://127.0.0.1:9/hook"
    assert ep["secret"].startswith("whsec_")
    assert 24 <= len(base64.b64decode(ep["secret"][len("whsec_") :], validate=True)) <= 64
    assert ep["event_types"] == []
    assert ep["filter"] is None
    assert ep["description"] == ""
    assert ep["headers"] == {}
    assert ep["paused"] is False
    assert ep["state"] == "active"
    assert ep["rate_limit_per_s"] > 0 and ep["max_in_flight"] >= 1
    assert is_time(ep["created_at"]) and is_time(ep["updated_at"])


async def test_endpoint_list_read_patch_delete(api: Api, tenant: str) -> None:
    c = api.client
    base = f"/v1/tenants/{tenant}/endpoints"
    secret = "whsec_" + base64.b64encode(bytes(range(32))).decode()
    resp = await c.post(
        base,
        json={
            "url": "http://127.0.0.1:9/one",
            "event_types": ["order.created", "order.paid"],
            "description": "first",
            "secret": secret,
            "rate_limit_per_s": 5,
            "max_in_flight": 2,
            "headers": {"X-Team": "billing"},
            "paused": True,
        },
    )
    assert resp.status_code == 201, resp.text
    one = resp.json()
    assert one["id"].startswith("ep_") and one["secret"] == secret
    ep = f"{base}/{one['id']}"
    assert one["event_types"] == ["order.created", "order.paid"]
    assert one["headers"] == {"X-Team": "billing"}
    assert one["paused"] is True and one["state"] == "paused"
    resp = await c.post(base, json={"url": "http://127.0.0.1:9/two"})
    two = resp.json()

    listed = (await c.get(base)).json()
    assert [e["id"] for e in listed["items"]] == [two["id"], one["id"]]  # newest first
    assert listed["next"] is None
    assert (await c.get(ep)).json() == one

    resp = await c.patch(
        ep,
        json={
            "url": "http://127.0.0.1:9/one-b",
            "description": "changed",
            "paused": False,
            "rate_limit_per_s": 7.5,
            "max_in_flight": 3,
            "headers": {"X-Other": "1"},
        },
    )
    assert resp.status_code == 200, resp.text
    patched = resp.json()
    assert patched["url"] == "http://127.0.0.1:9/one-b"
    assert patched["description"] == "changed"
    assert patched["paused"] is False and patched["state"] == "active"
    assert patched["rate_limit_per_s"] == 7.5 and patched["max_in_flight"] == 3
    assert patched["headers"] == {"X-Other": "1"}
    assert patched["secret"] == secret and patched["created_at"] == one["created_at"]
    assert patched["updated_at"] >= one["updated_at"]
    assert (await c.get(ep)).json() == patched

    resp = await c.patch(
        ep,
        json={"event_types_add": ["order.refunded"], "event_types_remove": ["order.created"]},
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["event_types"] == ["order.paid", "order.refunded"]
    resp = await c.patch(ep, json={"event_types_remove": ["order.nothing"]})
    assert resp.json()["event_types"] == ["order.paid", "order.refunded"]
    resp = await c.patch(ep, json={"event_types": ["x.y"]})
    assert resp.json()["event_types"] == ["x.y"]

    resp = await c.delete(ep)
    assert resp.status_code == 204 and resp.content == b""
    assert_problem(await c.get(ep), 404, "endpoint")
    assert_problem(await c.patch(ep, json={"description": "x"}), 404, "endpoint")
    assert_problem(await c.delete(ep), 404, "endpoint")
    assert [e["id"] for e in (await c.get(base)).json()["items"]] == [two["id"]]


async def test_publish_and_read_event_with_deliveries_and_attempts(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    c = api.client
    resp = await c.post(
        f"/v1/tenants/{tenant}/endpoints",
        json={"url": receiver.url("all"), "description": "everything"},
    )
    ep = resp.json()
    receiver.secrets["all"] = ep["secret"]
    other = await c.post(
        f"/v1/tenants/{tenant}/endpoints",
        json={"url": receiver.url("other"), "event_types": ["never.sent"]},
    )
    assert other.status_code == 201

    payload = {"order": 42, "items": [{"sku": "A-1", "qty": 2}], "note": "héllo ☃"}
    resp = await c.post(
        f"/v1/tenants/{tenant}/events", json={"event_type": "order.created", "payload": payload}
    )
    assert resp.status_code == 202, resp.text
    accepted = resp.json()
    assert set(accepted) == {"id", "event_type", "region", "received_at"}
    assert accepted["id"].startswith("evt_")
    assert accepted["event_type"] == "order.created"
    assert accepted["region"] == "us-east-1"
    assert is_time(accepted["received_at"])

    async def delivered() -> dict | None:
        ev = (await c.get(f"/v1/tenants/{tenant}/events/{accepted['id']}")).json()
        return ev if ev["deliveries"] and ev["deliveries"][0]["status"] == "delivered" else None

    ev = await eventually(delivered)
    assert {k: ev[k] for k in ("id", "tenant", "event_type", "payload", "region")} == {
        "id": accepted["id"],
        "tenant": tenant,
        "event_type": "order.created",
        "payload": payload,
        "region": "us-east-1",
    }
    assert ev["received_at"] == accepted["received_at"]
    assert len(ev["deliveries"]) == 1  # "other" does not subscribe to order.created
    d = ev["deliveries"][0]
    assert d["id"].startswith("dlv_")
    assert (d["event"], d["endpoint"], d["region"]) == (accepted["id"], ep["id"], "us-east-1")
    assert d["attempts"] == 1 and d["next_attempt_at"] is None

    resp = await c.get(f"/v1/tenants/{tenant}/deliveries/{d['id']}/attempts")
    assert resp.status_code == 200
    attempts = resp.json()["items"]
    assert len(attempts) == 1
    a = attempts[0]
    assert a["status_code"] == 204 and a["error"] is None and a["region"] == "us-east-1"
    assert is_time(a["at"]) and a["latency_ms"] >= 0 and isinstance(a["response_excerpt"], str)

    log = (await c.get(f"/v1/tenants/{tenant}/endpoints/{ep['id']}/deliveries")).json()
    assert [x["id"] for x in log["items"]] == [d["id"]] and log["next"] is None
    resp = await c.get(
        f"/v1/tenants/{tenant}/endpoints/{ep['id']}/deliveries",
        params={"status": "delivered", "since": "2000-01-01T00:00:00Z", "limit": 1},
    )
    assert [x["id"] for x in resp.json()["items"]] == [d["id"]]
    resp = await c.get(
        f"/v1/tenants/{tenant}/endpoints/{ep['id']}/deliveries", params={"status": "dead"}
    )
    assert resp.json()["items"] == []

    usage = (await c.get(f"/v1/tenants/{tenant}")).json()["usage"]
    assert usage["events_published"] == 1 and usage["deliveries_succeeded"] == 1
    assert usage["backlog"] == 0

    assert_problem(await c.get(f"/v1/tenants/{tenant}/events/evt_nope"), 404, "event")
    assert_problem(
        await c.get(f"/v1/tenants/{tenant}/deliveries/dlv_nope/attempts"), 404, "delivery"
    )


async def test_idempotency_key_same_body_same_id_other_body_409(api: Api, tenant: str) -> None:
    c = api.client
    url = f"/v1/tenants/{tenant}/events"
    body = {"event_type": "invoice.paid", "payload": {"invoice": 7}}
    key = {"Idempotency-Key": "inv-7-paid"}
    first = await c.post(url, json=body, headers=key)
    assert first.status_code == 202, first.text
    again = await c.post(url, json=body, headers=key)
    assert again.status_code == 202, again.text
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["received_at"] == first.json()["received_at"]
    assert "duplicate" not in first.json() and again.json()["duplicate"] is True

    before = (await c.get("/v1/cluster")).json()["counts"]
    other = await c.post(
        url, json={"event_type": "invoice.paid", "payload": {"invoice": 8}}, headers=key
    )
    assert_problem(other, 409, "Idempotency-Key")
    other_type = await c.post(url, json={**body, "event_type": "invoice.void"}, headers=key)
    assert_problem(other_type, 409, "Idempotency-Key")
    assert (await c.get("/v1/cluster")).json()["counts"] == before
    assert before["events"] == 1

    # another key, or no key, is another event
    fresh = await c.post(url, json=body, headers={"Idempotency-Key": "inv-7-paid-2"})
    assert fresh.status_code == 202 and fresh.json()["id"] != first.json()["id"]
    assert "duplicate" not in fresh.json()
    unkeyed = await c.post(url, json=body)
    assert unkeyed.status_code == 202 and unkeyed.json()["id"] != first.json()["id"]


async def test_cluster_shape(api: Api, tenant: str) -> None:
    resp = await api.client.get("/v1/cluster")
    assert resp.status_code == 200
    c = resp.json()
    assert c["region"] == "us-east-1"
    assert isinstance(c["incarnation"], int)
    assert c["peers"] == []
    # no peers: the cluster is this node, so every feature it reads is in use
    new = announced(ALL)  # every feature newer than the baseline
    assert c["capabilities"] == {
        "release": RELEASE, "features": new, "region_features": new, "effective": new,
        "held_back_by": [],
    }  # fmt: skip
    assert re.fullmatch(r"[0-9a-f]{64}", c["registry_hash"])
    assert re.fullmatch(r"[0-9a-f]{64}", c["registry_digest"])  # issue 42
    assert c["registry_hash_age_s"] == 0  # a small registry: worked out when read
    vv = c["version_vector"]
    assert isinstance(vv, dict) and len(vv) == 1
    (seq,) = vv.values()
    assert isinstance(seq, int) and seq >= 1  # the tenant's creation is one record
    # a SQLite node is its region's only process: it holds the replication role
    assert c["process"] == {
        "actor": c["actor"],
        "holder": None,
        "replication_role": True,
        "processes": None,
    }
    # the hash moves with the registry and the vector with every local change
    await api.client.post("/v1/tenants", json={"id": "t2", "name": "Two"})
    c2 = (await api.client.get("/v1/cluster")).json()
    assert c2["registry_hash"] != c["registry_hash"]
    assert c2["registry_digest"] != c["registry_digest"]
    assert list(c2["version_vector"].values())[0] == seq + 1


async def test_health_readiness_metrics_openapi(api: Api, tenant: str) -> None:
    c = api.client
    resp = await c.get("/healthz")
    assert resp.status_code == 200 and resp.json()["status"] == "ok"
    resp = await c.get("/readyz")
    assert resp.status_code == 200 and resp.json()["status"] == "ready"

    await c.post(f"/v1/tenants/{tenant}/events", json={"event_type": "a", "payload": 1})
    resp = await c.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")
    text = resp.text
    assert "# TYPE regionsync_events gauge" in text
    assert 'regionsync_events{origin="local"} 1.0' in text
    assert re.search(r'^regionsync_deliveries\{status="pending"\} \d', text, re.M)
    assert "regionsync_clock_error_ms 0.0" in text and "regionsync_clock_suspect 0.0" in text
    assert 'regionsync_feature_in_use{feature="optional-fields"} 1.0' in text
    assert "regionsync_unknown_fields_total 0.0" in text
    for line in text.splitlines():
        assert line.startswith("#") or re.fullmatch(
            r"[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? \S+", line
        ), line

    resp = await c.get("/openapi.json")
    assert resp.status_code == 200
    doc = resp.json()
    assert doc["openapi"].startswith("3.")
    paths = doc["paths"]
    for path in (
        "/v1/tenants",
        "/v1/tenants/{tenant}",
        "/v1/tenants/{tenant}/endpoints",
        "/v1/tenants/{tenant}/endpoints/{endpoint}",
        "/v1/tenants/{tenant}/events",
        "/v1/tenants/{tenant}/events/{event}",
        "/v1/tenants/{tenant}/deliveries/{delivery}/attempts",
        "/v1/cluster",
    ):
        assert path in paths, path
    assert "patch" in paths["/v1/tenants/{tenant}/endpoints/{endpoint}"]
