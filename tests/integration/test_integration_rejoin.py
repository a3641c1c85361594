"""A region whose data directory is lost rejoins from its peers: it starts as a new
incarnation (new actor, so its old dots are never reused), receives the whole registry and
every event, and all regions converge. This module has its own cluster (it wipes a node)."""

from __future__ import annotations

import shutil
import time

import httpx
import pytest
from cluster_support import REGIONS, clusters, converged, eventually, expect

from regionsync import demo
from regionsync.demo import Cluster

pytestmark = [pytest.mark.asyncio(loop_scope="module")]

US, EU, AP = REGIONS


async def test_region_restarted_from_an_empty_data_dir_rejoins(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    http = cluster.http
    await expect(client, "POST", f"{http[AP]}/v1/tenants", 201, json={"id": "rj", "name": "R"})

    async def tenant_everywhere() -> bool:
        codes = [(await client.get(f"{http[r]}/v1/tenants/rj")).status_code for r in REGIONS]
        return codes == [200, 200, 200]

    await eventually(tenant_everywhere)
    events = []
    for i, region in enumerate(REGIONS * 5):
        body = await expect(client, "POST", f"{http[region]}/v1/tenants/rj/events", 202,
                            json={"event_type": "rejoin.test", "payload": {"i": i}})  # fmt: skip
        events.append(body["id"])
    before = await eventually(lambda: converged(client, http), timeout_s=30, interval=0.1)
    old_actor = before[AP]["actor"]

    victim = cluster.procs[AP]
    victim.kill()
    victim.wait(timeout=10)
    shutil.rmtree(cluster.root / AP)  # the disk is gone
    cluster.procs[AP] = demo.spawn(cluster.root, AP, cluster.root / f"{AP}.toml")
    await demo.wait_ready(client, http[AP], time.monotonic() + 30)
    # a change made by the new incarnation must not collide with the old one's dots
    await expect(client, "POST", f"{http[AP]}/v1/tenants", 201, json={"id": "rj2", "name": "R2"})

    after = await eventually(lambda: converged(client, http), timeout_s=30, interval=0.1)
    assert after[AP]["actor"] != old_actor
    for region in REGIONS:
        for event_id in events:
            resp = await client.get(f"{http[region]}/v1/tenants/rj/events/{event_id}")
            assert resp.status_code == 200, (region, event_id)
        assert (await client.get(f"{http[region]}/v1/tenants/rj2")).status_code == 200
    cs = await clusters(client, http)
    assert len({c["registry_hash"] for c in cs.values()}) == 1
