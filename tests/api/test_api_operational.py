"""Operational webhooks on one node over real HTTP (issue 18): endpoint failing and
recovered, delivery dead and backpressure entered reach the operations tenant's endpoint,
signed (the receiver verifies with standardwebhooks), once per transition."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from api_support import Api, RecordingReceiver, eventually, running_node

OPS = {"tenant": "ops"}


async def _setup(api: Api, receiver: RecordingReceiver, **acme_endpoints: dict) -> dict:
    c, ids = api.client, {}
    for t in ("ops", "acme"):
        assert (await c.post("/v1/tenants", json={"id": t, "name": t})).status_code == 201
    ep = await c.post("/v1/tenants/ops/endpoints", json={"url": receiver.url("ops")})
    receiver.secrets["ops"] = ep.json()["secret"]
    for name, fields in acme_endpoints.items():
        ep = await c.post("/v1/tenants/acme/endpoints",
                          json={"url": receiver.url(name), **fields})  # fmt: skip
        assert ep.status_code == 201, ep.text
        receiver.secrets[name] = ep.json()["secret"]
        ids[name] = ep.json()["id"]
    return ids


def ops_received(receiver: RecordingReceiver) -> list[dict[str, Any]]:
    """Operational payloads the ops endpoint accepted (signature verified: 204)."""
    return [json.loads(h.body) for h in receiver.of("ops") if h.status == 204]


async def test_failing_recovered_and_dead(tmp_path: Path, receiver: RecordingReceiver) -> None:
    async with running_node(tmp_path, operational_webhooks=OPS,
                            delivery={"failure_threshold": 2}) as api:  # fmt: skip
        ids = await _setup(api, receiver, flaky={"event_types": ["f"]},
                           down={"event_types": ["d"]})  # fmt: skip
        receiver.fail_first.update(flaky=3, down=1000)
        for t in ("f", "d"):
            resp = await api.client.post("/v1/tenants/acme/events",
                                         json={"event_type": t, "payload": {}})  # fmt: skip
            assert resp.status_code == 202

        async def all_seen() -> list[tuple[str, str]] | None:
            got = sorted((p["type"], p["endpoint"]) for p in ops_received(receiver))
            want = {
                ("endpoint.failing", ids["flaky"]),
                ("endpoint.recovered", ids["flaky"]),
                ("endpoint.failing", ids["down"]),
                ("delivery.dead", ids["down"]),
            }
            return got if want <= set(got) else None

        got = await eventually(all_seen, timeout_s=20)
        # one event per transition, though flaky failed 3 times and down 4 times
        assert got == sorted([("endpoint.failing", ids["flaky"]),
                              ("endpoint.recovered", ids["flaky"]),
                              ("endpoint.failing", ids["down"]),
                              ("delivery.dead", ids["down"])])  # fmt: skip
        dead = next(p for p in ops_received(receiver) if p["type"] == "delivery.dead")
        assert dead["tenant"] == "acme" and dead["attempts"] == 4 and dead["region"] == "us-east-1"
        hits = [h for h in receiver.of("ops") if h.status == 204]
        assert {h.headers["webhook-event-type"] for h in hits} == {
            "endpoint.failing", "endpoint.recovered", "delivery.dead"}  # fmt: skip
        assert receiver.failed == 0
        # the ops tenant lists them as its events; /metrics counts them
        page = (await api.client.get("/v1/tenants/ops/events")).json()
        assert len(page["items"]) == 4
        metrics = (await api.client.get("/metrics")).text
        assert 'regionsync_operational_events_total{type="endpoint.failing"} 2.0' in metrics
        assert 'regionsync_operational_events_total{type="delivery.dead"} 1.0' in metrics
        assert "regionsync_operational_events_dropped_total 0.0" in metrics


async def test_backpressure_entered(tmp_path: Path, receiver: RecordingReceiver) -> None:
    # one tenant takes the whole capacity (no tenant share): the region's own states
    ingest = {"backlog_capacity": 2, "pressure_tau_s": 0, "tenant_backlog_share": 1.0}
    async with running_node(tmp_path, operational_webhooks=OPS, ingest=ingest) as api:
        await _setup(api, receiver, slow={"event_types": ["s"]})
        receiver.fail_first["slow"] = 1000  # its deliveries stay pending: the backlog grows
        statuses = []
        for _ in range(4):
            resp = await api.client.post("/v1/tenants/acme/events",
                                         json={"event_type": "s", "payload": {}})  # fmt: skip
            statuses.append(resp.status_code)
        assert statuses[:2] == [202, 202] and 503 in statuses[2:]

        async def entered() -> list[dict[str, Any]]:
            return [p for p in ops_received(receiver) if p["type"] == "backpressure.entered"]

        got = await eventually(entered)
        assert got[0]["state"] == "overloaded" and got[0]["saturation"] >= 1
        assert len(await entered()) == 1  # refused publishes do not repeat it


async def test_off_by_default(tmp_path: Path, receiver: RecordingReceiver) -> None:
    async with running_node(tmp_path, delivery={"failure_threshold": 1}) as api:
        ids = await _setup(api, receiver, down={})
        receiver.fail_first["down"] = 1000
        await api.client.post("/v1/tenants/acme/events", json={"event_type": "x", "payload": {}})

        async def failing() -> bool:
            ep = await api.client.get(f"/v1/tenants/acme/endpoints/{ids['down']}")
            return ep.json()["state"] == "failing"

        await eventually(failing)
        assert not api.node.ops.enabled and api.node.ops.counts == {}
        assert (await api.client.get("/v1/tenants/ops/events")).json()["items"] == []
