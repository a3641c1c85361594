"""Inbound sources and backpressure over real HTTP against one node."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from pathlib import Path

import httpx
from api_support import Api, assert_problem, eventually, running_node

DATASET = Path(__file__).resolve().parents[1] / "data/github-webhooks"
SECRET = "It's a Secret to Everybody"


def github_request(body: bytes, delivery: str, event: str = "issues") -> dict:
    sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return {
        "content": body,
        "headers": {
            "content-type": "application/json",
            "x-hub-signature-256": sig,
            "x-github-event": event,
            "x-github-delivery": delivery,
        },
    }


async def make_github_source(api: Api, tenant: str) -> str:
    resp = await api.client.post(
        "/v1/sources", json={"tenant": tenant, "kind": "github", "secret": SECRET}
    )
    assert resp.status_code == 201, resp.text
    body = resp.json()
    assert "secret" not in body and body["priority"] == "critical"
    assert body["url_path"] == f"/in/{body['id']}"
    return body["id"]


async def test_github_source_accepts_dedups_and_delivers(api: Api, tenant: str, receiver) -> None:
    ep = await api.client.post(
        f"/v1/tenants/{tenant}/endpoints", json={"url": receiver.url("hook")}
    )
    receiver.secrets["hook"] = ep.json()["secret"]
    src = await make_github_source(api, tenant)
    body = (DATASET / "issues.opened.1.json").read_bytes()
    first = await api.client.post(f"/in/{src}", **github_request(body, "guid-1"))
    assert first.status_code == 202, first.text
    assert first.json()["event_type"] == "issues.opened" and not first.json()["duplicate"]
    again = await api.client.post(f"/in/{src}", **github_request(body, "guid-1"))
    assert again.status_code == 202 and again.json()["id"] == first.json()["id"]
    assert again.json()["duplicate"]

    async def delivered() -> bool:
        return len(receiver.of("hook")) >= 1

    await eventually(delivered)
    hits = receiver.of("hook")
    assert len(hits) == 1 and hits[0].headers["webhook-id"] == first.json()["id"]
    assert json.loads(hits[0].body) == json.loads(body)
    event = await api.client.get(f"/v1/tenants/{tenant}/events/{first.json()['id']}")
    assert event.status_code == 200 and event.json()["event_type"] == "issues.opened"


async def test_inbound_refusals(api: Api, tenant: str) -> None:
    src = await make_github_source(api, tenant)
    body = b'{"action":"opened"}'
    ok = github_request(body, "guid-2")
    tampered = {**ok, "content": body + b" "}
    resp = await api.client.post(f"/in/{src}", **tampered)
    assert_problem(resp, 401, "X-Hub-Signature-256")
    no_sig = {**ok, "headers": {k: v for k, v in ok["headers"].items() if "signature" not in k}}
    assert_problem(await api.client.post(f"/in/{src}", **no_sig), 401, "X-Hub-Signature-256")
    text = {**ok, "headers": {**ok["headers"], "content-type": "text/plain"}}
    assert_problem(await api.client.post(f"/in/{src}", **text), 415, "content-type")
    bad_json = github_request(b"{nope", "guid-3")
    assert_problem(await api.client.post(f"/in/{src}", **bad_json), 400, "body")
    not_utf8 = github_request(b'{"a":"\xff"}', "guid-4")
    assert_problem(await api.client.post(f"/in/{src}", **not_utf8), 400, "body")
    huge = github_request(b'{"a":"' + b"x" * (256 * 1024) + b'"}', "guid-5")
    assert_problem(await api.client.post(f"/in/{src}", **huge), 413, "body")
    assert_problem(await api.client.post("/in/nope", **ok), 404, "source")
    # nothing was accepted by any of them
    cluster = (await api.client.get("/v1/cluster")).json()
    assert cluster["counts"]["events"] == 0


async def test_stripe_source_over_http(api: Api, tenant: str) -> None:
    resp = await api.client.post(
        "/v1/sources", json={"tenant": tenant, "kind": "stripe", "secret": "whsec_test"}
    )
    assert resp.status_code == 201
    src = resp.json()["id"]
    body = b'{"id":"evt_123","type":"charge.succeeded","data":{}}'
    for t, status in ((int(time.time()), 202), (int(time.time()) - 3600, 401)):
        sig = hmac.new(b"whsec_test", f"{t}.".encode() + body, hashlib.sha256).hexdigest()
        r = await api.client.post(
            f"/in/{src}",
            content=body,
            headers={"content-type": "application/json", "stripe-signature": f"t={t},v1={sig}"},
        )
        assert r.status_code == status, r.text


async def test_source_validation_and_lifecycle(api: Api, tenant: str) -> None:
    bad = await api.client.post(
        "/v1/sources", json={"tenant": tenant, "kind": "ftp", "secret": "s"}
    )
    assert_problem(bad, 422, "kind")
    missing = await api.client.post(
        "/v1/sources", json={"tenant": "nobody", "kind": "github", "secret": "s"}
    )
    assert_problem(missing, 404, "tenant")
    for chosen in ("gh", None, ""):  # the public /in/{source} id is always generated
        refused = await api.client.post(
            "/v1/sources", json={"id": chosen, "tenant": tenant, "kind": "github", "secret": "s"}
        )
        assert_problem(refused, 422, "id")
    assert (await api.client.get("/v1/sources")).json()["items"] == []
    src = await make_github_source(api, tenant)
    assert src.startswith("src_") and len(src) > 20
    assert (await api.client.get(f"/v1/sources/{src}")).status_code == 200
    assert (await api.client.delete(f"/v1/sources/{src}")).status_code == 204
    assert_problem(await api.client.get(f"/v1/sources/{src}"), 404, "source")


async def test_idempotency_key_and_ack_policy_on_tenant(api: Api) -> None:
    resp = await api.client.post(
        "/v1/tenants", json={"id": "solo", "name": "Solo", "ack_policy": "one-remote"}
    )
    assert resp.status_code == 201 and resp.json()["ack_policy"] == "one-remote"
    bad = await api.client.post("/v1/tenants", json={"name": "x", "ack_policy": "maybe"})
    assert_problem(bad, 422, "ack_policy")


async def test_one_remote_without_peers_answers_503(tmp_path: Path) -> None:
    async with running_node(tmp_path, ingest={"one_remote_timeout_s": 0.2}) as api:
        await api.client.post(
            "/v1/tenants", json={"id": "t", "name": "T", "ack_policy": "one-remote"}
        )
        resp = await api.client.post(
            "/v1/tenants/t/events", json={"event_type": "a", "payload": {}}
        )
        problem = assert_problem(resp, 503)
        assert problem["error"] == "not_replicated" and int(resp.headers["retry-after"]) >= 1


async def test_shedding_low_priority_while_critical_is_accepted(tmp_path: Path) -> None:
    settings = {
        "ingest": {
            "backlog_capacity": 10,
            "tenant_backlog_share": 1.0,  # one tenant reaches the region's own states
            "pressure_tau_s": 0.0,
            "event_type_priorities": {"crit.*": "critical", "low.*": "low"},
        },
        # a dead endpoint with a long retry schedule: deliveries stay pending
        "delivery": {"retry_schedule_s": [3600]},
    }
    async with running_node(tmp_path, **settings) as api:
        c: httpx.AsyncClient = api.client
        await c.post("/v1/tenants", json={"id": "t", "name": "T"})
        ep = await c.post("/v1/tenants/t/endpoints", json={"url": "http://127.0.0.1:9/dead"})
        assert ep.status_code == 201

        async def publish(etype: str) -> httpx.Response:
            return await c.post("/v1/tenants/t/events", json={"event_type": etype, "payload": {}})

        for _ in range(8):  # S = 0.8: shedding low
            assert (await publish("crit.a")).status_code == 202
        shed = await publish("low.a")
        assert_problem(shed, 429)
        assert int(shed.headers["retry-after"]) >= 1
        assert (await publish("normal.a")).status_code == 202  # S = 0.9: critical only
        assert_problem(await publish("normal.a"), 429)
        assert (await publish("crit.a")).status_code == 202  # S = 1.0: hard limit
        hard = await publish("crit.a")
        assert_problem(hard, 503)
        assert int(hard.headers["retry-after"]) >= 1
        metrics = (await c.get("/metrics")).text
        assert 'regionsync_ingest_total{decision="shed",priority="low"} 1.0' in metrics
        assert 'regionsync_ingest_state{state="overloaded"} 1.0' in metrics
