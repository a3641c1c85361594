"""An operator's re-send goes out now, also to an endpoint this region sees failing (QA
of 2026-12-02: ``deliveries retry`` and ``recover`` on an endpoint that had turned
failing answered ``pending`` but the delivery waited for the endpoint's next health
probe, 58 s later in that run; the probe backoff doubles up to ``probe_max_s``, 24 h by
default). The re-send now counts as the probe."""

from __future__ import annotations

import pytest
from worker_nodes import FlakySender, stop, until, worker_node

from regionsync.core.model import DeliveryStatus


@pytest.mark.parametrize("how", ["retry", "recover"])
async def test_a_resend_to_a_failing_endpoint_is_sent_now(how: str) -> None:
    sender = FlakySender()
    node, net = worker_node(
        sender, retry_schedule_s=[0.01], failure_threshold=2, probe_initial_s=3600.0
    )
    await node.start()
    try:
        await node.registry_ops.create_tenant("t1", "One")
        ep = await node.registry_ops.create_endpoint(
            "t1", {"url": "https://example.com/hook", "event_types": ["a"]}
        )
        event, _ = await node.ingest.publish("t1", "a", b'{"n":1}', None)
        [d] = await node.store.deliveries_of_event(event.id)

        async def dead() -> bool:
            row = await node.store.get_delivery(d.id)
            return row is not None and row.status is DeliveryStatus.DEAD

        await until(dead, "the delivery to die")
        health = node.queue.health[ep.id]
        assert health.state == "failing" and not health.probe_due(node.clock.wall_ms())
        sender.up = True
        if how == "retry":
            await node.recovery.retry_delivery("t1", d.id)
        else:
            await node.recovery.start_job("t1", ep.id, "recover", 0)

        async def delivered() -> bool:
            row = await node.store.get_delivery(d.id)
            return row is not None and row.status is DeliveryStatus.DELIVERED

        await until(delivered, "the re-send")  # the next probe was an hour away
        assert node.queue.health[ep.id].state == "active"
    finally:
        await stop(node, net)
