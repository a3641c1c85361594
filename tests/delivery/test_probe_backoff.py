"""A failing endpoint is probed again after the first backoff, however many attempts were
in flight when it turned failing (QA of 2026-12-02: the 16 attempts in flight failed
together and each doubled the backoff, so the next probe was 24 h away; in a failover
the adopting region sent ``max_in_flight`` attempts at once to an endpoint the
replicated view marked failing)."""

from __future__ import annotations

import asyncio

from worker_nodes import FlakySender, stop, until, worker_node

from regionsync.adapters.routes.common import delivery_json
from regionsync.core.envelope import rfc3339_ms


async def test_a_burst_of_failures_leaves_the_first_probe_backoff() -> None:
    sender = FlakySender(held=True)
    node, net = worker_node(
        sender, failure_threshold=5, probe_initial_s=0.3, probe_max_s=3600.0,
        retry_schedule_s=[0.01] * 8,
    )  # fmt: skip
    await node.start()
    try:
        await node.registry_ops.create_tenant("t1", "One")
        ep = await node.registry_ops.create_endpoint(
            "t1", {"url": "https://example.com/hook", "event_types": ["a"], "max_in_flight": 16}
        )
        for i in range(20):
            await node.ingest.publish("t1", "a", b'{"n":%d}' % i, None)

        async def all_in_flight() -> bool:
            return sender.inflight == 16

        await until(all_in_flight, "16 attempts in flight")
        sender.gate.set()  # all 16 fail together

        async def failing() -> bool:
            h = node.queue.health.get(ep.id)
            return h is not None and h.state == "failing" and sender.inflight == 0

        await until(failing, "the endpoint to turn failing")
        health = node.queue.health[ep.id]
        assert health.probe_s == 0.3  # was 3600: doubled by each failure
        # the API shows a pending delivery's next attempt no earlier than the probe
        pending = await node.store.due_deliveries("a", 2**62, 100, ())
        waiting = [
            delivery_json(node, d)["next_attempt_at"]
            for d in pending
            if (d.next_attempt_at_ms or 0) <= health.next_probe_ms  # type: ignore[operator]
        ]
        assert waiting and set(waiting) == {rfc3339_ms(health.next_probe_ms)}  # type: ignore[arg-type]
        sender.up = True

        async def delivered() -> bool:
            counts = await node.store.counts("a")
            return counts["deliveries_delivered"] == 20

        await until(delivered, "every delivery after the first probe")
    finally:
        await stop(node, net)


async def test_a_region_without_its_own_health_view_probes_a_failing_endpoint() -> None:
    """A failover custodian has no health view of its own of an endpoint the replicated
    state marks failing: it starts one probe at a time, not ``max_in_flight`` attempts."""
    sender = FlakySender(held=True)
    node, net = worker_node(sender, probe_initial_s=0.3, retry_schedule_s=[0.01] * 8)
    await node.start()
    try:
        await node.registry_ops.create_tenant("t1", "One")
        ep = await node.registry_ops.create_endpoint(
            "t1", {"url": "https://example.com/hook", "event_types": ["a"], "max_in_flight": 16}
        )
        async with node.writer.local_lock():  # as another region's attempts recorded it
            stamp = node.writer.stamp()
            deltas = node.catalog.registry.patch_endpoint(
                ep.id, {"failing_since": stamp.wall_ms}, [], [], stamp.wall_ms,
                node.writer.actor, stamp,
            )  # fmt: skip
            durable = node.writer.commit_local("registry", stamp, deltas)
        await durable
        assert ep.id not in node.queue.health
        for i in range(5):
            await node.ingest.publish("t1", "a", b'{"n":%d}' % i, None)

        async def one_sent() -> bool:
            return sender.sent >= 1

        await until(one_sent, "a probe")
        await asyncio.sleep(0.2)
        assert sender.peak == 1 and sender.sent == 1  # one probe, the rest wait for it
        sender.up = True
        sender.gate.set()

        async def delivered() -> bool:
            return (await node.store.counts("a"))["deliveries_delivered"] == 5

        await until(delivered, "the deliveries once the probe succeeded")
        assert node.queue.health[ep.id].state == "active"
    finally:
        await stop(node, net)
