"""A region frozen (SIGSTOP) while the others write more than their log may keep comes
back (SIGCONT) behind their truncation point and converges through anti-entropy."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from cluster_support import REGIONS, clusters, converged, eventually, expect

from regionsync.demo import Cluster, start_cluster

pytestmark = [pytest.mark.asyncio(loop_scope="module")]

US, EU, AP = REGIONS


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def small_log_cluster() -> AsyncIterator[Cluster]:
    replication = {
        "max_log_records": 60,  # the frozen peer cannot hold the log back for long
        "truncate_interval_s": 0.2,
        "call_timeout_s": 2.0,
        "reconnect_max_s": 0.5,
    }
    async with start_cluster(replication=replication, retry_schedule_s=[0.2]) as running:
        yield running


async def test_frozen_region_converges_through_anti_entropy(
    small_log_cluster: Cluster, client: httpx.AsyncClient
) -> None:
    cluster, http = small_log_cluster, small_log_cluster.http
    await expect(client, "POST", f"{http[US]}/v1/tenants", 201, json={"id": "fz", "name": "F"})
    await eventually(lambda: converged(client, http), timeout_s=30, interval=0.1)
    frozen = cluster.procs[AP]
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        events = []
        for i in range(200):
            region = (US, EU)[i % 2]
            payload = {"event_type": "frozen.test", "payload": {"i": i}}
            url = f"{http[region]}/v1/tenants/fz/events"
            body = await expect(client, "POST", url, 202, json=payload)
            events.append(body["id"])
        live = {US: http[US], EU: http[EU]}

        async def truncated_past_the_frozen_peer() -> bool:
            cs = await clusters(client, live)
            for c in cs.values():
                ap = next(p for p in c["peers"] if p["region"] == AP)
                floor = c["log_floor"].get(c["actor"], 0)
                acked = c["version_vector"].get(c["actor"], 0) - ap["records_behind"]
                if floor <= max(acked, 0):  # not yet truncated past what AP holds
                    return False
            return True

        await eventually(truncated_past_the_frozen_peer, timeout_s=30, interval=0.1)
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    await eventually(lambda: converged(client, http), timeout_s=60, interval=0.2)
    for event_id in events[::20] + events[-1:]:
        resp = await client.get(f"{http[AP]}/v1/tenants/fz/events/{event_id}")
        assert resp.status_code == 200, event_id
