"""The delivery worker keeps each tenant within its cap of attempts in flight (issue 14):
a tenant whose endpoints all hang holds at most its cap of the node's workers, and
another tenant's deliveries go out meanwhile. Without the cap, the same flood takes every
worker and the other tenant waits (the control run shows the test can fail)."""

from __future__ import annotations

import asyncio

import pytest
from worker_nodes import stop, worker_node

from regionsync.core.retry import AttemptOutcome, OutcomeKind
from regionsync.runtime.ports import OutboundRequest


class HangingSender:
    """Answers ``quiet.example`` at once; holds ``noisy.example`` until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.noisy_now = self.noisy_max = 0
        self.quiet_done = 0

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        if "noisy" in request.url:
            self.noisy_now += 1
            self.noisy_max = max(self.noisy_max, self.noisy_now)
            try:
                await self.release.wait()
            finally:
                self.noisy_now -= 1
        else:
            self.quiet_done += 1
        return AttemptOutcome(OutcomeKind.SUCCEEDED, status_code=204)


async def _run(noisy_cap: int | None) -> tuple[int, int, int]:
    """(noisy attempts in flight at most, quiet deliveries done while noisy hangs, noisy
    deliveries done after release) on a node with 4 workers."""
    sender = HangingSender()
    node, net = worker_node(sender, concurrency=4, tenant_max_in_flight=3)
    await node.start()
    try:
        ops = node.registry_ops
        await ops.create_tenant("noisy", "N", delivery_max_in_flight=noisy_cap)
        await ops.create_tenant("quiet", "Q")
        for i in range(4):  # four endpoints: lanes alone would let noisy take every worker
            await ops.create_endpoint("noisy", {"url": f"https://noisy.example/{i}"})
        await ops.create_endpoint("quiet", {"url": "https://quiet.example/"})
        for _ in range(12):
            await node.ingest.publish("noisy", "t", b"{}", None)
        for _ in range(20):  # noisy's deliveries are claimed first (they are due first)
            await asyncio.sleep(0.01)
        for _ in range(5):
            await node.ingest.publish("quiet", "t", b"{}", None)
        for _ in range(100):
            if sender.quiet_done == 5:
                break
            await asyncio.sleep(0.02)
        quiet, noisy_max = sender.quiet_done, sender.noisy_max
        sender.release.set()
        for _ in range(200):
            counts = await node.store.counts("a")
            if counts["deliveries_delivered"] == 12 * 4 + 5:
                break
            await asyncio.sleep(0.02)
        done = (await node.store.counts("a"))["deliveries_delivered"] - sender.quiet_done
        assert not node.delivery.tenants.inflight  # every slot given back
        return noisy_max, quiet, done
    finally:
        sender.release.set()
        await stop(node, net)


@pytest.mark.parametrize("cap, want_max", [(2, 2), (None, 3)])
async def test_a_hanging_tenant_holds_only_its_cap(cap: int | None, want_max: int) -> None:
    noisy_max, quiet, noisy_done = await _run(cap)
    assert noisy_max == want_max  # its override, else the node default (3 of 4 workers)
    assert quiet == 5  # the other tenant's deliveries went out while noisy hung
    assert noisy_done == 12 * 4  # and all of noisy's, once its receiver answered


async def test_without_a_cap_the_flood_takes_every_worker() -> None:
    noisy_max, quiet, _ = await _run(10_000)  # a cap above the workers: no cap at all
    assert noisy_max == 4 and quiet == 0
