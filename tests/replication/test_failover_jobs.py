"""Region failover of recovery jobs: a job recorded in a region that dies before running
it is resumed by the region custody names, from its cursor, and finishes there."""

from __future__ import annotations

from memnodes import eventually, make_node

from regionsync.adapters.memory_transport import MemoryNetwork

FAST = {"failover_after_s": 1.0, "heartbeat_s": 0.2, "custody_interval_s": 0.05}


async def test_job_of_a_dead_region_is_resumed_by_its_successor(
    net: MemoryNetwork, started
) -> None:
    a, b = make_node(net, "a", ["b"], **FAST), make_node(net, "b", ["a"], **FAST)
    for n in (a, b):
        await n.start()
        started.append(n)
    await a.registry_ops.create_tenant("acme", "Acme")
    ep = await a.registry_ops.create_endpoint("acme", {"url": "https://h.example/", "paused": True})
    ids = [(await a.ingest.publish("acme", "x", b'{"i":%d}' % i, None))[0].id for i in range(5)]
    await a.registry_ops.patch_endpoint("acme", ep.id, {"paused": False})

    async def b_has_all() -> bool:
        skipped = await b.store.list_deliveries(ep.id, None, None, None, 100)
        return len(skipped) == 5 and b.catalog.registry.endpoint(ep.id).paused is False

    await eventually(b_has_all)
    # a records the job and dies before running any of it (its runner never gets a turn)
    a.recovery.runs_here = lambda owner, endpoint: False
    job = await a.recovery.start_job("acme", ep.id, "replay-missing", 0)
    await eventually(lambda: b.catalog.registry.job(job.id) is not None)
    await a.stop()
    started.remove(a)

    async def finished_at_b() -> bool:
        seen = b.catalog.registry.job(job.id)
        return seen is not None and seen["status"] == "succeeded"

    await eventually(finished_at_b, timeout_s=15)
    done = b.recovery.job("acme", job.id)
    assert done.done == 5 and done.region == "a"
    await eventually(lambda: len(b.sender.requests) >= 5, timeout_s=15)  # type: ignore[attr-defined]
    sent = {r.headers["webhook-id"] for r in b.sender.requests}  # type: ignore[attr-defined]
    assert set(ids) <= sent
