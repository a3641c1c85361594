"""After SIGKILL and restart of one region, with 500 records written elsewhere while it
was down, all regions agree again (equal registry hashes and version vectors in every
``/v1/cluster``) within 3 s of the restarted node's ``/readyz`` (issue 12). Before: 17-21 s,
spent in the peers' reconnect backoff towards it (up to ``reconnect_max_s``); now a peer
redials as soon as the restarted node dials in. This module has its own cluster."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from cluster_support import REGIONS, clusters, converged, eventually, expect

from regionsync import demo
from regionsync.demo import Cluster

pytestmark = [pytest.mark.asyncio(loop_scope="module")]

US, EU, AP = REGIONS
BACKLOG = 500  # records written while the victim is down
AGREE_WITHIN_S = 3.0
OUTAGE_S = 15.0  # seconds without an ack from the victim before it restarts


async def test_regions_agree_within_3s_of_a_restart(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    http = cluster.http
    tenant = "t-agree"
    await expect(client, "POST", f"{http[EU]}/v1/tenants", 201, json={"id": tenant, "name": "A"})
    await eventually(lambda: converged(client, http))

    victim = cluster.procs[US]
    victim.kill()
    assert victim.wait(timeout=10) == -9
    sem = asyncio.Semaphore(32)

    async def publish(base: str, i: int) -> None:
        async with sem:
            await expect(
                client, "POST", f"{base}/v1/tenants/{tenant}/events", 202,
                json={"event_type": "agree.test", "payload": {"i": i}},
            )  # fmt: skip

    await asyncio.gather(*(publish(http[(EU, AP)[i % 2]], i) for i in range(BACKLOG)))

    async def outage_long_enough() -> bool:
        # as in a real outage, the peers' reconnect backoff towards the victim has grown
        peers = [p for r in (EU, AP) for p in (await clusters(client, {r: http[r]}))[r]["peers"]]
        waits = [p["seconds_since_ack"] for p in peers if p["region"] == US]
        return all(w is not None and w >= OUTAGE_S for w in waits)

    await eventually(outage_long_enough, timeout_s=OUTAGE_S + 30, interval=0.5)

    cluster.procs[US] = demo.spawn(cluster.root, US, cluster.root / f"{US}.toml")
    await demo.wait_ready(client, http[US], time.monotonic() + 30)
    ready = time.monotonic()
    await eventually(lambda: converged(client, http), timeout_s=30, interval=0.02)
    took = time.monotonic() - ready
    print(f"regions agreed {took:.2f}s after the restarted node was ready")
    assert took < AGREE_WITHIN_S, f"regions agreed only {took:.2f}s after /readyz"
