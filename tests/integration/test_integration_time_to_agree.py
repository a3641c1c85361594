"""Regions agree again (equal registry hashes and version vectors in every region's
``/v1/cluster``) within 3 s of a restart or a heal, with at least 500 records to catch up,
on loopback (issue 12):

- SIGKILL of one region under write load in all three regions (writes continue through
  the outage and the restart, the restarted region's included), measured from the
  restarted node's ``/readyz``;
- SIGSTOP of one region for 20 s under the same load, then SIGCONT, measured from SIGCONT.

The nodes run with production replication defaults (``reconnect_max_s`` 10 s, not the
1 s ``demo.write_configs`` gives tests), since the stalls hid in those waits. The load
stops ``LOAD_AFTER_S`` after the restart or heal (equal version vectors need a quiet
moment); that time counts against the 3 s. This module has its own cluster."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from cluster_support import REGIONS, clusters, converged, eventually, expect

from regionsync import demo
from regionsync.demo import Cluster, start_cluster

pytestmark = [pytest.mark.asyncio(loop_scope="module")]

US, EU, AP = REGIONS
BACKLOG = 500  # records the others write while the victim is away, at least
AGREE_WITHIN_S = 3.0
OUTAGE_S = 15.0  # seconds without an ack from the killed region before it restarts
STOP_S = 20.0  # seconds a region stays SIGSTOPped
LOAD_AFTER_S = 0.5  # the load goes on this long after /readyz or SIGCONT
WRITERS_PER_REGION = 2
PRODUCTION = {"reconnect_max_s": 10.0}  # config.ReplicationSettings' default


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster() -> AsyncIterator[Cluster]:
    async with start_cluster(replication=PRODUCTION, retry_schedule_s=[0.2]) as running:
        yield running


class Load:
    """Writers publishing events to every region until ``stop()``; a write to a region
    that is down or frozen fails or times out and the writer goes on. ``ok`` counts the
    202s per region."""

    def __init__(self, client: httpx.AsyncClient, http: dict[str, str], tenant: str):
        self.client, self.http, self.tenant = client, http, tenant
        self.ok = dict.fromkeys(http, 0)
        self.tasks: list[asyncio.Task[None]] = []
        self.stopping = False

    async def _writer(self, region: str, w: int) -> None:
        url = f"{self.http[region]}/v1/tenants/{self.tenant}/events"
        i = 0
        while not self.stopping:
            i += 1
            body = {"event_type": "agree.load", "payload": {"w": w, "i": i}}
            try:
                resp = await self.client.post(url, json=body, timeout=2.0)
                if resp.status_code == 202:
                    self.ok[region] += 1
                    await asyncio.sleep(0.005)  # pace: about 100 writes/s per writer
                    continue
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.05)  # down, frozen or not ready: try again soon

    def start(self) -> None:
        self.tasks = [
            asyncio.create_task(self._writer(r, w))
            for r in self.http
            for w in range(WRITERS_PER_REGION)
        ]

    async def stop(self) -> None:
        self.stopping = True
        for t in self.tasks:
            t.cancel()
        for t in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t


async def _agree_after(client: httpx.AsyncClient, http: dict[str, str], load: Load, t0: float):
    """Stop the load ``LOAD_AFTER_S`` after ``t0``; seconds from ``t0`` to agreement."""
    await asyncio.sleep(max(t0 + LOAD_AFTER_S - time.monotonic(), 0))  # the load runs
    await load.stop()
    await eventually(lambda: converged(client, http), timeout_s=60, interval=0.02)
    return time.monotonic() - t0


async def _behind_at_least(client: httpx.AsyncClient, http: dict[str, str], victim: str) -> bool:
    live = {r: b for r, b in http.items() if r != victim}
    cs = await clusters(client, live)
    behind = [p["records_behind"] for c in cs.values() for p in c["peers"] if p["region"] == victim]
    return sum(behind) >= BACKLOG


async def _outage(client: httpx.AsyncClient, http: dict[str, str], victim: str) -> None:
    """Return once the victim has been gone ``OUTAGE_S``: as in a real outage, the peers'
    reconnect backoff towards it has grown. A link may never have had an ack from the
    victim (it connected after the victim already held everything, and the kill came
    before its first heartbeat), so the wait is timed from the kill; the peers' views
    must agree that the victim is gone."""
    await asyncio.sleep(OUTAGE_S)
    live = {r: b for r, b in http.items() if r != victim}

    seen: list[Any] = []

    async def gone() -> bool:
        cs = await clusters(client, live)
        seen[:] = [(p["connected"], p["seconds_since_ack"]) for c in cs.values()
                   for p in c["peers"] if p["region"] == victim]  # fmt: skip
        return all(not up and (w is None or w >= OUTAGE_S) for up, w in seen)

    try:
        await eventually(gone, timeout_s=30, interval=0.5)
    except AssertionError as e:
        raise AssertionError(
            f"{e}; links to {victim} (connected, seconds_since_ack): {seen}"
        ) from e


async def _revive(cluster: Cluster, client: httpx.AsyncClient) -> None:
    """Restart any region an earlier test left dead, so one failure does not cascade."""
    for region, proc in list(cluster.procs.items()):
        if proc.poll() is not None:
            cluster.procs[region] = demo.spawn(
                cluster.root, region, cluster.root / f"{region}.toml"
            )
            await demo.wait_ready(client, cluster.http[region], time.monotonic() + 30)


async def test_agree_within_3s_of_a_restart_under_write_load(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    await _revive(cluster, client)
    http = cluster.http
    tenant = "t-kill"
    await expect(client, "POST", f"{http[EU]}/v1/tenants", 201, json={"id": tenant, "name": "K"})
    await eventually(lambda: converged(client, http))
    load = Load(client, http, tenant)
    load.start()
    try:
        victim = cluster.procs[US]
        victim.kill()
        assert victim.wait(timeout=10) == -9

        await _outage(client, http, US)
        await eventually(lambda: _behind_at_least(client, http, US), timeout_s=30)
        cluster.procs[US] = demo.spawn(cluster.root, US, cluster.root / f"{US}.toml")
        await demo.wait_ready(client, http[US], time.monotonic() + 30)
        ready = time.monotonic()
        took = await _agree_after(client, http, load, ready)
    finally:
        await load.stop()
    print(f"SIGKILL: regions agreed {took:.2f}s after /readyz; writes {load.ok}")
    assert took < AGREE_WITHIN_S, f"regions agreed only {took:.2f}s after /readyz"


async def test_agree_within_3s_of_sigcont_under_write_load(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    await _revive(cluster, client)
    http = cluster.http
    tenant = "t-stop"
    await expect(client, "POST", f"{http[EU]}/v1/tenants", 201, json={"id": tenant, "name": "S"})
    await eventually(lambda: converged(client, http))
    load = Load(client, http, tenant)
    load.start()
    frozen = cluster.procs[AP]
    try:
        os.kill(frozen.pid, signal.SIGSTOP)
        try:
            stopped = time.monotonic()
            await eventually(lambda: _behind_at_least(client, http, AP), timeout_s=STOP_S + 30)
            await asyncio.sleep(max(stopped + STOP_S - time.monotonic(), 0))  # frozen STOP_S
        finally:
            os.kill(frozen.pid, signal.SIGCONT)
        resumed = time.monotonic()
        took = await _agree_after(client, http, load, resumed)
    finally:
        await load.stop()
    print(f"SIGSTOP {STOP_S:.0f}s: regions agreed {took:.2f}s after SIGCONT; writes {load.ok}")
    assert took < AGREE_WITHIN_S, f"regions agreed only {took:.2f}s after SIGCONT"


async def test_agree_within_3s_of_a_restart_with_a_backlog(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    """No load after the restart: 500 records written elsewhere while the region was down."""
    await _revive(cluster, client)
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

    await _outage(client, http, US)

    cluster.procs[US] = demo.spawn(cluster.root, US, cluster.root / f"{US}.toml")
    await demo.wait_ready(client, http[US], time.monotonic() + 30)
    ready = time.monotonic()
    await eventually(lambda: converged(client, http), timeout_s=30, interval=0.02)
    took = time.monotonic() - ready
    print(f"regions agreed {took:.2f}s after the restarted node was ready")
    assert took < AGREE_WITHIN_S, f"regions agreed only {took:.2f}s after /readyz"
