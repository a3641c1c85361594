"""Per-tenant publish rate limits (issue 14): a token bucket per tenant and region, the
node default ``ingest.tenant_rate_per_s`` and a tenant's ``publish_rate_per_s``."""

from __future__ import annotations

from pathlib import Path

import pytest
from api_support import Api, assert_problem, running_node

EVENT = {"event_type": "a.b", "payload": {"n": 1}}


async def _tenant(api: Api, tid: str, **extra: object) -> dict:
    resp = await api.client.post("/v1/tenants", json={"id": tid, "name": tid, **extra})
    assert resp.status_code == 201, resp.text
    return resp.json()


async def test_tenant_override_limits_only_that_tenant(api: Api) -> None:
    assert (await _tenant(api, "slow", publish_rate_per_s=1))["publish_rate_per_s"] == 1
    assert (await _tenant(api, "free"))["publish_rate_per_s"] is None
    c = api.client
    assert (await c.post("/v1/tenants/slow/events", json=EVENT)).status_code == 202
    resp = await c.post("/v1/tenants/slow/events", json=EVENT)
    body = assert_problem(resp, 429)
    assert body["error"] == "tenant_rate_limited" and body["field"] == "tenant"
    assert int(resp.headers["retry-after"]) >= 1
    for _ in range(20):  # the default (unlimited) for every other tenant
        assert (await c.post("/v1/tenants/free/events", json=EVENT)).status_code == 202


async def test_node_default_rate(tmp_path: Path) -> None:
    async with running_node(tmp_path, ingest={"tenant_rate_per_s": 2}) as api:
        await _tenant(api, "t")
        codes = [(await api.client.post("/v1/tenants/t/events", json=EVENT)).status_code
                 for _ in range(4)]  # fmt: skip
        assert codes[:2] == [202, 202] and 429 in codes[2:]
        await _tenant(api, "fast", publish_rate_per_s=1000)
        for _ in range(10):
            assert (await api.client.post("/v1/tenants/fast/events", json=EVENT)).is_success


@pytest.mark.parametrize("rate", [0, -1, "5", True, 1e9])
async def test_bad_rate(api: Api, rate: object) -> None:
    resp = await api.client.post("/v1/tenants", json={"name": "x", "publish_rate_per_s": rate})
    assert_problem(resp, 422, "publish_rate_per_s")
