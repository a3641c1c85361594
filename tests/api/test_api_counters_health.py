"""Issue 11 item 6: usage counters stay exact through retries, a new url resets an
endpoint's failure count, a rate limit has a floor."""

from __future__ import annotations

from pathlib import Path

from api_support import Api, RecordingReceiver, assert_problem, eventually, running_node


async def _endpoint(api: Api, tenant: str, rcv: RecordingReceiver, name: str) -> str:
    resp = await api.client.post(f"/v1/tenants/{tenant}/endpoints", json={"url": rcv.url(name)})
    assert resp.status_code == 201, resp.text
    rcv.secrets[name] = resp.json()["secret"]
    return resp.json()["id"]


async def _deliveries(api: Api, tenant: str, ep: str) -> list[dict]:
    return (await api.client.get(f"/v1/tenants/{tenant}/endpoints/{ep}/deliveries")).json()["items"]


async def _usage_matches_states(api: Api, tenant: str, ep: str) -> dict | None:
    usage = (await api.client.get(f"/v1/tenants/{tenant}")).json()["usage"]
    states = [d["status"] for d in await _deliveries(api, tenant, ep)]
    want = {
        "backlog": states.count("pending"),
        "deliveries_succeeded": states.count("delivered"),
        "deliveries_failed": states.count("dead"),
    }
    return usage if all(usage[k] == v for k, v in want.items()) and not want["backlog"] else None


async def test_retrying_pending_and_delivered_keeps_counters_exact(
    tmp_path: Path, receiver: RecordingReceiver
) -> None:
    async with running_node(tmp_path, delivery={"retry_schedule_s": [2.0, 2.0]}) as api:
        c = api.client
        assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).status_code == 201
        ep = await _endpoint(api, "acme", receiver, "r")
        receiver.fail_first["r"] = 1
        for i in range(3):
            resp = await c.post("/v1/tenants/acme/events", json={"event_type": "t", "payload": i})
            assert resp.status_code == 202

        async def one_retrying() -> list[dict] | None:
            rows = await _deliveries(api, "acme", ep)
            pending = [d for d in rows if d["status"] == "pending" and d["attempts"] == 1]
            return pending or None

        (pending,) = await eventually(one_retrying)
        # retry a pending one (its backlog must not grow) and, once delivered, all again
        assert (await c.post(f"/v1/tenants/acme/deliveries/{pending['id']}/retry")).is_success

        async def all_delivered() -> list[dict] | None:
            rows = await _deliveries(api, "acme", ep)
            return rows if all(d["status"] == "delivered" for d in rows) else None

        for d in await eventually(all_delivered):
            assert (await c.post(f"/v1/tenants/acme/deliveries/{d['id']}/retry")).is_success
        await eventually(all_delivered)
        usage = await eventually(lambda: _usage_matches_states(api, "acme", ep))
        assert usage["deliveries_succeeded"] == 3 and usage["backlog"] == 0


async def test_new_url_resets_consecutive_failures(
    tmp_path: Path, receiver: RecordingReceiver
) -> None:
    opts = {"retry_schedule_s": [100.0], "failure_threshold": 3}
    async with running_node(tmp_path, delivery=opts) as api:
        c = api.client
        assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).status_code == 201
        ep = await _endpoint(api, "acme", receiver, "old")
        receiver.fail_first.update(old=100, new=100)

        async def attempts(n: int) -> bool:
            log = await c.get(f"/v1/tenants/acme/endpoints/{ep}/attempts")
            return len(log.json()["items"]) == n

        for i in range(2):
            await c.post("/v1/tenants/acme/events", json={"event_type": "t", "payload": i})
        await eventually(lambda: attempts(2))
        resp = await c.patch(f"/v1/tenants/acme/endpoints/{ep}", json={"url": receiver.url("new")})
        assert resp.status_code == 200
        await c.post("/v1/tenants/acme/events", json={"event_type": "t", "payload": 2})
        await eventually(lambda: attempts(3))
        got = (await c.get(f"/v1/tenants/acme/endpoints/{ep}")).json()
        assert got["state"] == "active", got
        assert api.node.queue.health[ep].failures == 1


async def test_rate_limit_has_a_floor(api: Api, tenant: str) -> None:
    for rate in (1e-300, 0.009):
        resp = await api.client.post(
            f"/v1/tenants/{tenant}/endpoints",
            json={"url": "https://hooks.example/x", "rate_limit_per_s": rate},
        )
        assert_problem(resp, 422, "rate_limit_per_s")
