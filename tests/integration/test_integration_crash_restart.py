"""A region killed with SIGKILL right after acknowledging events, and restarted on the
same SQLite files, loses none of them: every acknowledged event is readable in all three
regions, every expected delivery reaches the receiver (duplicates allowed, losses not),
replication resumes in both directions, and all regions converge. This module has its
own cluster because it kills a node."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from cluster_support import REGIONS, RecordingReceiver, clusters, converged, eventually, expect

from regionsync import demo
from regionsync.demo import Cluster

pytestmark = [pytest.mark.asyncio(loop_scope="module")]

US, EU, AP = REGIONS
VICTIM = US
N_BEFORE_KILL = 40
N_WHILE_DOWN = 5  # per surviving region


async def publish(client: httpx.AsyncClient, base: str, tenant: str, tag: str, i: int) -> str:
    body = await expect(
        client, "POST", f"{base}/v1/tenants/{tenant}/events", 202,
        json={"event_type": "crash.test", "payload": {"tag": tag, "i": i}},
        headers={"Idempotency-Key": f"{tag}-{i}"},
    )  # fmt: skip
    return body["id"]


async def test_sigkilled_region_restarts_resumes_and_loses_no_acknowledged_event(
    cluster: Cluster, receiver: RecordingReceiver, client: httpx.AsyncClient
) -> None:
    http = cluster.http
    tenant = "t-crash"
    await expect(client, "POST", f"{http[EU]}/v1/tenants", 201,
                 json={"id": tenant, "name": "Crash"})  # fmt: skip

    async def tenant_everywhere() -> bool:
        codes = [(await client.get(f"{http[r]}/v1/tenants/{tenant}")).status_code for r in REGIONS]
        return codes == [200, 200, 200]

    await eventually(tenant_everywhere)
    ep = await expect(client, "POST", f"{http[AP]}/v1/tenants/{tenant}/endpoints", 201,
                      json={"url": receiver.url("crash")})  # fmt: skip
    receiver.secrets["crash"] = ep["secret"]

    async def endpoint_everywhere() -> bool:
        for r in REGIONS:
            resp = await client.get(f"{http[r]}/v1/tenants/{tenant}/endpoints/{ep['id']}")
            if resp.status_code != 200:
                return False
        return True

    await eventually(endpoint_everywhere)
    before = (await clusters(client, http))[VICTIM]

    # N acknowledged events, then SIGKILL at once: no graceful shutdown, deliveries and
    # replication of these events are (at least partly) still to do
    acked = await asyncio.gather(
        *(publish(client, http[VICTIM], tenant, "before", i) for i in range(N_BEFORE_KILL))
    )
    victim = cluster.procs[VICTIM]
    victim.kill()
    assert victim.wait(timeout=10) == -9
    assert len(set(acked)) == N_BEFORE_KILL

    # the other regions keep accepting while the victim is down
    while_down: list[str] = []
    for r in (EU, AP):
        for i in range(N_WHILE_DOWN):
            while_down.append(await publish(client, http[r], tenant, f"down-{r}", i))
    with pytest.raises(httpx.TransportError):
        await client.get(f"{http[VICTIM]}/healthz")

    # restart on the same config and data directory
    cluster.procs[VICTIM] = demo.spawn(cluster.root, VICTIM, cluster.root / f"{VICTIM}.toml")
    await demo.wait_ready(client, http[VICTIM], time.monotonic() + 30)
    after = (await clusters(client, http))[VICTIM]
    assert (after["actor"], after["incarnation"]) == (before["actor"], before["incarnation"])

    # a repeat of an acknowledged publish is recognised after the crash: same id
    assert await publish(client, http[VICTIM], tenant, "before", 0) == acked[0]

    every_event = [*acked, *while_down]

    async def readable_everywhere() -> list[tuple[str, str]]:
        missing = []
        for r in REGIONS:
            for event_id in every_event:
                resp = await client.get(f"{http[r]}/v1/tenants/{tenant}/events/{event_id}")
                if resp.status_code != 200:
                    missing.append((r, event_id))
        return missing

    async def all_readable() -> bool:
        return not await readable_everywhere()

    try:
        await eventually(all_readable, timeout_s=30, interval=0.2)
    except AssertionError:
        raise AssertionError(f"events missing: {await readable_everywhere()}") from None

    async def all_delivered() -> bool:
        return set(every_event) <= receiver.ids("crash")

    try:
        await eventually(all_delivered, timeout_s=30, interval=0.1)
    except AssertionError:
        lost = set(every_event) - receiver.ids("crash")
        raise AssertionError(f"{len(lost)} deliveries lost: {sorted(lost)[:5]}") from None
    assert receiver.failed == 0

    # every delivery reached its final state at its origin, and everything converged
    origin = {event_id: VICTIM for event_id in acked}
    origin.update({e: EU for e in while_down[:N_WHILE_DOWN]})
    origin.update({e: AP for e in while_down[N_WHILE_DOWN:]})

    async def settled() -> bool:
        for event_id, r in origin.items():
            ev = (await client.get(f"{http[r]}/v1/tenants/{tenant}/events/{event_id}")).json()
            assert ev["region"] == r
            if [d["status"] for d in ev["deliveries"]] != ["delivered"]:
                return False
        return True

    await eventually(settled, timeout_s=30, interval=0.2)
    cs = await eventually(lambda: converged(client, http), timeout_s=30, interval=0.2)
    vv = cs[VICTIM]["version_vector"]
    assert all(c["version_vector"] == vv for c in cs.values())
    assert len({c["registry_hash"] for c in cs.values()}) == 1
    assert len(vv) == 3  # records of all three origins everywhere
    for c in cs.values():
        assert c["counts"]["events"] >= len(every_event)
    # the usage counters converged too: every event counted once, none still in backlog
    # (each region records its moves at most every ingest.usage_record_ms; the victim's
    # from before the SIGKILL waited in its store)
    want = {"events_published": len(every_event), "deliveries_succeeded": len(every_event),
            "deliveries_failed": 0, "backlog": 0}  # fmt: skip

    async def counted() -> dict[str, dict[str, int]]:
        return {
            r: (await client.get(f"{http[r]}/v1/tenants/{tenant}")).json()["usage"] for r in REGIONS
        }

    async def exact() -> bool:
        return all(u == want for u in (await counted()).values())

    try:
        await eventually(exact, timeout_s=30, interval=0.2)
    except AssertionError:
        raise AssertionError(f"usage {await counted()}, want {want}") from None


async def test_idle_links_resume_promptly_after_a_peer_is_sigkilled_and_restarted(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    http = cluster.http
    tenant = "t-idle"
    await expect(client, "POST", f"{http[VICTIM]}/v1/tenants", 201,
                 json={"id": tenant, "name": "Idle"})  # fmt: skip
    # every link idle: all records everywhere and acknowledged
    await eventually(lambda: converged(client, http), timeout_s=30, interval=0.1)

    last: dict = {}

    async def links_idle() -> bool:
        cs = await clusters(client, http)
        last.update({r: (c["version_vector"], c["peers"]) for r, c in cs.items()})
        return all(p["connected"] and p["records_behind"] == 0
                   for c in cs.values() for p in c["peers"])  # fmt: skip

    try:
        await eventually(links_idle, timeout_s=30, interval=0.1)
    except AssertionError:
        raise AssertionError(f"links never idle: {last}") from None

    victim = cluster.procs[VICTIM]
    victim.kill()
    victim.wait(timeout=10)
    written = [await publish(client, http[r], tenant, f"idle-{r}", 0) for r in (EU, AP)]
    cluster.procs[VICTIM] = demo.spawn(cluster.root, VICTIM, cluster.root / f"{VICTIM}.toml")
    await demo.wait_ready(client, http[VICTIM], time.monotonic() + 30)

    async def victim_has_them() -> bool:
        for event_id in written:
            resp = await client.get(f"{http[VICTIM]}/v1/tenants/{tenant}/events/{event_id}")
            if resp.status_code != 200:
                return False
        return True

    # reconnect_max_s is 1 s and gRPC's own backoff at most 2 s: 8 s is plenty
    await eventually(victim_has_them, timeout_s=8, interval=0.1)
