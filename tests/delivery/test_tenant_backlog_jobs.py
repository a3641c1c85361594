"""A recovery job keeps to its tenant's share of the region's backlog (issue 38, kind 3):
a replay of 30 skipped deliveries with ``ingest.backlog_capacity`` 20 (a tenant's share:
10) regenerates 10, waits while they are pending, and goes on as they are delivered.
Before, a job regenerated everything at once (any number of deliveries: the region's
backlog, and so every tenant's admission, had no bound)."""

from __future__ import annotations

import asyncio

from worker_nodes import CountingSender, stop, until, worker_node

from regionsync.core.model import DeliveryStatus


async def test_replay_waits_for_the_tenant_share() -> None:
    sender = CountingSender(held=True)
    node, net = worker_node(sender, ingest={"backlog_capacity": 20})
    await node.start()
    try:
        ops = node.registry_ops
        await ops.create_tenant("acme", "A")
        ep = await ops.create_endpoint(
            "acme", {"url": "https://hook.example/", "paused": True, "max_in_flight": 1}
        )
        for _ in range(30):  # skipped: the endpoint is paused
            await node.ingest.publish("acme", "push", b"{}", None)
        await ops.patch_endpoint("acme", ep.id, {"paused": False})
        job = await node.recovery.start_job("acme", ep.id, "replay-missing", 0)

        async def progress() -> int:
            return node.recovery.job("acme", job.id).done

        async def regenerated_ten() -> bool:
            return await progress() >= 10

        await until(regenerated_ten, "the first page")
        await asyncio.sleep(0.3)  # six of the job's waits (delivery.poll_interval_s 0.05)
        assert await progress() == 10  # before: 30, all at once
        assert node.queue.tenant_backlog == {"acme": 10}
        assert node.recovery.job("acme", job.id).status == "running"
        sender.gate.set()

        async def finished() -> bool:
            return node.recovery.job("acme", job.id).status == "succeeded"

        await until(finished, "the job to finish", tries=1000)
        assert await progress() == 30

        async def all_delivered() -> bool:
            counts = await node.store.counts("a")
            return counts[f"deliveries_{DeliveryStatus.DELIVERED.value}"] == 30

        await until(all_delivered, "every delivery", tries=1000)
        assert node.queue.tenant_backlog == {} and node.queue.backlog == 0
    finally:
        sender.gate.set()
        await stop(node, net)
