"""A tenant's share of the region's backlog (issue 38, kind 3): with
``ingest.backlog_capacity`` 300, a tenant whose endpoint takes 0.01 events/s published 400
events, got 301 x 202, and then every other tenant's publish was 503 until that backlog
drained (hours). Now the tenant gets 429 ``tenant_backlog_full`` (Retry-After) at its
share (``ingest.tenant_backlog_share``, default half the capacity) and the others keep
getting 202; also through an inbound source, after a restart, and for a retry."""

from __future__ import annotations

from pathlib import Path

import httpx
from api_support import Api, RecordingReceiver, assert_problem, eventually, running_node
from test_api_ingest import github_request, make_github_source

EVENT = {"event_type": "a.b", "payload": {"n": 1}}


async def _tenant_with_endpoint(
    api: Api, receiver: RecordingReceiver, tid: str, **endpoint: object
) -> str:
    c = api.client
    assert (await c.post("/v1/tenants", json={"id": tid, "name": tid})).status_code == 201
    resp = await c.post(f"/v1/tenants/{tid}/endpoints", json={"url": receiver.url(tid), **endpoint})
    assert resp.status_code == 201, resp.text
    receiver.secrets[tid] = resp.json()["secret"]
    return resp.json()["id"]


def _assert_backlog_full(resp: httpx.Response) -> None:
    body = assert_problem(resp, 429, "tenant")
    assert body["error"] == "tenant_backlog_full", body
    assert 24 <= int(resp.headers["retry-after"]) <= 36  # the longest, jittered


async def test_one_tenant_backlog_leaves_the_others_admitted(
    tmp_path: Path, receiver: RecordingReceiver
) -> None:
    async with running_node(tmp_path, ingest={"backlog_capacity": 300}) as api:
        await _tenant_with_endpoint(api, receiver, "hog", rate_limit_per_s=0.01)
        await _tenant_with_endpoint(api, receiver, "quiet")
        c = api.client
        codes: list[int] = []
        for _ in range(400):
            resp = await c.post("/v1/tenants/hog/events", json=EVENT)
            codes.append(resp.status_code)
            if resp.status_code != 202:
                _assert_backlog_full(resp)
        # 150 = half of 300; the one the bucket lets out at once may make room for one more
        assert 150 <= codes.count(202) <= 151 and codes.count(429) == 400 - codes.count(202)
        for _ in range(20):  # the other tenant is not refused (before: 503 for hours)
            assert (await c.post("/v1/tenants/quiet/events", json=EVENT)).status_code == 202

        async def quiet_delivered() -> bool:
            return len(receiver.of("quiet")) == 20

        await eventually(quiet_delivered)
        metrics = (await c.get("/metrics")).text
        assert 'regionsync_ingest_state{state="accepting"} 1.0' in metrics


async def test_inbound_source_over_its_tenant_share(
    tmp_path: Path, receiver: RecordingReceiver
) -> None:
    async with running_node(tmp_path, ingest={"backlog_capacity": 10}) as api:
        await _tenant_with_endpoint(api, receiver, "hog", rate_limit_per_s=0.01)
        await _tenant_with_endpoint(api, receiver, "quiet")
        src = await make_github_source(api, "hog")
        codes = []
        for i in range(8):
            resp = await api.client.post(f"/in/{src}", **github_request(b"{}", f"guid-{i}"))
            codes.append(resp.status_code)
        assert codes[:5] == [202] * 5 and codes[-1] == 429, codes
        _assert_backlog_full(resp)
        quiet = await make_github_source(api, "quiet")
        for i in range(4):  # under its own share, whatever its deliveries' pace
            resp = await api.client.post(f"/in/{quiet}", **github_request(b"{}", f"q-{i}"))
            assert resp.status_code == 202, resp.text


async def test_share_is_counted_again_after_a_restart(
    tmp_path: Path, receiver: RecordingReceiver
) -> None:
    ingest = {"backlog_capacity": 10}
    # hog's receiver fails every request: a restart's fresh rate-limit bucket lets one
    # delivery out at once, and had it succeeded the share would have room again
    receiver.fail_first["hog"] = 10**6
    async with running_node(tmp_path, ingest=ingest) as api:
        await _tenant_with_endpoint(api, receiver, "hog", rate_limit_per_s=0.01)
        await _tenant_with_endpoint(api, receiver, "quiet")
        while (await api.client.post("/v1/tenants/hog/events", json=EVENT)).status_code == 202:
            pass
    async with running_node(tmp_path, ingest=ingest) as api:  # the same SQLite store
        _assert_backlog_full(await api.client.post("/v1/tenants/hog/events", json=EVENT))
        assert api.node.queue.tenant_backlog["hog"] == 5
        assert (await api.client.post("/v1/tenants/quiet/events", json=EVENT)).status_code == 202


async def test_retry_of_a_finished_delivery_at_the_share(
    tmp_path: Path, receiver: RecordingReceiver
) -> None:
    async with running_node(tmp_path, ingest={"backlog_capacity": 10}) as api:
        c = api.client
        await _tenant_with_endpoint(api, receiver, "hog", event_types=["fast"])
        slow = {"url": receiver.url("hog"), "event_types": ["slow"], "rate_limit_per_s": 0.01}
        assert (await c.post("/v1/tenants/hog/endpoints", json=slow)).status_code == 201
        done = (await c.post("/v1/tenants/hog/events", json={"event_type": "fast",
                                                             "payload": {}})).json()  # fmt: skip

        async def delivered() -> str | None:
            event = (await c.get(f"/v1/tenants/hog/events/{done['id']}")).json()
            d = event["deliveries"][0]
            return d["id"] if d["status"] == "delivered" else None

        delivery = await eventually(delivered)
        while (
            await c.post("/v1/tenants/hog/events", json={"event_type": "slow", "payload": {}})
        ).status_code == 202:
            pass
        _assert_backlog_full(await c.post(f"/v1/tenants/hog/deliveries/{delivery}/retry"))
